//! The rig's ceiling: the highest open-loop rate this machine's load
//! generator keeps its schedule at (its send lag's p99 within the bound,
//! every attempt answered), for each model of the callers' connections,
//! measured against the bare target (`loadgen::spawn_bare`) on this
//! machine by `rehearse calibrate --rig` and kept in a small file that
//! `plan` and `run` read: a rehearsal whose peak passes 80% of it is said
//! before it is found out as an invalid run, with the load processes
//! (shards) that would carry it.
//!
//! The bare target shares the machine with the generator while it is
//! measured, so the ceiling is a floor of what the generator can do
//! against a target elsewhere. The file names the machine (host name and
//! cores): a file from another one is ignored, with a warning.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::RunError;
use crate::host::Input;

/// The share of the ceiling past which a scenario's peak is warned of.
pub(crate) const RIG_SHARE: f64 = 0.8;

/// What `rehearse calibrate --rig` measured on one machine: the file's
/// contents (TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rig {
    /// The machine's host name.
    pub host: String,
    /// Its cores (as the process may use them).
    pub cores: u64,
    /// When it was measured (RFC 3339, UTC).
    pub measured: String,
    /// A connection per caller waiting (`[load.clients]` left out, or
    /// `connections = "per caller"`).
    pub per_caller: RigCeiling,
    /// Callers sharing a pool of connections (`pool = N`).
    pub pool: RigCeiling,
    /// The pool's connections it was measured with.
    pub pool_connections: u64,
}

/// One model's ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RigCeiling {
    /// The highest rate that held, per second.
    pub rate_per_s: f64,
    /// The sweep's highest rate held: the ceiling is at least this.
    pub at_least: bool,
    /// What gave out at the next rate tried (empty when nothing did).
    #[serde(default)]
    pub limited_by: String,
}

/// How `rehearse calibrate --rig` sweeps. With the `clap` feature these
/// are its flags (each rate is played for `--step-duration`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RigOptions {
    /// --rig: the first rate tried, per second; each next one twice the
    /// last that held, then halfway between the last held and the first
    /// not, twice.
    #[cfg_attr(feature = "clap", arg(long = "rig-start-rate", value_name = "N", default_value_t = 1_000.0, value_parser = crate::scale_factor))]
    pub start_per_s: f64,
    /// --rig: the highest rate tried, per second.
    #[cfg_attr(feature = "clap", arg(long = "rig-max-rate", value_name = "N", default_value_t = 256_000.0, value_parser = crate::scale_factor))]
    pub max_per_s: f64,
    /// How long each rate is played.
    #[cfg_attr(feature = "clap", arg(skip = Duration::from_secs(2)))]
    pub step: Duration,
    /// --rig: the pool's connections, for the pool model.
    #[cfg_attr(feature = "clap", arg(long = "rig-pool", value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..)))]
    pub pool: u64,
}

impl Default for RigOptions {
    fn default() -> RigOptions {
        RigOptions {
            start_per_s: 1_000.0,
            max_per_s: 256_000.0,
            step: Duration::from_secs(2),
            pool: 64,
        }
    }
}

/// A rig file as read: this machine's, another's, or none.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RigRead {
    /// No file there.
    Missing,
    /// Measured on this machine.
    Here(Rig),
    /// Measured on another machine (its host name and cores differ), so
    /// ignored: why, for a warning.
    Elsewhere(String),
}

/// What a scenario's peak is against the rig's ceiling, when it passes
/// [`RIG_SHARE`] of it.
#[derive(Debug, Clone, PartialEq)]
pub struct RigWarning {
    /// The scenario's peak arrival rate at the run's scale, per second.
    pub peak_per_s: f64,
    /// The ceiling of the scenario's model of connections, per second.
    pub ceiling_per_s: f64,
    /// Which model: `per caller` or `a pool of N`.
    pub model: String,
    /// When the ceiling was measured.
    pub measured: String,
    /// Load processes that would each stay within the share.
    pub shards: u32,
}

impl std::fmt::Display for RigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the scenario's peak, {}/s, passes {:.0}% of what one load process keeps on this machine ({}/s with connections {}, measured {}): {} load processes (shards) would each stay under it",
            wire::number::thousands(self.peak_per_s),
            RIG_SHARE * 100.0,
            wire::number::thousands(self.ceiling_per_s),
            self.model,
            self.measured,
            self.shards
        )
    }
}

impl Rig {
    /// The warning for a scenario whose peak is `peak_per_s` with callers
    /// holding connections as `clients` says, when the peak passes
    /// [`RIG_SHARE`] of the model's ceiling.
    ///
    /// ```
    /// let rig = harness::Rig {
    ///     host: "h".into(), cores: 2, measured: "2026-12-05T12:00:00Z".into(),
    ///     per_caller: harness::RigCeiling { rate_per_s: 10_000.0, at_least: false, limited_by: String::new() },
    ///     pool: harness::RigCeiling { rate_per_s: 20_000.0, at_least: false, limited_by: String::new() },
    ///     pool_connections: 64,
    /// };
    /// let per_caller = loadgen::Clients { pool: None, connect_rate_per_s: None, time_in_system: None };
    /// assert_eq!(rig.warning(7_900.0, per_caller), None);
    /// assert_eq!(rig.warning(20_000.0, per_caller).unwrap().shards, 3);
    /// let pooled = loadgen::Clients { pool: Some(64), connect_rate_per_s: None, time_in_system: None };
    /// assert_eq!(rig.warning(12_000.0, pooled), None);
    /// ```
    pub fn warning(&self, peak_per_s: f64, clients: loadgen::Clients) -> Option<RigWarning> {
        let (ceiling, model) = self.model(clients);
        let usable = ceiling.rate_per_s * RIG_SHARE;
        if ceiling.rate_per_s <= 0.0 || peak_per_s <= usable {
            return None;
        }
        Some(RigWarning {
            peak_per_s,
            ceiling_per_s: ceiling.rate_per_s,
            model,
            measured: self.measured.clone(),
            shards: (peak_per_s / usable).ceil().min(f64::from(u32::MAX)) as u32,
        })
    }

    /// The ceiling of the model `clients` hold connections by, and the
    /// model as said: `per caller`, `from a pool of N`.
    pub fn model(&self, clients: loadgen::Clients) -> (&RigCeiling, String) {
        match clients.pool {
            None => (&self.per_caller, "per caller".to_string()),
            Some(n) => (&self.pool, format!("from a pool of {n}")),
        }
    }

    /// The ceilings as said once measured: `connections per caller: at
    /// least 1,000/s`, `connections from a pool of 64: 40,000/s (what gave
    /// out next)`.
    pub fn said(&self) -> Vec<String> {
        let pool = format!("from a pool of {}", self.pool_connections);
        [
            (&self.per_caller, "per caller"),
            (&self.pool, pool.as_str()),
        ]
        .into_iter()
        .map(|(c, model)| {
            let at_least = if c.at_least { "at least " } else { "" };
            let why = match c.limited_by.as_str() {
                "" => String::new(),
                why => format!(" ({why})"),
            };
            format!(
                "connections {model}: {at_least}{}/s{why}",
                wire::number::thousands(c.rate_per_s)
            )
        })
        .collect()
    }

    /// The file's text: a comment saying what it is, then the figures.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# This machine's load-generator ceiling, measured by `{}`\n\
             # against the bare target on this machine; `rehearse plan` and `rehearse run`\n\
             # read it. Measure again after a change of machine or of rehearse.\n{body}",
            Input::MeasureRig
        )
    }
}

/// `--rig FILE` of `plan` and `run`: the rig file to read.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RigFile {
    /// This machine's load-generator ceiling, as `rehearse calibrate
    /// --rig` wrote it (default: rehearse/rig.toml under $XDG_CACHE_HOME,
    /// else ~/.cache); a peak past 80% of it is warned of.
    #[cfg_attr(feature = "clap", arg(long = "rig", value_name = "FILE"))]
    pub rig: Option<PathBuf>,
}

/// What a rehearsal makes of the rig file.
#[derive(Debug, Clone, Default)]
pub struct RigCheck {
    /// What to say before the run (a file of another machine ignored).
    pub said: Vec<String>,
    /// The peak past the share of the ceiling, when it is.
    pub warning: Option<RigWarning>,
    /// The ceiling as read, for `run.json`.
    pub seen: Option<wire::RigSeen>,
}

impl RigFile {
    /// Reads the file (given, else at [`default_rig_path`]) and holds
    /// rehearsal `r`'s peak against it.
    pub fn check(&self, r: &crate::Rehearsal) -> Result<RigCheck, RunError> {
        let Some(path) = self.rig.clone().or_else(default_rig_path) else {
            return Ok(RigCheck::default());
        };
        let rig = match read_rig(&path)? {
            RigRead::Missing if self.rig.is_some() => {
                return Err(RunError::Rig {
                    message: format!(
                        "{}: no such file (write it with `{} FILE`)",
                        path.display(),
                        Input::MeasureRig
                    ),
                    path,
                })
            }
            RigRead::Missing => return Ok(RigCheck::default()),
            RigRead::Elsewhere(why) => {
                return Ok(RigCheck {
                    said: vec![why],
                    ..RigCheck::default()
                })
            }
            RigRead::Here(rig) => rig,
        };
        let clients = r.load.clients();
        let peak = r.peak_per_s();
        let (ceiling, model) = rig.model(clients);
        Ok(RigCheck {
            said: Vec::new(),
            warning: rig.warning(peak, clients),
            seen: Some(wire::RigSeen {
                host: rig.host.clone(),
                cores: rig.cores,
                measured: rig.measured.clone(),
                model,
                ceiling_per_s: ceiling.rate_per_s,
                peak_per_s: peak,
            }),
        })
    }
}

/// Where the rig file is by default: `$XDG_CACHE_HOME/rehearse/rig.toml`,
/// else `$HOME/.cache/rehearse/rig.toml`; `None` with neither set.
pub fn default_rig_path() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(cache.join("rehearse").join("rig.toml"))
}

/// This machine as a rig file names it: its host name and cores.
pub(crate) fn this_machine() -> (String, u64) {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    (host, cores)
}

/// Reads the rig file at `path`: [`RigRead::Missing`] when there is none;
/// a file that does not parse is an error naming its line and field.
pub(crate) fn read_rig(path: &Path) -> Result<RigRead, RunError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RigRead::Missing),
        Err(e) => {
            return Err(RunError::Rig {
                path: path.to_path_buf(),
                message: format!("{}: {e}", path.display()),
            })
        }
    };
    let origin = path.display().to_string();
    let rig: Rig = toml_located::Source::new(&text, &origin).parse().map_err(
        |e: toml_located::ConfigError| RunError::Rig {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    )?;
    let (host, cores) = this_machine();
    if rig.host != host || rig.cores != cores {
        return Ok(RigRead::Elsewhere(format!(
            "{origin} was measured on {} ({} cores), not on this machine, {host} ({cores} cores): it is ignored; measure this one with `{}`",
            rig.host,
            rig.cores,
            Input::MeasureRig
        )));
    }
    Ok(RigRead::Here(rig))
}

/// Writes `rig` to `path`, its folder made when missing.
pub fn write_rig(rig: &Rig, path: &Path) -> Result<(), RunError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(RunError::create_dir(dir))?;
    }
    crate::run::rundir::write_atomic(path, rig.to_toml().as_bytes())
}

/// `rehearse calibrate --rig`: the bare target started on a thread of its
/// own, then each model's ceiling swept ([`RigOptions`]). `say` is told
/// each rate as it is tried.
pub async fn calibrate_rig(
    opts: &RigOptions,
    say: &(dyn Fn(&str) + Sync),
    cancel: CancellationToken,
) -> Result<Rig, RunError> {
    let stop = CancellationToken::new();
    let _stop_target = stop.clone().drop_guard();
    let at = loadgen::spawn_bare("127.0.0.1:0".parse().expect("an address"), stop)
        .map_err(RunError::NoFreePort)?;
    let target = loadgen::Target::parse(&format!("http://{at}"))?;
    let work = std::env::temp_dir().join(format!("rehearse-rig-{}", std::process::id()));
    let sweep = Sweep {
        opts,
        target: &target,
        work: &work,
        say,
        cancel: &cancel,
    };
    let per_caller = sweep.ceiling(None).await;
    let pool = sweep.ceiling(Some(opts.pool)).await;
    let _ = std::fs::remove_dir_all(&work);
    let (host, cores) = this_machine();
    Ok(Rig {
        host,
        cores,
        measured: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        per_caller: per_caller?,
        pool: pool?,
        pool_connections: opts.pool,
    })
}

/// One sweep's fixed parts.
struct Sweep<'a> {
    opts: &'a RigOptions,
    target: &'a loadgen::Target,
    work: &'a Path,
    say: &'a (dyn Fn(&str) + Sync),
    cancel: &'a CancellationToken,
}

/// One model's ceiling: rates doubled from `opts.start_per_s` until one
/// does not hold (or `opts.max_per_s` is reached), then two halvings of the
/// gap between the last held and the first not. `try_rate` plays a rate:
/// `None` when it held, else what gave out.
async fn sweep_ceiling(
    opts: &RigOptions,
    cancel: &CancellationToken,
    mut try_rate: impl AsyncFnMut(f64) -> Result<Option<String>, RunError>,
) -> Result<RigCeiling, RunError> {
    let mut rate = opts.start_per_s;
    let mut held: Option<f64> = None;
    let mut failed: Option<(f64, String)> = None;
    while !cancel.is_cancelled() {
        match try_rate(rate).await? {
            None => held = Some(rate),
            Some(why) => {
                failed = Some((rate, why));
                break;
            }
        }
        if rate >= opts.max_per_s {
            break;
        }
        rate = (rate * 2.0).min(opts.max_per_s);
    }
    if let (Some(low), Some((high, _))) = (held, &failed) {
        let (mut low, mut high) = (low, *high);
        for _ in 0..2 {
            let mid = ((low + high) / 2.0).round();
            if cancel.is_cancelled() || mid <= low || mid >= high {
                break;
            }
            match try_rate(mid).await? {
                None => low = mid,
                Some(why) => {
                    high = mid;
                    failed = Some((mid, why));
                }
            }
        }
        held = Some(low);
    }
    Ok(RigCeiling {
        rate_per_s: held.unwrap_or(0.0),
        at_least: failed.is_none(),
        limited_by: failed.map(|(_, why)| why).unwrap_or_default(),
    })
}

impl Sweep<'_> {
    /// One model's ceiling ([`sweep_ceiling`]) on the bare target.
    async fn ceiling(&self, pool: Option<u64>) -> Result<RigCeiling, RunError> {
        sweep_ceiling(self.opts, self.cancel, async |rate| {
            self.try_rate(rate, pool).await
        })
        .await
    }

    /// Plays `rate` for a step: `None` when it held, else what gave out.
    async fn try_rate(&self, rate: f64, pool: Option<u64>) -> Result<Option<String>, RunError> {
        let model = pool.map_or("per caller".to_string(), |n| format!("a pool of {n}"));
        (self.say)(&format!(
            "rig: {}/s for {} with connections {model}",
            wire::number::thousands(rate),
            humantime::format_duration(self.opts.step)
        ));
        let clients = pool.map_or(String::new(), |n| format!("[load.clients]\npool = {n}\n"));
        let text = format!(
            "[load]\nseed = 1\npatience = {{ fixed = \"10s\" }}\n{clients}[[load.phases]]\nduration = \"{}ms\"\nrate = {rate}\n",
            self.opts.step.as_millis()
        );
        let plan = loadgen::LoadPlan::from_scenario_str(&text, "rig", Path::new("."))?;
        let _ = std::fs::remove_dir_all(self.work);
        let options = loadgen::LoadOptions::new(self.work);
        let report = loadgen::run(&plan, self.target, &options, self.cancel.child_token()).await;
        Ok(match report {
            Err(e) => Some(format!("at {}/s: {e}", wire::number::thousands(rate))),
            Ok(r) => gave_out(&r, rate),
        })
    }
}

/// What gave out in a step's report, if anything: the schedule (the send
/// lag's p99 past its bound) or answers (attempts not answered 200).
fn gave_out(r: &loadgen::RunReport, rate: f64) -> Option<String> {
    let at = wire::number::thousands(rate);
    let ok: u64 = r
        .outcomes
        .iter()
        .filter(|o| o.outcome == wire::ClientOutcome::Ok)
        .map(|o| o.first_attempts + o.retries)
        .sum();
    if !r.valid {
        return Some(format!(
            "at {at}/s the send lag's p99 was {:.1} ms, past its bound of {:.1} ms (the core, most likely)",
            r.send_lag.p99_us as f64 / 1000.0,
            r.send_lag_bound_us as f64 / 1000.0
        ));
    }
    if ok < r.attempts {
        return Some(format!(
            "at {at}/s {} of {} attempts were not answered (connections, ports or file descriptors)",
            r.attempts - ok,
            r.attempts
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rig() -> Rig {
        let (host, cores) = this_machine();
        Rig {
            host,
            cores,
            measured: "2026-12-05T12:00:00Z".into(),
            per_caller: RigCeiling {
                rate_per_s: 40_000.0,
                at_least: false,
                limited_by: "at 48,000/s the send lag's p99 was 9.0 ms".into(),
            },
            pool: RigCeiling {
                rate_per_s: 64_000.0,
                at_least: true,
                limited_by: String::new(),
            },
            pool_connections: 64,
        }
    }

    #[test]
    fn a_rig_file_is_read_back_and_one_of_another_machine_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/rig.toml");
        assert_eq!(read_rig(&path).unwrap(), RigRead::Missing);
        write_rig(&rig(), &path).unwrap();
        assert_eq!(read_rig(&path).unwrap(), RigRead::Here(rig()));
        let mut other = rig();
        other.host = "elsewhere".into();
        write_rig(&other, &path).unwrap();
        match read_rig(&path).unwrap() {
            RigRead::Elsewhere(why) => assert!(why.contains("elsewhere"), "{why}"),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn a_rig_file_that_does_not_parse_is_refused_at_its_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rig.toml");
        let text = rig()
            .to_toml()
            .replace("rate_per_s = 40000.0", "rate_per_s = \"fast\"");
        std::fs::write(&path, &text).unwrap();
        let e = read_rig(&path).unwrap_err().to_string();
        let line = text.lines().position(|l| l.contains("fast")).unwrap() + 1;
        assert!(e.contains(&format!("rig.toml:{line}:")), "{e}");
        assert!(e.contains("rate_per_s"), "{e}");
        std::fs::write(&path, "host = \"h\"\n").unwrap();
        let e = read_rig(&path).unwrap_err().to_string();
        assert!(e.contains("cores"), "{e}");
    }

    #[test]
    fn the_warning_names_the_model_and_the_shards_that_would_carry_the_peak() {
        let per_caller = loadgen::Clients {
            pool: None,
            connect_rate_per_s: None,
            time_in_system: None,
        };
        let w = rig().warning(100_000.0, per_caller).unwrap();
        // 80% of 40,000 is 32,000 a process: 100,000 takes 4.
        assert_eq!(w.shards, 4);
        let said = w.to_string();
        assert!(
            said.contains("100,000/s") && said.contains("40,000/s") && said.contains("per caller"),
            "{said}"
        );
        assert_eq!(rig().warning(32_000.0, per_caller), None);
    }

    /// The sweep on a rig that holds below 700/s: 100, 200, 400 hold, 800
    /// does not; 600 holds, 700 does not: 600, limited by what 700 said.
    #[tokio::test]
    async fn the_sweep_doubles_then_halves_the_gap() {
        let opts = RigOptions {
            start_per_s: 100.0,
            max_per_s: 100_000.0,
            step: Duration::from_millis(1),
            pool: 4,
        };
        let tried = std::cell::RefCell::new(Vec::new());
        let c = sweep_ceiling(&opts, &CancellationToken::new(), async |rate: f64| {
            tried.borrow_mut().push(rate);
            Ok((rate >= 700.0).then(|| format!("lag at {rate}")))
        })
        .await
        .unwrap();
        assert_eq!(
            tried.into_inner(),
            [100.0, 200.0, 400.0, 800.0, 600.0, 700.0]
        );
        assert_eq!(c.rate_per_s, 600.0);
        assert!(!c.at_least);
        assert_eq!(c.limited_by, "lag at 700");
        // Nothing holds: 0, with why.
        let c = sweep_ceiling(&opts, &CancellationToken::new(), async |_| {
            Ok(Some("no".into()))
        })
        .await
        .unwrap();
        assert_eq!((c.rate_per_s, c.limited_by.as_str()), (0.0, "no"));
        // Everything holds: the highest, at least.
        let c = sweep_ceiling(&opts, &CancellationToken::new(), async |_| Ok(None))
            .await
            .unwrap();
        assert_eq!((c.rate_per_s, c.at_least), (100_000.0, true));
    }

    /// A short sweep on loopback against the bare target, both models: the
    /// rates are said as they are tried, and each model's ceiling is one
    /// of them (or 0), with why when it is not the highest. (Which rates
    /// hold depends on how busy the machine is.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_sweep_finds_its_highest_rate_held_for_both_models() {
        let opts = RigOptions {
            start_per_s: 50.0,
            max_per_s: 200.0,
            step: Duration::from_millis(400),
            pool: 4,
        };
        let said = std::sync::Mutex::new(Vec::new());
        let say = |s: &str| said.lock().unwrap().push(s.to_string());
        let rig = calibrate_rig(&opts, &say, CancellationToken::new())
            .await
            .unwrap();
        let said = said.into_inner().unwrap();
        for (c, model) in [(&rig.per_caller, "per caller"), (&rig.pool, "a pool of 4")] {
            // A rate tried: 0 when even the first did not hold, else 50 to 200.
            assert!(
                c.rate_per_s == 0.0 || (50.0..=200.0).contains(&c.rate_per_s),
                "{rig:?}"
            );
            assert_eq!(c.at_least, c.limited_by.is_empty(), "{rig:?}");
            assert_eq!(c.at_least, c.rate_per_s == 200.0, "{rig:?}");
            assert!(
                said.iter()
                    .any(|s| s == &format!("rig: 50/s for 400ms with connections {model}")),
                "{said:?}"
            );
        }
        assert_eq!(rig.pool_connections, 4);
        assert_eq!((rig.host.clone(), rig.cores), this_machine());
    }
}
