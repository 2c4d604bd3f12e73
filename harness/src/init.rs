//! Scenarios to start from: the built-in one a bare `rehearse run`
//! rehearses, and (`rehearse init`) a commented scenario written from a few
//! figures.
//!
//! `rehearse init FILE` writes every field of the provider, gateway, load
//! and checklist tables a scenario may hold, each with a one-line comment:
//! the figures given as flags, the flash-promotion shape for those not
//! given (placeholders, marked so), and every other field at its default,
//! so that reading the file gives what leaving those fields out would. A
//! field whose default is "none" (a ceiling, a budget) is written
//! commented out, with an example. Every table's keys come from the types'
//! own serde field lists ([`scenario_keys`]), so a field added to a config
//! and not to this file is caught by its tests.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use wire::Dialect;

use crate::error::RunError;
use crate::scenario::{apply_sets, Scenario, ScenarioError};

/// The scenario rehearsed when none is named: the CI smoke rehearsal
/// (`scenarios/ci-smoke.toml`), shipped in the binary so that a fresh
/// checkout runs it from anywhere.
pub const BUILTIN_SCENARIO: &str = include_str!("../../scenarios/ci-smoke.toml");

impl Scenario {
    /// Reads and validates the scenario at `path` with `sets` applied, or
    /// the built-in one ([`BUILTIN_SCENARIO`]) when no path is given.
    ///
    /// ```
    /// let s = harness::Scenario::load_or_builtin(None, &["scenario.seed=3".into()]).unwrap();
    /// assert_eq!((s.meta.name.as_str(), s.meta.seed), ("ci-smoke", Some(3)));
    /// ```
    pub fn load_or_builtin(
        path: Option<&Path>,
        sets: &[String],
    ) -> Result<Scenario, ScenarioError> {
        match path {
            Some(path) => Scenario::load(path, sets),
            None => {
                let text = apply_sets(BUILTIN_SCENARIO, sets)?;
                Scenario::from_str(&text, "built-in ci-smoke.toml", Path::new("ci-smoke.toml"))
            }
        }
    }
}

/// A rate of arrivals as a person writes it: `200/min`, `3.5/s`, or a bare
/// number of requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Arrivals per [`Rate::per_minute`]'s unit.
    pub value: f64,
    /// The value is per minute, else per second.
    pub per_minute: bool,
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// ```
    /// use harness::Rate;
    /// assert_eq!("200/min".parse::<Rate>(), Ok(Rate { value: 200.0, per_minute: true }));
    /// assert_eq!("3.5".parse::<Rate>(), Ok(Rate { value: 3.5, per_minute: false }));
    /// assert!("fast".parse::<Rate>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<Rate, String> {
        let t = text.trim();
        let (number, per_minute) = match t.split_once('/') {
            None => (t, false),
            Some((n, "s" | "sec" | "second")) => (n, false),
            Some((n, "m" | "min" | "minute")) => (n, true),
            Some(_) => return Err(format!("`{t}`: expected N, N/s or N/min")),
        };
        match number.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 => Ok(Rate { value, per_minute }),
            _ => Err(format!("`{t}`: expected a rate above 0 (N, N/s or N/min)")),
        }
    }
}

impl Rate {
    /// `rate = V` and `per = "minute"|"second"`.
    fn toml(self) -> (String, &'static str) {
        (
            toml::Value::Float(self.value).to_string().replace(".0", ""),
            if self.per_minute {
                "\"minute\""
            } else {
                "\"second\""
            },
        )
    }
}

/// What `rehearse init` is given. A figure not given takes the
/// flash-promotion shape's (200 requests/min, 2,000/min for 40 minutes, a
/// quota of 500,000 tokens/min, 1,200 tokens a request, 25 s of patience),
/// written as a placeholder. With the `clap` feature these are `rehearse
/// init`'s flags themselves: each field's doc is its `--help` line.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct InitOptions {
    /// Your gateway, already running at this URL ([gateway] url).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "URL", conflicts_with = "gateway_command")
    )]
    pub target: Option<String>,
    /// Your gateway as a command, one string split as a shell would, with
    /// {listen} (and {provider_url}) in it ([gateway] command).
    #[cfg_attr(feature = "clap", arg(long, value_name = "CMD"))]
    pub gateway_command: Option<String>,
    /// Arrivals before and after the peak: N (per second), N/s or N/min.
    #[cfg_attr(feature = "clap", arg(long, value_name = "RATE"))]
    pub normal_rate: Option<Rate>,
    /// Arrivals during the peak: N (per second), N/s or N/min.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "RATE", requires = "peak_duration")
    )]
    pub peak_rate: Option<Rate>,
    /// How long the peak lasts (e.g. 40m).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub peak_duration: Option<Duration>,
    /// The provider account's tokens per minute.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub quota_tokens_per_minute: Option<u64>,
    /// Tokens a request uses, prompt and completion (split 5 to 1).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub tokens_per_request: Option<u64>,
    /// How long a caller waits before giving up (e.g. 25s).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub patience: Option<Duration>,
    /// The API the load speaks: openai or anthropic.
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_dialect))]
    pub dialect: Option<Dialect>,
}

/// A duration flag: `40m`, `25s`, `1h 30m`.
#[cfg(feature = "clap")]
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e}"))
}

/// `openai` or `anthropic`.
#[cfg(feature = "clap")]
fn parse_dialect(text: &str) -> Result<Dialect, String> {
    match text {
        "openai" => Ok(Dialect::OpenAi),
        "anthropic" => Ok(Dialect::Anthropic),
        _ => Err(format!("`{text}`: expected openai or anthropic")),
    }
}

/// One key of a table as `init` writes it.
struct Key {
    name: &'static str,
    /// One line saying what it is.
    says: &'static str,
    /// The default as TOML, for a table with no serialised default (the
    /// load's); `None` with `absent`: none by default.
    default: Option<&'static str>,
    /// An example written commented out when the field has no default
    /// value (an `Option` left out).
    absent: Option<&'static str>,
}

const fn key(name: &'static str, says: &'static str) -> Key {
    Key {
        name,
        says,
        default: None,
        absent: None,
    }
}

const fn val(name: &'static str, default: &'static str, says: &'static str) -> Key {
    Key {
        name,
        says,
        default: Some(default),
        absent: None,
    }
}

const fn none(name: &'static str, example: &'static str, says: &'static str) -> Key {
    Key {
        name,
        says,
        default: None,
        absent: Some(example),
    }
}

/// A value set by `init`, and why: a flag, or the shape's placeholder.
struct Set {
    value: String,
    why: String,
}

/// The text being written, and whether default lines are left out (the
/// minimal twin the tests compare with).
struct Writer {
    out: String,
    minimal: bool,
}

impl Writer {
    fn line(&mut self, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// A table: its header, then each key: set, else its default (from
    /// `table`, the serialised default, or the key's own), else commented
    /// out. `commented`: the whole table as comments.
    fn table(
        &mut self,
        header: &str,
        says: &str,
        keys: &[Key],
        table: Option<&toml::Table>,
        set: &BTreeMap<&str, Set>,
        commented: bool,
    ) {
        let hash = if commented { "# " } else { "" };
        self.line("");
        self.line(&format!("{hash}{header}  # {says}"));
        self.keys(keys, table, set, commented);
    }

    /// A table's keys, as [`Writer::table`] writes them.
    fn keys(
        &mut self,
        keys: &[Key],
        table: Option<&toml::Table>,
        set: &BTreeMap<&str, Set>,
        commented: bool,
    ) {
        let hash = if commented { "# " } else { "" };
        for k in keys {
            let default = table
                .and_then(|t| t.get(k.name))
                .map(|v| v.to_string())
                .or(k.default.map(str::to_string));
            let (value, says, is_default) = match (set.get(k.name), default) {
                (Some(s), _) => (s.value.clone(), format!("{}: {}", s.why, k.says), false),
                (None, Some(d)) => (d, k.says.to_string(), true),
                (None, None) => {
                    let example = k.absent.unwrap_or("...");
                    self.line(&format!("# {} = {example}  # {}", k.name, k.says));
                    continue;
                }
            };
            if self.minimal && is_default {
                continue;
            }
            self.line(&format!("{hash}{} = {value}  # {says}", k.name));
        }
    }
}

#[rustfmt::skip]
const PROVIDER: &[Key] = &[
    key("seed", "every draw (latency, tokens, faults) follows it"),
    key("models", "the models GET /v1/models lists"),
    key("max_body_bytes", "a larger request body is answered 413"),
    key("default_max_tokens", "reserved from the quota when a request names no max_tokens"),
    key("header_read_timeout", "a connection whose request head takes longer is closed"),
    key("body_read_timeout", "a request body that takes longer gets 408"),
    none("admin_token", "\"s3cret\"", "admin calls need it (prefer REHEARSE_ADMIN_TOKEN)"),
    key("completion_tokens", "tokens an answer has: fixed, uniform or lognormal"),
];
#[rustfmt::skip]
const LATENCY: &[Key] = &[
    key("ttft", "time to first token, drawn per call"),
    key("per_token", "time per token after the first"),
    key("multiplier", "both draws times this (a brownout is 7.0)"),
    none("knee", "32", "past this many calls in service each call slows down"),
    key("knee_exponent", "how fast past the knee (1: throughput flat)"),
];
#[rustfmt::skip]
const CONCURRENCY: &[Key] = &[
    none("ceiling", "12", "at most this many calls in service (none: no ceiling)"),
    key("overflow", "beyond the ceiling: \"queue\", or \"reject\" (429 / 529)"),
    none("queue_limit", "100", "the longest queue (none: unbounded)"),
];
#[rustfmt::skip]
const QUOTA: &[Key] = &[
    none("requests_per_minute", "500", "the account's requests per minute (none: unlimited)"),
    none("tokens_per_minute", "500000", "the account's tokens per minute (none: unlimited)"),
    key("window", "each bucket holds this span of its refill (the burst)"),
];
#[rustfmt::skip]
const FAULTS: &[Key] = &[
    key("errors", "status -> rate per call, e.g. { \"500\" = 0.01, \"529\" = 0.005 }"),
    key("reset", "rate of connections reset before answering"),
    key("hang", "rate of calls that never answer"),
    key("stream_cut", "rate of streams cut mid-way"),
    key("malformed", "rate of malformed bodies"),
];
#[rustfmt::skip]
const TIMELINE: &[Key] = &[
    none("name", "\"brownout\"", "a phase overriding any of the above"),
    none("from", "\"2m\"", "from this long after the load starts"),
    none("until", "\"14m\"", "until then (none: to the end)"),
    none("latency", "{ multiplier = 7.0 }", "the [provider.latency] fields it changes"),
    none("completion_tokens", "{ fixed = 100 }", "answers' tokens meanwhile"),
    none("concurrency", "{ ceiling = 4 }", "the [provider.concurrency] fields it changes"),
    none("quota", "{ tokens_per_minute = 100000 }", "the [provider.quota] fields it changes"),
    none("faults", "{ errors = { \"529\" = 0.05 } }", "the [provider.faults] fields it changes"),
];
#[rustfmt::skip]
const GATEWAY: &[Key] = &[
    none("memory_ceiling", "\"512MiB\"", "memory_ceiling fails past this peak RSS"),
    none("metrics_url", "\"http://gw:9090/metrics\"", "a gateway not spawned: its RSS from here"),
    none("rss_metric", "\"process_resident_memory_bytes\"", "the metric there (with metrics_url)"),
    none("queue_depth_metric", "\"gateway_queue_depth\"", "the gateway's own queue depth there"),
    none("in_flight_metric", "\"gateway_in_flight\"", "its calls in flight upstream there"),
    none("stale_drops_metric", "\"gateway_stale_drops_total\"", "its stale drops there"),
    val("metrics_period", "\"1s\"", "those gauges are read this often"),
    none("ready_path", "\"/healthz\"", "ready once it answers below 500 (none: a TCP connect)"),
    val("ready_timeout", "\"10s\"", "how long to wait for it to be ready"),
    none("memory_limit", "\"400MiB\"", "run a spawned gateway under this limit (cgroup)"),
    val("restart", "false", "restart a spawned gateway when it dies"),
    val("restart_delay", "\"2s\"", "that long after its death (÷ the time scale)"),
    val("scale_memory", "false", "memory_limit and the ceiling stand for requests held"),
    val("memory_floor", "\"32MiB\"", "the gateway's memory at rest, never scaled"),
];
#[rustfmt::skip]
const REFERENCE: &[Key] = &[
    key("mode", "\"naive\", \"bounded\", \"deadline\", \"aimd\" or \"timeout\""),
    key("max_body_bytes", "a larger request body is answered 413"),
    key("connect_timeout", "connecting to the provider gives up after this (502)"),
    key("drain_window", "the span the drain rate behind Retry-After is read over"),
    key("shutdown_grace", "on shutdown, connections get this long"),
    key("header_read_timeout", "a caller's request head must come within this"),
    key("body_read_timeout", "a caller's body must come within this (else 408)"),
    key("queue_full_status", "the status of a queue_full refusal: 429 or 503"),
    none("upstream_timeout", "\"15s\"", "cancel a provider call this long after dispatch (504)"),
    key("tenant_window", "each tenant's bucket holds this span of its refill"),
    none("pool_max_connections", "100", "at most this many provider calls at once (a pool)"),
    val("split_pool_wait", "false", "meter the pool's wait apart from provider latency"),
    key("upstream_retries", "retry a provider's 429/503/529 this many times"),
    key("upstream_retry_backoff", "the first wait between those retries"),
];
#[rustfmt::skip]
const BOUNDED: &[Key] = &[
    key("concurrency", "provider calls at once"),
    key("queue", "jobs allowed to wait; one more is refused 429"),
    key("wait_budget", "a job that waited longer is dropped unsent (503)"),
];
#[rustfmt::skip]
const DEADLINE: &[Key] = &[
    none("tokens_per_minute", "500000", "the rate it paces calls to (none: the provider's quota)"),
    key("default_deadline", "a caller's patience when the request carries none"),
    key("expected_service", "a provider call's time, counted at its tail"),
    key("order", "\"fifo\" or \"lifo\""),
    key("patience_header", "the header carrying a caller's remaining patience (ms)"),
    key("default_max_tokens", "max_tokens assumed when a request names none"),
];
#[rustfmt::skip]
const AIMD: &[Key] = &[
    key("initial", "the limit at start"),
    key("floor", "the lowest limit"),
    key("ceiling", "the highest limit"),
    key("latency_target", "a call slower than this cuts the limit x0.9"),
    key("queue", "jobs allowed to wait (0: none)"),
    key("wait_budget", "a job that waited longer is dropped unsent (503)"),
];
#[rustfmt::skip]
const LOAD: &[Key] = &[
    val("seed", "0", "every draw (arrivals, shapes, jitter) follows it"),
    val("send_lag_p99_max", "\"5ms\"", "the run is invalid past this send lag p99"),
    val("id_prefix", "\"r\"", "request ids are r000000, r000001, ..."),
    none("max_connections", "1000", "a cap on open connections (none: an open loop)"),
    val("patience", "{ fixed = \"30s\" }", "how long a caller waits, all attempts"),
    val("send_patience", "false", "send the remaining patience in a header..."),
    val("patience_header", "\"x-request-timeout-ms\"", "...named so, in milliseconds"),
];
#[rustfmt::skip]
const PHASE: &[Key] = &[
    key("name", "a name for reports"),
    key("duration", "how long the phase lasts"),
    key("rate", "arrivals per `per`"),
    key("per", "\"second\" or \"minute\""),
    none("ramp_to", "2000", "a linear ramp from `rate` to this over the phase"),
    key("arrivals", "\"constant\" or \"poisson\""),
];
#[rustfmt::skip]
const REPLAY: &[Key] = &[
    none("file", "\"traffic.csv\"", "a log to replay instead of phases (not both)"),
    none("format", "\"csv\"", "\"csv\" or \"jsonl\" (none: from the extension)"),
    val("timestamp", "\"timestamp\"", "the column: seconds, or RFC 3339 text"),
    val("unit", "\"s\"", "numeric timestamps in \"s\", \"ms\" or \"us\""),
    val("speedup", "1.0", "log time / run time"),
    val("multiply", "1.0", "each row played this many times on average"),
    val("jitter", "\"1s\"", "added copies move by up to this (log time)"),
];
#[rustfmt::skip]
const REQUEST: &[Key] = &[
    val("dialect", "\"openai\"", "\"openai\" or \"anthropic\""),
    val("model", "\"gpt-4o-mini\"", "the model name sent"),
    val("prompt_tokens", "{ fixed = 64 }", "prompt size in tokens (about 4 characters each)"),
    val("padding_kb", "{ fixed = 0 }", "extra context in KiB (retrieved documents)"),
    val("max_tokens", "{ fixed = 64 }", "the request's max_tokens"),
    val("stream", "0.0", "share of streamed requests"),
    val("api_key", "\"rehearse\"", "sent as a bearer token / x-api-key"),
];
#[rustfmt::skip]
const RETRY: &[Key] = &[
    val("policy", "\"none\"", "\"none\", \"immediate\" or \"retry_after\""),
    val("max_attempts", "3", "attempts per caller, the first included"),
    val("cap", "\"60s\"", "a Retry-After above this is not honoured"),
    val("jitter", "1.0", "retry at Retry-After x (1 + U(0, jitter))"),
    val("backoff_initial", "\"500ms\"", "without a Retry-After: the first backoff"),
    val("backoff_max", "\"8s\"", "the longest backoff"),
    none("budget", "0.2", "retries at most this share of first attempts"),
];
#[rustfmt::skip]
const TENANT: &[Key] = &[
    none("name", "\"shop\"", "a tenant (API key) sharing the arrivals"),
    none("api_key", "\"key-shop\"", "the key its requests carry"),
    none("share", "0.8", "its weight among the tenants"),
    none("phases", "{ \"promotion\" = 0.95 }", "its weight in the phases named"),
    none("request", "{ max_tokens = { fixed = 64 } }", "its own request shape"),
];
/// Each check's table and what its keys mean.
#[rustfmt::skip]
const CHECKS: &[(&str, &str, &[Key])] = &[
    ("shed_onset", "the gateway sheds by the predicted depth Q*", &[
        key("enabled", "whether the check runs"),
        key("tolerance", "the depth at the first shed may exceed Q* by this share"),
    ]),
    ("retry_after", "sheds carry a Retry-After tracking the drain", &[
        key("enabled", "whether the check runs"),
        key("tolerance", "the median error allowed against the drain time"),
        key("min_distinct", "distinct values required (from 5 sheds)"),
    ]),
    ("memory_ceiling", "peak RSS under [gateway] memory_ceiling", &[
        key("enabled", "whether the check runs"),
    ]),
    ("drain", "the backlog back to its baseline after the overload", &[
        key("enabled", "whether the check runs"),
        key("within", "the drain time allowed"),
    ]),
    ("stale_dispatch", "few calls made for callers who left", &[
        key("enabled", "whether the check runs"),
        key("max_share", "stale calls / all provider calls allowed"),
    ]),
    ("served_latency", "the served requests' p99", &[
        key("enabled", "whether the check runs"),
        key("p99_ms", "the SLO, in milliseconds"),
    ]),
    ("goodput", "answers during the overload against capacity", &[
        key("enabled", "whether the check runs"),
        key("min_share", "answers per second needed, as a share of capacity"),
    ]),
    ("no_silent_loss", "no attempt ends unanswered and unrefused", &[
        key("enabled", "whether the check runs"),
        key("max_lost", "attempts allowed to time out, reset or break"),
    ]),
    ("harness_valid", "the load generator kept its schedule", &[
        key("enabled", "whether the check runs"),
    ]),
    ("refusals_legible", "one (status, reason) per kind of refusal", &[
        key("enabled", "whether the check runs"),
        key("min_share", "a second kind counts from this share of a pair"),
    ]),
];

/// The flash-promotion shape's figures.
const NORMAL: Rate = Rate {
    value: 200.0,
    per_minute: true,
};
const PEAK: Rate = Rate {
    value: 2000.0,
    per_minute: true,
};
const PEAK_DURATION: Duration = Duration::from_secs(40 * 60);
const QUOTA_TPM: u64 = 500_000;
const TOKENS: u64 = 1_200;
const PATIENCE: Duration = Duration::from_secs(25);

/// A duration as a TOML string: `"40m"`, `"7.5s"`.
fn dur(d: Duration) -> String {
    if d.subsec_millis() != 0 && d.as_secs() < 60 {
        return format!("\"{}s\"", toml::Value::Float(d.as_secs_f64()));
    }
    format!("\"{}\"", humantime::format_duration(d)).replace(' ', "")
}

/// A figure given as a flag, else the shape's placeholder: its value and
/// why it is there.
fn given<T>(flag: Option<T>, shape: T, name: &str) -> (T, String) {
    match flag {
        Some(v) => (v, format!("from {name}")),
        None => (shape, "placeholder".to_string()),
    }
}

fn set(value: impl Into<String>, why: impl Into<String>) -> Set {
    Set {
        value: value.into(),
        why: why.into(),
    }
}

/// The serialised default of a config, as a TOML table.
fn table_of<T: serde::Serialize>(config: &T) -> toml::Table {
    toml::Table::try_from(config).unwrap_or_default()
}

impl InitOptions {
    /// The commented scenario `init` writes (see the module's docs).
    pub fn text(&self) -> Result<String, RunError> {
        self.render(false)
    }

    fn render(&self, minimal: bool) -> Result<String, RunError> {
        let shape = Shape::of(self)?;
        let mut w = Writer {
            out: String::new(),
            minimal,
        };
        shape.scenario(&mut w);
        shape.provider(&mut w);
        shape.gateway(&mut w);
        shape.load(&mut w);
        shape.checklist(&mut w);
        Ok(w.out)
    }
}

/// The figures a scenario is written from: each given, or the shape's,
/// with why it is there (`from --peak-rate`, `placeholder`).
#[derive(Debug, Clone)]
struct Shape {
    command: Option<Vec<String>>,
    target: Option<String>,
    spawned_here: bool,
    normal: Rate,
    why_normal: String,
    peak: Rate,
    why_peak: String,
    peak_for: Duration,
    why_for: String,
    quota: u64,
    why_quota: String,
    tokens: u64,
    why_tokens: String,
    patience: Duration,
    why_patience: String,
    dialect: Dialect,
    completion: u64,
    prompt: u64,
    flagless: bool,
    time_scale: u32,
    quota_scale: u32,
    chosen_dialect: Option<Dialect>,
}

impl Shape {
    fn of(o: &InitOptions) -> Result<Shape, RunError> {
        let command = match &o.gateway_command {
            Some(c) => Some(command(c)?),
            None => None,
        };
        let spawned_here = o.target.is_none() && command.is_none();
        let (normal, why_normal) = given(o.normal_rate, NORMAL, "--normal-rate");
        let (peak, why_peak) = given(o.peak_rate, PEAK, "--peak-rate");
        let (peak_for, why_for) = given(o.peak_duration, PEAK_DURATION, "--peak-duration");
        let (quota, why_quota) = given(
            o.quota_tokens_per_minute,
            QUOTA_TPM,
            "--quota-tokens-per-minute",
        );
        let (tokens, why_tokens) = given(o.tokens_per_request, TOKENS, "--tokens-per-request");
        let (patience, why_patience) = given(o.patience, PATIENCE, "--patience");
        let completion = (tokens / 6).max(1);
        let flagless = o.normal_rate.is_none()
            && o.peak_rate.is_none()
            && o.quota_tokens_per_minute.is_none()
            && o.tokens_per_request.is_none();
        Ok(Shape {
            command,
            target: o.target.clone(),
            spawned_here,
            normal,
            why_normal,
            peak,
            why_peak,
            peak_for,
            why_for,
            quota,
            why_quota,
            tokens,
            why_tokens,
            patience,
            why_patience,
            dialect: o.dialect.unwrap_or_default(),
            completion,
            prompt: tokens.saturating_sub(completion).max(1),
            flagless,
            // The reference gateway is compressed with the rest; a gateway
            // the harness does not configure is not, unless it scales
            // itself. A smaller account only for the shape's own figures.
            time_scale: if spawned_here { 10 } else { 1 },
            quota_scale: if spawned_here && flagless { 10 } else { 1 },
            chosen_dialect: o.dialect,
        })
    }

    /// The header comment and `[scenario]`.
    fn scenario(&self, w: &mut Writer) {
        let Shape {
            spawned_here,
            normal,
            peak,
            peak_for,
            quota,
            tokens,
            patience,
            time_scale,
            quota_scale,
            ..
        } = self.clone();
        let _ = writeln!(
            w.out,
            "# A rehearsal written by `rehearse init`: {} normally, {} for {} at the\n\
             # peak, against a provider quota of {} tokens a minute, {} tokens a request,\n\
             # callers waiting {}. Values marked `placeholder` are the flash-promotion\n\
             # shape's: replace them with your figures. Every other field is written at\n\
             # its default; one commented out has none (an example is given).\n\
             # `rehearse plan FILE` shows the arithmetic, `rehearse run FILE` rehearses it.",
            rate_text(normal),
            rate_text(peak),
            humantime::format_duration(peak_for),
            report::thousands(quota as f64),
            tokens,
            humantime::format_duration(patience),
        );
        w.line("");
        w.line("[scenario]  # the rehearsal: its name, seed and scale");
        w.line("name = \"my-gateway\"  # placeholder: its name in reports and run directories");
        w.line(&format!(
            "description = \"{} then {} for {}\"  # placeholder: one line on what is rehearsed",
            rate_text(normal),
            rate_text(peak),
            humantime::format_duration(peak_for)
        ));
        w.line("# seed = 42  # the provider's and the load's seed, unless they set their own");
        w.line(&format!(
            "quota_scale = {quota_scale}.0  # {}divides every quota, rate and count (1: full scale)",
            if quota_scale == 1 { "" } else { "placeholder: " }
        ));
        w.line(&format!(
            "time_scale = {time_scale}.0  # {}divides every duration, multiplies every rate{}",
            if time_scale == 1 { "" } else { "placeholder: " },
            if spawned_here {
                ""
            } else {
                " (1: a gateway the harness does not configure is not compressed)"
            }
        ));
        w.line("# prompt_bytes = \"6KB\"  # held per waiting request, for the plan (none: the prompt's size)");
    }

    /// `[provider]` and its tables.
    fn provider(&self, w: &mut Writer) {
        let Shape {
            quota,
            why_quota,
            why_tokens,
            completion,
            flagless,
            ..
        } = self.clone();
        // [provider]
        let provider = table_of(&fake_provider::ProviderConfig::default());
        let mut s = BTreeMap::new();
        s.insert(
            "completion_tokens",
            set(format!("{{ fixed = {completion} }}"), why_tokens.clone()),
        );
        w.table(
            "[provider]",
            "the fake LLM provider",
            PROVIDER,
            Some(&provider),
            &s,
            false,
        );
        let sub = |name: &str| provider.get(name).and_then(toml::Value::as_table).cloned();
        let mut s = BTreeMap::new();
        s.insert(
            "ttft",
            set(
                r#"{ lognormal = { median = "900ms", p99 = "2s" } }"#,
                "placeholder",
            ),
        );
        s.insert("per_token", set(r#"{ fixed = "20ms" }"#, "placeholder"));
        w.table(
            "[provider.latency]",
            "how long a call takes",
            LATENCY,
            sub("latency").as_ref(),
            &s,
            false,
        );
        w.table(
            "[provider.concurrency]",
            "calls in service at once",
            CONCURRENCY,
            sub("concurrency").as_ref(),
            &BTreeMap::new(),
            false,
        );
        let mut s = BTreeMap::new();
        s.insert(
            "tokens_per_minute",
            set(quota.to_string(), why_quota.clone()),
        );
        if flagless {
            s.insert("requests_per_minute", set("10000", "placeholder"));
        }
        w.table(
            "[provider.quota]",
            "the account's quota",
            QUOTA,
            sub("quota").as_ref(),
            &s,
            false,
        );
        w.table(
            "[provider.faults]",
            "faults, each a rate per call in 0..=1",
            FAULTS,
            sub("faults").as_ref(),
            &BTreeMap::new(),
            false,
        );
        w.table(
            "[[provider.timeline]]",
            "phases of the provider (none by default)",
            TIMELINE,
            None,
            &BTreeMap::new(),
            true,
        );
    }

    /// `[gateway]` and `[gateway.reference]`, commented out unless it is the gateway.
    fn gateway(&self, w: &mut Writer) {
        let Shape {
            command,
            target,
            spawned_here,
            patience,
            why_patience,
            completion,
            ..
        } = self.clone();
        // [gateway]
        let mut s = BTreeMap::new();
        s.insert("memory_ceiling", set("\"512MiB\"", "placeholder"));
        w.line("");
        w.line("[gateway]  # the gateway under test: exactly one of reference, command or url");
        match (&target, &command) {
            (Some(url), _) => {
                w.line(&format!(
                    "url = \"{url}\"  # from --target: a gateway already running"
                ));
                w.line("# command = [\"my-gateway\", \"--listen\", \"{listen}\"]  # or one the harness spawns");
            }
            (None, Some(argv)) => {
                let argv =
                    toml::Value::Array(argv.iter().cloned().map(toml::Value::String).collect());
                w.line(&format!(
                    "command = {argv}  # from --gateway-command: {{provider_url}} and {{listen}} are replaced"
                ));
                w.line("# url = \"http://127.0.0.1:9000\"  # or a gateway already running");
            }
            (None, None) => {
                w.line("# command = [\"my-gateway\", \"--upstream\", \"{provider_url}\", \"--listen\", \"{listen}\"]  # your own");
                w.line("# url = \"http://127.0.0.1:9000\"  # or a gateway already running");
            }
        }
        w.keys(GATEWAY, None, &s, false);
        let reference = table_of(&reference_gateway::GatewayConfig::new(
            reference_gateway::Mode::Deadline,
            "",
        ));
        let rsub = |name: &str| reference.get(name).and_then(toml::Value::as_table).cloned();
        let commented = !spawned_here;
        let mut s = BTreeMap::new();
        s.insert("mode", set("\"deadline\"", "placeholder"));
        w.table(
            "[gateway.reference]",
            "the built-in gateway (upstream and listen: the harness's)",
            REFERENCE,
            Some(&reference),
            &s,
            commented,
        );
        w.table(
            "[gateway.reference.bounded]",
            "bounded: a semaphore, a queue, a wait budget",
            BOUNDED,
            rsub("bounded").as_ref(),
            &BTreeMap::new(),
            commented,
        );
        let mut s = BTreeMap::new();
        s.insert("default_deadline", set(dur(patience), why_patience.clone()));
        s.insert(
            "expected_service",
            set(
                dur(expected_service(completion)),
                "placeholder (the provider's p99 TTFT + tokens x per_token, +25%)",
            ),
        );
        let mut deadline = rsub("deadline").unwrap_or_default();
        // Left out, it paces to the provider's quota: said commented out.
        deadline.remove("tokens_per_minute");
        w.table(
            "[gateway.reference.deadline]",
            "deadline: admits what can still be served in time",
            DEADLINE,
            Some(&deadline),
            &s,
            commented,
        );
        w.table(
            "[gateway.reference.aimd]",
            "aimd: an adaptive concurrency limit",
            AIMD,
            rsub("aimd").as_ref(),
            &BTreeMap::new(),
            commented,
        );
        w.line("# [gateway.reference.tenants]  # API keys' entitlements (none by default)");
        w.line("# \"key-a\" = { tokens_per_minute = 60000, requests_per_minute = 60 }");
    }

    /// `[load]` and its tables.
    fn load(&self, w: &mut Writer) {
        let Shape {
            spawned_here,
            normal,
            why_normal,
            peak,
            why_peak,
            peak_for,
            why_for,
            why_tokens,
            patience,
            why_patience,
            dialect,
            completion,
            prompt,
            chosen_dialect,
            ..
        } = self.clone();
        // [load]
        let mut s = BTreeMap::new();
        s.insert(
            "patience",
            set(
                format!("{{ fixed = {} }}", dur(patience)),
                why_patience.clone(),
            ),
        );
        if spawned_here {
            s.insert(
                "send_patience",
                set("true", "placeholder (the deadline gateway reads it)"),
            );
        }
        w.table("[load]", "the callers", LOAD, None, &s, false);
        for (name, rate, why_rate, lasts, why_lasts) in [
            (
                "before",
                normal,
                &why_normal,
                Duration::from_secs(120),
                "placeholder",
            ),
            ("peak", peak, &why_peak, peak_for, why_for.as_str()),
            (
                "after",
                normal,
                &why_normal,
                Duration::from_secs(300),
                "placeholder",
            ),
        ] {
            let (value, per) = rate.toml();
            let mut s = BTreeMap::new();
            s.insert("name", set(format!("\"{name}\""), "placeholder"));
            s.insert("duration", set(dur(lasts), why_lasts));
            s.insert("rate", set(value, why_rate.as_str()));
            s.insert("per", set(per, why_rate.as_str()));
            s.insert("arrivals", set("\"poisson\"", "placeholder"));
            w.table("[[load.phases]]", "played in order", PHASE, None, &s, false);
        }
        w.table(
            "[load.replay]",
            "a recorded log instead of phases (none by default)",
            REPLAY,
            None,
            &BTreeMap::new(),
            true,
        );
        let mut s = BTreeMap::new();
        if let Some(d) = chosen_dialect {
            s.insert(
                "dialect",
                set(format!("\"{}\"", dialect.as_str()), "from --dialect"),
            );
            if d == Dialect::Anthropic {
                s.insert(
                    "model",
                    set("\"claude-3-5-haiku-latest\"", "from --dialect"),
                );
            }
        }
        s.insert(
            "prompt_tokens",
            set(format!("{{ fixed = {prompt} }}"), why_tokens.clone()),
        );
        s.insert(
            "max_tokens",
            set(format!("{{ fixed = {completion} }}"), why_tokens.clone()),
        );
        s.insert("stream", set("0.3", "placeholder"));
        w.table(
            "[load.request]",
            "each request's shape",
            REQUEST,
            None,
            &s,
            false,
        );
        let mut s = BTreeMap::new();
        s.insert("policy", set("\"retry_after\"", "placeholder"));
        w.table(
            "[load.retry]",
            "what a caller does after a refusal",
            RETRY,
            None,
            &s,
            false,
        );
        w.table(
            "[[load.tenants]]",
            "API keys sharing the arrivals (none: one)",
            TENANT,
            None,
            &BTreeMap::new(),
            true,
        );
    }

    /// `[checklist]`: every check's table.
    fn checklist(&self, w: &mut Writer) {
        let Shape {
            patience,
            why_patience,
            ..
        } = self.clone();
        // [checklist]
        let checklist = table_of(&assertions::Thresholds::default());
        w.line("");
        w.line("[checklist]  # each check's thresholds (thresholds in time ÷ the time scale)");
        for (id, says, keys) in CHECKS {
            let mut s = BTreeMap::new();
            match *id {
                "served_latency" => {
                    s.insert(
                        "p99_ms",
                        set(patience.as_millis().to_string(), why_patience.clone()),
                    );
                }
                "goodput" => {
                    s.insert("min_share", set("0.7", "placeholder"));
                }
                _ => {}
            }
            let sub = checklist.get(*id).and_then(toml::Value::as_table);
            w.table(&format!("[checklist.{id}]"), says, keys, sub, &s, false);
        }
        // A check this file has no words for yet: its defaults, said plainly.
        for (id, table) in &checklist {
            let Some(table) = table
                .as_table()
                .filter(|_| !CHECKS.iter().any(|c| c.0 == id))
            else {
                continue;
            };
            w.line("");
            w.line(&format!(
                "[checklist.{id}]  # see the checklist's table in the README"
            ));
            for (key, value) in table {
                let says = if key == "enabled" {
                    "whether the check runs"
                } else {
                    "its threshold"
                };
                if !w.minimal {
                    w.line(&format!("{key} = {value}  # {says}"));
                }
            }
        }
    }
}

/// The peak's tail service time the deadline gateway admits by: the
/// placeholder provider's p99 TTFT (2 s) plus `completion` tokens at 20 ms,
/// and a quarter more (7.5 s for the shape's 200 tokens).
fn expected_service(completion: u64) -> Duration {
    let s = (2.0 + completion as f64 * 0.02) * 1.25;
    Duration::from_millis((s * 10.0).round() as u64 * 100)
}

/// A rate as a person reads it: `200/min`, `3.5/s`.
fn rate_text(r: Rate) -> String {
    let v = toml::Value::Float(r.value).to_string().replace(".0", "");
    format!("{v}/{}", if r.per_minute { "min" } else { "s" })
}

/// `--gateway-command` split as a shell would, with `{listen}` in it.
fn command(text: &str) -> Result<Vec<String>, RunError> {
    let argv = shlex::split(text)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            RunError::flag(
                format!("--gateway-command `{text}`"),
                "unbalanced quotes, or empty",
            )
        })?;
    if !argv.iter().any(|a| a.contains("{listen}")) {
        return Err(RunError::flag(
            format!("--gateway-command `{text}`"),
            "pass `{listen}` to the program (where it must listen), \
             and `{provider_url}` where its upstream goes",
        ));
    }
    Ok(argv)
}

/// Writes the scenario `opts` describe to `path` (never over an existing
/// file unless `force`) and returns it validated, as the file reads.
pub fn write_init(path: &Path, opts: &InitOptions, force: bool) -> Result<Scenario, RunError> {
    if path.exists() && !force {
        return Err(RunError::Exists {
            path: path.to_path_buf(),
        });
    }
    let text = opts.text()?;
    // Validated before it is written, once, as the file at `path` (its
    // name and folder): a flag's value the scenario refuses (a bad URL)
    // leaves no file behind.
    let scenario = Scenario::from_str(&text, &path.display().to_string(), path)?;
    crate::rundir::write_atomic(path, text.as_bytes())?;
    Ok(scenario)
}

/// Every key the scenario tables `init` writes may hold, dotted
/// (`provider.latency.ttft`, `load.phases.rate`), from the config types'
/// own serde field lists (each check's table from the thresholds'
/// defaults): `[provider]` and its tables,
/// `[gateway]` and `[gateway.reference]` (but `upstream` and `listen`,
/// which the harness sets), `[load]` and its tables, `[checklist]` and
/// each check's table.
///
/// ```
/// let keys = harness::scenario_keys();
/// assert!(keys.contains(&"provider.latency.ttft".to_string()));
/// assert!(keys.contains(&"checklist.drain.within".to_string()));
/// ```
pub fn scenario_keys() -> Vec<String> {
    use fake_provider::config as p;
    let tables: Vec<(&str, &[&str])> = vec![
        ("provider", fields::<p::ProviderConfig>()),
        ("provider.latency", fields::<p::Latency>()),
        ("provider.concurrency", fields::<p::Concurrency>()),
        ("provider.quota", fields::<p::Quota>()),
        ("provider.faults", fields::<p::Faults>()),
        ("provider.timeline", fields::<p::Phase>()),
        ("gateway", fields::<crate::scenario::GatewayRaw>()),
        (
            "gateway.reference",
            fields::<reference_gateway::GatewayConfig>(),
        ),
        (
            "gateway.reference.bounded",
            fields::<reference_gateway::BoundedConfig>(),
        ),
        (
            "gateway.reference.deadline",
            fields::<reference_gateway::DeadlineConfig>(),
        ),
        (
            "gateway.reference.aimd",
            fields::<reference_gateway::AimdConfig>(),
        ),
        ("load", fields::<loadgen::LoadConfig>()),
        ("load.phases", fields::<loadgen::PhaseConfig>()),
        ("load.replay", fields::<loadgen::ReplayConfig>()),
        ("load.request", fields::<loadgen::RequestConfig>()),
        ("load.retry", fields::<loadgen::RetryConfig>()),
        ("load.tenants", fields::<loadgen::LoadTenant>()),
        ("checklist", fields::<assertions::Thresholds>()),
    ];
    let mut keys = Vec::new();
    for (table, names) in tables {
        for name in names {
            if table == "gateway.reference" && matches!(*name, "upstream" | "listen") {
                continue;
            }
            keys.push(format!("{table}.{name}"));
        }
    }
    // Each check's table, from the thresholds' defaults (every field of
    // each has one): a check added to the checklist is counted here too.
    for (check, table) in table_of(&assertions::Thresholds::default()) {
        for name in table.as_table().into_iter().flat_map(|t| t.keys()) {
            keys.push(format!("checklist.{check}.{name}"));
        }
    }
    keys
}

/// The field names serde knows a struct by (those `deserialize_struct` is
/// handed): asked of a deserializer that records them and reads nothing.
fn fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Fields(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> serde::Deserializer<'de> for &mut Fields {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut f = Fields(None);
    let _ = T::deserialize(&mut f);
    f.0.unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenarios(opts: &InitOptions) -> (Scenario, Scenario) {
        let read = |text: &str| {
            Scenario::from_str(text, "init.toml", Path::new("init.toml"))
                .unwrap_or_else(|e| panic!("{e}\n{text}"))
        };
        (
            read(&opts.render(false).unwrap()),
            read(&opts.render(true).unwrap()),
        )
    }

    /// Reading the file gives what leaving every default field out gives:
    /// each default written is the default.
    fn defaults_hold(opts: &InitOptions) {
        let (full, minimal) = scenarios(opts);
        assert_eq!(full.provider, minimal.provider);
        assert_eq!(full.checklist, minimal.checklist);
        assert_eq!(full.gateway.kind, minimal.gateway.kind);
        // `[load]` field by field as each text writes it: the validated
        // plan would not tell a default written from one that does not
        // matter (a patience header while none is sent).
        let load_as_written = |minimal: bool| {
            #[derive(serde::Deserialize)]
            struct File {
                load: loadgen::LoadConfig,
            }
            let text = opts.render(minimal).unwrap();
            format!("{:?}", toml::from_str::<File>(&text).unwrap().load)
        };
        assert_eq!(load_as_written(false), load_as_written(true));
        let debug = |s: &Scenario| {
            format!(
                "{:?}\n{:?}\n{:?}",
                s.meta,
                s.load_shape,
                (
                    &s.gateway.memory_ceiling,
                    s.gateway.ready_timeout,
                    s.gateway.restart,
                    s.gateway.restart_delay,
                    s.gateway.scale_memory,
                    s.gateway.memory_floor
                )
            )
        };
        assert_eq!(debug(&full), debug(&minimal));
    }

    fn flags() -> InitOptions {
        InitOptions {
            normal_rate: Some("2/s".parse().unwrap()),
            peak_rate: Some("30/s".parse().unwrap()),
            peak_duration: Some(Duration::from_secs(90)),
            quota_tokens_per_minute: Some(90_000),
            tokens_per_request: Some(600),
            patience: Some(Duration::from_millis(12_500)),
            dialect: Some(Dialect::Anthropic),
            ..InitOptions::default()
        }
    }

    #[test]
    fn every_default_written_is_the_default() {
        defaults_hold(&InitOptions::default());
        defaults_hold(&flags());
        defaults_hold(&InitOptions {
            target: Some("http://127.0.0.1:9000".into()),
            ..flags()
        });
        defaults_hold(&InitOptions {
            gateway_command: Some("my-gw --listen {listen} --upstream '{provider_url}'".into()),
            ..InitOptions::default()
        });
    }

    #[test]
    fn every_key_of_every_table_is_written() {
        let text = InitOptions::default().text().unwrap();
        let mut written = std::collections::BTreeSet::new();
        let mut table = String::new();
        for line in text.lines() {
            let line = line.strip_prefix("# ").unwrap_or(line);
            if let Some(h) = line.strip_prefix('[') {
                table = h
                    .trim_start_matches('[')
                    .split(']')
                    .next()
                    .unwrap()
                    .to_string();
                written.insert(table.clone());
            } else if let Some((k, _)) = line.split_once(" = ") {
                written.insert(format!("{table}.{k}"));
            }
        }
        for k in scenario_keys() {
            assert!(written.contains(&k), "{k} is not written:\n{text}");
        }
    }

    #[test]
    fn the_flags_land_where_they_say() {
        let (s, _) = scenarios(&flags());
        assert_eq!(s.provider.quota.tokens_per_minute, Some(90_000));
        assert_eq!(s.load_plan.dialect(), Dialect::Anthropic);
        let peak = s.load_plan.phases()[1];
        assert_eq!((peak.name, peak.from_per_sec), ("peak", 30.0));
        assert_eq!(peak.duration, Duration::from_secs(90));
        assert_eq!(s.checklist.served_latency.p99_ms, 12_500.0);
        let (s, _) = scenarios(&InitOptions {
            gateway_command: Some("gw --listen {listen} --name 'a b'".into()),
            ..InitOptions::default()
        });
        let crate::GatewayKind::Command(argv) = &s.gateway.kind else {
            panic!("{:?}", s.gateway.kind)
        };
        assert_eq!(argv, &["gw", "--listen", "{listen}", "--name", "a b"]);
        assert!(InitOptions {
            gateway_command: Some("gw --port 9".into()),
            ..InitOptions::default()
        }
        .text()
        .is_err());
    }
}
