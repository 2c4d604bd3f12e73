//! The one table of checks: [`Check`] names every check of the checklist
//! and knows, for each, its id, its place in the verdicts, its family,
//! whether it reads the provider's side of the join, whether an external
//! run must judge it, and how `rehearse compare` tells a regression of its
//! figure. Everything that lists checks (the conclusion's order, report's
//! regression tolerances, `--allow-unjudged`, the README's table, the
//! thresholds' template) takes them from here, so a new check is one more
//! variant and one more row of each `match` below, which the compiler
//! holds to being complete.

use serde::{Deserialize, Serialize};

use crate::verdict::Worse;

/// A check of the checklist. [`Check::ALL`] is their order in a
/// [`crate::Judgement`]'s verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The gateway sheds at admission, at about the predicted depth Q*.
    ShedOnset,
    /// Few refusals come after waiting in the gateway's queue.
    StaleShare,
    /// Refusals carry a Retry-After that tracks the drain time.
    RetryAfter,
    /// The gateway's memory stays under its ceiling.
    MemoryCeiling,
    /// The backlog is back to its baseline soon after the overload.
    Drain,
    /// After the trouble has ended and drained, the gateway answers what a
    /// healthy system answers.
    Recovery,
    /// Few provider calls are made for callers who already left.
    StaleDispatch,
    /// Calls in service when their caller left are hung up on promptly.
    CancelOnHangup,
    /// The gateway's own retries do not multiply the calls to a provider.
    RetryAmplification,
    /// A streamed answer reaches the client as it is made.
    StreamIntact,
    /// The served requests keep their latency SLO.
    ServedLatency,
    /// Answers during the overload stay near capacity.
    Goodput,
    /// Every attempt ends in an answer, a refusal or a clear error.
    NoSilentLoss,
    /// A stream cut upstream never reaches the client as a whole answer.
    NoSilentTruncation,
    /// One (status, reason) never stands for two kinds of refusal.
    RefusalsLegible,
    /// The calls in service stay at or below the provider's knee.
    ConcurrencyBelowKnee,
    /// The harness kept its schedule and the provider saw the calls.
    HarnessValid,
    /// No call into a Retry-After window a provider announced.
    CooldownHonoured,
    /// Traffic leaves a provider in trouble; the others serve.
    Failover,
}

/// What a check is about, for grouping it in the README and the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Refusing work: when, how, and what the refusal says.
    Shedding,
    /// Waiting work: how much, for how long, what comes out of it.
    Backlog,
    /// Work done for nobody: calls for callers who left.
    Waste,
    /// Answers arrive whole and nothing is lost.
    Integrity,
    /// What the gateway process holds.
    Resources,
    /// Several providers, or one that announced a cooldown.
    Routing,
    /// The rig itself.
    Harness,
}

/// How far a check's figure may move the worse way before `rehearse
/// compare` calls it a regression: by more than `share` of the baseline's
/// value and by more than `at_least` (in the figure's unit; seconds and
/// milliseconds at full scale).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// A share of the baseline's value (0.5 = 50%).
    pub share: f64,
    /// The absolute floor, in the figure's unit.
    pub at_least: f64,
}

const fn tol(share: f64, at_least: f64) -> Option<Tolerance> {
    Some(Tolerance { share, at_least })
}

const MIB: f64 = 1024.0 * 1024.0;

impl Check {
    /// Every check, in the order of a judgement's verdicts. Those of
    /// [`Family::Routing`] come last and only in runs that have them.
    pub const ALL: [Check; 19] = [
        Check::ShedOnset,
        Check::StaleShare,
        Check::RetryAfter,
        Check::MemoryCeiling,
        Check::Drain,
        Check::Recovery,
        Check::StaleDispatch,
        Check::CancelOnHangup,
        Check::RetryAmplification,
        Check::StreamIntact,
        Check::ServedLatency,
        Check::Goodput,
        Check::NoSilentLoss,
        Check::NoSilentTruncation,
        Check::RefusalsLegible,
        Check::ConcurrencyBelowKnee,
        Check::HarnessValid,
        Check::CooldownHonoured,
        Check::Failover,
    ];

    /// Its id, as in `report.json`, junit.xml and `[checklist.ID]`.
    pub const fn id(self) -> &'static str {
        match self {
            Check::ShedOnset => "shed_onset",
            Check::StaleShare => "stale_share",
            Check::RetryAfter => "retry_after",
            Check::MemoryCeiling => "memory_ceiling",
            Check::Drain => "drain",
            Check::Recovery => "recovery",
            Check::StaleDispatch => "stale_dispatch",
            Check::CancelOnHangup => "cancel_on_hangup",
            Check::RetryAmplification => "retry_amplification",
            Check::StreamIntact => "stream_intact",
            Check::ServedLatency => "served_latency",
            Check::Goodput => "goodput",
            Check::NoSilentLoss => "no_silent_loss",
            Check::NoSilentTruncation => "no_silent_truncation",
            Check::RefusalsLegible => "refusals_legible",
            Check::ConcurrencyBelowKnee => "concurrency_below_knee",
            Check::HarnessValid => "harness_valid",
            Check::CooldownHonoured => "cooldown_honoured",
            Check::Failover => "failover",
        }
    }

    /// The check whose id is `id`, if there is one.
    ///
    /// ```
    /// use assertions::Check;
    /// assert_eq!(Check::from_id("drain"), Some(Check::Drain));
    /// assert_eq!(Check::from_id("nothing"), None);
    /// ```
    pub fn from_id(id: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|c| c.id() == id)
    }

    /// What it is about.
    pub const fn family(self) -> Family {
        match self {
            Check::ShedOnset | Check::StaleShare | Check::RetryAfter | Check::RefusalsLegible => {
                Family::Shedding
            }
            Check::Drain
            | Check::Recovery
            | Check::ServedLatency
            | Check::Goodput
            | Check::ConcurrencyBelowKnee => Family::Backlog,
            Check::StaleDispatch | Check::CancelOnHangup | Check::RetryAmplification => {
                Family::Waste
            }
            Check::NoSilentLoss | Check::NoSilentTruncation | Check::StreamIntact => {
                Family::Integrity
            }
            Check::MemoryCeiling => Family::Resources,
            Check::CooldownHonoured | Check::Failover => Family::Routing,
            Check::HarnessValid => Family::Harness,
        }
    }

    /// True if and only if it is judged in every run; the checks of
    /// [`Family::Routing`] appear only when a provider announced a
    /// Retry-After or the run has several providers.
    pub const fn always(self) -> bool {
        !matches!(self.family(), Family::Routing)
    }

    /// True if and only if it reads the provider's side of the join (the
    /// calls), so a run whose provider recorded no call while the gateway
    /// answered has no data for it.
    pub const fn reads_provider(self) -> bool {
        matches!(
            self,
            Check::ShedOnset | Check::Drain | Check::StaleDispatch | Check::Goodput
        )
    }

    /// True if and only if a run whose provider the harness did not see
    /// (`--provider external`) must judge it to count: left unjudged (not
    /// disabled), it makes the run invalid unless `--allow-unjudged` names
    /// it.
    pub const fn must_judge(self) -> bool {
        matches!(
            self,
            Check::ShedOnset | Check::RetryAfter | Check::MemoryCeiling | Check::Drain
        )
    }

    /// Which way its figure gets worse.
    pub const fn worse(self) -> Worse {
        match self {
            Check::Goodput | Check::Recovery | Check::CancelOnHangup => Worse::Lower,
            _ => Worse::Higher,
        }
    }

    /// Its figure's default regression tolerance (README, "Gating a CI job
    /// on a baseline"); none for `harness_valid`, whose send lag is the
    /// harness's own, never the gateway's regression.
    pub const fn tolerance(self) -> Option<Tolerance> {
        match self {
            Check::ShedOnset => tol(0.5, 2.0),
            Check::StaleShare => tol(0.5, 0.02),
            Check::RetryAfter => tol(0.5, 0.25),
            Check::MemoryCeiling => tol(0.2, 16.0 * MIB),
            Check::Drain => tol(0.5, 2.0),
            Check::Recovery => tol(0.1, 0.05),
            Check::StaleDispatch => tol(0.5, 0.02),
            Check::CancelOnHangup => tol(0.1, 0.05),
            Check::RetryAmplification => tol(0.25, 0.1),
            Check::StreamIntact => tol(0.5, 20.0),
            Check::ServedLatency => tol(0.25, 50.0),
            Check::Goodput => tol(0.1, 0.0),
            Check::NoSilentLoss | Check::NoSilentTruncation | Check::RefusalsLegible => {
                tol(0.0, 0.0)
            }
            Check::ConcurrencyBelowKnee => tol(0.1, 1.0),
            Check::CooldownHonoured => tol(0.5, 0.01),
            Check::Failover => tol(0.5, 0.05),
            Check::HarnessValid => None,
        }
    }

    /// The ids of the checks an external run may leave unjudged with
    /// `--allow-unjudged` (those that [`Check::must_judge`]).
    pub fn must_judge_ids() -> impl Iterator<Item = &'static str> {
        Check::ALL
            .into_iter()
            .filter(|c| c.must_judge())
            .map(Check::id)
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_read_back() {
        let mut seen = std::collections::HashSet::new();
        for c in Check::ALL {
            assert!(seen.insert(c.id()), "{} twice", c.id());
            assert_eq!(Check::from_id(c.id()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.id());
        }
    }

    #[test]
    fn the_conditional_checks_come_last() {
        let first_conditional = Check::ALL.iter().position(|c| !c.always()).unwrap();
        assert!(Check::ALL[first_conditional..].iter().all(|c| !c.always()));
    }

    /// Every figure a check gives worsens the way its row says, and every
    /// verdict's id is in the table (the stories cover every check that
    /// gives a figure in a run of one provider).
    #[test]
    fn figures_worsen_the_way_the_table_says() {
        for story in [crate::stories::bounded(), crate::stories::naive()] {
            let j = crate::judge(
                &story.attempts,
                &story.calls,
                &story.rss,
                &story.expect,
                &crate::Thresholds::default(),
            );
            let ids: Vec<&str> = j.verdicts.iter().map(|v| v.id).collect();
            let want: Vec<&str> = crate::always_judged().collect();
            assert_eq!(ids, want);
            for v in &j.verdicts {
                let c = Check::from_id(v.id).unwrap();
                if let Some(f) = v.figure {
                    assert_eq!(f.worse, c.worse(), "{c}");
                }
            }
        }
    }

    /// The template `rehearse init` writes has one table per check, in
    /// the verdicts' order, each with `enabled`.
    #[test]
    fn the_thresholds_template_follows_the_table() {
        let tables: Vec<&str> = crate::Thresholds::TEMPLATE
            .lines()
            .filter_map(|l| l.strip_prefix('['))
            .filter_map(|l| l.split(']').next())
            .collect();
        let ids: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
        assert_eq!(tables, ids);
        let parsed: toml::Table = toml::from_str(crate::Thresholds::TEMPLATE).unwrap();
        for c in Check::ALL {
            assert!(
                parsed[c.id()].get("enabled").is_some(),
                "{c} has no enabled"
            );
        }
    }
}
