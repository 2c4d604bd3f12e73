//! `concurrency_below_knee`: a gateway in front of a provider whose latency
//! curve bends (a batched server: past its knee every call slows) should
//! hold the calls in service at or below the knee. Judged over the run's
//! seconds, each counted by its most calls in service at the provider: the
//! check's quantile of them (p99 by default) must be at or below the knee.

use crate::checks::Evidence;
use crate::expect::ConcurrencyBelowKneeThreshold;
use crate::timeline::Second;
use crate::verdict::{Figure, Status, Verdict};
use wire::number::num;

const ID: &str = crate::Check::ConcurrencyBelowKnee.id();

/// Judges the run's seconds against the provider's knee.
pub(crate) fn concurrency_below_knee(ev: &Evidence, th: &ConcurrencyBelowKneeThreshold) -> Verdict {
    of_seconds(ev.seconds, ev.expect.knee, th)
}

/// Judges `seconds` against the provider's `knee` (at the run's scale;
/// `None`: the scenario names none, and the check is skipped).
fn of_seconds(
    seconds: &[Second],
    knee: Option<f64>,
    th: &ConcurrencyBelowKneeThreshold,
) -> Verdict {
    if !th.enabled {
        return Verdict::off(ID);
    }
    let Some(knee) = knee else {
        return Verdict::skipped(
            ID,
            "no knee",
            "the scenario's provider names no load-curve knee, so there is none to stay below",
        );
    };
    let mut levels: Vec<u64> = seconds
        .iter()
        .filter(|s| s.provider_in_service > 0 || s.sent > 0)
        .map(|s| s.provider_in_service)
        .collect();
    if levels.is_empty() {
        return Verdict::skipped(ID, "no calls", "the provider served no call");
    }
    levels.sort_unstable();
    let rank = ((th.quantile.clamp(0.0, 1.0) * levels.len() as f64).ceil() as usize)
        .clamp(1, levels.len());
    let at_q = levels[rank - 1];
    let most = levels[levels.len() - 1];
    let q = format!("p{}", num(th.quantile * 100.0, 0));
    let predicted = format!(
        "{q} of the calls in service at most the knee of {}",
        num(knee, 0)
    );
    let observed = format!("{q} {at_q} in service (most {most})");
    let short = format!("{q} {at_q} calls in service (knee {})", num(knee, 0));
    let (status, detail) = if at_q as f64 <= knee {
        (
            Status::Pass,
            format!(
                "the calls in service stayed at or below the provider's knee of {} ({q} {at_q}, most {most}): no call was slowed by the load",
                num(knee, 0)
            ),
        )
    } else {
        (
            Status::Fail,
            format!(
                "{q} of the run's seconds had {at_q} calls in service at the provider, past its knee of {}: past it every call slows and no more are answered; hold the gateway's concurrency below the knee",
                num(knee, 0)
            ),
        )
    };
    Verdict::new(ID, status, short, predicted, observed, detail).with(Figure::higher(
        at_q as f64,
        "calls",
        "calls in service at the quantile",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(levels: &[u64]) -> Vec<Second> {
        levels
            .iter()
            .enumerate()
            .map(|(t, &n)| Second {
                provider_in_service: n,
                sent: 1,
                ..Second::empty(t as u64)
            })
            .collect()
    }

    #[test]
    fn the_p99_of_the_calls_in_service_is_held_to_the_knee() {
        let th = ConcurrencyBelowKneeThreshold::default();
        // 100 seconds at 30 and one burst second at 40: p99 is 30.
        let mut levels = vec![30; 100];
        levels.push(40);
        let v = of_seconds(&seconds(&levels), Some(32.0), &th);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let v = of_seconds(&seconds(&[40; 50]), Some(32.0), &th);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.detail.contains("past its knee of 32"), "{}", v.detail);
        let v = of_seconds(&seconds(&[40; 50]), None, &th);
        assert_eq!(v.status, Status::Skipped);
    }
}
