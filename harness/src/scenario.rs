//! Scenario files: the TOML a team writes for a rehearsal, validated into a
//! [`Scenario`] before any async work starts.
//!
//! ```toml
//! [scenario]
//! name = "flash-promotion"
//! description = "..."
//! seed = 42
//! quota_scale = 10        # divides every quota and rate; durations kept
//! time_scale = 10         # divides every duration; multiplies every rate
//! prompt_bytes = "6KiB"   # held per waiting request (default: the load's prompt size)
//!
//! [provider]              # the fake provider (fake-provider/src/config.rs)
//! [gateway]               # one of reference / command / url, plus:
//! memory_ceiling = "512MiB"
//! # metrics_url = "http://staging:9090/metrics", rss_metric = "process_resident_memory_bytes"
//! # ready_path = "/healthz", ready_timeout = "10s"
//! # memory_limit = "400MiB"   # run a spawned gateway under this limit (cgroup, else RLIMIT_AS)
//! # restart = true, restart_delay = "2s"   # restart it when it dies, as an orchestrator would
//! [gateway.reference]     # the built-in gateway, spawned as a child process
//! mode = "deadline"
//! deadline = { tokens_per_minute = 500000, expected_service = "5s" }
//! [load]                  # the load generator (loadgen/src/config.rs)
//! [checklist]             # thresholds of the checks (assertions crate)
//! ```
//!
//! `--set dotted.key=value` edits the document before it is read, so an
//! override is validated, and located, like the rest of the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_provider::ProviderConfig;
use serde::Deserialize;
use toml_located::{ConfigError, Source};

/// The `[scenario]` table.
#[derive(Debug, Clone, Deserialize)]
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
}

fn one() -> f64 {
    1.0
}

/// How the gateway under test is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayKind {
    /// The built-in reference gateway, spawned as a child process with this
    /// TOML table (mode and knobs) as its config.
    Reference(toml::Table),
    /// Any program; `{provider_url}` and `{listen}` are replaced.
    Command(Vec<String>),
    /// A gateway already running at this base URL.
    Url(String),
}

/// The `[gateway]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayRaw {
    reference: Option<toml::Table>,
    command: Option<Vec<String>>,
    url: Option<String>,
    memory_ceiling: Option<bytesize::ByteSize>,
    metrics_url: Option<String>,
    rss_metric: Option<String>,
    ready_path: Option<String>,
    #[serde(default = "default_ready_timeout", with = "humantime_serde")]
    ready_timeout: Duration,
    memory_limit: Option<bytesize::ByteSize>,
    #[serde(default)]
    restart: bool,
    #[serde(default = "default_restart_delay", with = "humantime_serde")]
    restart_delay: Duration,
}

fn default_restart_delay() -> Duration {
    Duration::from_secs(2)
}

fn default_ready_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The gateway under test.
#[derive(Debug, Clone)]
pub struct Gateway {
    /// How it is reached.
    pub kind: GatewayKind,
    /// Peak resident memory allowed.
    pub memory_ceiling: Option<u64>,
    /// Where to scrape RSS for a gateway the harness did not start.
    pub metrics_url: Option<String>,
    /// The Prometheus metric holding RSS in bytes.
    pub rss_metric: Option<String>,
    /// Path answered (any status below 500) once the gateway is ready; by
    /// default readiness is a TCP connect.
    pub ready_path: Option<String>,
    /// How long to wait for readiness.
    pub ready_timeout: Duration,
    /// Run a spawned gateway under this memory limit.
    pub memory_limit: Option<u64>,
    /// Restart a spawned gateway when it dies.
    pub restart: bool,
    /// How long after its death it is restarted.
    pub restart_delay: Duration,
}

/// A whole scenario file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioRaw {
    scenario: Meta,
    #[serde(default)]
    provider: Option<ProviderConfig>,
    gateway: GatewayRaw,
    load: loadgen::LoadConfig,
    #[serde(default)]
    checklist: assertions::Thresholds,
}

/// A validated scenario, at full scale (see [`Scenario::rehearsal`] for the
/// scaled figures).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Where it was read from.
    pub path: PathBuf,
    /// The text after `--set` edits (the loadgen re-reads its section from it).
    pub text: String,
    /// `[scenario]`.
    pub meta: Meta,
    /// `[provider]`, at full scale.
    pub provider: ProviderConfig,
    /// `[gateway]`.
    pub gateway: Gateway,
    /// `[load]`, at full scale.
    pub load: loadgen::LoadConfig,
    /// `[checklist]`, at full scale.
    pub checklist: assertions::Thresholds,
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
    #[error("--set {0}: expected dotted.key=value")]
    BadSet(String),
    /// The content is wrong; the error names file, line and field.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Scenario {
    /// Reads `path`, applies `sets` (`dotted.key=value`), and validates.
    pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let text = apply_sets(&text, sets)?;
        let origin = if sets.is_empty() {
            path.display().to_string()
        } else {
            format!("{} (with --set)", path.display())
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
        let mut provider = raw.provider.unwrap_or_default();
        provider.validate(&src, "provider.")?;
        if let (Some(seed), true) = (meta.seed, !text_has(text, "provider", "seed")) {
            provider.seed = seed;
        }
        let g = raw.gateway;
        let kind = match (g.reference, g.command, g.url) {
            (Some(t), None, None) => GatewayKind::Reference(t),
            (None, Some(c), None) => {
                if c.is_empty() {
                    return Err(src.error("gateway.command", "must name a program").into());
                }
                if !c.iter().any(|a| a.contains("{listen}")) {
                    return Err(src
                        .error(
                            "gateway.command",
                            "must pass `{listen}` to the program, so the harness knows where it listens",
                        )
                        .into());
                }
                GatewayKind::Command(c)
            }
            (None, None, Some(u)) => {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(src
                        .error("gateway.url", "must be an http:// or https:// URL")
                        .into());
                }
                GatewayKind::Url(u)
            }
            _ => {
                return Err(src
                    .error(
                        "gateway",
                        "give exactly one of `reference`, `command` or `url`",
                    )
                    .into())
            }
        };
        if let GatewayKind::Reference(t) = &kind {
            check_reference(t, &src)?;
        }
        if g.rss_metric.is_some() != g.metrics_url.is_some() {
            return Err(src
                .error(
                    "gateway.rss_metric",
                    "`rss_metric` and `metrics_url` go together: the metric is scraped from that URL",
                )
                .into());
        }
        let gateway = Gateway {
            kind,
            memory_ceiling: g.memory_ceiling.map(|b| b.as_u64()),
            metrics_url: g.metrics_url,
            rss_metric: g.rss_metric,
            ready_path: g.ready_path,
            ready_timeout: g.ready_timeout,
            memory_limit: g.memory_limit.map(|b| b.as_u64()),
            restart: g.restart,
            restart_delay: g.restart_delay,
        };
        if matches!(gateway.kind, GatewayKind::Url(_))
            && (gateway.memory_limit.is_some() || gateway.restart)
        {
            return Err(src
                .error(
                    "gateway",
                    "`memory_limit` and `restart` apply to a gateway the harness spawns, not to a `url`",
                )
                .into());
        }
        // The loadgen validates its own section, with its own rules.
        let base = path.parent().unwrap_or(Path::new("."));
        loadgen::LoadPlan::from_scenario_str(text, origin, base).map_err(|e| match e {
            loadgen::LoadError::Config(c) => ScenarioError::Config(c),
            other => ScenarioError::Config(src.error("load", other.to_string())),
        })?;
        Ok(Scenario {
            path: path.to_path_buf(),
            text: text.to_string(),
            meta,
            provider,
            gateway,
            load: raw.load,
            checklist: raw.checklist,
        })
    }
}

/// True if and only if `table.key` is written in the text.
fn text_has(text: &str, table: &str, key: &str) -> bool {
    toml_located::locate(text, &format!("{table}.{key}"))
        .is_some_and(|span| text[span].trim_start().starts_with(key))
}

fn check_reference(t: &toml::Table, src: &Source<'_>) -> Result<(), ConfigError> {
    match t.get("mode") {
        Some(toml::Value::String(m))
            if ["naive", "bounded", "deadline", "aimd"].contains(&m.as_str()) =>
        {
            Ok(())
        }
        Some(_) => Err(src.error(
            "gateway.reference.mode",
            "expected one of \"naive\", \"bounded\", \"deadline\", \"aimd\"",
        )),
        None => Err(src.error("gateway.reference", "missing field `mode`")),
    }?;
    for key in ["upstream", "listen"] {
        if t.contains_key(key) {
            return Err(src.error(
                &format!("gateway.reference.{key}"),
                "is set by the harness; remove it",
            ));
        }
    }
    Ok(())
}

/// Applies `dotted.key=value` edits to a TOML text. The value is read as a
/// TOML value when it parses as one (`8`, `true`, `"x"`, `{ a = 1 }`), else
/// as a bare string (`naive`).
pub fn apply_sets(text: &str, sets: &[String]) -> Result<String, ScenarioError> {
    if sets.is_empty() {
        return Ok(text.to_string());
    }
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = e
            .span()
            .map(|s| toml_located::line_col(text, s.start))
            .unwrap_or((0, 0));
        ScenarioError::Config(ConfigError {
            origin: "scenario".into(),
            line,
            column,
            field: String::new(),
            message: e.message().to_string(),
        })
    })?;
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .ok_or_else(|| ScenarioError::BadSet(set.clone()))?;
        let parts: Vec<&str> = key.trim().split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(ScenarioError::BadSet(set.clone()));
        }
        let value: toml_edit::Value = value
            .trim()
            .parse()
            .unwrap_or_else(|_| toml_edit::Value::from(value.trim()));
        let mut item = doc.as_item_mut();
        for part in &parts[..parts.len() - 1] {
            let table = item
                .as_table_like_mut()
                .ok_or_else(|| ScenarioError::BadSet(format!("{set} ({part} is not a table)")))?;
            if table.get(part).is_none() {
                table.insert(part, toml_edit::Item::Table(toml_edit::Table::new()));
            }
            item = table
                .get_mut(part)
                .ok_or_else(|| ScenarioError::BadSet(set.clone()))?;
        }
        let last = parts[parts.len() - 1];
        let table = item
            .as_table_like_mut()
            .ok_or_else(|| ScenarioError::BadSet(format!("{set} (not inside a table)")))?;
        table.insert(last, toml_edit::Item::Value(value));
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
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

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_str(text, "s.toml", Path::new("s.toml"))
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
    fn gateway_needs_exactly_one_kind() {
        let text = MINIMAL.replace(
            "[gateway.reference]",
            "url = \"http://127.0.0.1:9\"\n[gateway.reference]",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("exactly one"), "{err}");
        let text = MINIMAL.replace("mode = \"bounded\"", "mode = \"fancy\"");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("gateway.reference.mode") && err.contains(":8:"),
            "{err}"
        );
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
    fn sets_edit_the_document() {
        let out = apply_sets(
            MINIMAL,
            &[
                "gateway.reference.mode=naive".into(),
                "scenario.time_scale=10".into(),
                "checklist.drain.within=\"5s\"".into(),
            ],
        )
        .unwrap();
        let s = parse(&out).unwrap();
        match &s.gateway.kind {
            GatewayKind::Reference(t) => assert_eq!(t["mode"].as_str(), Some("naive")),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.meta.time_scale, 10.0);
        let doc: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(doc["checklist"]["drain"]["within"].as_str(), Some("5s"));
        assert!(matches!(
            apply_sets(MINIMAL, &["nonsense".into()]),
            Err(ScenarioError::BadSet(_))
        ));
    }

    #[test]
    fn scenario_seed_reaches_the_provider_unless_it_has_its_own() {
        let text = MINIMAL.replace("name = \"t\"", "name = \"t\"\nseed = 99");
        assert_eq!(parse(&text).unwrap().provider.seed, 99);
        let text = format!("{text}\n[provider]\nseed = 5\n");
        assert_eq!(parse(&text).unwrap().provider.seed, 5);
    }
}

/// The scenario text with its `[load]` section at rehearsal scale: every
/// duration divided by `time_scale`, every rate multiplied by
/// `time_scale / quota_scale`; a replay's speed-up multiplied by
/// `time_scale` and its multiplier divided by `quota_scale`. The send-lag
/// bound is the harness's own and is not scaled.
pub fn scale_load(text: &str, time_scale: f64, quota_scale: f64) -> Result<String, ScenarioError> {
    if time_scale == 1.0 && quota_scale == 1.0 {
        return Ok(text.to_string());
    }
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| ScenarioError::BadSet(e.to_string()))?;
    let Some(load) = doc.get_mut("load").and_then(|l| l.as_table_like_mut()) else {
        return Ok(text.to_string());
    };
    let rate = time_scale / quota_scale;
    if let Some(item) = load.get_mut("patience") {
        divide_durations(item, time_scale);
    }
    if let Some(phases) = load.get_mut("phases") {
        let each = |t: &mut dyn toml_edit::TableLike| {
            if let Some(d) = t.get_mut("duration") {
                divide_durations(d, time_scale);
            }
            for key in ["rate", "ramp_to"] {
                if let Some(v) = t.get_mut(key) {
                    multiply_number(v, rate);
                }
            }
        };
        if let Some(a) = phases.as_array_of_tables_mut() {
            for t in a.iter_mut() {
                each(t);
            }
        } else if let Some(a) = phases.as_array_mut() {
            for v in a.iter_mut() {
                if let Some(t) = v.as_inline_table_mut() {
                    each(t);
                }
            }
        }
    }
    if let Some(retry) = load.get_mut("retry").and_then(|r| r.as_table_like_mut()) {
        for key in ["cap", "backoff_initial", "backoff_max"] {
            if let Some(v) = retry.get_mut(key) {
                divide_durations(v, time_scale);
            }
        }
    }
    if let Some(replay) = load.get_mut("replay").and_then(|r| r.as_table_like_mut()) {
        let speedup = replay
            .get("speedup")
            .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
            .unwrap_or(1.0);
        replay.insert("speedup", toml_edit::value(speedup * time_scale));
        let multiply = replay
            .get("multiply")
            .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
            .unwrap_or(1.0);
        replay.insert("multiply", toml_edit::value(multiply / quota_scale));
    }
    Ok(doc.to_string())
}

/// Divides every humantime string under `item` (a duration or a
/// distribution of durations) by `by`.
fn divide_durations(item: &mut toml_edit::Item, by: f64) {
    fn value(v: &mut toml_edit::Value, by: f64) {
        match v {
            toml_edit::Value::String(s) => {
                if let Ok(d) = humantime::parse_duration(s.value()) {
                    let scaled = d.div_f64(by);
                    // Whole microseconds: humantime prints them exactly.
                    let scaled = Duration::from_micros(scaled.as_micros() as u64);
                    *v = toml_edit::Value::from(humantime::format_duration(scaled).to_string());
                }
            }
            toml_edit::Value::InlineTable(t) => {
                for (_, v) in t.iter_mut() {
                    value(v, by);
                }
            }
            toml_edit::Value::Array(a) => {
                for v in a.iter_mut() {
                    value(v, by);
                }
            }
            _ => {}
        }
    }
    match item {
        toml_edit::Item::Value(v) => value(v, by),
        toml_edit::Item::Table(t) => {
            for (_, i) in t.iter_mut() {
                divide_durations(i, by);
            }
        }
        _ => {}
    }
}

fn multiply_number(item: &mut toml_edit::Item, by: f64) {
    let n = item
        .as_float()
        .or_else(|| item.as_integer().map(|i| i as f64));
    if let Some(n) = n {
        *item = toml_edit::value(n * by);
    }
}

#[cfg(test)]
mod scale_tests {
    use super::*;

    #[test]
    fn load_is_scaled_in_time_and_quota() {
        let text = r#"
[load]
patience = { mix = [ { value = "25s", weight = 1 }, { value = "5s", weight = 1 } ] }
send_lag_p99_max = "5ms"
[[load.phases]]
duration = "40m"
rate = 2000
per = "minute"
ramp_to = 1000
[load.retry]
cap = "60s"
"#;
        let out = scale_load(text, 10.0, 4.0).unwrap();
        let v: toml::Table = toml::from_str(&out).unwrap();
        let load = &v["load"];
        assert_eq!(load["phases"][0]["duration"].as_str(), Some("4m"));
        assert_eq!(load["phases"][0]["rate"].as_float(), Some(5000.0));
        assert_eq!(load["phases"][0]["ramp_to"].as_float(), Some(2500.0));
        assert_eq!(
            load["patience"]["mix"][0]["value"].as_str(),
            Some("2s 500ms")
        );
        assert_eq!(load["retry"]["cap"].as_str(), Some("6s"));
        assert_eq!(
            load["send_lag_p99_max"].as_str(),
            Some("5ms"),
            "the harness bound is not scaled"
        );
        assert_eq!(scale_load(text, 1.0, 1.0).unwrap(), text);
    }
}
