//! A judged run: the verdicts, the figures behind them, and how the one
//! pass went ([`Judgement`]); and [`conclude`], which runs every check, in
//! [`Check::ALL`] order, on what a pass measured ([`Measured`]).
//!
//! Both judges end here: the one pass (`judge`) and, in tests, the oracle
//! it is checked against. The checks read what was measured, never the
//! records.

use hdrhistogram::Histogram;
use serde::Serialize;
use wire::ClientRecord;

use crate::check::Check;
use crate::checks::{self, Evidence};
use crate::covered::Stop;
use crate::expect::{Expectations, Thresholds};
use crate::external::External;
use crate::routing::Routing;
use crate::tally::Tally;
use crate::timeline::{histogram, Drain, DrainOutcome, FirstShed, Harness, Summary, Timeline};
use crate::verdict::{Status, Verdict};
use crate::{knee, legible};

/// The ids of the checks judged in every run, in the order [`judge()`]
/// returns their verdicts: those of [`Check::ALL`] that are
/// [`Check::always`].
pub fn always_judged() -> impl Iterator<Item = &'static str> {
    Check::ALL.into_iter().filter(|c| c.always()).map(Check::id)
}

/// A judged run: the checklist, the overall verdict, and the measurements
/// behind them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// One verdict per check, in [`Check::ALL`] order, then those of
    /// [`Family::Routing`](crate::Family) the run has.
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
    /// End-to-end latency per attempt, for the percentile chart (not in
    /// `report.json`).
    #[serde(skip)]
    pub distribution: Distribution,
    /// How the one pass went (not in `report.json`).
    #[serde(skip)]
    pub pass: Pass,
}

/// End-to-end latency per attempt (intended send to done, at least 1 µs),
/// as HDR histograms of 3 significant figures: a chart's input, whatever
/// the run's length.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// Of answered attempts.
    pub served: Histogram<u64>,
    /// Of all attempts.
    pub all: Histogram<u64>,
}

impl Distribution {
    pub(crate) fn new() -> Self {
        Distribution {
            served: histogram(),
            all: histogram(),
        }
    }

    /// Counts one attempt.
    pub(crate) fn add(&mut self, a: &ClientRecord) {
        let us = a.done_us.saturating_sub(a.intended_us).max(1);
        let _ = self.all.record(us);
        if a.outcome == wire::ClientOutcome::Ok {
            let _ = self.served.record(us);
        }
    }
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution::new()
    }
}

/// How the one pass went: the window it judged in, and what fell outside
/// it (see [`Judge`]). Both counts are 0 for records written in about the
/// order they ended.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pass {
    /// The window at the end of the run, in seconds.
    pub window_s: f64,
    /// Records (or parts of them) that came more than a window out of
    /// order, judged from the instant the pass had reached.
    pub out_of_order: u64,
    /// Provider calls received for an attempt that had left more than its
    /// settling time before with no call: counted as dispatched (stale,
    /// late, queue wait) but not in the gateway's depth or drain time.
    pub settled_before_dispatch: u64,
    /// The most entries the judge held at once, records, people, attempts,
    /// pending events and per-second values (the compact entries of
    /// unanswered attempts not included).
    pub peak_held: usize,
    /// Compact entries held at the end (unanswered attempts).
    pub compact: usize,
}

impl Judgement {
    /// The verdict of the check `id` (one of [`Check::ALL`]), if there is one.
    ///
    /// ```
    /// # let expect = assertions::Expectations {
    /// #     start_us: 0, load_end_us: 0, overload: None, capacity_per_s: 1.0,
    /// #     patience_s: 2.0, service_s: 1.0, queue_bound: 1.0,
    /// #     in_flight_at_provider: 1.0, gateway_wait_s: 0.0, knee: None, drain_baseline: None,
    /// #     after_trouble: None,
    /// #     memory_ceiling_bytes: None, memory_settle: None,
    /// #     send_lag_bound_ms: 1.0, send_lag_p99_ms: 0.0, stopped_us: None,
    /// # };
    /// let j = assertions::judge(&[], &[], &[], &expect, &Default::default());
    /// let v = j.verdict("harness_valid").unwrap();
    /// assert_eq!(v.detail, "no data: the load generator recorded no attempts");
    /// ```
    pub fn verdict(&self, id: &str) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.id == id)
    }
}

/// What a pass (or, in tests, the oracle) measured, before the checks.
pub(crate) struct Measured {
    pub(crate) timeline: Timeline,
    pub(crate) summary: Summary,
    pub(crate) drain: Drain,
    pub(crate) first_shed: Option<FirstShed>,
    pub(crate) tally: Tally,
    pub(crate) distribution: Distribution,
    pub(crate) pass: Pass,
    /// The providers' calls (the one pass's; the oracle has none), with
    /// the timeline's row length in microseconds.
    pub(crate) routing: Option<(Routing, u64)>,
    /// The stop, for a run stopped before its end (`crate::covered`).
    pub(crate) stop: Option<Stop>,
}

/// The checks of several providers, after the others (see
/// [`Family::Routing`](crate::Family)), what `retry_after` judged of the
/// gateway's every-upstream-cooling refusals, and the share of the calls
/// `retry_amplification` counted that came inside a provider's
/// Retry-After window.
fn routed(
    verdicts: &mut Vec<Verdict>,
    r: &Routing,
    bin_us: u64,
    timeline: &Timeline,
    thresholds: &Thresholds,
) {
    let cooling = r.cooling_judged();
    if cooling > 0 {
        if let Some(v) = verdicts.iter_mut().find(|v| v.id == "retry_after") {
            v.detail.push_str(&format!(
                " ({} of the sheds were every upstream cooling, `all_upstreams_cooling`: each judged against the time until a provider next accepted a call, the shortest cooldown left, not the drain time; {} within their bound)",
                wire::number::count(cooling),
                wire::number::count(r.cooling_within),
            ));
        }
    }
    if let (Some((inside, calls)), Some(v)) = (
        r.inside_windows(&thresholds.cooldown_honoured),
        verdicts.iter_mut().find(|v| v.id == "retry_amplification"),
    ) {
        checks::in_retry_after_windows(v, inside, calls);
    }
    verdicts.extend(r.cooldown_honoured(&thresholds.cooldown_honoured));
    verdicts.extend(r.failover(
        &thresholds.failover,
        &timeline.seconds,
        timeline.start_us,
        bin_us,
    ));
}

/// The verdict of check `c` on what was measured, for the checks judged
/// in every run; `None` for those of [`Family::Routing`](crate::Family),
/// which [`routed`] adds when the run has them.
fn judged(c: Check, ev: &Evidence, t: &Thresholds, harness: &Verdict) -> Option<Verdict> {
    Some(match c {
        Check::ShedOnset => checks::shed_onset(ev, &t.shed_onset),
        Check::StaleShare => checks::stale_share(ev, &t.stale_share),
        Check::RetryAfter => checks::retry_after(ev, &t.retry_after),
        Check::MemoryCeiling => checks::memory_ceiling(ev, &t.memory_ceiling),
        Check::Drain => checks::drain(ev, &t.drain),
        Check::Recovery => checks::recovery(ev, &t.recovery),
        Check::StaleDispatch => checks::stale_dispatch(ev, &t.stale_dispatch),
        Check::CancelOnHangup => checks::cancel_on_hangup(ev, &t.cancel_on_hangup),
        Check::RetryAmplification => checks::retry_amplification(ev, &t.retry_amplification),
        Check::StreamIntact => checks::stream_intact(ev, &t.stream_intact),
        Check::ServedLatency => checks::served_latency(ev, &t.served_latency),
        Check::Goodput => checks::goodput(ev, &t.goodput),
        Check::NoSilentLoss => checks::no_silent_loss(ev, &t.no_silent_loss),
        Check::NoSilentTruncation => checks::no_silent_truncation(ev, &t.no_silent_truncation),
        Check::RefusalsLegible => legible::refusals_legible(ev, &t.refusals_legible),
        Check::ConcurrencyBelowKnee => knee::concurrency_below_knee(ev, &t.concurrency_below_knee),
        Check::HarnessValid => checks::upstream_seen(ev).unwrap_or_else(|| harness.clone()),
        Check::CooldownHonoured | Check::Failover => return None,
    })
}

/// Runs every check on what was measured, and concludes.
pub(crate) fn conclude(
    m: Measured,
    expect: &Expectations,
    thresholds: &Thresholds,
    external: Option<&External>,
) -> Judgement {
    let Measured {
        timeline,
        mut summary,
        drain,
        first_shed,
        tally,
        distribution,
        pass,
        routing,
        stop,
    } = m;
    match drain.outcome {
        DrainOutcome::Drained { drain_s } => summary.drain_s = Some(drain_s),
        // Nothing to drain: back at once.
        DrainOutcome::NothingWaited { .. } => summary.drain_s = Some(0.0),
        _ => {}
    }
    let harness = checks::harness_valid(tally.attempts, expect, &thresholds.harness_valid);
    summary.harness = Harness {
        send_lag_p99_ms: expect.send_lag_p99_ms,
        valid: harness.status != Status::Invalid,
    };
    let ev = Evidence {
        expect,
        summary: &summary,
        seconds: &timeline.seconds,
        drain,
        first_shed,
        tally: &tally,
        stop,
    };
    let mut verdicts: Vec<Verdict> = Check::ALL
        .into_iter()
        .filter_map(|c| judged(c, &ev, thresholds, &harness))
        .collect();
    if let (Some((r, bin_us)), None) = (&routing, external) {
        routed(&mut verdicts, r, *bin_us, &timeline, thresholds);
    }
    let verdicts: Vec<Verdict> = match external {
        // No provider records by design: the client's side and the
        // gateway's gauges stand in for them.
        Some(e) => e.finish(
            verdicts
                .into_iter()
                .map(|v| match v.id {
                    "stale_dispatch" => e.stale_dispatch(&summary, &thresholds.stale_dispatch),
                    "harness_valid" => harness.clone(),
                    _ => v,
                })
                .collect(),
        ),
        None => {
            let (calls, answered) = (summary.provider.calls, summary.counts.ok);
            verdicts
                .into_iter()
                .map(|v| checks::without_provider_calls(v, calls, answered))
                .collect()
        }
    };
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
        distribution,
        pass,
    }
}
