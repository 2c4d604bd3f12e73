//! The nine checks of the checklist, each a pure function from the joined
//! records to a [`Verdict`].
//!
//! A check says `skipped` only when it is disabled or has nothing to judge
//! (no overload to shed in, no memory ceiling, no attempts at all); when
//! the data needed to show it holds is missing from a run that should have
//! it, it fails, because a check that passes on a broken gateway is worse
//! than none.

use std::collections::{BTreeSet, HashMap};

use hdrhistogram::Histogram;

use crate::expect::{
    DrainThreshold, Expectations, GoodputThreshold, HarnessValidThreshold, MemoryCeilingThreshold,
    NoSilentLossThreshold, RetryAfterThreshold, ServedLatencyThreshold, ShedOnsetThreshold,
    StaleDispatchThreshold,
};
use crate::record::ClientOutcome;
use crate::timeline::{Drain, DrainOutcome, FirstShed, Joined, Summary};
use crate::verdict::{count, mib, num, percent, round, secs, Status, Verdict};

const US: f64 = 1_000_000.0;

/// The share of honouring retries that must be admitted after the overload.
const HONOURED_ADMITTED_SHARE: f64 = 0.9;

/// Sheds needed before Retry-After must vary.
const SHEDS_BEFORE_VARYING: usize = 5;

/// Everything the checks read.
pub(crate) struct Evidence<'a> {
    pub(crate) joined: &'a Joined<'a>,
    pub(crate) expect: &'a Expectations,
    pub(crate) summary: &'a Summary,
    pub(crate) drain: Drain,
    pub(crate) first_shed: Option<FirstShed>,
}

impl Evidence<'_> {
    fn no_attempts(&self) -> bool {
        self.joined.attempts.is_empty()
    }

    /// The most requests waiting at once, in the gateway or the backlog.
    fn peak_waiting(&self) -> u64 {
        self.summary
            .gateway
            .peak_depth
            .max(self.summary.gateway.peak_backlog)
    }

    fn gateway_sheds(&self) -> Vec<usize> {
        (0..self.joined.attempts.len())
            .filter(|&i| self.joined.is_gateway_shed(i))
            .collect()
    }
}

const DISABLED: &str = "disabled in [checklist]";
const NO_ATTEMPTS: &str = "no data: the load generator recorded no attempts";

/// `shed_onset`: the gateway sheds, and the depth at its first shed is at
/// most Q*·(1 + tolerance).
pub(crate) fn shed_onset(ev: &Evidence, th: &ShedOnsetThreshold) -> Verdict {
    const ID: &str = "shed_onset";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    if ev.expect.overload.is_none() {
        return Verdict::skipped(
            ID,
            "the scenario never overloads, so there is no shed onset to judge",
        );
    }
    let e = ev.expect;
    let q = e.queue_bound;
    let limit = q * (1.0 + th.tolerance);
    let patience = secs(e.patience_s);
    let predicted = format!(
        "first shed at a depth of at most {} (Q* = {}/s × ({} − {}) = {}, +{})",
        round(limit),
        num(e.capacity_per_s, 1),
        patience,
        secs(e.service_s),
        round(q),
        percent(th.tolerance),
    );
    match ev.first_shed {
        Some(FirstShed { at_us, depth, .. }) => {
            let when = secs(at_us.saturating_sub(e.start_us) as f64 / US);
            let observed = format!(
                "first shed at a depth of {}, {when} into the run",
                count(depth)
            );
            if depth as f64 > limit {
                Verdict::new(
                    ID,
                    Status::Fail,
                    predicted,
                    observed,
                    format!(
                        "sheds late: {} requests were waiting at the first shed; the bound that keeps them inside {patience} is {}",
                        count(depth),
                        round(q)
                    ),
                )
            } else if (depth as f64) < q / 4.0 {
                Verdict::new(
                    ID,
                    Status::Pass,
                    predicted,
                    observed,
                    format!(
                        "sheds early: {} requests were waiting at the first shed, under a quarter of Q* = {}; capacity may be left unused",
                        count(depth),
                        round(q)
                    ),
                )
            } else {
                Verdict::new(
                    ID,
                    Status::Pass,
                    predicted,
                    observed,
                    format!(
                        "sheds on time: {} requests were waiting at the first shed, within the bound of {} that keeps them inside {patience}",
                        count(depth),
                        round(limit)
                    ),
                )
            }
        }
        None => {
            let peak = ev.peak_waiting();
            let observed = format!("no gateway shed; at most {} waiting", count(peak));
            if peak as f64 <= limit {
                // The overload was too short for the queue to reach the
                // bound: not shedding was right.
                Verdict::new(
                    ID,
                    Status::Pass,
                    predicted,
                    observed,
                    format!(
                        "never shed, and never needed to: at most {} requests were waiting, within the bound of {}",
                        count(peak),
                        round(limit)
                    ),
                )
            } else {
                Verdict::new(
                    ID,
                    Status::Fail,
                    predicted,
                    observed,
                    format!(
                        "never shed: {} requests were queued at the peak; the bound that keeps them inside {patience} is {}",
                        count(peak),
                        round(q)
                    ),
                )
            }
        }
    }
}

/// `retry_after`: every gateway shed carries a Retry-After; it varies; its
/// median relative error against the backlog drain time is within the
/// tolerance; and retries that honour it after the overload are admitted.
pub(crate) fn retry_after(ev: &Evidence, th: &RetryAfterThreshold) -> Verdict {
    const ID: &str = "retry_after";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    let j = ev.joined;
    let predicted = format!(
        "every shed carries a Retry-After within {} of the backlog drain time, with at least {} distinct values; {} of the retries that honour it are admitted after the overload",
        percent(th.tolerance),
        th.min_distinct,
        percent(HONOURED_ADMITTED_SHARE),
    );
    let sheds = ev.gateway_sheds();
    if sheds.is_empty() {
        if ev.expect.overload.is_none() {
            return Verdict::skipped(
                ID,
                "the gateway never shed and the scenario never overloads",
            );
        }
        return Verdict::new(
            ID,
            Status::Fail,
            predicted,
            "no gateway shed",
            format!(
                "never shed, so no Retry-After was ever given: {} requests were queued at the peak",
                count(ev.peak_waiting())
            ),
        );
    }
    let mut failures = Vec::new();

    let missing = sheds
        .iter()
        .filter(|&&i| j.attempts[i].retry_after_ms.is_none())
        .count();
    if missing > 0 {
        failures.push(format!(
            "{} of {} sheds carried no Retry-After",
            count(missing as u64),
            count(sheds.len() as u64)
        ));
    }

    let given: Vec<(u64, u64)> = sheds
        .iter()
        .filter_map(|&i| {
            let a = &j.attempts[i];
            a.retry_after_ms.map(|ra| (ra, a.done_us))
        })
        .collect();
    let distinct: BTreeSet<u64> = given.iter().map(|&(ra, _)| ra).collect();
    if sheds.len() >= SHEDS_BEFORE_VARYING && distinct.len() < th.min_distinct {
        let values = distinct
            .iter()
            .map(|&v| format!("{} ms", count(v)))
            .collect::<Vec<_>>()
            .join(", ");
        failures.push(format!(
            "Retry-After never varies: {} sheds said {} whatever the backlog",
            count(sheds.len() as u64),
            if values.is_empty() {
                "nothing".to_string()
            } else {
                values
            }
        ));
    }

    // Relative errors, in thousandths, in an HDR histogram: the whole run's
    // sheds are never kept and sorted.
    let mut errors = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    for &(ra, done) in &given {
        let drain_ms = j.drain_at_us(done) as f64 / 1000.0;
        let err = (ra as f64 - drain_ms).abs() / drain_ms.max(1000.0);
        errors.saturating_record((err * 1000.0).round() as u64);
    }
    let median_err = (!errors.is_empty()).then(|| errors.value_at_quantile(0.5) as f64 / 1000.0);
    if let Some(err) = median_err {
        if err > th.tolerance {
            failures.push(format!(
                "Retry-After is off the backlog drain time by {} at the median, over the {} tolerance",
                percent(err),
                percent(th.tolerance)
            ));
        }
    }

    let (honouring, admitted) = honoured_retries(ev);
    let honour_note = if honouring == 0 {
        "no retry honoured a Retry-After after the overload (retry policy none?), so admission was not judged".to_string()
    } else {
        let share = admitted as f64 / honouring as f64;
        let s = format!(
            "{} of {} retries that honoured Retry-After after the overload were admitted",
            count(admitted),
            count(honouring)
        );
        if share < HONOURED_ADMITTED_SHARE {
            failures.push(format!("only {s}"));
        }
        s
    };

    let observed = format!(
        "{} sheds, {} without Retry-After, {} distinct values, median error {}, {}/{} honouring retries admitted",
        count(sheds.len() as u64),
        count(missing as u64),
        count(distinct.len() as u64),
        median_err.map_or("n/a".to_string(), percent),
        count(admitted),
        count(honouring),
    );
    if failures.is_empty() {
        Verdict::new(
            ID,
            Status::Pass,
            predicted,
            observed,
            format!(
                "all {} sheds carried a Retry-After ({} distinct values) within {} of the backlog drain time at the median; {honour_note}",
                count(sheds.len() as u64),
                count(distinct.len() as u64),
                median_err.map_or("n/a".to_string(), percent),
            ),
        )
    } else {
        Verdict::new(ID, Status::Fail, predicted, observed, failures.join("; "))
    }
}

/// Retries sent after the overload (or, without one, at any time) no
/// earlier than the previous attempt's done plus its Retry-After: how many,
/// and how many of them were not shed.
fn honoured_retries(ev: &Evidence) -> (u64, u64) {
    let j = ev.joined;
    let after = ev.expect.overload.map_or(ev.expect.start_us, |(_, to)| to);
    let by_attempt: HashMap<(&str, u32), usize> = j
        .attempts
        .iter()
        .enumerate()
        .map(|(i, a)| ((a.id.as_str(), a.attempt), i))
        .collect();
    let (mut honouring, mut admitted) = (0, 0);
    for a in j.attempts {
        if a.attempt <= 1 || a.sent_us < after {
            continue;
        }
        let Some(&p) = by_attempt.get(&(a.id.as_str(), a.attempt - 1)) else {
            continue;
        };
        let prev = &j.attempts[p];
        let Some(ra) = prev.retry_after_ms else {
            continue;
        };
        if a.sent_us >= prev.done_us.saturating_add(ra.saturating_mul(1000)) {
            honouring += 1;
            if a.outcome != ClientOutcome::Shed {
                admitted += 1;
            }
        }
    }
    (honouring, admitted)
}

/// `memory_ceiling`: the gateway's peak resident memory is at most the
/// ceiling.
pub(crate) fn memory_ceiling(ev: &Evidence, th: &MemoryCeilingThreshold) -> Verdict {
    const ID: &str = "memory_ceiling";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    let Some(ceiling) = ev.expect.memory_ceiling_bytes else {
        return Verdict::skipped(ID, "no memory ceiling is set for the gateway");
    };
    let Some(peak) = ev.joined.rss.iter().max_by_key(|r| r.rss_bytes) else {
        return Verdict::skipped(
            ID,
            "no data: the gateway's memory was not sampled (not spawned by the harness, and no rss_metric)",
        );
    };
    let predicted = format!("peak RSS at most {}", mib(ceiling));
    let observed = format!("peak RSS {}", mib(peak.rss_bytes));
    let share = peak.rss_bytes as f64 / ceiling.max(1) as f64;
    if peak.rss_bytes <= ceiling {
        Verdict::new(
            ID,
            Status::Pass,
            predicted,
            observed,
            format!(
                "peak resident memory {} stayed under the {} ceiling ({} of it)",
                mib(peak.rss_bytes),
                mib(ceiling),
                percent(share)
            ),
        )
    } else {
        Verdict::new(
            ID,
            Status::Fail,
            predicted,
            observed,
            format!(
                "resident memory reached {} {} into the run, over the {} ceiling: bound what the gateway holds per waiting request",
                mib(peak.rss_bytes),
                secs(peak.t_us.saturating_sub(ev.expect.start_us) as f64 / US),
                mib(ceiling)
            ),
        )
    }
}

/// `drain`: after the overload the backlog is back to its baseline within
/// the allowed time, and stays there.
pub(crate) fn drain(ev: &Evidence, th: &DrainThreshold) -> Verdict {
    const ID: &str = "drain";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    let d = &ev.drain;
    let within = th.within.as_secs_f64();
    let what = if ev.expect.overload.is_some() {
        "the overload"
    } else {
        "the load"
    };
    let predicted = format!(
        "backlog back to at most {} within {} of {what} ending",
        count(d.baseline),
        secs(within)
    );
    match d.outcome {
        DrainOutcome::NoData => Verdict::skipped(ID, NO_ATTEMPTS),
        DrainOutcome::EndedEarly { short_s } => Verdict::new(
            ID,
            Status::Fail,
            predicted,
            "not drained",
            format!(
                "the records end {} before {what} ended, so the drain was never seen",
                secs(short_s)
            ),
        ),
        DrainOutcome::StillWaiting { waiting, after_s } => Verdict::new(
            ID,
            Status::Fail,
            predicted,
            "not drained",
            format!(
                "still {} waiting when the run ended, {} after {what}",
                count(waiting),
                secs(after_s)
            ),
        ),
        DrainOutcome::Drained { drain_s } => {
            let observed = format!("drained {} after {what}", secs(drain_s));
            if drain_s <= within {
                Verdict::new(
                    ID,
                    Status::Pass,
                    predicted,
                    observed,
                    format!(
                        "the backlog ({} at most after {what}) was back to its baseline of {} {} after {what} ended",
                        count(d.peak_after),
                        count(d.baseline),
                        secs(drain_s)
                    ),
                )
            } else {
                Verdict::new(
                    ID,
                    Status::Fail,
                    predicted,
                    observed,
                    format!(
                        "the backlog took {} to drain after {what} ({} waiting at most), over the allowed {}",
                        secs(drain_s),
                        count(d.peak_after),
                        secs(within)
                    ),
                )
            }
        }
    }
}

/// `stale_dispatch`: provider calls made for callers who had already left,
/// as a share of all provider calls, is at most `max_share`.
pub(crate) fn stale_dispatch(ev: &Evidence, th: &StaleDispatchThreshold) -> Verdict {
    const ID: &str = "stale_dispatch";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    let p = &ev.summary.provider;
    let late = ev.summary.counts.late;
    let predicted = format!(
        "at most {} of provider calls made after their caller left",
        percent(th.max_share)
    );
    if p.calls == 0 {
        return Verdict::new(
            ID,
            Status::Pass,
            predicted,
            "no provider calls",
            "no provider calls were recorded, so none was made for a caller who had left",
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
        "{} of {} provider calls ({}) were made for callers who had already left, wasting {} tokens; {} answers were written after their caller left",
        count(p.stale_dispatch),
        count(p.calls),
        percent(share),
        count(p.wasted_tokens),
        count(late)
    );
    let status = if share <= th.max_share {
        Status::Pass
    } else {
        Status::Fail
    };
    Verdict::new(ID, status, predicted, observed, detail)
}

/// `served_latency`: the 99th percentile of per-person latency (first
/// attempt's intended send to the answer) over people served is at most
/// the SLO.
pub(crate) fn served_latency(ev: &Evidence, th: &ServedLatencyThreshold) -> Verdict {
    const ID: &str = "served_latency";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    let predicted = format!("p99 of served requests at most {} ms", num(th.p99_ms, 0));
    let e2e = ev.summary.latency_ms.e2e;
    let (Some(p50), Some(p99)) = (e2e.p50, e2e.p99) else {
        return Verdict::new(
            ID,
            Status::Fail,
            predicted,
            "nobody served",
            format!(
                "no data: none of the {} people was served",
                count(ev.joined.people)
            ),
        );
    };
    let served = ev.joined.served_us.len() as u64;
    let observed = format!("p99 {} ms, p50 {} ms", num(p99, 0), num(p50, 0));
    if p99 <= th.p99_ms {
        Verdict::new(
            ID,
            Status::Pass,
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
    }
}

/// `goodput`: answers completed inside the overload window, per second, are
/// at least `min_share` of the predicted capacity μ.
pub(crate) fn goodput(ev: &Evidence, th: &GoodputThreshold) -> Verdict {
    const ID: &str = "goodput";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    let Some((from, to)) = ev.expect.overload.filter(|(a, b)| b > a) else {
        return Verdict::skipped(
            ID,
            "the scenario never overloads, so goodput under overload is not judged",
        );
    };
    let mu = ev.expect.capacity_per_s;
    let need = th.min_share * mu;
    let answered = ev
        .joined
        .attempts
        .iter()
        .filter(|a| a.outcome == ClientOutcome::Ok && from <= a.done_us && a.done_us < to)
        .count();
    let window_s = (to - from) as f64 / US;
    let rate = answered as f64 / window_s;
    let measured = ev
        .joined
        .measured_capacity(from, to)
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
    let detail = format!(
        "{} answers in the {} overload is {}/s, {} of capacity μ = {}/s{measured}; at least {} is required",
        count(answered as u64),
        secs(window_s),
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
    Verdict::new(ID, status, predicted, observed, detail)
}

/// `no_silent_loss`: attempts that ended in a reset, a connection error, a
/// malformed answer or a timeout (the gateway neither answered nor shed
/// within the caller's patience) are at most `max_lost`.
pub(crate) fn no_silent_loss(ev: &Evidence, th: &NoSilentLossThreshold) -> Verdict {
    const ID: &str = "no_silent_loss";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    if ev.no_attempts() {
        return Verdict::skipped(ID, NO_ATTEMPTS);
    }
    let kinds = [
        (ClientOutcome::Timeout, "timeouts"),
        (ClientOutcome::Reset, "resets"),
        (ClientOutcome::ConnectError, "connection errors"),
        (ClientOutcome::Malformed, "malformed answers"),
    ];
    let mut by_kind = [0u64; 4];
    for a in ev.joined.attempts {
        if let Some(k) = kinds.iter().position(|(o, _)| *o == a.outcome) {
            by_kind[k] += 1;
        }
    }
    let lost: u64 = by_kind.iter().sum();
    let sent = ev.joined.attempts.len() as u64;
    let breakdown = kinds
        .iter()
        .zip(by_kind)
        .filter(|(_, n)| *n > 0)
        .map(|((_, name), n)| format!("{} {name}", count(n)))
        .collect::<Vec<_>>()
        .join(", ");
    let predicted = format!("at most {} attempts lost", count(th.max_lost));
    let observed = format!("{} of {} attempts lost", count(lost), count(sent));
    if lost == 0 {
        Verdict::new(
            ID,
            Status::Pass,
            predicted,
            observed,
            format!(
                "all {} attempts ended in an answer, a shed or a clear error status",
                count(sent)
            ),
        )
    } else if lost <= th.max_lost {
        Verdict::new(
            ID,
            Status::Pass,
            predicted,
            observed,
            format!(
                "{} of {} attempts ended without an answer or a shed ({breakdown}), within the allowed {}",
                count(lost),
                count(sent),
                count(th.max_lost)
            ),
        )
    } else {
        Verdict::new(
            ID,
            Status::Fail,
            predicted,
            observed,
            format!(
                "{} of {} attempts ended without an answer or a shed ({breakdown}): the gateway must answer or shed inside the caller's patience",
                count(lost),
                count(sent)
            ),
        )
    }
}

/// `harness_valid`: the load generator's 99th-percentile send lag is at
/// most its bound; otherwise the run is `invalid`. A run with no attempts
/// is invalid too: nothing was rehearsed.
pub(crate) fn harness_valid(
    attempts: usize,
    expect: &Expectations,
    th: &HarnessValidThreshold,
) -> Verdict {
    const ID: &str = "harness_valid";
    if !th.enabled {
        return Verdict::skipped(ID, DISABLED);
    }
    let predicted = format!(
        "send lag p99 at most {} ms",
        num(expect.send_lag_bound_ms, 1)
    );
    let observed = format!("send lag p99 {} ms", num(expect.send_lag_p99_ms, 1));
    if attempts == 0 {
        return Verdict::new(ID, Status::Invalid, predicted, observed, NO_ATTEMPTS);
    }
    // Written so that a NaN lag is invalid too.
    if expect.send_lag_p99_ms <= expect.send_lag_bound_ms {
        Verdict::new(
            ID,
            Status::Pass,
            predicted,
            observed,
            format!(
                "the load generator kept its schedule: send lag p99 {} ms, within the {} ms bound",
                num(expect.send_lag_p99_ms, 1),
                num(expect.send_lag_bound_ms, 1)
            ),
        )
    } else {
        Verdict::new(
            ID,
            Status::Invalid,
            predicted,
            observed,
            format!(
                "the load generator fell behind its schedule (send lag p99 {} ms, over the {} ms bound), so the run proves nothing: rerun on a quieter machine or at a smaller time scale",
                num(expect.send_lag_p99_ms, 1),
                num(expect.send_lag_bound_ms, 1)
            ),
        )
    }
}
