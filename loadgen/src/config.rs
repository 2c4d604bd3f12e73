//! The `[load]` table of a scenario: its schema, and its validation into a
//! [`LoadPlan`].
//!
//! Every field at its default, each with what it means
//! ([`LoadConfig::TEMPLATE`], which `rehearse init` writes). A field with
//! no default (none, or a value to give) is commented out with an example;
//! a table there is none of by default is commented out whole. Its tables are below `[load]` in a scenario (`[[phases]]` is
//! `[[load.phases]]`); give either phases or a replay, not both. A
//! distribution (`patience`, the request's counts) is a `wire::Dist`:
//! `{ fixed = X }`, `{ uniform = { min, max } }`, `{ lognormal = { median,
//! p99 } }`, `{ exponential = { mean } }` or `{ mix = [ { value, weight },
//! ... ] }`.
//!
#![doc = concat!("```toml\n", include_str!("config.toml"), "```")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::{Deserialize, Serialize};
use toml_located::{ConfigError, Source};
use wire::{Api, Dialect, Dist, DistError, Dur, Scale};

use crate::rate::{Rate, RateUnit};
use crate::replay::{
    self, FailedRows, Layout, ReplayColumns, ReplayFormat, ReplayRead, TimestampUnit,
};
use crate::request::head::{self, Auth, HeaderTemplate};
use crate::schedule::{Arrivals, Phase, PhaseArrivals};

/// A scenario file as the loadgen sees it: its `[load]` table, the rest
/// being other parts' business.
#[derive(Debug, Deserialize)]
struct ScenarioFile {
    load: LoadConfig,
    #[serde(flatten)]
    _rest: toml::Table,
}

/// The `[load]` table, as written (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    /// Seed of every random draw.
    #[serde(default)]
    pub seed: u64,
    /// Bound on the p99 of the send lag; past it the run is invalid.
    #[serde(default = "default_send_lag", with = "humantime_serde")]
    pub send_lag_p99_max: Duration,
    /// Prefix of request ids.
    #[serde(default = "default_id_prefix")]
    pub id_prefix: String,
    /// A cap on open connections; none by default. With a cap, a request
    /// may wait for a connection, and the wait counts in its latency.
    /// Either way, connections for the people due in the schedule's first
    /// 5 ms (at most 256, and no more than the cap) are opened before it
    /// starts, and wait idle for them.
    pub max_connections: Option<usize>,
    /// The most body bytes read of one answer (a whole number of bytes or
    /// a string like `"8 MiB"`); past it the connection is closed and the
    /// attempt recorded `malformed` with reason `oversized`, so a target
    /// that sends without end cannot grow the generator's memory.
    #[serde(default = "default_max_answer_bytes")]
    pub max_answer_bytes: bytesize::ByteSize,
    /// How long a person waits, over all their attempts, before hanging up.
    #[serde(default = "default_patience")]
    pub patience: Dist<Dur>,
    /// Whether to send the remaining patience in a header.
    #[serde(default)]
    pub send_patience: bool,
    /// The name of that header.
    #[serde(default = "default_patience_header")]
    pub patience_header: String,
    /// Arrival phases, played in order.
    #[serde(default)]
    pub phases: Vec<PhaseConfig>,
    /// A recorded log to replay instead of phases.
    pub replay: Option<ReplayConfig>,
    /// The shape of requests.
    #[serde(default)]
    pub request: RequestConfig,
    /// What a person does after a failed attempt.
    #[serde(default)]
    pub retry: RetryConfig,
    /// The tenants sharing the arrivals; none: one tenant, `request`'s key.
    #[serde(default)]
    pub tenants: Vec<LoadTenant>,
    /// How the callers hold their connections to the target.
    #[serde(default)]
    pub clients: ClientsConfig,
}

/// The `[load.clients]` table: the callers as a population, by how they
/// hold connections to the target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientsConfig {
    /// `"per caller"` (the default): a caller with no idle connection to
    /// take opens one, up to the load generator's bound (what the callers
    /// can hold); `"pool"`: the callers share `pool` keep-alive
    /// connections, as app servers in front of a gateway do.
    pub connections: Option<ConnectionsModel>,
    /// The connections of the callers' pool (`connections = "pool"`, which
    /// giving it implies): an attempt that finds them all busy waits in
    /// the client for one, the wait counted in its latency and recorded
    /// as its `client_wait_us`.
    pub pool: Option<i64>,
    /// New connections per second at most (a number, or `"N/s"`, `"N/min"`,
    /// `"N/h"`); an attempt that would open one past it waits in the
    /// client as at a busy pool. None: no limit.
    pub connect_rate: Option<Rate>,
    /// How long a caller expects a call to take at the target, its queue
    /// included (a duration, as `"20ms"`): per caller, the callers hold at
    /// most the peak's rate × this, with room, and a caller past it waits
    /// in the client as at a busy pool, so a target slower than expected is
    /// measured (the wait in the callers' latency) rather than flooded with
    /// new connections. `rehearse run` takes it from the plan when the
    /// scenario leaves it out; `rehearse load` without it bounds by the
    /// callers' patience, the longest they hold a connection.
    #[serde(default, with = "humantime_serde")]
    pub time_in_system: Option<Duration>,
}

/// How the callers hold connections ([`ClientsConfig::connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnectionsModel {
    /// A connection per caller waiting, opened when none is idle.
    #[serde(rename = "per caller")]
    PerCaller,
    /// A fixed pool shared by every caller.
    #[serde(rename = "pool")]
    Pool,
}

/// The callers' connections as validated ([`LoadPlan::clients`]), at the
/// plan's scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clients {
    /// The pool's connections; `None`: a connection per caller waiting,
    /// up to the load generator's bound.
    pub pool: Option<usize>,
    /// New connections per second at most; `None`: no limit.
    pub connect_rate_per_s: Option<f64>,
    /// A call's expected time at the target, queue included
    /// ([`ClientsConfig::time_in_system`]); `None`: bounded by patience.
    pub time_in_system: Option<Duration>,
}

impl LoadConfig {
    /// The `[load]` table's template: every field at its default (or, with
    /// none, an example commented out) with a line on what it means; the
    /// module's documentation shows it, `rehearse init` writes it.
    pub const TEMPLATE: &'static str = include_str!("config.toml");
}

/// One `[[load.tenants]]` entry: an API key with its share of arrivals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadTenant {
    /// Its name in records and reports.
    pub name: String,
    /// The API key its requests carry.
    pub api_key: String,
    /// Its weight among the tenants, in every phase not named in `phases`.
    #[serde(default = "one")]
    pub share: f64,
    /// Its weight in the phases named here (by `[[load.phases]]` name).
    #[serde(default)]
    pub phases: std::collections::BTreeMap<String, f64>,
    /// Its own request shape, field by field over `[load.request]`.
    #[serde(default)]
    pub request: LoadTenantRequest,
}

/// A tenant's own request shape: each field given replaces
/// `[load.request]`'s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadTenantRequest {
    /// The model name sent.
    pub model: Option<String>,
    /// Prompt size in tokens.
    pub prompt_tokens: Option<Dist<f64>>,
    /// Extra context in KiB.
    pub padding_kb: Option<Dist<f64>>,
    /// `max_tokens` of the request.
    pub max_tokens: Option<Dist<f64>>,
    /// Share of streamed requests.
    pub stream: Option<f64>,
    /// The API called.
    pub api: Option<Api>,
    /// The path posted to, replacing the API's.
    pub path: Option<String>,
    /// How the API key is sent.
    pub auth: Option<Auth>,
    /// Headers added to `[load.request]`'s; a name given in both takes
    /// this value.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

fn default_send_lag() -> Duration {
    Duration::from_millis(5)
}
fn default_id_prefix() -> String {
    "r".into()
}
fn default_patience() -> Dist<Dur> {
    Dist::Fixed(Dur(Duration::from_secs(30)))
}
fn default_patience_header() -> String {
    "x-request-timeout-ms".into()
}

/// One `[[load.phases]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseConfig {
    /// A name for reports.
    pub name: Option<String>,
    /// How long the phase lasts.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// Arrivals at the start of the phase: per the unit it names
    /// (`"2000/min"`), else per `per`.
    pub rate: Rate,
    /// The unit of a bare `rate` and `ramp_to` (none: per second, or the
    /// unit they name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<RateUnit>,
    /// When set, the rate moves linearly from `rate` to this over the phase.
    pub ramp_to: Option<Rate>,
    /// Evenly spaced or Poisson arrivals.
    #[serde(default)]
    pub arrivals: PhaseArrivals,
}

/// The `[load.replay]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// The log file, relative to the scenario file.
    pub file: PathBuf,
    /// `csv` or `jsonl` (by default from the file's extension), or a
    /// public trace's format: `mooncake`, `burstgpt`, `azure`, `bailian`.
    pub format: Option<ReplayFormat>,
    /// The timestamp column of a `csv` or `jsonl` log (none: `timestamp`).
    pub timestamp: Option<String>,
    /// The unit of a `csv` or `jsonl` log's numeric timestamps (none: s).
    pub unit: Option<TimestampUnit>,
    /// A `csv` or `jsonl` log's columns, where not named as ours.
    pub columns: Option<ReplayColumns>,
    /// A trace's failed requests (BurstGPT's 0 response tokens): `keep`
    /// them as requests, or `drop` them.
    #[serde(default)]
    pub failed: FailedRows,
    /// Log time divided by this is run time.
    #[serde(default = "one")]
    pub speedup: f64,
    /// Each row is played this many times on average.
    #[serde(default = "one")]
    pub multiply: f64,
    /// Added copies move by up to plus or minus this, in log time.
    #[serde(default = "default_jitter", with = "humantime_serde")]
    pub jitter: Duration,
}

fn one() -> f64 {
    1.0
}
fn default_jitter() -> Duration {
    Duration::from_secs(1)
}

/// The `[load.request]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestConfig {
    /// OpenAI or Anthropic (`"openai"`, `"anthropic"`): its chat API,
    /// unless `api` names another.
    #[serde(default)]
    pub dialect: Dialect,
    /// The API called: `"chat"`, `"messages"`, `"responses"` or
    /// `"embeddings"` (none: the dialect's chat API).
    pub api: Option<Api>,
    /// The path posted to, below the target's base path, with its query
    /// string if any (none: the API's own, such as `/v1/chat/completions`).
    pub path: Option<String>,
    /// How the API key is sent: `"bearer"` (`authorization: Bearer KEY`),
    /// `"api-key"` or `"x-api-key"` (none: the dialect's, bearer for
    /// OpenAI and x-api-key for Anthropic).
    pub auth: Option<Auth>,
    /// Headers sent with every request; a value may hold `{tenant}`,
    /// `{request_id}`, `{attempt}`, `{provider_url}` (the provider behind
    /// the gateway: a rehearsal's fake provider, its first of several) and
    /// `{provider_url:NAME}` (provider NAME's).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The model name sent.
    #[serde(default = "default_model")]
    pub model: String,
    /// Prompt size in tokens (about 4 characters each).
    #[serde(default = "default_prompt_tokens")]
    pub prompt_tokens: Dist<f64>,
    /// Extra context in KiB, modelling retrieved documents.
    #[serde(default = "zero_count")]
    pub padding_kb: Dist<f64>,
    /// `max_tokens` of the request.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: Dist<f64>,
    /// Share of streamed requests, 0 to 1.
    #[serde(default)]
    pub stream: f64,
    /// The API key sent.
    #[serde(default = "default_api_key")]
    pub api_key: String,
}

impl Default for RequestConfig {
    fn default() -> Self {
        RequestConfig {
            dialect: Dialect::OpenAi,
            model: default_model(),
            prompt_tokens: default_prompt_tokens(),
            padding_kb: zero_count(),
            max_tokens: default_max_tokens(),
            stream: 0.0,
            api_key: default_api_key(),
            api: None,
            path: None,
            auth: None,
            headers: std::collections::BTreeMap::new(),
        }
    }
}

fn default_model() -> String {
    "gpt-4o-mini".into()
}
fn default_prompt_tokens() -> Dist<f64> {
    Dist::Fixed(64.0)
}
fn zero_count() -> Dist<f64> {
    Dist::Fixed(0.0)
}
fn default_max_tokens() -> Dist<f64> {
    Dist::Fixed(64.0)
}
fn default_api_key() -> String {
    "rehearse".into()
}

/// The kind of retry policy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RetryKind {
    /// Never retry.
    #[default]
    None,
    /// Retry at once.
    Immediate,
    /// Retry at Retry-After (with jitter), else after exponential backoff.
    RetryAfter,
}

/// The `[load.retry]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// none, immediate or retry_after.
    #[serde(default)]
    pub policy: RetryKind,
    /// Attempts per person, the first included.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// A Retry-After above this is not honoured (backoff is used instead).
    #[serde(default = "default_cap", with = "humantime_serde")]
    pub cap: Duration,
    /// Share of the Retry-After value added at random on top of it.
    #[serde(default = "one")]
    pub jitter: f64,
    /// First backoff step when no Retry-After came.
    #[serde(default = "default_backoff_initial", with = "humantime_serde")]
    pub backoff_initial: Duration,
    /// Largest backoff step.
    #[serde(default = "default_backoff_max", with = "humantime_serde")]
    pub backoff_max: Duration,
    /// When set, retries are at most this share of first attempts.
    pub budget: Option<f64>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            policy: RetryKind::None,
            max_attempts: default_max_attempts(),
            cap: default_cap(),
            jitter: 1.0,
            backoff_initial: default_backoff_initial(),
            backoff_max: default_backoff_max(),
            budget: None,
        }
    }
}

fn default_max_attempts() -> u32 {
    3
}
fn default_cap() -> Duration {
    Duration::from_secs(60)
}
fn default_backoff_initial() -> Duration {
    Duration::from_millis(500)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(8)
}

/// Why a scenario's load could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The scenario file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The `[load]` table or the replay log is wrong; the error names the
    /// file, line and field.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The shape of requests, validated.
#[derive(Debug, Clone)]
pub struct RequestShape {
    pub(crate) api: Api,
    pub(crate) model: String,
    pub(crate) prompt_tokens: Dist<f64>,
    pub(crate) padding_kb: Dist<f64>,
    pub(crate) max_tokens: Dist<f64>,
    pub(crate) stream_share: f64,
    pub(crate) api_key: String,
    /// The path below the target's base path, a query string included;
    /// `None`: the API's.
    pub(crate) path: Option<String>,
    pub(crate) auth: Auth,
    /// The scenario's headers, split at their placeholders.
    pub(crate) headers: Vec<HeaderTemplate>,
}

/// A validated retry policy.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub(crate) kind: RetryKind,
    pub(crate) max_attempts: u32,
    pub(crate) cap: Duration,
    pub(crate) jitter: f64,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) budget: Option<f64>,
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            kind: RetryKind::None,
            max_attempts: 1,
            cap: default_cap(),
            jitter: 1.0,
            backoff_initial: default_backoff_initial(),
            backoff_max: default_backoff_max(),
            budget: None,
        }
    }
}

/// A validated tenant: its name, its request shape (its API key in it) and
/// its weight in each phase (one weight for a replay).
#[derive(Debug, Clone)]
pub(crate) struct TenantPlan {
    pub(crate) name: String,
    pub(crate) request: RequestShape,
    pub(crate) weights: Vec<f64>,
}

/// A phase of a [`LoadPlan`] as validated: its name (`phase0`, `phase1`,
/// ... when the scenario gives none), its length, and its rate in arrivals
/// per second at its start and at its end (a ramp moves linearly between
/// them; without one they are equal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedPhase<'a> {
    /// Its name.
    pub name: &'a str,
    /// How long it lasts.
    pub duration: Duration,
    /// Arrivals per second at its start.
    pub from_per_sec: f64,
    /// Arrivals per second at its end.
    pub to_per_sec: f64,
    /// Evenly spaced or Poisson.
    pub arrivals: PhaseArrivals,
}

/// A validated `[load]` table: everything a run needs but the target.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub(crate) seed: u64,
    pub(crate) arrivals: Arrivals,
    pub(crate) request: RequestShape,
    /// The tenants; empty for one tenant with `request`.
    pub(crate) tenants: Vec<TenantPlan>,
    pub(crate) patience: Dist<Dur>,
    pub(crate) patience_header: Option<HeaderName>,
    pub(crate) retry: RetryPolicy,
    pub(crate) send_lag_bound: Duration,
    pub(crate) id_prefix: String,
    pub(crate) max_connections: Option<usize>,
    /// How the callers hold connections (`[load.clients]`).
    pub(crate) clients: Clients,
    /// The most body bytes read of one answer.
    pub(crate) max_answer_bytes: u64,
    /// Durations drawn at run time (patience) are divided by this.
    pub(crate) time_scale: f64,
    /// What a replayed log held, as read (log time, the scenario's own
    /// `speedup` and `multiply`).
    pub(crate) replay_read: Option<Arc<ReplayRead>>,
}

impl LoadPlan {
    /// Reads a scenario file and validates its `[load]` table. A replay log
    /// is read relative to the scenario file's folder.
    pub fn from_scenario_file(path: &Path) -> Result<LoadPlan, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        LoadPlan::from_scenario_str(&text, &path.display().to_string(), base)
    }

    /// Validates the `[load]` table of a scenario text read from `origin`;
    /// a replay log's path is taken relative to `base_dir`.
    pub fn from_scenario_str(
        text: &str,
        origin: &str,
        base_dir: &Path,
    ) -> Result<LoadPlan, LoadError> {
        let source = Source::new(text, origin);
        let file: ScenarioFile = source.parse()?;
        Ok(validate(&file.load, &source, base_dir)?)
    }

    /// Validates a `[load]` table its caller has already read from
    /// `source` (a whole scenario, parsed once by the harness), locating
    /// errors in that text; a replay log's path is taken relative to
    /// `base_dir`, and the log is read and parsed now.
    pub fn from_config(
        config: &LoadConfig,
        source: &Source<'_>,
        base_dir: &Path,
    ) -> Result<LoadPlan, ConfigError> {
        validate(config, source, base_dir)
    }

    /// The phases as validated, in order (none for a replayed log).
    ///
    /// ```
    /// let text = "[load]\n[[load.phases]]\nduration = \"1m\"\nrate = 120\nper = \"minute\"\nramp_to = 240\n";
    /// let plan = loadgen::LoadPlan::from_scenario_str(text, "s.toml", std::path::Path::new("."))?;
    /// let p = plan.phases()[0];
    /// assert_eq!((p.name, p.from_per_sec, p.to_per_sec), ("phase0", 2.0, 4.0));
    /// # Ok::<(), loadgen::LoadError>(())
    /// ```
    pub fn phases(&self) -> Vec<PlannedPhase<'_>> {
        match &self.arrivals {
            Arrivals::Phases(phases) => phases
                .iter()
                .map(|p| PlannedPhase {
                    name: &p.name,
                    duration: p.duration,
                    from_per_sec: p.from_per_sec,
                    to_per_sec: p.to_per_sec,
                    arrivals: p.arrivals,
                })
                .collect(),
            Arrivals::Replay { .. } => Vec::new(),
        }
    }

    /// Attempts per person at most, the first included (1 without retries).
    pub fn max_attempts(&self) -> u32 {
        self.retry.max_attempts
    }

    /// The dialect requests are sent in.
    pub fn dialect(&self) -> Dialect {
        self.request.api.dialect()
    }

    /// The API requests are sent to.
    pub fn api(&self) -> Api {
        self.request.api
    }

    /// What a replayed log held as read, in log time with the scenario's
    /// own `speedup` and `multiply` (none without a replay).
    pub fn replay_read(&self) -> Option<&ReplayRead> {
        self.replay_read.as_deref()
    }

    /// The total length of the arrival schedule.
    pub fn schedule_length(&self) -> Duration {
        self.arrivals.length()
    }

    /// The expected number of arrivals (people, not attempts).
    pub fn expected_arrivals(&self) -> f64 {
        self.arrivals.expected_count()
    }

    /// The bound on the send lag's p99.
    pub fn send_lag_bound(&self) -> Duration {
        self.send_lag_bound
    }

    /// How the callers hold their connections (`[load.clients]`).
    pub fn clients(&self) -> Clients {
        self.clients
    }

    /// The plan with its callers expecting a call to take `time` at the
    /// target (at this plan's scale), unless the scenario said how long,
    /// or the callers share a pool (which bounds them already); `None` or
    /// zero: the plan as it is.
    pub fn expecting(mut self, time: impl Into<Option<Duration>>) -> LoadPlan {
        let c = &mut self.clients;
        let time = time.into().filter(|t| !t.is_zero());
        if c.pool.is_none() && c.time_in_system.is_none() {
            c.time_in_system = time;
        }
        self
    }

    /// The same plan at rehearsal scale, by the one rule of
    /// [`wire::Scale`]: phase durations, patience, retry waits and a
    /// replay's jitter ÷ time; rates × time ÷ quota; a replay's speed-up ×
    /// time and its multiplier ÷ quota. The send-lag bound, a property of
    /// the harness, does not change. A scale that is not finite and above 0
    /// in both parts leaves the plan as it is.
    ///
    /// ```
    /// use loadgen::LoadPlan;
    /// use wire::Scale;
    ///
    /// let text = "[load]\npatience = { fixed = \"25s\" }\n[[load.phases]]\nduration = \"40m\"\nrate = 2000\nper = \"minute\"\n";
    /// let plan = LoadPlan::from_scenario_str(text, "s.toml", std::path::Path::new("."))?;
    /// let scaled = plan.scaled(Scale { time: 10.0, quota: 10.0 });
    /// assert_eq!(scaled.schedule_length(), std::time::Duration::from_secs(240));
    /// assert_eq!(scaled.expected_arrivals().round(), 8000.0);
    /// # Ok::<(), loadgen::LoadError>(())
    /// ```
    pub fn scaled(mut self, scale: Scale) -> LoadPlan {
        let valid = |x: f64| x.is_finite() && x > 0.0;
        if !(valid(scale.time) && valid(scale.quota)) || scale.is_one() {
            return self;
        }
        match &mut self.arrivals {
            Arrivals::Phases(phases) => {
                for p in phases {
                    p.duration = scale.duration(p.duration);
                    p.from_per_sec = scale.rate(p.from_per_sec);
                    p.to_per_sec = scale.rate(p.to_per_sec);
                }
            }
            Arrivals::Replay {
                speedup,
                multiply,
                jitter,
                ..
            } => {
                *speedup *= scale.time;
                *multiply /= scale.quota;
                *jitter = scale.duration(*jitter);
            }
        }
        self.time_scale *= scale.time;
        // A pool is a count of connections held at once (Little's law:
        // ÷ quota); connections per second a rate.
        let c = &mut self.clients;
        c.pool = c.pool.map(|n| scale.count_usize(n));
        c.connect_rate_per_s = c.connect_rate_per_s.map(|r| scale.rate(r));
        c.time_in_system = c.time_in_system.map(|d| scale.duration(d));
        let r = &mut self.retry;
        r.cap = scale.duration(r.cap);
        r.backoff_initial = scale.duration(r.backoff_initial);
        r.backoff_max = scale.duration(r.backoff_max);
        self
    }

    /// Draws the tenant of a person arriving from `source` (its phase);
    /// `None` when the plan has no tenants (and then nothing is drawn, so
    /// a plan without tenants draws as before).
    pub(crate) fn draw_tenant<R: rand::Rng + ?Sized>(
        &self,
        rng: &mut R,
        source: crate::schedule::Source,
    ) -> Option<u16> {
        if self.tenants.is_empty() {
            return None;
        }
        let k = match source {
            crate::schedule::Source::Phase(k) => k,
            crate::schedule::Source::Row(_) => 0,
        };
        let weight = |t: &TenantPlan| t.weights.get(k).copied().unwrap_or(0.0);
        let total: f64 = self.tenants.iter().map(weight).sum();
        let mut u = rng.gen::<f64>() * total;
        for (i, t) in self.tenants.iter().enumerate() {
            u -= weight(t);
            if u < 0.0 {
                return u16::try_from(i).ok();
            }
        }
        self.tenants
            .iter()
            .rposition(|t| weight(t) > 0.0)
            .and_then(|i| u16::try_from(i).ok())
    }

    /// The request shape of a tenant (`None`: the plan's own).
    pub(crate) fn shape(&self, tenant: Option<u16>) -> &RequestShape {
        tenant
            .and_then(|i| self.tenants.get(usize::from(i)))
            .map_or(&self.request, |t| &t.request)
    }

    /// Draws one person's patience.
    pub(crate) fn draw_patience<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        Duration::from_secs_f64(self.patience.sample_f64(rng) / self.time_scale)
    }
}

fn dist_error(source: &Source<'_>, path: &str, e: DistError) -> ConfigError {
    source.error(&format!("{path}.{}", e.field), e.message)
}

/// Validates a `[load]` table into a plan, part by part (arrivals, request,
/// patience, connections, retry, id prefix); the first failure is the error
/// reported, located at its field.
fn validate(
    cfg: &LoadConfig,
    source: &Source<'_>,
    base_dir: &Path,
) -> Result<LoadPlan, ConfigError> {
    let (arrivals, replay_read) = arrivals(cfg, source, base_dir)?;
    let request = request_shape(&cfg.request, source, &own_headers(cfg))?;
    cfg.patience
        .check()
        .map_err(|e| dist_error(source, "load.patience", e))?;
    let patience = cfg.patience.clone();
    let patience_header = patience_header(cfg, source)?;
    if cfg.max_connections == Some(0) {
        return Err(source.error("load.max_connections", "must be >= 1"));
    }
    let clients = clients(cfg, source)?;
    let max_answer_bytes = cfg.max_answer_bytes.as_u64();
    if max_answer_bytes == 0 {
        return Err(source.error("load.max_answer_bytes", "must be at least 1 byte"));
    }
    let retry = retry_policy(&cfg.retry, source)?;
    check_id_prefix(&cfg.id_prefix, source)?;
    let tenants = tenants(cfg, &arrivals, source)?;

    Ok(LoadPlan {
        seed: cfg.seed,
        arrivals,
        request,
        tenants,
        patience,
        patience_header,
        retry,
        send_lag_bound: cfg.send_lag_p99_max,
        id_prefix: cfg.id_prefix.clone(),
        max_connections: cfg.max_connections,
        clients,
        max_answer_bytes,
        time_scale: 1.0,
        replay_read: replay_read.map(Arc::new),
    })
}

/// `[load.clients]`: the model the fields give, each checked in place.
fn clients(cfg: &LoadConfig, source: &Source<'_>) -> Result<Clients, ConfigError> {
    let c = &cfg.clients;
    let pool = match (c.connections, c.pool) {
        (Some(ConnectionsModel::PerCaller), Some(_)) => {
            return Err(source.error(
                "load.clients.pool",
                "a pool is for `connections = \"pool\"`: leave out one or the other",
            ))
        }
        (Some(ConnectionsModel::Pool), None) => {
            return Err(source.error(
                "load.clients.connections",
                "`connections = \"pool\"` needs `pool = N`, the connections the callers share",
            ))
        }
        (_, Some(n)) if n < 1 => {
            return Err(source.error(
                "load.clients.pool",
                format!("{n}: a pool holds at least 1 connection"),
            ))
        }
        (_, Some(n)) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        (_, None) => None,
    };
    if pool.is_some() && cfg.max_connections.is_some() {
        return Err(source.error(
            "load.max_connections",
            "with `[load.clients] pool`, the pool is the cap: leave max_connections out",
        ));
    }
    let connect_rate_per_s = match c.connect_rate {
        None => None,
        Some(r) if r.value.is_finite() && r.value > 0.0 => Some(r.per_second(RateUnit::Second)),
        Some(r) => {
            return Err(source.error(
                "load.clients.connect_rate",
                format!("`{r}`: new connections per second must be a number above 0"),
            ))
        }
    };
    let time_in_system = match c.time_in_system {
        Some(_) if pool.is_some() => {
            return Err(source.error(
                "load.clients.time_in_system",
                "with a pool, the pool bounds the connections: leave time_in_system out",
            ))
        }
        Some(d) if d.is_zero() => {
            return Err(source.error(
                "load.clients.time_in_system",
                "a call's expected time at the target must be above 0",
            ))
        }
        d => d,
    };
    Ok(Clients {
        pool,
        connect_rate_per_s,
        time_in_system,
    })
}

/// `max_answer_bytes` unless the scenario says: 4 MiB, far past the
/// largest answer the shipped scenarios ask for (200 tokens; a streamed
/// token costs an event of a couple of hundred bytes, so 4 MiB holds some
/// 20,000 streamed tokens), and small enough that a few hundred callers
/// reading one at once stay within a machine's memory.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 4 << 20;

fn default_max_answer_bytes() -> bytesize::ByteSize {
    bytesize::ByteSize(DEFAULT_MAX_ANSWER_BYTES)
}

/// Where arrivals come from: phases or a replayed log, exactly one of them
/// (with what the log held).
fn arrivals(
    cfg: &LoadConfig,
    source: &Source<'_>,
    base_dir: &Path,
) -> Result<(Arrivals, Option<ReplayRead>), ConfigError> {
    match (&cfg.replay, cfg.phases.is_empty()) {
        (Some(_), false) => {
            Err(source.error("load.replay", "give either `phases` or `replay`, not both"))
        }
        (None, true) => Err(source.error(
            "load",
            "no arrivals: add `[[load.phases]]` entries or a `[load.replay]` table",
        )),
        (None, false) => Ok((Arrivals::Phases(phases(&cfg.phases, source)?), None)),
        (Some(r), true) => replay_arrivals(r, source, base_dir),
    }
}

/// The phases, with their rates in arrivals per second; an unnamed phase
/// is named by its place (`phase0`, `phase1`, ...).
fn phases(configs: &[PhaseConfig], source: &Source<'_>) -> Result<Vec<Phase>, ConfigError> {
    let mut phases = Vec::with_capacity(configs.len());
    for (i, p) in configs.iter().enumerate() {
        let at = |f: &str| format!("load.phases[{i}].{f}");
        if p.duration.is_zero() {
            return Err(source.error(&at("duration"), "must be > 0"));
        }
        let per = p.per.unwrap_or_default();
        for (field, rate) in [("rate", Some(p.rate)), ("ramp_to", p.ramp_to)] {
            let Some(rate) = rate else { continue };
            if !(rate.value.is_finite() && rate.value >= 0.0) {
                return Err(source.error(&at(field), "must be a number >= 0"));
            }
            // A unit written twice must be the one unit.
            if let (Some(named), Some(written)) = (rate.unit, p.per) {
                if named != written {
                    return Err(source.error(
                        &at("per"),
                        format!(
                            "`{field} = \"{rate}\"` names its unit, and `per` says another: leave `per` out"
                        ),
                    ));
                }
            }
        }
        let from_per_sec = p.rate.per_second(per);
        phases.push(Phase {
            name: p.name.clone().unwrap_or_else(|| format!("phase{i}")),
            duration: p.duration,
            from_per_sec,
            to_per_sec: p.ramp_to.map_or(from_per_sec, |r| r.per_second(per)),
            arrivals: p.arrivals,
        });
    }
    Ok(phases)
}

/// A replayed log, read and parsed now (relative to the scenario file's
/// folder), so that a missing file or a bad row fails validation rather
/// than the run.
fn replay_arrivals(
    r: &ReplayConfig,
    source: &Source<'_>,
    base_dir: &Path,
) -> Result<(Arrivals, Option<ReplayRead>), ConfigError> {
    if !(r.speedup.is_finite() && r.speedup > 0.0) {
        return Err(source.error("load.replay.speedup", "must be > 0"));
    }
    if !(r.multiply.is_finite() && r.multiply >= 0.0) {
        return Err(source.error("load.replay.multiply", "must be >= 0"));
    }
    let path = base_dir.join(&r.file);
    let format = match r.format {
        Some(f) => f,
        None => ReplayFormat::from_path(&path).ok_or_else(|| {
            source.error(
                "load.replay.file",
                "cannot tell the format from the extension; set `format` to csv or jsonl",
            )
        })?,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        source.error(
            "load.replay.file",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let layout = Layout::new(
        format,
        r.timestamp.as_deref(),
        r.unit,
        r.columns.as_ref(),
        r.failed,
    )
    .map_err(|e| source.error(&format!("load.replay.{}", e.field), e.message))?;
    let log = replay::parse(&text, &path.display().to_string(), &layout)?;
    let read = replay::summary(&log.rows, &layout, log.failed, r.speedup, r.multiply);
    let arrivals = Arrivals::Replay {
        rows: log.rows.into(),
        speedup: r.speedup,
        multiply: r.multiply,
        jitter: r.jitter,
    };
    Ok((arrivals, Some(read)))
}

/// The shape of requests: its distributions turned into samplers, the
/// model and API key checked (the key must fit in a header), the API
/// agreeing with the dialect, the path and the headers (see
/// [`head::templates`]); errors at `at`'s fields (`load.request`, or a
/// tenant's `request`) but for the key's.
fn request_shape(
    rq: &RequestConfig,
    source: &Source<'_>,
    own: &OwnHeaders<'_>,
) -> Result<RequestShape, ConfigError> {
    let sampler = |dist: &Dist<f64>, path: &str| {
        dist.check()
            .map(|()| dist.clone())
            .map_err(|e| dist_error(source, path, e))
    };
    let prompt_tokens = sampler(&rq.prompt_tokens, "load.request.prompt_tokens")?;
    let padding_kb = sampler(&rq.padding_kb, "load.request.padding_kb")?;
    let max_tokens = sampler(&rq.max_tokens, "load.request.max_tokens")?;
    if !(0.0..=1.0).contains(&rq.stream) {
        return Err(source.error("load.request.stream", "must be a share between 0 and 1"));
    }
    if rq.model.is_empty() {
        return Err(source.error("load.request.model", "must not be empty"));
    }
    http::HeaderValue::from_str(&rq.api_key)
        .map_err(|_| source.error("load.request.api_key", "is not a valid header value"))?;
    let api = match rq.api {
        None => Api::of_dialect(rq.dialect),
        // `dialect` has a default (openai), so only anthropic can disagree.
        Some(api) if rq.dialect == Dialect::Anthropic && api != Api::Messages => {
            return Err(source.error(
                "load.request.api",
                format!(
                    "`dialect = \"anthropic\"` has only the messages API, not {:?}",
                    api.as_str()
                ),
            ))
        }
        Some(api) => api,
    };
    if api == Api::Embeddings && rq.stream > 0.0 {
        return Err(source.error(
            "load.request.stream",
            "embeddings are not streamed: must be 0 with `api = \"embeddings\"`",
        ));
    }
    let path = match &rq.path {
        Some(p) => Some(head::check_path(p).map_err(|m| source.error("load.request.path", m))?),
        None => None,
    };
    let auth = rq.auth.unwrap_or(Auth::of_dialect(api.dialect()));
    let own = OwnHeaders { auth, api, ..*own };
    let headers = head::templates(&rq.headers, &own.names())
        .map_err(|(name, m)| source.error(&format!("load.request.headers.{name}"), m))?;
    Ok(RequestShape {
        api,
        model: rq.model.clone(),
        prompt_tokens,
        padding_kb,
        max_tokens,
        stream_share: rq.stream,
        api_key: rq.api_key.clone(),
        path,
        auth,
        headers,
    })
}

/// What the headers the load generator sets itself depend on: the
/// patience header (when sent), and a shape's auth and API.
#[derive(Debug, Clone, Copy)]
struct OwnHeaders<'a> {
    patience: Option<&'a str>,
    auth: Auth,
    api: Api,
}

impl OwnHeaders<'_> {
    /// The names of the headers the load generator sets itself, which a
    /// scenario's `headers` may not repeat.
    fn names(&self) -> Vec<&str> {
        let mut names = vec![
            "host",
            "content-type",
            "content-length",
            "transfer-encoding",
            "connection",
            wire::headers::REQUEST_ID,
            self.auth.header(),
        ];
        if self.api.dialect() == Dialect::Anthropic {
            names.push(wire::headers::ANTHROPIC_VERSION);
        }
        names.extend(self.patience);
        names
    }
}

fn own_headers(cfg: &LoadConfig) -> OwnHeaders<'_> {
    OwnHeaders {
        patience: cfg.send_patience.then_some(cfg.patience_header.as_str()),
        auth: Auth::Bearer,
        api: Api::Chat,
    }
}

/// The tenants: names unique, keys valid in a header, weights finite and
/// at least 0, phase names known, and in every phase some tenant with a
/// weight above 0.
fn tenants(
    cfg: &LoadConfig,
    arrivals: &Arrivals,
    source: &Source<'_>,
) -> Result<Vec<TenantPlan>, ConfigError> {
    let phase_names: Vec<&str> = match arrivals {
        Arrivals::Phases(p) => p.iter().map(|p| p.name.as_str()).collect(),
        Arrivals::Replay { .. } => vec!["replay"],
    };
    if cfg.tenants.len() > usize::from(u16::MAX) {
        return Err(source.error("load.tenants", "at most 65,535 tenants"));
    }
    let mut out: Vec<TenantPlan> = Vec::with_capacity(cfg.tenants.len());
    for (i, t) in cfg.tenants.iter().enumerate() {
        let at = |f: &str| format!("load.tenants[{i}].{f}");
        if t.name.is_empty() || out.iter().any(|o| o.name == t.name) {
            return Err(source.error(&at("name"), "must be non-empty and unique"));
        }
        let weight_ok = |w: f64| w.is_finite() && w >= 0.0;
        if !weight_ok(t.share) {
            return Err(source.error(&at("share"), "must be a number >= 0"));
        }
        for (name, w) in &t.phases {
            if !phase_names.contains(&name.as_str()) {
                return Err(source.error(
                    &at("phases"),
                    format!(
                        "no phase is named {name:?} (phases: {})",
                        phase_names.join(", ")
                    ),
                ));
            }
            if !weight_ok(*w) {
                return Err(source.error(&at(&format!("phases.{name}")), "must be a number >= 0"));
            }
        }
        let r = &t.request;
        let merged = RequestConfig {
            dialect: cfg.request.dialect,
            model: r.model.clone().unwrap_or_else(|| cfg.request.model.clone()),
            prompt_tokens: r
                .prompt_tokens
                .clone()
                .unwrap_or(cfg.request.prompt_tokens.clone()),
            padding_kb: r
                .padding_kb
                .clone()
                .unwrap_or(cfg.request.padding_kb.clone()),
            max_tokens: r
                .max_tokens
                .clone()
                .unwrap_or(cfg.request.max_tokens.clone()),
            stream: r.stream.unwrap_or(cfg.request.stream),
            api_key: t.api_key.clone(),
            api: r.api.or(cfg.request.api),
            path: r.path.clone().or_else(|| cfg.request.path.clone()),
            auth: r.auth.or(cfg.request.auth),
            // The tenant's header replaces the request's of that name,
            // whatever the case of either.
            headers: cfg
                .request
                .headers
                .iter()
                .filter(|(k, _)| !r.headers.keys().any(|t| t.eq_ignore_ascii_case(k)))
                .chain(&r.headers)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let request = request_shape(&merged, source, &own_headers(cfg)).map_err(|e| {
            if e.field == "load.request.api_key" {
                source.error(&at("api_key"), "is not a valid header value")
            } else if let Some(rest) = e.field.strip_prefix("load.request.") {
                source.error(&at(&format!("request.{rest}")), e.message)
            } else {
                source.error(&at("request"), e.to_string())
            }
        })?;
        // A provider URL is known only at run time; any stands for it.
        head::Head::new(
            Vec::new(),
            &request.headers,
            &t.name,
            &[("default".into(), "http://p".into())],
        )
        .map_err(|m| source.error(&at("name"), m))?;
        let weights = phase_names
            .iter()
            .map(|p| t.phases.get(*p).copied().unwrap_or(t.share))
            .collect();
        out.push(TenantPlan {
            name: t.name.clone(),
            request,
            weights,
        });
    }
    if !out.is_empty() {
        for (k, name) in phase_names.iter().enumerate() {
            if out.iter().all(|t| t.weights[k] == 0.0) {
                return Err(source.error(
                    "load.tenants",
                    format!("no tenant has a share above 0 in phase {name:?}"),
                ));
            }
        }
    }
    Ok(out)
}

/// The header that carries the remaining patience, when it is sent.
fn patience_header(
    cfg: &LoadConfig,
    source: &Source<'_>,
) -> Result<Option<HeaderName>, ConfigError> {
    if !cfg.send_patience {
        return Ok(None);
    }
    HeaderName::from_bytes(cfg.patience_header.as_bytes())
        .map(Some)
        .map_err(|_| source.error("load.patience_header", "is not a valid header name"))
}

/// The retry policy. A policy of `none` makes one attempt whatever
/// `max_attempts` says.
fn retry_policy(r: &RetryConfig, source: &Source<'_>) -> Result<RetryPolicy, ConfigError> {
    if r.max_attempts == 0 {
        return Err(source.error("load.retry.max_attempts", "must be >= 1"));
    }
    if !(r.jitter.is_finite() && r.jitter >= 0.0) {
        return Err(source.error("load.retry.jitter", "must be >= 0"));
    }
    if r.backoff_max < r.backoff_initial {
        return Err(source.error("load.retry.backoff_max", "must be >= `backoff_initial`"));
    }
    if let Some(b) = r.budget {
        if !(b.is_finite() && b >= 0.0) {
            return Err(source.error("load.retry.budget", "must be a share >= 0"));
        }
    }
    Ok(RetryPolicy {
        kind: r.policy,
        max_attempts: if r.policy == RetryKind::None {
            1
        } else {
            r.max_attempts
        },
        cap: r.cap,
        jitter: r.jitter,
        backoff_initial: r.backoff_initial,
        backoff_max: r.backoff_max,
        budget: r.budget,
    })
}

/// Request ids are the prefix and a number, so the prefix must be safe in
/// a header and a file name.
fn check_id_prefix(prefix: &str, source: &Source<'_>) -> Result<(), ConfigError> {
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if prefix.is_empty() || !prefix.chars().all(safe) {
        return Err(source.error(
            "load.id_prefix",
            "must be non-empty ASCII letters, digits, - or _",
        ));
    }
    // A person's id is the prefix and their index (up to 20 digits); it
    // must stay a request id the prompt marker can carry.
    let index_digits = u64::MAX.to_string().len();
    if !wire::is_request_id(&format!("{prefix}{}", u64::MAX)) {
        return Err(source.error(
            "load.id_prefix",
            format!(
                "must be at most {} characters (a request id is at most {})",
                wire::MAX_ID_LEN - index_digits,
                wire::MAX_ID_LEN
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<LoadPlan, LoadError> {
        LoadPlan::from_scenario_str(text, "s.toml", Path::new("."))
    }

    fn config_err(text: &str) -> ConfigError {
        match plan(text) {
            Err(LoadError::Config(e)) => e,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    /// The samples shipped in `scenarios/traces/`, each read as its
    /// format, and a setting a trace's format has its own of refused at
    /// its field.
    #[test]
    fn the_sample_traces_read_as_their_formats() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let replay = |file: &str, format: &str, more: &str| {
            let text = format!(
                "[load]\n[load.replay]\nfile = \"traces/{file}\"\nformat = \"{format}\"\n{more}"
            );
            LoadPlan::from_scenario_str(&text, "s.toml", &dir)
        };
        for (file, format, rows) in [
            ("mooncake.jsonl", "mooncake", 336.0),
            ("burstgpt.csv", "burstgpt", 479.0),
            ("azure.csv", "azure", 385.0),
            ("bailian.jsonl", "bailian", 382.0),
        ] {
            let plan = replay(file, format, "").unwrap();
            assert_eq!(plan.expected_arrivals(), rows, "{file}");
            // Each spans about five or ten minutes, as made.
            let span = plan.schedule_length().as_secs();
            assert!((250..=600).contains(&span), "{file}: {span} s");
        }
        let dropped = replay("burstgpt.csv", "burstgpt", "failed = \"drop\"\n").unwrap();
        // 34 of its rows are failed requests (0 response tokens).
        assert_eq!(dropped.expected_arrivals(), 445.0);
        match replay("mooncake.jsonl", "mooncake", "unit = \"s\"\n") {
            Err(LoadError::Config(e)) => assert_eq!(e.field, "load.replay.unit", "{e}"),
            other => panic!("expected a config error, got {other:?}"),
        }
        // The Azure sample's datetimes as a plain CSV with its columns mapped.
        let mapped = replay(
            "azure.csv",
            "csv",
            "columns = { timestamp = \"TIMESTAMP\", prompt_tokens = \"ContextTokens\" }\n",
        )
        .unwrap();
        assert_eq!(mapped.expected_arrivals(), 385.0);
    }

    #[test]
    fn minimal_phases_with_other_tables_ignored() {
        let p = plan(
            "[scenario]\nname = \"x\"\n[provider]\nseed = 3\n\n[load]\n[[load.phases]]\nduration = \"10s\"\nrate = 120\nper = \"minute\"\n",
        )
        .unwrap();
        assert_eq!(p.schedule_length(), Duration::from_secs(10));
        assert!((p.expected_arrivals() - 20.0).abs() < 1e-9);
        assert_eq!(p.retry.max_attempts, 1);
        assert!(p.patience_header.is_none());
    }

    const TWO_TENANTS: &str = "[load]\n\
        [[load.phases]]\nname = \"quiet\"\nduration = \"10s\"\nrate = 10\n\
        [[load.phases]]\nname = \"promo\"\nduration = \"10s\"\nrate = 100\n\
        [[load.tenants]]\nname = \"shop\"\napi_key = \"k-shop\"\nshare = 1\nphases = { promo = 3 }\n\
        [[load.tenants]]\nname = \"batch\"\napi_key = \"k-batch\"\nshare = 1\nphases = { promo = 0 }\n\
        request = { max_tokens = { fixed = 7 } }\n";

    #[test]
    fn tenants_share_arrivals_by_phase_with_their_own_shape() {
        use rand::SeedableRng;
        let p = plan(TWO_TENANTS).unwrap();
        assert_eq!(p.tenants.len(), 2);
        assert_eq!(p.tenants[0].weights, [1.0, 3.0]);
        assert_eq!(p.tenants[1].weights, [1.0, 0.0]);
        assert_eq!(p.tenants[1].request.api_key, "k-batch");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut quiet = [0u32; 2];
        for _ in 0..10_000 {
            let t = p
                .draw_tenant(&mut rng, crate::schedule::Source::Phase(0))
                .unwrap();
            quiet[usize::from(t)] += 1;
        }
        assert!((4_700..5_300).contains(&quiet[0]), "{quiet:?}");
        // Batch has no share in the promotion.
        for _ in 0..1_000 {
            assert_eq!(
                p.draw_tenant(&mut rng, crate::schedule::Source::Phase(1)),
                Some(0)
            );
        }
        let d = p.shape(Some(1)).draw(&mut rng, None);
        assert_eq!(d.max_tokens, 7);
        // Without tenants nothing is drawn: the same stream as before.
        let one = plan("[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n").unwrap();
        assert_eq!(
            one.draw_tenant(&mut rng, crate::schedule::Source::Phase(0)),
            None
        );
    }

    #[test]
    fn bad_tenants_name_their_line_and_field() {
        let e = config_err(&TWO_TENANTS.replace("promo = 0", "sale = 0"));
        assert_eq!(e.field, "load.tenants[1].phases", "{e}");
        assert!(e.to_string().contains("no phase is named \"sale\""), "{e}");
        let e = config_err(&TWO_TENANTS.replace("\"batch\"", "\"shop\""));
        assert_eq!(e.field, "load.tenants[1].name", "{e}");
        let e = config_err(&TWO_TENANTS.replace("promo = 3", "promo = 0"));
        assert!(
            e.to_string()
                .contains("no tenant has a share above 0 in phase \"promo\""),
            "{e}"
        );
        let e = config_err(&TWO_TENANTS.replace("k-batch", "k\\nbatch"));
        assert_eq!(e.field, "load.tenants[1].api_key", "{e}");
        assert!(e.line > 0, "{e}");
    }

    const PHASE: &str = "[[load.phases]]\nduration = \"1s\"\nrate = 1\n";

    #[test]
    fn apis_paths_auth_and_headers_are_read_per_tenant() {
        let p = plan(&format!(
            "[load]\n{PHASE}[load.request]\napi = \"responses\"\nauth = \"api-key\"\n\
             path = \"/openai/deployments/m/responses?api-version=2025-04-01-preview\"\n\
             headers = {{ \"X-App\" = \"{{tenant}}\", \"x-trace\" = \"{{request_id}}.{{attempt}}\" }}\n\
             [[load.tenants]]\nname = \"shop\"\napi_key = \"k\"\n\
             request = {{ api = \"embeddings\", auth = \"bearer\", headers = {{ \"x-app\" = \"mine\" }} }}\n"
        ))
        .unwrap();
        assert_eq!(p.api(), Api::Responses);
        assert_eq!(p.request.auth, Auth::ApiKey);
        assert_eq!(
            p.request.path(),
            "/openai/deployments/m/responses?api-version=2025-04-01-preview"
        );
        assert_eq!(p.request.headers.len(), 2);
        let shop = &p.tenants[0].request;
        assert_eq!((shop.api, shop.auth), (Api::Embeddings, Auth::Bearer));
        assert_eq!(shop.path(), p.request.path(), "the path is the request's");
        let app = shop.headers.iter().find(|h| h.name == "x-app").unwrap();
        assert_eq!(app.parts, vec![head::Part::Text("mine".into())]);
        // Today's dialect alone still picks its chat API.
        let p = plan(&format!(
            "[load]\n{PHASE}[load.request]\ndialect = \"anthropic\"\n"
        ))
        .unwrap();
        assert_eq!((p.api(), p.dialect()), (Api::Messages, Dialect::Anthropic));
        assert_eq!(p.request.auth, Auth::XApiKey);
    }

    #[test]
    fn headers_that_cannot_be_sent_are_located() {
        let cases = [
            (
                "headers = { \"bad name\" = \"v\" }",
                "load.request.headers.bad name",
                "not a header name",
            ),
            (
                "headers = { \"x-a\" = \"v\\r\\nx-b: w\" }",
                "load.request.headers.x-a",
                "CR or LF",
            ),
            (
                "headers = { \"Host\" = \"h\" }",
                "load.request.headers.Host",
                "sets `host`",
            ),
            (
                "headers = { \"content-length\" = \"1\" }",
                "load.request.headers.content-length",
                "itself",
            ),
            (
                "headers = { \"x-request-id\" = \"1\" }",
                "load.request.headers.x-request-id",
                "itself",
            ),
            (
                "headers = { \"authorization\" = \"Bearer x\" }",
                "load.request.headers.authorization",
                "itself",
            ),
            (
                "auth = \"api-key\"\nheaders = { \"api-key\" = \"x\" }",
                "load.request.headers.api-key",
                "itself",
            ),
            (
                "dialect = \"anthropic\"\napi = \"chat\"",
                "load.request.api",
                "only the messages API",
            ),
            (
                "api = \"embeddings\"\nstream = 0.5",
                "load.request.stream",
                "not streamed",
            ),
            ("path = \"v1/chat\"", "load.request.path", "begin with"),
        ];
        for (line, field, says) in cases {
            let text = format!("[load]\n{PHASE}[load.request]\n{line}\n");
            let e = config_err(&text);
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(says), "{e}");
            assert!(e.to_string().starts_with("s.toml:"), "{e}");
            assert!(e.line >= 5, "{line}: {e}");
        }
        let e = config_err(&format!(
            "[load]\n{PHASE}[load.request]\nheaders = {{ \"x-app\" = \"{{tenant}}\" }}\n\
             [[load.tenants]]\nname = \"a\\u0001b\"\napi_key = \"k\"\n"
        ));
        assert_eq!(e.field, "load.tenants[0].name", "{e}");
        let e = config_err(&format!(
            "[load]\nsend_patience = true\n{PHASE}[load.request]\nheaders = {{ \"x-request-timeout-ms\" = \"1\" }}\n"
        ));
        assert!(e.message.contains("itself"), "{e}");
        let e = config_err(&format!(
            "[load]\n{PHASE}[[load.tenants]]\nname = \"a\"\napi_key = \"k\"\n\
             request = {{ auth = \"api-key\", headers = {{ \"api-key\" = \"x\" }} }}\n"
        ));
        assert_eq!(e.field, "load.tenants[0].request.headers.api-key", "{e}");
    }

    #[test]
    fn max_answer_bytes_is_a_size_of_at_least_a_byte() {
        let text = |v: &str| format!("[load]\nmax_answer_bytes = {v}\n{PHASE}");
        assert_eq!(
            plan(&format!("[load]\n{PHASE}")).unwrap().max_answer_bytes,
            4 << 20
        );
        assert_eq!(plan(&text("\"1 MiB\"")).unwrap().max_answer_bytes, 1 << 20);
        assert_eq!(plan(&text("65536")).unwrap().max_answer_bytes, 65536);
        for bad in ["0", "\"0 B\"", "\"lots\"", "-5", "\"12 parsecs\""] {
            let e = config_err(&text(bad));
            assert_eq!(
                (e.line, e.field.as_str()),
                (2, "load.max_answer_bytes"),
                "{bad}: {e}"
            );
            assert!(e.to_string().starts_with("s.toml:"), "{e}");
        }
    }

    #[test]
    fn clients_are_per_caller_unless_a_pool_is_given() {
        let text = |v: &str| format!("[load]\n{PHASE}[load.clients]\n{v}\n");
        let clients = |v: &str| plan(&text(v)).unwrap().clients();
        let per_caller = Clients {
            pool: None,
            connect_rate_per_s: None,
            time_in_system: None,
        };
        assert_eq!(
            plan(&format!("[load]\n{PHASE}")).unwrap().clients(),
            per_caller
        );
        assert_eq!(clients("connections = \"per caller\""), per_caller);
        assert_eq!(clients("pool = 50").pool, Some(50));
        assert_eq!(clients("connections = \"pool\"\npool = 8").pool, Some(8));
        let paced = clients("connect_rate = \"600/min\"");
        assert_eq!((paced.pool, paced.connect_rate_per_s), (None, Some(10.0)));
        assert_eq!(clients("connect_rate = 25").connect_rate_per_s, Some(25.0));
        // Scaled as counts and rates are: the pool ÷ quota, the rate
        // × time ÷ quota.
        let scaled = plan(&text("pool = 50\nconnect_rate = 100"))
            .unwrap()
            .scaled(Scale {
                time: 10.0,
                quota: 5.0,
            })
            .clients();
        assert_eq!(scaled.pool, Some(10));
        assert_eq!(scaled.connect_rate_per_s, Some(200.0));
    }

    #[test]
    fn bad_clients_are_refused_at_their_field() {
        let text = |v: &str| format!("[load]\n{PHASE}[load.clients]\n{v}\n");
        for (bad, field, says) in [
            ("pool = 0", "load.clients.pool", "at least 1"),
            ("pool = -3", "load.clients.pool", "at least 1"),
            ("connect_rate = -5", "load.clients.connect_rate", "above 0"),
            ("connect_rate = 0", "load.clients.connect_rate", "above 0"),
            (
                "connect_rate = \"-5/s\"",
                "load.clients.connect_rate",
                "N/s",
            ),
            (
                "connections = \"pool\"",
                "load.clients.connections",
                "pool = N",
            ),
            (
                "connections = \"per caller\"\npool = 4",
                "load.clients.pool",
                "leave out",
            ),
            (
                "connections = \"shared\"",
                "load.clients.connections",
                "per caller",
            ),
            ("poll = 4", "load.clients.poll", "unknown field"),
            (
                "time_in_system = \"0s\"",
                "load.clients.time_in_system",
                "above 0",
            ),
            (
                "pool = 4\ntime_in_system = \"20ms\"",
                "load.clients.time_in_system",
                "leave time_in_system out",
            ),
            (
                "time_in_system = \"soon\"",
                "load.clients.time_in_system",
                "soon",
            ),
        ] {
            let e = config_err(&text(bad));
            assert_eq!(e.field, field, "{bad}: {e}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
            assert!(e.to_string().starts_with("s.toml:"), "{e}");
            assert!(e.line >= 5, "{bad}: at its line: {e}");
        }
        let e = config_err(&format!(
            "[load]\nmax_connections = 9\n{PHASE}[load.clients]\npool = 4\n"
        ));
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "load.max_connections"),
            "{e}"
        );
    }

    #[test]
    fn a_rate_may_name_its_unit_as_init_writes_it() {
        let phase = |rate: &str, more: &str| {
            format!("[load]\n[[load.phases]]\nduration = \"1m\"\nrate = {rate}\n{more}")
        };
        let per_s = |text: &str| {
            let p = plan(text).unwrap();
            let ph = p.phases()[0];
            (ph.from_per_sec, ph.to_per_sec)
        };
        assert_eq!(per_s(&phase("\"120/min\"", "")), (2.0, 2.0));
        assert_eq!(
            per_s(&phase("\"3/s\"", "ramp_to = \"360/min\"\n")),
            (3.0, 6.0)
        );
        assert_eq!(per_s(&phase("\"7200/h\"", "per = \"hour\"\n")), (2.0, 2.0));
        // A bare number is per `per`, and per second without one.
        assert_eq!(per_s(&phase("120", "per = \"minute\"\n")), (2.0, 2.0));
        assert_eq!(per_s(&phase("2", "ramp_to = \"240/min\"\n")), (2.0, 4.0));
        // A unit that is none: its file, line and field.
        let e = config_err(&phase("\"2000/fortnight\"", ""));
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "load.phases[0].rate"),
            "{e}"
        );
        assert!(e.message.contains("`/fortnight` is not a unit"), "{e}");
        assert!(e.to_string().starts_with("s.toml:4:"), "{e}");
        let e = config_err(&phase("1", "ramp_to = \"9/day\"\n"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (5, "load.phases[0].ramp_to"),
            "{e}"
        );
        // A unit named twice, two ways: at `per`.
        let e = config_err(&phase("\"2000/min\"", "per = \"second\"\n"));
        assert_eq!((e.line, e.field.as_str()), (5, "load.phases[0].per"), "{e}");
        assert!(e.message.contains("leave `per` out"), "{e}");
        let e = config_err(&phase("\"-5/min\"", ""));
        assert_eq!(e.field, "load.phases[0].rate", "{e}");
    }

    #[test]
    fn unknown_field_names_file_line_and_path() {
        let e = config_err("[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\nrat = 2\n");
        assert_eq!(e.line, 5, "{e}");
        assert_eq!(e.field, "load.phases[0].rat", "{e}");
        assert!(e.to_string().starts_with("s.toml:5:"), "{e}");
    }

    #[test]
    fn id_prefixes_make_ids_the_marker_can_carry() {
        let text = |prefix: &str| {
            format!(
                "[load]\nid_prefix = \"{prefix}\"\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n"
            )
        };
        assert!(plan(&text(&"p".repeat(108))).is_ok());
        let e = config_err(&text(&"p".repeat(109)));
        assert_eq!((e.line, e.field.as_str()), (2, "load.id_prefix"), "{e}");
        assert!(e.message.contains("at most 108"), "{e}");
        let e = config_err(&text("a.b"));
        assert_eq!(e.field, "load.id_prefix", "{e}");
    }

    #[test]
    fn semantic_errors_are_located() {
        let e = config_err("[load]\n[[load.phases]]\nduration = \"1s\"\nrate = -3\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "load.phases[0].rate"),
            "{e}"
        );
        let e = config_err(
            "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n[load.request]\nprompt_tokens = { lognormal = { median = 10, p99 = 2 } }\n",
        );
        assert_eq!(e.line, 6, "{e}");
        assert_eq!(e.field, "load.request.prompt_tokens.lognormal.p99");
        let e = config_err("[load]\nseed = 1\n");
        assert!(e.message.contains("no arrivals"), "{e}");
        let e = config_err("[load]\n[[load.phases]]\nduration = \"soon\"\nrate = 1\n");
        assert_eq!(e.line, 3, "{e}");
        let e = config_err(
            "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n[load.retry]\npolicy = \"sometimes\"\n",
        );
        assert_eq!((e.line, e.field.as_str()), (6, "load.retry.policy"), "{e}");
    }

    #[test]
    fn missing_load_table_is_an_error() {
        let e = config_err("[provider]\nseed = 1\n");
        assert!(e.message.contains("load"), "{e}");
    }

    #[test]
    fn time_scaling_keeps_counts() {
        let p = plan(
            "[load]\npatience = { fixed = \"20s\" }\n[[load.phases]]\nduration = \"40m\"\nrate = 2000\nper = \"minute\"\n[load.retry]\npolicy = \"retry_after\"\n",
        )
        .unwrap();
        let before = p.expected_arrivals();
        let p = p.scaled(Scale {
            time: 10.0,
            quota: 1.0,
        });
        assert_eq!(p.schedule_length(), Duration::from_secs(240));
        assert!((p.expected_arrivals() - before).abs() < 1e-6);
        let mut rng = rand::thread_rng();
        assert_eq!(p.draw_patience(&mut rng), Duration::from_secs(2));
        assert_eq!(p.retry.cap, Duration::from_secs(6));
        assert_eq!(p.send_lag_bound(), Duration::from_millis(5));
    }

    /// FNV-1a over the values a person uses: counts, and patience in
    /// nanoseconds.
    fn fnv(values: &[u64]) -> u64 {
        values.iter().fold(0xcbf2_9ce4_8422_2325, |h, v| {
            v.to_le_bytes()
                .iter()
                .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
        })
    }

    /// The seeded draws of every shape the load reads, and of every
    /// distribution of the shipped scenarios: 1,000 people's request
    /// shape (prompt, padding, max_tokens, stream) and patience from one
    /// seeded stream, then the stream's next value (a shape that draws
    /// nothing must still draw nothing), at full scale and compressed ten
    /// times. The hashes were recorded from the load generator's own
    /// distributions before they became `wire::Dist`: a change of these
    /// numbers changes the requests of every seeded rehearsal.
    #[test]
    fn seeded_draws_keep_their_values() {
        use rand::{Rng, SeedableRng};
        // (prompt_tokens, padding_kb and max_tokens; patience; hash at
        // full scale; hash at time scale 10)
        let cases: [(&str, &str, u64, u64); 10] = [
            ("{ fixed = 64 }", r#"{ fixed = "30s" }"#, 0x36ef8f14d7b5829e, 0x5ebfc04095255176),
            ("{ fixed = 2.5 }", r#"{ fixed = "1500ms" }"#, 0x844b241c66d5b324, 0xf97a720e32b25704),
            ("{ uniform = { min = 10, max = 20 } }", r#"{ fixed = "620ms" }"#, 0xd69a82aa5899bb1, 0x63f678848811c485),
            ("{ uniform = { min = 1.5, max = 7.5 } }", r#"{ uniform = { min = "1s", max = "1500ms" } }"#, 0x55e79426b4c5e8bc, 0xb439bd1011eee7d6),
            ("{ uniform = { min = 3, max = 3 } }", r#"{ lognormal = { median = "20s", p99 = "60s" } }"#, 0x4b8ba35970dbeed6, 0xcfd1053eb0bd7b49),
            ("{ lognormal = { median = 1500, p99 = 6000 } }", r#"{ exponential = { mean = "10s" } }"#, 0xf1dee58fed4797a1, 0x83a6836264d301d2),
            ("{ lognormal = { median = 100, p99 = 1000 } }", r#"{ mix = [ { value = "5s", weight = 1 }, { value = "30s", weight = 3 } ] }"#, 0x22a157f9225b9111, 0x5fb428c5c7770f21),
            ("{ exponential = { mean = 200 } }", r#"{ fixed = "25s" }"#, 0x31efa80fd443f489, 0x28c1d096a5ff43a5),
            ("{ mix = [ { value = 0, weight = 0.8 }, { value = 40, weight = 0.2 } ] }", r#"{ fixed = "12s" }"#, 0x7e05866725bc7171, 0xed3c6cf675ecd281),
            ("{ mix = [ { value = 1, weight = 1 }, { value = 2, weight = 0 }, { value = 3, weight = 2 } ] }", r#"{ fixed = "15s" }"#, 0x909d3d65bdbd44f0, 0x577de7bbfbd5fbe0),
        ];
        let mut wrong = Vec::new();
        for (i, (count, patience, full, tenfold)) in cases.iter().enumerate() {
            let text = format!(
                "[load]\npatience = {patience}\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n\
                 [load.request]\nprompt_tokens = {count}\npadding_kb = {count}\nmax_tokens = {count}\nstream = 0.3\n"
            );
            let plan = plan(&text).unwrap();
            let scaled = plan.clone().scaled(Scale {
                time: 10.0,
                quota: 1.0,
            });
            for (time, p, want) in [(1, &plan, full), (10, &scaled, tenfold)] {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11 + i as u64);
                let mut values = Vec::new();
                for _ in 0..1000 {
                    let d = p.shape(None).draw(&mut rng, None);
                    values.extend([
                        u64::from(d.prompt_tokens),
                        u64::from(d.padding_kb),
                        u64::from(d.max_tokens),
                        u64::from(d.stream),
                        p.draw_patience(&mut rng).as_nanos() as u64,
                    ]);
                }
                values.push(rng.gen());
                let got = fnv(&values);
                if got != *want {
                    wrong.push(format!(
                        "{count}, {patience} at time scale {time}: {got:#x}"
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "draws changed:\n{}", wrong.join("\n"));
    }

    #[test]
    fn the_template_reads_as_the_defaults() {
        let written: LoadConfig = toml::from_str(LoadConfig::TEMPLATE).unwrap();
        let left_out: LoadConfig = toml::from_str("").unwrap();
        assert_eq!(written, left_out);
    }

    #[test]
    fn retry_and_patience_header() {
        let p = plan(
            "[load]\nsend_patience = true\npatience = { lognormal = { median = \"5s\", p99 = \"20s\" } }\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n[load.retry]\npolicy = \"retry_after\"\nmax_attempts = 4\nbudget = 0.1\n",
        )
        .unwrap();
        assert_eq!(p.retry.kind, RetryKind::RetryAfter);
        assert_eq!(p.retry.max_attempts, 4);
        assert_eq!(p.retry.budget, Some(0.1));
        assert_eq!(p.patience_header.unwrap().as_str(), "x-request-timeout-ms");
    }
}
