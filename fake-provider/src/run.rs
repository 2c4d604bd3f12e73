//! A run of the provider: what `POST /_fake/reset` starts, and what the
//! admin API keeps between resets (the lease, the config uploaded for the
//! next run).
//!
//! A run owns its config, its timeline's start, its arrival numbers
//! (`seq`), its counts and its quota buckets: a reset makes new ones, so a
//! call still open from the run before finishes against its own (it is
//! answered as it began, counted in its run's counts, and its record goes
//! to its run's file under its run's id), and the new run starts from
//! zero with full buckets.
//!
//! The lease keeps two pipelines sharing one provider from resetting each
//! other's runs: a reset takes it (for `lease_s`, an hour by default), and
//! a reset by anyone else while it is held is refused (409) unless forced.
//! The holder may reset its own run again (same run id: a retried reset),
//! renew the lease or give it back (`POST /_fake/lease`).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wire::{Clock, QuotaBuckets};

use crate::config::ProviderConfig;
use crate::counters::Counters;

/// A lease's length when a reset names none: an hour.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(3600);

/// The longest lease: a week.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How far from the provider's clock a reset's `start_at_unix_ms` may be,
/// either way: a day.
pub const MAX_START_OFFSET: Duration = Duration::from_secs(24 * 3600);

/// The longest run id.
pub const MAX_RUN_ID: usize = 128;

/// One run: its config and the state a reset starts anew.
pub(crate) struct Run {
    pub(crate) id: String,
    /// 0 for the run the provider started with, then 1, 2, ... per reset.
    pub(crate) number: u64,
    /// Its settings (never the admin token: that is the process's).
    pub(crate) config: ProviderConfig,
    /// 0 for the config the provider started with, then the version
    /// `PUT /_fake/config` gave it.
    pub(crate) config_version: u64,
    /// Where the timeline's `t = 0` is: phase `from` times count from it.
    /// Before it (a start in the future), no phase is active.
    pub(crate) timeline_start: Instant,
    pub(crate) timeline_start_us: u64,
    pub(crate) reset_at_us: u64,
    /// Arrivals in this run so far: the next call's `seq`.
    pub(crate) seq: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) quota: Mutex<QuotaBuckets>,
}

impl Run {
    /// A run of `config` whose timeline starts at `timeline_start`.
    pub(crate) fn new(
        id: String,
        number: u64,
        config: ProviderConfig,
        config_version: u64,
        clock: &Clock,
        timeline_start: Instant,
    ) -> Run {
        // Each bucket holds the config's window of its refill: one minute,
        // or one scenario minute of a time-scaled config.
        let quota = QuotaBuckets::with_window(config.quota.window);
        let counters = Counters::new(&config.models);
        Run {
            id,
            number,
            config,
            config_version,
            timeline_start,
            timeline_start_us: clock.us_at(timeline_start),
            reset_at_us: clock.now_us(),
            seq: AtomicU64::new(0),
            counters,
            quota: Mutex::new(quota),
        }
    }

    /// This run with its timeline starting at `at` instead: the same id,
    /// number, config and arrival numbers (its records go on in the same
    /// file, no `seq` twice), its counts and quota buckets anew.
    pub(crate) fn restarted_at(&self, clock: &Clock, at: Instant) -> Run {
        let mut run = Run::new(
            self.id.clone(),
            self.number,
            self.config.clone(),
            self.config_version,
            clock,
            at,
        );
        run.seq = AtomicU64::new(self.seq.load(std::sync::atomic::Ordering::Relaxed));
        run.reset_at_us = self.reset_at_us;
        run
    }

    /// The timeline phases active at `now`, as a mask (bit i: phase i).
    pub(crate) fn phase_mask(&self, now: Instant) -> u64 {
        let Some(t) = now.checked_duration_since(self.timeline_start) else {
            return 0; // the timeline has not started yet
        };
        let mut mask = 0u64;
        for (i, p) in self.config.timeline.iter().enumerate() {
            if p.from.0 <= t && p.until.is_none_or(|u| t < u.0) {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The first instant after `now` at which a phase of the timeline
    /// begins or ends; `None` when none does.
    pub(crate) fn next_change(&self, now: Instant) -> Option<Instant> {
        self.config
            .timeline
            .iter()
            .flat_map(|p| std::iter::once(p.from.0).chain(p.until.map(|u| u.0)))
            .map(|d| self.timeline_start + d)
            .filter(|at| *at > now)
            .min()
    }
}

/// What the admin API keeps between resets.
#[derive(Default)]
pub(crate) struct Book {
    /// When the current run's lease ends (provider clock, µs); `None`: no
    /// lease held.
    pub(crate) lease_until_us: Option<u64>,
    /// The config uploaded for the next run.
    pub(crate) pending: Option<Pending>,
    /// The last config version given out.
    pub(crate) last_version: u64,
}

/// A config uploaded by `PUT /_fake/config`, waiting for a reset.
pub(crate) struct Pending {
    pub(crate) version: u64,
    pub(crate) config: ProviderConfig,
}

/// The body of `POST /_fake/reset` (every field optional; an empty body
/// is all defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetRequest {
    /// The new run's id (up to 128 letters, digits and `._:-`); generated
    /// when absent. Naming the run that holds the lease resets it again.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Where the timeline's `t = 0` is, in ms since the Unix epoch on the
    /// provider's clock (the one `GET /_fake/time` reads): now when
    /// absent. In the future, the timeline waits for it (no phase active
    /// until then); at most a day away either way.
    #[serde(default)]
    pub start_at_unix_ms: Option<u64>,
    /// The lease the new run holds, in seconds: an hour when absent, none
    /// when 0, at most a week.
    #[serde(default)]
    pub lease_s: Option<f64>,
    /// Reset even while another run holds the lease.
    #[serde(default)]
    pub force: bool,
    /// Apply this config version only: refused (409) when the config the
    /// reset would apply (the pending one, else the current one) is not
    /// this version, e.g. another pipeline uploaded its own since.
    #[serde(default)]
    pub config_version: Option<u64>,
}

/// The body of `POST /_fake/lease`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseRequest {
    /// The run that holds (or should hold) the lease: the current run.
    pub run_id: String,
    /// The lease from now, in seconds: an hour when absent; 0 gives it
    /// back.
    #[serde(default)]
    pub lease_s: Option<f64>,
}

/// The current run, as `GET /_fake/run` and a reset answer it. Times are
/// on the provider's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The run's id: records of its calls carry it as `run_id`.
    pub run_id: String,
    /// 0 for the run the provider started with, then one more per reset.
    pub run_number: u64,
    /// When the run began (the reset, or the provider's start).
    pub reset_at_unix_ms: u64,
    /// Where the timeline's `t = 0` is.
    pub timeline_start_unix_ms: u64,
    /// The version of the config in force (0: the one the provider
    /// started with).
    pub config_version: u64,
    /// A config uploaded for the next reset, if any.
    pub pending_config_version: Option<u64>,
    /// The lease, if one is held.
    pub lease: Option<LeaseInfo>,
    /// The run a reset ended (only in a reset's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousRun>,
}

/// A held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// When it ends.
    pub expires_unix_ms: u64,
    /// How long it has left.
    pub remaining_ms: u64,
}

/// The run a reset ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousRun {
    /// Its id.
    pub run_id: String,
    /// Records its file held at the reset (its calls still open then are
    /// added to that file as they end).
    pub records: u64,
    /// Its file, renamed (`FILE.1`).
    pub records_file: String,
}

/// An admin request the provider would not carry out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AdminRefusal {
    /// Another run holds the lease (409).
    #[error("run `{run_id}` holds the lease for {remaining_ms} ms more (until {expires_unix_ms} ms after the Unix epoch): wait for it, or reset with \"force\": true to take it")]
    LeaseHeld {
        /// The holder.
        run_id: String,
        /// When the lease ends.
        expires_unix_ms: u64,
        /// How long it has left.
        remaining_ms: u64,
    },
    /// A lease request named a run that is not the current one (409).
    #[error("run `{asked}` is not the current run (`{current}` is)")]
    NotCurrent {
        /// The run named.
        asked: String,
        /// The current run.
        current: String,
    },
    /// The config a reset would apply is not the version it asked for
    /// (409).
    #[error("the config a reset would apply is version {applies}, not version {asked} (another upload since?)")]
    ConfigVersion {
        /// The version asked for.
        asked: u64,
        /// The version it would apply.
        applies: u64,
    },
    /// The request is not valid (400).
    #[error("{0}")]
    Invalid(String),
    /// The record files could not be rotated (500).
    #[error("cannot start the new run's records file: {0}")]
    Io(String),
}

impl AdminRefusal {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            AdminRefusal::LeaseHeld { .. }
            | AdminRefusal::NotCurrent { .. }
            | AdminRefusal::ConfigVersion { .. } => 409,
            AdminRefusal::Invalid(_) => 400,
            AdminRefusal::Io(_) => 500,
        }
    }

    /// The JSON body it is answered with: `error` (the message) and the
    /// figures a client acts on.
    pub fn body(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"error": self.to_string()});
        match self {
            AdminRefusal::LeaseHeld {
                run_id,
                expires_unix_ms,
                remaining_ms,
            } => {
                v["run_id"] = run_id.as_str().into();
                v["lease_expires_unix_ms"] = (*expires_unix_ms).into();
                v["lease_remaining_ms"] = (*remaining_ms).into();
            }
            AdminRefusal::NotCurrent { current, .. } => v["run_id"] = current.as_str().into(),
            AdminRefusal::ConfigVersion { applies, .. } => {
                v["config_version"] = (*applies).into();
            }
            AdminRefusal::Invalid(_) | AdminRefusal::Io(_) => {}
        }
        v
    }
}

/// May a reset asking for run `asked` (or a new one) go ahead while run
/// `holder` holds a lease until `lease_until_us`? Yes when no lease is held
/// (or it has ended), when it is forced, or when it names the holder.
pub(crate) fn check_lease(
    holder: &str,
    lease_until_us: Option<u64>,
    now_us: u64,
    asked: Option<&str>,
    force: bool,
) -> Result<(), AdminRefusal> {
    match lease_until_us {
        Some(until) if until > now_us && !force && asked != Some(holder) => {
            Err(AdminRefusal::LeaseHeld {
                run_id: holder.to_string(),
                expires_unix_ms: until / 1000,
                remaining_ms: (until - now_us).div_ceil(1000),
            })
        }
        _ => Ok(()),
    }
}

/// A lease's length from a request's `lease_s`: the default when absent,
/// none when 0.
pub(crate) fn lease_length(lease_s: Option<f64>) -> Result<Option<Duration>, AdminRefusal> {
    let Some(s) = lease_s else {
        return Ok(Some(DEFAULT_LEASE));
    };
    if !(s.is_finite() && s >= 0.0 && s <= MAX_LEASE.as_secs_f64()) {
        return Err(AdminRefusal::Invalid(format!(
            "lease_s must be a number of seconds from 0 (no lease) to {} (a week), not {s}",
            MAX_LEASE.as_secs()
        )));
    }
    Ok((s > 0.0).then(|| Duration::from_secs_f64(s)))
}

/// Checks a run id given by a client.
pub(crate) fn check_run_id(id: &str) -> Result<(), AdminRefusal> {
    let ok = !id.is_empty()
        && id.len() <= MAX_RUN_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AdminRefusal::Invalid(format!(
            "run_id must be 1 to {MAX_RUN_ID} letters, digits and `._:-`, not {id:?}"
        )))
    }
}

/// The instant a reset's `start_at_unix_ms` names (on `clock`, read at
/// `now`): `now` when absent.
pub(crate) fn timeline_start(
    clock: &Clock,
    now: Instant,
    start_at_unix_ms: Option<u64>,
) -> Result<Instant, AdminRefusal> {
    let Some(ms) = start_at_unix_ms else {
        return Ok(now);
    };
    let now_us = clock.us_at(now);
    let at_us = ms.saturating_mul(1000);
    let (ahead, by) = if at_us >= now_us {
        (true, Duration::from_micros(at_us - now_us))
    } else {
        (false, Duration::from_micros(now_us - at_us))
    };
    let far = || {
        AdminRefusal::Invalid(format!(
            "start_at_unix_ms {ms} is {} s from the provider's clock ({} ms): at most a day either way (is it in seconds, or another clock?)",
            by.as_secs(),
            now_us / 1000
        ))
    };
    if by > MAX_START_OFFSET {
        return Err(far());
    }
    if ahead {
        Ok(now + by)
    } else {
        now.checked_sub(by).ok_or_else(far)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_refuses_others_until_it_ends_or_is_forced() {
        let held = Some(10_000_000);
        assert!(check_lease("a", None, 5, None, false).is_ok(), "no lease");
        let err = check_lease("a", held, 4_000_000, Some("b"), false).unwrap_err();
        assert_eq!(
            err,
            AdminRefusal::LeaseHeld {
                run_id: "a".into(),
                expires_unix_ms: 10_000,
                remaining_ms: 6_000
            }
        );
        assert_eq!(err.status(), 409);
        assert_eq!(err.body()["run_id"], "a");
        assert_eq!(err.body()["lease_expires_unix_ms"], 10_000);
        assert!(check_lease("a", held, 4_000_000, None, false).is_err());
        assert!(check_lease("a", held, 4_000_000, Some("b"), true).is_ok());
        assert!(
            check_lease("a", held, 4_000_000, Some("a"), false).is_ok(),
            "the holder resets its own run again"
        );
        assert!(
            check_lease("a", held, 10_000_000, Some("b"), false).is_ok(),
            "ended"
        );
    }

    #[test]
    fn lease_lengths() {
        assert_eq!(lease_length(None).unwrap(), Some(DEFAULT_LEASE));
        assert_eq!(lease_length(Some(0.0)).unwrap(), None);
        assert_eq!(
            lease_length(Some(1.5)).unwrap(),
            Some(Duration::from_millis(1500))
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 8.0 * 24.0 * 3600.0] {
            assert_eq!(lease_length(Some(bad)).unwrap_err().status(), 400, "{bad}");
        }
    }

    #[test]
    fn run_ids() {
        assert!(check_run_id("ci-1234.5:a_b").is_ok());
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert!(check_run_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_timeline_starts_at_the_instant_named_on_the_providers_clock() {
        let clock = Clock::new().shifted(250_000);
        let now = Instant::now();
        let now_ms = clock.us_at(now) / 1000;
        assert_eq!(timeline_start(&clock, now, None).unwrap(), now);
        let later = timeline_start(&clock, now, Some(now_ms + 2000)).unwrap();
        let ahead = later - now;
        assert!(
            ahead <= Duration::from_secs(2) && ahead > Duration::from_millis(1998),
            "{ahead:?}"
        );
        let day = MAX_START_OFFSET.as_millis() as u64;
        assert!(timeline_start(&clock, now, Some(now_ms + day + 1000)).is_err());
        assert!(
            timeline_start(&clock, now, Some(now_ms / 1000)).is_err(),
            "seconds"
        );
    }

    #[test]
    fn no_phase_is_active_before_the_timeline_starts() {
        let config = ProviderConfig::from_toml(
            "[[timeline]]\nname = \"a\"\nfrom = \"0s\"\nuntil = \"1s\"\n[[timeline]]\nname = \"b\"\nfrom = \"1s\"\n",
            "t",
        )
        .unwrap();
        let clock = Clock::new();
        let start = Instant::now() + Duration::from_secs(10);
        let run = Run::new("r".into(), 1, config, 0, &clock, start);
        assert_eq!(run.phase_mask(start - Duration::from_millis(1)), 0);
        assert_eq!(run.phase_mask(start), 0b01);
        assert_eq!(run.phase_mask(start + Duration::from_millis(1500)), 0b10);
    }
}
