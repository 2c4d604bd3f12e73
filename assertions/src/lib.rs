//! The pre-event checklist: pure functions from records to verdicts.
//!
//! `rehearse` drives a gateway with open-loop traffic while playing its
//! LLM provider, and both sides write records (defined in the `wire`
//! crate): one [`wire::ClientRecord`] per client attempt (`client.jsonl`),
//! one [`wire::ProviderRecord`] per provider call (`provider.jsonl`), and
//! [`wire::RssSample`]s of the gateway's memory. This crate reads those
//! records, with the scenario's predictions ([`Expectations`]) and its
//! `[checklist]` table ([`Thresholds`]), and returns a [`Judgement`]: one
//! [`Verdict`] per check, the per-second [`Timeline`] and the run's
//! [`Summary`]. It has no I/O, no clock and no async runtime: records in,
//! verdicts out, so every check is tested with hand-made records and a
//! saved run can be judged again.
//!
//! The rooms:
//!
//! - `expect`: [`Expectations`] and [`Thresholds`];
//! - `timeline`: the join by request id and the derived measurements
//!   (gateway depth, backlog, drain time, stale dispatch), the per-second
//!   [`Timeline`] and the [`Summary`];
//! - `checks`: the nine checks, in [`CHECKS`] order;
//! - `verdict`: [`Verdict`], [`Status`] and the wording of the sentences a
//!   person reads (numbers as `wire::number` prints them).

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod checks;
mod expect;
#[cfg(test)]
mod stories;
mod timeline;
mod verdict;

use serde::Serialize;
use wire::{ClientRecord, ProviderRecord, RssSample};

pub use expect::{
    DrainThreshold, Expectations, GoodputThreshold, HarnessValidThreshold, MemoryCeilingThreshold,
    NoSilentLossThreshold, RetryAfterThreshold, ServedLatencyThreshold, ShedOnsetThreshold,
    StaleDispatchThreshold, Thresholds,
};
pub use timeline::{
    Counts, FirstShed, GatewayPeaks, Harness, Latencies, Percentiles, ProviderCounts, Second,
    Summary, Timeline,
};
pub use verdict::{Status, Verdict};

use checks::Evidence;
use timeline::{DrainOutcome, Joined};

/// The ids of the checks, in the order [`judge`] returns their verdicts.
pub const CHECKS: [&str; 9] = [
    "shed_onset",
    "retry_after",
    "memory_ceiling",
    "drain",
    "stale_dispatch",
    "served_latency",
    "goodput",
    "no_silent_loss",
    "harness_valid",
];

/// A judged run: the checklist, the overall verdict, and the measurements
/// behind them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// One verdict per check, in [`CHECKS`] order.
    pub verdicts: Vec<Verdict>,
    /// `invalid` if the harness was invalid, else `fail` if any check
    /// failed, else `pass`.
    pub overall: Status,
    /// The run second by second.
    pub timeline: Timeline,
    /// The run's numbers, in `report.json`'s shape.
    pub summary: Summary,
    /// The gateway's first shed, if it shed.
    pub first_shed: Option<FirstShed>,
}

impl Judgement {
    /// The verdict of the check `id` (one of [`CHECKS`]), if there is one.
    ///
    /// ```
    /// # let expect = assertions::Expectations {
    /// #     start_us: 0, load_end_us: 0, overload: None, capacity_per_s: 1.0,
    /// #     patience_s: 2.0, service_s: 1.0, queue_bound: 1.0,
    /// #     in_flight_at_provider: 1.0, memory_ceiling_bytes: None,
    /// #     send_lag_bound_ms: 1.0, send_lag_p99_ms: 0.0,
    /// # };
    /// let j = assertions::judge(&[], &[], &[], &expect, &Default::default());
    /// let v = j.verdict("harness_valid").unwrap();
    /// assert_eq!(v.detail, "no data: the load generator recorded no attempts");
    /// ```
    pub fn verdict(&self, id: &str) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.id == id)
    }
}

/// Judges a run: joins the records, builds the timeline and summary, and
/// runs every check.
///
/// ```
/// use assertions::{judge, Expectations, Status, Thresholds};
///
/// let expect = Expectations {
///     start_us: 0,
///     load_end_us: 10_000_000,
///     overload: None,
///     capacity_per_s: 10.0,
///     patience_s: 25.0,
///     service_s: 1.0,
///     queue_bound: 240.0,
///     in_flight_at_provider: 10.0,
///     memory_ceiling_bytes: None,
///     send_lag_bound_ms: 10.0,
///     send_lag_p99_ms: 1.0,
/// };
/// // No records: nothing was rehearsed, so the run is invalid.
/// let j = judge(&[], &[], &[], &expect, &Thresholds::default());
/// assert_eq!(j.overall, Status::Invalid);
/// assert_eq!(j.verdicts.len(), 9);
/// ```
pub fn judge(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    expect: &Expectations,
    thresholds: &Thresholds,
) -> Judgement {
    let joined = Joined::new(attempts, calls, rss, expect.start_us);
    let timeline = joined.timeline();
    let backlog: Vec<u64> = timeline.seconds.iter().map(|s| s.backlog).collect();
    let drain = joined.drain(expect, &backlog);
    let mut summary = joined.summary(&timeline);
    if let DrainOutcome::Drained { drain_s } = drain.outcome {
        summary.drain_s = Some(drain_s);
    }
    let first_shed = joined.first_shed();
    let harness = checks::harness_valid(attempts.len(), expect, &thresholds.harness_valid);
    summary.harness = Harness {
        send_lag_p99_ms: expect.send_lag_p99_ms,
        valid: harness.status != Status::Invalid,
    };
    let ev = Evidence {
        joined: &joined,
        expect,
        summary: &summary,
        drain,
        first_shed,
    };
    let verdicts = vec![
        checks::shed_onset(&ev, &thresholds.shed_onset),
        checks::retry_after(&ev, &thresholds.retry_after),
        checks::memory_ceiling(&ev, &thresholds.memory_ceiling),
        checks::drain(&ev, &thresholds.drain),
        checks::stale_dispatch(&ev, &thresholds.stale_dispatch),
        checks::served_latency(&ev, &thresholds.served_latency),
        checks::goodput(&ev, &thresholds.goodput),
        checks::no_silent_loss(&ev, &thresholds.no_silent_loss),
        harness,
    ];
    let overall = if verdicts.iter().any(|v| v.status == Status::Invalid) {
        Status::Invalid
    } else if verdicts.iter().any(|v| v.status == Status::Fail) {
        Status::Fail
    } else {
        Status::Pass
    };
    Judgement {
        verdicts,
        overall,
        timeline,
        summary,
        first_shed,
    }
}
