//! `retry_amplification`: provider calls per gateway attempt, over the run
//! and in each scenario second.
//!
//! The calls are those the join gives each attempt (`timeline`'s docs):
//! every call carrying its request id received in its window, at whichever
//! provider, so a failover is a second call and each of the gateway's own
//! retries is one more. The attempts are those that reached a provider
//! (one call or more): an attempt the gateway refused itself cost the
//! providers nothing, and counting it would hide a storm behind the
//! gateway's own sheds (a gateway that cools a refusing provider down and
//! refuses most requests meanwhile, but retries each 429 it meets five
//! times at once, makes 0.7 calls per attempt sent against a quota of a
//! tenth of the load, and 3.5 per attempt it passed on). The attempts
//! sent are in the verdict beside them.
//!
//! Per second, a call counts in the second its attempt was sent
//! (`timeline.csv`'s `provider_calls` over `dispatched`), not the second
//! the provider received it: a second's ratio is then exactly what its
//! own attempts cost, and a gateway that holds a burst in its queue and
//! dispatches it into a quieter second does not read as retrying. A
//! second with fewer than `min_attempts` attempts passed on is not held
//! to the per-second bound: in a second of two, one failover reads 1.5.

use crate::expect::RetryAmplificationThreshold;
use crate::timeline::Second;
use crate::verdict::{count, num, percent, Figure, Status, Verdict};

use super::Evidence;

/// A ratio of calls to attempts, with two decimals: `1.00`, `3.61`.
fn per(ratio: f64) -> String {
    format!("{ratio:.2}")
}

/// The figure's unit and what it measures (README's tolerance table).
const UNIT: &str = "calls per attempt";
const MEASURES: &str = "provider calls per attempt";

/// Calls for attempts that reached a provider: of the run, or of its
/// second `t`.
struct Calls {
    t: u64,
    calls: u64,
    attempts: u64,
}

impl Calls {
    fn ratio(&self) -> f64 {
        self.calls as f64 / self.attempts.max(1) as f64
    }
}

/// Of the seconds with at least `min` attempts passed on: how many there
/// are, and the one with the most calls per attempt (the earliest of
/// equals).
fn worst_second(seconds: &[Second], min: u64) -> (usize, Option<Calls>) {
    let judged = seconds.iter().filter(|s| s.dispatched >= min.max(1));
    let n = judged.clone().count();
    let worst = judged
        .map(|s| Calls {
            t: s.t,
            calls: s.provider_calls,
            attempts: s.dispatched,
        })
        .reduce(|w, s| if s.ratio() > w.ratio() { s } else { w });
    (n, worst)
}

/// What the verdict saw: the run's calls, its attempts sent and passed
/// on, its worst second (`judged` seconds had `min` attempts passed on or
/// more), and the calls `recorded` that joined no attempt.
fn observed(
    seconds: &[Second],
    run: &Calls,
    recorded: u64,
    worst: Option<&Calls>,
    judged: usize,
    min: u64,
) -> String {
    let sent: u64 = seconds.iter().map(|s| s.sent).sum();
    let mut observed = format!(
        "{} provider calls for the {} attempts that reached a provider (of {} sent), {} per attempt",
        count(run.calls),
        count(run.attempts),
        count(sent),
        per(run.ratio())
    );
    match worst {
        Some(w) => observed.push_str(&format!(
            "; the worst second, at {} s: {} calls for {} attempts, {} per attempt ({} of {} seconds had {} attempts or more)",
            w.t,
            count(w.calls),
            count(w.attempts),
            per(w.ratio()),
            count(judged as u64),
            count(seconds.len() as u64),
            count(min),
        )),
        None => observed.push_str(&format!(
            "; no second had {} attempts that reached a provider, so none was held to the per-second bound",
            count(min)
        )),
    }
    if recorded > run.calls {
        observed.push_str(&format!(
            "; {} calls joined no attempt and are not counted",
            count(recorded - run.calls)
        ));
    }
    observed
}

/// `retry_amplification`: see the module docs.
pub(crate) fn retry_amplification(ev: &Evidence, th: &RetryAmplificationThreshold) -> Verdict {
    const ID: &str = crate::Check::RetryAmplification.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    let run = Calls {
        t: 0,
        calls: ev.seconds.iter().map(|s| s.provider_calls).sum(),
        attempts: ev.seconds.iter().map(|s| s.dispatched).sum(),
    };
    let recorded = ev.summary.provider.calls;
    if recorded == 0 {
        return Verdict::skipped(
            ID,
            "no provider calls",
            "no provider call was recorded, so there were no calls to multiply",
        );
    }
    let min = th.min_attempts.max(1);
    let predicted = format!(
        "at most {} provider calls per attempt that reached a provider over the run, and at most {} in any scenario second with {} such attempts or more (a call counted in the second its attempt was sent; a failover and each of the gateway's own retries is a call)",
        num(th.max_ratio, 2),
        num(th.max_ratio_per_second, 2),
        count(min),
    );
    if run.calls == 0 {
        return Verdict::new(
            ID,
            Status::Fail,
            "no call joined an attempt",
            predicted,
            format!("{} provider calls, none joined to an attempt", count(recorded)),
            format!(
                "none of the {} provider calls carried the request id of an attempt sent before it, so the calls made for each attempt cannot be counted: the gateway must pass the request body (which carries the id) through",
                count(recorded)
            ),
        );
    }
    let ratio = run.ratio();
    let (judged, worst) = worst_second(ev.seconds, min);
    let observed = observed(ev.seconds, &run, recorded, worst.as_ref(), judged, min);
    let busy = worst
        .as_ref()
        .filter(|w| w.ratio() > th.max_ratio_per_second);
    let (status, short, detail) = if ratio > th.max_ratio {
        (
            Status::Fail,
            format!(
                "{} calls per attempt (bound {})",
                per(ratio),
                num(th.max_ratio, 2)
            ),
            format!(
                "the gateway made {} provider calls for the {} attempts it passed on, {} each: its own retries multiply the load on providers that are refusing or failing; retry a refusal at most once and after its Retry-After, or pass it to another provider or back to the caller",
                count(run.calls),
                count(run.attempts),
                per(ratio),
            ),
        )
    } else if let Some(w) = busy {
        (
            Status::Fail,
            format!(
                "{} calls per attempt at {} s (bound {})",
                per(w.ratio()),
                w.t,
                num(th.max_ratio_per_second, 2)
            ),
            format!(
                "the gateway made {} provider calls for the {} attempts sent in the second from {} s that it passed on, {} each (over the run {}): a burst of its own retries piled onto the providers there; retry a refusal at most once and after its Retry-After",
                count(w.calls),
                count(w.attempts),
                w.t,
                per(w.ratio()),
                per(ratio),
            ),
        )
    } else {
        let at_most = worst.as_ref().map_or(String::new(), |w| {
            format!(", and at most {} in a second ({} s)", per(w.ratio()), w.t)
        });
        (
            Status::Pass,
            format!(
                "{} calls per attempt (bound {}){}",
                per(ratio),
                num(th.max_ratio, 2),
                worst.as_ref().map_or(String::new(), |w| format!(
                    "; {} at most in a second",
                    per(w.ratio())
                )),
            ),
            format!(
                "each attempt the gateway passed on cost the providers {} calls over the run, failovers included{}: its retries did not multiply the load",
                per(ratio),
                at_most,
            ),
        )
    };
    Verdict::new(ID, status, short, predicted, observed, detail)
        .with(Figure::higher(ratio, UNIT, MEASURES))
}

/// Adds to a judged `retry_amplification` verdict how many of the
/// providers' `calls` reached one inside a Retry-After window it had
/// announced (`inside`, as `cooldown_honoured` counts them): a storm's
/// retries land there.
pub(crate) fn in_retry_after_windows(v: &mut Verdict, inside: u64, calls: u64) {
    if calls == 0 || !matches!(v.status, Status::Pass | Status::Fail) {
        return;
    }
    let share = inside as f64 / calls as f64;
    v.observed.push_str(&format!(
        "; {} of the {} calls ({}) reached a provider inside a Retry-After window it had announced",
        count(inside),
        count(calls),
        percent(share),
    ));
    if v.status == Status::Fail {
        v.detail.push_str(&format!(
            " ({} of the calls came inside a Retry-After window the provider had announced)",
            percent(share)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stories::{self, attempt, call, Story};
    use crate::{judge, Judgement, Thresholds};
    use wire::{ClientOutcome, ProviderOutcome};

    /// A refusal from `provider` with a Retry-After of `ra_ms`, received
    /// at `ms`.
    fn refusal(id: &str, provider: &str, ms: u64, ra_ms: u64) -> wire::ProviderRecord {
        let mut c = call(id, ms, ms, ms + 1);
        c.provider = Some(provider.to_string());
        c.status = 429;
        c.outcome = ProviderOutcome::QuotaExceeded;
        c.admitted_us = None;
        c.first_byte_us = None;
        c.completion_tokens = 0;
        c.retry_after_ms = Some(ra_ms);
        c
    }

    /// `seconds` seconds of `per_s` attempts a second, each answered: in
    /// second `t`, its `k`th attempt first meets `refusals(t, k)` refusals
    /// (each from the provider named, 2 ms apart), then is answered by
    /// `secondary` if it was refused by `primary`, else by `primary`.
    fn traffic(
        seconds: u64,
        per_s: u64,
        refusals: impl Fn(u64, u64) -> Vec<&'static str>,
    ) -> Story {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for t in 0..seconds {
            for k in 0..per_s {
                let id = format!("a{t:03}-{k:03}");
                let ms = t * 1000 + k * 1000 / per_s;
                let before = refusals(t, k);
                let mut at = ms + 1;
                for p in &before {
                    calls.push(refusal(&id, p, at, 20_000));
                    at += 2;
                }
                let mut answer = call(&id, at, at, at + 300);
                let answered_by = if before.contains(&"primary") {
                    "secondary"
                } else {
                    "primary"
                };
                answer.provider = Some(answered_by.to_string());
                calls.push(answer);
                attempts.push(attempt(&id, 1, ms, at + 305, ClientOutcome::Ok, None));
            }
        }
        for (n, c) in calls.iter_mut().enumerate() {
            c.seq = n as u64;
        }
        Story {
            attempts,
            calls,
            rss: Vec::new(),
            expect: stories::expect(None, seconds * 1000, 30.0),
        }
    }

    fn amplification(s: &Story) -> (Judgement, Verdict) {
        let j = judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        let v = j.verdict("retry_amplification").unwrap().clone();
        (j, v)
    }

    #[test]
    fn one_call_per_attempt_passes() {
        let (j, v) = amplification(&traffic(20, 20, |_, _| Vec::new()));
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(
            v.short,
            "1.00 calls per attempt (bound 1.2); 1.00 at most in a second"
        );
        assert_eq!(
            v.observed,
            "400 provider calls for the 400 attempts that reached a provider (of 400 sent), 1.00 per attempt; the worst second, at 0 s: 20 calls for 20 attempts, 1.00 per attempt (20 of 21 seconds had 10 attempts or more)"
        );
        assert_eq!(
            v.detail,
            "each attempt the gateway passed on cost the providers 1.00 calls over the run, failovers included, and at most 1.00 in a second (0 s): its retries did not multiply the load"
        );
        let f = v.figure.unwrap();
        assert_eq!(
            (f.value, f.unit, f.worse),
            (1.0, "calls per attempt", crate::Worse::Higher)
        );
        assert!(j
            .timeline
            .seconds
            .iter()
            .take(20)
            .all(|s| s.provider_calls == 20 && s.sent == 20));
        assert!(j
            .timeline
            .to_csv()
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("0,20,20,20,"));
    }

    /// For three seconds the primary refuses every call and each attempt
    /// fails over once to the secondary: 2 calls per attempt there (the
    /// bound, held), 1.15 over the run.
    #[test]
    fn failing_over_once_passes() {
        let mut s = traffic(20, 20, |t, _| {
            if (5..8).contains(&t) {
                vec!["primary"]
            } else {
                Vec::new()
            }
        });
        // Each refusal asks for 40 ms, over before the next attempt (50 ms
        // later) tries the primary.
        for c in &mut s.calls {
            if c.status == 429 {
                c.retry_after_ms = Some(40);
            }
        }
        let (j, v) = amplification(&s);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(v.figure.unwrap().value, 1.15);
        assert!(
            v.observed
                .contains("the worst second, at 5 s: 40 calls for 20 attempts, 2.00 per attempt"),
            "{}",
            v.observed
        );
        // The primary announced Retry-After windows and every failover's
        // call went to the secondary: none inside them.
        assert!(
            v.observed.ends_with("; 0 of the 460 calls (0%) reached a provider inside a Retry-After window it had announced"),
            "{}",
            v.observed
        );
        assert_eq!(j.verdict("cooldown_honoured").unwrap().status, Status::Pass);
    }

    /// A gateway that retries each 429 five times at once, against a
    /// primary whose quota refuses three attempts in five: 6 calls for
    /// those, 1 for the others, 4 per attempt.
    #[test]
    fn five_retries_of_each_refusal_fail_with_the_ratio() {
        let s = traffic(20, 20, |_, k| {
            if k % 5 < 3 {
                vec!["primary"; 6]
            } else {
                Vec::new()
            }
        });
        // The sixth refusal is passed on as it is: the attempt is not
        // answered, and no secondary is called.
        let mut s = s;
        s.calls
            .retain(|c| !(c.status == 200 && c.provider.as_deref() == Some("secondary")));
        for a in &mut s.attempts {
            let k: u64 = a.id[5..].parse().unwrap();
            if k % 5 < 3 {
                a.outcome = ClientOutcome::UpstreamRefused;
                a.status = Some(429);
            }
        }
        let (_, v) = amplification(&s);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.figure.unwrap().value, 4.0);
        assert_eq!(v.short, "4.00 calls per attempt (bound 1.2)");
        assert!(
            v.detail.starts_with("the gateway made 1,600 provider calls for the 400 attempts it passed on, 4.00 each: its own retries multiply"),
            "{}",
            v.detail
        );
        // Every call after the run's first few milliseconds comes inside
        // the 20 s window some refusal announced (the first refusal's own
        // retries, 2 ms apart, are within the grace: already on their way).
        assert!(
            v.observed.ends_with(
                "; 1,594 of the 1,600 calls (99.6%) reached a provider inside a Retry-After window it had announced"
            ),
            "{}",
            v.observed
        );
        assert!(
            v.detail.ends_with(
                " (99.6% of the calls came inside a Retry-After window the provider had announced)"
            ),
            "{}",
            v.detail
        );
    }

    /// Nineteen quiet seconds and one in which every attempt was retried
    /// twice: 1.1 per attempt over the run, within its bound, but 3 in that
    /// second.
    #[test]
    fn one_busy_second_fails_the_per_second_bound() {
        let s = traffic(20, 20, |t, _| {
            if t == 12 {
                vec!["primary", "primary"]
            } else {
                Vec::new()
            }
        });
        let (_, v) = amplification(&s);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.figure.unwrap().value, 1.1);
        assert_eq!(v.short, "3.00 calls per attempt at 12 s (bound 2)");
        assert!(
            v.detail.starts_with("the gateway made 60 provider calls for the 20 attempts sent in the second from 12 s that it passed on, 3.00 each (over the run 1.10)"),
            "{}",
            v.detail
        );
        // With a minimum above the second's 20 attempts it is not judged.
        let mut t = Thresholds::default();
        t.retry_amplification.min_attempts = 21;
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        let v = j.verdict("retry_amplification").unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.observed
                .contains("no second had 21 attempts that reached a provider"),
            "{}",
            v.observed
        );
        assert_eq!(
            v.detail,
            "each attempt the gateway passed on cost the providers 1.10 calls over the run, failovers included: its retries did not multiply the load"
        );
    }

    /// Calls are counted in the second their attempt was sent: a burst
    /// held in the gateway and dispatched a second later is not a retry.
    #[test]
    fn a_call_counts_in_its_attempts_second() {
        let mut s = traffic(4, 20, |_, _| Vec::new());
        for c in &mut s.calls {
            if c.id.starts_with("a001") {
                for t in [
                    &mut c.received_us,
                    c.admitted_us.as_mut().unwrap(),
                    c.first_byte_us.as_mut().unwrap(),
                    c.finished_us.as_mut().unwrap(),
                ] {
                    *t += 1_000_000;
                }
            }
        }
        for a in &mut s.attempts {
            if a.id.starts_with("a001") {
                a.done_us += 1_000_000;
            }
        }
        let (j, v) = amplification(&s);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let calls: Vec<u64> = j
            .timeline
            .seconds
            .iter()
            .map(|s| s.provider_calls)
            .take(4)
            .collect();
        assert_eq!(calls, [20, 20, 20, 20]);
    }

    /// The stories' gateways call the provider once for each attempt they
    /// pass on (the bounded one sheds some itself: no call, not counted).
    #[test]
    fn the_stories_pass() {
        for s in [stories::bounded(), stories::naive()] {
            let (j, v) = amplification(&s);
            assert_eq!(v.status, Status::Pass, "{v:?}");
            assert_eq!(v.figure.unwrap().value, 1.0, "{v:?}");
            let dispatched: u64 = j.timeline.seconds.iter().map(|s| s.dispatched).sum();
            assert_eq!(dispatched, j.summary.provider.calls);
        }
        let (j, _) = amplification(&stories::bounded());
        assert!(j.summary.counts.shed > 0);
    }

    /// A gateway that refuses four attempts in five itself (its provider
    /// cooling) and retries each 429 of the fifth five times at once: 1.2
    /// calls per attempt sent, which would pass, but 6 for each it passed
    /// on.
    #[test]
    fn a_storm_behind_the_gateways_own_sheds_still_fails() {
        let mut s = traffic(20, 20, |_, k| {
            if k % 5 == 0 {
                vec!["primary"; 5]
            } else {
                Vec::new()
            }
        });
        let storms: std::collections::HashSet<String> = s
            .calls
            .iter()
            .filter(|c| c.status == 429)
            .map(|c| c.id.clone())
            .collect();
        // The others are shed, never reaching the provider.
        s.calls.retain(|c| storms.contains(&c.id));
        for a in &mut s.attempts {
            if !storms.contains(&a.id) {
                a.outcome = ClientOutcome::Shed;
                a.status = Some(503);
                a.done_us = a.sent_us + 1_000;
            }
        }
        let (j, v) = amplification(&s);
        assert_eq!(
            j.summary.provider.calls as f64 / j.summary.counts.sent as f64,
            1.2
        );
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.figure.unwrap().value, 6.0);
        assert!(
            v.observed.starts_with("480 provider calls for the 80 attempts that reached a provider (of 400 sent), 6.00 per attempt"),
            "{}",
            v.observed
        );
    }

    #[test]
    fn skipped_without_calls_and_failed_when_none_joins() {
        let mut s = traffic(2, 20, |_, _| Vec::new());
        let calls = std::mem::take(&mut s.calls);
        let (_, v) = amplification(&s);
        assert_eq!(
            (v.status, v.short.as_str()),
            (Status::Skipped, "no provider calls")
        );
        // Calls whose ids no attempt carries: nothing to count them by.
        s.calls = calls;
        for c in &mut s.calls {
            c.id = format!("x{}", c.id);
        }
        let (_, v) = amplification(&s);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.observed, "40 provider calls, none joined to an attempt");
        // Turned off, it says so.
        let mut t = Thresholds::default();
        t.retry_amplification.enabled = false;
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(
            j.verdict("retry_amplification").unwrap().status,
            Status::Off
        );
    }

    fn second(t: u64, dispatched: u64, calls: u64) -> Second {
        Second {
            sent: dispatched + 1,
            dispatched,
            provider_calls: calls,
            ..Second::empty(t)
        }
    }

    #[test]
    fn the_worst_second_is_the_earliest_of_the_highest_among_those_judged() {
        let seconds = [
            second(0, 3, 9),
            second(1, 10, 12),
            second(2, 12, 18),
            second(3, 10, 15),
        ];
        let (n, w) = worst_second(&seconds, 10);
        let w = w.unwrap();
        assert_eq!((n, w.t, w.calls, w.attempts), (3, 2, 18, 12));
        // From one attempt, the second of three with 9 calls is judged.
        assert_eq!(worst_second(&seconds, 1).1.unwrap().t, 0);
        // A minimum of 0 is 1: an empty second is never judged.
        let (n, w) = worst_second(&[second(0, 0, 0)], 0);
        assert_eq!((n, w.is_none()), (0, true));
    }
}
