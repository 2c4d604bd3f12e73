//! What the judge keeps for the checks beyond the [`Summary`]: a
//! [`Tally`] of counts, a set of Retry-After values and a few histograms,
//! filled as the records go by (by the one pass, `judge`, and in tests by
//! the oracle), whatever the run's length; and the rules both apply: a
//! retry that honoured a Retry-After ([`honoured`], as each person is
//! done), a Retry-After within its bound of the drain time
//! ([`retry_after_within`], as the sweep reaches it), what a relayed
//! provider refusal's answer did with the provider's Retry-After
//! ([`relayed_retry_after`], as each person is done), a call cut
//! mid-stream or completed ([`cut_mid_stream`], [`completed`]), a call
//! in service when its caller gave up ([`after_hangup`], as it joins its
//! caller); and the gateway's memory over the run ([`MemoryArc`]: its
//! idle baseline, its peak, and what it kept once drained and idle).
//!
//! [`Summary`]: crate::Summary

use std::collections::BTreeSet;

use hdrhistogram::Histogram;
use wire::{ClientOutcome, RssSample};

use crate::aftermath::Aftermath;
use crate::delivery::Deliveries;
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
    /// The provider's refusals the gateway relayed (`upstream_refused`, by
    /// its reason or by the join), and of them, by what the answer did
    /// with the Retry-After of the latest refusing call
    /// ([`relayed_retry_after`]): kept it, stripped it, shortened it, or
    /// had none to keep (the provider gave none, or no call of the
    /// provider's joined it).
    pub(crate) relayed: u64,
    pub(crate) relayed_kept: u64,
    pub(crate) relayed_stripped: u64,
    pub(crate) relayed_shortened: u64,
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
    /// Streamed answers, and how each was delivered against how its
    /// provider sent it (`stream_intact`).
    pub(crate) deliveries: Deliveries,
    /// The people offered after the last trouble, and answered
    /// (`recovery`).
    pub(crate) recovery: Aftermath,
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
            relayed: 0,
            relayed_kept: 0,
            relayed_stripped: 0,
            relayed_shortened: 0,
            cut_calls: 0,
            silent_truncations: 0,
            honouring: 0,
            honoured_admitted: 0,
            peak_rss: None,
            memory: MemoryArc::default(),
            oom_kills: 0,
            deliveries: Deliveries::new(),
            recovery: Aftermath::default(),
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

    /// Counts a provider refusal the gateway relayed, by what its answer
    /// did with the provider's Retry-After (`None`: no refusing call of
    /// the provider's joined it).
    pub(crate) fn relayed(&mut self, kept: Option<RelayedRetryAfter>) {
        self.relayed += 1;
        match kept {
            Some(RelayedRetryAfter::Kept) => self.relayed_kept += 1,
            Some(RelayedRetryAfter::Stripped) => self.relayed_stripped += 1,
            Some(RelayedRetryAfter::Shortened) => self.relayed_shortened += 1,
            Some(RelayedRetryAfter::NoneGiven) | None => {}
        }
    }

    /// The relayed refusals that carried the provider's Retry-After to
    /// judge: kept, stripped or shortened.
    pub(crate) fn relayed_judged(&self) -> u64 {
        self.relayed_kept + self.relayed_stripped + self.relayed_shortened
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

/// What an answer that relayed a provider's refusal did with the
/// provider's Retry-After.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelayedRetryAfter {
    /// The provider gave none: nothing to keep.
    NoneGiven,
    /// The answer's is no shorter than the provider's.
    Kept,
    /// The answer carried none.
    Stripped,
    /// The answer's is shorter than the provider's.
    Shortened,
}

/// What an answer with a Retry-After of `answer_ms` (read from a header
/// of `granularity_ms`) did with the provider's wait `provider_ms` (its
/// `retry-after-ms`, else its `retry-after` in milliseconds; `None` or 0:
/// it gave none). A wait is kept when the answer's is no shorter than the
/// provider's to its header's granularity: a provider's 1,500 ms passed
/// on as `retry-after: 2` (the provider's own rounding up) or as `1` (a
/// second's header cannot say more; an HTTP date says the same) is kept,
/// as `retry-after-ms: 1000` it is shortened. The one rule for the one
/// pass and the oracle.
pub(crate) fn relayed_retry_after(
    answer_ms: Option<u64>,
    granularity_ms: u64,
    provider_ms: Option<u64>,
) -> RelayedRetryAfter {
    let Some(provider_ms) = provider_ms.filter(|&ms| ms > 0) else {
        return RelayedRetryAfter::NoneGiven;
    };
    match answer_ms {
        None => RelayedRetryAfter::Stripped,
        Some(ms) if ms.saturating_add(granularity_ms.max(1)) > provider_ms => {
            RelayedRetryAfter::Kept
        }
        Some(_) => RelayedRetryAfter::Shortened,
    }
}

/// The wait a provider's refusal announced, in milliseconds: its
/// `retry-after-ms`, else its `retry-after` in seconds.
pub(crate) fn provider_wait_ms(c: &wire::ProviderRecord) -> Option<u64> {
    c.retry_after_ms
        .or(c.retry_after_s.map(|s| s.saturating_mul(1000)))
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

/// Returns true if and only if an attempt ended because its caller gave
/// up: the person's patience ran out and the client hung up
/// ([`ClientOutcome::Timeout`]). A run stopped mid-attempt (`cancelled`)
/// is not the caller's doing, and every other outcome is an answer or the
/// gateway's.
pub(crate) fn caller_gave_up(outcome: ClientOutcome) -> bool {
    outcome == ClientOutcome::Timeout
}

/// When a call's tokens were made, as far as its record tells: from
/// `from_us` to the call's end, `completion_tokens` of them. Kept per call
/// by the one pass and the oracle for [`after_hangup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation {
    /// A stream's first byte (its tokens go out from then on); for a whole
    /// answer, or a stream hung up before its first byte, its admission
    /// past the provider's queue (else its receipt): a whole answer's
    /// tokens are made before its first byte, which goes out with the last.
    pub(crate) from_us: u64,
    /// The tokens the provider says it made (sent, for a stream cut short;
    /// none for a whole answer hung up on before it was ready).
    pub(crate) completion_tokens: u32,
}

impl Generation {
    pub(crate) fn of(c: &wire::ProviderRecord) -> Generation {
        let admitted = c.admitted_us.unwrap_or(c.received_us);
        Generation {
            from_us: if c.stream {
                c.first_byte_us.unwrap_or(admitted)
            } else {
                admitted
            },
            completion_tokens: c.completion_tokens,
        }
    }
}

/// A call's times as [`after_hangup`] reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallSpan {
    pub(crate) received_us: u64,
    pub(crate) finished_us: Option<u64>,
    pub(crate) hung_up_us: Option<u64>,
    pub(crate) generation: Generation,
}

/// What a call in service when its caller gave up adds to
/// `cancel_on_hangup`'s figures (see [`after_hangup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AfterHangup {
    /// The gateway had to stop it: it did not end by itself within
    /// `within` of the caller leaving.
    pub(crate) to_cancel: bool,
    /// The gateway hung up on it within `within` of the caller leaving.
    pub(crate) cancelled: bool,
    /// The completion tokens made after the caller left: an estimate, the
    /// call's tokens times the share of its generation time (see
    /// [`Generation`]) that came after the caller left, as if they were
    /// made at an even pace.
    pub(crate) tokens: u64,
}

/// How long before its caller's recorded leaving a gateway's hang-up may
/// come and still be its answer to the caller leaving: the load generator
/// takes the attempt's end time just after it drops the connection, and
/// on a busy machine a gateway that cancels at once can reach the provider
/// first (measured: up to 0.62 ms before, at `--time-scale 10` on two busy
/// cores). The machine's own jitter, the same at every time scale.
pub(crate) const LEAVING_SLACK_US: u64 = 5_000;

/// A call whose caller gave up at `left_us` (see [`caller_gave_up`]):
/// `None` unless the call was in service then (received before, not yet
/// ended: neither finished nor hung up on, or hung up on at most
/// [`LEAVING_SLACK_US`] before); else whether the gateway had to stop it,
/// whether it hung up on it within `within_us`, and the tokens made for
/// nobody. A call that ended by itself within `within_us` needed no
/// cancelling (a hang-up would have raced its answer), and is not counted
/// as one to cancel; its tokens after the caller left still are. The one
/// rule for the one pass and the oracle.
pub(crate) fn after_hangup(left_us: u64, c: &CallSpan, within_us: u64) -> Option<AfterHangup> {
    let end = match (c.finished_us, c.hung_up_us) {
        (Some(f), Some(h)) => Some(f.min(h)),
        (f, h) => f.or(h),
    };
    let hung_up_as_it_left = c
        .hung_up_us
        .is_some_and(|h| end == Some(h) && h.saturating_add(LEAVING_SLACK_US) > left_us);
    let ended_before = end.is_some_and(|e| e <= left_us) && !hung_up_as_it_left;
    if c.received_us >= left_us || ended_before {
        return None;
    }
    let deadline = left_us.saturating_add(within_us);
    let cancelled = c.hung_up_us.is_some_and(|h| h <= deadline);
    let ended_by_itself = c.hung_up_us.is_none() && c.finished_us.is_some_and(|f| f <= deadline);
    // A call still running at the run's end made tokens to no known end:
    // its record has none, so nothing is estimated for it.
    let tokens = end.map_or(0, |end| {
        let g = c.generation;
        let made = u128::from(g.completion_tokens);
        if end <= g.from_us {
            // Made at one instant (or never): after the caller left if
            // that instant was.
            return if g.from_us > left_us { made as u64 } else { 0 };
        }
        let span = u128::from(end - g.from_us);
        let after = u128::from(end.saturating_sub(g.from_us.max(left_us)));
        ((made * after + span / 2) / span) as u64
    });
    Some(AfterHangup {
        to_cancel: !ended_by_itself,
        cancelled,
        tokens,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_retry_after_is_kept_to_its_header_granularity() {
        use RelayedRetryAfter as R;
        // Passed through as the provider wrote it.
        assert_eq!(relayed_retry_after(Some(1500), 1, Some(1500)), R::Kept);
        assert_eq!(relayed_retry_after(Some(2000), 1000, Some(1500)), R::Kept);
        // Longer is kept; a second's header says no finer.
        assert_eq!(relayed_retry_after(Some(9000), 1, Some(1500)), R::Kept);
        assert_eq!(relayed_retry_after(Some(1000), 1000, Some(1500)), R::Kept);
        // Stripped, or shortened beyond the header's granularity.
        assert_eq!(relayed_retry_after(None, 1000, Some(1500)), R::Stripped);
        assert_eq!(relayed_retry_after(Some(1000), 1, Some(1500)), R::Shortened);
        assert_eq!(
            relayed_retry_after(Some(1000), 1000, Some(2000)),
            R::Shortened
        );
        assert_eq!(
            relayed_retry_after(Some(0), 1000, Some(30_000)),
            R::Shortened
        );
        // The provider gave none: nothing to keep.
        assert_eq!(relayed_retry_after(None, 1000, None), R::NoneGiven);
        assert_eq!(relayed_retry_after(Some(5), 1, Some(0)), R::NoneGiven);
        let mut t = Tally::new();
        for kept in [Some(R::Kept), Some(R::Stripped), Some(R::NoneGiven), None] {
            t.relayed(kept);
        }
        assert_eq!(
            (t.relayed, t.relayed_judged(), t.relayed_stripped),
            (4, 2, 1)
        );
    }
}
