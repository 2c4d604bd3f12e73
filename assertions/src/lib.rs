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
//! A [`Judge`] takes the records one at a time, in about the order they
//! were written, and judges in one pass: what it holds is proportional to
//! the request rate times a window (a patience and a provider call), not
//! to the run's length. [`judge()`] does the same for records in memory.
//!
//! The rooms:
//!
//! - `check`: [`Check`], the one table of checks: each one's id, order,
//!   family, and what the conclusion, the report and the command line
//!   need to know of it;
//! - `expect`: [`Expectations`] and [`Thresholds`];
//! - `covered`: what of the scenario a run stopped before its end covered:
//!   the expectations cut at the stop, once, and what the stop cut off;
//! - `timeline`: what the join by request id means and the derived
//!   measurements (gateway depth, backlog, drain time, stale dispatch),
//!   the [`Timeline`] by scenario second, the drain rule and the
//!   [`Summary`];
//! - `judge`: the one pass: [`Judge`] reorders the records within its
//!   window, joins attempts and calls by request id, and keeps figures;
//!   [`judge()`] for records in memory;
//! - `sweep`: the run's instants in time order: per-second levels, the
//!   drain time, the first shed; the drain after the overload at the end;
//! - `calendar`: the queue both keep their window in, by time;
//! - `tally`: what the judge keeps for the checks beyond the summary, and
//!   the rules applied as the records go by (a retry that honoured a
//!   Retry-After, a Retry-After within its bound, a call cut mid-stream);
//! - `delivery`: how a streamed answer reached the client against how its
//!   provider sent it (the time added to its first token, a lump), and
//!   what is kept of them (`stream_intact`);
//! - `aftermath`: what `recovery` keeps in the tally: the window after the
//!   last trouble and the people offered in it, answered or not;
//! - `external`: a run whose provider the harness did not see, judged from
//!   the gateway's gauges;
//! - `judgement`: [`Judgement`], and the conclusion: every check, in
//!   [`Check::ALL`] order, on what the pass measured;
//! - `checks`: the checks, each a function of what was measured
//!   (`legible`: `refusals_legible`; `knee`: `concurrency_below_knee`);
//! - `routing`: several providers: each one's calls, refusals and
//!   Retry-After windows as the calls go by, the gateway's
//!   every-upstream-cooling refusals, and the checks on them
//!   (`cooldown_honoured`, `failover`: [`Family::Routing`]);
//! - `verdict`: [`Verdict`], its [`Figure`], [`Status`] and the wording of the sentences a
//!   person reads (numbers as `wire::number` prints them);
//! - in tests only, `stories` (hand-made runs) and `oracle` (the judge as
//!   it was before the one pass, which the one pass must agree with).
//!
//! The imports go one way: `judge` → `judgement` → `legible`, `knee` →
//! `checks` → `tally` → `delivery`, `aftermath`, `timeline` → `expect`,
//! `judge`, `judgement`, `checks` → `covered` → `expect`, `verdict`, and
//! `judge`, `judgement` →
//! `external` → `sweep` → `tally`, `timeline`, and `judge`, `judgement` →
//! `routing` → `checks`, `tally`, `timeline`; the root only declares and
//! re-exports (`tests/architecture.rs` checks there is no circle).

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod aftermath;
mod calendar;
mod check;
mod checks;
mod covered;
mod delivery;
mod expect;
mod external;
mod judge;
mod judgement;
mod knee;
mod legible;
#[cfg(test)]
mod oracle;
mod routing;
#[cfg(test)]
mod stories;
mod sweep;
mod tally;
mod timeline;
mod verdict;

pub use check::{Check, Family, Tolerance};
pub use expect::{
    CancelOnHangupThreshold, ConcurrencyBelowKneeThreshold, CooldownHonouredThreshold,
    DrainThreshold, Expectations, FailoverThreshold, GoodputThreshold, HarnessValidThreshold,
    MemoryCeilingThreshold, NoSilentLossThreshold, NoSilentTruncationThreshold, RecoveryThreshold,
    RefusalsLegibleThreshold, RetryAfterThreshold, RetryAmplificationThreshold,
    ServedLatencyThreshold, ShedOnsetThreshold, StaleDispatchThreshold, StaleShareThreshold,
    StreamIntactThreshold, Thresholds,
};
pub use judge::{call_end_us, judge, Held, Judge};
pub use judgement::{always_judged, Distribution, Judgement, Pass};
pub use timeline::{
    inside_at_death, Counts, FirstShed, GatewayPeaks, Harness, Latencies, Percentiles,
    ProviderCounts, ProviderSeconds, RefusalLine, Second, Summary, Timeline,
};
pub use verdict::{Figure, Status, Verdict, Worse};
