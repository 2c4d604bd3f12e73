//! Scenario files: the TOML a team writes for a rehearsal, validated into a
//! [`Scenario`] before any async work starts.
//!
//! Its `[scenario]` and `[gateway]` tables, every field at its default (one
//! with no default commented out, with an example), and the places of the
//! other parts' configs, each with its own template:
//! `fake_provider::ProviderConfig::TEMPLATE` below `[provider]`,
//! `reference_gateway::GatewayConfig::TEMPLATE` below `[gateway.reference]`
//! (but `upstream` and `listen`, which the harness sets),
//! `loadgen::LoadConfig::TEMPLATE` below `[load]` and
//! `assertions::Thresholds::TEMPLATE` below `[checklist]`. `rehearse init`
//! writes them all. `[[variants]]` are `rehearse compare`'s
//! (`crate::scenario::variants`), ignored here.
//!
//!
//! The rooms beside this one:
//! - `checklist`: the `[checklist]` values held to their ranges, by each field's name;
//! - `variants`: a scenario's `[[variants]]` (and `--each`), each validated whole;
//! - `template`: a config's template (its fields, defaults and what they mean), which `init` writes;
//! - `init`: scenarios to start from: the built-in one, and `rehearse init`'s;
//! - `sets`: `--set dotted.key=value`, edits of the document before it is read.
#![doc = concat!("```toml\n", include_str!("scenario.toml"), "```")]
//!
//! `--set dotted.key=value` edits the document before it is read, so an
//! override is validated, and located, like the rest of the file.

pub(crate) mod checklist;
pub(crate) mod init;
pub(crate) mod sets;
pub(crate) mod template;
pub(crate) mod variants;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::host::Input;
use fake_provider::ProviderConfig;
use reference_gateway::GatewayConfig;
use serde::{Deserialize, Serialize};
use toml_located::{ConfigError, Source};
use wire::Scale;

pub use sets::apply_sets;

/// The `[scenario]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// Short name, used in reports.
    pub name: String,
    /// What is being rehearsed.
    #[serde(default)]
    pub description: String,
    /// Seed given to the provider and the load (unless they set their own).
    pub seed: Option<u64>,
    /// Divides every quota and every rate (provider and load), keeping
    /// durations: a rehearsal against a scaled-down quota.
    #[serde(default = "one")]
    pub quota_scale: f64,
    /// Divides every duration and multiplies every rate: a 40-minute event
    /// rehearsed in 4 minutes.
    #[serde(default = "one")]
    pub time_scale: f64,
    /// Bytes a gateway holds for each waiting request, for the plan's memory
    /// estimate; by default the load's mean prompt size.
    pub prompt_bytes: Option<bytesize::ByteSize>,
    /// The service level the event is held to, for the plan's error budget.
    pub slo: Option<Slo>,
}

fn one() -> f64 {
    1.0
}

/// `[scenario] slo = { latency = "3s", objective = 0.99, window = "28d" }`:
/// the service level objective the event is held to; the plan says how much
/// of its error budget the event burns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// A request answered later than this misses the objective.
    #[serde(with = "humantime_serde")]
    pub latency: Duration,
    /// The share of requests that must not miss (0.99).
    pub objective: f64,
    /// The window the objective is counted over ("28d").
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Requests per second over the window, on average (default: the
    /// first load phase's rate).
    pub window_rate: Option<f64>,
}

impl Slo {
    /// The field that is wrong and why.
    fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if self.latency.is_zero() {
            return Err(("latency", "must be above 0"));
        }
        if !(self.objective > 0.0 && self.objective < 1.0) {
            return Err(("objective", "must lie between 0 and 1 (0.99 for 99%)"));
        }
        if self.window.is_zero() {
            return Err(("window", "must be above 0"));
        }
        if self
            .window_rate
            .is_some_and(|r| !(r.is_finite() && r > 0.0))
        {
            return Err((
                "window_rate",
                "must be a positive number of requests per second",
            ));
        }
        Ok(())
    }
}

/// How the gateway under test is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayKind {
    /// The built-in reference gateway, spawned as a child process with this
    /// config (mode and knobs; the harness sets upstream and listen), at
    /// full scale.
    Reference(Box<GatewayConfig>),
    /// Any program; `{provider_url}` (the first provider's base URL),
    /// `{provider_url:NAME}` (provider NAME's) and `{listen}` are replaced,
    /// and the URLs are in its environment too (see
    /// [`ProviderUrls::env`](crate::ProviderUrls::env)).
    Command(Vec<String>),
    /// A gateway already running at this base URL.
    Url(String),
}

/// The `[gateway]` table as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GatewayRaw {
    reference: Option<GatewayConfig>,
    command: Option<Vec<String>>,
    url: Option<String>,
    memory_ceiling: Option<bytesize::ByteSize>,
    metrics_url: Option<String>,
    rss_metric: Option<String>,
    queue_depth_metric: Option<String>,
    in_flight_metric: Option<String>,
    stale_drops_metric: Option<String>,
    #[serde(default = "default_metrics_period", with = "humantime_serde")]
    metrics_period: Duration,
    ready_path: Option<String>,
    #[serde(default, with = "humantime_serde")]
    ready_timeout: Option<Duration>,
    memory_limit: Option<bytesize::ByteSize>,
    #[serde(default)]
    restart: bool,
    #[serde(default = "default_restart_delay", with = "humantime_serde")]
    restart_delay: Duration,
    #[serde(default)]
    scale_memory: bool,
    #[serde(default = "default_memory_floor")]
    memory_floor: bytesize::ByteSize,
}

fn default_memory_floor() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(32)
}

fn default_restart_delay() -> Duration {
    Duration::from_secs(2)
}

fn default_metrics_period() -> Duration {
    Duration::from_secs(1)
}

fn default_ready_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The gateway under test, as the scenario describes it.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    /// How it is reached.
    pub kind: GatewayKind,
    /// Peak resident memory allowed.
    pub memory_ceiling: Option<u64>,
    /// Where to scrape RSS for a gateway the harness did not start.
    pub metrics_url: Option<String>,
    /// The Prometheus metric holding RSS in bytes.
    pub rss_metric: Option<String>,
    /// The gateway's own gauges, read from `metrics_url` every
    /// `metrics_period` (a run against a provider the harness does not see
    /// judges the inside of the gateway by them).
    pub gauges: GatewayGauges,
    /// Path answered (any status below 500) once the gateway is ready; by
    /// default readiness is a TCP connect.
    pub ready_path: Option<String>,
    /// How long to wait for readiness (10 s unless written).
    pub ready_timeout: Duration,
    /// `ready_timeout` is written: a gateway already running (a target)
    /// that refuses connections is waited for that long; not written, the
    /// refusal is said at once (nothing listens there).
    pub ready_timeout_written: bool,
    /// Run a spawned gateway under this memory limit.
    pub memory_limit: Option<u64>,
    /// Restart a spawned gateway when it dies.
    pub restart: bool,
    /// How long after its death it is restarted (÷ the time scale).
    pub restart_delay: Duration,
    /// `memory_limit` and `memory_ceiling` stand for a number of requests
    /// held above the gateway's memory at rest (`memory_floor`): that part
    /// is ÷ the quota scale, like a count, so that a rehearsal on a smaller
    /// account holds as many requests per budget as the event. Off (the
    /// default), they are the process's real bytes, unscaled.
    pub scale_memory: bool,
    /// The gateway's memory at rest, which no scale shrinks (32 MiB unless
    /// written; read it from the first samples of a run's `rss.jsonl`).
    pub memory_floor: u64,
    /// What the harness filled in for the reference gateway when the
    /// scenario loaded (a deadline rate taken from the provider's quota),
    /// for the run's notes.
    pub notes: Vec<String>,
}

/// A whole scenario file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioRaw {
    scenario: Meta,
    #[serde(default)]
    provider: Option<ProviderConfig>,
    /// `[[providers]]`: several, each named (see [`Scenario::providers`]).
    #[serde(default)]
    providers: Option<Vec<ProviderConfig>>,
    gateway: GatewayRaw,
    load: loadgen::LoadConfig,
    #[serde(default)]
    checklist: assertions::Thresholds,
    /// `[[variants]]`: `rehearse compare`'s (see `crate::scenario::variants`), read
    /// there; a run of the file as written ignores them.
    #[serde(default, rename = "variants")]
    _variants: Option<serde::de::IgnoredAny>,
}

/// A validated scenario, at full scale (see [`Scenario::rehearsal`] for the
/// scaled figures): read once, every part validated; the plan, the run and
/// the judge read these parts, never the text again.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Where it was read from.
    pub path: PathBuf,
    /// The document after `--set` edits, kept only to be written out as the
    /// run directory's `scenario.toml` (the scenario as run): `rehearse
    /// report DIR` judges from that file, and load shards play its `[load]`
    /// in their own processes (`rehearse load DIR/scenario.toml`). Nothing
    /// here parses it again for values: those are the fields below.
    pub text: String,
    /// `[scenario]`.
    pub meta: Meta,
    /// Every fake provider, at full scale, in the order written: the one
    /// `[provider]` (its `name` `None`: it is `default`), or each of
    /// `[[providers]]` (named, the names unique). Never empty; the first
    /// is [`Scenario::provider`], the one a gateway's `{provider_url}` is.
    pub providers: Vec<ProviderConfig>,
    /// `[gateway]`.
    pub gateway: GatewaySpec,
    /// `[load]` validated, at full scale (its phases: [`LoadPlan::phases`](loadgen::LoadPlan::phases)).
    pub load_plan: loadgen::LoadPlan,
    /// The distributions of `[load]` the plan takes means of, validated with
    /// `load_plan`.
    pub load_shape: LoadShape,
    /// `[checklist]`, at full scale.
    pub checklist: assertions::Thresholds,
}

/// What the plan takes the means of in `[load]`: the request shape's and
/// the callers' patience's distributions as written, kept beside the load
/// plan (which holds them as samplers) once they have passed its
/// validation.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadShape {
    /// `[load.request] prompt_tokens`.
    pub prompt_tokens: wire::Dist<f64>,
    /// `[load.request] padding_kb`.
    pub padding_kb: wire::Dist<f64>,
    /// `[load.request] max_tokens`.
    pub max_tokens: wire::Dist<f64>,
    /// `[load] patience`.
    pub patience: wire::Dist<wire::Dur>,
}

impl LoadShape {
    fn of(load: loadgen::LoadConfig) -> LoadShape {
        LoadShape {
            prompt_tokens: load.request.prompt_tokens,
            padding_kb: load.request.padding_kb,
            max_tokens: load.request.max_tokens,
            patience: load.patience,
        }
    }
}

/// Why a scenario could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A `--set` flag is malformed.
    #[error("{set} {0}: expected dotted.key=value", set = Input::Set)]
    BadSet(String),
    /// The content is wrong; the error names file, line and field.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A scale read by [`load_in_file`] is not a number above 0.
    #[error("{}: time_scale and quota_scale must be numbers above 0", path.display())]
    BadScale {
        /// The file.
        path: PathBuf,
    },
}

/// What `rehearse load` plays of the scenario at `path`: its `[load]`
/// validated (a replay log read relative to the file) and scaled by its
/// `[scenario]` table's `time_scale` and `quota_scale` (1 when left out;
/// `time_scale` replaces the time part), the rest of the file being the
/// provider's, the gateway's and the checklist's business: how `rehearse
/// load` plays a scenario's load as `rehearse run` does. A whole scenario
/// is read a second time, as one, for its plan's expected time at the
/// target, which bounds the callers' connections as in `rehearse run`
/// (`[load.clients] time_in_system`).
pub fn load_in_file(
    path: &Path,
    time_scale: Option<f64>,
) -> Result<loadgen::LoadPlan, ScenarioError> {
    #[derive(Deserialize, Default)]
    struct Scales {
        time_scale: Option<f64>,
        quota_scale: Option<f64>,
    }
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        scenario: Scales,
        load: loadgen::LoadConfig,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let origin = path.display().to_string();
    let src = Source::new(&text, &origin);
    let file: File = src.parse()?;
    let scale = Scale {
        time: time_scale.or(file.scenario.time_scale).unwrap_or(1.0),
        quota: file.scenario.quota_scale.unwrap_or(1.0),
    };
    let valid = |x: f64| x.is_finite() && x > 0.0;
    if !(valid(scale.time) && valid(scale.quota)) {
        return Err(ScenarioError::BadScale {
            path: path.to_path_buf(),
        });
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let load = loadgen::LoadPlan::from_config(&file.load, &src, base)?.scaled(scale);
    // A whole scenario (a shard of `stage` reads the run's): the callers
    // bounded by its plan's expected time at the target, as in `run`.
    let expected = Scenario::load(path, &[]).ok().and_then(|mut s| {
        s.at_time_scale(Some(scale.time)).ok()?;
        s.rehearsal().plan.clients.time_in_system()
    });
    Ok(load.expecting(expected))
}

impl Scenario {
    /// Reads `path`, applies `sets` (`dotted.key=value`), and validates.
    pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::with_sets(&text, path, sets)
    }

    /// Validates `text`, the file at `path` as read, with `sets` applied.
    pub(crate) fn with_sets(
        text: &str,
        path: &Path,
        sets: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let text = apply_sets(text, sets)?;
        let origin = if sets.is_empty() {
            path.display().to_string()
        } else {
            format!("{} (with {})", path.display(), Input::Set)
        };
        Scenario::from_str(&text, &origin, path)
    }

    /// Validates a scenario text read from `origin` (`path` locates replay
    /// logs and names the run).
    pub fn from_str(text: &str, origin: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let src = Source::new(text, origin);
        let raw: ScenarioRaw = src.parse()?;
        let meta = raw.scenario;
        for (field, v) in [
            ("quota_scale", meta.quota_scale),
            ("time_scale", meta.time_scale),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(src
                    .error(&format!("scenario.{field}"), "must be a positive number")
                    .into());
            }
        }
        if meta.name.trim().is_empty() {
            return Err(src.error("scenario.name", "must not be empty").into());
        }
        if let Some(Err((field, why))) = meta.slo.as_ref().map(Slo::check) {
            return Err(src.error(&format!("scenario.slo.{field}"), why).into());
        }
        crate::scenario::checklist::out_of_range(&raw.checklist)
            .map_err(|(field, why)| src.error(&format!("checklist.{field}"), why))?;
        let providers = providers_of(raw.provider, raw.providers, &src, text, meta.seed)?;
        let names: Vec<&str> = providers
            .iter()
            .map(ProviderConfig::name_or_default)
            .collect();
        let gateway = gateway_spec(
            raw.gateway,
            &src,
            text,
            providers[0].quota.tokens_per_minute,
            &names,
        )?;
        // The loadgen validates its own section, with its own rules, from
        // the table read here (a replay log is read now, relative to the
        // scenario's folder: one that cannot be read is an error at
        // `load.replay.file`).
        let base = path.parent().unwrap_or(Path::new("."));
        let load_plan = loadgen::LoadPlan::from_config(&raw.load, &src, base)?;
        Ok(Scenario {
            path: path.to_path_buf(),
            text: text.to_string(),
            meta,
            providers,
            gateway,
            load_plan,
            load_shape: LoadShape::of(raw.load),
            checklist: raw.checklist,
        })
    }
}

/// `[provider]` or `[[providers]]` validated
/// ([`fake_provider::config::providers_in`]: not both, each of
/// `[[providers]]` named, the names unique, every field checked where it
/// is written), the scenario's `seed` given to each that sets none of its
/// own (plus its place in the list, from 0, so two alike providers do not
/// draw alike).
fn providers_of(
    one: Option<ProviderConfig>,
    several: Option<Vec<ProviderConfig>>,
    src: &Source<'_>,
    text: &str,
    seed: Option<u64>,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let table = if several.is_some() {
        "providers"
    } else {
        "provider"
    };
    let mut providers = fake_provider::config::providers_in(one, several, src)?;
    let listed = table == "providers";
    for (i, p) in providers.iter_mut().enumerate() {
        let at = if listed {
            format!("{table}[{i}]")
        } else {
            table.to_string()
        };
        if let (Some(seed), false) = (seed, text_has(text, &at, "seed")) {
            p.seed = seed.wrapping_add(i as u64);
        }
    }
    Ok(providers)
}

impl Scenario {
    /// The first provider: `[provider]`, or the first of `[[providers]]`
    /// (a gateway's `{provider_url}`; the one the plan takes today).
    pub fn provider(&self) -> &ProviderConfig {
        &self.providers[0]
    }
}

/// The `[gateway]` table validated: one kind (`command` or `url` when
/// given, a `[gateway.reference]` beside it set aside with a note, as
/// `--target` sets it aside; never both), the reference gateway's policy
/// checked (and a deadline rate left out taken from
/// `quota_tpm`, the provider's tokens per minute), the fields that go
/// together together.
fn gateway_spec(
    g: GatewayRaw,
    src: &Source<'_>,
    text: &str,
    quota_tpm: Option<u64>,
    providers: &[&str],
) -> Result<GatewaySpec, ConfigError> {
    let mut notes = Vec::new();
    let set_aside = |key: &str| {
        format!(
            "[gateway.reference] is set aside: the gateway is [gateway] {key} (comment out `{key}` to rehearse the reference gateway)"
        )
    };
    if g.command.is_some() && g.url.is_some() {
        return Err(src.error(
            "gateway.url",
            "give `command` or `url`, not both: `command` is a program the harness starts, \
             `url` a gateway already running",
        ));
    }
    if g.reference.is_some() && (g.command.is_some() || g.url.is_some()) {
        notes.push(set_aside(if g.url.is_some() { "url" } else { "command" }));
    }
    let elsewhere = g.command.is_some() || g.url.is_some();
    let reference = g.reference.filter(|_| !elsewhere);
    let kind = match (reference, g.command, g.url) {
        (Some(mut config), None, None) => {
            notes.extend(deadline_rate(&mut config, src, text, quota_tpm)?);
            check_reference(&config, src, text, providers)?;
            GatewayKind::Reference(Box::new(config))
        }
        (None, Some(c), None) => {
            if c.is_empty() {
                return Err(src.error("gateway.command", "must name a program"));
            }
            if !c.iter().any(|a| a.contains("{listen}")) {
                return Err(src.error(
                    "gateway.command",
                    "must pass `{listen}` to the program, so the harness knows where it listens",
                ));
            }
            for (i, arg) in c.iter().enumerate() {
                if let Some(name) =
                    crate::provider::urls::placeholder_names(arg).find(|n| !providers.contains(n))
                {
                    return Err(src.error(
                        &format!("gateway.command[{i}]"),
                        format!(
                            "`{{provider_url:{name}}}`: no provider is named {name:?} (the scenario's: {})",
                            providers.join(", ")
                        ),
                    ));
                }
            }
            GatewayKind::Command(c)
        }
        (None, None, Some(u)) => {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(src.error("gateway.url", "must be an http:// or https:// URL"));
            }
            GatewayKind::Url(u)
        }
        _ => return Err(src.error("gateway", "give one of `reference`, `command` or `url`")),
    };
    let named = [
        ("queue_depth_metric", &g.queue_depth_metric),
        ("in_flight_metric", &g.in_flight_metric),
        ("stale_drops_metric", &g.stale_drops_metric),
    ];
    if let (None, Some((field, _))) = (&g.metrics_url, named.iter().find(|(_, m)| m.is_some())) {
        return Err(src.error(
            &format!("gateway.{field}"),
            "a metric is read from `metrics_url`: give that too",
        ));
    }
    if g.metrics_period.is_zero() {
        return Err(src.error("gateway.metrics_period", "must be above 0"));
    }
    // `metrics_url` alone is read too: its text saved as the load ends,
    // a spawned gateway's memory still read from its processes.
    if g.rss_metric.is_some() && g.metrics_url.is_none() {
        return Err(src.error(
            "gateway.rss_metric",
            "the metric is scraped from `metrics_url`: give that too",
        ));
    }
    let gateway = GatewaySpec {
        kind,
        memory_ceiling: g.memory_ceiling.map(|b| b.as_u64()),
        metrics_url: g.metrics_url,
        rss_metric: g.rss_metric,
        gauges: GatewayGauges {
            queue_depth: g.queue_depth_metric,
            in_flight: g.in_flight_metric,
            stale_drops: g.stale_drops_metric,
            period: g.metrics_period,
        },
        ready_path: g.ready_path,
        ready_timeout: g.ready_timeout.unwrap_or_else(default_ready_timeout),
        ready_timeout_written: g.ready_timeout.is_some(),
        memory_limit: g.memory_limit.map(|b| b.as_u64()),
        restart: g.restart,
        restart_delay: g.restart_delay,
        scale_memory: g.scale_memory,
        memory_floor: g.memory_floor.as_u64(),
        notes,
    };
    if matches!(gateway.kind, GatewayKind::Url(_))
        && (gateway.memory_limit.is_some() || gateway.restart)
    {
        return Err(src.error(
            "gateway",
            "`memory_limit` and `restart` apply to a gateway the harness spawns, not to a `url`",
        ));
    }
    Ok(gateway)
}

/// The names of the gateway's gauges in its `metrics_url`, and how often
/// they are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayGauges {
    /// Requests waiting inside the gateway.
    pub queue_depth: Option<String>,
    /// Calls in flight to the provider.
    pub in_flight: Option<String>,
    /// Requests dropped stale, a counter.
    pub stale_drops: Option<String>,
    /// How often they are read (the verdicts' resolution).
    pub period: Duration,
}

impl GatewayGauges {
    /// Returns true if and only if one of them is named.
    pub fn any(&self) -> bool {
        self.queue_depth.is_some() || self.in_flight.is_some() || self.stale_drops.is_some()
    }
}

impl GatewaySpec {
    /// `bytes` (a memory limit or ceiling) at rehearsal scale: with
    /// `scale_memory`, the floor plus what is above it ÷ the quota scale;
    /// else as written.
    ///
    /// ```
    /// # let text = "[scenario]\nname = \"m\"\n[provider.latency]\nttft = { fixed = \"1s\" }\n[gateway]\nscale_memory = true\n[gateway.reference]\nmode = \"naive\"\n[load]\npatience = { fixed = \"1s\" }\n[[load.phases]]\nname = \"p\"\nduration = \"1s\"\nrate = 1\n[load.request]\nprompt_tokens = { fixed = 1 }\nmax_tokens = { fixed = 1 }\n";
    /// # let s = harness::Scenario::from_str(text, "m.toml", std::path::Path::new("m.toml")).unwrap();
    /// let mib = 1024 * 1024;
    /// let half = harness::Scale { time: 1.0, quota: 2.0 };
    /// // 400 MiB with a 32 MiB floor: 32 + 368 ÷ 2.
    /// assert_eq!(s.gateway.memory_at(400 * mib, half), 216 * mib);
    /// ```
    pub fn memory_at(&self, bytes: u64, scale: Scale) -> u64 {
        if !self.scale_memory || bytes <= self.memory_floor {
            return bytes;
        }
        let above = (bytes - self.memory_floor) as f64 / scale.quota;
        self.memory_floor + above.round() as u64
    }
}

/// What judging reads of a run directory's `scenario.toml` (`rehearse
/// report DIR`, and the end of `rehearse run`, which judges from the
/// directory alone): its checklist and its description, with its
/// `[gateway]` checked as a run checks it, read in one parse. The rest is
/// not read: the run's figures are in `run.json`, and its `[load]` may
/// name a replay log that lives beside the original file, not in the run
/// directory.
#[derive(Debug, Clone)]
pub(crate) struct SavedScenario {
    /// `[checklist]`, at full scale.
    pub(crate) checklist: assertions::Thresholds,
    /// `[scenario] description`, when it is a string.
    pub(crate) description: Option<String>,
}

impl SavedScenario {
    /// Reads the scenario at `path` with `sets` (`dotted.key=value`, a
    /// re-judging's edits) applied.
    pub(crate) fn read(path: &Path, sets: &[String]) -> Result<SavedScenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let text = apply_sets(&text, sets)?;
        let origin = if sets.is_empty() {
            path.display().to_string()
        } else {
            format!("{} (with {})", path.display(), Input::Set)
        };
        SavedScenario::of_text(&text, &origin)
    }

    /// The saved scenario in `text`, read from `origin`.
    fn of_text(text: &str, origin: &str) -> Result<SavedScenario, ScenarioError> {
        #[derive(Deserialize)]
        struct Saved {
            gateway: GatewayRaw,
            #[serde(default)]
            checklist: assertions::Thresholds,
            #[serde(flatten)]
            rest: toml::Table,
        }
        let src = Source::new(text, origin);
        let saved: Saved = src.parse()?;
        let several = saved.rest.get("providers").and_then(toml::Value::as_array);
        let first = match several {
            Some(list) => list.first(),
            None => saved.rest.get("provider"),
        };
        let quota_tpm = first
            .and_then(|p| p.get("quota"))
            .and_then(|q| q.get("tokens_per_minute"))
            .and_then(toml::Value::as_integer)
            .and_then(|n| u64::try_from(n).ok());
        let names: Vec<&str> = match several {
            Some(list) => list
                .iter()
                .filter_map(|p| p.get("name").and_then(toml::Value::as_str))
                .collect(),
            None => vec![wire::DEFAULT_PROVIDER],
        };
        crate::scenario::checklist::out_of_range(&saved.checklist)
            .map_err(|(field, why)| src.error(&format!("checklist.{field}"), why))?;
        gateway_spec(saved.gateway, &src, text, quota_tpm, &names)?;
        let description = saved
            .rest
            .get("scenario")
            .and_then(|s| s.get("description"))
            .and_then(toml::Value::as_str)
            .map(str::to_string);
        Ok(SavedScenario {
            checklist: saved.checklist,
            description,
        })
    }
}

/// True if and only if `table.key` is written in the text. The typed
/// values cannot say it (a default fills a key left out), so the one
/// validation asks the text's spans, as it does to place an error.
fn text_has(text: &str, table: &str, key: &str) -> bool {
    toml_located::locate(text, &format!("{table}.{key}"))
        .is_some_and(|span| text[span].trim_start().starts_with(key))
}

/// Where a deadline gateway's token rate comes from in a scenario (see
/// [`GatewayConfig::pace_to_quota`]): written, else the provider's quota
/// (`quota_tpm`), returned as a note; with neither, the scenario is refused
/// at the field, placed on its `deadline` table's line or else its `mode`
/// line.
fn deadline_rate(
    config: &mut GatewayConfig,
    src: &Source<'_>,
    text: &str,
    quota_tpm: Option<u64>,
) -> Result<Option<String>, ConfigError> {
    let written = text_has(text, "gateway.reference.deadline", "tokens_per_minute");
    config.pace_to_quota(written, quota_tpm).map_err(|message| {
        let at = if text_has(text, "gateway.reference", "deadline") {
            "gateway.reference.deadline"
        } else {
            "gateway.reference.mode"
        };
        let mut err = src.error(at, message);
        err.field = "gateway.reference.deadline.tokens_per_minute".to_string();
        err
    })
}

/// The reference gateway's rules inside a scenario
/// ([`GatewayConfig::check_in_scenario`]), its fault located at
/// `gateway.reference.FIELD`.
fn check_reference(
    config: &GatewayConfig,
    src: &Source<'_>,
    text: &str,
    providers: &[&str],
) -> Result<(), ConfigError> {
    let written = |key: &str| text_has(text, "gateway.reference", key);
    config
        .check_in_scenario(&written, providers)
        .map_err(|(field, message)| src.error(&format!("gateway.reference.{field}"), message))
}

/// A small valid scenario, for the crate's tests.
#[cfg(test)]
pub(crate) const TEST_SCENARIO: &str = r#"
[scenario]
name = "t"

[gateway]
memory_ceiling = "64MiB"
[gateway.reference]
mode = "bounded"
bounded = { concurrency = 8, queue = 11, wait_budget = "2s" }

[load]
patience = { fixed = "10s" }
[[load.phases]]
duration = "10s"
rate = 5
"#;

#[cfg(test)]
mod tests {
    use super::*;

    use super::TEST_SCENARIO as MINIMAL;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_str(text, "s.toml", Path::new("s.toml"))
    }

    const TWO: &str = "[[providers]]\nname = \"primary\"\n[providers.quota]\ntokens_per_minute = 90000\n\n[[providers]]\nname = \"backup-eu\"\nseed = 7\n[providers.latency]\nmultiplier = 2.0\n";

    fn err_of(text: &str) -> ConfigError {
        match parse(text) {
            Err(ScenarioError::Config(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    fn deadline(reference: &str, provider: &str) -> String {
        MINIMAL
            .replace(
                "mode = \"bounded\"\nbounded = { concurrency = 8, queue = 11, wait_budget = \"2s\" }",
                reference,
            )
            .replace("[gateway]", &format!("{provider}[gateway]"))
    }

    fn reference(s: &Scenario) -> &GatewayConfig {
        match &s.gateway.kind {
            GatewayKind::Reference(c) => c,
            other => panic!("{other:?}"),
        }
    }

    const QUOTA: &str = "[provider.quota]\ntokens_per_minute = 120000\n";

    #[test]
    fn several_providers_are_read_in_order_each_named_and_seeded() {
        let text = format!("{MINIMAL}\n{TWO}").replace("name = \"t\"", "name = \"t\"\nseed = 40");
        let s = parse(&text).unwrap();
        let names: Vec<_> = s
            .providers
            .iter()
            .map(ProviderConfig::name_or_default)
            .collect();
        assert_eq!(names, ["primary", "backup-eu"]);
        assert_eq!(s.provider().quota.tokens_per_minute, Some(90_000));
        assert_eq!(s.providers[1].latency.multiplier, 2.0);
        // The scenario's seed for the first, its own for the second.
        assert_eq!((s.providers[0].seed, s.providers[1].seed), (40, 7));
        // One `[provider]`: named default, as before.
        let one = parse(MINIMAL).unwrap();
        assert_eq!(one.providers.len(), 1);
        assert_eq!(one.provider().name_or_default(), "default");
    }

    #[test]
    fn reference_upstreams_name_the_scenarios_providers_else_a_located_error() {
        let bounded = "bounded = { concurrency = 8, queue = 11, wait_budget = \"2s\" }\n";
        let with = |upstreams: &str| {
            format!("{MINIMAL}\n{TWO}").replace(
                bounded,
                &format!("{bounded}routing = \"failover\"\nupstreams = [\n{upstreams}]\n"),
            )
        };
        let good = with(
            "  { name = \"a\", provider = \"primary\" },\n  { name = \"b\", provider = \"backup-eu\", priority = 1 },\n",
        );
        let s = parse(&good).unwrap();
        let GatewayKind::Reference(c) = &s.gateway.kind else {
            panic!("reference")
        };
        assert_eq!(c.upstreams[1].provider.as_deref(), Some("backup-eu"));
        let bad = with(
            "  { name = \"a\", provider = \"primary\" },\n  { name = \"b\", provider = \"backup\" },\n",
        );
        let e = err_of(&bad);
        assert_eq!(e.field, "gateway.reference.upstreams[1].provider", "{e}");
        assert_eq!(e.origin, "s.toml");
        let line = bad.lines().position(|l| l.contains("\"backup\"")).unwrap() + 1;
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains("primary, backup-eu"), "{e}");
        // A URL is the harness's to fill in.
        let e = err_of(&with("  { name = \"a\", url = \"http://127.0.0.1:9\" },\n"));
        assert_eq!(e.field, "gateway.reference.upstreams[0].url", "{e}");
    }

    #[test]
    fn provider_and_providers_together_or_names_twice_are_located_errors() {
        let both = format!("{MINIMAL}\n[provider]\nseed = 2\n{TWO}");
        let e = err_of(&both);
        assert!(e.message.contains("not both"), "{e}");
        assert_eq!(
            e.line,
            both.lines()
                .position(|l| l.starts_with("name = \"primary\""))
                .unwrap()
                + 1,
            "{e}"
        );
        let twice = format!("{MINIMAL}\n{}", TWO.replace("backup-eu", "primary"));
        let e = err_of(&twice);
        assert_eq!(e.field, "providers[1].name", "{e}");
        assert_eq!(
            e.line,
            twice
                .lines()
                .collect::<Vec<_>>()
                .iter()
                .rposition(|l| l.starts_with("name = \"primary\""))
                .unwrap()
                + 1,
            "{e}"
        );
        let e = err_of(&format!(
            "{MINIMAL}\n{}",
            TWO.replace("name = \"backup-eu\"\n", "")
        ));
        assert!(e.message.contains("needs a `name`"), "{e}");
        let e = err_of(&format!(
            "{MINIMAL}\n{}",
            TWO.replace("backup-eu", "Backup EU")
        ));
        assert_eq!(e.field, "providers[1].name", "{e}");
        let e = err_of(&format!("{MINIMAL}\n[provider]\nname = \"x\"\n"));
        assert_eq!(e.field, "provider.name", "{e}");
        // A field of the second provider is checked where it is written.
        let bad = format!("{MINIMAL}\n{TWO}[providers.concurrency]\nceiling = 0\n");
        let e = err_of(&bad);
        assert_eq!(e.field, "providers[1].concurrency.ceiling", "{e}");
        assert_eq!(e.line, bad.lines().count(), "{e}");
    }

    #[test]
    fn a_command_names_only_providers_the_scenario_has() {
        let cmd = |arg: &str| {
            format!("{MINIMAL}\n{TWO}").replace(
                "[gateway.reference]\nmode = \"bounded\"\nbounded = { concurrency = 8, queue = 11, wait_budget = \"2s\" }\n",
                &format!("command = [\"gw\", \"{{listen}}\", \"{arg}\"]\n"),
            )
        };
        let s = parse(&cmd("--up={provider_url:backup-eu},{provider_url}")).unwrap();
        assert!(matches!(s.gateway.kind, GatewayKind::Command(_)));
        let text = cmd("{provider_url:backup}");
        let e = err_of(&text);
        assert_eq!(e.field, "gateway.command[2]", "{e}");
        assert!(e.message.contains("no provider is named \"backup\""), "{e}");
        assert!(e.message.contains("primary, backup-eu"), "{e}");
        assert!(e.line > 0, "{e}");
        // One provider: it is `default`.
        let one = MINIMAL.replace(
            "[gateway.reference]\nmode = \"bounded\"\nbounded = { concurrency = 8, queue = 11, wait_budget = \"2s\" }\n",
            "command = [\"gw\", \"{listen}\", \"{provider_url:default}\"]\n",
        );
        parse(&one).unwrap();
    }

    #[test]
    fn set_reaches_a_named_provider() {
        let text = format!("{MINIMAL}\n{TWO}");
        let sets = ["providers.backup-eu.quota.tokens_per_minute=1234".to_string()];
        let s = Scenario::with_sets(&text, Path::new("s.toml"), &sets).unwrap();
        assert_eq!(s.providers[1].quota.tokens_per_minute, Some(1234));
        assert_eq!(s.providers[0].quota.tokens_per_minute, Some(90_000));
        let sets = ["providers.primary.latency.multiplier=7".to_string()];
        let s = Scenario::with_sets(&text, Path::new("s.toml"), &sets).unwrap();
        assert_eq!(s.providers[0].latency.multiplier, 7.0);
        let sets = ["providers.a.seed=1".to_string()];
        let e = Scenario::with_sets(MINIMAL, Path::new("s.toml"), &sets).unwrap_err();
        assert!(
            e.to_string()
                .contains("its one provider is [provider], provider.seed"),
            "{e}"
        );
        let sets = ["providers.nope.seed=1".to_string()];
        let e = Scenario::with_sets(&text, Path::new("s.toml"), &sets).unwrap_err();
        assert!(
            e.to_string()
                .contains("no element of providers is named \"nope\": primary, backup-eu"),
            "{e}"
        );
        // A bad value is located like the rest of the file.
        let sets = ["providers.backup-eu.concurrency.ceiling=0".to_string()];
        let e = Scenario::with_sets(&text, Path::new("s.toml"), &sets).unwrap_err();
        assert!(
            e.to_string().contains("providers[1].concurrency.ceiling"),
            "{e}"
        );
    }

    #[test]
    fn minimal_scenario_parses() {
        let s = parse(MINIMAL).unwrap();
        assert_eq!(s.meta.name, "t");
        assert_eq!(s.gateway.memory_ceiling, Some(64 * 1024 * 1024));
        assert!(matches!(s.gateway.kind, GatewayKind::Reference(_)));
        assert_eq!(s.meta.time_scale, 1.0);
    }

    #[test]
    fn unknown_fields_name_their_line() {
        let text = MINIMAL.replace("name = \"t\"", "name = \"t\"\ntime_scael = 10");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("s.toml:4:"), "{err}");
        assert!(err.contains("time_scael"), "{err}");
        let text = MINIMAL.replace("rate = 5", "rate = 5\nburst = 2");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("burst"), "{err}");
        assert!(err.contains(":16:"), "{err}");
    }

    #[test]
    fn gateway_is_one_kind_a_url_or_command_setting_the_reference_aside() {
        // A `url` (as `--target`) sets the reference gateway aside, saying so.
        let text = MINIMAL.replace(
            "[gateway.reference]",
            "url = \"http://127.0.0.1:9\"\n[gateway.reference]",
        );
        let s = parse(&text).unwrap();
        assert_eq!(
            s.gateway.kind,
            GatewayKind::Url("http://127.0.0.1:9".into())
        );
        assert!(
            s.gateway.notes[0].starts_with("[gateway.reference] is set aside"),
            "{:?}",
            s.gateway.notes
        );
        let text = MINIMAL.replace(
            "[gateway.reference]",
            "url = \"http://127.0.0.1:9\"\ncommand = [\"gw\", \"{listen}\"]\n[gateway.reference]",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("`command` or `url`, not both"), "{err}");
        assert!(err.contains("gateway.url"), "{err}");
        let text = MINIMAL.replace(
            "[gateway.reference]\nmode = \"bounded\"\nbounded = { concurrency = 8, queue = 11, wait_budget = \"2s\" }\n",
            "",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("give one of `reference`, `command` or `url`"),
            "{err}"
        );
        let text = MINIMAL.replace("mode = \"bounded\"", "mode = \"fancy\"");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("gateway.reference.mode") && err.contains(":8:"),
            "{err}"
        );
    }

    #[test]
    fn a_typo_in_the_reference_gateway_is_located() {
        let text = MINIMAL.replace("mode = \"bounded\"", "mode = \"bounded\"\nconcurency = 8");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("s.toml:9:") && err.contains("concurency"),
            "{err}"
        );
        let text = MINIMAL.replace("concurrency = 8", "concurrency = 0");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("gateway.reference.bounded.concurrency") && err.contains(":9:"),
            "{err}"
        );
        let text = MINIMAL.replace(
            "mode = \"bounded\"",
            "mode = \"bounded\"\nlisten = \"127.0.0.1:1\"",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("set by the harness"), "{err}");
    }

    #[test]
    fn a_fault_for_the_reference_gateway_is_read_or_located() {
        let text = MINIMAL.replace(
            "mode = \"bounded\"",
            "mode = \"bounded\"\nfault = [\"buffer-stream\", \"leak-slots=3\"]",
        );
        let s = parse(&text).unwrap();
        let GatewayKind::Reference(c) = &s.gateway.kind else {
            panic!("reference")
        };
        assert_eq!(
            c.fault,
            [
                reference_gateway::Fault::BufferStream,
                reference_gateway::Fault::LeakSlots(Some(3))
            ]
        );
        let set = apply_sets(MINIMAL, &["gateway.reference.fault=hoard".into()]).unwrap();
        let GatewayKind::Reference(c) = &parse(&set).unwrap().gateway.kind else {
            panic!("reference")
        };
        assert_eq!(c.fault, [reference_gateway::Fault::Hoard]);
        for (fault, says) in [
            ("\"slow\"", reference_gateway::FAULT_KINDS),
            ("[\"buffer-stream\", \"buffer-body\"]", "give one"),
            ("\"refuse-500-after=soon\"", "not a duration"),
        ] {
            let text = MINIMAL.replace(
                "mode = \"bounded\"",
                &format!("mode = \"bounded\"\nfault = {fault}"),
            );
            let err = parse(&text).unwrap_err().to_string();
            assert!(
                err.contains("s.toml:9:")
                    && err.contains("gateway.reference.fault")
                    && err.contains(says),
                "{fault}: {err}"
            );
        }
    }

    #[test]
    fn bad_scale_is_located() {
        let text = MINIMAL.replace("name = \"t\"", "name = \"t\"\nquota_scale = 0");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("scenario.quota_scale") && err.contains(":4:"),
            "{err}"
        );
    }

    #[test]
    fn a_deadline_rate_left_out_is_the_providers_quota_and_noted() {
        let text = deadline("mode = \"deadline\"", QUOTA);
        let s = parse(&text).unwrap();
        assert_eq!(reference(&s).deadline.tokens_per_minute, 120_000.0);
        assert_eq!(s.gateway.notes.len(), 1, "{:?}", s.gateway.notes);
        let note = &s.gateway.notes[0];
        assert!(
            note.contains("provider's quota, 120,000 tokens/min")
                && note.contains("gateway.reference.deadline.tokens_per_minute not set"),
            "{note}"
        );
        // Scaled like the provider's quota, so the two stay equal.
        let r = s.rehearsal();
        assert_eq!(
            r.reference.as_ref().unwrap().deadline.tokens_per_minute,
            r.provider().quota.tokens_per_minute.unwrap() as f64
        );
        // A deadline table without the rate takes it from the quota too.
        let text = deadline(
            "mode = \"deadline\"\ndeadline = { expected_service = \"1s\" }",
            QUOTA,
        );
        let s = parse(&text).unwrap();
        assert_eq!(reference(&s).deadline.tokens_per_minute, 120_000.0);
        assert_eq!(
            reference(&s).deadline.expected_service,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_deadline_rate_written_is_kept_whatever_the_quota() {
        for reference_text in [
            "mode = \"deadline\"\ndeadline = { tokens_per_minute = 9000 }",
            "mode = \"deadline\"\n[gateway.reference.deadline]\ntokens_per_minute = 9000",
        ] {
            let s = parse(&deadline(reference_text, QUOTA)).unwrap();
            assert_eq!(reference(&s).deadline.tokens_per_minute, 9000.0);
            assert!(s.gateway.notes.is_empty(), "{:?}", s.gateway.notes);
        }
        // Other modes need no rate, and are given none.
        let s = parse(MINIMAL).unwrap();
        assert!(s.gateway.notes.is_empty());
    }

    #[test]
    fn a_deadline_gateway_with_no_rate_and_no_quota_is_refused_at_the_field() {
        let field = "gateway.reference.deadline.tokens_per_minute";
        // No deadline table: on the `mode` line.
        let text = deadline("mode = \"deadline\"", "");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.starts_with("s.toml:8:") && err.contains(&format!("field `{field}`")),
            "{err}"
        );
        assert!(err.contains("[provider.quota] tokens_per_minute"), "{err}");
        // A deadline table without it: on that table's line.
        let text = deadline(
            "mode = \"deadline\"\ndeadline = { expected_service = \"1s\" }",
            "",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.starts_with("s.toml:9:") && err.contains(field), "{err}");
        // A quota without tokens (requests only) gives no rate either.
        let text = deadline(
            "mode = \"deadline\"",
            "[provider.quota]\nrequests_per_minute = 60\n",
        );
        assert!(parse(&text).unwrap_err().to_string().contains(field));
        // A bounded scenario switched to deadline by --set, as a person
        // would try it on slow-upstream.toml.
        let text = apply_sets(MINIMAL, &["gateway.reference.mode=deadline".into()]).unwrap();
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.starts_with("s.toml:8:") && err.contains(field), "{err}");
        // `rehearse report` checks a saved scenario's gateway the same way.
        let err = SavedScenario::of_text(&text, "saved.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("saved.toml:8:") && err.contains(field),
            "{err}"
        );
        let with_quota = deadline("mode = \"deadline\"", QUOTA);
        SavedScenario::of_text(&with_quota, "saved.toml").unwrap();
    }

    #[test]
    fn a_replay_log_that_cannot_be_read_is_refused_at_its_field() {
        let text = MINIMAL.replace(
            "[[load.phases]]\nduration = \"10s\"\nrate = 5\n",
            "[load.replay]\nfile = \"missing.csv\"\n",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.starts_with("s.toml:14:")
                && err.contains("field `load.replay.file`")
                && err.contains("cannot read missing.csv"),
            "{err}"
        );
    }

    #[test]
    fn a_saved_scenario_gives_its_checklist_and_description_and_reads_no_load() {
        let text = MINIMAL
            .replace(
                "name = \"t\"",
                "name = \"t\"\ndescription = \"a flash sale\"",
            )
            .replace(
                "[[load.phases]]\nduration = \"10s\"\nrate = 5\n",
                "[load.replay]\nfile = \"beside-the-original.csv\"\n",
            )
            + "[checklist.drain]\nwithin = \"7s\"\n";
        let saved = SavedScenario::of_text(&text, "saved.toml").unwrap();
        assert_eq!(saved.description.as_deref(), Some("a flash sale"));
        assert_eq!(saved.checklist.drain.within, Duration::from_secs(7));
        let text = text.replace("within = \"7s\"", "within = 7");
        let err = SavedScenario::of_text(&text, "saved.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("saved.toml:17:") && err.contains("checklist.drain.within"),
            "{err}"
        );
    }

    #[test]
    fn memory_ceilings_retained_memory_is_refused_where_it_is_written() {
        let path = Path::new("m.toml");
        let with = |v: &str| {
            format!("{MINIMAL}[checklist.memory_ceiling]\nsettle = \"20s\"\nmax_retained = {v}\n")
        };
        let s = Scenario::from_str(&with("\"48MiB\""), "m.toml", path).unwrap();
        assert_eq!(s.checklist.memory_ceiling.max_retained, Some(48 << 20));
        assert_eq!(s.checklist.memory_ceiling.settle, Duration::from_secs(20));
        let line = with("0").lines().count();
        for (bad, why) in [
            ("-1", "is negative"),
            ("\"-8 MiB\"", "is negative"),
            ("nan", "is not a finite number"),
            ("inf", "is not a finite number"),
        ] {
            let err = Scenario::from_str(&with(bad), "m.toml", path)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!("m.toml:{line}:"))
                    && err.contains("field `checklist.memory_ceiling.max_retained`")
                    && err.contains(why),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn scenario_seed_reaches_the_provider_unless_it_has_its_own() {
        let text = MINIMAL.replace("name = \"t\"", "name = \"t\"\nseed = 99");
        assert_eq!(parse(&text).unwrap().provider().seed, 99);
        let text = format!("{text}\n[provider]\nseed = 5\n");
        assert_eq!(parse(&text).unwrap().provider().seed, 5);
    }

    #[test]
    fn rehearse_load_plays_the_load_at_the_scenario_tables_scale() {
        let dir = std::env::temp_dir().join(format!("rehearse-scale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        const LOAD: &str = "[load]\n[[load.phases]]\nduration = \"60s\"\nrate = 10\n";
        // The rest of the file is other parts' business, unread here.
        let scaled = file(
            "scaled.toml",
            &format!("[scenario]\nname = \"s\"\ntime_scale = 4\nquota_scale = 2\n[gateway]\nanything = 1\n{LOAD}"),
        );
        let played = |path: &Path, t| {
            load_in_file(path, t).map(|p| {
                (
                    p.schedule_length().as_secs_f64(),
                    p.expected_arrivals().round(),
                )
            })
        };
        // 60 s ÷ 4; 10/s × 4 ÷ 2 for 15 s.
        assert_eq!(played(&scaled, None).unwrap(), (15.0, 300.0));
        assert_eq!(played(&scaled, Some(10.0)).unwrap(), (6.0, 300.0));
        let bare = file("bare.toml", LOAD);
        assert_eq!(played(&bare, None).unwrap(), (60.0, 600.0));
        let err = played(&bare, Some(0.0)).unwrap_err();
        assert!(matches!(err, ScenarioError::BadScale { .. }), "{err}");
        let typed = file(
            "typed.toml",
            &format!("[scenario]\ntime_scale = \"x\"\n{LOAD}"),
        );
        let err = played(&typed, None).unwrap_err().to_string();
        assert!(
            err.contains("typed.toml:2:") && err.contains("scenario.time_scale"),
            "{err}"
        );
        let typo = file(
            "typo.toml",
            &LOAD.replace("rate = 10", "rate = 10\nburst = 2"),
        );
        let err = played(&typo, None).unwrap_err().to_string();
        assert!(
            err.contains("typo.toml:5:") && err.contains("burst"),
            "{err}"
        );
        let err = played(&dir.join("missing.toml"), None).unwrap_err();
        assert!(err.to_string().starts_with("cannot read "), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
