//! The plan's word on the callers as a population (`[load.clients]`):
//! which model the run uses, the most connections it opens, and the
//! connections the target sees at the peak.
//!
//! The callers waiting at once at the peak are the fluid model's: the
//! calls in flight (λ·S) plus the backlog of a gateway that never sheds,
//! and never more than the arrivals of one patience (λ·D: a caller holds
//! a connection at most that long, however slow the target). Per caller,
//! the target sees that many connections, up to the load generator's
//! bound; with a pool, at most the pool, and the callers past it wait in
//! the client (their `client_wait_us`).
//!
//! The same figures give the load generator its bound in the per-caller
//! model: the longest a call is expected to take at the target in any
//! phase (the callers at once ÷ the rate, by Little's law), which
//! [`expected_time`] fills into the load when the scenario leaves
//! `[load.clients] time_in_system` out.

use wire::{ClientsPlan, Figures, Scale};

/// The clients' plan for `load` (full scale) run at `scale`, its peak
/// read from the rehearsal's figures; `patience_s` the callers' mean
/// patience at full scale.
pub(crate) fn clients(
    load: &loadgen::LoadPlan,
    scale: Scale,
    rehearsal: &Figures,
    patience_s: f64,
) -> ClientsPlan {
    let patience_s = scale.secs(patience_s);
    let load = load
        .clone()
        .scaled(scale)
        .expecting(expected_time(rehearsal, patience_s));
    let c = load.clients();
    let peak_callers = rehearsal
        .phases
        .iter()
        .map(|g| {
            let per_s = g.offered_per_min / 60.0;
            (g.in_flight + g.backlog_at_end).min(per_s * patience_s)
        })
        .fold(0.0, f64::max);
    let limit = load.connection_bound(1) as u64;
    ClientsPlan {
        model: if c.pool.is_some() {
            "pool"
        } else {
            "per caller"
        }
        .into(),
        limit,
        connect_rate_per_s: c.connect_rate_per_s,
        time_in_system_s: load.bounding_time_in_system().map(|d| d.as_secs_f64()),
        peak_callers,
        peak_connections: peak_callers.min(limit as f64),
    }
}

/// The longest a call is expected to take at the target in any phase of
/// `figures` (rehearsal scale), its queue included: the callers waiting
/// at once ÷ the arrivals a second, never past `patience_s` (a caller
/// gives up then). Zero for a plan with no arrivals.
pub(crate) fn expected_time(figures: &Figures, patience_s: f64) -> std::time::Duration {
    let longest = figures
        .phases
        .iter()
        .filter(|g| g.offered_per_min > 0.0)
        .map(|g| (g.in_flight + g.backlog_at_end) / (g.offered_per_min / 60.0))
        .fold(0.0, f64::max)
        .min(patience_s);
    std::time::Duration::try_from_secs_f64(longest).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(table: &str) -> ClientsPlan {
        let text = format!(
            "[load]\npatience = {{ fixed = \"10s\" }}\n[[load.phases]]\nduration = \"1m\"\nrate = 100\n{table}"
        );
        let load = loadgen::LoadPlan::from_scenario_str(&text, "s.toml", std::path::Path::new("."))
            .unwrap();
        // 100/s for a minute, 0.5 s a call: 50 in flight, no backlog.
        let figures = Figures {
            phases: vec![wire::Segment {
                offered_per_min: 6_000.0,
                in_flight: 50.0,
                ..wire::Segment::default()
            }],
            ..Figures::default()
        };
        clients(&load, Scale::ONE, &figures, 10.0)
    }

    #[test]
    fn per_caller_the_target_sees_the_callers_and_a_pool_caps_them() {
        let p = plan("");
        // 100/s x 0.5 s expected x 4 + 256, below 100/s x 10 s x 1.25 + 256.
        assert_eq!((p.model.as_str(), p.limit), ("per caller", 456));
        assert_eq!(p.time_in_system_s, Some(0.5));
        // A backlog past the patience: the patience bounds them.
        let text = "[load]\npatience = { fixed = \"10s\" }\n[[load.phases]]\nduration = \"1m\"\nrate = 100\n";
        let load = loadgen::LoadPlan::from_scenario_str(text, "s.toml", std::path::Path::new("."))
            .unwrap();
        let figures = Figures {
            phases: vec![wire::Segment {
                offered_per_min: 6_000.0,
                in_flight: 50.0,
                backlog_at_end: 5_000.0,
                ..wire::Segment::default()
            }],
            ..Figures::default()
        };
        let q = clients(&load, Scale::ONE, &figures, 10.0);
        assert_eq!((q.limit, q.time_in_system_s), (1_506, None));
        assert_eq!((p.peak_callers, p.peak_connections), (50.0, 50.0));
        let p = plan("[load.clients]\npool = 20\nconnect_rate = 5\n");
        assert_eq!((p.model.as_str(), p.limit), ("pool", 20));
        assert_eq!((p.peak_callers, p.peak_connections), (50.0, 20.0));
        assert_eq!(p.connect_rate_per_s, Some(5.0));
    }
}
