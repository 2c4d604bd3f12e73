//! What the judge keeps for the checks beyond the [`Summary`]: a
//! [`Tally`] of counts, a set of Retry-After values and a few histograms,
//! filled as the records go by (by the one pass, `judge`, and in tests by
//! the oracle), whatever the run's length; and the rules both apply: a
//! retry that honoured a Retry-After ([`honoured`], as each person is
//! done), a Retry-After within its bound of the drain time
//! ([`retry_after_within`], as the sweep reaches it), and a call cut
//! mid-stream or completed ([`cut_mid_stream`], [`completed`]); and the
//! gateway's memory over the run ([`MemoryArc`]: its idle baseline, its
//! peak, and what it kept once drained and idle).
//!
//! [`Summary`]: crate::Summary

use std::collections::BTreeSet;

use hdrhistogram::Histogram;
use wire::{ClientOutcome, RssSample};

use crate::expect::Expectations;
use crate::timeline::histogram;

const US: f64 = 1_000_000.0;

/// The figures the checks need beyond the [`Summary`]: counts, a set of
/// Retry-After values and a few HDR histograms, whatever the run's length.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    /// Attempts.
    pub(crate) attempts: u64,
    /// People: distinct ids among the attempts.
    pub(crate) people: u64,
    /// People served (an answer to any of their attempts).
    pub(crate) served: u64,
    /// Attempts that ended in a timeout, a reset, a connection error and a
    /// malformed answer, in that order.
    pub(crate) lost: [u64; 4],
    /// Attempts answered inside the overload window.
    pub(crate) answered_in_overload: u64,
    /// Provider calls answered (ok, not hung up) that finished inside the
    /// overload window.
    pub(crate) calls_answered_in_overload: u64,
    /// Sheds by the gateway itself: refusals for scarcity the provider
    /// never saw, at admission and after waiting (stale).
    pub(crate) sheds: u64,
    /// Those of them refused at admission.
    pub(crate) admission_sheds: u64,
    /// Those of them dropped after waiting (stale), and how long each had
    /// waited (its send to its refusal), in microseconds.
    pub(crate) stale_drops: u64,
    pub(crate) stale_waits: Histogram<u64>,
    /// Sheds without a Retry-After.
    pub(crate) sheds_without_retry_after: u64,
    /// The distinct Retry-After values they gave, in milliseconds.
    pub(crate) retry_after_values: BTreeSet<u64>,
    /// Each Retry-After's error against the backlog drain time at its
    /// refusal, |Retry-After − drain|, in microseconds.
    pub(crate) retry_after_errors: Histogram<u64>,
    /// Those within their bound, max(the header's granularity, tolerance ×
    /// the drain time) (see [`retry_after_within`]).
    pub(crate) retry_after_within: u64,
    /// Provider calls cut mid-stream (a `stream_cut`, or a stream the
    /// gateway hung up on after its first byte) joined to an attempt, and
    /// those whose attempt ended `ok` with no later call for it completing:
    /// an answer cut short handed over as whole.
    pub(crate) cut_calls: u64,
    pub(crate) silent_truncations: u64,
    /// Retries that honoured a Retry-After after the overload, and how many
    /// of them were admitted (see [`honoured`]).
    pub(crate) honouring: u64,
    pub(crate) honoured_admitted: u64,
    /// The largest memory sample (the last of equal ones).
    pub(crate) peak_rss: Option<RssSample>,
    /// The gateway's memory before, at the peak of and after the load.
    pub(crate) memory: MemoryArc,
    /// Times the gateway was killed by its memory limit.
    pub(crate) oom_kills: u64,
}

impl Tally {
    pub(crate) fn new() -> Self {
        Tally {
            attempts: 0,
            people: 0,
            served: 0,
            lost: [0; 4],
            answered_in_overload: 0,
            calls_answered_in_overload: 0,
            sheds: 0,
            admission_sheds: 0,
            stale_drops: 0,
            stale_waits: histogram(),
            sheds_without_retry_after: 0,
            retry_after_values: BTreeSet::new(),
            retry_after_errors: histogram(),
            retry_after_within: 0,
            cut_calls: 0,
            silent_truncations: 0,
            honouring: 0,
            honoured_admitted: 0,
            peak_rss: None,
            memory: MemoryArc::default(),
            oom_kills: 0,
        }
    }

    /// μ as measured at the provider: answered calls finished inside the
    /// overload window, per second (`None` without a window).
    pub(crate) fn measured_capacity(&self, expect: &Expectations) -> Option<f64> {
        let (from, to) = expect.overload?;
        (to > from).then(|| self.calls_answered_in_overload as f64 / ((to - from) as f64 / US))
    }

    /// The median wait of the stale drops, in seconds (0 without any).
    pub(crate) fn median_stale_wait_s(&self) -> f64 {
        if self.stale_waits.is_empty() {
            return 0.0;
        }
        self.stale_waits.value_at_quantile(0.5) as f64 / US
    }

    /// The index in [`Tally::lost`] of a silent loss, `None` for any other
    /// outcome.
    pub(crate) fn lost_kind(outcome: ClientOutcome) -> Option<usize> {
        LOST.iter().position(|(o, _, _)| *o == outcome)
    }
}

/// A Retry-After of `ra_ms` given when the backlog drain time was
/// `drain_us`: its error in microseconds, and whether it is within its
/// bound, max(`granularity_ms`, `tolerance` × the drain time). The one
/// rule for the one pass and the oracle.
pub(crate) fn retry_after_within(
    ra_ms: u64,
    granularity_ms: u64,
    drain_us: u64,
    tolerance: f64,
) -> (u64, bool) {
    let error_us = ra_ms.saturating_mul(1000).abs_diff(drain_us);
    let share = if tolerance.is_finite() {
        tolerance.max(0.0)
    } else {
        0.0
    };
    let bound_us = (granularity_ms.saturating_mul(1000) as f64).max(share * drain_us as f64);
    (error_us, error_us as f64 <= bound_us)
}

/// Returns true if and only if a provider call was cut mid-stream: the
/// provider cut it (`stream_cut`), or the gateway hung up on a stream
/// whose first byte had gone out.
pub(crate) fn cut_mid_stream(c: &wire::ProviderRecord) -> bool {
    c.outcome == wire::ProviderOutcome::StreamCut
        || (c.stream && c.first_byte_us.is_some() && c.hung_up_us.is_some())
}

/// Returns true if and only if a provider call completed: answered, not
/// hung up, not cut.
pub(crate) fn completed(c: &wire::ProviderRecord) -> bool {
    c.outcome == wire::ProviderOutcome::Ok && c.hung_up_us.is_none() && c.finished_us.is_some()
}

/// The silent losses, in [`Tally::lost`] order, with their nouns.
pub(crate) const LOST: [(ClientOutcome, &str, &str); 4] = [
    (ClientOutcome::Timeout, "timeout", "timeouts"),
    (ClientOutcome::Reset, "reset", "resets"),
    (
        ClientOutcome::ConnectError,
        "connection error",
        "connection errors",
    ),
    (
        ClientOutcome::Malformed,
        "malformed answer",
        "malformed answers",
    ),
];

/// The gateway's memory over the run, kept as its samples go by (in any
/// order), by each sample's [`RssSample::memory_bytes`] (the anonymous part
/// where /proc gave it): the last [`MemoryArc::KEPT`] samples before the
/// load's start (its idle baseline), the peak, and the samples of the last
/// [`MemoryArc::DRAINED_US`] of the wait after the load
/// ([`Expectations::memory_settle`]). It holds a few samples, whatever the
/// run's length.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryArc {
    /// The largest sample by its memory (the last of equal ones).
    peak: Option<RssSample>,
    /// The earliest sample of the run: the baseline when no sample came
    /// before the load.
    first: Option<RssSample>,
    /// The latest samples before the load's start, `(t_us, bytes)`, at
    /// most [`MemoryArc::KEPT`], in time order.
    before: Vec<(u64, u64)>,
    /// The memory of the samples in the last part of the wait after the
    /// load.
    drained: Vec<u64>,
    /// Samples with the anonymous part, and without it.
    anon: u64,
    whole: u64,
}

/// The memory arc a run's samples drew, for `memory_ceiling`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MemoryLevels {
    /// The idle baseline: the median of the last samples before the load,
    /// or the first sample when none came before it.
    pub(crate) baseline: u64,
    /// How many samples before the load it was taken from; 0: it is the
    /// first sample, taken `first_after_us` after the load's start.
    pub(crate) baseline_samples: usize,
    pub(crate) first_after_us: u64,
    /// The largest sample.
    pub(crate) peak: RssSample,
    pub(crate) peak_bytes: u64,
    /// The memory once drained and idle: the median of the samples of the
    /// wait's last part, and how many there were; `None` without any (the
    /// run did not wait, or nothing was sampled then).
    pub(crate) drained: Option<(u64, usize)>,
    /// What was read: `RssAnon`, `RSS`, or both.
    pub(crate) kind: &'static str,
}

impl MemoryArc {
    /// The samples before the load its baseline is the median of: a
    /// second's worth at the sampler's 100 ms, so that one sample caught in
    /// a start-up allocation does not set it.
    pub(crate) const KEPT: usize = 10;

    /// The part of the wait after the load its drained figure is the
    /// median of: its last second (all of it when shorter). Memory freed
    /// after a load reaches the system late (an allocator trims its free
    /// lists in its own time, idle connections close on their keep-alive
    /// timers, a collector runs when it runs), so the wait's end says what
    /// the gateway keeps; the median of about ten samples is the level it
    /// holds there, not one sample caught in a passing allocation.
    pub(crate) const DRAINED_US: u64 = 1_000_000;

    /// Takes one sample into account.
    pub(crate) fn sample(&mut self, s: RssSample, expect: &Expectations) {
        let bytes = s.memory_bytes();
        if s.rss_anon_bytes.is_some() {
            self.anon += 1;
        } else {
            self.whole += 1;
        }
        if self.peak.is_none_or(|p| bytes >= p.memory_bytes()) {
            self.peak = Some(s);
        }
        if self.first.is_none_or(|f| s.t_us < f.t_us) {
            self.first = Some(s);
        }
        if s.t_us < expect.start_us {
            let at = self.before.partition_point(|(t, _)| *t <= s.t_us);
            self.before.insert(at, (s.t_us, bytes));
            if self.before.len() > Self::KEPT {
                self.before.remove(0);
            }
        }
        if let Some((from, to)) = expect.memory_settle {
            let last_part = from.max(to.saturating_sub(Self::DRAINED_US));
            if (last_part..=to).contains(&s.t_us) {
                self.drained.push(bytes);
            }
        }
    }

    /// The arc drawn, `None` without a sample.
    pub(crate) fn arc(&self, expect: &Expectations) -> Option<MemoryLevels> {
        let (peak, first) = (self.peak?, self.first?);
        let (baseline, baseline_samples) = if self.before.is_empty() {
            (first.memory_bytes(), 0)
        } else {
            let bytes: Vec<u64> = self.before.iter().map(|(_, b)| *b).collect();
            (median(bytes), self.before.len())
        };
        let drained =
            (!self.drained.is_empty()).then(|| (median(self.drained.clone()), self.drained.len()));
        let kind = match (self.anon, self.whole) {
            (_, 0) => "RssAnon",
            (0, _) => "RSS",
            _ => "RssAnon where read, else RSS",
        };
        Some(MemoryLevels {
            baseline,
            baseline_samples,
            first_after_us: first.t_us.saturating_sub(expect.start_us),
            peak,
            peak_bytes: peak.memory_bytes(),
            drained,
            kind,
        })
    }
}

/// The median of `values` (not empty): the lower of the middle two of an
/// even count, a level the gateway did show.
fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

/// One retry, as [`honoured`] judges it: `None` if it says nothing about
/// the Retry-After (a first attempt, before the overload's end, after no
/// Retry-After, or without patience left for a call), else whether it
/// honoured the Retry-After and whether it was admitted.
pub(crate) struct Retry {
    /// The retry's number, send time, patience and outcome.
    pub(crate) attempt: u32,
    pub(crate) intended_us: u64,
    pub(crate) sent_us: u64,
    pub(crate) patience_ms: u64,
    pub(crate) outcome: ClientOutcome,
}

/// The attempt before it: its end and Retry-After.
pub(crate) struct Previous {
    pub(crate) done_us: u64,
    pub(crate) retry_after_ms: Option<u64>,
}

/// Retries sent after the overload (or, without one, at any time) no
/// earlier than the previous attempt's done plus its Retry-After, by people
/// with patience left for a call (at least twice the service time S):
/// `Some(admitted)` for such a retry (admitted: not shed), `None` for any
/// other attempt. A retry whose caller has less patience left than a call
/// takes is rightly shed by a deadline-aware gateway, so it says nothing
/// about the Retry-After. `first_intended` is the person's first attempt's
/// due time, if known.
pub(crate) fn honoured(
    expect: &Expectations,
    a: &Retry,
    prev: Option<&Previous>,
    first_intended: Option<u64>,
) -> Option<bool> {
    let after = expect.overload.map_or(expect.start_us, |(_, to)| to);
    if a.attempt <= 1 || a.sent_us < after {
        return None;
    }
    let prev = prev?;
    let ra = prev.retry_after_ms?;
    let used_us = a
        .sent_us
        .saturating_sub(first_intended.unwrap_or(a.intended_us));
    let left_us = a.patience_ms.saturating_mul(1000).saturating_sub(used_us);
    if (left_us as f64) < 2.0 * expect.service_s * 1e6 {
        return None;
    }
    (a.sent_us >= prev.done_us.saturating_add(ra.saturating_mul(1000)))
        .then_some(a.outcome != ClientOutcome::Shed)
}
