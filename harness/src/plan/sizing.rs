//! The plan's arithmetic turned into the gateway's knobs and the event's
//! cost: which phases overload (by throughput, by latency, by memory), a
//! concurrency limit below where the provider's curve bends, queue bounds
//! from drain × wait budget, the share refused and answered late, the
//! tokens wasted, and the error budget the event burns.
//!
//! Overload comes from latency as well as throughput: by Little's law a
//! gateway that never sheds holds L = λ·S calls at once however far under
//! capacity the provider is. When S is longer than the callers' patience D
//! no call can finish in time (the queue bound Q* = μ·(D − S) is 0: nothing
//! should wait, and the first refusal should come as soon as the limit is
//! reached); when L requests outgrow the gateway's memory it dies, about
//! (memory ÷ bytes per request) ÷ λ seconds into such a phase.

use wire::{ErrorBudget, Knobs, Segment, Spend};

use crate::scenario::{GatewayKind, Scenario};

/// The recommended limit's share of a knee.
const BELOW_KNEE: f64 = 0.8;

/// How many requests the gateway's memory holds (its limit, else its
/// ceiling, ÷ bytes per request); `None` without either.
pub(crate) fn memory_requests(s: &Scenario, bytes_per_request: f64) -> Option<f64> {
    let g = &s.gateway;
    let bytes = g.memory_limit.or(g.memory_ceiling)? as f64;
    (bytes_per_request > 0.0).then(|| bytes / bytes_per_request)
}

/// Returns true if and only if segment `g` overloads a gateway: more
/// arrivals than capacity, calls slower than the patience `d_s`, or more
/// calls in flight than `memory` requests.
pub(crate) fn overloaded(g: &Segment, d_s: f64, memory: Option<f64>) -> bool {
    let throughput = g
        .capacity_per_min
        .is_some_and(|mu| g.offered_per_min > mu * 1.0001);
    let latency = g.offered_per_min > 0.0 && g.service_s >= d_s;
    let held = memory.is_some_and(|m| g.in_flight > m);
    throughput || latency || held
}

/// The share of the overloaded segments' arrivals a gateway that sheds the
/// excess refuses: those over capacity, and all of a segment whose calls
/// cannot finish inside the patience `d_s`.
pub(crate) fn refused_share(overloaded: &[&Segment], d_s: f64) -> Option<f64> {
    let (mut arrivals, mut excess) = (0.0, 0.0);
    for g in overloaded {
        let n = g.offered_per_min / 60.0 * g.duration_s;
        arrivals += n;
        excess += if g.service_s >= d_s {
            n
        } else {
            g.capacity_per_min.map_or(0.0, |mu| {
                (g.offered_per_min - mu).max(0.0) / 60.0 * g.duration_s
            })
        };
    }
    (arrivals > 0.0).then(|| excess / arrivals)
}

/// `n` as a share of every arrival of `segments`.
pub(crate) fn share(n: f64, segments: &[Segment]) -> f64 {
    let arrivals: f64 = segments
        .iter()
        .map(|g| g.offered_per_min / 60.0 * g.duration_s)
        .sum();
    if arrivals > 0.0 {
        n / arrivals
    } else {
        0.0
    }
}

/// Seconds into the first segment whose calls in flight outgrow `memory`
/// requests until a gateway that never sheds holds that many (they pile
/// up at λ while no call of the segment has finished).
pub(crate) fn memory_full_after(segments: &[Segment], memory: Option<f64>) -> Option<f64> {
    let m = memory?;
    let g = segments.iter().find(|g| g.in_flight > m)?;
    let lambda = g.offered_per_min / 60.0;
    (lambda > 0.0).then(|| m / lambda)
}

/// The knobs the arithmetic suggests for the gateway (full scale).
pub(crate) fn knobs(s: &Scenario, segments: &[Segment], d_s: f64) -> Knobs {
    let latency = &s.provider().latency;
    let (limit, limit_basis) = match (latency.knee, s.provider().concurrency.ceiling) {
        (Some(k), _) => (
            Some((f64::from(k) * BELOW_KNEE).floor().max(1.0)),
            format!("80% of the provider's knee of {k} calls in service"),
        ),
        (None, Some(c)) => (
            Some(f64::from(c)),
            format!("the provider's ceiling of {c} calls in service"),
        ),
        (None, None) => (
            None,
            "the provider states no knee or ceiling: measure one with `rehearse calibrate`"
                .to_string(),
        ),
    };
    let service = |f: fn(f64, f64) -> f64, start: f64| {
        segments
            .iter()
            .map(|g| g.service_s)
            .filter(|s| *s > 0.0)
            .fold(start, f)
    };
    let (healthy_s, slowest_s) = (service(f64::min, f64::INFINITY), service(f64::max, 0.0));
    let (wait_budget_s, wait_budget_basis) = wait_budget(s, d_s, healthy_s);
    let bound = |svc: f64| {
        limit
            .filter(|_| svc.is_finite() && svc > 0.0)
            .map(|l| (l / svc * wait_budget_s).floor())
    };
    Knobs {
        concurrency_limit: limit,
        limit_basis,
        wait_budget_s,
        wait_budget_basis,
        queue_healthy: bound(healthy_s),
        queue_slowest: bound(slowest_s),
        queue_tokens: s
            .provider()
            .quota
            .tokens_per_minute
            .map(|tpm| (tpm as f64 / 60.0 * wait_budget_s).floor()),
    }
}

/// The wait budget the queue bounds are for: the reference gateway's own
/// when it has one, else the patience less a healthy call.
fn wait_budget(s: &Scenario, d_s: f64, healthy_s: f64) -> (f64, String) {
    if let GatewayKind::Reference(g) = &s.gateway.kind {
        let own = match g.mode {
            reference_gateway::Mode::Bounded => Some(g.bounded.wait_budget),
            reference_gateway::Mode::Aimd => Some(g.aimd.wait_budget),
            _ => None,
        };
        if let Some(w) = own {
            return (w.as_secs_f64(), "the gateway's wait_budget".to_string());
        }
    }
    let healthy = if healthy_s.is_finite() {
        healthy_s
    } else {
        0.0
    };
    (
        (d_s - healthy).max(0.0),
        "the callers' patience less a healthy call".to_string(),
    )
}

/// The error budget the event burns, when the scenario gives an SLO:
/// `misses` (requests later than its latency) against what its objective
/// allows over its window at the window's mean rate (`window_rate`, else
/// the first phase's).
pub(crate) fn error_budget(s: &Scenario, segments: &[Segment], misses: f64) -> Option<ErrorBudget> {
    let slo = s.meta.slo.as_ref()?;
    let rate = slo
        .window_rate
        .or_else(|| segments.first().map(|g| g.offered_per_min / 60.0))?;
    let window_s = slo.window.as_secs_f64();
    let window_requests = rate * window_s;
    let allowed = (1.0 - slo.objective) * window_requests;
    Some(ErrorBudget {
        latency_s: slo.latency.as_secs_f64(),
        objective: slo.objective,
        window_s,
        window_requests,
        allowed,
        misses,
        burned_share: if allowed > 0.0 { misses / allowed } else { 0.0 },
    })
}

/// What the run sends at its own scale (`segments` at that scale): the
/// requests and the tokens each is sent with (`per_request`: its prompt at
/// 4 characters a token, padding included, plus `max_tokens`), per phase
/// and in all, and in all times `max_attempts` when retries are on.
pub(crate) fn spend(s: &Scenario, segments: &[Segment], per_request: f64) -> Spend {
    let phases: Vec<(String, f64, f64)> = segments
        .iter()
        .map(|g| {
            let n = g.offered_per_min / 60.0 * g.duration_s;
            (g.name.clone(), n, n * per_request)
        })
        .collect();
    let requests: f64 = phases.iter().map(|p| p.1).sum();
    let tokens = requests * per_request;
    let max_attempts = s.load_plan.max_attempts();
    Spend {
        phases,
        tokens_per_request: per_request,
        requests,
        tokens,
        max_attempts,
        tokens_with_retries: tokens * f64::from(max_attempts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn scenario(extra: &str) -> Scenario {
        let text = format!(
            "[scenario]\nname = \"t\"\n{extra}\n[load]\npatience = {{ fixed = \"15s\" }}\n[[load.phases]]\nduration = \"3m\"\nrate = 20\n[load.request]\nprompt_tokens = {{ fixed = 200 }}\nmax_tokens = {{ fixed = 20 }}\n"
        );
        Scenario::from_str(&text, "t.toml", Path::new("t.toml")).unwrap()
    }

    fn segment(per_min: f64, capacity: Option<f64>, service_s: f64, secs: f64) -> Segment {
        Segment {
            offered_per_min: per_min,
            capacity_per_min: capacity,
            service_s,
            duration_s: secs,
            in_flight: per_min / 60.0 * service_s,
            ..Default::default()
        }
    }

    #[test]
    fn latency_and_memory_overload_as_throughput_does() {
        // 20/s of 30 s calls: 600 in flight, none in time for 15 s callers.
        let slow = segment(1_200.0, None, 30.0, 60.0);
        assert!(overloaded(&slow, 15.0, None));
        let quick = segment(1_200.0, None, 1.0, 60.0);
        assert!(!overloaded(&quick, 15.0, None));
        // 20 in flight against memory for 10 requests.
        assert!(overloaded(&quick, 15.0, Some(10.0)));
        assert!(!overloaded(&quick, 15.0, Some(400.0)));
        // The write-up's "dies about 20 seconds into the slowdown".
        let after = memory_full_after(&[quick.clone(), slow.clone()], Some(400.0));
        assert_eq!(after, Some(20.0));
        assert_eq!(refused_share(&[&slow], 15.0), Some(1.0));
        let over = segment(2_400.0, Some(1_600.0), 3.7, 720.0);
        let share = refused_share(&[&over], 30.0).unwrap();
        assert!((share - 1.0 / 3.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn knobs_come_from_the_knee_else_the_ceiling() {
        let knee = scenario("[provider.latency]\nttft = { fixed = \"50ms\" }\nknee = 32\n[provider.quota]\ntokens_per_minute = 600000\n[gateway.reference]\nmode = \"bounded\"\nbounded = { concurrency = 8, queue = 8, wait_budget = \"2s\" }");
        let segments = [
            segment(1_200.0, None, 0.05, 60.0),
            segment(1_200.0, None, 0.35, 60.0),
        ];
        let k = knobs(&knee, &segments, 15.0);
        assert_eq!(k.concurrency_limit, Some(25.0));
        assert_eq!(k.wait_budget_s, 2.0);
        // 25 calls of 50 ms drain 500/s: 1,000 in 2 s; of 350 ms, 142.
        assert_eq!(k.queue_healthy, Some(1_000.0));
        assert_eq!(k.queue_slowest, Some(142.0));
        assert_eq!(k.queue_tokens, Some(20_000.0));
        let ceiling =
            scenario("[provider.concurrency]\nceiling = 12\n[gateway.reference]\nmode = \"naive\"");
        let k = knobs(&ceiling, &segments, 15.0);
        assert_eq!(k.concurrency_limit, Some(12.0));
        assert_eq!(k.wait_budget_s, 14.95);
        let none = scenario("[gateway.reference]\nmode = \"naive\"");
        assert_eq!(knobs(&none, &segments, 15.0).queue_healthy, None);
    }

    #[test]
    fn the_error_budget_the_event_burns() {
        // The write-up: 40/s over 28 days, 99%: about 970,000 allowed;
        // 125,000 misses burn about 13%.
        let s = scenario("slo = { latency = \"3s\", objective = 0.99, window = \"28d\", window_rate = 40 }\n[gateway.reference]\nmode = \"naive\"");
        let b = error_budget(&s, &[], 125_000.0).unwrap();
        assert!((b.allowed - 967_680.0).abs() < 1.0, "{}", b.allowed);
        assert!((b.burned_share - 0.129).abs() < 0.001, "{}", b.burned_share);
        let err = Scenario::from_str(
            "[scenario]\nname = \"t\"\nslo = { latency = \"3s\", objective = 99, window = \"28d\" }\n[gateway.reference]\nmode = \"naive\"\n[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n",
            "t.toml",
            Path::new("t.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("t.toml:3:") && err.contains("scenario.slo.objective"),
            "{err}"
        );
    }
}
