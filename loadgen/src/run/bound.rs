//! The load generator's own bound on its open connections: what its
//! callers can hold.
//!
//! A person holds at most one connection at a time, and only while they
//! wait (at most their patience), so the people of a phase hold about
//! rate × mean patience connections at once (Little's law), however slow
//! the target. The bound is that, for the highest rate of the phase and of
//! the phases whose people may still wait in it, with [`HEADROOM`] and
//! [`SLACK`] for Poisson bursts; and never more than the open files this
//! process can spare for connections. A run that stays within what its
//! callers hold never meets it; one that meets it has more people waiting
//! than its schedule and patience account for (the open files gave out
//! first, most likely), and the waits it caused are the load generator's,
//! counted so (see [`crate::http1::BoundWait`] and the run's notes).
//!
//! When the plan says how long a call takes at the target (its expected
//! time in the system, queue included: `[load.clients] time_in_system`,
//! which `rehearse run` fills from its plan), the callers' bound is the
//! peak's rate times that, with [`ROOM`], when that is lower: the callers
//! a target answering as planned holds, and a target far slower than
//! planned is measured (its callers wait in the client, the wait in their
//! latency) rather than flooded with new connections, each an accept for
//! it and a connect for the load generator.
//!
//! The scenario's `max_connections`, when lower, is the limit instead;
//! and with `[load.clients] pool = N` the callers share N connections
//! whatever the phase: their pool. A wait at either is the callers' own.
//! Every wait for a connection, whoever's limit it met, is recorded as
//! the attempt's `client_wait_us`: in its latency, never in its send lag.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::config::LoadPlan;
use crate::schedule::Arrivals;

/// Over rate × mean patience: Poisson bursts, and patience drawn long.
const HEADROOM: f64 = 1.25;

/// Over rate × the expected time in the system: a target several times
/// slower than the plan expects still gets the connections of its
/// callers; one slower than that makes them wait in the client.
const ROOM: f64 = 4.0;

/// Added to every bound: the connections opened before the start (up to
/// 256) have room, and so has a low rate's burst.
const SLACK: usize = 256;

/// Open files kept for everything but the connections: the record files,
/// the runtime, an in-process provider's listener and its first sockets.
pub(crate) const KEPT_FILES: u64 = 256;

/// How many patience draws the mean and the longest are taken from (a
/// generator of its own, so no person's draws change).
const PATIENCE_DRAWS: u32 = 10_000;

/// Why a bound is what it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Why {
    /// Rate × mean patience × headroom, plus slack: what the callers hold.
    Callers { per_s: f64, patience_s: f64 },
    /// Rate × a call's expected time at the target × room, plus slack:
    /// the callers' own bound when the plan (or the scenario's
    /// `[load.clients] time_in_system`) says how long a call takes.
    Expected { per_s: f64, time_s: f64 },
    /// The open files this process can spare: its limit less those kept,
    /// halved when the fake provider serves from this process (`shared`:
    /// its sockets, one per call the gateway makes, come from the same
    /// table).
    OpenFiles { limit: u64, shared: bool },
    /// The scenario's `max_connections`.
    Scenario,
    /// The callers' pool (`[load.clients] pool`).
    Pool,
}

/// From `from_us` (after the schedule's start) on, at most `limit` open
/// connections, for the reason `why`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Step {
    pub(crate) from_us: u64,
    pub(crate) limit: usize,
    pub(crate) why: Why,
}

impl Step {
    /// Whether the limit is the load generator's own (not the scenario's).
    pub(crate) fn own(&self) -> bool {
        !matches!(self.why, Why::Scenario | Why::Pool | Why::Expected { .. })
    }

    /// What the limit is, for a note.
    pub(crate) fn said(&self) -> String {
        match self.why {
            Why::Callers { per_s, patience_s } => format!(
                "{} open connections: {} arrivals/s x {patience_s:.2} s of mean patience x {HEADROOM} + {SLACK}, what the callers can hold",
                self.limit,
                wire::number::count(per_s.round() as u64),
            ),
            Why::Expected { per_s, time_s } => format!(
                "{} open connections: {} arrivals/s x {} ms of expected time at the target x {ROOM} + {SLACK}, what the callers hold when the target answers as planned (past it they wait in the client)",
                self.limit,
                wire::number::count(per_s.round() as u64),
                millis(time_s),
            ),
            Why::OpenFiles { limit, shared } => format!(
                "{} open connections: the open-files limit of {} less {KEPT_FILES} kept for the rest{}",
                self.limit,
                wire::number::count(limit),
                if shared {
                    ", halved: the fake provider serves from this process and takes its sockets from the same files"
                } else {
                    ""
                },
            ),
            Why::Scenario => format!("max_connections = {}", self.limit),
            Why::Pool => format!("the callers' pool of {} connections", self.limit),
        }
    }
}

/// Seconds as milliseconds for a note: two decimals below 10 ms.
fn millis(s: f64) -> String {
    match s * 1e3 {
        ms if ms < 10.0 => format!("{ms:.2}"),
        ms => format!("{ms:.0}"),
    }
}

/// The limit on open connections through the run: one step per phase
/// (one for a replayed log), each the lowest of its callers' bound, the
/// open files (`open_files`: the process's limit, when known) and the
/// scenario's `max_connections`. `shards`: how many processes share the
/// schedule, this one playing 1/`shards` of it.
pub(crate) fn steps(plan: &LoadPlan, shards: u32, open_files: Option<Files>) -> Vec<Step> {
    let (mean_s, longest_s) = patience(plan);
    let share = 1.0 / f64::from(shards.max(1));
    let expected_s = plan.clients.time_in_system.map(|d| d.as_secs_f64());
    let callers = |per_s: f64| {
        let per_s = per_s * share;
        let held = Step {
            from_us: 0,
            limit: (per_s * mean_s * HEADROOM).ceil() as usize + SLACK,
            why: Why::Callers {
                per_s,
                patience_s: mean_s,
            },
        };
        match expected_s {
            Some(time_s) if time_s * ROOM < mean_s * HEADROOM => Step {
                limit: (per_s * time_s * ROOM).ceil() as usize + SLACK,
                why: Why::Expected { per_s, time_s },
                ..held
            },
            _ => held,
        }
    };
    let mut steps: Vec<Step> = match &plan.arrivals {
        Arrivals::Phases(phases) => {
            let mut spans = Vec::with_capacity(phases.len());
            let mut at = 0.0;
            for p in phases {
                let end = at + p.duration.as_secs_f64();
                spans.push((at, end, p.from_per_sec.max(p.to_per_sec)));
                at = end;
            }
            spans
                .iter()
                .map(|&(start, end, _)| {
                    // People of the phases that ended within the longest
                    // patience before this one may still hold a connection.
                    let peak = spans
                        .iter()
                        .filter(|&&(s, e, _)| e > start - longest_s && s < end)
                        .map(|&(_, _, rate)| rate)
                        .fold(0.0, f64::max);
                    Step {
                        from_us: (start * 1e6) as u64,
                        ..callers(peak)
                    }
                })
                .collect()
        }
        // A log: the most arrivals within any stretch of the longest
        // patience, as a rate over that stretch.
        Arrivals::Replay { .. } => {
            let window_us = (longest_s * 1e6).max(1.0) as u64;
            let offsets: Vec<u64> = plan.arrivals.iter(plan.seed).map(|a| a.offset_us).collect();
            let mut most = 0;
            let mut first = 0;
            for (i, &t) in offsets.iter().enumerate() {
                while offsets[first] + window_us < t {
                    first += 1;
                }
                most = most.max(i + 1 - first);
            }
            vec![callers(most as f64 / (window_us as f64 / 1e6))]
        }
    };
    if steps.is_empty() {
        steps.push(callers(0.0));
    }
    for step in &mut steps {
        if let Some(n) = plan.clients.pool {
            // Their pool, whatever the phase's rate: shared by the shards
            // as the schedule is.
            let n = (n as f64 * share).ceil().max(1.0) as usize;
            (step.limit, step.why) = (n, Why::Pool);
        }
        if let Some(Files { limit, shared }) = open_files {
            let spare = limit.saturating_sub(KEPT_FILES) / if shared { 2 } else { 1 };
            let spare = spare.max(1) as usize;
            if spare < step.limit {
                (step.limit, step.why) = (spare, Why::OpenFiles { limit, shared });
            }
        }
        if let Some(cap) = plan.max_connections.filter(|&cap| cap <= step.limit) {
            (step.limit, step.why) = (cap, Why::Scenario);
        }
    }
    steps
}

impl LoadPlan {
    /// The most connections the run opens at once (the open files left
    /// out), for one process of `shards`: in the per-caller model the load
    /// generator's bound at its highest, the peak's rate times the
    /// callers' mean patience (the longest a caller holds a connection,
    /// however slow the target) with room for bursts; with a pool, the
    /// pool; the scenario's `max_connections` when lower.
    pub fn connection_bound(&self, shards: u32) -> usize {
        steps(self, shards, None)
            .iter()
            .map(|s| s.limit)
            .max()
            .unwrap_or(0)
    }
}

impl LoadPlan {
    /// The expected time at the target that bounds the callers'
    /// connections (`[load.clients] time_in_system`, or the plan's), when
    /// it is lower than what their patience allows in some phase; `None`
    /// when their patience or a pool bounds them throughout.
    pub fn bounding_time_in_system(&self) -> Option<Duration> {
        steps(self, 1, None)
            .iter()
            .any(|s| matches!(s.why, Why::Expected { .. }))
            .then_some(self.clients.time_in_system)
            .flatten()
    }
}

/// The open files the connections may take from: a process's limit, and
/// whether the fake provider shares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Files {
    pub(crate) limit: u64,
    pub(crate) shared: bool,
}

/// The open files the run's options give, else this process's soft
/// limit (raised to the hard one), if it can be read.
pub(crate) fn open_files(options: &super::LoadOptions) -> Option<Files> {
    options
        .open_files
        .or_else(|| wire::raise_open_files_limit().ok())
        .map(|limit| Files {
            limit,
            shared: options.open_files_shared,
        })
}

/// The mean and the longest of the people's patience, in seconds at the
/// rehearsal's scale, from a generator of their own.
fn patience(plan: &LoadPlan) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0xb00d_ca11);
    let (mut sum, mut longest) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..PATIENCE_DRAWS {
        let d = plan.draw_patience(&mut rng);
        sum += d;
        longest = longest.max(d);
    }
    (
        sum.as_secs_f64() / f64::from(PATIENCE_DRAWS),
        longest.as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plan(load: &str) -> LoadPlan {
        LoadPlan::from_scenario_str(&format!("[load]\n{load}"), "t.toml", Path::new(".")).unwrap()
    }

    #[test]
    fn each_phase_is_bounded_by_what_its_callers_hold() {
        let p = plan(
            "patience = { fixed = \"2s\" }\n\
             [[load.phases]]\nduration = \"10s\"\nrate = 1000\n\
             [[load.phases]]\nduration = \"1s\"\nrate = 100\n\
             [[load.phases]]\nduration = \"10s\"\nrate = 100\n\
             [[load.phases]]\nduration = \"5s\"\nrate = 100\nramp_to = 4000\n",
        );
        let steps = steps(&p, 1, None);
        let at = |s: &Step| (s.from_us, s.limit);
        // 1,000/s x 2 s x 1.25 + 256.
        assert_eq!(at(&steps[0]), (0, 2_756));
        // Within 2 s of the 1,000/s phase: its people may still wait.
        assert_eq!(at(&steps[1]), (10_000_000, 2_756));
        // 100/s x 2 s x 1.25 + 256 once it is 2 s behind...
        assert_eq!(
            at(&steps[2]),
            (11_000_000, 2_756),
            "starts within 2 s of it"
        );
        // ...and a ramp by its highest rate.
        assert_eq!(at(&steps[3]), (21_000_000, 10_256));
        assert!(steps.iter().all(Step::own));
        assert!(
            steps[0].said().contains("1,000 arrivals/s x 2.00 s"),
            "{}",
            steps[0].said()
        );
        // Two shards: each plays half.
        assert_eq!(super::steps(&p, 2, None)[0].limit, 1_506);
    }

    #[test]
    fn the_open_files_and_the_scenarios_cap_bound_it_when_lower() {
        let p = plan(
            "patience = { fixed = \"2s\" }\n[[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        );
        let s = steps(
            &p,
            1,
            Some(Files {
                limit: 1_024,
                shared: false,
            }),
        )[0];
        assert_eq!(
            (s.limit, s.why),
            (
                768,
                Why::OpenFiles {
                    limit: 1_024,
                    shared: false
                }
            )
        );
        assert!(s.own());
        assert!(
            s.said().contains("open-files limit of 1,024"),
            "{}",
            s.said()
        );
        let p = plan(
            "patience = { fixed = \"2s\" }\nmax_connections = 50\n[[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        );
        let s = steps(
            &p,
            1,
            Some(Files {
                limit: 1_024,
                shared: false,
            }),
        )[0];
        assert_eq!((s.limit, s.own()), (50, false));
        // A cap above the callers' bound is not what binds.
        let p = plan(
            "patience = { fixed = \"2s\" }\nmax_connections = 100000\n[[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        );
        assert_eq!(steps(&p, 1, None)[0].limit, 2_756);
    }

    #[test]
    fn a_pool_is_the_limit_in_every_phase_and_the_open_files_still_bound_it() {
        let p = plan(
            "patience = { fixed = \"2s\" }\n[load.clients]\npool = 40\n\
             [[load.phases]]\nduration = \"1s\"\nrate = 1000\n\
             [[load.phases]]\nduration = \"1s\"\nrate = 1\n",
        );
        let steps = steps(&p, 1, None);
        assert!(steps.iter().all(|s| (s.limit, s.why) == (40, Why::Pool)));
        assert!(!steps[0].own(), "the callers' limit, not the generator's");
        assert_eq!(steps[0].said(), "the callers' pool of 40 connections");
        // Two shards share it.
        assert_eq!(super::steps(&p, 2, None)[0].limit, 20);
        let files = Some(Files {
            limit: 256 + 10,
            shared: false,
        });
        let s = super::steps(&p, 1, files)[0];
        assert_eq!((s.limit, s.own()), (10, true));
    }

    #[test]
    fn a_lognormal_patience_is_bounded_by_its_mean() {
        let p = plan(
            "patience = { lognormal = { median = \"5s\", p99 = \"20s\" } }\n\
             [[load.phases]]\nduration = \"60s\"\nrate = 100\n",
        );
        let s = steps(&p, 1, None)[0];
        let Why::Callers { patience_s, .. } = s.why else {
            panic!("{s:?}")
        };
        // The lognormal's mean: e^(μ + σ²/2), μ = ln 5 s, σ = ln 4 / 2.326.
        let sigma = 4f64.ln() / 2.326;
        let mean = 5.0 * (sigma * sigma / 2.0).exp();
        assert!(
            (patience_s - mean).abs() < 0.05 * mean,
            "{patience_s} vs {mean}"
        );
    }

    #[test]
    fn an_expected_time_at_the_target_bounds_the_callers_below_their_patience() {
        let p = plan(
            "patience = { fixed = \"2s\" }\n[load.clients]\ntime_in_system = \"50ms\"\n\
             [[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        );
        let s = steps(&p, 1, None)[0];
        // 1,000/s x 0.05 s x 4 + 256, not 1,000/s x 2 s x 1.25 + 256.
        assert_eq!(
            (s.limit, s.why),
            (
                456,
                Why::Expected {
                    per_s: 1000.0,
                    time_s: 0.05
                }
            )
        );
        assert!(!s.own(), "the callers' bound: a wait at it is theirs");
        assert!(s.said().contains("50 ms of expected time"), "{}", s.said());
        assert_eq!(millis(0.000476), "0.48");
        // The plan fills it only where the scenario left it out.
        let q = plan(
            "patience = { fixed = \"2s\" }\n[[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        )
        .expecting(Duration::from_millis(100));
        assert_eq!(steps(&q, 1, None)[0].limit, 656);
        assert_eq!(
            p.clone().expecting(Duration::from_millis(100)).clients(),
            p.clients()
        );
        // An expected time past the patience bounds nothing more.
        let q = plan(
            "patience = { fixed = \"2s\" }\n[[load.phases]]\nduration = \"1s\"\nrate = 1000\n",
        )
        .expecting(Duration::from_secs(5));
        assert_eq!(steps(&q, 1, None)[0].limit, 2_756);
        assert_eq!(q.bounding_time_in_system(), None);
        assert_eq!(p.bounding_time_in_system(), Some(Duration::from_millis(50)));
    }
}
