//! The checks of the checklist (all but `refusals_legible`, in
//! `legible.rs`, and `concurrency_below_knee`, in `knee.rs`), each a pure
//! function from the figures the judge kept ([`Evidence`]: the summary,
//! the timeline's rows, the drain, the first shed and a [`Tally`]) and its
//! threshold to a [`Verdict`]; none sees a record. A new check is one more
//! such function, called in `judgement::conclude` (`harness_valid` alone
//! comes first: the summary says whether the run was valid).
//!
//! A check says `skipped` only when it is disabled or has nothing to judge
//! (no overload to shed in, no memory ceiling, no attempts at all); when
//! the data needed to show it holds is missing from a run that should have
//! it, it fails, because a check that passes on a broken gateway is worse
//! than none.
//!
//! The rooms, by what the checks look at:
//! - `backlog`: the gateway's queue (`shed_onset`, `stale_share`,
//!   `stale_dispatch`, `drain`, `goodput`, `served_latency`);
//! - `refusals`: `retry_after`, whether a refusal's wait is true;
//! - `integrity`: what a run must not lose, hide or outgrow
//!   (`memory_ceiling`, `no_silent_loss`, `no_silent_truncation`,
//!   `harness_valid`);
//! - `recovery`: the answered share after the last trouble;
//! - `amplification`: `retry_amplification`, provider calls per attempt;
//! - `hangup`: `cancel_on_hangup`, the calls left running for callers who
//!   left;
//! - `stream`: `stream_intact`, the first token's delay and the stream's
//!   pieces.

use crate::covered::Stop;
use crate::expect::Expectations;
use crate::tally::Tally;
use crate::timeline::{Drain, FirstShed, Second, Summary};
use crate::verdict::Verdict;

const US: f64 = 1_000_000.0;

/// Everything the checks read: figures kept while the records went by,
/// never the records themselves.
pub(crate) struct Evidence<'a> {
    pub(crate) expect: &'a Expectations,
    pub(crate) summary: &'a Summary,
    /// The timeline's rows.
    pub(crate) seconds: &'a [Second],
    pub(crate) drain: Drain,
    pub(crate) first_shed: Option<FirstShed>,
    pub(crate) tally: &'a Tally,
    /// The stop, for a run stopped before its end: `expect` holds the
    /// overload window and the load's end cut there (`crate::covered`),
    /// this what was cut off, for the checks to say so.
    pub(crate) stop: Option<Stop>,
}

impl Evidence<'_> {
    fn no_attempts(&self) -> bool {
        self.tally.attempts == 0
    }

    /// The verdict of check `id` when it is skipped before it looks at
    /// anything: turned off, or a run with no attempts to judge.
    fn skip_before(&self, id: &'static str, enabled: bool) -> Option<Verdict> {
        if !enabled {
            return Some(Verdict::off(id));
        }
        self.no_attempts()
            .then(|| Verdict::skipped(id, "no attempts", NO_ATTEMPTS))
    }

    /// The most requests waiting at once, in the gateway or the backlog.
    fn peak_waiting(&self) -> u64 {
        self.summary
            .gateway
            .peak_depth
            .max(self.summary.gateway.peak_backlog)
    }
}

const NO_ATTEMPTS: &str = "no data: the load generator recorded no attempts";

mod amplification;
mod backlog;
mod hangup;
mod integrity;
mod recovery;
mod refusals;
mod stream;
#[cfg(test)]
mod tests;

pub(crate) use amplification::{in_retry_after_windows, retry_amplification};
pub(crate) use backlog::{drain, goodput, served_latency, shed_onset, stale_dispatch, stale_share};
pub(crate) use hangup::cancel_on_hangup;
pub(crate) use integrity::{
    harness_valid, memory_ceiling, no_silent_loss, no_silent_truncation, upstream_seen,
    without_provider_calls,
};
pub(crate) use recovery::recovery;
pub(crate) use refusals::retry_after;
pub(crate) use stream::stream_intact;
