//! `recovery`: once the last trouble has ended and drained, the answered
//! share of what was offered against what a healthy system answers there.
//!
//! The other checks look at the overload itself; a gateway that comes out
//! of it broken (a concurrency slot or a pooled connection lost to every
//! call that timed out, a circuit left open, a tenant's bucket never
//! refilled) refuses on a healthy provider for the rest of its life, and
//! only this check asks what happened after.
//!
//! The window starts when the last trouble has ended (the overload's end;
//! the end of a provider's timeline phase the plan calls trouble, of each
//! provider when there are several) and `drain.within` has passed, and
//! ends with the load. It counts people, not attempts: each person whose
//! first attempt was due in the window is offered once, and answered if
//! any of their attempts was, so a gateway's refusals retried by the
//! callers neither dilute nor inflate the share. People refused for their
//! tenant's own entitlement (`tenant_limited`) and never answered are left
//! out: the gateway enforcing a limit the tenant bought is no failure to
//! recover. A healthy system answers min(offered, the plan's capacity after
//! the trouble × the window's length) of them (all of them when the plan
//! gives no capacity). Fewer than 10 people in the window are too few to
//! judge. Each tenant with at least 10 people in the window is judged too, against the same healthy share: a tenant locked out
//! after the trouble fails the check however well the others fare.

use crate::aftermath::{Aftermath, People};
use crate::expect::{Expectations, RecoveryThreshold};
use crate::verdict::{count, percent, plural, secs, Figure, Status, Verdict, Worse};

use super::{Evidence, US};

/// The least window judged, in scenario seconds: fewer is too little load
/// to tell a slow start from a gateway that never came back.
const MIN_WINDOW_S: f64 = 10.0;

/// The fewest people the window needs to be judged, and a tenant to be
/// judged alone: with fewer, one refusal moves the share by more than the
/// margin `min_share` leaves.
const MIN_PEOPLE: u64 = 10;

/// One group judged: the run, or one tenant (`name`).
struct Judged<'a> {
    name: Option<&'a str>,
    people: People,
    /// Answered ÷ offered.
    share: f64,
    /// Of what a healthy system answers: share ÷ the healthy share.
    of_healthy: f64,
}

/// `recovery`: after the last trouble and `drain.within`, the answered
/// share of the people offered to the load's end (at least 10 scenario
/// seconds of it) is at least `min_share` of a healthy system's, for the
/// run and for each tenant with enough people in the window.
pub(crate) fn recovery(ev: &Evidence, th: &RecoveryThreshold) -> Verdict {
    const ID: &str = crate::Check::Recovery.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    let r = &ev.tally.recovery;
    let Some(end_us) = r.trouble_end_us else {
        return Verdict::skipped(
            ID,
            "no trouble to recover from",
            "no trouble to recover from: the load never overloads the provider and no provider's timeline is in trouble",
        );
    };
    let window = format!(
        "from {} to {}",
        secs(r.scenario_s(r.from_us)),
        secs(r.scenario_s(r.to_us))
    );
    let after = format!(
        "after the last trouble ended at {} and drain.within ({}) passed",
        secs(r.scenario_s(end_us)),
        secs(r.drain_us as f64 / r.second_us as f64)
    );
    if r.to_us <= r.from_us {
        return Verdict::skipped(
            ID,
            "no load after the trouble",
            format!(
                "the load ends at {}, before the last trouble had ended ({}) and drain.within ({}) passed: there is no load after the trouble to judge recovery by (lengthen the load after it)",
                secs(r.scenario_s(r.to_us)),
                secs(r.scenario_s(end_us)),
                secs(r.drain_us as f64 / r.second_us as f64)
            ),
        );
    }
    if r.window_s() < MIN_WINDOW_S {
        return Verdict::skipped(
            ID,
            "under 10 s of load after the trouble",
            format!(
                "the load goes on for {} {after}: under the {} needed to judge recovery (lengthen the load after the trouble, or shorten drain.within)",
                secs(r.window_s()),
                secs(MIN_WINDOW_S)
            ),
        );
    }
    let offered = r.people.offered;
    if offered < MIN_PEOPLE {
        return Verdict::skipped(
            ID,
            "too few people after the trouble",
            format!(
                "{} {window} (scenario seconds), {after}: under the {MIN_PEOPLE} needed to judge recovery (a higher rate or a longer load after the trouble)",
                plural(offered, "person was offered", "people were offered")
            ),
        );
    }
    let (healthy, basis) = healthy(ev.expect, r, offered);
    if healthy.is_nan() || healthy <= 0.0 {
        return Verdict::skipped(
            ID,
            "a healthy system answers nothing",
            format!("the plan's capacity after the trouble is 0: a healthy system answers no one {window}"),
        );
    }
    let healthy_share = healthy / offered as f64;
    let judge = |name, p: People| {
        let share = p.answered as f64 / p.offered as f64;
        Judged {
            name,
            people: p,
            share,
            of_healthy: share / healthy_share,
        }
    };
    let run = judge(None, r.people);
    let tenants: Vec<Judged> = r
        .tenants
        .iter()
        .filter(|(_, p)| p.offered >= MIN_PEOPLE)
        .map(|(t, p)| judge(Some(t.as_str()), *p))
        .collect();
    let worst = tenants
        .iter()
        .chain(std::iter::once(&run))
        .filter(|j| j.of_healthy < th.min_share || !j.of_healthy.is_finite())
        .min_by(|a, b| a.of_healthy.total_cmp(&b.of_healthy));
    let status = if worst.is_some() {
        Status::Fail
    } else {
        Status::Pass
    };
    let shown = worst.unwrap_or(&run);
    let who = shown
        .name
        .map_or(String::new(), |t| format!("tenant {t}: "));
    let short = format!(
        "{who}{} answered after trouble (need {} of healthy {})",
        percent(shown.share),
        percent(th.min_share),
        percent(healthy_share)
    );
    let predicted = format!(
        "at least {} of what a healthy system answers {window} (scenario seconds): {basis} = {} of {} (a share of {})",
        percent(th.min_share),
        count(healthy.round() as u64),
        plural(offered, "person offered", "people offered"),
        percent(healthy_share)
    );
    let observed = observed(r, &run, &tenants, &window);
    let detail = detail(&run, shown, status, &window, &after, healthy_share, th);
    Verdict::new(ID, status, short, predicted, observed, detail).with(Figure {
        value: shown.of_healthy,
        unit: "share",
        measures: "answered share after the trouble, of a healthy system's",
        worse: Worse::Lower,
    })
}

/// What a healthy system answers of `offered` people in `r`'s window,
/// and how that is reckoned (in scenario seconds).
fn healthy(expect: &Expectations, r: &Aftermath, offered: u64) -> (f64, String) {
    let offered_f = offered as f64;
    let window_s = r.to_us.saturating_sub(r.from_us) as f64 / US;
    // Rates per second of the run, shown per scenario second.
    let per_scenario_s = r.second_us as f64 / US;
    match expect.after_trouble {
        Some(a) => match a.capacity_per_s {
            Some(mu) => (
                offered_f.min(mu * window_s).max(0.0),
                format!(
                    "min(offered, the plan's capacity after the trouble {}/s × {})",
                    wire::number::num(mu * per_scenario_s, 1),
                    secs(r.window_s())
                ),
            ),
            None => (offered_f, "everyone offered (the plan's capacity after the trouble is unlimited)".into()),
        },
        None => (
            offered_f,
            "everyone offered (run.json predates the plan's capacity after the trouble: judged against the offered load alone)".into(),
        ),
    }
}

fn observed(r: &Aftermath, run: &Judged, tenants: &[Judged], window: &str) -> String {
    let mut s = format!(
        "{} {window}, {} answered ({})",
        plural(run.people.offered, "person offered", "people offered"),
        count(run.people.answered),
        percent(run.share)
    );
    if !r.tenants.is_empty() {
        let each: Vec<String> = r
            .tenants
            .iter()
            .map(
                |(t, p)| match tenants.iter().find(|j| j.name == Some(t.as_str())) {
                    Some(j) => format!("{t} {} of {}", percent(j.share), count(p.offered)),
                    None => format!(
                        "{t} {} of {} (too few to judge alone)",
                        count(p.answered),
                        count(p.offered)
                    ),
                },
            )
            .collect();
        s.push_str(&format!("; per tenant: {}", each.join(", ")));
    }
    if r.people.entitlement > 0 {
        s.push_str(&format!(
            "; {} refused for their tenant's own entitlement, not counted",
            count(r.people.entitlement)
        ));
    }
    s
}

fn detail(
    run: &Judged,
    shown: &Judged,
    status: Status,
    window: &str,
    after: &str,
    healthy_share: f64,
    th: &RecoveryThreshold,
) -> String {
    let whose = match shown.name {
        Some(t) => format!("tenant {t}"),
        None => "the gateway".into(),
    };
    let of = |j: &Judged| {
        format!(
            "answered {} of {}, {} of what a healthy system answers ({})",
            percent(j.share),
            plural(j.people.offered, "person offered", "people offered"),
            percent(j.of_healthy),
            percent(healthy_share)
        )
    };
    let need = format!("at least {} is required", percent(th.min_share));
    if status == Status::Pass {
        return format!(
            "the gateway recovered: {window} (scenario seconds), {after}, it {}; {need}",
            of(run)
        );
    }
    let whole = if shown.name.is_some() {
        format!(" (the run as a whole: {})", percent(run.share))
    } else {
        String::new()
    };
    format!(
        "{whose} did not recover: {window} (scenario seconds), {after}, it {}{whole}; {need}. A gateway that refuses on a healthy provider after trouble has often lost concurrency slots or pooled connections to calls that timed out or were cancelled, or left a breaker or a tenant's bucket shut: check that every call gives back what it holds however it ends",
        of(shown)
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wire::{AfterTrouble, ClientOutcome, ClientRecord};

    use crate::stories::{self, at, attempt, call, Story};
    use crate::{judge, Judgement, Status, Thresholds, Verdict};

    /// The brownout's end, and the load's, in ms.
    const TROUBLE_END_MS: u64 = 12_000;
    const LOAD_END_MS: u64 = 37_000;

    /// 5 s to drain, as `scenarios/recovery.toml` allows.
    fn thresholds() -> Thresholds {
        let mut t = Thresholds::default();
        t.drain.within = Duration::from_secs(5);
        t
    }

    /// 20 people a second (one every 50 ms) up to `end_ms`, through a
    /// brownout from 2 s to 12 s (the overload, in which a third are
    /// answered), with the provider healthy again after it (60/s, the
    /// plan says). After the brownout, person `n` due at `ms` is answered
    /// in 200 ms (a call made for them) when `answered(n, ms)`, else
    /// refused at once with a 429.
    fn brownout(end_ms: u64, answered: impl Fn(u64, u64) -> bool) -> Story {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for (n, ms) in (0..end_ms).step_by(50).enumerate() {
            let n = n as u64;
            let id = format!("p{n:04}");
            let ok = if (2_000..TROUBLE_END_MS).contains(&ms) {
                n % 3 == 0
            } else {
                ms < 2_000 || answered(n, ms)
            };
            if ok {
                attempts.push(attempt(&id, 1, ms, ms + 200, ClientOutcome::Ok, None));
                calls.push(call(&id, ms + 1, ms + 1, ms + 199));
            } else {
                attempts.push(attempt(
                    &id,
                    1,
                    ms,
                    ms + 1,
                    ClientOutcome::Shed,
                    Some(1_000),
                ));
            }
        }
        let mut expect = stories::expect(Some((2_000, TROUBLE_END_MS)), end_ms, 30.0);
        expect.after_trouble = Some(AfterTrouble {
            from_us: at(TROUBLE_END_MS),
            capacity_per_s: Some(60.0),
        });
        Story {
            attempts,
            calls,
            rss: Vec::new(),
            expect,
        }
    }

    fn verdict(s: &Story) -> Verdict {
        let j: Judgement = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &thresholds());
        let v = j.verdict("recovery").expect("judged").clone();
        // The oracle, every record in memory and grouped by person, agrees.
        let o = crate::oracle::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &thresholds());
        assert_eq!(o.verdict("recovery"), Some(&v));
        assert!(v.short.chars().count() < 70, "{}", v.short);
        v
    }

    fn figure(v: &Verdict) -> f64 {
        let f = v.figure.expect("a figure");
        assert_eq!((f.unit, f.worse), ("share", crate::verdict::Worse::Lower));
        f.value
    }

    #[test]
    fn a_gateway_that_recovers_passes() {
        let v = verdict(&brownout(LOAD_END_MS, |_, _| true));
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(figure(&v), 1.0);
        assert_eq!(
            v.short,
            "100% answered after trouble (need 90% of healthy 100%)"
        );
        // 17 s to 37 s: 400 people, 20 a second.
        assert_eq!(
            v.detail,
            "the gateway recovered: from 17 s to 37 s (scenario seconds), after the last trouble ended at 12 s and drain.within (5 s) passed, it answered 100% of 400 people offered, 100% of what a healthy system answers (100%); at least 90% is required"
        );
        assert_eq!(
            v.predicted,
            "at least 90% of what a healthy system answers from 17 s to 37 s (scenario seconds): min(offered, the plan's capacity after the trouble 60/s × 20 s) = 400 of 400 people offered (a share of 100%)"
        );
    }

    #[test]
    fn a_gateway_that_answers_nothing_after_the_brownout_fails_with_0_percent() {
        let v = verdict(&brownout(LOAD_END_MS, |_, _| false));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(figure(&v), 0.0);
        assert!(
            v.short.starts_with("0% answered after trouble"),
            "{}",
            v.short
        );
        assert!(
            v.detail
                .starts_with("the gateway did not recover: from 17 s to 37 s"),
            "{}",
            v.detail
        );
        assert!(
            v.detail.contains("answered 0% of 400 people offered"),
            "{}",
            v.detail
        );
        assert_eq!(
            v.observed,
            "400 people offered from 17 s to 37 s, 0 answered (0%)"
        );
    }

    /// Five of eight slots leaked: 37 of every 50 answered.
    #[test]
    fn a_gateway_that_answers_74_percent_fails_with_the_share() {
        let v = verdict(&brownout(LOAD_END_MS, |n, _| n % 50 < 37));
        assert_eq!(v.status, Status::Fail);
        assert!((figure(&v) - 0.74).abs() < 1e-9, "{v:?}");
        assert_eq!(
            v.short,
            "74% answered after trouble (need 90% of healthy 100%)"
        );
        assert!(
            v.detail.contains("74% of what a healthy system answers"),
            "{}",
            v.detail
        );
    }

    /// The answers that came back slowly: the first seconds after the
    /// drain time refused, the rest answered. Refusals before the window
    /// (inside the drain time) do not count.
    #[test]
    fn refusals_inside_the_drain_time_do_not_count_and_a_slow_start_can_pass() {
        let v = verdict(&brownout(LOAD_END_MS, |_, ms| ms >= 17_000 + 1_500));
        // 30 of 400 refused: 92.5%.
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!((figure(&v) - 0.925).abs() < 1e-9);
        let v = verdict(&brownout(LOAD_END_MS, |_, ms| ms >= 17_000 + 2_500));
        assert_eq!(v.status, Status::Fail, "{v:?}");
    }

    #[test]
    fn under_10_scenario_seconds_after_the_trouble_is_skipped_saying_so() {
        // The load ends at 25 s: 8 s after 12 s + 5 s.
        let v = verdict(&brownout(25_000, |_, _| false));
        assert_eq!(v.status, Status::Skipped);
        assert_eq!(v.short, "under 10 s of load after the trouble");
        assert_eq!(
            v.detail,
            "the load goes on for 8 s after the last trouble ended at 12 s and drain.within (5 s) passed: under the 10 s needed to judge recovery (lengthen the load after the trouble, or shorten drain.within)"
        );
        assert_eq!(v.figure, None);
    }

    /// The pool demo's brownout lasts to the load's end.
    #[test]
    fn a_trouble_to_the_loads_end_leaves_nothing_to_judge() {
        let mut s = brownout(LOAD_END_MS, |_, _| false);
        s.expect.overload = Some((at(2_000), at(LOAD_END_MS)));
        let v = verdict(&s);
        assert_eq!(v.status, Status::Skipped);
        assert_eq!(v.short, "no load after the trouble");
        assert!(
            v.detail
                .starts_with("the load ends at 37 s, before the last trouble had ended (37 s)"),
            "{}",
            v.detail
        );
    }

    /// Nine people after the trouble: one refusal would be 11%.
    #[test]
    fn fewer_than_10_people_after_the_trouble_are_too_few_to_judge() {
        let mut s = brownout(LOAD_END_MS, |_, _| false);
        s.attempts
            .retain(|a| a.intended_us < at(17_000) || a.intended_us >= at(36_550));
        let v = verdict(&s);
        assert_eq!(
            (v.status, v.short.as_str()),
            (Status::Skipped, "too few people after the trouble")
        );
        assert!(
            v.detail
                .starts_with("9 people were offered from 17 s to 37 s"),
            "{}",
            v.detail
        );
    }

    #[test]
    fn without_a_trouble_there_is_nothing_to_recover_from() {
        let mut s = brownout(LOAD_END_MS, |_, _| true);
        s.expect.overload = None;
        s.expect.after_trouble = None;
        let v = verdict(&s);
        assert_eq!(v.status, Status::Skipped);
        assert!(
            v.detail.starts_with("no trouble to recover from"),
            "{}",
            v.detail
        );
    }

    /// A tenant of one person in ten, refused everything after the
    /// trouble: the run as a whole answers 90% and would pass, the tenant
    /// fails it and is named.
    #[test]
    fn a_tenant_locked_out_after_the_trouble_fails_it_by_name() {
        let mut s = brownout(LOAD_END_MS, |n, ms| ms < 17_000 || n % 20 != 7);
        for a in &mut s.attempts {
            let n: u64 = a.id[1..].parse().unwrap();
            a.tenant = Some(if n % 20 == 7 { "batch" } else { "shop" }.into());
        }
        let v = verdict(&s);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(figure(&v), 0.0);
        assert!(
            v.short.starts_with("tenant batch: 0% answered"),
            "{}",
            v.short
        );
        assert!(
            v.detail.starts_with("tenant batch did not recover"),
            "{}",
            v.detail
        );
        assert!(
            v.detail.contains("(the run as a whole: 95%)"),
            "{}",
            v.detail
        );
        assert!(
            v.observed
                .ends_with("per tenant: batch 0% of 20, shop 100% of 380"),
            "{}",
            v.observed
        );
        // Refused for its own entitlement instead: no failure to recover.
        for a in &mut s.attempts {
            if a.outcome == ClientOutcome::Shed && a.tenant.as_deref() == Some("batch") {
                a.outcome = ClientOutcome::TenantLimited;
                a.reason = Some("tenant_limited".into());
            }
        }
        let v = verdict(&s);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.observed
                .contains("20 refused for their tenant's own entitlement, not counted"),
            "{}",
            v.observed
        );
    }

    /// People, not attempts: a refusal retried and answered is an answer,
    /// and the retry adds no one to the offered load.
    #[test]
    fn people_are_counted_not_retries() {
        let mut s = brownout(LOAD_END_MS, |n, _| n % 2 == 0);
        let retries: Vec<ClientRecord> = s
            .attempts
            .iter()
            .filter(|a| a.outcome == ClientOutcome::Shed && a.intended_us >= at(17_000))
            .map(|a| {
                let sent = (a.done_us - stories::T0) / 1000 + 1_000;
                let mut r = attempt(&a.id, 2, sent, sent + 200, ClientOutcome::Ok, None);
                r.intended_us = a.intended_us;
                r
            })
            .collect();
        s.attempts.extend(retries);
        let v = verdict(&s);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(
            v.observed,
            "400 people offered from 17 s to 37 s, 400 answered (100%)"
        );
    }

    /// A healthy system answers at most the plan's capacity: 10/s of the
    /// 20 offered is a healthy share of 50%, and 45% answered is 90% of it.
    /// A run.json without the capacity is judged against everything
    /// offered, and says so.
    #[test]
    fn the_healthy_share_is_capped_by_the_plans_capacity() {
        let mut s = brownout(LOAD_END_MS, |n, _| n % 20 < 9);
        s.expect.after_trouble = Some(AfterTrouble {
            from_us: at(TROUBLE_END_MS),
            capacity_per_s: Some(10.0),
        });
        let v = verdict(&s);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!((figure(&v) - 0.9).abs() < 1e-9, "{v:?}");
        assert_eq!(
            v.short,
            "45% answered after trouble (need 90% of healthy 50%)"
        );
        s.expect.after_trouble = None;
        let v = verdict(&s);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.predicted
                .contains("run.json predates the plan's capacity after the trouble"),
            "{}",
            v.predicted
        );
    }

    /// The same run 10 times faster: the window and its verdict in the
    /// same scenario seconds.
    #[test]
    fn a_compressed_run_is_judged_in_scenario_seconds() {
        let s = stories::compressed(&brownout(LOAD_END_MS, |n, _| n % 50 < 37), 10);
        let t = thresholds().scaled(wire::Scale {
            time: 10.0,
            quota: 1.0,
        });
        let (a, c, r, e) = (&s.attempts, &s.calls, &s.rss, &s.expect);
        let j = crate::judge::judge_at(a, c, r, e, &t, 10.0);
        let v = j.verdict("recovery").unwrap();
        assert_eq!(v.status, Status::Fail);
        assert!(v.detail.contains("from 17 s to 37 s"), "{}", v.detail);
        assert!(v.detail.contains("drain.within (5 s)"), "{}", v.detail);
        assert!(v.predicted.contains("60/s × 20 s"), "{}", v.predicted);
        assert!((v.figure.unwrap().value - 0.74).abs() < 1e-9);
        let o = crate::oracle::judge_at(a, c, r, e, &t, 10.0);
        assert_eq!(o.verdict("recovery"), Some(v));
    }

    /// With several providers, each trouble the plan names counts: one
    /// that ends at 20 s, after the overload, moves the window to 25 s.
    #[test]
    fn a_providers_trouble_after_the_overload_moves_the_window() {
        let s = brownout(LOAD_END_MS, |_, ms| ms >= 22_000);
        let mut judge = crate::Judge::new(&s.expect, &thresholds());
        let provider = |name: &str| wire::ProviderPlan {
            name: name.into(),
            phases: Vec::new(),
        };
        let trouble = wire::Trouble {
            provider: "b".into(),
            why: "7.0x slower".into(),
            start_s: 10.0,
            duration_s: 10.0,
            others_per_min: None,
            offered_per_min: 1_200.0,
        };
        judge.providers(
            &[provider("a"), provider("b")],
            &[trouble],
            wire::Scale::default(),
        );
        let mut attempts = s.attempts.clone();
        attempts.sort_by_key(|a| a.done_us);
        for a in attempts {
            judge.attempt(a);
        }
        let j = judge.finish();
        let v = j.verdict("recovery").unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.detail.contains("from 25 s to 37 s"), "{}", v.detail);
        assert!(v.detail.contains("ended at 20 s"), "{}", v.detail);
    }

    #[test]
    fn turned_off_it_says_so() {
        let s = brownout(LOAD_END_MS, |_, _| false);
        let mut t = thresholds();
        t.recovery.enabled = false;
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        let v = j.verdict("recovery").unwrap();
        assert_eq!(
            (v.status, v.short.as_str()),
            (Status::Off, "turned off in [checklist]")
        );
    }
}
