//! `rehearse run` and `rehearse report`: one rehearsal from start to
//! checklist, and the re-judging of a saved one.
//!
//! A run: the fake provider starts in-process; the gateway is spawned (or
//! an existing one is used); its memory is sampled every 100 ms; the load
//! generator drives it; once the load is over (or stopped), the harness
//! waits for the backlog to drain (at most the drain allowance), ends the
//! gateway's process group, collects both sides' records into the run
//! directory, and judges the checklist from those files alone, exactly as
//! `rehearse report DIR` does later.

use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use assertions::{Attempt, Call, Expectations, RssSample, Status, Thresholds};
use fake_provider::FakeProvider;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::gateway_process::{self, GatewayProcess};
use crate::plan::{self, Plan};
use crate::scenario::{self, GatewayKind, Scenario};

/// What the run needs beyond the scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The run directory.
    pub out: PathBuf,
    /// Overrides the scenario's time scale.
    pub time_scale: Option<f64>,
    /// Drive this gateway instead of the scenario's.
    pub target: Option<String>,
    /// Allow a target outside loopback.
    pub allow_remote: bool,
    /// Also write the JUnit report here.
    pub junit: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
    /// Where the fake provider listens.
    pub provider_listen: String,
}

/// Why a run could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The input is wrong (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// The run could not be made (exit 3): the gateway did not start, the
    /// provider could not listen, the run directory could not be written.
    #[error("{0}")]
    Invalid(String),
}

/// What `run.json` keeps of a run, so that `rehearse report` can judge it
/// again from the directory alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    /// Scenario name.
    pub scenario: String,
    /// The gateway, as a person would name it.
    pub gateway: String,
    /// The time scale the run was made at.
    pub time_scale: f64,
    /// The quota scale.
    pub quota_scale: f64,
    /// What the checks compare against.
    pub expectations: Expectations,
    /// True if the run was stopped before its end (Ctrl-C).
    pub partial: bool,
    /// The fake provider's base URL.
    pub provider_url: String,
    /// The gateway's base URL.
    pub target_url: String,
    /// Things a reader of the report should know (gateway exit, ...).
    pub notes: Vec<String>,
    /// The gateway's deaths and restarts.
    #[serde(default)]
    pub gateway_events: Vec<GatewayEvent>,
}

/// The process exit code of a run's (or a report's) outcome, printing the
/// error if there is one: 0 pass, 1 a check failed, 2 bad input, 3 invalid.
pub fn exit_code(result: Result<Status, RunError>) -> u8 {
    match result {
        Ok(Status::Pass) => crate::exit::OK,
        Ok(Status::Fail) => crate::exit::CHECK_FAILED,
        Ok(_) => crate::exit::INVALID,
        Err(RunError::BadInput(e)) => {
            eprintln!("error: {e}");
            crate::exit::BAD_INPUT
        }
        Err(RunError::Invalid(e)) => {
            eprintln!("error: {e}");
            crate::exit::INVALID
        }
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let res = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    res.map_err(|e| RunError::Invalid(format!("cannot write {}: {e}", path.display())))
}

fn is_loopback_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// The reference gateway's table at the quota scale: counts and the token
/// rate divided by `quota_scale` (durations are left to the gateway, which
/// divides them by `REHEARSE_TIME_SCALE`).
pub fn scale_reference(t: &toml::Table, quota_scale: f64) -> toml::Table {
    let mut t = t.clone();
    let count = |v: &mut toml::Value| {
        if let Some(n) = v.as_integer() {
            if n > 0 {
                *v = toml::Value::Integer(((n as f64 / quota_scale).round() as i64).max(1));
            }
        }
    };
    for (section, keys) in [
        ("bounded", &["concurrency", "queue"][..]),
        ("aimd", &["initial", "floor", "ceiling", "queue"][..]),
    ] {
        if let Some(toml::Value::Table(s)) = t.get_mut(section) {
            for k in keys {
                if let Some(v) = s.get_mut(*k) {
                    count(v);
                }
            }
        }
    }
    if let Some(toml::Value::Table(s)) = t.get_mut("deadline") {
        if let Some(v) = s.get_mut("tokens_per_minute") {
            let n = v.as_float().or(v.as_integer().map(|i| i as f64));
            if let Some(n) = n {
                *v = toml::Value::Float(n / quota_scale);
            }
        }
    }
    t
}

/// Memory samples of the gateway, taken every 100 ms.
#[derive(Clone, Default)]
struct RssLog(Arc<Mutex<Vec<RssSample>>>);

enum RssSource {
    Group(Arc<Mutex<SupState>>),
    Metric { url: String, metric: String },
    None,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

async fn sample_rss(source: RssSource, log: RssLog, stop: CancellationToken) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .ok();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let bytes = match &source {
            RssSource::Group(state) => {
                let pgid = state
                    .lock()
                    .ok()
                    .and_then(|s| s.process.as_ref().map(|p| p.pid() as i32));
                match pgid {
                    Some(pgid) => {
                        tokio::task::spawn_blocking(move || gateway_process::group_rss(pgid))
                            .await
                            .ok()
                    }
                    // Dead (and maybe restarting): nothing resident.
                    None => Some(0),
                }
            }
            RssSource::Metric { url, metric } => match &client {
                Some(c) => match c.get(url).send().await {
                    Ok(r) => r
                        .text()
                        .await
                        .ok()
                        .and_then(|t| gateway_process::prometheus_value(&t, metric))
                        .map(|v| v as u64),
                    Err(_) => None,
                },
                None => None,
            },
            RssSource::None => break,
        };
        if let Some(b) = bytes.filter(|b| *b > 0) {
            if let Ok(mut l) = log.0.lock() {
                l.push(RssSample {
                    t_us: now_us(),
                    rss_bytes: b,
                });
            }
        }
    }
}

/// File descriptors the run will hold, by Little's law: people in flight
/// at the peak (peak arrival rate × patience, the longest a person holds a
/// connection) on both sides of the gateway (the load's sockets and the
/// provider's), with half again as margin, plus the harness's own files.
pub fn predicted_fds(peak_per_s: f64, patience_s: f64) -> u64 {
    (peak_per_s * patience_s * 2.0 * 1.5).ceil() as u64 + 256
}

/// Raises the soft limit on open files to the hard limit, and says whether
/// `needed` then fits. Returns the limit in force.
pub fn ensure_fds(needed: u64) -> Result<u64, String> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-files limit: {e}"))?;
    let soft = if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .map(|_| hard)
            .unwrap_or(soft)
    } else {
        soft
    };
    if soft < needed {
        return Err(format!(
            "this run needs about {needed} open files (peak arrivals x patience, both sides of the gateway) but the limit is {soft} (hard limit {hard}); raise it (ulimit -n) or lower the scenario's rate or time scale"
        ));
    }
    Ok(soft)
}

/// What happened to a spawned gateway during the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayEvent {
    /// `died` or `restarted`.
    pub kind: String,
    /// When, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// The exit status and its cause, or the restart's downtime.
    pub detail: String,
}

impl GatewayEvent {
    /// A sentence for the report. For a death: how many requests were
    /// inside the gateway then and ended without an answer.
    fn note(&self, start_us: u64, attempts: &[Attempt]) -> String {
        let at_s = self.at_us.saturating_sub(start_us) as f64 / 1e6;
        if self.kind == "died" {
            // In flight at the death: sent before it, not done before it.
            let inside: Vec<&Attempt> = attempts
                .iter()
                .filter(|a| {
                    a.sent_us <= self.at_us && a.done_us >= self.at_us.saturating_sub(100_000)
                })
                .collect();
            let lost = inside
                .iter()
                .filter(|a| a.outcome.is_silent_loss() || a.outcome.is_error())
                .count();
            format!(
                "the gateway died {at_s:.1} s into the run ({}); {} requests were inside it, {lost} of them lost",
                self.detail,
                inside.len()
            )
        } else if self.kind == "restarted" {
            format!(
                "the gateway was restarted {at_s:.1} s into the run ({})",
                self.detail
            )
        } else {
            format!(
                "the gateway could not be restarted {at_s:.1} s into the run: {}",
                self.detail
            )
        }
    }
}

/// How to start (and restart) the gateway.
struct Launch {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    listen: std::net::SocketAddr,
    ready_path: Option<String>,
    ready_timeout: Duration,
    limit: Option<Arc<gateway_process::MemoryLimit>>,
    restart: bool,
    restart_delay: Duration,
}

impl Launch {
    async fn spawn(&self) -> Result<GatewayProcess, String> {
        let mut p = GatewayProcess::spawn(
            &self.argv,
            &self.env,
            &self.log,
            self.listen,
            false,
            self.ready_timeout,
            self.limit.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        let url = format!("http://{}", p.addr);
        let ready = tokio::select! {
            ready = wait_ready(&url, self.ready_path.as_deref(), self.ready_timeout) => ready,
            _ = async {
                while p.exited().is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } => false,
        };
        if !ready {
            let status = p.exited();
            p.stop(Duration::from_millis(500));
            return Err(match status {
                Some(st) => format!(
                    "the gateway exited before it was ready ({st}); its output is in {}",
                    p.log.display()
                ),
                None => format!(
                    "the gateway was not ready at {url} within {:?}; its output is in {}",
                    self.ready_timeout,
                    p.log.display()
                ),
            });
        }
        Ok(p)
    }
}

struct SupState {
    process: Option<GatewayProcess>,
    events: Vec<GatewayEvent>,
}

/// A spawned gateway under watch: a death is recorded (with the memory
/// limit's kills) and, when asked, the gateway is restarted on the same
/// address after a delay, as an orchestrator would.
struct Supervised {
    state: Arc<Mutex<SupState>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Supervised {
    async fn start(launch: Launch) -> Result<Supervised, String> {
        let p = launch.spawn().await?;
        let state = Arc::new(Mutex::new(SupState {
            process: Some(p),
            events: Vec::new(),
        }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(watch(launch, state.clone(), stop.clone()));
        Ok(Supervised { state, stop, task })
    }

    /// Stops watching, ends the gateway's process group, and returns what
    /// happened to it.
    async fn stop(self, grace: Duration) -> Vec<GatewayEvent> {
        self.stop.cancel();
        let _ = self.task.await;
        let (process, events) = match self.state.lock() {
            Ok(mut s) => (s.process.take(), std::mem::take(&mut s.events)),
            Err(_) => (None, Vec::new()),
        };
        if let Some(mut p) = process {
            let _ = tokio::task::spawn_blocking(move || p.stop(grace)).await;
        }
        events
    }
}

async fn watch(launch: Launch, state: Arc<Mutex<SupState>>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let died = {
            let Ok(mut s) = state.lock() else { return };
            match s.process.as_mut().and_then(|p| p.exited()) {
                Some(status) => {
                    s.process = None;
                    let oom = launch
                        .limit
                        .as_ref()
                        .and_then(|l| l.oom_kills().filter(|k| *k > 0).map(|k| (k, l.describe())));
                    let detail = match oom {
                        Some((k, how)) => {
                            format!("{status}; killed by its memory limit, {how} ({k} OOM kills)")
                        }
                        None => status,
                    };
                    s.events.push(GatewayEvent {
                        kind: "died".into(),
                        at_us: now_us(),
                        detail,
                    });
                    true
                }
                None => false,
            }
        };
        if !died {
            continue;
        }
        if !launch.restart {
            return;
        }
        let down_at = Instant::now();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(launch.restart_delay) => {}
        }
        match launch.spawn().await {
            Ok(p) => {
                if let Ok(mut s) = state.lock() {
                    s.process = Some(p);
                    s.events.push(GatewayEvent {
                        kind: "restarted".into(),
                        at_us: now_us(),
                        detail: format!("down for {:.1} s", down_at.elapsed().as_secs_f64()),
                    });
                }
            }
            Err(e) => {
                if let Ok(mut s) = state.lock() {
                    s.events.push(GatewayEvent {
                        kind: "restart_failed".into(),
                        at_us: now_us(),
                        detail: e,
                    });
                }
                return;
            }
        }
    }
}

/// Waits until `addr` accepts TCP connections and, if `path` is given,
/// answers it with a status below 500.
async fn wait_ready(base: &str, path: Option<&str>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build();
    let authority = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    while Instant::now() < deadline {
        let up = match (path, &client) {
            (Some(p), Ok(c)) => c
                .get(format!("{}{p}", base.trim_end_matches('/')))
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() < 500),
            _ => tokio::net::TcpStream::connect(&authority).await.is_ok(),
        };
        if up {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Makes one rehearsal and writes its run directory. Returns the overall
/// verdict.
pub async fn run(
    s: &Scenario,
    opts: &RunOptions,
    cancel: CancellationToken,
) -> Result<Status, RunError> {
    let mut s = s.clone();
    if let Some(ts) = opts.time_scale {
        if !(ts.is_finite() && ts > 0.0) {
            return Err(RunError::BadInput(
                "--time-scale must be a positive number".into(),
            ));
        }
        s.meta.time_scale = ts;
    }
    let (ts, qs) = (s.meta.time_scale, s.meta.quota_scale);
    let plan = plan::plan(&s);
    let thresholds = s.checklist.scaled(ts);

    // Where the load goes, and whether we may send it there.
    let explicit = opts.target.clone().or(match &s.gateway.kind {
        GatewayKind::Url(u) => Some(u.clone()),
        _ => None,
    });
    if let Some(t) = &explicit {
        if !is_loopback_url(t) && !opts.allow_remote {
            return Err(RunError::BadInput(format!(
                "target {t} is outside loopback: pass --allow-remote to send load there"
            )));
        }
    }

    let load_text =
        scenario::scale_load(&s.text, ts, qs).map_err(|e| RunError::BadInput(e.to_string()))?;
    let base = s.path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let load_plan =
        loadgen::LoadPlan::from_scenario_str(&load_text, &s.path.display().to_string(), &base)
            .map_err(|e| RunError::BadInput(e.to_string()))?;

    let peak_per_s = plan
        .rehearsal
        .phases
        .iter()
        .map(|p| p.offered_per_min / 60.0)
        .fold(0.0, f64::max);
    let patience_s = plan.patience_s / ts;
    ensure_fds(predicted_fds(peak_per_s, patience_s)).map_err(RunError::Invalid)?;

    std::fs::create_dir_all(&opts.out)
        .map_err(|e| RunError::Invalid(format!("cannot create {}: {e}", opts.out.display())))?;
    write_atomic(&opts.out.join("scenario.toml"), s.text.as_bytes())?;
    write_atomic(
        &opts.out.join("plan.json"),
        serde_json::to_string_pretty(&plan)
            .unwrap_or_default()
            .as_bytes(),
    )?;

    // The fake provider, in this process.
    let provider = FakeProvider::new(s.provider.scaled(ts, qs))
        .bind(opts.provider_listen.as_str())
        .await
        .map_err(|e| {
            RunError::Invalid(format!(
                "the fake provider cannot listen on {}: {e}",
                opts.provider_listen
            ))
        })?;
    let provider_url = provider.base_url();
    eprintln!("fake provider: {provider_url}");

    // The gateway.
    let env = vec![("REHEARSE_TIME_SCALE".to_string(), ts.to_string())];
    let log = opts.out.join("gateway.log");
    let limit = s.gateway.memory_limit.map(|bytes| {
        Arc::new(gateway_process::MemoryLimit::new(
            bytes,
            &format!("rehearse-{}-{}", std::process::id(), now_us()),
        ))
    });
    let launcher = match (&explicit, &s.gateway.kind) {
        (Some(_), _) => None,
        (None, GatewayKind::Reference(table)) => {
            let listen = gateway_process::free_port()
                .map_err(|e| RunError::Invalid(format!("cannot find a free port: {e}")))?;
            let mut t = scale_reference(table, qs);
            t.insert("upstream".into(), toml::Value::String(provider_url.clone()));
            t.insert("listen".into(), toml::Value::String(listen.to_string()));
            let mode = t
                .get("mode")
                .and_then(|m| m.as_str())
                .unwrap_or("?")
                .to_string();
            let cfg = opts.out.join("gateway.toml");
            write_atomic(&cfg, toml::to_string(&t).unwrap_or_default().as_bytes())?;
            let exe = std::env::current_exe()
                .map_err(|e| RunError::Invalid(format!("cannot find the rehearse binary: {e}")))?;
            let argv = vec![
                exe.display().to_string(),
                "gateway".into(),
                "--config".into(),
                cfg.display().to_string(),
            ];
            Some((argv, listen, format!("reference gateway ({mode})")))
        }
        (None, GatewayKind::Command(argv)) => {
            let listen = gateway_process::free_port()
                .map_err(|e| RunError::Invalid(format!("cannot find a free port: {e}")))?;
            let argv = gateway_process::fill(argv, &provider_url, &listen);
            let name = format!("`{}`", argv.join(" "));
            Some((argv, listen, name))
        }
        (None, GatewayKind::Url(_)) => unreachable!("a url gateway is an explicit target"),
    };
    let (supervised, target_url, gateway_name) = match (launcher, &explicit) {
        (Some((argv, listen, name)), _) => {
            let launch = Launch {
                argv,
                env,
                log: log.clone(),
                listen,
                ready_path: s.gateway.ready_path.clone(),
                ready_timeout: s.gateway.ready_timeout,
                limit: limit.clone(),
                restart: s.gateway.restart,
                restart_delay: s.gateway.restart_delay,
            };
            let sup = match Supervised::start(launch).await {
                Ok(sup) => sup,
                Err(e) => {
                    provider.shutdown().await;
                    return Err(RunError::Invalid(e));
                }
            };
            (Some(sup), format!("http://{listen}"), name)
        }
        (None, Some(t)) => {
            let url = t.trim_end_matches('/').to_string();
            if !wait_ready(
                &url,
                s.gateway.ready_path.as_deref(),
                s.gateway.ready_timeout,
            )
            .await
            {
                provider.shutdown().await;
                return Err(RunError::Invalid(format!(
                    "the gateway at {url} was not ready within {:?}",
                    s.gateway.ready_timeout
                )));
            }
            (None, url, format!("gateway at {t}"))
        }
        (None, None) => unreachable!("either spawned or explicit"),
    };
    if !is_loopback_url(&target_url) {
        let peak = plan
            .rehearsal
            .phases
            .iter()
            .map(|p| p.offered_per_min / 60.0)
            .fold(0.0, f64::max);
        eprintln!(
            "sending load to REMOTE host {target_url}: up to {peak:.1} requests/s (--allow-remote)"
        );
    }
    eprintln!("gateway: {gateway_name} at {target_url}");
    if !s.meta.description.is_empty() {
        eprintln!("rehearsing {}: {}", s.meta.name, s.meta.description);
    }
    if let Some(l) = &limit {
        eprintln!("gateway memory limit: {}", l.describe());
    }

    // Memory samples.
    let rss = RssLog::default();
    let stop_rss = CancellationToken::new();
    let source = match (&supervised, &s.gateway.metrics_url, &s.gateway.rss_metric) {
        (_, Some(url), Some(metric)) => RssSource::Metric {
            url: url.clone(),
            metric: metric.clone(),
        },
        (Some(sup), _, _) => RssSource::Group(sup.state.clone()),
        _ => RssSource::None,
    };
    let sampler = tokio::spawn(sample_rss(source, rss.clone(), stop_rss.clone()));

    // The load.
    let target =
        loadgen::Target::parse(&target_url).map_err(|e| RunError::BadInput(e.to_string()))?;
    let mut lo = loadgen::RunOptions::new(&opts.out);
    lo.progress = opts.progress;
    let started_us = now_us();
    let report = loadgen::run(&load_plan, &target, &lo, cancel.clone()).await;
    let mut notes = Vec::new();
    let report = match report {
        Ok(r) => Some(r),
        Err(e) => {
            notes.push(format!("the load generator stopped: {e}"));
            None
        }
    };
    let partial = cancel.is_cancelled();
    if partial {
        notes.push("stopped before its end (interrupted): this report is partial".into());
    }

    // Let the backlog drain, within the drain allowance.
    let allowance = thresholds.drain.within + Duration::from_secs(1);
    let drain_deadline = Instant::now() + allowance;
    while !partial && Instant::now() < drain_deadline && provider.stats().in_flight > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if provider.stats().in_flight > 0 {
        notes.push(format!(
            "{} provider calls were still in flight when the gateway was stopped",
            provider.stats().in_flight
        ));
    }
    stop_rss.cancel();
    let _ = sampler.await;
    let events = match supervised {
        Some(sup) => {
            sup.stop(if partial {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(2)
            })
            .await
        }
        None => Vec::new(),
    };
    // Hung-up calls are recorded when their connections close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = provider.records();
    provider.shutdown().await;

    let mut out = Vec::new();
    for c in &calls {
        let _ = serde_json::to_writer(&mut out, c);
        out.push(b'\n');
    }
    write_atomic(&opts.out.join("provider.jsonl"), &out)?;
    let mut out = Vec::new();
    for r in rss.0.lock().map(|l| l.clone()).unwrap_or_default() {
        let _ = serde_json::to_writer(&mut out, &r);
        out.push(b'\n');
    }
    write_atomic(&opts.out.join("rss.jsonl"), &out)?;

    // What the checks are judged against.
    let attempts = read_jsonl::<Attempt>(&opts.out.join("client.jsonl"))?;
    let start_us = attempts
        .iter()
        .filter(|a| a.attempt == 1)
        .map(|a| a.intended_us)
        .min()
        .unwrap_or(started_us);
    let expectations = expectations(&plan, &s, start_us, &load_plan, report.as_ref());
    for e in &events {
        notes.push(e.note(start_us, &attempts));
    }
    let meta = RunMeta {
        scenario: s.meta.name.clone(),
        gateway: gateway_name,
        time_scale: ts,
        quota_scale: qs,
        expectations,
        partial,
        provider_url,
        target_url,
        notes,
        gateway_events: events,
    };
    write_atomic(
        &opts.out.join("run.json"),
        serde_json::to_string_pretty(&meta)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    let status = judge_dir(&opts.out, &[], opts.junit.as_deref())?;
    Ok(status)
}

fn expectations(
    plan: &Plan,
    s: &Scenario,
    start_us: u64,
    load_plan: &loadgen::LoadPlan,
    report: Option<&loadgen::RunReport>,
) -> Expectations {
    let ts = s.meta.time_scale;
    let at = |secs: f64| start_us + (secs * 1e6) as u64;
    let o = plan.overload.as_ref();
    let send_lag_p99_ms = report.map_or(f64::INFINITY, |r| r.send_lag.p99_us as f64 / 1000.0);
    Expectations {
        start_us,
        load_end_us: at(load_plan.schedule_length().as_secs_f64()),
        overload: o.map(|o| (at(o.from_s), at(o.until_s))),
        capacity_per_s: o.map_or(0.0, |o| o.capacity_per_s),
        patience_s: plan.patience_s / ts,
        service_s: o.map_or(0.0, |o| o.service_s),
        queue_bound: o.map_or(0.0, |o| o.queue_bound),
        in_flight_at_provider: o.map_or(0.0, |o| o.capacity_per_s * o.service_s),
        memory_ceiling_bytes: s.gateway.memory_ceiling,
        send_lag_bound_ms: load_plan.send_lag_bound().as_secs_f64() * 1000.0,
        send_lag_p99_ms,
    }
}

/// The `[checklist]` of a scenario text, with located errors.
pub fn thresholds(text: &str, origin: &str) -> Result<Thresholds, RunError> {
    #[derive(Deserialize)]
    struct WithChecklist {
        #[serde(default)]
        checklist: Thresholds,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    toml_located::Source::new(text, origin)
        .parse::<WithChecklist>()
        .map(|w| w.checklist)
        .map_err(|e| RunError::BadInput(e.to_string()))
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, RunError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(RunError::BadInput(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(e) => {
                return Err(RunError::BadInput(format!(
                    "{}:{}: not a record: {e}",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(out)
}

/// Judges the run in `dir` from its files (with `sets` applied to the
/// saved scenario's checklist), rewrites report.json, junit.xml,
/// timeline.csv, report.html and its chart PNGs, prints the checklist
/// (ending with the path of report.html), and returns the overall verdict.
pub fn judge_dir(dir: &Path, sets: &[String], junit: Option<&Path>) -> Result<Status, RunError> {
    let meta_path = dir.join("run.json");
    let meta: RunMeta =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).map_err(|e| {
            RunError::BadInput(format!("{} is not a run directory: {e}", dir.display()))
        })?)
        .map_err(|e| RunError::BadInput(format!("{}: {e}", meta_path.display())))?;
    let scenario_path = dir.join("scenario.toml");
    let text = std::fs::read_to_string(&scenario_path)
        .map_err(|e| RunError::BadInput(format!("cannot read {}: {e}", scenario_path.display())))?;
    let text = scenario::apply_sets(&text, sets).map_err(|e| RunError::BadInput(e.to_string()))?;
    let thresholds =
        thresholds(&text, &scenario_path.display().to_string())?.scaled(meta.time_scale);
    let attempts = read_jsonl::<Attempt>(&dir.join("client.jsonl"))?;
    let calls = read_jsonl::<Call>(&dir.join("provider.jsonl"))?;
    let rss = read_jsonl::<RssSample>(&dir.join("rss.jsonl"))?;
    let j = assertions::judge(&attempts, &calls, &rss, &meta.expectations, &thresholds);
    let report = crate::report::report_json(&meta, &j);
    write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&report)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    let junit_xml = crate::report::junit(&meta, &j);
    write_atomic(&dir.join("junit.xml"), junit_xml.as_bytes())?;
    if let Some(extra) = junit {
        write_atomic(extra, junit_xml.as_bytes())?;
    }
    write_atomic(&dir.join("timeline.csv"), j.timeline.to_csv().as_bytes())?;
    let html = crate::html::write(dir, &meta, &j, &thresholds, &attempts, &text)?;
    print!("{}", crate::report::checklist_text(&meta, &j));
    println!("report: {}", dir.join("report.json").display());
    println!("charts: {}", html.display());
    Ok(crate::report::verdict(&meta, &j))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the checklist reads from a writer's record: present in
    /// the writer's JSON, with the same value after the reader's parse.
    fn reader_agrees<R: serde::de::DeserializeOwned + Serialize>(writer: serde_json::Value) {
        let reader: R = serde_json::from_value(writer.clone())
            .unwrap_or_else(|e| panic!("the checklist cannot read {writer}: {e}"));
        let back = serde_json::to_value(&reader).unwrap();
        for (field, value) in back.as_object().expect("a record is an object") {
            assert_eq!(
                writer.get(field),
                Some(value),
                "field {field}: the writer says {writer}"
            );
        }
    }

    /// The `assertions` crate keeps its own copy of the record types (it
    /// reads files, and has no tokio); this fails when a writer renames,
    /// drops or retypes a field or an outcome the checks use.
    #[test]
    fn the_checklist_reads_every_outcome_the_writers_write() {
        for outcome in loadgen::Outcome::ALL {
            let record = loadgen::ClientRecord {
                id: "p-1".into(),
                attempt: 2,
                intended_us: 1_000,
                sent_us: 1_050,
                first_byte_us: Some(2_000),
                done_us: 3_000,
                status: Some(429),
                outcome,
                retry_after_ms: Some(1_500),
                tokens: 12,
                stream: true,
                last: false,
                patience_ms: 30_000,
            };
            reader_agrees::<Attempt>(serde_json::to_value(&record).unwrap());
        }
        for outcome in fake_provider::Outcome::ALL {
            let record = fake_provider::ProviderRecord {
                id: "p-1".into(),
                seq: 7,
                dialect: fake_provider::Dialect::Anthropic,
                model: "m".into(),
                stream: false,
                received_us: 1_000,
                admitted_us: Some(1_100),
                first_byte_us: Some(1_200),
                finished_us: Some(1_300),
                hung_up_us: Some(1_250),
                prompt_tokens: 40,
                max_tokens: Some(16),
                completion_tokens: 9,
                reserved_tokens: 56,
                phase: "brownout".into(),
                outcome,
                status: 529,
            };
            reader_agrees::<Call>(serde_json::to_value(&record).unwrap());
        }
    }

    #[test]
    fn loopback_is_recognised() {
        assert!(is_loopback_url("http://127.0.0.1:8080"));
        assert!(is_loopback_url("http://127.3.2.1:80/v1"));
        assert!(is_loopback_url("http://localhost:1"));
        assert!(is_loopback_url("http://[::1]:1"));
        assert!(!is_loopback_url("http://10.0.0.1:80"));
        assert!(!is_loopback_url("https://staging.example.com"));
        assert!(!is_loopback_url("not a url"));
    }

    #[test]
    fn reference_counts_follow_the_quota_scale() {
        let t: toml::Table = toml::from_str(
            "mode = \"bounded\"\nbounded = { concurrency = 125, queue = 600, wait_budget = \"25s\" }\ndeadline = { tokens_per_minute = 500000 }\n",
        )
        .unwrap();
        let s = scale_reference(&t, 4.0);
        assert_eq!(s["bounded"]["concurrency"].as_integer(), Some(31));
        assert_eq!(s["bounded"]["queue"].as_integer(), Some(150));
        assert_eq!(s["bounded"]["wait_budget"].as_str(), Some("25s"));
        assert_eq!(
            s["deadline"]["tokens_per_minute"].as_float(),
            Some(125000.0)
        );
        assert_eq!(
            scale_reference(&t, 1000.0)["bounded"]["concurrency"].as_integer(),
            Some(1)
        );
    }

    #[test]
    fn file_descriptors_are_predicted_and_checked() {
        // 40 requests/s held up to 30 s, both sides, +50%, +256.
        assert_eq!(predicted_fds(40.0, 30.0), 3856);
        let limit = ensure_fds(64).unwrap();
        assert!(limit >= 64);
        let err = ensure_fds(u64::MAX / 2).unwrap_err();
        assert!(err.contains("open files"), "{err}");
    }

    #[test]
    fn atomic_write_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("rehearse-aw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("report.json");
        write_atomic(&p, b"{}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        assert!(!dir.join("report.json.tmp").exists());
    }
}
