//! The provider's configuration: the TOML schema, its validation, and the
//! merge of timeline phases and admin overrides into the settings in force.
//!
//! The same schema is used for a file of its own (`rehearse provider
//! --config FILE`) and for the `[provider]` section of a scenario (its
//! tables below it: `[provider.latency]`). Every field at its default, each
//! with what it means ([`ProviderConfig::TEMPLATE`], which `rehearse init`
//! writes); a field with no default is commented out with an example, and
//! so is a table there is none of by default. A distribution (`ttft`,
//! `per_token`, `completion_tokens`) is a [`Dist`]: `{ fixed = X }`,
//! `{ uniform = { min, max } }`, `{ lognormal = { median, p99 } }`,
//! `{ exponential = { mean } }` or `{ mix = [ { value, weight }, ... ] }`.
//!
#![doc = concat!("```toml\n", include_str!("config.toml"), "```")]

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
pub use toml_located::ConfigError;
/// A value drawn per call (latencies, answer lengths), and a duration as
/// TOML writes it: the one distribution type of a rehearsal, shared with
/// the load generator and the plan.
pub use wire::{Dist, Dur};

/// A distribution's value is checked where serde cannot check it
/// ([`Dist::check`]), located at `path`.
fn check_dist<T: wire::Quantity>(
    dist: &Dist<T>,
    src: &toml_located::Source<'_>,
    path: &str,
) -> Result<(), ConfigError> {
    dist.check()
        .map_err(|e| src.error(&format!("{path}.{}", e.field), e.message))
}

/// Declares a settings table and its patch from one field list: the
/// table as written (its attributes, each field's doc and serde
/// attributes), and `$Patch`, the same fields each `Option` (an optional
/// field's patch is itself: `Some` sets it, a patch cannot unset it), with
/// `deny_unknown_fields` so that a typo in a phase or an override is an
/// error. Fields after `unpatched` are the table's own: no patch has them.
/// It adds `apply` (a patch's set fields onto the table) and `as_patch`
/// (the whole table as a patch, to check it by the patch's rules).
///
/// A patched field's type is a name with optional arguments (`f64`,
/// `Dist<Dur>`, `Option<u32>`), so that the macro sees an `Option`.
macro_rules! settings_with_patch {
    (
        $(#[$attr:meta])*
        pub struct $Table:ident {
            $(
                $(#[$fattr:meta])*
                pub $field:ident: $head:ident $(<$($arg:ty),+>)?,
            )+
            $(
                unpatched:
                $(
                    $(#[$uattr:meta])*
                    pub $ufield:ident: $uty:ty,
                )+
            )?
        }
        $(#[$pattr:meta])*
        pub struct $Patch:ident;
    ) => {
        $(#[$attr])*
        pub struct $Table {
            $(
                $(#[$fattr])*
                pub $field: $head $(<$($arg),+>)?,
            )+
            $($(
                $(#[$uattr])*
                pub $ufield: $uty,
            )+)?
        }

        $(#[$pattr])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        pub struct $Patch {
            $(
                #[doc = concat!("Replaces [`", stringify!($Table), "::", stringify!($field), "`] when set.")]
                pub $field: settings_with_patch!(@patch $head $(<$($arg),+>)?),
            )+
        }

        impl $Table {
            /// Sets each field the patch sets.
            fn apply(&mut self, patch: &$Patch) {
                $(
                    if let Some(v) = &patch.$field {
                        self.$field =
                            settings_with_patch!(@to_field Clone::clone(v) => $head $(<$($arg),+>)?);
                    }
                )+
            }

            /// Every patched field set to its value here, to check the table
            /// by its patch's rules.
            // Concurrency checks its one rule itself, with its own hint.
            #[allow(dead_code)]
            fn as_patch(&self) -> $Patch {
                $Patch {
                    $(
                        $field: settings_with_patch!(
                            @to_patch Clone::clone(&self.$field) => $head $(<$($arg),+>)?
                        ),
                    )+
                }
            }
        }
    };
    (@patch Option<$t:ty>) => { Option<$t> };
    (@patch $head:ident $(<$($arg:ty),+>)?) => { Option<$head $(<$($arg),+>)?> };
    (@to_field $v:expr => Option<$t:ty>) => { Some($v) };
    (@to_field $v:expr => $($ty:tt)+) => { $v };
    (@to_patch $v:expr => Option<$t:ty>) => { $v };
    (@to_patch $v:expr => $($ty:tt)+) => { Some($v) };
}

settings_with_patch! {
    /// Latency settings. A non-streamed answer takes `ttft + prompt *
    /// prefill_per_token + n * per_token`, all times `multiplier`; a streamed
    /// one sends its first token after the first two, the rest at that pace.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct Latency {
        /// Time to first token.
        pub ttft: Dist<Dur>,
        /// Time per output token after the first.
        pub per_token: Dist<Dur>,
        /// Time to first token added per prompt token (reading the prompt:
        /// a 40 KB retrieved context is slower as well as costlier).
        pub prefill_per_token: Dur,
        /// Factor applied to both draws (a brownout is `multiplier = 7.0`).
        pub multiplier: f64,
        /// The load curve's knee: past this many calls in service, each call
        /// admitted slows by [`crate::curve::load_factor`]. `None`: latency
        /// does not depend on load. A count: ÷ the quota scale. A brownout
        /// can move it.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub knee: Option<u32>,
        /// The curve's exponent past the knee (1: throughput flat).
        pub knee_exponent: f64,
    }
    /// Partial latency settings, for a timeline phase or an admin override.
    pub struct LatencyPatch;
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            ttft: Dist::Fixed(Dur(Duration::ZERO)),
            per_token: Dist::Fixed(Dur(Duration::ZERO)),
            prefill_per_token: Dur(Duration::ZERO),
            multiplier: 1.0,
            knee: None,
            knee_exponent: 1.0,
        }
    }
}

/// What happens to a call beyond the concurrency ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Overflow {
    /// Wait in a FIFO queue (latency grows, as a real provider's does).
    #[default]
    Queue,
    /// Answer at once: 429 (OpenAI) or 529 `overloaded_error` (Anthropic).
    Reject,
}

settings_with_patch! {
    /// The concurrency ceiling.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub struct Concurrency {
        /// At most this many calls in service; `None` for no ceiling.
        pub ceiling: Option<u32>,
        /// Queue or reject beyond the ceiling.
        #[serde(default)]
        pub overflow: Overflow,
        /// Longest queue; `None` for unbounded. A full queue rejects.
        pub queue_limit: Option<u32>,
    }
    /// Partial concurrency settings.
    pub struct ConcurrencyPatch;
}

settings_with_patch! {
    /// The account's quota, as continuously refilled buckets.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Quota {
        /// Requests per minute; `None` for unlimited.
        pub requests_per_minute: Option<u64>,
        /// Tokens (prompt + completion) per minute; `None` for unlimited.
        pub tokens_per_minute: Option<u64>,
        unpatched:
        /// The span of refill each bucket holds, i.e. its burst: one minute by
        /// default (a bucket holds one minute's allowance). A duration, so a
        /// rehearsal divides it by its time scale like any other: at time
        /// scale 10 a bucket refills at the rate-scaled limit (ten times the
        /// scenario's a real minute) and holds 6 s of it, one scenario minute,
        /// the burst it has at full scale. See [`wire::QuotaBuckets`]. No
        /// phase changes it.
        #[serde(default = "default_quota_window", with = "humantime_serde")]
        pub window: Duration,
    }
    /// Partial quota settings (the rates; the window is the quota's own).
    pub struct QuotaPatch;
}

fn default_quota_window() -> Duration {
    wire::QuotaBuckets::MINUTE
}

impl Default for Quota {
    fn default() -> Self {
        Quota {
            requests_per_minute: None,
            tokens_per_minute: None,
            window: default_quota_window(),
        }
    }
}

settings_with_patch! {
    /// Injected faults, each a probability per call.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub struct Faults {
        /// Error statuses (500, 502, 503, 529) and their rates. A patch
        /// replaces the whole table.
        #[serde(default)]
        pub errors: BTreeMap<String, f64>,
        /// The connection is reset before any answer.
        #[serde(default)]
        pub reset: f64,
        /// No answer at all, until the caller gives up.
        #[serde(default)]
        pub hang: f64,
        /// A streamed answer stops mid-way and the connection is cut.
        #[serde(default)]
        pub stream_cut: f64,
        /// A 200 whose body is not valid JSON (or SSE).
        #[serde(default)]
        pub malformed: f64,
    }
    /// Partial fault rates.
    pub struct FaultsPatch;
}

/// Settings that a timeline phase or an admin override can change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// Latency changes.
    pub latency: Option<LatencyPatch>,
    /// Completion-token distribution.
    pub completion_tokens: Option<Dist<u32>>,
    /// Ceiling changes.
    pub concurrency: Option<ConcurrencyPatch>,
    /// Quota changes.
    pub quota: Option<QuotaPatch>,
    /// Fault-rate changes.
    pub faults: Option<FaultsPatch>,
}

/// One `[[timeline]]` phase: overrides in force while `from <= t < until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// The phase's name (in records, and for `/_fake/phase`).
    pub name: String,
    /// Start, measured from the provider's start.
    pub from: Dur,
    /// End (exclusive); omit for "until the end".
    pub until: Option<Dur>,
    /// Latency changes.
    pub latency: Option<LatencyPatch>,
    /// Completion-token distribution.
    pub completion_tokens: Option<Dist<u32>>,
    /// Ceiling changes.
    pub concurrency: Option<ConcurrencyPatch>,
    /// Quota changes.
    pub quota: Option<QuotaPatch>,
    /// Fault-rate changes.
    pub faults: Option<FaultsPatch>,
    /// What `GET /health` answers during the phase (a worker's health
    /// check failing before it goes away, or while it warms up).
    pub health: Option<Health>,
    /// The provider goes away for the phase, as a worker whose process
    /// dies or stops does: calls in flight when the phase begins are cut
    /// (connection reset), and so are held calls when a `hang` phase ends
    /// (the worker restarted).
    pub down: Option<Down>,
}

/// How the provider is down during a `[[timeline]]` phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Down {
    /// The listener is closed: every connection is refused until the
    /// phase ends, then the provider listens again on the same port.
    Refuse,
    /// Connections are accepted and requests read, but nothing is
    /// answered (calls, `/health`, `/v1/models`; the admin API still
    /// answers): each call is recorded `hang` when its caller gives up
    /// or the phase ends.
    Hang,
}

/// What the provider's `/health` says, as an inference worker's would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// 200: routers keep sending calls.
    Ok,
    /// 503: routers' health checks mark the worker down.
    Failing,
}

impl Phase {
    /// What this phase changes. (Spelled out field by field rather than a
    /// flattened [`Overrides`] because serde cannot combine `flatten` with
    /// `deny_unknown_fields`, and a typo in a phase must be an error.)
    pub fn overrides(&self) -> Overrides {
        Overrides {
            latency: self.latency.clone(),
            completion_tokens: self.completion_tokens.clone(),
            concurrency: self.concurrency.clone(),
            quota: self.quota.clone(),
            faults: self.faults.clone(),
        }
    }
}

fn default_models() -> Vec<String> {
    vec![
        "gpt-4o-mini".into(),
        "gpt-4o".into(),
        "claude-3-5-haiku-latest".into(),
        "claude-sonnet-4-5".into(),
    ]
}

fn default_seed() -> u64 {
    1
}

fn default_max_body() -> usize {
    8 * 1024 * 1024
}

fn default_max_tokens() -> u32 {
    1024
}

fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_body_read_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_completion() -> Dist<u32> {
    Dist::Fixed(16)
}

/// The whole provider configuration. `Default` is a provider with zero
/// latency, no ceiling, no quota and no faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The provider's name: each of a scenario's `[[providers]]` has one
    /// (`a-z`, `0-9`, `_`, `-`), which every record of its calls carries
    /// and its metrics are labelled with; `None` is the provider named
    /// `default` (a scenario's one `[provider]`), whose records and
    /// metrics are as they were before there were several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seed of every draw; the same config and seed give the same draws in
    /// call order.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Models listed by `/v1/models`. Requests may name any model.
    #[serde(default = "default_models")]
    pub models: Vec<String>,
    /// Larger request bodies are refused with 413.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Reserved at admission when a request sets no `max_tokens`.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u32,
    /// A connection whose request head is not in within this is closed
    /// (the slow-loris guard). Not divided by a rehearsal's time scale: it
    /// guards the server, it is not part of the scenario.
    #[serde(default = "default_header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A request body not in within this gets 408. Not time-scaled either.
    #[serde(default = "default_body_read_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// The admin token: when set, every admin call (loopback included)
    /// must send `Authorization: Bearer TOKEN`; when not, the admin API
    /// answers loopback callers only. `rehearse provider` takes it from
    /// `--admin-token-file`, else `REHEARSE_ADMIN_TOKEN`, else here. An
    /// uploaded config (`PUT /_fake/config`) may not set it.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// Latency settings.
    #[serde(default)]
    pub latency: Latency,
    /// How many tokens an answer has (capped by the request's max_tokens).
    #[serde(default = "default_completion")]
    pub completion_tokens: Dist<u32>,
    /// The concurrency ceiling.
    #[serde(default)]
    pub concurrency: Concurrency,
    /// The quota.
    #[serde(default)]
    pub quota: Quota,
    /// Injected faults.
    #[serde(default)]
    pub faults: Faults,
    /// Phases that override the settings above for a while.
    #[serde(default)]
    pub timeline: Vec<Phase>,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            name: None,
            seed: default_seed(),
            models: default_models(),
            max_body_bytes: default_max_body(),
            default_max_tokens: default_max_tokens(),
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            admin_token: None,
            latency: Latency::default(),
            completion_tokens: default_completion(),
            concurrency: Concurrency::default(),
            quota: Quota::default(),
            faults: Faults::default(),
            timeline: Vec::new(),
        }
    }
}

impl ProviderConfig {
    /// The provider's template: every field at its default (or, with none,
    /// an example commented out) with a line on what it means; the
    /// module's documentation shows it, `rehearse init` writes it.
    pub const TEMPLATE: &'static str = include_str!("config.toml");

    /// Its name: `name`, else `default` ([`wire::DEFAULT_PROVIDER`]).
    ///
    /// ```
    /// let mut cfg = fake_provider::ProviderConfig::default();
    /// assert_eq!(cfg.name_or_default(), "default");
    /// cfg.name = Some("secondary".into());
    /// assert_eq!(cfg.name_or_default(), "secondary");
    /// ```
    pub fn name_or_default(&self) -> &str {
        self.name.as_deref().unwrap_or(wire::DEFAULT_PROVIDER)
    }
}

/// The most phases a timeline may hold (the active set is a 64-bit mask).
pub(crate) const MAX_PHASES: usize = 64;

/// Statuses the fault injector knows how to answer with.
pub(crate) const FAULT_STATUSES: [u16; 4] = [500, 502, 503, 529];

/// A file's providers validated, as read: its one `[provider]` (`one`)
/// or its `[[providers]]` (`several`), not both (a located error at the
/// first of `[[providers]]`); each of `[[providers]]` named, the names
/// unique; every field checked where it is written (`provider.…`,
/// `providers[i].…`). A `[provider]` may not be named (it is `default`);
/// one of `[[providers]]` named `default` is that provider (its name
/// `None`). Neither: one provider at its defaults.
pub fn providers_in(
    one: Option<ProviderConfig>,
    several: Option<Vec<ProviderConfig>>,
    src: &toml_located::Source<'_>,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let mut providers = match (one, several) {
        (Some(_), Some(_)) => return Err(src.error(
            "providers[0]",
            "give `[provider]` (one provider) or `[[providers]]` (several, each named), not both",
        )),
        (Some(p), None) => {
            if p.name.is_some() {
                return Err(src.error(
                    "provider.name",
                    "the one `[provider]` is named `default`: name providers in `[[providers]]`",
                ));
            }
            p.validate(src, "provider.")?;
            return Ok(vec![p]);
        }
        (None, None) => return Ok(vec![ProviderConfig::default()]),
        (None, Some(list)) => list,
    };
    if providers.is_empty() {
        return Err(src.error("providers", "name at least one provider"));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, p) in providers.iter_mut().enumerate() {
        let at = format!("providers[{i}]");
        let Some(name) = p.name.clone() else {
            return Err(src.error(&at, "each of `[[providers]]` needs a `name`"));
        };
        p.validate(src, &format!("{at}."))?;
        if !seen.insert(name.clone()) {
            return Err(src.error(
                &format!("{at}.name"),
                format!("{name:?}: a second provider of that name (each name once)"),
            ));
        }
        // `default` is the one-provider case's name: its records say none.
        if name == wire::DEFAULT_PROVIDER {
            p.name = None;
        }
    }
    Ok(providers)
}

impl ProviderConfig {
    /// Parses and validates a config from TOML `text` read from `origin`.
    ///
    /// ```
    /// let cfg = fake_provider::ProviderConfig::from_toml(
    ///     "[concurrency]\nceiling = 12\n",
    ///     "provider.toml",
    /// ).unwrap();
    /// assert_eq!(cfg.concurrency.ceiling, Some(12));
    /// let err = fake_provider::ProviderConfig::from_toml("[quota]\ntpm = 1\n", "p.toml").unwrap_err();
    /// assert_eq!(err.line, 2);
    /// ```
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let src = toml_located::Source::new(text, origin);
        let cfg: ProviderConfig = src.parse()?;
        cfg.validate(&src, "")?;
        Ok(cfg)
    }

    /// Checks the rules serde cannot express. `prefix` is prepended to field
    /// paths (e.g. `provider.` when this is a scenario's section).
    pub(crate) fn validate(
        &self,
        src: &toml_located::Source<'_>,
        prefix: &str,
    ) -> Result<(), ConfigError> {
        let p = |s: &str| format!("{prefix}{s}");
        if let Some(name) = self.name.as_deref().filter(|n| !wire::is_provider_name(n)) {
            return Err(src.error(
                &p("name"),
                format!("{name:?}: a provider's name is 1 to 64 of a-z, 0-9, _ and -"),
            ));
        }
        check_latency_patch(src, &p("latency"), &self.latency.as_patch())?;
        check_dist(&self.completion_tokens, src, &p("completion_tokens"))?;
        if self.concurrency.ceiling == Some(0) {
            return Err(src.error(
                &p("concurrency.ceiling"),
                "must be at least 1 (omit it for no ceiling)",
            ));
        }
        check_quota(src, &p("quota"), &self.quota.as_patch())?;
        if self.quota.window.is_zero() {
            return Err(src.error(&p("quota.window"), "must be positive"));
        }
        check_faults(src, &p("faults"), &self.faults.as_patch())?;
        if self.max_body_bytes == 0 {
            return Err(src.error(&p("max_body_bytes"), "must be positive"));
        }
        for (field, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
        ] {
            if value.is_zero() {
                return Err(src.error(&p(field), "must be positive"));
            }
        }
        if let Some(token) = &self.admin_token {
            check_admin_token(token).map_err(|m| src.error(&p("admin_token"), m))?;
        }
        if self.timeline.len() > MAX_PHASES {
            return Err(src.error(
                &p(&format!("timeline[{MAX_PHASES}]")),
                format!("a timeline holds at most {MAX_PHASES} phases"),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, phase) in self.timeline.iter().enumerate() {
            let at = p(&format!("timeline[{i}]"));
            if phase.name.is_empty() || !names.insert(phase.name.as_str()) {
                return Err(src.error(
                    &format!("{at}.name"),
                    "must be a non-empty name, unique in the timeline",
                ));
            }
            if let Some(until) = phase.until {
                if until <= phase.from {
                    return Err(src.error(&format!("{at}.until"), "must be after `from`"));
                }
            }
            phase.overrides().check(src, &at)?;
        }
        Ok(())
    }

    /// This config for a rehearsal: every duration (latencies, timeline,
    /// the quota's window) divided by `time_scale`, every per-minute quota
    /// multiplied by `time_scale / quota_scale`, and the concurrency
    /// ceiling and queue limit divided by `quota_scale` (never below 1), so
    /// that offered load over capacity stays what it was at full scale. A
    /// quota bucket then refills at the scaled rate and holds one scenario
    /// minute of it (the window, `60 s ÷ time_scale` by default): the
    /// scenario's limit ÷ `quota_scale`, its burst at full scale.
    ///
    /// ```
    /// let cfg = fake_provider::ProviderConfig::from_toml(
    ///     "[quota]\ntokens_per_minute = 500000\n[latency]\nttft = { fixed = \"4s\" }\n",
    ///     "p.toml",
    /// ).unwrap();
    /// let r = cfg.scaled(wire::Scale { time: 10.0, quota: 10.0 });
    /// assert_eq!(r.quota.tokens_per_minute, Some(500000));
    /// assert_eq!(r.quota.window, std::time::Duration::from_secs(6));
    /// assert_eq!(r.latency.ttft.mean(), 0.4);
    /// ```
    pub fn scaled(&self, scale: wire::Scale) -> ProviderConfig {
        // A quota is at least one a minute: zero would be no quota at all.
        let rate = |v: Option<u64>| v.map(|v| scale.rate(v as f64).round().max(1.0) as u64);
        let count = |v: Option<u32>| v.map(|v| scale.count(u64::from(v).max(1)) as u32);
        let dur = |d: Dur| Dur(scale.duration(d.0));
        let latency = |l: &LatencyPatch| LatencyPatch {
            ttft: l.ttft.as_ref().map(|d| d.scaled(scale)),
            per_token: l.per_token.as_ref().map(|d| d.scaled(scale)),
            prefill_per_token: l.prefill_per_token.map(dur),
            multiplier: l.multiplier,
            knee: count(l.knee),
            knee_exponent: l.knee_exponent,
        };
        let mut out = self.clone();
        out.latency.ttft = self.latency.ttft.scaled(scale);
        out.latency.per_token = self.latency.per_token.scaled(scale);
        out.latency.prefill_per_token = dur(self.latency.prefill_per_token);
        out.latency.knee = count(self.latency.knee);
        out.concurrency.ceiling = count(self.concurrency.ceiling);
        out.concurrency.queue_limit = count(self.concurrency.queue_limit);
        out.quota.requests_per_minute = rate(self.quota.requests_per_minute);
        out.quota.tokens_per_minute = rate(self.quota.tokens_per_minute);
        out.quota.window = scale.duration(self.quota.window);
        for p in &mut out.timeline {
            p.from = dur(p.from);
            p.until = p.until.map(dur);
            p.latency = p.latency.as_ref().map(latency);
            if let Some(c) = p.concurrency.as_mut() {
                c.ceiling = count(c.ceiling);
                c.queue_limit = count(c.queue_limit);
            }
            if let Some(q) = p.quota.as_mut() {
                q.requests_per_minute = rate(q.requests_per_minute);
                q.tokens_per_minute = rate(q.tokens_per_minute);
            }
        }
        out
    }

    /// The settings in force with these phases active (in order) and these
    /// admin overrides on top.
    pub fn effective<'a>(
        &self,
        phases: impl IntoIterator<Item = &'a Overrides>,
        admin: Option<&'a Overrides>,
    ) -> Effective {
        let mut eff = Effective {
            latency: self.latency.clone(),
            completion_tokens: self.completion_tokens.clone(),
            concurrency: self.concurrency.clone(),
            quota: self.quota.clone(),
            faults: self.faults.clone(),
        };
        for o in phases.into_iter().chain(admin) {
            eff.apply(o);
        }
        eff
    }
}

impl Overrides {
    /// Validates these overrides; `at` is the path of the table holding them.
    pub(crate) fn check(
        &self,
        src: &toml_located::Source<'_>,
        at: &str,
    ) -> Result<(), ConfigError> {
        if let Some(l) = &self.latency {
            check_latency_patch(src, &format!("{at}.latency"), l)?;
        }
        if let Some(c) = &self.completion_tokens {
            check_dist(c, src, &format!("{at}.completion_tokens"))?;
        }
        if let Some(c) = &self.concurrency {
            if c.ceiling == Some(0) {
                return Err(src.error(&format!("{at}.concurrency.ceiling"), "must be at least 1"));
            }
        }
        if let Some(q) = &self.quota {
            check_quota(src, &format!("{at}.quota"), q)?;
        }
        if let Some(f) = &self.faults {
            check_faults(src, &format!("{at}.faults"), f)?;
        }
        Ok(())
    }
}

/// An admin token is sent in a header: visible ASCII, no spaces, not
/// empty.
pub(crate) fn check_admin_token(token: &str) -> Result<(), &'static str> {
    if token.is_empty() {
        Err("an admin token must not be empty")
    } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
        Err("an admin token is visible ASCII without spaces (it is sent as `Authorization: Bearer TOKEN`)")
    } else {
        Ok(())
    }
}

fn check_latency_patch(
    src: &toml_located::Source<'_>,
    at: &str,
    l: &LatencyPatch,
) -> Result<(), ConfigError> {
    if let Some(t) = &l.ttft {
        check_dist(t, src, &format!("{at}.ttft"))?;
    }
    if let Some(t) = &l.per_token {
        check_dist(t, src, &format!("{at}.per_token"))?;
    }
    if l.prefill_per_token
        .is_some_and(|t| t.0 > Duration::from_secs(1))
    {
        return Err(src.error(
            &format!("{at}.prefill_per_token"),
            "must be at most 1s a prompt token",
        ));
    }
    if let Some(m) = l.multiplier {
        if !(m.is_finite() && m > 0.0) {
            return Err(src.error(&format!("{at}.multiplier"), "must be a positive number"));
        }
    }
    if l.knee == Some(0) {
        return Err(src.error(
            &format!("{at}.knee"),
            "must be at least 1 (omit it for latency that does not depend on load)",
        ));
    }
    if let Some(e) = l.knee_exponent {
        if !(e.is_finite() && (0.0..=4.0).contains(&e)) {
            return Err(src.error(&format!("{at}.knee_exponent"), "must be between 0 and 4"));
        }
    }
    Ok(())
}

fn check_quota(
    src: &toml_located::Source<'_>,
    at: &str,
    q: &QuotaPatch,
) -> Result<(), ConfigError> {
    if q.requests_per_minute == Some(0) {
        return Err(src.error(
            &format!("{at}.requests_per_minute"),
            "must be at least 1 (omit it for unlimited)",
        ));
    }
    if q.tokens_per_minute == Some(0) {
        return Err(src.error(
            &format!("{at}.tokens_per_minute"),
            "must be at least 1 (omit it for unlimited)",
        ));
    }
    Ok(())
}

fn check_faults(
    src: &toml_located::Source<'_>,
    at: &str,
    f: &FaultsPatch,
) -> Result<(), ConfigError> {
    let rate_ok = |r: f64| (0.0..=1.0).contains(&r);
    let mut total = 0.0;
    if let Some(errors) = &f.errors {
        for (status, rate) in errors {
            let code: Option<u16> = status.parse().ok();
            if !code.is_some_and(|c| FAULT_STATUSES.contains(&c)) {
                return Err(src.error(
                    &format!("{at}.errors.{status}"),
                    format!("unknown fault status `{status}`; expected one of 500, 502, 503, 529"),
                ));
            }
            if !rate_ok(*rate) {
                return Err(src.error(
                    &format!("{at}.errors.{status}"),
                    "a rate must be between 0 and 1",
                ));
            }
            total += rate;
        }
    }
    for (name, rate) in [
        ("reset", f.reset),
        ("hang", f.hang),
        ("stream_cut", f.stream_cut),
        ("malformed", f.malformed),
    ] {
        if let Some(r) = rate {
            if !rate_ok(r) {
                return Err(src.error(&format!("{at}.{name}"), "a rate must be between 0 and 1"));
            }
            total += r;
        }
    }
    if total > 1.0 + 1e-9 {
        return Err(src.error(
            at,
            format!("fault rates add up to {total:.3}; their sum must be at most 1"),
        ));
    }
    Ok(())
}

/// The settings in force for one call: the base config with the active
/// phases and admin overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Latency settings.
    pub latency: Latency,
    /// Completion tokens.
    pub completion_tokens: Dist<u32>,
    /// Ceiling settings.
    pub concurrency: Concurrency,
    /// Quota settings.
    pub quota: Quota,
    /// Fault rates.
    pub faults: Faults,
}

impl Effective {
    fn apply(&mut self, o: &Overrides) {
        if let Some(l) = &o.latency {
            self.latency.apply(l);
        }
        if let Some(c) = &o.completion_tokens {
            self.completion_tokens = c.clone();
        }
        if let Some(c) = &o.concurrency {
            self.concurrency.apply(c);
        }
        if let Some(q) = &o.quota {
            self.quota.apply(q);
        }
        if let Some(f) = &o.faults {
            self.faults.apply(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn full_example_parses() {
        let text = r#"
seed = 7
[latency]
ttft = { lognormal = { median = "300ms", p99 = "1.2s" } }
per_token = { fixed = "10ms" }
[completion_tokens]
uniform = { min = 50, max = 400 }
[concurrency]
ceiling = 12
overflow = "reject"
[quota]
requests_per_minute = 500
tokens_per_minute = 500000
[faults]
errors = { "500" = 0.01, "529" = 0.005 }
reset = 0.01
[[timeline]]
name = "brownout"
from = "2m"
until = "14m"
latency = { multiplier = 7.0 }
concurrency = { ceiling = 4 }
"#;
        let cfg = ProviderConfig::from_toml(text, "p.toml").unwrap();
        assert_eq!(cfg.concurrency.overflow, Overflow::Reject);
        assert_eq!(cfg.header_read_timeout, Duration::from_secs(10), "default");
        assert_eq!(cfg.body_read_timeout, Duration::from_secs(30), "default");
        let guarded = ProviderConfig::from_toml(
            "header_read_timeout = \"2s\"\nbody_read_timeout = \"1500ms\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(guarded.header_read_timeout, Duration::from_secs(2));
        assert_eq!(guarded.body_read_timeout, Duration::from_millis(1500));
        assert_eq!(
            cfg.timeline[0].until,
            Some(Dur(Duration::from_secs(14 * 60)))
        );
        let eff = cfg.effective([&cfg.timeline[0].overrides()], None);
        assert_eq!(eff.latency.multiplier, 7.0);
        assert_eq!(eff.concurrency.ceiling, Some(4));
        assert_eq!(eff.concurrency.overflow, Overflow::Reject);
        assert_eq!(eff.quota.tokens_per_minute, Some(500_000));
    }

    #[test]
    fn a_patch_sets_what_it_names_and_no_more() {
        let text = "[concurrency]\nceiling = 8\n[[timeline]]\nname = \"p\"\nfrom = \"1s\"\nlatency = { knee = 5 }\nconcurrency = { queue_limit = 3 }\nfaults = { errors = { \"503\" = 0.5 } }\n";
        let cfg = ProviderConfig::from_toml(text, "p.toml").unwrap();
        let eff = cfg.effective([&cfg.timeline[0].overrides()], None);
        assert_eq!(eff.latency.knee, Some(5));
        assert_eq!(eff.latency.multiplier, 1.0, "left as it was");
        assert_eq!(eff.concurrency.ceiling, Some(8), "left as it was");
        assert_eq!(eff.concurrency.queue_limit, Some(3));
        assert_eq!(eff.faults.errors.len(), 1);
        let mut latency = Latency::default();
        latency.apply(&cfg.latency.as_patch());
        assert_eq!(
            latency, cfg.latency,
            "a whole table as a patch is the table"
        );
        // The quota's window is not a patch's: a phase naming it is a typo.
        let text = "[[timeline]]\nname = \"p\"\nfrom = \"1s\"\nquota = { window = \"1s\" }\n";
        let err = ProviderConfig::from_toml(text, "p.toml").unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.to_string().contains("window"), "{err}");
    }

    #[test]
    fn the_template_reads_as_the_defaults() {
        let written = ProviderConfig::from_toml(ProviderConfig::TEMPLATE, "config.toml").unwrap();
        assert_eq!(written, ProviderConfig::default());
    }

    #[test]
    fn typo_is_an_error_with_its_line() {
        let text =
            "seed = 1\n[[timeline]]\nname = \"x\"\nfrom = \"1s\"\nlatecny = { multiplier = 2.0 }\n";
        let err = ProviderConfig::from_toml(text, "p.toml").unwrap_err();
        assert_eq!(err.line, 5, "{err}");
        assert!(err.to_string().contains("latecny"), "{err}");
    }

    #[test]
    fn semantic_errors_are_located() {
        let cases = [
            ("[latency]\nttft = { lognormal = { median = \"2s\", p99 = \"1s\" } }\nper_token = { fixed = \"0s\" }\nmultiplier = 1.0\n", 2, "latency.ttft.lognormal.p99"),
            ("[[timeline]]\nname = \"a\"\nfrom = \"10s\"\nuntil = \"5s\"\n", 4, "timeline[0].until"),
            ("[faults]\nerrors = { \"418\" = 0.1 }\n", 2, "faults.errors.418"),
            ("[faults]\nreset = 1.5\n", 2, "faults.reset"),
            ("[concurrency]\nceiling = 0\n", 2, "concurrency.ceiling"),
            ("seed = 1\nbody_read_timeout = \"0s\"\n", 2, "body_read_timeout"),
            ("header_read_timeout = \"0ms\"\n", 1, "header_read_timeout"),
            ("seed = 1\nadmin_token = \"\"\n", 2, "admin_token"),
            ("admin_token = \"a b\"\n", 1, "admin_token"),
        ];
        for (text, line, field) in cases {
            let err = ProviderConfig::from_toml(text, "p.toml").unwrap_err();
            assert_eq!((err.line, err.field.as_str()), (line, field), "{err}");
        }
    }

    #[test]
    fn a_phase_takes_the_provider_down_and_a_bad_mode_is_located() {
        let text = "[[timeline]]\nname = \"gone\"\nfrom = \"1s\"\ndown = \"refuse\"\n[[timeline]]\nname = \"stuck\"\nfrom = \"2s\"\ndown = \"hang\"\n";
        let c = ProviderConfig::from_toml(text, "p.toml").unwrap();
        assert_eq!(c.timeline[0].down, Some(Down::Refuse));
        assert_eq!(c.timeline[1].down, Some(Down::Hang));
        let text = "[[timeline]]\nname = \"gone\"\nfrom = \"1s\"\ndown = \"crash\"\n";
        let err = ProviderConfig::from_toml(text, "p.toml").unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (4, "timeline[0].down"),
            "{err}"
        );
    }

    #[test]
    fn a_phase_marks_health_failing_and_a_bad_value_is_located() {
        let text = "[[timeline]]\nname = \"sick\"\nfrom = \"1s\"\nhealth = \"failing\"\n";
        let c = ProviderConfig::from_toml(text, "p.toml").unwrap();
        assert_eq!(c.timeline[0].health, Some(Health::Failing));
        let text = "[[timeline]]\nname = \"sick\"\nfrom = \"1s\"\nhealth = \"poorly\"\n";
        let err = ProviderConfig::from_toml(text, "p.toml").unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (4, "timeline[0].health"),
            "{err}"
        );
        assert!(err.to_string().contains("p.toml"), "{err}");
    }

    #[test]
    fn bad_duration_is_reported() {
        let err = ProviderConfig::from_toml("[latency]\nttft = { fixed = \"fast\" }\n", "p.toml")
            .unwrap_err();
        assert_eq!(err.line, 2, "{err}");
    }

    #[test]
    fn seeded_draws_repeat_and_lognormal_hits_its_quantiles() {
        let d: Dist<Dur> = Dist::Lognormal {
            median: Dur(Duration::from_millis(620)),
            p99: Dur(Duration::from_millis(2000)),
        };
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..5).map(|_| d.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut v: Vec<f64> = (0..200_000)
            .map(|_| d.sample(&mut rng).as_secs_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        let p99 = v[v.len() * 99 / 100];
        assert!((median - 0.620).abs() < 0.01, "median {median}");
        assert!((p99 - 2.0).abs() < 0.06, "p99 {p99}");
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean - d.mean()).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn scaling_keeps_little_law_quantities() {
        let text = "[latency]\nttft = { uniform = { min = \"1s\", max = \"3s\" } }\n[concurrency]\nceiling = 12\nqueue_limit = 40\n[quota]\nrequests_per_minute = 2000\n[[timeline]]\nname = \"slow\"\nfrom = \"2m\"\nuntil = \"14m\"\nlatency = { ttft = { fixed = \"7s\" } }\nquota = { tokens_per_minute = 600 }\n";
        let cfg = ProviderConfig::from_toml(text, "t").unwrap();
        let t = cfg.scaled(wire::Scale {
            time: 10.0,
            quota: 1.0,
        });
        assert_eq!(t.latency.ttft.mean(), 0.2);
        assert_eq!(t.concurrency.ceiling, Some(12), "a count is not a rate");
        assert_eq!(t.quota.requests_per_minute, Some(20_000));
        assert_eq!(t.timeline[0].from, Dur(Duration::from_secs(12)));
        assert_eq!(t.timeline[0].until, Some(Dur(Duration::from_secs(84))));
        assert_eq!(
            t.timeline[0].quota.as_ref().unwrap().tokens_per_minute,
            Some(6000)
        );
        let q = cfg.scaled(wire::Scale {
            time: 1.0,
            quota: 4.0,
        });
        assert_eq!(q.concurrency.ceiling, Some(3));
        assert_eq!(q.concurrency.queue_limit, Some(10));
        assert_eq!(q.quota.requests_per_minute, Some(500));
        assert_eq!(q.timeline[0].from, Dur(Duration::from_secs(120)));
        assert_eq!(cfg.scaled(wire::Scale::ONE), cfg);
    }

    #[test]
    fn the_quota_window_is_a_scenario_minute_of_real_time() {
        let cfg =
            ProviderConfig::from_toml("[quota]\nrequests_per_minute = 12\n", "p.toml").unwrap();
        assert_eq!(cfg.quota.window, Duration::from_secs(60), "one minute");
        let s = cfg.scaled(wire::Scale {
            time: 10.0,
            quota: 10.0,
        });
        assert_eq!(s.quota.requests_per_minute, Some(12));
        assert_eq!(s.quota.window, Duration::from_secs(6), "÷ time");
        let q = cfg.scaled(wire::Scale {
            time: 1.0,
            quota: 10.0,
        });
        assert_eq!(q.quota.window, Duration::from_secs(60), "not by quota");
        let set = ProviderConfig::from_toml("[quota]\nwindow = \"10s\"\n", "p.toml").unwrap();
        assert_eq!(set.quota.window, Duration::from_secs(10));
        let err = ProviderConfig::from_toml("seed = 1\n[quota]\nwindow = \"0s\"\n", "p.toml")
            .unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (3, "quota.window"), "{err}");
    }

    /// FNV-1a over the values a call uses: a draw's nanoseconds or count.
    fn fnv(values: &[u64]) -> u64 {
        values.iter().fold(0xcbf2_9ce4_8422_2325, |h, v| {
            v.to_le_bytes()
                .iter()
                .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
        })
    }

    /// 1,000 draws from one seeded stream, then the stream's next value (a
    /// shape that draws nothing must still draw nothing), hashed.
    fn draws(seed: u64, mut draw: impl FnMut(&mut ChaCha8Rng) -> u64) -> u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut values: Vec<u64> = (0..1000).map(|_| draw(&mut rng)).collect();
        values.push(rng.gen());
        fnv(&values)
    }

    /// The seeded draws of every shape the provider reads, and of every
    /// distribution of the shipped scenarios, at full scale and compressed
    /// ten times. The hashes were recorded from the provider's own `Dist`
    /// before it became `wire::Dist`: a change of these numbers changes
    /// the latencies and lengths of every seeded rehearsal.
    #[test]
    fn seeded_draws_keep_their_values() {
        // (ttft, hash at full scale, hash at time scale 10)
        let durations: [(&str, u64, u64); 12] = [
            (
                r#"{ fixed = "620ms" }"#,
                0x6c116ae6f24b72c5,
                0x78b62e2285eb9145,
            ),
            (
                r#"{ fixed = "0ms" }"#,
                0x2c75609dd537093a,
                0x2c75609dd537093a,
            ),
            (
                r#"{ fixed = "20ms" }"#,
                0xc99fba463bb33d0b,
                0x3f9261ee6d4a172b,
            ),
            (
                r#"{ uniform = { min = "1s", max = "3s" } }"#,
                0x9cb23174445679d4,
                0xdd016034e21bc6c4,
            ),
            (
                r#"{ uniform = { min = "5ms", max = "35ms" } }"#,
                0x5f4b1b797fa09e06,
                0x6a51680d1670a03,
            ),
            (
                r#"{ uniform = { min = "2s", max = "2s" } }"#,
                0xbfb4b3fd2e486337,
                0x3ece0c18be2055f7,
            ),
            (
                r#"{ lognormal = { median = "900ms", p99 = "2s" } }"#,
                0xd8744e0153c1bb8d,
                0x19dfb75cd4165f9a,
            ),
            (
                r#"{ lognormal = { median = "620ms", p99 = "1.5s" } }"#,
                0x90a2ac841736a823,
                0xeeb1de0d7394d43b,
            ),
            (
                r#"{ lognormal = { median = "3.7s", p99 = "5.5s" } }"#,
                0x398bd96c6b311ead,
                0x9d165c4bba19c55b,
            ),
            (
                r#"{ lognormal = { median = "640ms", p99 = "1.5s" } }"#,
                0xc55a176f1da2b7f7,
                0xfd809814c4f1b2e9,
            ),
            (
                r#"{ lognormal = { median = "300ms", p99 = "1.2s" } }"#,
                0x6e1347a0b0f45e66,
                0xcc44bf368f536dd9,
            ),
            (
                r#"{ lognormal = { median = "500ms", p99 = "500ms" } }"#,
                0x58a814848ecd747,
                0x8270d2b4ba32e007,
            ),
        ];
        // (completion_tokens, hash)
        let counts: [(&str, u64); 5] = [
            ("{ fixed = 16 }", 0x3fb5ff3e86e11a09),
            ("{ uniform = { min = 50, max = 400 } }", 0x431d27a2fce4b766),
            ("{ uniform = { min = 7, max = 7 } }", 0x7a5d285d24d88832),
            (
                "{ lognormal = { median = 200, p99 = 900 } }",
                0x715a3ae277270b91,
            ),
            (
                "{ lognormal = { median = 1500, p99 = 6000 } }",
                0x6b134630ac7308f4,
            ),
        ];
        let mut wrong = Vec::new();
        for (i, (dist, full, tenfold)) in durations.iter().enumerate() {
            let cfg = ProviderConfig::from_toml(&format!("[latency]\nttft = {dist}\n"), "p.toml")
                .unwrap();
            let scaled = cfg.scaled(wire::Scale {
                time: 10.0,
                quota: 1.0,
            });
            for (time, c, want) in [(1, &cfg, full), (10, &scaled, tenfold)] {
                let got = draws(7 + i as u64, |rng| {
                    c.latency.ttft.sample(rng).as_nanos() as u64
                });
                if got != *want {
                    wrong.push(format!("{dist} at time scale {time}: {got:#x}"));
                }
            }
        }
        for (i, (dist, want)) in counts.iter().enumerate() {
            let cfg = ProviderConfig::from_toml(&format!("completion_tokens = {dist}\n"), "p.toml")
                .unwrap();
            let got = draws(70 + i as u64, |rng| {
                u64::from(cfg.completion_tokens.sample(rng))
            });
            if got != *want {
                wrong.push(format!("{dist}: {got:#x}"));
            }
        }
        assert!(wrong.is_empty(), "draws changed:\n{}", wrong.join("\n"));
    }

    #[test]
    fn uniform_and_fixed_counts() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let u: Dist<u32> = Dist::Uniform { min: 10, max: 20 };
        for _ in 0..1000 {
            let x = u.sample(&mut rng);
            assert!((10..=20).contains(&x));
        }
        assert_eq!(Dist::Fixed(5u32).sample(&mut rng), 5);
        assert_eq!(u.mean(), 15.0);
    }
}
