//! The checks of the gateway's queue: where shedding starts (`shed_onset`),
//! how stale its refusals and calls are (`stale_share`, `stale_dispatch`),
//! how long its backlog outlives the overload (`drain`), and what it served
//! meanwhile (`served_latency`, `goodput`).

use crate::expect::{
    DrainThreshold, GoodputThreshold, ServedLatencyThreshold, ShedOnsetThreshold,
    StaleDispatchThreshold, StaleShareThreshold,
};
use crate::timeline::{Baseline, DrainOutcome, FirstShed, BASELINE_SAMPLES, DRAIN_WINDOW};
use crate::verdict::{count, num, percent, plural, round, secs, Figure, Status, Verdict};
use wire::HealthyWaiting;

use super::{Evidence, NO_ATTEMPTS, US};

/// The least depth `shed_onset` allows at the first shed, whatever Q*: the
/// requests on their way into the queue (Q* is 0 when no call can finish
/// inside the patience).
const IN_TRANSIT: f64 = 2.0;

/// `shed_onset`: the gateway sheds at admission, and the depth at its
/// first refusal at admission is at most Q*·(1 + tolerance). A gateway
/// that never sheds through a predicted overload fails, and so does one
/// whose every refusal came after a wait in its queue (stale): it says how
/// many, after how long.
pub(crate) fn shed_onset(ev: &Evidence, th: &ShedOnsetThreshold) -> Verdict {
    const ID: &str = crate::Check::ShedOnset.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    if let Some(skipped) = stopped_before_overload(ev, ID, "so there was no overload to shed in") {
        return skipped;
    }
    if ev.expect.overload.is_none() {
        return Verdict::skipped(
            ID,
            "no overload",
            "the scenario never overloads, so there is no shed onset to judge",
        );
    }
    let e = ev.expect;
    let q = e.queue_bound;
    // Never under two: the depth the joins measure counts a request from
    // its send, so one or two are always on their way into the queue.
    let limit = (q * (1.0 + th.tolerance)).max(IN_TRANSIT);
    // The one bound the line and the sentence both name.
    let bound = bound_said(limit, q, th.tolerance);
    let patience = secs(e.patience_s);
    let predicted = if e.service_s >= e.patience_s {
        // Overloaded by latency: no call can finish in time, so nothing
        // should wait: the first refusal comes as the limit is reached.
        format!(
            "first shed at a depth of at most {} (calls take {}, callers wait {}: none can finish in time, so nothing should wait)",
            round(limit),
            secs(e.service_s),
            patience,
        )
    } else {
        format!(
            "first shed at a depth of at most {} (Q* = {}/s × ({} − {}) = {}, +{}), with {} more in service at the provider",
            round(limit),
            num(e.capacity_per_s, 1),
            patience,
            secs(e.service_s),
            round(q),
            percent(th.tolerance),
            round(e.in_flight_at_provider),
        )
    };
    match ev.first_shed {
        Some(FirstShed { at_us, depth, .. }) => {
            let when = secs(at_us.saturating_sub(e.start_us) as f64 / US);
            let observed = format!(
                "first shed at a depth of {}, {when} into the run{}",
                count(depth),
                measured_bound(ev)
            );
            let short = format!(
                "first shed at depth {} (bound {})",
                count(depth),
                round(limit)
            );
            // Written so that a NaN bound fails rather than passes.
            let within = depth as f64 <= limit;
            let waiting = plural(depth, "request was", "requests were");
            let (status, detail) = if !within {
                (Status::Fail, format!(
                    "sheds late: {waiting} waiting at the first shed, over the bound of {bound} that keeps them inside {patience}"
                ))
            } else if (depth as f64) < q / 4.0 {
                (Status::Pass, format!(
                    "sheds early: {waiting} waiting at the first shed, under a quarter of Q* = {}; capacity may be left unused",
                    round(q)
                ))
            } else {
                (Status::Pass, format!(
                    "sheds on time: {waiting} waiting at the first shed, within the bound of {bound} that keeps them inside {patience}"
                ))
            };
            let figure = Figure::higher(depth as f64, "requests", "waiting at the first shed");
            Verdict::new(ID, status, short, predicted, observed, detail).with(figure)
        }
        None if ev.tally.stale_drops > 0 => {
            // Refusals, but every one after a wait: the queue admitted
            // what it could not serve in time.
            let n = ev.tally.stale_drops;
            let waited = ev.tally.median_stale_wait_s();
            let observed = format!(
                "no refusal at admission; {} dropped after waiting (median {}){}",
                count(n),
                secs(waited),
                measured_bound(ev)
            );
            let short = format!(
                "no shed at admission; {} dropped after {} waits",
                count(n),
                secs(waited)
            );
            let detail = format!(
                "never refused at admission: all {} of its refusals the provider never saw came after waiting in the queue (median {}), with {} queued at the peak; a gateway that sheds refuses at once, at a depth of at most {bound}",
                count(n),
                secs(waited),
                plural(ev.peak_waiting(), "request", "requests"),
            );
            Verdict::new(ID, Status::Fail, short, predicted, observed, detail)
        }
        None => {
            let peak = ev.peak_waiting();
            let observed = format!(
                "no gateway shed; at most {} waiting{}",
                count(peak),
                measured_bound(ev)
            );
            let detail = never_shed(ev, limit, &bound, &patience);
            let short = format!(
                "never shed; {} waiting at the peak (bound {})",
                count(peak),
                round(limit)
            );
            Verdict::new(ID, Status::Fail, short, predicted, observed, detail)
        }
    }
}

/// Why a gateway that never shed through a predicted overload fails
/// `shed_onset`, against the bound its line names (`limit`, said as
/// `bound`), over the part of the overload a stopped run covered.
fn never_shed(ev: &Evidence, limit: f64, bound: &str, patience: &str) -> String {
    let peak = ev.peak_waiting();
    let queued = plural(peak, "request was", "requests were");
    // Written so that a NaN bound says "over".
    let detail = if peak as f64 <= limit {
        format!(
            "never shed: {queued} queued at the peak, within the bound of {bound}, through a predicted overload: what it could not serve inside {patience} was left to the provider (its queue, its refusals passed through) and to the callers' patience; shed at admission instead, once {} wait",
            round(limit)
        )
    } else {
        format!(
            "never shed: {queued} queued at the peak, over the bound of {bound} that keeps them inside {patience}; shed at admission once {} wait",
            round(limit)
        )
    };
    match ev.stop.and_then(|s| s.in_overload()) {
        Some(cut) => format!("{detail} ({cut})"),
        None => detail,
    }
}

/// The bound a first shed is judged against, with what it is made of, as
/// the line and the sentence both say it: `21 (Q* = 14, +50%)`, or with Q*
/// under the floor of requests on their way in, `2 (Q* = 0; at least the
/// 2 on their way into the queue)`.
fn bound_said(limit: f64, q: f64, tolerance: f64) -> String {
    if q * (1.0 + tolerance) >= IN_TRANSIT {
        format!(
            "{} (Q* = {}, +{})",
            round(limit),
            round(q),
            percent(tolerance)
        )
    } else {
        format!(
            "{} (Q* = {}; at least the {} on their way into the queue)",
            round(limit),
            round(q),
            round(IN_TRANSIT)
        )
    }
}

/// Q* again from μ as measured at the provider during the overload, as a
/// clause for `observed` (empty without an overload window).
fn measured_bound(ev: &Evidence) -> String {
    let e = ev.expect;
    match ev.tally.measured_capacity(e) {
        Some(mu) => format!(
            "; μ measured at the provider {}/s gives Q* = {}",
            num(mu, 1),
            round(mu * (e.patience_s - e.service_s))
        ),
        None => String::new(),
    }
}

/// `stale_share`: of the gateway's own refusals (those the provider never
/// saw: at admission, and after waiting), those after waiting (stale) are
/// at most `max_share`. A rising stale count is the sign of a queue deeper
/// than its wait budget lets the gateway serve: what it admits it later
/// drops, after the caller waited for nothing.
pub(crate) fn stale_share(ev: &Evidence, th: &StaleShareThreshold) -> Verdict {
    const ID: &str = crate::Check::StaleShare.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let t = ev.tally;
    let (stale, refused) = (t.stale_drops, t.admission_sheds + t.stale_drops);
    if refused == 0 {
        return Verdict::skipped(
            ID,
            "no gateway refusals",
            "the gateway refused nothing the provider never saw (neither at admission nor after a wait), so there is no share of stale drops to judge",
        );
    }
    let share = stale as f64 / refused as f64;
    let predicted = format!(
        "at most {} of the refusals the provider never saw come after waiting in the queue (stale), the rest at admission",
        percent(th.max_share)
    );
    let waited = if stale > 0 {
        format!(" (median wait {})", secs(t.median_stale_wait_s()))
    } else {
        String::new()
    };
    let observed = format!(
        "{} at admission, {} after waiting{waited}: {} stale",
        count(t.admission_sheds),
        count(stale),
        percent(share)
    );
    let short = format!(
        "{} of {} refusals after waiting, {} (bound {})",
        count(stale),
        count(refused),
        percent(share),
        percent(th.max_share)
    );
    let figure = Figure::higher(share, "share", "refusals after waiting");
    // Written so that a NaN bound fails rather than passes.
    let v = if share <= th.max_share {
        Verdict::new(
            ID,
            Status::Pass,
            short,
            predicted,
            observed,
            format!(
                "{} of the {} refusals the provider never saw came after waiting{waited} ({}), within the allowed {}: the gateway refuses at admission what it cannot serve in time",
                count(stale),
                count(refused),
                percent(share),
                percent(th.max_share)
            ),
        )
    } else {
        Verdict::new(
            ID,
            Status::Fail,
            short,
            predicted,
            observed,
            format!(
                "{} of the {} refusals the provider never saw came after waiting in the queue{waited} ({}), over the allowed {}: the queue is deeper than its wait budget lets the gateway serve, so callers wait only to be dropped; bound the queue to what drains within the budget (about μ × budget)",
                count(stale),
                count(refused),
                percent(share),
                percent(th.max_share)
            ),
        )
    };
    v.with(figure)
}

/// `drain`: after the overload the backlog's rolling mean over
/// [`DRAIN_WINDOW`] scenario seconds is back within its baseline plus
/// max(1, 10% of Q*), within the allowed time, and stays there (the rule is
/// in `timeline`'s docs). The baseline is the run's own p99 before the
/// overload when it has [`BASELINE_SAMPLES`] seconds of it, else the plan's
/// waiting after the overload in a healthy system; skipped without either
/// (or when the plan's arrivals after the overload saturate its servers);
/// passes with a note when nothing ever waited.
pub(crate) fn drain(ev: &Evidence, th: &DrainThreshold) -> Verdict {
    const ID: &str = crate::Check::Drain.id();
    if let Some(skipped) = drain_skipped_before(ev, th) {
        return skipped;
    }
    let d = &ev.drain;
    let within = th.within.as_secs_f64();
    let what = if ev.expect.overload.is_some() {
        "the overload"
    } else {
        "the load"
    };
    let bound = num(d.bound(), 1);
    let mean = format!("the backlog's mean over {DRAIN_WINDOW} scenario seconds");
    let baseline = d
        .baseline
        .map_or(String::new(), |b| baseline_text(&b, what));
    let predicted = format!(
        "{mean} back within {bound} ({baseline}, + {}) within {} of {what} ending",
        num(d.margin, 1),
        secs(within)
    );
    let short_of = |samples: usize| {
        format!(
            "the baseline before {what} is {} long, and the drain is judged against at least {BASELINE_SAMPLES}",
            plural(samples as u64, "scenario second", "scenario seconds"),
        )
    };
    match d.outcome {
        DrainOutcome::NoData => Verdict::skipped(ID, "no attempts", NO_ATTEMPTS),
        DrainOutcome::NothingWaited { longest_s } => Verdict::new(
            ID,
            Status::Pass,
            "nothing waited",
            format!("the backlog back to its baseline within {} of {what} ending", secs(within)),
            "nothing waited",
            format!(
                "nothing ever waited: no attempt stayed in the backlog for a scenario second (the longest {} ms), so there was no backlog to drain",
                num(longest_s * 1000.0, 1)
            ),
        )
        .with(Figure::higher(0.0, "s", "drain time")),
        DrainOutcome::ShortBaseline { samples } => Verdict::skipped(
            ID,
            &format!("baseline {samples} s, needs {BASELINE_SAMPLES} s"),
            format!(
                "{}, and the run directory has no plan figure for the waiting after it to stand in: give the scenario a steady phase of {BASELINE_SAMPLES} s or more before {what}",
                short_of(samples)
            ),
        ),
        DrainOutcome::Saturated { plan, samples } => {
            let (servers, lambda, service) = match plan {
                HealthyWaiting::Saturated {
                    servers,
                    arrivals_per_s,
                    service_s,
                } => (servers, arrivals_per_s, service_s),
                _ => (0, 0.0, 0.0),
            };
            Verdict::skipped(
                ID,
                &format!("baseline {samples} s; arrivals after it saturate {servers} servers"),
                format!(
                    "{}, and the plan's arrivals after {what} ({}/s of {} calls) are at or over what {servers} servers serve ({}/s): a healthy system never drains them, so there is no level to come back to",
                    short_of(samples),
                    num(lambda, 1),
                    secs(service),
                    num(f64::from(servers) / service.max(f64::MIN_POSITIVE), 1),
                ),
            )
        }
        DrainOutcome::EndedEarly { short_s } => Verdict::new(
            ID,
            Status::Fail,
            format!("records end {} before {what} did", secs(short_s)),
            predicted,
            "not drained",
            format!(
                "the records end {} before {what} ended, so the drain was never seen",
                secs(short_s)
            ),
        ),
        DrainOutcome::StillWaiting { mean: last, after_s } => Verdict::new(
            ID,
            Status::Fail,
            format!("still {} waiting at the end (bound {bound})", num(last, 1)),
            predicted,
            "not drained",
            format!(
                "{mean} was still {} when the records end, {} after {what}, over its bound of {bound} ({baseline})",
                num(last, 1),
                secs(after_s)
            ),
        ),
        DrainOutcome::Drained { drain_s } => {
            let observed = format!("drained {} after {what}", secs(drain_s));
            let short = format!("drained in {} (bound {})", secs(drain_s), secs(within));
            let (status, detail) = if drain_s <= within {
                (
                    Status::Pass,
                    format!(
                        "the backlog was back within its bound {} after {what} ended and stayed there ({mean} at most {bound}; {baseline}), down from {} waiting",
                        secs(drain_s),
                        count(d.peak_after)
                    ),
                )
            } else {
                (
                    Status::Fail,
                    format!(
                        "the backlog took {} to come back within its bound after {what} ({mean} at most {bound}; {baseline}; {} waiting at most), over the allowed {}",
                        secs(drain_s),
                        count(d.peak_after),
                        secs(within)
                    ),
                )
            };
            let figure = Figure::higher(drain_s, "s", "drain time");
            Verdict::new(ID, status, short, predicted, observed, detail).with(figure)
        }
    }
}

/// The verdict of `drain` when it is skipped before it looks at the
/// backlog: turned off, or a run stopped before the drain could be seen
/// (`crate::covered`).
fn drain_skipped_before(ev: &Evidence, th: &DrainThreshold) -> Option<Verdict> {
    const ID: &str = crate::Check::Drain.id();
    if !th.enabled {
        return Some(Verdict::off(ID));
    }
    let unseen = ev.stop?.drain_unseen(th.within)?;
    Some(Verdict::skipped(
        ID,
        "stopped before the drain was seen",
        unseen,
    ))
}

/// The verdict of check `id` of the overload when the run stopped before
/// the overload began (`crate::covered`): `so` says what that leaves.
fn stopped_before_overload(ev: &Evidence, id: &'static str, so: &str) -> Option<Verdict> {
    let before = ev.stop?.before_overload()?;
    Some(Verdict::skipped(
        id,
        "stopped before the overload",
        format!("{before}, {so}"),
    ))
}

/// Which baseline the drain was judged against, as a clause:
/// `baseline: 12 s measured, p99 3 waiting`, or `baseline: the plan's 0.4
/// waiting (Erlang C, 8 servers)`.
fn baseline_text(b: &Baseline, what: &str) -> String {
    match b {
        Baseline::Measured { samples, p99 } => format!(
            "baseline: {samples} s measured before {what}, p99 {} waiting",
            count(*p99)
        ),
        Baseline::Planned { plan, .. } => {
            let model = match *plan {
                HealthyWaiting::NoArrivals => format!("nothing arrives after {what}"),
                HealthyWaiting::Constant { arrivals_per_s } => format!(
                    "{}/s evenly spaced after {what}: none wait",
                    num(arrivals_per_s, 1)
                ),
                HealthyWaiting::Unlimited { arrivals_per_s } => format!(
                    "{}/s after {what}, no limit on calls at once: none wait",
                    num(arrivals_per_s, 1)
                ),
                HealthyWaiting::ErlangC { servers, .. } => {
                    format!(
                        "Erlang C, {}",
                        plural(u64::from(servers), "server", "servers")
                    )
                }
                HealthyWaiting::Saturated { .. } => "saturated".to_string(),
            };
            format!(
                "baseline: the plan's {} waiting ({model})",
                num(plan.waiting().unwrap_or(0.0), 1)
            )
        }
    }
}

/// `stale_dispatch`: provider calls made for callers who had already left,
/// as a share of all provider calls, is at most `max_share`.
pub(crate) fn stale_dispatch(ev: &Evidence, th: &StaleDispatchThreshold) -> Verdict {
    const ID: &str = crate::Check::StaleDispatch.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let p = &ev.summary.provider;
    let late = ev.summary.counts.late;
    let predicted = format!(
        "at most {} of provider calls made after their caller left",
        percent(th.max_share)
    );
    if p.calls == 0 {
        return Verdict::skipped(
            ID,
            "no provider calls",
            "no data: the fake provider recorded no calls, so no call made for a caller who had left could be seen",
        );
    }
    let share = p.stale_dispatch as f64 / p.calls as f64;
    let observed = format!(
        "{} of {} calls stale ({}), {} tokens wasted",
        count(p.stale_dispatch),
        count(p.calls),
        percent(share),
        count(p.wasted_tokens)
    );
    let detail = format!(
        "{} of {} provider calls ({}) were made for callers who had already left, wasting {} tokens; {} written after the caller left",
        count(p.stale_dispatch),
        count(p.calls),
        percent(share),
        count(p.wasted_tokens),
        plural(late, "answer was", "answers were"),
    );
    let status = if share <= th.max_share {
        Status::Pass
    } else {
        Status::Fail
    };
    let short = format!(
        "{} of {} calls stale, {} (bound {})",
        count(p.stale_dispatch),
        count(p.calls),
        percent(share),
        percent(th.max_share)
    );
    Verdict::new(ID, status, short, predicted, observed, detail).with(Figure::higher(
        share,
        "share",
        "provider calls for callers gone",
    ))
}

/// `served_latency`: the 99th percentile of per-person latency (first
/// attempt's intended send to the answer) over people served is at most
/// the SLO.
pub(crate) fn served_latency(ev: &Evidence, th: &ServedLatencyThreshold) -> Verdict {
    const ID: &str = crate::Check::ServedLatency.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let predicted = format!("p99 of served requests at most {} ms", num(th.p99_ms, 0));
    let e2e = ev.summary.latency_ms.e2e;
    let (Some(p50), Some(p99)) = (e2e.p50, e2e.p99) else {
        return Verdict::new(
            ID,
            Status::Fail,
            format!("nobody served (bound p99 {} ms)", num(th.p99_ms, 0)),
            predicted,
            "nobody served",
            format!(
                "no data: none of the {} people was served",
                count(ev.tally.people)
            ),
        );
    };
    let served = ev.tally.served;
    let observed = format!("p99 {} ms, p50 {} ms", num(p99, 0), num(p50, 0));
    let short = format!("{observed} (bound p99 {} ms)", num(th.p99_ms, 0));
    let figure = Figure::higher(p99, "ms", "p99 of served requests");
    let v = if p99 <= th.p99_ms {
        Verdict::new(
            ID,
            Status::Pass,
            short,
            predicted,
            observed,
            format!(
                "the {} people served waited {} ms at the 99th percentile (median {} ms), within the {} ms SLO",
                count(served),
                num(p99, 0),
                num(p50, 0),
                num(th.p99_ms, 0)
            ),
        )
    } else {
        Verdict::new(
            ID,
            Status::Fail,
            short,
            predicted,
            observed,
            format!(
                "the {} people served waited {} ms at the 99th percentile (median {} ms), over the {} ms SLO",
                count(served),
                num(p99, 0),
                num(p50, 0),
                num(th.p99_ms, 0)
            ),
        )
    };
    v.with(figure)
}

/// `goodput`: answers completed inside the overload window, per second, are
/// at least `min_share` of the predicted capacity μ.
pub(crate) fn goodput(ev: &Evidence, th: &GoodputThreshold) -> Verdict {
    const ID: &str = crate::Check::Goodput.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let so = "so there is no answer rate under overload to judge";
    if let Some(skipped) = stopped_before_overload(ev, ID, so) {
        return skipped;
    }
    let Some((from, to)) = ev.expect.overload.filter(|(a, b)| b > a) else {
        return Verdict::skipped(
            ID,
            "no overload",
            "the scenario never overloads, so goodput under overload is not judged",
        );
    };
    if ev.expect.service_s >= ev.expect.patience_s {
        return Verdict::skipped(
            ID,
            "no call can finish in time",
            format!(
                "calls take {} and callers wait {}: served-in-time goodput is expected to be near zero, so it is not judged",
                secs(ev.expect.service_s),
                secs(ev.expect.patience_s)
            ),
        );
    }
    let mu = ev.expect.capacity_per_s;
    let need = th.min_share * mu;
    let answered = ev.tally.answered_in_overload;
    let window_s = (to - from) as f64 / US;
    let rate = answered as f64 / window_s;
    let measured = ev
        .tally
        .measured_capacity(ev.expect)
        .map_or(String::new(), |m| {
            format!(" (the provider answered {}/s)", num(m, 1))
        });
    let predicted = format!(
        "at least {}/s answered during the overload ({} of μ = {}/s)",
        num(need, 1),
        percent(th.min_share),
        num(mu, 1)
    );
    let observed = format!("{}/s answered", num(rate, 1));
    let share = if mu > 0.0 { rate / mu } else { f64::INFINITY };
    // A run stopped inside the overload is judged over the part it covered.
    let window = match ev.stop.and_then(|s| s.in_overload()) {
        Some(cut) => format!("{} of the overload the run covered ({cut})", secs(window_s)),
        None => format!("{} overload", secs(window_s)),
    };
    let detail =
        format!(
        "{} in the {window} is {}/s, {} of capacity μ = {}/s{measured}; at least {} is required",
        plural(answered, "answer", "answers"),
        num(rate, 1),
        if share.is_finite() { percent(share) } else { "all".to_string() },
        num(mu, 1),
        percent(th.min_share)
    );
    let status = if rate >= need {
        Status::Pass
    } else {
        Status::Fail
    };
    let short = format!(
        "{}/s answered in the overload (bound {}/s)",
        num(rate, 1),
        num(need, 1)
    );
    let figure = Figure {
        worse: crate::verdict::Worse::Lower,
        ..Figure::higher(rate, "per_s", "answers per second in the overload")
    };
    Verdict::new(ID, status, short, predicted, observed, detail).with(figure)
}
