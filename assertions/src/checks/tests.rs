//! The checks told as stories (`crate::stories`): each judged whole, as a
//! run is, and read for the verdict of the check it is about.

use std::time::Duration;

use wire::{ClientOutcome, ClientRecord, ProviderRecord, RssSample};

use crate::stories::{self, at, attempt, call, expect, Story, MIB};
use crate::{judge, Judgement, Status, Thresholds, Verdict};

fn run(s: &Story, t: &Thresholds) -> Judgement {
    judge(&s.attempts, &s.calls, &s.rss, &s.expect, t)
}

/// The defaults, with five seconds to drain (the stories are short).
fn five_seconds() -> Thresholds {
    let mut t = Thresholds::default();
    t.drain.within = Duration::from_secs(5);
    t
}

fn verdict(j: &Judgement, id: &str) -> Verdict {
    j.verdict(id).expect("every check has a verdict").clone()
}

fn status(j: &Judgement, id: &str) -> Status {
    verdict(j, id).status
}

fn detail(j: &Judgement, id: &str) -> String {
    verdict(j, id).detail
}

/// Every verdict says what it saw in a few words: under 70 characters,
/// so that the checklist's line (mark and id before it) fits in 100
/// columns.
#[test]
fn every_verdict_has_a_short_line() {
    let empty = Story {
        attempts: vec![],
        calls: vec![],
        rss: vec![],
        expect: stories::bounded().expect,
    };
    for (story, t) in [
        (stories::bounded(), five_seconds()),
        (stories::naive(), five_seconds()),
        (stories::naive(), Thresholds::default()),
        (empty, five_seconds()),
    ] {
        for v in run(&story, &t).verdicts {
            let n = v.short.chars().count();
            assert!((1..70).contains(&n), "{}: {:?}", v.id, v.short);
        }
    }
}

#[test]
fn the_bounded_story_passes_every_check() {
    let j = run(&stories::bounded(), &five_seconds());
    for v in &j.verdicts {
        // No stream in it: no cut to judge, no stream to see delivered.
        // Nobody gives up in it (the callers shed retry once, inside
        // their patience): no call left running for a caller gone, so
        // `cancel_on_hangup` rightly has nothing to judge. Its load goes
        // on 4.5 s after the overload's end and the 5 s to drain: too
        // little to tell a gateway that recovers (recovery needs 10
        // scenario seconds).
        let skipped = [
            "no_silent_truncation",
            "stream_intact",
            "cancel_on_hangup",
            "recovery",
        ];
        let want = if skipped.contains(&v.id) {
            Status::Skipped
        } else {
            Status::Pass
        };
        assert_eq!(v.status, want, "{v:?}");
    }
    assert_eq!(j.overall, Status::Pass);
    assert_eq!(
        verdict(&j, "recovery").short,
        "under 10 s of load after the trouble"
    );
    assert_eq!(
        detail(&j, "shed_onset"),
        "sheds on time: 11 requests were waiting at the first shed, within the bound of 24 (Q* = 16, +50%) that keeps them inside 3 s"
    );
    assert_eq!(
        verdict(&j, "shed_onset").predicted,
        "first shed at a depth of at most 24 (Q* = 8/s × (3 s − 1 s) = 16, +50%), with 8 more in service at the provider"
    );
    let ra = detail(&j, "retry_after");
    assert!(ra.starts_with("all 62 sheds carried a Retry-After"), "{ra}");
    assert!(
        ra.ends_with("12 of 13 retries that honoured Retry-After after the overload were admitted"),
        "{ra}"
    );
    let drain_s = j.summary.drain_s.expect("drained");
    assert!(drain_s > 0.0 && drain_s <= 5.0, "{drain_s}");
    // Nobody waited before the overload (p99 0, bound 1.6); after it
    // the backlog reads 12, 9, 9, 5, then 0: the mean centred on 25 s
    // is the first within the bound for good.
    assert_eq!(j.summary.drain_s, Some(5.0));
    assert_eq!(
        detail(&j, "drain"),
        "the backlog was back within its bound 5 s after the overload ended and stayed there (the backlog's mean over 5 scenario seconds at most 1.6; baseline: 10 s measured before the overload, p99 0 waiting), down from 12 waiting"
    );
    assert_eq!(
        detail(&j, "goodput"),
        "76 answers in the 10 s overload is 7.6/s, 95% of capacity μ = 8/s (the provider answered 7.6/s); at least 80% is required"
    );
}

#[test]
fn the_naive_story_fails_with_numbers_that_explain_why() {
    let s = stories::naive();
    let j = run(&s, &five_seconds());
    assert_eq!(j.overall, Status::Fail);
    // 4/s before the overload keep 4 of 8 slots busy; 400 arrive in the
    // window and 80 are admitted (8/s for 10 s): 320 wait at its end.
    // Q* = 8/s × (30 s − 1 s) = 232.
    assert_eq!(status(&j, "shed_onset"), Status::Fail);
    assert_eq!(
        detail(&j, "shed_onset"),
        "never shed: 320 requests were queued at the peak, within the bound of 348 (Q* = 232, +50%), through a predicted overload: what it could not serve inside 30 s was left to the provider (its queue, its refusals passed through) and to the callers' patience; shed at admission instead, once 348 wait"
    );
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    assert_eq!(
        detail(&j, "retry_after"),
        "never shed, so no Retry-After was ever given: 320 requests were queued at the peak"
    );
    // The baseline's p99 is 1 (each call spends 200 µs in the gateway
    // before the overload), the margin 10% of Q*: a bound of 24.2. The
    // last second's arrivals (40 of them, 19 to 20 s) give up 30 s
    // later, still queued at the provider: the mean centred on 50 s is
    // the first within the bound for good.
    assert_eq!(status(&j, "drain"), Status::Fail);
    assert_eq!(
        detail(&j, "drain"),
        "the backlog took 30 s to come back within its bound after the overload (the backlog's mean over 5 scenario seconds at most 24.2; baseline: 10 s measured before the overload, p99 1 waiting; 320 waiting at most), over the allowed 5 s"
    );
    assert_eq!(j.summary.drain_s, Some(30.0));
    // Counted here straight from the story: person i's call is calls[i].
    let stale: Vec<usize> = (0..s.attempts.len())
        .filter(|&i| s.calls[i].admitted_us.unwrap() > s.attempts[i].done_us)
        .collect();
    let late = (0..s.attempts.len())
        .filter(|&i| s.calls[i].finished_us.unwrap() > s.attempts[i].done_us)
        .count();
    assert_eq!(stale.len(), 97);
    assert_eq!(late, 106);
    assert_eq!(status(&j, "stale_dispatch"), Status::Fail);
    assert_eq!(
        detail(&j, "stale_dispatch"),
        format!(
            "97 of 440 provider calls (22%) were made for callers who had already left, wasting {} tokens; 106 answers were written after the caller left",
            crate::verdict::count(stale.len() as u64 * 150)
        )
    );
    assert_eq!(status(&j, "memory_ceiling"), Status::Fail);
    assert!(detail(&j, "memory_ceiling").starts_with(
        "memory reached 378 MiB 20 s into the run, over the 200 MiB ceiling: bound what the gateway holds per waiting request; what the gateway keeps after the load was not measured"
    ));
    assert_eq!(status(&j, "no_silent_loss"), Status::Fail);
    assert_eq!(
        detail(&j, "no_silent_loss"),
        "106 of 440 attempts ended without an answer or a shed (106 timeouts): the gateway must answer or shed inside the caller's patience"
    );
    assert_eq!(status(&j, "harness_valid"), Status::Pass);
}

#[test]
fn shed_onset_fails_late_notes_early_and_skips_without_overload() {
    let mut s = stories::bounded();
    s.expect.queue_bound = 4.0;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "shed_onset"), Status::Fail);
    assert_eq!(
        detail(&j, "shed_onset"),
        "sheds late: 11 requests were waiting at the first shed, over the bound of 6 (Q* = 4, +50%) that keeps them inside 3 s"
    );
    s.expect.queue_bound = f64::NAN;
    assert_eq!(
        status(&run(&s, &five_seconds()), "shed_onset"),
        Status::Fail
    );
    s.expect.queue_bound = 100.0;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "shed_onset"), Status::Pass);
    assert_eq!(
        detail(&j, "shed_onset"),
        "sheds early: 11 requests were waiting at the first shed, under a quarter of Q* = 100; capacity may be left unused"
    );
    s.expect.overload = None;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "shed_onset"), Status::Skipped);
    assert_eq!(status(&j, "goodput"), Status::Skipped);
    let mut t = five_seconds();
    t.shed_onset.enabled = false;
    let j = run(&stories::naive(), &t);
    assert_eq!(
        status(&j, "shed_onset"),
        Status::Off,
        "off is neither pass nor skip"
    );
    assert_eq!(detail(&j, "shed_onset"), "turned off in [checklist]");
}

/// The bounded story with every gateway shed's Retry-After rewritten.
fn bounded_with_retry_after(mut f: impl FnMut(u64) -> Option<u64>) -> Story {
    let mut s = stories::bounded();
    for a in &mut s.attempts {
        if let Some(ra) = a.retry_after_ms {
            a.retry_after_ms = f(ra);
        }
    }
    s
}

#[test]
fn retry_after_fails_when_constant_missing_or_untrue() {
    let j = run(&bounded_with_retry_after(|_| Some(1_000)), &five_seconds());
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    assert!(detail(&j, "retry_after")
        .starts_with("Retry-After never varies: 62 sheds said 1,000 ms whatever the backlog"));

    let mut k = 0;
    let j = run(
        &bounded_with_retry_after(|ra| {
            k += 1;
            (k % 2 == 0).then_some(ra)
        }),
        &five_seconds(),
    );
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    assert!(detail(&j, "retry_after").starts_with("31 of 62 sheds carried no Retry-After"));

    let j = run(
        &bounded_with_retry_after(|ra| Some(ra * 10)),
        &five_seconds(),
    );
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    let d = detail(&j, "retry_after");
    assert!(
        d.starts_with("Retry-After is off the backlog drain time by"),
        "{d}"
    );
    assert!(
        d.contains("refusals were within max(their header's granularity, 25% of the drain time), under half"),
        "{d}"
    );
}

#[test]
fn retry_after_fails_when_honouring_retries_are_shed_again() {
    let mut s = stories::bounded();
    let after = s.expect.overload.unwrap().1;
    for a in &mut s.attempts {
        if a.attempt == 2 && a.sent_us >= after {
            a.outcome = ClientOutcome::Shed;
        }
    }
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    assert_eq!(
        detail(&j, "retry_after"),
        "only 0 of 13 retries that honoured Retry-After after the overload were admitted"
    );
}

/// Over fewer than HONOURED_MIN honouring retries the share is noise:
/// three, all shed, do not fail the check (and the detail says why).
#[test]
fn a_few_honouring_retries_shed_are_too_few_to_judge() {
    let mut s = stories::bounded();
    let after = s.expect.overload.unwrap().1;
    let mut kept = 0;
    s.attempts.retain(|a| {
        if a.attempt == 2 && a.sent_us >= after {
            kept += 1;
            kept <= 3
        } else {
            true
        }
    });
    for a in &mut s.attempts {
        if a.attempt == 2 && a.sent_us >= after {
            a.outcome = ClientOutcome::Shed;
        }
    }
    let j = run(&s, &five_seconds());
    let d = detail(&j, "retry_after");
    assert!(!d.starts_with("only 0 of"), "{d}");
    let observed = verdict(&j, "retry_after").observed;
    assert!(
        observed.contains("0/3 honouring retries admitted"),
        "{observed}"
    );
}

#[test]
fn retries_without_patience_left_are_not_judged() {
    let mut s = stories::bounded();
    let after = s.expect.overload.unwrap().1;
    for a in &mut s.attempts {
        if a.attempt == 2 && a.sent_us >= after {
            a.outcome = ClientOutcome::Shed;
            // Only a sliver of patience was left: a deadline-aware
            // gateway is right to shed it.
            a.patience_ms = (a.sent_us - a.intended_us) / 1000 + 1;
        }
    }
    let j = run(&s, &five_seconds());
    let d = detail(&j, "retry_after");
    assert!(!d.starts_with("only 0 of"), "{d}");
}

#[test]
fn retry_after_without_retries_judges_the_rest_and_says_so() {
    let mut s = stories::bounded();
    // The retries, and the calls they made.
    let retried: std::collections::HashSet<String> = s
        .attempts
        .iter()
        .filter(|a| a.attempt > 1)
        .map(|a| a.id.clone())
        .collect();
    s.attempts.retain(|a| a.attempt == 1);
    s.calls.retain(|c| !retried.contains(&c.id));
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "retry_after"), Status::Pass);
    assert!(detail(&j, "retry_after").ends_with(
        "no retry honoured a Retry-After after the overload (retry policy none?), so admission was not judged"
    ));
}

#[test]
fn memory_ceiling_fails_a_gateway_killed_by_its_limit_whatever_it_sampled() {
    let s = stories::bounded();
    let mut judge = crate::Judge::new(&s.expect, &five_seconds());
    judge.gateway_oom_killed();
    for r in &s.rss {
        judge.rss(*r);
    }
    let j = judge.finish();
    let v = verdict(&j, "memory_ceiling");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.detail.contains("killed by its memory limit 1 times"),
        "{}",
        v.detail
    );
}

#[test]
fn memory_ceiling_is_skipped_without_a_ceiling_or_samples() {
    let mut s = stories::bounded();
    let j = run(&s, &five_seconds());
    let v = verdict(&j, "memory_ceiling");
    assert_eq!(v.status, Status::Pass);
    assert_eq!(v.short, "peak 70 MiB (ceiling 100); retained not measured");
    assert_eq!(
        v.detail,
        "peak memory 70 MiB stayed under the 100 MiB ceiling (70% of it); what the gateway keeps after the load was not measured: the run did not wait for the gateway's memory to settle after the load (it was stopped before its end, the gateway was not running then, the check was off when it ran, or the run was made before the wait existed)"
    );
    s.rss.clear();
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "memory_ceiling"), Status::Skipped);
    assert!(detail(&j, "memory_ceiling").starts_with("no data"));
    s.expect.memory_ceiling_bytes = None;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "memory_ceiling"), Status::Skipped);
    // Samples, but neither a ceiling nor a wait after the load.
    s.rss = stories::bounded().rss;
    let j = run(&s, &five_seconds());
    let v = verdict(&j, "memory_ceiling");
    assert_eq!(v.status, Status::Skipped);
    assert!(
        v.detail.starts_with("no memory ceiling is set"),
        "{}",
        v.detail
    );
    s.rss = vec![RssSample {
        t_us: at(500),
        rss_bytes: 600 * MIB,
        rss_anon_bytes: None,
    }];
    s.expect.memory_ceiling_bytes = Some(512 * MIB);
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "memory_ceiling"), Status::Fail);
    assert_eq!(j.summary.gateway.peak_rss_bytes, Some(600 * MIB));
}

/// A run whose backlog is `levels[s]` at most in second `s`: that many
/// people sent 100 ms into the second, dispatched and admitted 500 ms
/// later, answered 100 ms after that; plus one person who waits 1.2 s
/// from the overload's start (someone waited). Overload from `from_s`
/// to `to_s`; the load ends with the last second; callers have 3 s of
/// patience, so Q* = 16 and the margin is 1.6.
fn backlog_story(levels: &[u64], from_s: u64, to_s: u64) -> Story {
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    let mut person = |sent: u64, admitted: u64| {
        let id = format!("p{}", attempts.len());
        let ok = ClientOutcome::Ok;
        attempts.push(attempt(&id, 1, sent, admitted + 110, ok, None));
        calls.push(call(&id, admitted, admitted, admitted + 100));
    };
    for (s, &n) in levels.iter().enumerate() {
        let ms = s as u64 * 1000;
        for _ in 0..n {
            person(ms + 100, ms + 600);
        }
    }
    person(from_s * 1000 + 50, from_s * 1000 + 1_250);
    Story {
        attempts,
        calls,
        rss: Vec::new(),
        expect: expect(
            Some((from_s * 1000, to_s * 1000)),
            levels.len() as u64 * 1000,
            3.0,
        ),
    }
}

/// Poisson-like noise of 1 to 3 waiting, median 2: what a steady phase
/// shows second by second.
const NOISE: [u64; 15] = [2, 1, 3, 2, 1, 2, 3, 1, 2, 2, 1, 3, 2, 1, 2];

fn ten_seconds() -> Thresholds {
    let mut t = Thresholds::default();
    t.drain.within = Duration::from_secs(10);
    t
}

/// The run of issue 13: the backlog falls from 14 to 1 within 2 s of
/// the overload's end, then moves with the noise of the after phase,
/// which holds 4 and 5 waiting for a second each, 14 s and 20 s later.
/// The old rule (each second's most waiting against 1 + the baseline's
/// median, 3 here) read a drain of 20 s and failed it; the rolling mean
/// is never over the bound of 3 + 1.6 after the overload.
#[test]
fn drain_holds_against_a_noisy_after_phase() {
    let mut levels: Vec<u64> = NOISE.iter().chain(&NOISE).copied().collect();
    levels.extend([14; 10]);
    levels.extend([7, 1]);
    let mut after: Vec<u64> = NOISE.iter().chain(&NOISE).copied().collect();
    (after[12], after[18]) = (4, 5);
    levels.extend(after);
    let s = backlog_story(&levels, 30, 40);
    let j = run(&s, &ten_seconds());
    let backlog: Vec<u64> = j.timeline.seconds.iter().map(|r| r.backlog).collect();
    // The one who waited 1.2 s adds one to the overload's first two.
    (levels[30], levels[31]) = (15, 15);
    assert_eq!(&backlog[..levels.len()], &levels[..]);
    assert_eq!(status(&j, "drain"), Status::Pass, "{}", detail(&j, "drain"));
    // Centred on 40 s the mean is (14 + 14 + 7 + 1 + 2) / 5 = 7.6; on
    // 41 s, (14 + 7 + 1 + 2 + 1) / 5 = 5; on 42 s, 2.8.
    assert_eq!(j.summary.drain_s, Some(2.0));
    assert_eq!(
        verdict(&j, "drain").predicted,
        "the backlog's mean over 5 scenario seconds back within 4.6 (baseline: 30 s measured before the overload, p99 3 waiting, + 1.6) within 10 s of the overload ending"
    );
    assert_eq!(
        detail(&j, "drain"),
        "the backlog was back within its bound 2 s after the overload ended and stayed there (the backlog's mean over 5 scenario seconds at most 4.6; baseline: 30 s measured before the overload, p99 3 waiting), down from 7 waiting"
    );
}

#[test]
fn drain_fails_when_the_backlog_stays_up() {
    // 8 waiting for 12 s after the overload, then the noise again: the
    // mean centred on 52 s is (8 + 8 + 2 + 1 + 3) / 5 = 4.4, the first
    // within 4.6 for good.
    let mut levels: Vec<u64> = NOISE.iter().chain(&NOISE).copied().collect();
    levels.extend([14; 10]);
    levels.extend([8; 12]);
    levels.extend(NOISE);
    let j = run(&backlog_story(&levels, 30, 40), &ten_seconds());
    assert_eq!(status(&j, "drain"), Status::Fail);
    assert_eq!(j.summary.drain_s, Some(12.0));
    assert_eq!(
        detail(&j, "drain"),
        "the backlog took 12 s to come back within its bound after the overload (the backlog's mean over 5 scenario seconds at most 4.6; baseline: 30 s measured before the overload, p99 3 waiting; 8 waiting at most), over the allowed 10 s"
    );
}

/// A queue of 33 that empties over the records' last 4 s (the CI
/// smoke run against the deadline gateway): past the records nothing
/// waits, so the drain is seen to its end.
#[test]
fn a_backlog_that_empties_as_the_records_end_has_drained() {
    let mut levels = vec![1; 10];
    levels.extend([33; 10]);
    levels.extend([25, 18, 11, 4, 1]);
    let mut s = backlog_story(&levels, 10, 20);
    // Q* = 36: a bound of 1 + 3.6. Centred on 24 s the mean is
    // (11 + 4 + 1 + 0 + 0) / 5 = 3.2; on 23 s, 6.8.
    s.expect.queue_bound = 36.0;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Pass, "{}", detail(&j, "drain"));
    assert_eq!(j.summary.drain_s, Some(4.0));
}

#[test]
fn drain_is_skipped_with_fewer_than_ten_seconds_of_baseline() {
    let mut s = stories::bounded();
    s.expect.overload = Some((at(5_000), at(20_000)));
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Skipped);
    assert_eq!(
        detail(&j, "drain"),
        "the baseline before the overload is 5 scenario seconds long, and the drain is judged against at least 10, and the run directory has no plan figure for the waiting after it to stand in: give the scenario a steady phase of 10 s or more before the overload"
    );
    assert_eq!(j.summary.drain_s, None);
    // Nine is not enough either; ten is.
    s.expect.overload = Some((at(9_000), at(20_000)));
    assert_eq!(status(&run(&s, &five_seconds()), "drain"), Status::Skipped);
    s.expect.overload = Some((at(10_000), at(20_000)));
    assert_eq!(status(&run(&s, &five_seconds()), "drain"), Status::Pass);
}

/// The pool demo's shape: the overload 2 s in, the load stopping with
/// it. With the plan's figure (nothing arrives after the overload) the
/// drain is judged: the naive story's backlog takes 30 s, the bounded
/// one's is back at once. The verdict says which baseline it used.
#[test]
fn drain_with_a_short_baseline_is_judged_by_the_plans_waiting() {
    use wire::HealthyWaiting;
    let mut s = stories::naive();
    s.expect.overload = Some((at(8_000), at(20_000)));
    s.expect.drain_baseline = Some(HealthyWaiting::NoArrivals);
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Fail, "{}", detail(&j, "drain"));
    // A second more than against its measured baseline (p99 1): the
    // bound is 0 + 23.2 here.
    assert_eq!(j.summary.drain_s, Some(31.0));
    assert!(
        detail(&j, "drain")
            .contains("baseline: the plan's 0 waiting (nothing arrives after the overload)"),
        "{}",
        detail(&j, "drain")
    );
    let mut s = stories::bounded();
    s.expect.overload = Some((at(5_000), at(20_000)));
    s.expect.drain_baseline = Some(HealthyWaiting::Constant {
        arrivals_per_s: 2.0,
    });
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Pass, "{}", detail(&j, "drain"));
    assert!(
        verdict(&j, "drain")
            .predicted
            .contains("baseline: the plan's 0 waiting (2/s evenly spaced after the overload: none wait), + 1.6"),
        "{}",
        verdict(&j, "drain").predicted
    );
    // Erlang C's waiting raises the bound by itself.
    s.expect.drain_baseline = Some(HealthyWaiting::ErlangC {
        servers: 8,
        arrivals_per_s: 4.0,
        service_s: 1.0,
        waiting: 0.4,
    });
    let j = run(&s, &five_seconds());
    assert!(
        verdict(&j, "drain")
            .predicted
            .contains("within 2 (baseline: the plan's 0.4 waiting (Erlang C, 8 servers), + 1.6)"),
        "{}",
        verdict(&j, "drain").predicted
    );
    // Ten seconds of its own: measured, whatever the plan says.
    s.expect.overload = Some((at(10_000), at(20_000)));
    let j = run(&s, &five_seconds());
    assert!(
        detail(&j, "drain").contains("baseline: 10 s measured before the overload"),
        "{}",
        detail(&j, "drain")
    );
    // Arrivals after the overload that saturate the servers: no level
    // to come back to.
    s.expect.overload = Some((at(5_000), at(20_000)));
    s.expect.drain_baseline = Some(HealthyWaiting::Saturated {
        servers: 8,
        arrivals_per_s: 9.0,
        service_s: 1.0,
    });
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Skipped);
    assert_eq!(
        verdict(&j, "drain").short,
        "baseline 5 s; arrivals after it saturate 8 servers"
    );
    assert!(
        detail(&j, "drain")
            .contains("(9/s of 1 s calls) are at or over what 8 servers serve (8/s)"),
        "{}",
        detail(&j, "drain")
    );
}

/// The drain judged by the plan's baseline reads the same at every
/// time scale: its rows are scenario seconds and its figure a depth.
#[test]
fn a_drain_judged_by_the_plans_baseline_is_the_same_at_every_scale() {
    let mut naive = stories::naive();
    naive.expect.overload = Some((at(8_000), at(20_000)));
    naive.expect.drain_baseline = Some(wire::HealthyWaiting::NoArrivals);
    let t = five_seconds();
    let one = run(&naive, &t);
    for k in [10, 40] {
        let s = stories::compressed(&naive, k);
        let scale = wire::Scale {
            time: k as f64,
            quota: 1.0,
        };
        let j = crate::judge::judge_at(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &t.scaled(scale),
            k as f64,
        );
        assert_eq!(status(&j, "drain"), status(&one, "drain"), "at {k}x");
        let unscaled = j.summary.drain_s.unwrap() * k as f64;
        assert!(
            (unscaled - one.summary.drain_s.unwrap()).abs() < 1e-6,
            "at {k}x"
        );
    }
}

/// A gateway that queues everyone and drops them after 2 s of waiting
/// (an off-the-shelf load balancer's queue timeout): every refusal
/// came after a wait, so it never shed at admission, and most of its
/// refusals were stale.
#[test]
fn a_gateway_that_only_drops_after_waiting_fails_shed_onset_and_stale_share() {
    let j = run(&stories::queue_timeout(), &five_seconds());
    let stale = j.summary.counts.stale;
    assert!(
        stale > 20 && j.summary.counts.shed == 0,
        "{:?}",
        j.summary.counts
    );
    assert_eq!(j.first_shed, None, "a drop after a wait is no onset");
    assert_eq!(status(&j, "shed_onset"), Status::Fail);
    assert_eq!(
        verdict(&j, "shed_onset").short,
        format!("no shed at admission; {stale} dropped after 2 s waits")
    );
    assert!(
        detail(&j, "shed_onset").starts_with(&format!(
            "never refused at admission: all {stale} of its refusals the provider never saw came after waiting in the queue (median 2 s)"
        )),
        "{}",
        detail(&j, "shed_onset")
    );
    assert_eq!(status(&j, "stale_share"), Status::Fail);
    assert_eq!(
        verdict(&j, "stale_share").short,
        format!("{stale} of {stale} refusals after waiting, 100% (bound 10%)")
    );
    // The bounded story refuses at admission: none stale.
    let j = run(&stories::bounded(), &five_seconds());
    assert_eq!(status(&j, "stale_share"), Status::Pass);
    assert_eq!(
        verdict(&j, "stale_share").short,
        "0 of 62 refusals after waiting, 0% (bound 10%)"
    );
}

/// The first shed is the first refusal at admission, even when a stale
/// drop came before it; and stale_share counts both.
#[test]
fn the_first_shed_is_at_admission_and_stale_share_counts_both_kinds() {
    let mut s = stories::bounded();
    let first = s
        .attempts
        .iter()
        .filter(|a| a.outcome == ClientOutcome::Shed)
        .map(|a| a.sent_us)
        .min()
        .unwrap();
    // A caller dropped after waiting 500 ms, before the first shed.
    let mut drop = attempt("d0", 1, 0, 0, ClientOutcome::Stale, Some(800));
    drop.sent_us = first - 600_000;
    drop.intended_us = drop.sent_us;
    drop.done_us = first - 100_000;
    drop.status = Some(503);
    drop.reason = Some("wait_expired".into());
    s.attempts.push(drop);
    let j = run(&s, &five_seconds());
    assert_eq!(j.first_shed.map(|f| f.at_us), Some(first));
    assert_eq!(
        verdict(&j, "stale_share").short,
        "1 of 63 refusals after waiting, 1.6% (bound 10%)"
    );
    let mut t = five_seconds();
    t.stale_share.max_share = 0.01;
    assert_eq!(status(&run(&s, &t), "stale_share"), Status::Fail);
    // Nothing refused: nothing to judge.
    let j = run(&stories::naive(), &five_seconds());
    assert_eq!(status(&j, "stale_share"), Status::Skipped);
}

/// Retry-After judged in seconds, each refusal against its own drain
/// time: the truth passes; a constant `retry-after: 1` against a 10 s
/// drain fails on its error as well as on never varying; twice the
/// truth at a 30 s drain fails (the old median relative error of 100%
/// passed it).
#[test]
fn retry_after_is_judged_in_seconds_against_each_refusals_drain() {
    use wire::RetryAfterHeader::{RetryAfter, RetryAfterMs};
    let t = five_seconds();
    // The truth, to the millisecond: every refusal within its bound.
    let truth = stories::queued(80, 24, |d| (d / 1000, Some(RetryAfterMs)));
    let j = run(&truth, &t);
    assert_eq!(
        status(&j, "retry_after"),
        Status::Pass,
        "{}",
        detail(&j, "retry_after")
    );
    assert!(
        verdict(&j, "retry_after")
            .short
            .contains("median error 0.001 s"),
        "{}",
        verdict(&j, "retry_after").short
    );
    // A drain of about 10 s at the refusals.
    let drains: Vec<u64> = j
        .timeline
        .seconds
        .iter()
        .filter(|r| r.shed > 0)
        .map(|r| r.drain_s as u64)
        .collect();
    assert!(
        drains.iter().filter(|&&d| (9..=11).contains(&d)).count() * 2 > drains.len(),
        "{drains:?}"
    );
    // retry-after: 1, whatever the backlog.
    let one = stories::queued(80, 24, |_| (1_000, Some(RetryAfter)));
    let j = run(&one, &t);
    assert_eq!(status(&j, "retry_after"), Status::Fail);
    let d = detail(&j, "retry_after");
    assert!(d.contains("Retry-After never varies"), "{d}");
    assert!(
        d.contains("Retry-After is off the backlog drain time by 8.9 s at the median"),
        "{d}"
    );
    assert!(d.contains("median (p90 "), "{d}");
    assert!(
        verdict(&j, "retry_after").short.ends_with("(+1 more)"),
        "{}",
        verdict(&j, "retry_after").short
    );
    // Twice the truth at a drain of about 30 s.
    let twice = stories::queued(240, 40, |d| (2 * d / 1000, Some(RetryAfterMs)));
    let j = run(&twice, &t);
    assert_eq!(
        status(&j, "retry_after"),
        Status::Fail,
        "{}",
        detail(&j, "retry_after")
    );
    let short = verdict(&j, "retry_after").short;
    assert!(short.starts_with("own sheds: median error 2"), "{short}");
    assert!(short.contains("0% in bound"), "{short}");
    // A tolerance written for the old meaning (1.0, a median relative
    // error) is said to mean something else now; past 1 it lets twice
    // the truth pass.
    let mut old = t.clone();
    old.retry_after.tolerance = 1.0;
    let j = run(&twice, &old);
    assert!(
        detail(&j, "retry_after").contains("(tolerance 1: it is now each refusal's allowed error as a share of its drain time, 0.25 by default"),
        "{}",
        detail(&j, "retry_after")
    );
    old.retry_after.tolerance = 1.5;
    assert_eq!(status(&run(&twice, &old), "retry_after"), Status::Pass);
    assert!(!detail(&run(&twice, &t), "retry_after").contains("(tolerance"));
}

/// Without provider records (an external run) an attempt leaves the
/// gateway, as far as the records show, when it ends: a call after it
/// left the queue. Retry-After is held to that drain less S.
#[test]
fn an_external_runs_retry_after_is_held_to_the_drain_less_a_call() {
    use wire::RetryAfterHeader::RetryAfterMs;
    let s = stories::queued(80, 24, |d| (d / 1000, Some(RetryAfterMs)));
    let mut judge = crate::Judge::new(&s.expect, &five_seconds());
    judge.external(Vec::new(), 1.0, Vec::new());
    for a in &s.attempts {
        judge.attempt(a.clone());
    }
    let j = judge.finish();
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Pass, "{}", v.detail);
    assert!(v.short.contains("median error 0 s"), "{}", v.short);
}

/// A header's granularity: the drain time rounded up to whole seconds
/// (drains of about 1.5 s) is within its second in `retry-after`; the
/// same values said in `retry-after-ms` are not.
#[test]
fn a_whole_second_header_is_allowed_its_second() {
    use wire::RetryAfterHeader::{RetryAfter, RetryAfterMs};
    let mut t = five_seconds();
    // The drain hardly moves here: one value is all the truth needs.
    t.retry_after.min_distinct = 1;
    let s = stories::queued(12, 16, |d| {
        ((d / 1000).div_ceil(1000).max(1) * 1000, Some(RetryAfter))
    });
    let j = run(&s, &t);
    assert_eq!(
        status(&j, "retry_after"),
        Status::Pass,
        "{}",
        detail(&j, "retry_after")
    );
    let s = stories::queued(12, 16, |d| {
        ((d / 1000).div_ceil(1000).max(1) * 1000, Some(RetryAfterMs))
    });
    let j = run(&s, &t);
    assert_eq!(
        status(&j, "retry_after"),
        Status::Fail,
        "{}",
        detail(&j, "retry_after")
    );
    // An old record (no header named) is allowed a second too.
    let s = stories::queued(12, 16, |d| ((d / 1000).div_ceil(1000).max(1) * 1000, None));
    assert_eq!(status(&run(&s, &t), "retry_after"), Status::Pass);
}

/// Three of twenty streams cut by the provider: passed on as a break
/// (the client saw a reset: no_silent_loss counts them), they pass;
/// handed over as whole answers, they fail; made good by a later call
/// for the same attempt (a gateway's retry), they pass.
#[test]
fn a_cut_stream_handed_over_as_an_answer_is_a_silent_truncation() {
    let t = Thresholds::default();
    let broke = stories::streamed(|_| ClientOutcome::Reset);
    let j = run(&broke, &t);
    assert_eq!(status(&j, "no_silent_truncation"), Status::Pass);
    assert_eq!(
        verdict(&j, "no_silent_truncation").short,
        "0 of 3 cut streams answered ok, 0% (bound 0%)"
    );
    assert_eq!(status(&j, "no_silent_loss"), Status::Fail);
    let hidden = stories::streamed(|_| ClientOutcome::Ok);
    let j = run(&hidden, &t);
    assert_eq!(status(&j, "no_silent_truncation"), Status::Fail);
    assert!(
        detail(&j, "no_silent_truncation").starts_with(
            "3 of the 3 provider calls cut mid-stream reached the client as a complete answer (100%)"
        ),
        "{}",
        detail(&j, "no_silent_truncation")
    );
    assert_eq!(status(&j, "no_silent_loss"), Status::Pass);
    // A retry of each cut call, completed before the answer.
    let mut retried = stories::streamed(|_| ClientOutcome::Ok);
    for person in [5u64, 10, 15] {
        let ms = person * 1000;
        let mut c = call(&format!("s{person:05}"), ms + 260, ms + 260, ms + 500);
        c.stream = true;
        retried.calls.push(c);
    }
    let j = run(&retried, &t);
    assert_eq!(
        status(&j, "no_silent_truncation"),
        Status::Pass,
        "{}",
        detail(&j, "no_silent_truncation")
    );
    // A gateway hanging up mid-stream on a call it then answers ok.
    let mut hung = stories::streamed(|_| ClientOutcome::Ok);
    for c in &mut hung.calls {
        if c.outcome == wire::ProviderOutcome::StreamCut {
            c.outcome = wire::ProviderOutcome::Ok;
            c.hung_up_us = c.finished_us;
        }
    }
    assert_eq!(
        status(&run(&hung, &t), "no_silent_truncation"),
        Status::Fail
    );
    // No cut at all: nothing to judge.
    let j = run(&stories::bounded(), &t);
    assert_eq!(status(&j, "no_silent_truncation"), Status::Skipped);
}

/// Ten people waiting from 10 s to the end of the records at 20 s, with
/// no provider call, after 10 s of one person a second passing through:
/// cut off by the run's end, not drained.
fn cut_short() -> Story {
    let mut s = backlog_story(&[1; 10], 10, 11);
    s.attempts.pop();
    s.calls.pop();
    s.attempts.extend((0..10).map(|i| {
        attempt(
            &format!("w{i}"),
            1,
            10_000 + i * 10,
            20_000,
            ClientOutcome::Timeout,
            None,
        )
    }));
    s
}

#[test]
fn drain_fails_when_the_run_ends_before_the_backlog_drains() {
    let j = run(&cut_short(), &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Fail);
    // The mean centred on the records' last second, 20 s: 10 waiting
    // at 18 and 19 s, 9 at 20 s (as the ten leave at that instant, one
    // by one), none after the records: 29 / 5.
    assert_eq!(
        detail(&j, "drain"),
        "the backlog's mean over 5 scenario seconds was still 5.8 when the records end, 9 s after the overload, over its bound of 2.6 (baseline: 10 s measured before the overload, p99 1 waiting)"
    );
    assert_eq!(j.summary.drain_s, None);
}

#[test]
fn drain_fails_when_the_records_end_before_the_overload() {
    let mut s = cut_short();
    s.expect.overload = Some((at(10_000), at(25_000)));
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "drain"), Status::Fail);
    assert_eq!(
        detail(&j, "drain"),
        "the records end 5 s before the overload ended, so the drain was never seen"
    );
}

#[test]
fn drain_passes_with_a_note_when_nothing_waited() {
    // One person served at once, after the load: nothing to drain.
    let s = Story {
        attempts: vec![attempt("a", 1, 100, 1_200, ClientOutcome::Ok, None)],
        calls: vec![call("a", 101, 101, 1_100)],
        rss: Vec::new(),
        expect: expect(None, 100, 30.0),
    };
    let j = run(&s, &Thresholds::default());
    assert_eq!(status(&j, "drain"), Status::Pass, "{}", detail(&j, "drain"));
    assert_eq!(j.summary.drain_s, Some(0.0));
    assert_eq!(
        detail(&j, "drain"),
        "nothing ever waited: no attempt stayed in the backlog for a scenario second (the longest 1 ms), so there was no backlog to drain"
    );
    // A gateway that sheds everyone at once, 20 a second for a minute:
    // the records end with the last shed, before the load's end. The
    // old rule failed it ("the records end 0 s before the load
    // ended").
    // (The first is served, so the provider saw a call.)
    let attempts: Vec<ClientRecord> = (0..1_200)
        .map(|i| {
            let ms = i * 50;
            let (done, outcome) = match i {
                0 => (ms + 20, ClientOutcome::Ok),
                _ => (ms + 2, ClientOutcome::Shed),
            };
            attempt(&format!("s{i}"), 1, ms, done, outcome, Some(1_000))
        })
        .collect();
    let s = Story {
        attempts,
        calls: vec![call("s0", 1, 1, 19)],
        rss: Vec::new(),
        expect: expect(None, 60_000, 30.0),
    };
    let j = run(&s, &Thresholds::default());
    assert_eq!(status(&j, "drain"), Status::Pass, "{}", detail(&j, "drain"));
    assert!(
        detail(&j, "drain").starts_with("nothing ever waited"),
        "{}",
        detail(&j, "drain")
    );
}

/// The same run at time scales 1, 10 and 40: the rows are scenario
/// seconds, so they hold the same counts and levels, and every check
/// says the same (durations at the run's scale).
#[test]
fn a_compressed_run_is_judged_by_scenario_seconds() {
    for story in [stories::bounded(), stories::naive()] {
        let t = five_seconds();
        let one = run(&story, &t);
        for k in [10, 40] {
            let s = stories::compressed(&story, k);
            let scale = wire::Scale {
                time: k as f64,
                quota: 1.0,
            };
            let j = crate::judge::judge_at(
                &s.attempts,
                &s.calls,
                &s.rss,
                &s.expect,
                &t.scaled(scale),
                k as f64,
            );
            assert_eq!(j.timeline.seconds.len(), one.timeline.seconds.len());
            for (a, b) in j.timeline.seconds.iter().zip(&one.timeline.seconds) {
                let levels = |r: &crate::Second| {
                    (
                        r.t,
                        [r.offered, r.sent, r.ok, r.shed, r.timeout, r.errors],
                        [r.client_outstanding, r.provider_in_flight, r.gateway_depth],
                        r.backlog,
                    )
                };
                assert_eq!(levels(a), levels(b), "at {k}x");
            }
            for (a, b) in j.verdicts.iter().zip(&one.verdicts) {
                assert_eq!(a.status, b.status, "{} at {k}x: {}", a.id, a.detail);
            }
            let (a, b) = (j.summary.drain_s, one.summary.drain_s);
            assert_eq!(a.is_some(), b.is_some(), "at {k}x");
            let unscaled = a.unwrap_or(0.0) * k as f64;
            assert!((unscaled - b.unwrap_or(0.0)).abs() < 1e-6, "at {k}x");
        }
    }
}

/// Two people: `a` served, `b` gave up at 2 s while its call waited in
/// the provider's queue, admitted at 3 s and answered at 4 s.
fn one_stale() -> Story {
    Story {
        attempts: vec![
            attempt("a", 1, 0, 1_100, ClientOutcome::Ok, None),
            attempt("b", 1, 0, 2_000, ClientOutcome::Timeout, None),
        ],
        calls: vec![call("a", 1, 1, 1_000), call("b", 1, 3_000, 4_000)],
        rss: Vec::new(),
        expect: expect(None, 0, 2.0),
    }
}

#[test]
fn stale_dispatch_counts_calls_admitted_after_their_caller_left() {
    let j = run(&one_stale(), &Thresholds::default());
    assert_eq!(status(&j, "stale_dispatch"), Status::Fail);
    assert_eq!(
        detail(&j, "stale_dispatch"),
        "1 of 2 provider calls (50%) were made for callers who had already left, wasting 150 tokens; 1 answer was written after the caller left"
    );
    let mut t = Thresholds::default();
    t.stale_dispatch.max_share = 0.5;
    assert_eq!(
        status(&run(&one_stale(), &t), "stale_dispatch"),
        Status::Pass
    );
    let mut s = one_stale();
    // A gateway that cancels: the call is hung up before admission.
    s.calls[1].admitted_us = None;
    s.calls[1].finished_us = Some(at(2_000));
    s.calls[1].hung_up_us = Some(at(2_000));
    let j = run(&s, &Thresholds::default());
    assert_eq!(status(&j, "stale_dispatch"), Status::Pass);
    assert_eq!(j.summary.counts.late, 0);
}

#[test]
fn served_latency_compares_the_p99_of_people_served() {
    let mut t = five_seconds();
    t.served_latency.p99_ms = 1_000.0;
    let j = run(&stories::bounded(), &t);
    assert_eq!(status(&j, "served_latency"), Status::Fail);
    let d = detail(&j, "served_latency");
    assert!(d.starts_with("the 163 people served waited"), "{d}");
    assert!(d.ends_with("over the 1,000 ms SLO"), "{d}");
    // Nobody served.
    let mut s = one_stale();
    s.attempts[0].outcome = ClientOutcome::Shed;
    let j = run(&s, &t);
    assert_eq!(status(&j, "served_latency"), Status::Fail);
    assert_eq!(
        detail(&j, "served_latency"),
        "no data: none of the 2 people was served"
    );
    // Person `a` retried and was served at 1.1 s after first being due
    // at 0: per person, 1,100 ms (reported as the top of its HDR bucket
    // at 3 significant figures, never below the true value).
    let s = Story {
        attempts: vec![
            attempt("a", 1, 0, 1, ClientOutcome::Shed, Some(100)),
            attempt("a", 2, 101, 1_100, ClientOutcome::Ok, None),
        ],
        calls: vec![call("a", 102, 102, 1_000)],
        rss: Vec::new(),
        expect: expect(None, 0, 2.0),
    };
    let j = run(&s, &t);
    let p99 = j.summary.latency_ms.e2e.p99.unwrap();
    assert!((1_100.0..1_101.0).contains(&p99), "{p99}");
    assert_eq!(status(&j, "served_latency"), Status::Fail);
    t.served_latency.p99_ms = 1_101.0;
    assert_eq!(status(&run(&s, &t), "served_latency"), Status::Pass);
}

#[test]
fn goodput_fails_below_its_share_of_capacity() {
    let mut t = five_seconds();
    t.goodput.min_share = 1.0;
    let j = run(&stories::bounded(), &t);
    assert_eq!(status(&j, "goodput"), Status::Fail);
    // The naive gateway answers the same 76 during the overload: its
    // failures are elsewhere.
    let j = run(&stories::naive(), &five_seconds());
    assert_eq!(status(&j, "goodput"), Status::Pass);
}

#[test]
fn answers_the_provider_never_saw_make_the_run_invalid() {
    let mut s = stories::bounded();
    s.calls.clear();
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "harness_valid"), Status::Invalid);
    assert!(
        detail(&j, "harness_valid").contains("the gateway's upstream is not the fake provider"),
        "{}",
        detail(&j, "harness_valid")
    );
    for id in crate::Check::ALL
        .into_iter()
        .filter(|c| c.reads_provider())
        .map(crate::Check::id)
    {
        assert_eq!(status(&j, id), Status::Skipped, "{id}");
        assert!(detail(&j, id).starts_with("no data"), "{id}");
    }
    assert_eq!(j.overall, Status::Invalid);
    // A gateway that answered nothing needed no provider: judged as is.
    let mut none = stories::bounded();
    none.calls.clear();
    for a in &mut none.attempts {
        if a.outcome == ClientOutcome::Ok {
            a.outcome = ClientOutcome::Shed;
            a.status = Some(503);
        }
    }
    let j = run(&none, &five_seconds());
    assert_ne!(status(&j, "harness_valid"), Status::Invalid);
    assert_eq!(status(&j, "goodput"), Status::Fail);
}

#[test]
fn no_silent_loss_allows_up_to_max_lost() {
    let mut t = five_seconds();
    t.no_silent_loss.max_lost = 200;
    let j = run(&stories::naive(), &t);
    assert_eq!(status(&j, "no_silent_loss"), Status::Pass);
    assert_eq!(
        detail(&j, "no_silent_loss"),
        "106 of 440 attempts ended without an answer or a shed (106 timeouts), within the allowed 200"
    );
    let mut s = one_stale();
    s.attempts[0].outcome = ClientOutcome::Reset;
    s.attempts[1].outcome = ClientOutcome::ProviderError;
    let j = run(&s, &Thresholds::default());
    assert_eq!(
        detail(&j, "no_silent_loss"),
        "1 of 2 attempts ended without an answer or a shed (1 reset): the gateway must answer or shed inside the caller's patience"
    );
}

#[test]
fn a_lagging_harness_makes_the_run_invalid() {
    let mut s = stories::naive();
    s.expect.send_lag_p99_ms = 12.0;
    let j = run(&s, &five_seconds());
    assert_eq!(status(&j, "harness_valid"), Status::Invalid);
    assert_eq!(j.overall, Status::Invalid);
    assert!(!j.summary.harness.valid);
    assert_eq!(
        detail(&j, "harness_valid"),
        "the load generator fell behind its schedule (send lag p99 12 ms, over the 5 ms bound), so the run proves nothing: rerun on a quieter machine or at a smaller time scale"
    );
    s.expect.send_lag_p99_ms = f64::NAN;
    assert_eq!(run(&s, &five_seconds()).overall, Status::Invalid);
    let mut t = five_seconds();
    t.harness_valid.enabled = false;
    assert_eq!(run(&s, &t).overall, Status::Fail);
}

#[test]
fn no_records_is_invalid_and_never_panics() {
    let e = expect(Some((1_000, 2_000)), 2_000, 30.0);
    let j = judge(&[], &[], &[], &e, &Thresholds::default());
    assert_eq!(j.overall, Status::Invalid);
    for v in &j.verdicts {
        if v.id == "harness_valid" {
            assert_eq!(v.status, Status::Invalid);
        } else {
            assert_eq!(v.status, Status::Skipped, "{v:?}");
        }
    }
    assert!(j.timeline.seconds.is_empty());
    assert_eq!(j.summary.drain_s, None);
    serde_json::to_string(&j).expect("serializes");
}

#[test]
fn odd_runs_never_panic() {
    let e = expect(Some((1_000, 2_000)), 2_000, 30.0);
    let one: Vec<ClientRecord> = vec![attempt("a", 1, 10, 20, ClientOutcome::Shed, Some(0))];
    let runs: [(&[ClientRecord], Vec<ProviderRecord>); 4] = [
        // A single person, shed at once, in a single second.
        (&one, Vec::new()),
        // Calls nobody made.
        (&[], vec![call("ghost", 5, 5, 6)]),
        // Records from before the run's start.
        (&one, vec![call("a", 0, 0, 0)]),
        (&one, vec![call("a", 15, 15, 900_000_000_000)]),
    ];
    for (attempts, calls) in runs {
        for t in [
            Thresholds::default(),
            Thresholds::default().scaled(wire::Scale {
                time: 1e9,
                quota: 1.0,
            }),
        ] {
            let mut e = e.clone();
            e.start_us = at(12);
            let j = judge(attempts, &calls, &[], &e, &t);
            assert_eq!(j.verdicts.len(), crate::always_judged().count());

            assert!(j.timeline.seconds.len() <= 100_000);
        }
    }
}

/// `n` people each refused by the provider's quota (429, `retry-after-ms`
/// 1,500 and `retry-after` 2) and answered the refusal by a gateway that
/// passed it through without a reason, the answer's Retry-After as
/// `answer` makes it of the provider's 1,500 ms; from `from_ms` on, 100 ms
/// apart.
fn relayed(
    n: u64,
    from_ms: u64,
    mut answer: impl FnMut(u64) -> (Option<u64>, Option<wire::RetryAfterHeader>),
) -> Story {
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    for k in 0..n {
        let (id, t) = (format!("relayed{k:03}"), from_ms + 100 * k);
        let mut a = attempt(&id, 1, t, t + 20, ClientOutcome::Shed, None);
        (a.retry_after_ms, a.retry_after_header) = answer(1_500);
        attempts.push(a);
        let mut c = call(&id, t + 5, t + 5, t + 10);
        (c.status, c.outcome, c.completion_tokens) = (429, wire::ProviderOutcome::QuotaExceeded, 0);
        (c.retry_after_ms, c.retry_after_s) = (Some(1_500), Some(2));
        calls.push(c);
    }
    Story {
        attempts,
        calls,
        rss: Vec::new(),
        expect: expect(Some((1_000, 5_000)), 6_000, 3.0),
    }
}

/// A gateway that never sheds on its own and passes the provider's 429s
/// through (issue 42, item 7): judged by them alone; the provider's
/// Retry-After kept (as it came, or as `retry-after: 2`) passes, stripped
/// or shortened fails and says how many; none from the provider to keep
/// is nothing to judge.
#[test]
fn relayed_provider_refusals_keep_the_providers_retry_after() {
    use wire::RetryAfterHeader::{RetryAfter, RetryAfterMs};
    let t = five_seconds();
    let j = run(&relayed(20, 1_000, |ms| (Some(ms), Some(RetryAfterMs))), &t);
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Pass, "{}", v.detail);
    assert_eq!(
        v.short,
        "relayed refusals: the provider's Retry-After kept on 20 of 20"
    );
    assert_eq!(
        v.detail,
        "the gateway never shed on its own; it relayed 20 refusals of the provider's and kept the provider's Retry-After on all 20 that carried one"
    );
    assert_eq!(j.summary.counts.upstream_refused, 20);
    assert_eq!(j.summary.counts.shed, 0);
    // `retry-after: 2` for the provider's 1,500 ms: kept.
    let j = run(&relayed(20, 1_000, |_| (Some(2_000), Some(RetryAfter))), &t);
    assert_eq!(status(&j, "retry_after"), Status::Pass);

    // Stripped: fails, saying how many.
    let j = run(&relayed(20, 1_000, |_| (None, None)), &t);
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Fail);
    assert_eq!(
        v.short,
        "relayed refusals: 20 Retry-Afters stripped, 0 shortened, of 20"
    );
    assert!(
        v.detail.starts_with("the gateway never shed on its own; of the 20 refusals of the provider's the gateway relayed with the provider's Retry-After, 20 reached the client without one and 0 with a shorter one"),
        "{}",
        v.detail
    );
    // Every other one cut to a second in `retry-after-ms`: shortened.
    let mut k = 0;
    let j = run(
        &relayed(20, 1_000, |ms| {
            k += 1;
            let ms = if k % 2 == 0 { 1_000 } else { ms };
            (Some(ms), Some(RetryAfterMs))
        }),
        &t,
    );
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Fail);
    assert!(
        v.short == "relayed refusals: 0 Retry-Afters stripped, 10 shortened, of 20",
        "{}",
        v.short
    );

    // The provider gave none: nothing to keep, nothing to judge.
    let mut s = relayed(20, 1_000, |_| (None, None));
    for c in &mut s.calls {
        (c.retry_after_ms, c.retry_after_s) = (None, None);
    }
    let v = verdict(&run(&s, &t), "retry_after");
    assert_eq!(v.status, Status::Skipped);
    assert!(
        v.detail
            .contains("none of which carried a Retry-After of the provider's"),
        "{}",
        v.detail
    );
}

/// Own sheds and relayed refusals in one run: the line names both, and a
/// stripped Retry-After fails a gateway whose own sheds pass.
#[test]
fn the_verdict_line_names_both_kinds_it_judged() {
    use wire::RetryAfterHeader::RetryAfterMs;
    let t = five_seconds();
    let with = |relay: Story| {
        let mut s = stories::bounded();
        s.attempts.extend(relay.attempts);
        s.calls.extend(relay.calls);
        s
    };
    let j = run(
        &with(relayed(12, 2_000, |ms| (Some(ms), Some(RetryAfterMs)))),
        &t,
    );
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Pass, "{}", v.detail);
    assert!(
        v.short.starts_with("own sheds: median error "),
        "{}",
        v.short
    );
    assert!(v.short.ends_with("; relayed: 12/12 kept"), "{}", v.short);
    assert!(
        v.detail.ends_with("; it relayed 12 refusals of the provider's and kept the provider's Retry-After on all 12 that carried one"),
        "{}",
        v.detail
    );
    let j = run(&with(relayed(12, 2_000, |_| (None, None))), &t);
    let v = verdict(&j, "retry_after");
    assert_eq!(v.status, Status::Fail);
    assert_eq!(
        v.short,
        "relayed refusals: 12 Retry-Afters stripped, 0 shortened, of 12"
    );
    assert!(
        v.detail.starts_with("of the 12 refusals of the provider's the gateway relayed with the provider's Retry-After, 12 reached the client without one"),
        "{}",
        v.detail
    );
    // Own sheds alone say so, and a failing line says whose.
    let v = verdict(&run(&stories::bounded(), &t), "retry_after");
    assert!(
        v.short.starts_with("own sheds: median error "),
        "{}",
        v.short
    );
    let mut k = 0;
    let s = bounded_with_retry_after(|ra| {
        k += 1;
        (k % 2 == 0).then_some(ra)
    });
    let v = verdict(&run(&s, &t), "retry_after");
    assert_eq!(v.short, "own sheds: 31 of 62 without Retry-After");
    let mut both = s;
    let relay = relayed(12, 2_000, |_| (None, None));
    both.attempts.extend(relay.attempts);
    both.calls.extend(relay.calls);
    let v = verdict(&run(&both, &t), "retry_after");
    assert_eq!(v.short, "own sheds: 31 of 62 without Retry-After (+1 more)");
    assert!(
        v.detail
            .contains("; of the 12 refusals of the provider's the gateway relayed"),
        "{}",
        v.detail
    );
}

/// `shed_onset` names one bound, Q* with its tolerance, in its line and
/// its sentence alike, and counts one request as one.
#[test]
fn shed_onset_says_the_bound_it_judged_in_its_line_and_its_sentence() {
    // Two people through a predicted overload, one waiting behind the
    // other for a moment: never shed, one waiting at the peak.
    let mut first = attempt("a", 1, 10_000, 11_500, ClientOutcome::Ok, None);
    first.patience_ms = 3_000;
    let mut second = attempt("b", 1, 10_100, 12_600, ClientOutcome::Ok, None);
    second.patience_ms = 3_000;
    let s = Story {
        attempts: vec![first, second],
        calls: vec![
            call("a", 10_000, 10_000, 11_500),
            call("b", 11_500, 11_500, 12_600),
        ],
        rss: vec![],
        // Q* = 8/s × (3 s − 1 s) = 16, so the bound is 24 at +50%.
        expect: expect(Some((10_000, 20_000)), 19_000, 3.0),
    };
    let v = verdict(&run(&s, &five_seconds()), "shed_onset");
    assert_eq!(v.status, Status::Fail);
    assert_eq!(v.short, "never shed; 1 waiting at the peak (bound 24)");
    assert!(
        v.detail.starts_with(
            "never shed: 1 request was queued at the peak, within the bound of 24 (Q* = 16, +50%)"
        ),
        "{}",
        v.detail
    );
    // Over its bound, the sentence says so against the same bound.
    let mut naive = stories::naive();
    naive.expect.queue_bound = 100.0;
    let v = verdict(&run(&naive, &five_seconds()), "shed_onset");
    assert_eq!(v.short, "never shed; 320 waiting at the peak (bound 150)");
    assert_eq!(
        v.detail,
        "never shed: 320 requests were queued at the peak, over the bound of 150 (Q* = 100, +50%) that keeps them inside 30 s; shed at admission once 150 wait"
    );
}

/// A run stopped before its overload began judges nothing of it, and says
/// so: no goodput of "0 answers in the 10 s overload".
#[test]
fn a_run_stopped_before_its_overload_skips_what_reads_it() {
    let j = run(
        &stories::stopped(stories::bounded(), 6_000),
        &five_seconds(),
    );
    let before = "the run stopped at 6 s, before the overload began at 10 s";
    for (id, why) in [
        (
            "goodput",
            format!("{before}, so there is no answer rate under overload to judge"),
        ),
        (
            "shed_onset",
            format!("{before}, so there was no overload to shed in"),
        ),
        (
            "drain",
            format!("{before}: there was no drain after it to see"),
        ),
        (
            "retry_after",
            format!("the gateway never shed, and {before}"),
        ),
    ] {
        let v = verdict(&j, id);
        assert_eq!(
            (v.status, v.detail.as_str()),
            (Status::Skipped, why.as_str()),
            "{id}"
        );
    }
    // What ran is judged as ever.
    assert_eq!(status(&j, "served_latency"), Status::Pass);
}

/// A run stopped 6 s into its 10 s overload is judged over those 6 s: its
/// goodput is the answers in them per second (not per second of the whole
/// window), the drain after the overload was never seen, nor any retry
/// after it.
#[test]
fn a_run_stopped_in_its_overload_is_judged_over_what_it_covered() {
    let s = stories::stopped(stories::bounded(), 16_000);
    let j = run(&s, &five_seconds());
    let answered = s
        .attempts
        .iter()
        .filter(|a| a.outcome == ClientOutcome::Ok && (at(10_000)..at(16_000)).contains(&a.done_us))
        .count();
    let v = verdict(&j, "goodput");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(
        v.detail.starts_with(&format!(
            "{answered} answers in the 6 s of the overload the run covered (the run stopped at 16 s, 6 s into the 10 s overload) is {}/s",
            crate::verdict::num(answered as f64 / 6.0, 1)
        )),
        "{v:?}"
    );
    assert_eq!(
        (status(&j, "drain"), detail(&j, "drain")),
        (
            Status::Skipped,
            "the run stopped at 16 s, before the overload ended at 20 s: the drain after it was never seen".to_string()
        )
    );
    let ra = detail(&j, "retry_after");
    assert!(
        ra.ends_with("the run stopped at 16 s, before the overload ended at 20 s, so no retry after it was seen and their admission was not judged"),
        "{ra}"
    );
    // The first shed came before the stop: judged as in any run.
    assert_eq!(status(&j, "shed_onset"), Status::Pass);
}

/// The timeline keeps each second's Retry-After by the kind of refusal it
/// came with, as the judge classes it: the gateway's own sheds (what
/// `retry_after` counts) apart from the provider's 429s relayed. A
/// pass-through proxy that never shed has relayed ones only, so the
/// report's chart of them cannot contradict "never shed".
#[test]
fn retry_after_in_the_timeline_is_kept_by_the_kind_the_verdict_counts() {
    // The bounded story: every Retry-After is of a gateway's own shed.
    let s = stories::bounded();
    let j = run(&s, &five_seconds());
    let own: Vec<u64> = j
        .timeline
        .seconds
        .iter()
        .filter(|r| r.retry_after_ms.is_some())
        .map(|r| r.t)
        .collect();
    let mut shed_seconds: Vec<u64> = s
        .attempts
        .iter()
        .filter(|a| a.outcome == ClientOutcome::Shed && a.retry_after_ms.is_some())
        .map(|a| (a.done_us - s.expect.start_us) / 1_000_000)
        .collect();
    shed_seconds.dedup();
    assert_eq!(own, shed_seconds);
    assert!(j
        .timeline
        .seconds
        .iter()
        .all(|r| r.relayed_retry_after_ms.is_none()));
    // A pass-through proxy: each 429 the provider gave (with 2 s to wait)
    // relayed to its caller, through a predicted overload.
    let mut attempts = Vec::new();
    let mut calls = Vec::new();
    for i in 0..30u64 {
        let (id, ms) = (format!("r{i}"), 10_000 + i * 100);
        attempts.push(attempt(
            &id,
            1,
            ms,
            ms + 5,
            ClientOutcome::Shed,
            Some(2_000),
        ));
        let mut c = call(&id, ms + 1, ms + 1, ms + 2);
        c.outcome = wire::ProviderOutcome::QuotaExceeded;
        (c.status, c.retry_after_ms, c.completion_tokens) = (429, Some(2_000), 0);
        calls.push(c);
    }
    let relayed = Story {
        attempts,
        calls,
        rss: vec![],
        expect: expect(Some((10_000, 20_000)), 19_000, 3.0),
    };
    let j = run(&relayed, &five_seconds());
    let rows: Vec<_> = j
        .timeline
        .seconds
        .iter()
        .filter_map(|r| r.relayed_retry_after_ms.map(|ms| (r.t, ms)))
        .collect();
    assert_eq!(rows, [(10, 2_000), (11, 2_000), (12, 2_000)]);
    assert!(j
        .timeline
        .seconds
        .iter()
        .all(|r| r.retry_after_ms.is_none()));
    assert_eq!(j.summary.counts.upstream_refused, 30);
    let d = detail(&j, "retry_after");
    assert!(d.contains("relayed"), "{d}");
    assert!(!d.starts_with("never shed"), "{d}");
}
/// Memory sampled every 100 ms from 1 s before the load (at 0) to the end
/// of a 2 s wait after it (the load's end and the backlog drained at 5 s,
/// the wait to 7 s): `idle` MiB before the load, climbing to `peak` MiB at
/// 2.5 s and falling back to `after` MiB from 5 s. As `RssAnon` when
/// `anon`, the resident set 300 MiB above it (file-backed pages that hold
/// still whatever the heap does); as the resident set alone when not, as
/// files written before the anonymous part was read.
fn memory_story(idle: u64, peak: u64, after: u64, anon: bool) -> Story {
    let mut expect = expect(None, 5_000, 5.0);
    expect.memory_settle = Some((at(5_000), at(7_000)));
    let (idle, peak, after) = (idle as i64, peak as i64, after as i64);
    let level = |ms: i64| -> u64 {
        let mib = match ms {
            ..0 => idle,
            0..2_500 => idle + (peak - idle) * ms / 2_500,
            2_500..5_000 => peak - (peak - after) * (ms - 2_500) / 2_500,
            _ => after,
        };
        mib as u64
    };
    let rss = (-10..=70)
        .map(|i: i64| {
            let ms = i * 100;
            let bytes = level(ms) * MIB;
            RssSample {
                t_us: (T0 as i64 + ms * 1000) as u64,
                rss_bytes: if anon { bytes + 300 * MIB } else { bytes },
                rss_anon_bytes: anon.then_some(bytes),
            }
        })
        .collect();
    Story {
        attempts: vec![],
        calls: vec![],
        rss,
        expect,
    }
}

use crate::stories::T0;

#[test]
fn memory_ceiling_fails_a_gateway_that_keeps_what_the_load_made_it_take() {
    // 40 MiB idle, 200 at the peak, 190 kept: 150 retained, 40 allowed (a
    // quarter of the 160 grown, over the 32 MiB floor).
    let s = memory_story(40, 200, 190, true);
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert_eq!(
        v.short,
        "peak 200 MiB (ceiling 200); retained 150 MiB (allowed 40)"
    );
    assert_eq!(
        v.observed,
        "baseline 40 MiB, peak 200 MiB, drained 190 MiB (RssAnon)"
    );
    assert_eq!(
        v.predicted,
        "peak at most 200 MiB; at most 40 MiB kept above the idle baseline once drained"
    );
    assert!(
        v.detail.starts_with(
            "the gateway kept 150 MiB (157,286,400 bytes) above its idle baseline once the load was gone, over the 40 MiB allowed: 190 MiB after 2 s drained and idle, against 40 MiB before the load (peak 200 MiB); memory taken for requests outlived them"
        ),
        "{}",
        v.detail
    );
    // The peak's part is said after the failing one.
    assert!(
        v.detail
            .ends_with("stayed under the 200 MiB ceiling (100% of it)"),
        "{}",
        v.detail
    );
    assert_eq!(v.figure.unwrap().value, (200 * MIB) as f64);
}

#[test]
fn memory_ceiling_passes_a_gateway_back_at_its_baseline() {
    let s = memory_story(40, 200, 45, true);
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert_eq!(
        v.short,
        "peak 200 MiB (ceiling 200); retained 5 MiB (allowed 40)"
    );
    assert!(
        v.detail.ends_with(
            "after 2 s drained and idle it came back to 45 MiB, 5 MiB above its idle baseline (40 MiB before the load), within the 40 MiB allowed"
        ),
        "{}",
        v.detail
    );
    // A small gateway's growth gives the floor: 32 MiB.
    let v = verdict(
        &run(&memory_story(10, 50, 60, true), &five_seconds()),
        "memory_ceiling",
    );
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.short.ends_with("retained 50 MiB (allowed 32)"),
        "{}",
        v.short
    );
    let v = verdict(
        &run(&memory_story(10, 50, 40, true), &five_seconds()),
        "memory_ceiling",
    );
    assert_eq!(v.status, Status::Pass, "{v:?}");
    // A bound written in [checklist] replaces the rule.
    let mut t = five_seconds();
    t.memory_ceiling.max_retained = Some(MIB);
    let v = verdict(&run(&memory_story(40, 200, 45, true), &t), "memory_ceiling");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.short.ends_with("retained 5 MiB (allowed 1)"),
        "{}",
        v.short
    );
}

#[test]
fn memory_ceiling_fails_a_leak_without_a_ceiling() {
    let mut s = memory_story(40, 200, 190, true);
    s.expect.memory_ceiling_bytes = None;
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert_eq!(
        v.short,
        "peak 200 MiB (no ceiling); retained 150 MiB (allowed 40)"
    );
    assert_eq!(
        v.predicted,
        "no ceiling; at most 40 MiB kept above the idle baseline once drained"
    );
    assert!(v.detail.contains("(157,286,400 bytes)"), "{}", v.detail);
    // And the same gateway back at its baseline passes without one.
    let mut s = memory_story(40, 200, 41, true);
    s.expect.memory_ceiling_bytes = None;
    assert_eq!(
        status(&run(&s, &five_seconds()), "memory_ceiling"),
        Status::Pass
    );
}

#[test]
fn memory_ceiling_reads_the_resident_set_of_samples_without_the_anonymous_part() {
    // The same arc as the resident set alone: judged by it.
    let s = memory_story(40, 200, 190, false);
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert_eq!(
        v.observed,
        "baseline 40 MiB, peak 200 MiB, drained 190 MiB (RSS)"
    );
    // With the anonymous part, the 300 MiB of file-backed pages above it
    // are neither a peak over the ceiling nor retained memory.
    let s = memory_story(40, 190, 40, true);
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert_eq!(j_peak_rss(&s), Some(490 * MIB));
    // A run of both kinds says so.
    let mut s = memory_story(40, 200, 45, true);
    for r in s.rss.iter_mut().take(5) {
        (r.rss_bytes, r.rss_anon_bytes) = (40 * MIB, None);
    }
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert!(
        v.observed.ends_with("(RssAnon where read, else RSS)"),
        "{}",
        v.observed
    );
}

/// The summary's peak resident set: still the whole resident set.
fn j_peak_rss(s: &Story) -> Option<u64> {
    run(s, &five_seconds()).summary.gateway.peak_rss_bytes
}

#[test]
fn memory_ceiling_says_where_its_baseline_and_drained_figures_come_from() {
    // No sample before the load: the first one is the baseline.
    let mut s = memory_story(40, 200, 45, true);
    s.rss.retain(|r| r.t_us >= at(300));
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(
        v.detail.contains(
            "idle baseline (59 MiB at its first sample, 0.3 s into the load: none came before it)"
        ),
        "{}",
        v.detail
    );
    // A wait with no sample in it: the retained memory is not judged.
    let mut s = memory_story(40, 200, 190, true);
    s.rss.retain(|r| r.t_us < at(5_000));
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(
        v.detail
            .ends_with("not measured: no memory was sampled during the wait after the load"),
        "{}",
        v.detail
    );
    // The drained figure is the median of the wait's last second: one
    // sample caught high there does not make a leak, and the first
    // second of the wait, before memory came back, is not read.
    let mut s = memory_story(40, 200, 45, true);
    for r in s.rss.iter_mut() {
        if (at(5_000)..at(6_000)).contains(&r.t_us) || r.t_us == at(6_500) {
            r.rss_anon_bytes = Some(180 * MIB);
        }
    }
    let v = verdict(&run(&s, &five_seconds()), "memory_ceiling");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(v.observed.contains("drained 45 MiB"), "{}", v.observed);
}

/// An attempt the load generator never sent (no connection from the
/// callers' pool within the patience, its reason `not sent: ...`) never
/// reached the gateway: no loss of its. A refused connect is one.
#[test]
fn an_attempt_never_sent_is_no_loss_of_the_gateways() {
    let connect_error = |id: &str, reason: &str| ClientRecord {
        reason: Some(reason.to_owned()),
        ..stories::attempt(id, 1, 0, 900, ClientOutcome::ConnectError, None)
    };
    let ok = stories::attempt("a", 1, 0, 100, ClientOutcome::Ok, None);
    let not_sent = connect_error(
        "b",
        "not sent: no connection within the patience, the callers' pool was busy",
    );
    let j = stories::judged(&[ok.clone(), not_sent], &[], &[], 1.0);
    assert_eq!(status(&j, "no_silent_loss"), Status::Pass);
    let refused = connect_error("b", "connect: connection refused");
    let j = stories::judged(&[ok, refused], &[], &[], 1.0);
    assert_eq!(status(&j, "no_silent_loss"), Status::Fail);
}
