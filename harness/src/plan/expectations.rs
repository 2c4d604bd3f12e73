//! What the checks compare against: the plan's figures at the run's
//! scale, placed on the run's clock (`rehearse run`, and `rehearse stage`
//! for a run whose load comes later from its shards).

use wire::Expectations;

use crate::Rehearsal;

/// What the checks need of the load: when the schedule started and how
/// well it was kept (the worst shard's send lag p99).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadResult {
    pub(crate) start_us: u64,
    pub(crate) send_lag_p99_us: u64,
}

/// The expectations of a run from its parts; `load`: how the load went,
/// unknown (an infinite send lag) until it has run.
pub(crate) fn expectations_of(
    rehearsal: &Rehearsal,
    start_us: u64,
    load: Option<&LoadResult>,
) -> Expectations {
    let plan = &rehearsal.plan;
    let at = |secs: f64| start_us + (secs * 1e6) as u64;
    let o = plan.overload.as_ref();
    let send_lag_p99_ms = load.map_or(f64::INFINITY, |r| r.send_lag_p99_us as f64 / 1000.0);
    let load_plan = &rehearsal.load;
    Expectations {
        start_us,
        load_end_us: at(load_plan.schedule_length().as_secs_f64()),
        overload: o.map(|o| (at(o.from_s), at(o.until_s))),
        capacity_per_s: o.map_or(0.0, |o| o.capacity_per_s),
        patience_s: rehearsal.scale.secs(plan.patience_s),
        service_s: o.map_or(0.0, |o| o.service_s),
        queue_bound: o.map_or(0.0, |o| o.queue_bound),
        in_flight_at_provider: o.map_or(0.0, |o| o.capacity_per_s * o.service_s),
        gateway_wait_s: o.map_or(0.0, |_| longest_wait_s(&plan.rehearsal)),
        knee: lowest_knee(rehearsal.provider()),
        drain_baseline: plan.drain_baseline,
        after_trouble: rehearsal
            .after_trouble
            .map(|(end_s, capacity_per_s)| wire::AfterTrouble {
                from_us: at(end_s),
                capacity_per_s,
            }),
        memory_ceiling_bytes: rehearsal.gateway.memory_ceiling,
        // Known once the run has waited after its load (`crate::run`).
        memory_settle: None,
        send_lag_bound_ms: load_plan.send_lag_bound().as_secs_f64() * 1000.0,
        send_lag_p99_ms,
        stopped_us: None,
    }
}

/// The provider's load-curve knee at the rehearsal's scale: the lowest its
/// timeline sets, when it names one.
fn lowest_knee(p: &fake_provider::ProviderConfig) -> Option<f64> {
    let phases = p
        .timeline
        .iter()
        .filter_map(|t| t.latency.as_ref().and_then(|l| l.knee));
    p.latency
        .knee
        .into_iter()
        .chain(phases)
        .min()
        .map(f64::from)
}

/// The longest a request may wait in a gateway that never sheds, in FIFO
/// order: the peak backlog drained at the lowest capacity of the run
/// (seconds, at the figures' scale); 0 without a backlog.
fn longest_wait_s(figures: &wire::Figures) -> f64 {
    let lowest_per_s = figures
        .phases
        .iter()
        .filter_map(|s| s.capacity_per_min)
        .filter(|c| *c > 0.0)
        .fold(f64::INFINITY, f64::min)
        / 60.0;
    if figures.peak_backlog > 0.0 && lowest_per_s.is_finite() {
        figures.peak_backlog / lowest_per_s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_wait_is_the_peak_backlog_at_the_lowest_capacity() {
        let phase = |per_min: Option<f64>| wire::Segment {
            capacity_per_min: per_min,
            ..Default::default()
        };
        let figures = wire::Figures {
            phases: vec![phase(Some(2_640.0)), phase(Some(1_600.0)), phase(None)],
            peak_backlog: 9_600.0,
            ..Default::default()
        };
        // 9,600 at 1,600 a minute: six minutes.
        assert!((longest_wait_s(&figures) - 360.0).abs() < 1e-9);
        let calm = wire::Figures {
            phases: vec![phase(Some(2_640.0))],
            ..Default::default()
        };
        assert_eq!(longest_wait_s(&calm), 0.0);
    }
}
