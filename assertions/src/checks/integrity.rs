//! The checks of what a run must not lose, hide or outgrow: the gateway's
//! memory (`memory_ceiling`), answers lost or cut short (`no_silent_loss`,
//! `no_silent_truncation`), and whether the run measured the gateway at
//! all (`harness_valid`, `upstream_seen`, the provider-side checks without
//! provider calls).

use crate::expect::{
    Expectations, HarnessValidThreshold, MemoryCeilingThreshold, NoSilentLossThreshold,
    NoSilentTruncationThreshold,
};
use crate::tally::LOST;
use crate::verdict::{count, mib, num, percent, plural, secs, Figure, Status, Verdict};

use super::{Evidence, NO_ATTEMPTS, US};

/// Bytes in a MiB, for figures written without their unit.
const MIB: f64 = 1024.0 * 1024.0;

/// `memory_ceiling`: the gateway's peak memory is at most the ceiling,
/// and once the load is gone (ended, the backlog drained, `settle` idle)
/// it keeps at most `max_retained` above its idle baseline from before the
/// load. Memory is the anonymous part of the resident set where /proc
/// gave it, else the resident set. Each part is judged when it can be: the
/// peak against a ceiling the scenario sets, the retained memory when the
/// run waited after the load (a leak matters without a ceiling).
pub(crate) fn memory_ceiling(ev: &Evidence, th: &MemoryCeilingThreshold) -> Verdict {
    const ID: &str = crate::Check::MemoryCeiling.id();
    if !th.enabled {
        return Verdict::off(ID);
    }
    let ceiling = ev.expect.memory_ceiling_bytes;
    let levels = ev.tally.memory.arc(ev.expect);
    if ev.tally.oom_kills > 0 {
        return killed_by_limit(ID, ev.tally.oom_kills, ceiling, levels.as_ref());
    }
    let Some(m) = levels else {
        return Verdict::skipped(
            ID,
            "memory not sampled",
            "no data: the gateway's memory was not sampled (not spawned by the harness, and no rss_metric)",
        );
    };
    let retention = Retention::of(&m, ev.expect, th);
    if let (None, Retention::Unmeasured(why)) = (ceiling, &retention) {
        return Verdict::skipped(
            ID,
            "no memory ceiling, retention not measured",
            format!("no memory ceiling is set for the gateway, and what it keeps after the load was not measured: {why}"),
        );
    }
    let over_ceiling = ceiling.filter(|c| m.peak_bytes > *c);
    let retained_too_much =
        matches!(retention, Retention::Measured { retained, allowed, .. } if retained > allowed);
    let status = if over_ceiling.is_some() || retained_too_much {
        Status::Fail
    } else {
        Status::Pass
    };
    let peak = mib(m.peak_bytes);
    let (peak_short, peak_predicted) = match ceiling {
        Some(c) => (
            // The unit once per figure: the line stays under 70 columns.
            format!("peak {peak} (ceiling {})", num(c as f64 / MIB, 1)),
            format!("peak at most {}", mib(c)),
        ),
        None => (
            format!("peak {peak} (no ceiling)"),
            "no ceiling".to_string(),
        ),
    };
    let (retained_short, retained_predicted) = retention.said();
    let observed = match m.drained {
        Some((drained, _)) => format!(
            "baseline {}, peak {peak}, drained {} ({})",
            mib(m.baseline),
            mib(drained),
            m.kind
        ),
        None => format!("baseline {}, peak {peak} ({})", mib(m.baseline), m.kind),
    };
    let mut sentences = Vec::new();
    if let Some(c) = ceiling {
        sentences.push(peak_sentence(ev, &m, c));
    }
    sentences.push(retention.sentence(&m));
    // A failing part is said first.
    sentences.sort_by_key(|(failed, _)| !failed);
    let detail: Vec<String> = sentences.into_iter().map(|(_, s)| s).collect();
    Verdict::new(
        ID,
        status,
        format!("{peak_short}; {retained_short}"),
        format!("{peak_predicted}; {retained_predicted}"),
        observed,
        detail.join("; "),
    )
    .with(Figure::higher(m.peak_bytes as f64, "bytes", "peak memory"))
}

/// A gateway killed by its memory limit: it outgrew its memory, whatever
/// its samples show (a process killed at its limit never shows a sample
/// over it).
fn killed_by_limit(
    id: &'static str,
    kills: u64,
    ceiling: Option<u64>,
    levels: Option<&crate::tally::MemoryLevels>,
) -> Verdict {
    let peak = levels.map_or("not sampled".into(), |m| mib(m.peak_bytes));
    let predicted = match ceiling {
        Some(c) => format!("peak memory at most {}", mib(c)),
        None => "the gateway stays within its memory limit".to_string(),
    };
    Verdict::new(
        id,
        Status::Fail,
        format!("killed by its memory limit {kills}x"),
        predicted,
        format!("killed by its memory limit {kills} times; peak sampled {peak}"),
        format!(
            "the gateway was killed by its memory limit {kills} times (the samples before each kill peaked at {peak}): it outgrew its memory"
        ),
    )
}

/// The peak against the ceiling, as a sentence, and whether it failed.
fn peak_sentence(ev: &Evidence, m: &crate::tally::MemoryLevels, ceiling: u64) -> (bool, String) {
    if m.peak_bytes <= ceiling {
        let share = m.peak_bytes as f64 / ceiling.max(1) as f64;
        return (
            false,
            format!(
                "peak memory {} stayed under the {} ceiling ({} of it)",
                mib(m.peak_bytes),
                mib(ceiling),
                percent(share)
            ),
        );
    }
    (
        true,
        format!(
            "memory reached {} {} into the run, over the {} ceiling: bound what the gateway holds per waiting request",
            mib(m.peak_bytes),
            secs(m.peak.t_us.saturating_sub(ev.expect.start_us) as f64 / US),
            mib(ceiling)
        ),
    )
}

/// What the gateway kept above its idle baseline once the load was gone,
/// against what it may keep.
enum Retention {
    Measured {
        drained: u64,
        retained: u64,
        allowed: u64,
        /// The wait after the load, in seconds of the rehearsal.
        idle_s: f64,
    },
    /// Why it could not be measured.
    Unmeasured(&'static str),
}

impl Retention {
    fn of(
        m: &crate::tally::MemoryLevels,
        expect: &Expectations,
        th: &MemoryCeilingThreshold,
    ) -> Retention {
        let Some((from, to)) = expect.memory_settle else {
            return Retention::Unmeasured(
                "the run did not wait for the gateway's memory to settle after the load (it was stopped before its end, the gateway was not running then, the check was off when it ran, or the run was made before the wait existed)",
            );
        };
        let Some((drained, _)) = m.drained else {
            return Retention::Unmeasured("no memory was sampled during the wait after the load");
        };
        Retention::Measured {
            drained,
            retained: drained.saturating_sub(m.baseline),
            allowed: th.allowed_retained(m.peak_bytes.saturating_sub(m.baseline)),
            idle_s: to.saturating_sub(from) as f64 / US,
        }
    }

    /// Its short part and its predicted part.
    fn said(&self) -> (String, String) {
        match self {
            Retention::Measured {
                retained, allowed, ..
            } => (
                format!(
                    "retained {} (allowed {})",
                    mib(*retained),
                    num(*allowed as f64 / MIB, 1)
                ),
                format!(
                    "at most {} kept above the idle baseline once drained",
                    mib(*allowed)
                ),
            ),
            Retention::Unmeasured(_) => (
                "retained not measured".to_string(),
                "what it keeps after the load not judged".to_string(),
            ),
        }
    }

    /// Its sentence, and whether it failed.
    fn sentence(&self, m: &crate::tally::MemoryLevels) -> (bool, String) {
        let baseline = if m.baseline_samples > 0 {
            format!("{} before the load", mib(m.baseline))
        } else {
            format!(
                "{} at its first sample, {} into the load: none came before it",
                mib(m.baseline),
                secs(m.first_after_us as f64 / US)
            )
        };
        match *self {
            Retention::Unmeasured(why) => (
                false,
                format!("what the gateway keeps after the load was not measured: {why}"),
            ),
            Retention::Measured {
                drained,
                retained,
                allowed,
                idle_s,
            } if retained > allowed => (
                true,
                format!(
                    "the gateway kept {} ({} bytes) above its idle baseline once the load was gone, over the {} allowed: {} after {} drained and idle, against {baseline} (peak {}); memory taken for requests outlived them (a leak, or a cache without a bound)",
                    mib(retained),
                    count(retained),
                    mib(allowed),
                    mib(drained),
                    secs(idle_s),
                    mib(m.peak_bytes)
                ),
            ),
            Retention::Measured {
                drained,
                retained,
                allowed,
                idle_s,
            } => (
                false,
                format!(
                    "after {} drained and idle it came back to {}, {} above its idle baseline ({baseline}), within the {} allowed",
                    secs(idle_s),
                    mib(drained),
                    mib(retained),
                    mib(allowed)
                ),
            ),
        }
    }
}

/// A check that reads the provider's side of the run (the joins, the
/// calls: [`Check::reads_provider`](crate::Check::reads_provider)) in a
/// run whose provider recorded no call while the gateway answered some requests (so something else answered
/// them): skipped with the reason, whatever it would have said. A gateway
/// that answered nothing (it refused everything) needed no provider, and
/// its checks stand as judged from the client's side (`drain` passes
/// when nothing waited, `goodput` fails).
pub(crate) fn without_provider_calls(v: Verdict, calls: u64, answered: u64) -> Verdict {
    if calls > 0
        || answered == 0
        || !crate::Check::from_id(v.id).is_some_and(crate::Check::reads_provider)
        || v.status == Status::Skipped
    {
        return v;
    }
    Verdict::skipped(
        v.id,
        "no provider calls",
        "no data: the fake provider recorded no calls, so the provider's side of this check was never seen",
    )
}

/// Answers fewer than this share of which reached the fake provider mean
/// the gateway's upstream is something else (a cache answers some, never
/// almost all).
pub(crate) const UPSTREAM_MIN_SHARE: f64 = 0.01;

/// The run is invalid when the gateway answered at least 10 requests with
/// success while the fake provider received fewer calls than
/// [`UPSTREAM_MIN_SHARE`] of them: its answers came from elsewhere, and
/// every join (the depth, the backlog, stale dispatch) would be read from
/// data the harness never saw. `None` when the run is not so.
pub(crate) fn upstream_seen(ev: &Evidence) -> Option<Verdict> {
    let ok = ev.summary.counts.ok;
    let calls = ev.summary.provider.calls;
    if ok < 10 || calls as f64 >= UPSTREAM_MIN_SHARE * ok as f64 {
        return None;
    }
    Some(Verdict::new(
        "harness_valid",
        Status::Invalid,
        format!(
            "{} provider calls for {} answers",
            count(calls),
            count(ok)
        ),
        format!(
            "the fake provider receives the gateway's calls (at least {} of its answers)",
            percent(UPSTREAM_MIN_SHARE)
        ),
        format!(
            "{} provider calls for {} answers",
            count(calls),
            count(ok)
        ),
        format!(
            "the gateway answered {} requests with success while the fake provider received {}: the gateway's upstream is not the fake provider (point it at the provider URL the run prints), so the depth, the backlog and stale dispatch cannot be judged",
            count(ok),
            plural(calls, "call", "calls")
        ),
    ))
}

/// `no_silent_loss`: attempts that ended in a reset, a connection error, a
/// malformed answer or a timeout (the gateway neither answered nor shed
/// within the caller's patience) are at most `max_lost`.
pub(crate) fn no_silent_loss(ev: &Evidence, th: &NoSilentLossThreshold) -> Verdict {
    const ID: &str = crate::Check::NoSilentLoss.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let by_kind = ev.tally.lost;
    let lost: u64 = by_kind.iter().sum();
    let sent = ev.tally.attempts;
    let breakdown = LOST
        .iter()
        .zip(by_kind)
        .filter(|(_, n)| *n > 0)
        .map(|((_, one, many), n)| plural(n, one, many))
        .collect::<Vec<_>>()
        .join(", ");
    let predicted = format!("at most {} attempts lost", count(th.max_lost));
    let observed = format!("{} of {} attempts lost", count(lost), count(sent));
    let short = format!("{observed} (bound {})", count(th.max_lost));
    let figure = Figure::higher(lost as f64, "attempts", "attempts lost");
    let v = if lost == 0 {
        Verdict::new(
            ID,
            Status::Pass,
            short,
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
            short,
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
            short,
            predicted,
            observed,
            format!(
                "{} of {} attempts ended without an answer or a shed ({breakdown}): the gateway must answer or shed inside the caller's patience",
                count(lost),
                count(sent)
            ),
        )
    };
    v.with(figure)
}

/// `no_silent_truncation`: of the provider calls cut mid-stream (the
/// provider's `stream_cut`, or a stream the gateway hung up on after its
/// first byte), those whose attempt still ended `ok` at the client, with
/// no later call for that attempt completing (a gateway's retry or
/// failover), are at most `max_share`: a gateway that ends its own stream
/// cleanly after an upstream cut (a last chunk and `[DONE]`, or
/// `message_stop`) hands a truncated answer over as a success. Token
/// counts alone cannot tell: a cut call's record counts the tokens sent
/// before the cut, and a relay that passes those on matches them.
pub(crate) fn no_silent_truncation(ev: &Evidence, th: &NoSilentTruncationThreshold) -> Verdict {
    const ID: &str = crate::Check::NoSilentTruncation.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let (cut, silent) = (ev.tally.cut_calls, ev.tally.silent_truncations);
    if cut == 0 {
        return Verdict::skipped(
            ID,
            "no stream cut",
            "no provider call was cut mid-stream (neither a stream_cut nor a stream the gateway hung up on), so no truncation could be handed over: give the provider a stream_cut fault and streamed requests to judge it",
        );
    }
    let share = silent as f64 / cut as f64;
    let predicted = format!(
        "at most {} of the provider's cut streams reach the client as a complete answer",
        percent(th.max_share)
    );
    let observed = format!(
        "{} of {} cut calls answered ok to the client",
        count(silent),
        count(cut)
    );
    let short = format!(
        "{} of {} cut streams answered ok, {} (bound {})",
        count(silent),
        count(cut),
        percent(share),
        percent(th.max_share)
    );
    let figure = Figure::higher(share, "share", "cut streams answered ok");
    let v = if share <= th.max_share {
        let detail = if silent == 0 {
            format!(
                "none of the {} provider calls cut mid-stream reached the client as a complete answer: each cut was passed on as a break (counted by no_silent_loss) or made good by a later call",
                count(cut)
            )
        } else {
            format!(
                "{} of the {} provider calls cut mid-stream reached the client as a complete answer ({}), within the allowed {}",
                count(silent),
                count(cut),
                percent(share),
                percent(th.max_share)
            )
        };
        Verdict::new(ID, Status::Pass, short, predicted, observed, detail)
    } else {
        Verdict::new(
            ID,
            Status::Fail,
            short,
            predicted,
            observed,
            format!(
                "{} of the {} provider calls cut mid-stream reached the client as a complete answer ({}), over the allowed {}: the gateway ended its own stream cleanly after the provider's broke, handing a truncated answer over as a success; pass the break on (end the client's stream with an error) or retry the call",
                count(silent),
                count(cut),
                percent(share),
                percent(th.max_share)
            ),
        )
    };
    v.with(figure)
}

/// `harness_valid`: the load generator's 99th-percentile send lag is at
/// most its bound; otherwise the run is `invalid`. A run with no attempts
/// is invalid too: nothing was rehearsed.
pub(crate) fn harness_valid(
    attempts: u64,
    expect: &Expectations,
    th: &HarnessValidThreshold,
) -> Verdict {
    const ID: &str = crate::Check::HarnessValid.id();
    if !th.enabled {
        return Verdict::off(ID);
    }
    let predicted = format!(
        "send lag p99 at most {} ms",
        num(expect.send_lag_bound_ms, 1)
    );
    let observed = format!("send lag p99 {} ms", num(expect.send_lag_p99_ms, 1));
    if attempts == 0 {
        return Verdict::new(
            ID,
            Status::Invalid,
            "no attempts",
            predicted,
            observed,
            NO_ATTEMPTS,
        );
    }
    let short = format!("{observed} (bound {} ms)", num(expect.send_lag_bound_ms, 1));
    let figure = Figure::higher(expect.send_lag_p99_ms, "ms", "send lag p99");
    // Written so that a NaN lag is invalid too.
    let v = if expect.send_lag_p99_ms <= expect.send_lag_bound_ms {
        Verdict::new(
            ID,
            Status::Pass,
            short,
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
            short,
            predicted,
            observed,
            format!(
                "the load generator fell behind its schedule (send lag p99 {} ms, over the {} ms bound), so the run proves nothing: rerun on a quieter machine or at a smaller time scale",
                num(expect.send_lag_p99_ms, 1),
                num(expect.send_lag_bound_ms, 1)
            ),
        )
    };
    v.with(figure)
}
