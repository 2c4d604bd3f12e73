//! What the checks compare against: the plan's figures at the run's
//! scale, placed on the run's clock (`rehearse run`, and `rehearse stage`
//! for a run whose load comes later from its shards).

use assertions::Expectations;
use report::Plan;

use crate::scenario::Scenario;
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
    scenario: &Scenario,
    rehearsal: &Rehearsal,
    plan: &Plan,
    start_us: u64,
    load: Option<&LoadResult>,
) -> Expectations {
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
        memory_ceiling_bytes: scenario
            .gateway
            .memory_ceiling
            .map(|b| scenario.gateway.memory_at(b, rehearsal.scale)),
        send_lag_bound_ms: load_plan.send_lag_bound().as_secs_f64() * 1000.0,
        send_lag_p99_ms,
    }
}
