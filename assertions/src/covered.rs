//! What of the scenario a run covered: all of it, or, for a run stopped
//! before its end (Ctrl-C, SIGTERM, the spending guard:
//! [`Expectations::stopped_us`]), the time up to the stop.
//!
//! The judge cuts the expectations once, here, as it starts ([`covered`]):
//! the overload window and the load's end end at the stop, and an overload
//! that had not begun by then is none. So every figure and check reads the
//! cut window (the answers counted in the overload and μ measured there,
//! the drain after it, the retries after it) without knowing of the stop.
//! What the stop cut off is kept ([`Stop`]), for the checks to say why they
//! judged less than the plan, or nothing.

use std::time::Duration;

use crate::expect::Expectations;
use crate::verdict::secs;

const US: f64 = 1_000_000.0;

/// A run stopped before its end, and what of the plan the stop cut off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stop {
    /// When the run was stopped (never before its start).
    pub(crate) at_us: u64,
    /// The run's start, which the sentences count from.
    start_us: u64,
    /// The overload window as the plan had it.
    pub(crate) overload: Option<(u64, u64)>,
    /// The last scheduled arrival, as the plan had it.
    pub(crate) load_end_us: u64,
}

/// The expectations over the time the run covered, and the stop when it
/// was stopped: see the module docs. A stop after the load's end and the
/// overload cuts nothing from them, but is still a stop (the drain after
/// them may not have been seen).
pub(crate) fn covered(planned: &Expectations) -> (Expectations, Option<Stop>) {
    let Some(at) = planned.stopped_us else {
        return (planned.clone(), None);
    };
    let at_us = at.max(planned.start_us);
    let mut cut = planned.clone();
    cut.load_end_us = planned.load_end_us.min(at_us);
    cut.overload = planned
        .overload
        .and_then(|(from, to)| (from < at_us).then_some((from, to.min(at_us))));
    let stop = Stop {
        at_us,
        start_us: planned.start_us,
        overload: planned.overload,
        load_end_us: planned.load_end_us,
    };
    (cut, Some(stop))
}

impl Stop {
    /// `t` as the sentences say it: seconds since the run's start.
    fn at(&self, t: u64) -> String {
        secs(t.saturating_sub(self.start_us) as f64 / US)
    }

    /// A span of time as the sentences say it.
    fn long(from: u64, to: u64) -> String {
        secs(to.saturating_sub(from) as f64 / US)
    }

    /// `the run stopped at 6 s, before the overload began at 20 s`, when
    /// it did.
    pub(crate) fn before_overload(&self) -> Option<String> {
        let (from, _) = self.overload?;
        (self.at_us <= from).then(|| {
            format!(
                "the run stopped at {}, before the overload began at {}",
                self.at(self.at_us),
                self.at(from)
            )
        })
    }

    /// `the run stopped at 26 s, 6 s into the 30 s overload`, when it did.
    pub(crate) fn in_overload(&self) -> Option<String> {
        let (from, to) = self.overload?;
        (from < self.at_us && self.at_us < to).then(|| {
            format!(
                "the run stopped at {}, {} into the {} overload",
                self.at(self.at_us),
                Self::long(from, self.at_us),
                Self::long(from, to)
            )
        })
    }

    /// Why the drain cannot be judged, when it cannot: the run stopped
    /// before the overload ended (without one, the load), or before the
    /// time it has to drain, `within`, was over after that. A stopped
    /// run's records end at the stop, and the drain rule counts the
    /// seconds past the records' end as empty, so a backlog cut off by the
    /// stop would read as drained; once the allowance is over, the drain
    /// is judged as in any run.
    pub(crate) fn drain_unseen(&self, within: Duration) -> Option<String> {
        if let Some(before) = self.before_overload() {
            return Some(format!("{before}: there was no drain after it to see"));
        }
        let (end, what) = match self.overload {
            Some((_, to)) => (to, "the overload"),
            None => (self.load_end_us, "the load"),
        };
        if self.at_us <= end {
            return Some(format!(
                "the run stopped at {}, before {what} ended at {}: the drain after it was never seen",
                self.at(self.at_us),
                self.at(end)
            ));
        }
        let within_us = u64::try_from(within.as_micros()).unwrap_or(u64::MAX);
        (self.at_us < end.saturating_add(within_us)).then(|| {
            format!(
                "the run stopped at {}, {} after {what} ended, before the {} it has to drain were over: the drain was not seen whole",
                self.at(self.at_us),
                Self::long(end, self.at_us),
                secs(within.as_secs_f64())
            )
        })
    }

    /// When the stop came before the overload ended, why the retries
    /// after it were not seen: `the run stopped at 26 s, before the
    /// overload ended at 50 s`.
    pub(crate) fn before_overload_ended(&self) -> Option<String> {
        let (_, to) = self.overload?;
        (self.at_us < to).then(|| {
            format!(
                "the run stopped at {}, before the overload ended at {}",
                self.at(self.at_us),
                self.at(to)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stories::{at, expect};

    fn stopped(ms: Option<u64>) -> (Expectations, Option<Stop>) {
        // An overload from 20 s to 50 s, the load to 60 s.
        let mut e = expect(Some((20_000, 50_000)), 60_000, 3.0);
        e.stopped_us = ms.map(at);
        covered(&e)
    }

    #[test]
    fn a_run_that_went_its_course_is_judged_as_planned() {
        let (e, stop) = stopped(None);
        assert_eq!(e, expect(Some((20_000, 50_000)), 60_000, 3.0));
        assert_eq!(stop, None);
    }

    #[test]
    fn a_stop_before_the_overload_leaves_none() {
        let (e, stop) = stopped(Some(6_000));
        assert_eq!(e.overload, None);
        assert_eq!(e.load_end_us, at(6_000));
        let stop = stop.unwrap();
        assert_eq!(
            stop.before_overload().as_deref(),
            Some("the run stopped at 6 s, before the overload began at 20 s")
        );
        assert_eq!(stop.in_overload(), None);
        assert_eq!(
            stop.drain_unseen(Duration::from_secs(60)).as_deref(),
            Some("the run stopped at 6 s, before the overload began at 20 s: there was no drain after it to see")
        );
        // Stopped before the run's start: nothing was covered.
        let mut early = expect(Some((20_000, 50_000)), 60_000, 3.0);
        early.stopped_us = Some(at(0) - 5_000_000);
        let (e, stop) = covered(&early);
        assert_eq!((e.overload, e.load_end_us), (None, at(0)));
        assert_eq!(stop.unwrap().at_us, at(0));
    }

    #[test]
    fn a_stop_inside_the_overload_cuts_it_there() {
        let (e, stop) = stopped(Some(26_000));
        assert_eq!(e.overload, Some((at(20_000), at(26_000))));
        assert_eq!(e.load_end_us, at(26_000));
        let stop = stop.unwrap();
        assert_eq!(stop.before_overload(), None);
        assert_eq!(
            stop.in_overload().as_deref(),
            Some("the run stopped at 26 s, 6 s into the 30 s overload")
        );
        assert_eq!(
            stop.drain_unseen(Duration::from_secs(60)).as_deref(),
            Some("the run stopped at 26 s, before the overload ended at 50 s: the drain after it was never seen")
        );
        assert_eq!(
            stop.before_overload_ended().as_deref(),
            Some("the run stopped at 26 s, before the overload ended at 50 s")
        );
    }

    #[test]
    fn a_stop_after_the_overload_cuts_the_drain_until_its_allowance_is_over() {
        let (e, stop) = stopped(Some(55_000));
        assert_eq!(e.overload, Some((at(20_000), at(50_000))));
        assert_eq!(e.load_end_us, at(55_000));
        let stop = stop.unwrap();
        assert_eq!(stop.in_overload(), None);
        assert_eq!(stop.before_overload_ended(), None);
        assert_eq!(
            stop.drain_unseen(Duration::from_secs(10)).as_deref(),
            Some("the run stopped at 55 s, 5 s after the overload ended, before the 10 s it has to drain were over: the drain was not seen whole")
        );
        assert_eq!(stop.drain_unseen(Duration::from_secs(5)), None);
        // Without an overload, the load's end is what the drain follows.
        let mut calm = expect(None, 60_000, 3.0);
        calm.stopped_us = Some(at(30_000));
        let (e, stop) = covered(&calm);
        assert_eq!((e.overload, e.load_end_us), (None, at(30_000)));
        assert_eq!(
            stop.unwrap().drain_unseen(Duration::from_secs(5)).as_deref(),
            Some("the run stopped at 30 s, before the load ended at 60 s: the drain after it was never seen")
        );
    }
}
