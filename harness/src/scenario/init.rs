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
//! commented out, with an example. The fields, their defaults and their
//! comments are each config's template (see the `template` module), kept
//! beside its type; this module only sets the figures. The tests hold
//! every template to its type's serde fields and defaults.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use loadgen::{Rate, RateUnit};
use wire::{Dialect, Scale};

use crate::error::RunError;
use crate::host::Input;
use crate::scenario::template::{Block, Template};
use crate::scenario::{apply_sets, Scenario, ScenarioError};

/// The scenario rehearsed when none is named: the CI smoke rehearsal
/// (`scenarios/ci-smoke.toml`), shipped in the binary so that a fresh
/// checkout runs it from anywhere.
pub const BUILTIN_SCENARIO: &str = include_str!("../../../scenarios/ci-smoke.toml");

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
    /// Arrivals before and after the peak: N (per second), N/s, N/min or
    /// N/h, as a scenario's `rate` is written.
    #[cfg_attr(feature = "clap", arg(long, value_name = "RATE", value_parser = parse_rate))]
    pub normal_rate: Option<Rate>,
    /// Arrivals during the peak: N (per second), N/s, N/min or N/h.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "RATE", requires = "peak_duration", value_parser = parse_rate)
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
    /// The rehearsal's time scale: every duration ÷ N, every rate × N
    /// (default 10; 1: real time).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = crate::scale_factor))]
    pub time_scale: Option<f64>,
    /// The rehearsal's quota scale: every quota, rate and count ÷ N
    /// (default 10; 1: the account's own figures).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = crate::scale_factor))]
    pub quota_scale: Option<f64>,
}

/// The scales `init` writes unless asked for others: a tenth of the
/// account, a tenth of the time (the flash promotion's 47 minutes in 4.7,
/// at the per-minute rates of the event).
const DEFAULT_SCALE: f64 = 10.0;

/// A rate flag, read as a scenario's `rate` is ([`Rate`]), above 0; a bare
/// number is per second.
#[cfg(feature = "clap")]
fn parse_rate(text: &str) -> Result<Rate, String> {
    let r: Rate = text.parse()?;
    if r.value <= 0.0 {
        return Err(format!("`{}`: expected a rate above 0", text.trim()));
    }
    Ok(Rate {
        unit: Some(r.unit.unwrap_or(RateUnit::Second)),
        ..r
    })
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

/// How `init` writes a field of a template.
enum Set {
    /// This value, given as a flag (`from --peak-rate`) or the shape's
    /// placeholder (`placeholder`).
    Given { value: String, why: String },
    /// This value (the default), with a note after what it is.
    Note { value: String, note: String },
    /// Commented out: in a scenario it has no default of its own (the
    /// deadline gateway's rate is then the provider's quota).
    LeftOut,
    /// Commented out as the template has it, with a note after what it
    /// is (what uncommenting it does).
    Example { note: String },
    /// Not written: the harness sets it (the reference gateway's
    /// `upstream` and `listen`).
    Omitted,
}

/// The fields of one table as `init` sets them, by key; the others are
/// written as the template has them.
type Sets = BTreeMap<&'static str, Set>;

/// One writing of a template's table: its fields as set, and whether the
/// whole table is written as comments.
type Rendition = (Sets, bool);

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

    /// A table: its header at `path` with what it `says`, then each key:
    /// as `set`, else as the template has it (at its default, or
    /// commented out with an example). `commented`: the whole table as
    /// comments.
    fn table(&mut self, path: &str, block: &Block<'_>, says: &str, (set, commented): &Rendition) {
        let hash = if *commented { "# " } else { "" };
        let array = block.header.as_ref().is_some_and(|h| h.array);
        let header = if array {
            format!("[[{path}]]")
        } else {
            format!("[{path}]")
        };
        self.line("");
        self.line(&format!("{hash}{header}  # {says}"));
        for k in &block.keys {
            let (name, says) = (k.name, k.says);
            let line = match set.get(name) {
                Some(Set::Omitted) => continue,
                Some(Set::LeftOut) => format!("# {name} = {}  # {says}", k.value),
                Some(Set::Example { note }) => format!("# {name} = {}  # {says}; {note}", k.value),
                Some(Set::Given { value, why }) => {
                    format!("{hash}{name} = {value}  # {why}: {says}")
                }
                Some(Set::Note { value, note }) => {
                    format!("{hash}{name} = {value}  # {says}; {note}")
                }
                None if k.commented => format!("# {name} = {}  # {says}", k.value),
                None if self.minimal => continue,
                None => format!("{hash}{name} = {}  # {says}", k.value),
            };
            self.line(&line);
        }
    }

    /// A config's template below `prefix` (`provider`): its root as
    /// `[prefix]` with what it `says`, then each of its tables, each
    /// written as often as `renditions` says for it (once, as the template
    /// has it, unless it says otherwise; the load's phases three times).
    fn config(
        &mut self,
        prefix: &str,
        says: &str,
        template: &str,
        mut renditions: impl FnMut(&Block<'_>) -> Vec<Rendition>,
    ) {
        for block in &parsed(template).blocks {
            let (path, says) = match &block.header {
                None => (prefix.to_string(), says),
                Some(h) => (format!("{prefix}.{}", h.path), h.says),
            };
            for rendition in renditions(block) {
                self.table(&path, block, says, &rendition);
            }
        }
    }
}

/// A template shipped in the binary, read.
fn parsed(template: &str) -> Template<'_> {
    // Every template is a constant of the binary, and the tests read each
    // (`every_template_holds_to_its_type`): it cannot fail here.
    Template::parse(template).expect("a shipped template reads (tested)")
}

/// A table as the template has it.
fn as_written(block: &Block<'_>) -> Vec<Rendition> {
    vec![(Sets::new(), block.commented())]
}

/// A table written once with these fields set.
fn with(block: &Block<'_>, sets: impl IntoIterator<Item = (&'static str, Set)>) -> Vec<Rendition> {
    vec![(sets.into_iter().collect(), block.commented())]
}

/// The `[scenario]` and `[gateway]` tables' template, and the places of
/// the other configs in a scenario (`[provider]`, `[load]`, ...).
const SCENARIO_TEMPLATE: &str = include_str!("scenario.toml");

/// The flash-promotion shape's figures.
const NORMAL: Rate = Rate {
    value: 200.0,
    unit: Some(RateUnit::Minute),
};
const PEAK: Rate = Rate {
    value: 2000.0,
    unit: Some(RateUnit::Minute),
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
fn given<T>(flag: Option<T>, shape: T, name: Input) -> (T, String) {
    match flag {
        Some(v) => (v, format!("from {name}")),
        None => (shape, "placeholder".to_string()),
    }
}

/// A value given, and why (`from --patience`, `placeholder`).
fn set(value: impl Into<String>, why: impl Into<String>) -> Set {
    Set::Given {
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
        let scenario = parsed(SCENARIO_TEMPLATE);
        let says = |path: &str| {
            scenario
                .block(path)
                .and_then(|b| b.header.as_ref())
                .map_or("", |h| h.says)
        };
        shape.intro(&mut w);
        if let Some(block) = scenario.block("scenario") {
            w.table("scenario", block, says("scenario"), &shape.scenario());
        }
        w.config(
            "provider",
            says("provider"),
            fake_provider::ProviderConfig::TEMPLATE,
            |b| shape.provider(b),
        );
        if let Some(block) = scenario.block("gateway") {
            w.table("gateway", block, says("gateway"), &shape.gateway());
        }
        w.config(
            "gateway.reference",
            says("gateway.reference"),
            reference_gateway::GatewayConfig::TEMPLATE,
            |b| shape.reference(b),
        );
        w.config("load", says("load"), loadgen::LoadConfig::TEMPLATE, |b| {
            shape.load(b)
        });
        w.config(
            "checklist",
            says("checklist"),
            assertions::Thresholds::TEMPLATE,
            |b| shape.checklist(b),
        );
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
    completion: u64,
    prompt: u64,
    flagless: bool,
    /// The scales written, and why each (`from --time-scale`, the default).
    time_scale: f64,
    why_time: String,
    quota_scale: f64,
    why_quota_scale: String,
    chosen_dialect: Option<Dialect>,
}

impl Shape {
    fn of(o: &InitOptions) -> Result<Shape, RunError> {
        let command = match &o.gateway_command {
            Some(c) => Some(command(c)?),
            None => None,
        };
        let spawned_here = o.target.is_none() && command.is_none();
        let scale = |flag: Option<f64>, name: Input| match flag {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(RunError::flag_value(
                name,
                &v.to_string(),
                "must be a number above 0",
            )),
            Some(v) => Ok((v, format!("from {name}"))),
            None => Ok((DEFAULT_SCALE, format!("the default ({name} N to change)"))),
        };
        let (time_scale, why_time) = scale(o.time_scale, Input::TimeScale)?;
        let (quota_scale, why_quota_scale) = scale(o.quota_scale, Input::QuotaScale)?;
        let (normal, why_normal) = given(o.normal_rate, NORMAL, Input::NormalRate);
        let (peak, why_peak) = given(o.peak_rate, PEAK, Input::PeakRate);
        let (peak_for, why_for) = given(o.peak_duration, PEAK_DURATION, Input::PeakDuration);
        let (quota, why_quota) = given(
            o.quota_tokens_per_minute,
            QUOTA_TPM,
            Input::QuotaTokensPerMinute,
        );
        let (tokens, why_tokens) = given(o.tokens_per_request, TOKENS, Input::TokensPerRequest);
        let (patience, why_patience) = given(o.patience, PATIENCE, Input::Patience);
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
            completion,
            prompt: tokens.saturating_sub(completion).max(1),
            flagless,
            // Whatever the gateway and the figures: a scale changes only
            // when asked (what it means for a gateway the harness does not
            // configure is said where it is written, and by `init`).
            time_scale,
            why_time,
            quota_scale,
            why_quota_scale,
            chosen_dialect: o.dialect,
        })
    }

    /// The header comment.
    fn intro(&self, w: &mut Writer) {
        let _ = writeln!(
            w.out,
            "# A rehearsal written by `rehearse init`: {} normally, {} for {} at the\n\
             # peak, against a provider quota of {} tokens a minute, {} tokens a request,\n\
             # callers waiting {}. Values marked `placeholder` are the flash-promotion\n\
             # shape's: replace them with your figures. Every other field is written at\n\
             # its default; one commented out has none (an example is given).\n\
             # `rehearse plan FILE` shows the arithmetic, `rehearse run FILE` rehearses it.",
            rate_text(self.normal),
            rate_text(self.peak),
            humantime::format_duration(self.peak_for),
            wire::number::count(self.quota),
            self.tokens,
            humantime::format_duration(self.patience),
        );
    }

    /// `[scenario]`: a name and a description (no figures: a phase
    /// edited later would leave them stale; the run says the phases it
    /// plays), and the scales, each with why it is there.
    fn scenario(&self) -> Rendition {
        let mut s = Sets::new();
        s.insert("name", set("\"my-gateway\"", "placeholder"));
        let description = "\"a flash promotion: normal traffic, a peak, then normal again\"";
        s.insert("description", set(description, "placeholder"));
        let number = |v: f64| toml::Value::Float(v).to_string();
        s.insert(
            "quota_scale",
            Set::Note {
                value: number(self.quota_scale),
                note: self.why_quota_scale.clone(),
            },
        );
        let mut why_time = self.why_time.clone();
        if let Some(note) = self.time_scale_note() {
            why_time = format!("{why_time}; {note}");
        }
        s.insert(
            "time_scale",
            Set::Note {
                value: number(self.time_scale),
                note: why_time,
            },
        );
        (s, false)
    }

    /// What the time scale means for the gateway written: the reference
    /// gateway is compressed with the rest; a command is told the scale to
    /// compress itself; a gateway already running is not compressed.
    fn time_scale_note(&self) -> Option<String> {
        if (self.time_scale - 1.0).abs() < f64::EPSILON || self.spawned_here {
            return None;
        }
        Some(match &self.target {
            Some(_) => format!(
                "your gateway is not started by the harness, so not compressed: run with \
                 {} once its own timeouts are divided by {}, or write 1.0 \
                 (real time)",
                Input::AllowTimeScale,
                scale_text(self.time_scale)
            ),
            None => "your command is told it in REHEARSE_TIME_SCALE, to divide its own \
                     timeouts by"
                .into(),
        })
    }

    /// `[provider]` and its tables: the answers' length, the latency and
    /// the quota.
    fn provider(&self, block: &Block<'_>) -> Vec<Rendition> {
        match block.path() {
            "" => with(
                block,
                [
                    (
                        "completion_tokens",
                        set(
                            format!("{{ fixed = {} }}", self.completion),
                            &self.why_tokens,
                        ),
                    ),
                    // The one `[provider]` is `default`: only `[[providers]]` name one.
                    ("name", Set::Omitted),
                ],
            ),
            "latency" => with(
                block,
                [
                    (
                        "ttft",
                        set(
                            r#"{ lognormal = { median = "900ms", p99 = "2s" } }"#,
                            "placeholder",
                        ),
                    ),
                    ("per_token", set(r#"{ fixed = "20ms" }"#, "placeholder")),
                ],
            ),
            "quota" => {
                let mut s = Sets::new();
                s.insert(
                    "tokens_per_minute",
                    set(self.quota.to_string(), &self.why_quota),
                );
                if self.flagless {
                    s.insert("requests_per_minute", set("10000", "placeholder"));
                }
                vec![(s, false)]
            }
            _ => as_written(block),
        }
    }

    /// `[gateway]`: the gateway given (a URL or a command), else the
    /// reference gateway's table below; the other gateways as examples,
    /// each saying what uncommenting it does (each alone leaves a valid
    /// file: a `url` or `command` sets the reference gateway aside).
    fn gateway(&self) -> Rendition {
        let mut s = Sets::new();
        let example = |note: &str| Set::Example { note: note.into() };
        if let Some(url) = &self.target {
            s.insert(
                "url",
                set(format!("\"{url}\""), format!("from {}", Input::Target)),
            );
            s.insert("command", example("instead of `url`: comment that out"));
            // A gateway the harness does not start runs under no limit of its.
            s.insert("memory_limit", Set::Omitted);
        } else if let Some(argv) = &self.command {
            let argv = toml::Value::Array(argv.iter().cloned().map(toml::Value::String).collect());
            s.insert(
                "command",
                set(argv.to_string(), format!("from {}", Input::GatewayCommand)),
            );
            s.insert("url", example("instead of `command`: comment that out"));
        } else {
            let aside =
                "uncommented, it is the gateway, and [gateway.reference] below is set aside";
            s.insert("command", example(aside));
            s.insert("url", example(aside));
        }
        s.insert("memory_ceiling", set("\"512MiB\"", "placeholder"));
        (s, false)
    }

    /// `[gateway.reference]` and its tables, commented out unless it is
    /// the gateway: the deadline mode, admitting by the callers' patience.
    fn reference(&self, block: &Block<'_>) -> Vec<Rendition> {
        let commented = !self.spawned_here || block.commented();
        let mut s = Sets::new();
        match block.path() {
            "" => {
                s.insert("mode", set("\"deadline\"", "placeholder"));
                s.insert("upstream", Set::Omitted);
                s.insert("listen", Set::Omitted);
            }
            "deadline" => {
                // Left out, it paces to the provider's quota.
                s.insert("tokens_per_minute", Set::LeftOut);
                s.insert(
                    "default_deadline",
                    set(dur(self.patience), &self.why_patience),
                );
                s.insert(
                    "expected_service",
                    set(
                        dur(expected_service(self.completion)),
                        "placeholder (the provider's p99 TTFT + tokens x per_token, +25%)",
                    ),
                );
            }
            _ => {}
        }
        vec![(s, commented)]
    }

    /// `[load]` and its tables: the patience, three phases (before, the
    /// peak, after), the request's shape, retries after a Retry-After.
    fn load(&self, block: &Block<'_>) -> Vec<Rendition> {
        match block.path() {
            "" => {
                let mut s = Sets::new();
                s.insert(
                    "patience",
                    set(
                        format!("{{ fixed = {} }}", dur(self.patience)),
                        &self.why_patience,
                    ),
                );
                if self.spawned_here {
                    s.insert(
                        "send_patience",
                        set("true", "placeholder (the deadline gateway reads it)"),
                    );
                }
                vec![(s, false)]
            }
            "phases" => self.phases(),
            "request" => {
                let mut s = Sets::new();
                if let Some(d) = self.chosen_dialect {
                    s.insert(
                        "dialect",
                        set(
                            format!("\"{}\"", d.as_str()),
                            format!("from {}", Input::Dialect),
                        ),
                    );
                    if d == Dialect::Anthropic {
                        s.insert(
                            "model",
                            set(
                                "\"claude-3-5-haiku-latest\"",
                                format!("from {}", Input::Dialect),
                            ),
                        );
                    }
                }
                let fixed = |n: u64| format!("{{ fixed = {n} }}");
                s.insert("prompt_tokens", set(fixed(self.prompt), &self.why_tokens));
                s.insert("max_tokens", set(fixed(self.completion), &self.why_tokens));
                s.insert("stream", set("0.3", "placeholder"));
                vec![(s, false)]
            }
            "retry" => with(block, [("policy", set("\"retry_after\"", "placeholder"))]),
            _ => as_written(block),
        }
    }

    /// The three `[[load.phases]]`: the normal rate for 2 minutes, the
    /// peak, the normal rate for 5 minutes.
    fn phases(&self) -> Vec<Rendition> {
        let before = Duration::from_secs(120);
        let after = Duration::from_secs(300);
        [
            (
                "before",
                self.normal,
                &self.why_normal,
                before,
                "placeholder",
            ),
            (
                "peak",
                self.peak,
                &self.why_peak,
                self.peak_for,
                self.why_for.as_str(),
            ),
            ("after", self.normal, &self.why_normal, after, "placeholder"),
        ]
        .into_iter()
        .map(|(name, rate, why_rate, lasts, why_lasts)| {
            let mut s = Sets::new();
            s.insert("name", set(format!("\"{name}\""), "placeholder"));
            s.insert("duration", set(dur(lasts), why_lasts));
            s.insert(
                "rate",
                set(format!("\"{}\"", rate_text(rate)), why_rate.as_str()),
            );
            s.insert("per", Set::LeftOut);
            s.insert("arrivals", set("\"poisson\"", "placeholder"));
            (s, false)
        })
        .collect()
    }

    /// `[checklist]`: the SLO from the patience, and a goodput a gateway
    /// that sheds can meet.
    fn checklist(&self, block: &Block<'_>) -> Vec<Rendition> {
        match block.path() {
            "served_latency" => with(
                block,
                [(
                    "p99_ms",
                    set(self.patience.as_millis().to_string(), &self.why_patience),
                )],
            ),
            "goodput" => with(block, [("min_share", set("0.7", "placeholder"))]),
            _ => as_written(block),
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

/// A scale as a person reads it: `10`, `2.5`.
fn scale_text(v: f64) -> String {
    loadgen::Rate::bare(v).to_string()
}

/// A rate as a person reads it: `200/min`, `3.5/s` (a bare number is per
/// second).
fn rate_text(r: Rate) -> String {
    Rate {
        unit: Some(r.unit.unwrap_or(RateUnit::Second)),
        ..r
    }
    .to_string()
}

/// `--gateway-command` split as a shell would, with `{listen}` in it.
fn command(text: &str) -> Result<Vec<String>, RunError> {
    let argv = shlex::split(text)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            RunError::flag_value(
                Input::GatewayCommand,
                &format!("`{text}`"),
                "unbalanced quotes, or empty",
            )
        })?;
    if !argv.iter().any(|a| a.contains("{listen}")) {
        return Err(RunError::flag_value(
            Input::GatewayCommand,
            &format!("`{text}`"),
            "pass `{listen}` to the program (where it must listen), \
             and `{provider_url}` where its upstream goes",
        ));
    }
    Ok(argv)
}

impl InitOptions {
    /// What `init` says of the scenario it wrote to `file`: the rehearsal
    /// at the scales written (its peak rate, its length, its peak
    /// backlog), why each scale is what it is and what 1 would give, and
    /// how to rehearse it.
    pub fn said(&self, scenario: &Scenario, file: &Path) -> Result<Vec<String>, RunError> {
        let shape = Shape::of(self)?;
        let plan = crate::plan::plan(scenario);
        let full = &plan.full;
        let peak_per_s = |f: &wire::Figures| {
            f.phases
                .iter()
                .map(|p| p.offered_per_min / 60.0)
                .fold(0.0, f64::max)
        };
        let length = |f: &wire::Figures| {
            let s: f64 = f.phases.iter().map(|p| p.duration_s).sum();
            humantime::format_duration(Duration::from_secs(s.round() as u64)).to_string()
        };
        let (q, t) = (shape.quota_scale, shape.time_scale);
        let r = &plan.rehearsal;
        let passing = if r.passthrough_peak_waiting >= 0.5 {
            format!(
                "; one that passes each request on holds up to {} calls waiting at the provider",
                wire::number::thousands(r.passthrough_peak_waiting)
            )
        } else if r.passthrough_refused >= 0.5 {
            format!(
                "; one that passes each request on relays {} refusals of the provider and holds none",
                wire::number::thousands(r.passthrough_refused)
            )
        } else {
            String::new()
        };
        let mut said = vec![format!(
            "The rehearsal written (quota ÷ {}, time ÷ {}): {} requests/s at the peak, {} long, \
             a peak backlog of {} requests for a gateway that holds them{passing}.",
            scale_text(q),
            scale_text(t),
            rate_per_s(peak_per_s(r)),
            length(r),
            wire::number::thousands(r.peak_backlog),
        )];
        let at_quota_1 = full.scaled(Scale {
            time: t,
            quota: 1.0,
        });
        said.push(format!(
            "quota ÷ {}: {}; at 1, the account's own figures: {} requests/s at the peak, a peak \
             backlog of {}.",
            scale_text(q),
            shape.why_quota_scale,
            rate_per_s(peak_per_s(&at_quota_1)),
            wire::number::thousands(at_quota_1.peak_backlog),
        ));
        said.push(format!(
            "time ÷ {}: {}; at 1, real time: {} long.{}",
            scale_text(t),
            shape.why_time,
            length(full),
            shape
                .time_scale_note()
                .map(|n| format!(" For this gateway: {n}."))
                .unwrap_or_default(),
        ));
        let unscaled_target = shape.target.is_some() && (t - 1.0).abs() > f64::EPSILON;
        said.push(format!(
            "next: `rehearse plan {f}` for the arithmetic, `rehearse run {f}{}` to rehearse it",
            if unscaled_target {
                format!(" {}", Input::AllowTimeScale)
            } else {
                String::new()
            },
            f = file.display()
        ));
        Ok(said)
    }
}

/// Requests per second with a decimal under 100: `33.3`, `333`.
fn rate_per_s(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        wire::number::thousands(v)
    }
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
    crate::run::rundir::write_atomic(path, text.as_bytes())?;
    Ok(scenario)
}

/// Every key the scenario tables `init` writes may hold, dotted
/// (`provider.latency.ttft`, `load.phases.rate`), from the config types'
/// own serde field lists (each check's table from the thresholds'
/// defaults): `[provider]` and its tables,
/// `[gateway]` and `[gateway.reference]` (but `upstream` and `listen`,
/// which the harness sets; and `[provider]`'s `name`, which is
/// `default`), `[load]` and its tables, `[checklist]` and
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
        ("load.clients", fields::<loadgen::ClientsConfig>()),
        ("checklist", fields::<assertions::Thresholds>()),
    ];
    let mut keys = Vec::new();
    for (table, names) in tables {
        for name in names {
            if table == "gateway.reference" && matches!(*name, "upstream" | "listen") {
                continue;
            }
            // The one `[provider]` is `default`: only `[[providers]]` name one.
            if table == "provider" && *name == "name" {
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
        assert_eq!(full.providers, minimal.providers);
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

    /// The `[scenario]` and `[gateway]` tables of [`SCENARIO_TEMPLATE`].
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ScenarioTables {
        scenario: crate::scenario::Meta,
        gateway: crate::scenario::GatewayRaw,
    }

    #[test]
    fn every_template_holds_to_its_type() {
        use crate::scenario::template::tests::check;
        check::<fake_provider::ProviderConfig>(
            "provider",
            fake_provider::ProviderConfig::TEMPLATE,
            &[],
        );
        check::<loadgen::LoadConfig>("load", loadgen::LoadConfig::TEMPLATE, &[]);
        // Serde gives `upstream` an empty default that validation refuses:
        // it is a value to give, written commented out.
        check::<reference_gateway::GatewayConfig>(
            "gateway",
            reference_gateway::GatewayConfig::TEMPLATE,
            &["upstream"],
        );
        check::<assertions::Thresholds>("checklist", assertions::Thresholds::TEMPLATE, &[]);
        check::<ScenarioTables>("scenario", SCENARIO_TEMPLATE, &[]);
    }

    /// The gateways `init` may write: the reference gateway, a target, a
    /// command.
    fn each_gateway() -> [(&'static str, InitOptions); 3] {
        [
            ("reference", InitOptions::default()),
            (
                "target",
                InitOptions {
                    target: Some("http://127.0.0.1:9000".into()),
                    ..InitOptions::default()
                },
            ),
            (
                "command",
                InitOptions {
                    gateway_command: Some("gw --listen {listen} --upstream {provider_url}".into()),
                    ..InitOptions::default()
                },
            ),
        ]
    }

    /// Every example line of a table that is written (`# key = value`
    /// below an uncommented header), uncommented alone, leaves a file that
    /// loads; one that says it is `instead of` another key loads with that
    /// key commented out, one that goes `with` another with that one
    /// uncommented too. Tables written as comments are examples of their
    /// own, uncommented whole.
    #[test]
    fn each_example_line_uncommented_is_a_valid_file() {
        for (gateway, opts) in each_gateway() {
            let text = opts.text().unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let mut in_commented_table = false;
            let mut tried = 0;
            for (i, line) in lines.iter().enumerate() {
                if line.starts_with('[') {
                    in_commented_table = false;
                } else if line.starts_with("# [") {
                    in_commented_table = true;
                }
                let Some(body) = line.strip_prefix("# ") else {
                    continue;
                };
                if in_commented_table || body.starts_with('[') || !body.contains(" = ") {
                    continue;
                }
                let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                edited[i] = body.to_string();
                if let Some((_, rest)) = body.split_once("instead of `") {
                    let key = rest.split('`').next().unwrap();
                    let at = edited
                        .iter()
                        .position(|l| l.starts_with(&format!("{key} = ")))
                        .unwrap_or_else(|| panic!("{gateway}: no `{key}` to replace: {body}"));
                    edited[at] = format!("# {}", edited[at]);
                }
                if let Some((_, rest)) = body.split_once("(with `") {
                    let key = rest.split('`').next().unwrap();
                    let at = edited
                        .iter()
                        .position(|l| l.starts_with(&format!("# {key} = ")))
                        .unwrap_or_else(|| panic!("{gateway}: no `{key}` to go with: {body}"));
                    edited[at] = edited[at][2..].to_string();
                }
                let edited = edited.join("\n");
                if let Err(e) = Scenario::from_str(&edited, "init.toml", Path::new("init.toml")) {
                    panic!("{gateway}: `{body}` uncommented: {e}");
                }
                tried += 1;
            }
            assert!(tried > 20, "{gateway}: {tried} example lines");
        }
    }

    /// Switching from the reference gateway to another: one line; back
    /// (a target's or a command's file to the reference gateway): its
    /// tables uncommented, the gateway line commented out.
    #[test]
    fn one_example_line_switches_the_gateway() {
        // The first (the `[gateway]` table's).
        let uncomment = |text: &str, key: &str| {
            let mut done = false;
            text.lines()
                .map(|l| match l.strip_prefix("# ") {
                    Some(b) if !done && b.starts_with(&format!("{key} = ")) => {
                        done = true;
                        b.to_string()
                    }
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let load = |text: &str| Scenario::from_str(text, "init.toml", Path::new("init.toml"));
        let reference = InitOptions::default().text().unwrap();
        let s = load(&uncomment(&reference, "url")).unwrap();
        assert!(matches!(s.gateway.kind, crate::GatewayKind::Url(_)));
        assert!(
            s.gateway.notes.iter().any(|n| n.contains("set aside")),
            "{:?}",
            s.gateway.notes
        );
        let s = load(&uncomment(&reference, "command")).unwrap();
        assert!(matches!(s.gateway.kind, crate::GatewayKind::Command(_)));
        // Both at once say which to keep.
        let both = uncomment(&uncomment(&reference, "url"), "command");
        let e = load(&both).unwrap_err().to_string();
        assert!(e.contains("`command` or `url`, not both"), "{e}");
        for (gateway, opts) in each_gateway().into_iter().skip(1) {
            let text = opts.text().unwrap();
            let key = if gateway == "target" {
                "url"
            } else {
                "command"
            };
            assert!(text.contains("# [gateway.reference]"), "{gateway}:\n{text}");
            let back: String = text
                .lines()
                .map(|l| {
                    if l.starts_with(&format!("{key} = ")) {
                        format!("# {l}")
                    } else if l.starts_with("# [gateway.reference") || l.starts_with("# mode = ") {
                        l[2..].to_string()
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            let s = load(&back).unwrap_or_else(|e| panic!("{gateway} back: {e}"));
            assert!(matches!(s.gateway.kind, crate::GatewayKind::Reference(_)));
        }
    }

    /// The scales are 10 and 10 whatever the figures and the gateway
    /// (the same figures as the shape's once wrote a quota scale of 1:
    /// 333 requests/s), unless asked; what is said names each one's
    /// reason and what 1 would give.
    #[test]
    fn the_scales_stay_unless_asked() {
        let shape_as_flags = InitOptions {
            normal_rate: Some("200/min".parse().unwrap()),
            peak_rate: Some("2000/min".parse().unwrap()),
            peak_duration: Some(PEAK_DURATION),
            quota_tokens_per_minute: Some(QUOTA_TPM),
            tokens_per_request: Some(TOKENS),
            ..InitOptions::default()
        };
        let mut cases: Vec<(&str, InitOptions)> = each_gateway().into();
        cases.push(("the shape's figures as flags", shape_as_flags));
        cases.push(("other figures", flags()));
        for (what, opts) in cases {
            let (s, _) = scenarios(&opts);
            assert_eq!(
                (s.meta.quota_scale, s.meta.time_scale),
                (10.0, 10.0),
                "{what}"
            );
            let said = opts.said(&s, Path::new("x.toml")).unwrap().join("\n");
            assert!(
                said.contains("quota ÷ 10: the default (quota_scale N"),
                "{what}: {said}"
            );
            assert!(
                said.contains("time ÷ 10: the default (time_scale N"),
                "{what}: {said}"
            );
            assert!(said.contains("requests/s at the peak"), "{what}: {said}");
        }
        let (what, target) = each_gateway().into_iter().nth(1).unwrap();
        let (s, _) = scenarios(&target);
        let said = target.said(&s, Path::new("x.toml")).unwrap().join("\n");
        assert!(
            said.contains("`rehearse run x.toml allow_time_scale`"),
            "{what}: {said}"
        );
        assert!(said.contains("47m long"), "{what}: {said}");
        // The flash promotion at the scales written: 2,000/min is 33.3/s,
        // 47 minutes ÷ 10, a tenth of the 63,333 backlog.
        let (s, _) = scenarios(&InitOptions::default());
        let said = InitOptions::default()
            .said(&s, Path::new("x.toml"))
            .unwrap()
            .join("\n");
        assert!(
            said.contains("33.3 requests/s at the peak, 4m 42s long, a peak backlog of 6,333"),
            "{said}"
        );
        assert!(
            said.contains("relays 6,333 refusals of the provider and holds none"),
            "{said}"
        );
        assert!(
            said.contains("333 requests/s at the peak, a peak backlog of 63,333"),
            "{said}"
        );
        let asked = InitOptions {
            time_scale: Some(4.0),
            quota_scale: Some(2.5),
            ..InitOptions::default()
        };
        let (s, _) = scenarios(&asked);
        assert_eq!((s.meta.quota_scale, s.meta.time_scale), (2.5, 4.0));
        let said = asked.said(&s, Path::new("x.toml")).unwrap().join("\n");
        assert!(said.contains("quota ÷ 2.5: from quota_scale"), "{said}");
        assert!(said.contains("time ÷ 4: from time_scale"), "{said}");
        let bad = InitOptions {
            time_scale: Some(0.0),
            ..InitOptions::default()
        };
        assert!(bad.text().unwrap_err().to_string().contains("time_scale 0"));
    }

    #[test]
    fn the_flags_land_where_they_say() {
        let (s, _) = scenarios(&flags());
        assert_eq!(s.provider().quota.tokens_per_minute, Some(90_000));
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
