//! `cancel_on_hangup`: of the provider calls in service when their caller
//! gave up, the share the gateway hung up on promptly; the tokens made for
//! nobody.
//!
//! A caller who gives up (its patience ran out: the client hung up) leaves
//! the gateway with the provider call it made for it still running. A
//! gateway that cancels its upstream call when its client goes stops the
//! provider's work; one that does not lets the call run to its end, its
//! tokens paid for and read by nobody. `stale_dispatch` counts the calls a
//! gateway *started* after their caller left; this check counts the ones
//! it left running. The figures are counted as each call joins its caller
//! (`tally::after_hangup`): counts, not lists, whatever the run's length.

use std::time::Duration;

use crate::expect::CancelOnHangupThreshold;
use crate::verdict::{count, num, percent, plural, Figure, Status, Verdict, Worse};

use super::Evidence;

/// `cancel_on_hangup`: of the provider calls still running when their
/// caller gave up, at least `min_share` were hung up on by the gateway
/// within `within` of the caller leaving. Skipped when no call was in
/// service when its caller gave up (nobody gave up, or nobody who had a
/// call running); the tokens made after callers left, an estimate, are in
/// the verdict beside the calls `stale_dispatch` counts.
pub(crate) fn cancel_on_hangup(ev: &Evidence, th: &CancelOnHangupThreshold) -> Verdict {
    const ID: &str = crate::Check::CancelOnHangup.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    let p = &ev.summary.provider;
    if p.calls == 0 {
        return Verdict::skipped(
            ID,
            "no provider calls",
            "no data: the fake provider recorded no calls, so no call left running for a caller who gave up could be seen",
        );
    }
    let within = duration(th.within);
    let running = p.running_at_hangup;
    if running == 0 {
        let why = if ev.summary.counts.timeout == 0 {
            "no caller gave up (no attempt timed out), so there was no call to cancel"
        } else {
            "no provider call was still running when its caller gave up (each had ended, or none had been made), so there was no call to cancel"
        };
        return Verdict::skipped(ID, "no call in service when its caller left", why);
    }
    let cancelled = p.cancelled_at_hangup;
    let share = cancelled as f64 / running as f64;
    let status = if share >= th.min_share {
        Status::Pass
    } else {
        Status::Fail
    };
    let predicted = format!(
        "at least {} of the calls running when their caller gave up hung up on within {within}",
        percent(th.min_share)
    );
    let tokens = format!(
        "{} made after their callers left",
        plural(p.tokens_after_hangup, "token", "tokens")
    );
    let observed = format!(
        "{} of {} hung up on within {within} ({}); {tokens} (estimated)",
        count(cancelled),
        count(running),
        percent(share)
    );
    let stale = format!(
        "{} started after their caller had left (stale_dispatch)",
        plural(p.stale_dispatch, "call was", "calls were")
    );
    let left = running - cancelled;
    let detail = if status == Status::Pass {
        format!(
            "the gateway hung up on {} of the {} provider calls still running when their caller gave up within {within}; {tokens} (estimated from each call's tokens and the share of its generation that came after its caller left); {stale}",
            count(cancelled),
            count(running),
        )
    } else {
        format!(
            "{} of the {} provider calls still running when their caller gave up ran on past {within} after the caller left: cancel the upstream call when the client disconnects; {tokens} (estimated from each call's tokens and the share of its generation that came after its caller left); {stale}",
            count(left),
            count(running),
        )
    };
    let short = format!(
        "{} of {} calls cancelled within {within}, {} (bound {})",
        count(cancelled),
        count(running),
        percent(share),
        percent(th.min_share)
    );
    let figure = Figure {
        worse: Worse::Lower,
        ..Figure::higher(
            share,
            "share",
            "calls hung up on promptly after their caller left",
        )
    };
    Verdict::new(ID, status, short, predicted, observed, detail).with(figure)
}

/// A bound of time as a person reads it: `1 s`, `1.5 s`, `100 ms`.
fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{} s", num(s, 1))
    } else {
        format!("{} ms", num(s * 1000.0, 1))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wire::{ClientOutcome, ProviderRecord};

    use crate::stories::{self, at, attempt, call, Story};
    use crate::{judge, Judgement, Status, Thresholds, Verdict};

    const ID: &str = "cancel_on_hangup";

    /// Twenty callers, one every 200 ms, who give up after 1 s on calls
    /// that take 3 s (streamed: the first token at 500 ms, 20 tokens);
    /// `end` says how each call ended, given when its caller left (ms).
    fn story(end: impl Fn(&mut ProviderRecord, u64)) -> Story {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for p in 0..20u64 {
            let id = format!("h{p:02}");
            let sent = p * 200;
            let mut a = attempt(&id, 1, sent, sent + 1_000, ClientOutcome::Timeout, None);
            a.patience_ms = 1_000;
            attempts.push(a);
            let mut c = call(&id, sent + 1, sent + 1, sent + 3_001);
            c.stream = true;
            c.first_byte_us = Some(at(sent + 501));
            c.completion_tokens = 20;
            end(&mut c, sent + 1_000);
            calls.push(c);
        }
        Story {
            attempts,
            calls,
            rss: Vec::new(),
            expect: stories::expect(None, 4_000, 1.0),
        }
    }

    /// The gateway hangs up `after_ms` after the caller left: the provider
    /// stops there, having sent the tokens made until then.
    fn hung_up(after_ms: u64) -> impl Fn(&mut ProviderRecord, u64) {
        move |c, left_ms| {
            let end = at(left_ms + after_ms);
            c.hung_up_us = Some(end);
            c.finished_us = Some(end);
            // 20 tokens over 2.5 s from the first byte: 8 a second.
            c.completion_tokens = ((left_ms + after_ms - (left_ms - 499)) * 8 / 1000) as u32;
        }
    }

    fn run(s: &Story, t: &Thresholds) -> Judgement {
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, t);
        // The one pass and the batch judge count the same.
        let oracle = crate::oracle::judge(&s.attempts, &s.calls, &s.rss, &s.expect, t);
        assert_eq!(j.summary.provider, oracle.summary.provider);
        assert_eq!(j.verdict(ID), oracle.verdict(ID));
        j
    }

    fn verdict(j: &Judgement) -> Verdict {
        j.verdict(ID).expect("judged in every run").clone()
    }

    #[test]
    fn calls_hung_up_50_ms_after_the_caller_left_pass() {
        let j = run(&story(hung_up(50)), &Thresholds::default());
        let v = verdict(&j);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let p = j.summary.provider;
        assert_eq!((p.running_at_hangup, p.cancelled_at_hangup), (20, 20));
        // Each call sent 12 tokens in its 1.55 s from the first byte, 50 ms
        // of it after the caller left: 0.4 of a token, rounded to none.
        assert_eq!(p.tokens_after_hangup, 0);
        assert_eq!(
            v.short,
            "20 of 20 calls cancelled within 1 s, 100% (bound 90%)"
        );
        let f = v.figure.expect("a figure");
        assert_eq!((f.value, f.unit), (1.0, "share"));
        assert_eq!(f.worse, crate::Worse::Lower);
    }

    #[test]
    fn calls_that_run_to_their_end_fail_with_the_tokens_made_for_nobody() {
        let j = run(&story(|_, _| {}), &Thresholds::default());
        let v = verdict(&j);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        let p = j.summary.provider;
        assert_eq!((p.running_at_hangup, p.cancelled_at_hangup), (20, 0));
        // 20 tokens from 0.5 s to 3 s, the caller gone at 1 s: 0.8 of
        // them, 16 a call.
        assert_eq!(p.tokens_after_hangup, 20 * 16);
        assert_eq!(
            v.short,
            "0 of 20 calls cancelled within 1 s, 0% (bound 90%)"
        );
        assert_eq!(
            v.detail,
            "20 of the 20 provider calls still running when their caller gave up ran on past 1 s after the caller left: cancel the upstream call when the client disconnects; 320 tokens made after their callers left (estimated from each call's tokens and the share of its generation that came after its caller left); 0 calls were started after their caller had left (stale_dispatch)"
        );
        assert_eq!(v.figure.map(|f| f.value), Some(0.0));
    }

    /// Hung up on 2 s after the caller left: too late at the default
    /// bound, in time at a bound of 3 s.
    #[test]
    fn a_hang_up_counts_within_the_bound_only() {
        let late = story(hung_up(2_000));
        let j = run(&late, &Thresholds::default());
        assert_eq!(verdict(&j).status, Status::Fail);
        // 19 tokens sent from the first byte to the hang-up (2.5 s), the
        // last 2 s of it after the caller left: 15 a call.
        assert_eq!(j.summary.provider.tokens_after_hangup, 20 * 15);
        let mut t = Thresholds::default();
        t.cancel_on_hangup.within = Duration::from_secs(3);
        assert_eq!(verdict(&run(&late, &t)).status, Status::Pass);
        // Half the calls cut off in time: 50%, under 90%.
        let mut half = story(hung_up(50));
        for c in half.calls.iter_mut().step_by(2) {
            c.hung_up_us = None;
            c.finished_us = Some(c.received_us + 3_000_000);
            c.completion_tokens = 20;
        }
        let v = verdict(&run(&half, &Thresholds::default()));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.short,
            "10 of 20 calls cancelled within 1 s, 50% (bound 90%)"
        );
        t.cancel_on_hangup.min_share = 0.5;
        assert_eq!(verdict(&run(&half, &t)).status, Status::Pass);
    }

    /// Rehearsed 10 times faster, the bound is 100 ms: a hang-up 5 ms
    /// after the caller left (50 ms of scenario time) is in time, one
    /// 200 ms after (2 s) is not.
    #[test]
    fn the_bound_is_scaled_with_the_run() {
        let t = Thresholds::default().scaled(wire::Scale {
            time: 10.0,
            quota: 1.0,
        });
        let fast = stories::compressed(&story(hung_up(50)), 10);
        let v = verdict(&run(&fast, &t));
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.short.ends_with("within 100 ms, 100% (bound 90%)"),
            "{v:?}"
        );
        let slow = stories::compressed(&story(hung_up(2_000)), 10);
        assert_eq!(verdict(&run(&slow, &t)).status, Status::Fail);
    }

    #[test]
    fn none_in_service_when_its_caller_left_is_skipped() {
        // Everyone answered: nobody gave up.
        let mut answered = story(|_, _| {});
        for (a, c) in answered.attempts.iter_mut().zip(&answered.calls) {
            a.outcome = ClientOutcome::Ok;
            a.status = Some(200);
            a.done_us = c.finished_us.expect("finished") + 1_000;
            a.patience_ms = 5_000;
        }
        let v = verdict(&run(&answered, &Thresholds::default()));
        assert_eq!(v.status, Status::Skipped);
        assert_eq!(
            v.detail,
            "no caller gave up (no attempt timed out), so there was no call to cancel"
        );
        // Callers gave up, but their calls had ended (a provider error
        // the gateway did not pass on), or ended by themselves 20 ms
        // after they left: nothing to cancel.
        let mut ended = story(|c, left_ms| {
            c.finished_us = Some(at(left_ms - 300));
            c.status = 500;
            c.outcome = wire::ProviderOutcome::ErrorStatus;
        });
        for c in ended.calls.iter_mut().step_by(2) {
            c.finished_us = Some(c.received_us + 1_019_000);
            c.status = 200;
            c.outcome = wire::ProviderOutcome::Ok;
        }
        let j = run(&ended, &Thresholds::default());
        let v = verdict(&j);
        assert_eq!(v.status, Status::Skipped, "{v:?}");
        assert!(v.detail.starts_with("no provider call was still running"));
        assert_eq!(v.short, "no call in service when its caller left");
        // The ones that ended after the callers left made a little for
        // nobody all the same: 20 tokens over 519 ms, 19 ms of it after.
        assert_eq!(j.summary.provider.tokens_after_hangup, 10);
        // Turned off: says so.
        let mut off = Thresholds::default();
        off.cancel_on_hangup.enabled = false;
        let v = verdict(&run(&story(|_, _| {}), &off));
        assert_eq!(
            (v.status, v.short.as_str()),
            (Status::Off, "turned off in [checklist]")
        );
    }

    /// A caller who gave up while their call waited in the provider's
    /// queue: in service (received), and stale when admitted after; run to
    /// its end, every token after the caller left.
    #[test]
    fn a_call_queued_at_the_provider_when_its_caller_left_is_counted() {
        let s = story(|c, left_ms| {
            c.admitted_us = Some(at(left_ms + 500));
            c.first_byte_us = Some(at(left_ms + 1_000));
        });
        let j = run(&s, &Thresholds::default());
        let p = j.summary.provider;
        assert_eq!((p.running_at_hangup, p.stale_dispatch), (20, 20));
        assert_eq!(p.tokens_after_hangup, 20 * 20);
        let v = verdict(&j);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.detail
                .ends_with("; 20 calls were started after their caller had left (stale_dispatch)"),
            "{}",
            v.detail
        );
    }

    /// The naive story: callers who gave up after 30 s, their calls still
    /// queued at the provider (97 of them, all stale too) and run to their
    /// end; 9 more, admitted before and ending after, are still running
    /// then, each answered within 1 s by itself.
    #[test]
    fn the_naive_story_fails_it() {
        let j = run(&stories::naive(), &Thresholds::default());
        let p = j.summary.provider;
        assert_eq!((p.running_at_hangup, p.cancelled_at_hangup), (97, 0));
        assert_eq!(p.stale_dispatch, 97);
        // 50 tokens each for the 97 admitted after their caller left,
        // some of the 50 of the others.
        assert!(
            (97 * 50..106 * 50).contains(&p.tokens_after_hangup),
            "{p:?}"
        );
        let v = verdict(&j);
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.short,
            "0 of 97 calls cancelled within 1 s, 0% (bound 90%)"
        );
    }

    /// The load generator takes an attempt's end just after it drops the
    /// connection, so a gateway that cancels at once can reach the
    /// provider a little before it: a hang-up 1 ms before the recorded
    /// leaving answers it; one 50 ms before ended the call before the
    /// caller left (the gateway's own doing), nothing to cancel.
    #[test]
    fn a_hang_up_just_before_the_recorded_leaving_is_its_answer() {
        let mut s = story(|c, left_ms| {
            let end = at(left_ms) - 1_000;
            c.hung_up_us = Some(end);
            c.finished_us = Some(end);
            c.completion_tokens = 4;
        });
        for c in s.calls.iter_mut().step_by(2) {
            let end = c.hung_up_us.expect("hung up") - 49_000;
            c.hung_up_us = Some(end);
            c.finished_us = Some(end);
        }
        let j = run(&s, &Thresholds::default());
        let p = j.summary.provider;
        assert_eq!((p.running_at_hangup, p.cancelled_at_hangup), (10, 10));
        assert_eq!(p.tokens_after_hangup, 0);
        assert_eq!(verdict(&j).status, Status::Pass);
    }
}
