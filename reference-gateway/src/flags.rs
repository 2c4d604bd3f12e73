//! A gateway process's settings as `rehearse gateway` is given them: flags
//! over a `--config` file over the defaults, then compressed by
//! `REHEARSE_TIME_SCALE` when it is set.
//!
//! The binary parses the flags into [`GatewayFlags`]; everything after that
//! (reading the file, which flag lands in which mode's knob, the time
//! scale, validation, the note about the default token rate) is here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(feature = "clap")]
use crate::config::parse_duration;
use crate::config::{GatewayConfig, Mode, Order, Routing, UpstreamConfig};
use crate::error::ConfigError;
use crate::fault::Fault;

/// What `rehearse gateway --help` says of the process, before its flags.
pub const ABOUT: &str = "\
Run the reference gateway in front of an upstream provider.

Flags override a --config file. REHEARSE_TIME_SCALE=N, when set, then compresses every \
duration N times and multiplies the token rate by N: for a gateway started by hand or by \
another harness. `rehearse run` does not set it for the reference gateway (it writes a \
gateway.toml already at rehearsal scale, and removes the variable).

Prints `listening on http://ADDR` once it serves; Ctrl-C or SIGTERM drains it and exits 0.";

/// The settings given as flags: each one given overrides the config file's
/// (or the default's). `--queue` and `--wait-budget` go to whichever of
/// `bounded` and `aimd` runs. With the `clap` feature these are the flags
/// of `rehearse gateway` themselves (one list, not a copy in the binary):
/// each field's doc is its `--help` line.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct GatewayFlags {
    /// Admission mode: naive, bounded, deadline, aimd or timeout.
    #[cfg_attr(feature = "clap", arg(long))]
    pub mode: Option<Mode>,
    /// Base URL of the provider, e.g. http://127.0.0.1:8080; or, repeated,
    /// one of several upstreams: `NAME=URL[,weight=W][,priority=P]` (e.g.
    /// `--upstream primary=http://127.0.0.1:8080 --upstream
    /// secondary=http://127.0.0.1:8081,priority=1`).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "URL | NAME=URL[,weight=W][,priority=P]")
    )]
    pub upstream: Vec<String>,
    /// Several upstreams: failover (priority order) or weighted.
    #[cfg_attr(feature = "clap", arg(long))]
    pub routing: Option<Routing>,
    /// How long a refusing upstream cools down when it gave no Retry-After
    /// (default 5s).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub cooldown: Option<Duration>,
    /// Never cool a refusing upstream down: the next request tries it
    /// again at once.
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_cooldowns: bool,
    /// Address to listen on (127.0.0.1:0 picks a free port and prints it).
    #[cfg_attr(feature = "clap", arg(long))]
    pub listen: Option<SocketAddr>,
    /// A TOML file with any of these settings; flags override it.
    #[cfg_attr(feature = "clap", arg(long))]
    pub config: Option<PathBuf>,
    /// Request bodies over this many bytes are answered 413.
    #[cfg_attr(feature = "clap", arg(long))]
    pub max_body_bytes: Option<usize>,
    /// Every mode: an upstream call still running this long after dispatch
    /// is cancelled and answered 504 upstream_timeout (default: none).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub upstream_timeout: Option<Duration>,
    /// bounded: upstream calls in flight at once.
    #[cfg_attr(feature = "clap", arg(long))]
    pub concurrency: Option<u32>,
    /// bounded, aimd: jobs allowed to wait; one more is answered 429.
    #[cfg_attr(feature = "clap", arg(long))]
    pub queue: Option<u32>,
    /// bounded, aimd: a job that waited longer is dropped unsent (503).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub wait_budget: Option<Duration>,
    /// deadline: the quota's tokens per minute (the drain rate); default
    /// 500,000, the flash-promotion account (said on stderr at start: set
    /// it to your provider quota's, or requests are admitted or refused by
    /// a rate the upstream never had).
    #[cfg_attr(feature = "clap", arg(long))]
    pub tokens_per_minute: Option<f64>,
    /// deadline: the caller's patience when the request carries none.
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub default_deadline: Option<Duration>,
    /// deadline: the provider's expected service time.
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub expected_service: Option<Duration>,
    /// deadline: fifo or lifo.
    #[cfg_attr(feature = "clap", arg(long))]
    pub order: Option<Order>,
    /// deadline: header carrying the caller's remaining patience (ms).
    #[cfg_attr(feature = "clap", arg(long))]
    pub patience_header: Option<String>,
    /// deadline: max_tokens assumed for a request that sets none.
    #[cfg_attr(feature = "clap", arg(long))]
    pub default_max_tokens: Option<u64>,
    /// aimd: the limit at start.
    #[cfg_attr(feature = "clap", arg(long))]
    pub initial: Option<u32>,
    /// aimd: the lowest limit.
    #[cfg_attr(feature = "clap", arg(long))]
    pub floor: Option<u32>,
    /// aimd: the highest limit.
    #[cfg_attr(feature = "clap", arg(long))]
    pub ceiling: Option<u32>,
    /// aimd: a call running past this cuts the limit x0.9.
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub latency_target: Option<Duration>,
    /// Every mode: at most N upstream calls at once (a client's connection
    /// pool); beyond it calls wait in the pool, timed as provider latency.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub pool_max_connections: Option<usize>,
    /// Meter the pool's wait apart (gateway_pool_wait_seconds); only ever
    /// turns it on.
    #[cfg_attr(feature = "clap", arg(long))]
    pub split_pool_wait: bool,
    /// Every mode: retry a provider's 429/503/529 up to N times, after its
    /// Retry-After (default 0).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub upstream_retries: Option<u32>,
    /// A fault to show a check failing; never for a real rehearsal.
    /// Repeatable: buffer-stream, buffer-body, leak-slots[=N], retry-storm,
    /// no-cancel, hoard, refuse-408, refuse-500-after=DURATION (see the
    /// README's "Faults on purpose"). Replaces the config file's `fault`.
    #[cfg_attr(feature = "clap", arg(long, value_name = "KIND"))]
    pub fault: Vec<Fault>,
}

/// Why the flags, the file and the time scale make no configuration.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    /// The `--config` file cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `--config` file is not a gateway configuration.
    #[error(transparent)]
    File(#[from] ConfigError),
    /// Neither the flags nor a file name the mode and the upstream.
    #[error("--mode and --upstream are required (or a --config file that sets them)")]
    Required,
    /// `REHEARSE_TIME_SCALE` is not a number above 0 (its raw value).
    #[error("REHEARSE_TIME_SCALE=`{0}`: expected a number above 0")]
    TimeScale(String),
    /// The configuration made is unusable; `field` names the value.
    #[error("field `{field}`: {message}")]
    Invalid {
        /// Dotted path of the offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl GatewayFlags {
    /// True if and only if a token rate was given, by `--tokens-per-minute`
    /// or by the `--config` file's `deadline.tokens_per_minute`.
    pub fn rate_given(&self) -> bool {
        self.tokens_per_minute.is_some() || self.config.as_deref().is_some_and(file_sets_rate)
    }
}

impl GatewayConfig {
    /// The configuration of a gateway process: `flags` over the `--config`
    /// file they name (else the defaults), compressed by `time_scale` (the
    /// raw value of `REHEARSE_TIME_SCALE`, when set: durations ÷ it, the
    /// token rate × it, time alone), then validated.
    pub fn from_flags(
        flags: GatewayFlags,
        time_scale: Option<&str>,
    ) -> Result<GatewayConfig, FlagsError> {
        let mut config = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| FlagsError::Read {
                    path: path.clone(),
                    source,
                })?;
                let mut c = GatewayConfig::from_toml(&text, &path.display().to_string())?;
                if let Some(m) = flags.mode {
                    c.mode = m;
                }
                if !flags.upstream.is_empty() {
                    (c.upstream, c.upstreams) = upstream_flags(&flags.upstream)?;
                }
                c
            }
            None => {
                let Some(mode) = flags.mode.filter(|_| !flags.upstream.is_empty()) else {
                    return Err(FlagsError::Required);
                };
                let (upstream, upstreams) = upstream_flags(&flags.upstream)?;
                let mut c = GatewayConfig::new(mode, upstream);
                c.upstreams = upstreams;
                c
            }
        };
        config.apply(flags);
        if let Some(raw) = time_scale {
            let scale: f64 = raw
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0)
                .ok_or_else(|| FlagsError::TimeScale(raw.to_string()))?;
            config = config.scaled(wire::Scale {
                time: scale,
                quota: 1.0,
            });
        }
        config
            .validate()
            .map_err(|(field, message)| FlagsError::Invalid { field, message })?;
        Ok(config)
    }

    /// Every knob `flags` gives, set.
    fn apply(&mut self, flags: GatewayFlags) {
        if let Some(v) = flags.listen {
            self.listen = v;
        }
        if let Some(v) = flags.routing {
            self.routing = v;
        }
        if let Some(v) = flags.cooldown {
            self.cooldown = v;
        }
        if flags.no_cooldowns {
            self.cooldowns = Some(false);
        }
        if let Some(v) = flags.max_body_bytes {
            self.max_body_bytes = v;
        }
        if let Some(v) = flags.upstream_timeout {
            self.upstream_timeout = Some(v);
        }
        if let Some(v) = flags.pool_max_connections {
            self.pool_max_connections = Some(v);
        }
        self.split_pool_wait |= flags.split_pool_wait;
        if let Some(v) = flags.upstream_retries {
            self.upstream_retries = v;
        }
        if !flags.fault.is_empty() {
            self.fault = flags.fault;
        }
        if let Some(v) = flags.concurrency {
            self.bounded.concurrency = v as usize;
        }
        // --queue and --wait-budget belong to whichever of bounded and aimd runs.
        if let Some(v) = flags.queue {
            match self.mode {
                Mode::Aimd => self.aimd.queue = v as usize,
                _ => self.bounded.queue = v as usize,
            }
        }
        if let Some(v) = flags.wait_budget {
            match self.mode {
                Mode::Aimd => self.aimd.wait_budget = v,
                _ => self.bounded.wait_budget = v,
            }
        }
        let d = &mut self.deadline;
        if let Some(v) = flags.tokens_per_minute {
            d.tokens_per_minute = v;
        }
        if let Some(v) = flags.default_deadline {
            d.default_deadline = v;
        }
        if let Some(v) = flags.expected_service {
            d.expected_service = v;
        }
        if let Some(v) = flags.order {
            d.order = v;
        }
        if let Some(v) = flags.patience_header {
            d.patience_header = v;
        }
        if let Some(v) = flags.default_max_tokens {
            d.default_max_tokens = v;
        }
        let a = &mut self.aimd;
        if let Some(v) = flags.initial {
            a.initial = v as usize;
        }
        if let Some(v) = flags.floor {
            a.floor = v as usize;
        }
        if let Some(v) = flags.ceiling {
            a.ceiling = v as usize;
        }
        if let Some(v) = flags.latency_target {
            a.latency_target = v;
        }
    }

    /// What a deadline gateway says at start when it runs on the default
    /// token rate, given neither by flag nor by file
    /// ([`GatewayFlags::rate_given`]).
    pub fn default_rate_note(&self, rate_given: bool) -> Option<String> {
        (self.mode == Mode::Deadline && !rate_given).then(|| {
            format!(
                "deadline: no --tokens-per-minute given: pacing to {:.0} tokens/min, the default \
                 (500,000 a minute, the flash-promotion account, times REHEARSE_TIME_SCALE when set); \
                 give your provider quota's rate",
                self.deadline.tokens_per_minute
            )
        })
    }
}

/// The `--upstream` flags: one plain URL (a lone `upstream`), or each
/// `NAME=URL[,weight=W][,priority=P]` (`upstreams`).
fn upstream_flags(given: &[String]) -> Result<(String, Vec<UpstreamConfig>), FlagsError> {
    let invalid = |message: String| FlagsError::Invalid {
        field: "--upstream".into(),
        message,
    };
    let plain = |text: &str| {
        text.split_once('=')
            .is_none_or(|(name, _)| name.contains("://"))
    };
    if let [one] = given {
        if plain(one) {
            return Ok((one.clone(), Vec::new()));
        }
    }
    let mut upstreams = Vec::new();
    for text in given {
        if plain(text) {
            return Err(invalid(format!(
                "`{text}`: with several upstreams, each is NAME=URL[,weight=W][,priority=P]"
            )));
        }
        let (name, rest) = text.split_once('=').expect("not plain: it has a name");
        let mut parts = rest.split(',');
        let mut upstream = UpstreamConfig {
            name: name.trim().to_string(),
            url: parts.next().map(|u| u.trim().to_string()),
            provider: None,
            weight: 1,
            priority: 0,
        };
        for part in parts {
            let number = |v: &str| {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| invalid(format!("`{text}`: `{part}` is not a whole number")))
            };
            match part.split_once('=') {
                Some(("weight", v)) => upstream.weight = number(v)?,
                Some(("priority", v)) => upstream.priority = number(v)?,
                _ => {
                    return Err(invalid(format!(
                        "`{text}`: `{part}`: expected weight=W or priority=P"
                    )))
                }
            }
        }
        upstreams.push(upstream);
    }
    Ok((String::new(), upstreams))
}

/// True if and only if the config file at `path` writes
/// `deadline.tokens_per_minute` (an unreadable file is reported later, by
/// [`GatewayConfig::from_flags`]).
fn file_sets_rate(path: &Path) -> bool {
    #[derive(serde::Deserialize)]
    struct File {
        deadline: Option<Deadline>,
    }
    #[derive(serde::Deserialize)]
    struct Deadline {
        tokens_per_minute: Option<serde::de::IgnoredAny>,
    }
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| toml_located::from_str::<File>(&text, "").ok())
        .and_then(|file| file.deadline?.tokens_per_minute)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rehearse gateway`'s flags (with the `clap` feature) parse into
    /// these settings.
    #[cfg(feature = "clap")]
    #[test]
    fn the_flags_parse_into_the_settings() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            flags: GatewayFlags,
        }
        let args = [
            "gateway",
            "--mode",
            "aimd",
            "--upstream",
            "http://127.0.0.1:9",
        ];
        let more = ["--queue", "5", "--wait-budget", "2s"];
        let f = Cli::try_parse_from(args.iter().chain(&more)).unwrap().flags;
        assert_eq!((f.mode, f.queue), (Some(Mode::Aimd), Some(5)));
        assert_eq!(f.upstream, ["http://127.0.0.1:9"]);
        let several = [
            "gateway",
            "--mode",
            "bounded",
            "--upstream",
            "a=http://127.0.0.1:9",
            "--upstream",
            "b=http://127.0.0.1:10,priority=1",
            "--routing",
            "weighted",
            "--cooldown",
            "3s",
            "--no-cooldowns",
        ];
        assert_eq!(f.wait_budget, Some(Duration::from_secs(2)));
        let g = Cli::try_parse_from(several).unwrap().flags;
        assert_eq!(g.upstream.len(), 2);
        assert_eq!(g.routing, Some(Routing::Weighted));
        assert_eq!(g.cooldown, Some(Duration::from_secs(3)));
        assert!(g.no_cooldowns);
        assert!(Cli::try_parse_from(["gateway", "--mode", "fancy"]).is_err());
        assert!(Cli::try_parse_from(["gateway", "--wait-budget", "soon"]).is_err());
        let faulty = ["--fault", "hoard", "--fault", "refuse-500-after=2s"];
        let h = Cli::try_parse_from(args.iter().chain(&faulty))
            .unwrap()
            .flags;
        assert_eq!(
            h.fault,
            [Fault::Hoard, Fault::Refuse500After(Duration::from_secs(2))]
        );
        let err = Cli::try_parse_from(args.iter().chain(&["--fault", "slow"]))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("expected one of buffer-stream"), "{err}");
    }

    #[test]
    fn faults_replace_the_files_and_are_time_scaled() {
        let f = GatewayFlags {
            fault: vec![Fault::Refuse500After(Duration::from_secs(2))],
            ..flags(Mode::Naive)
        };
        let c = GatewayConfig::from_flags(f, Some("4")).unwrap();
        assert_eq!(c.fault, [Fault::Refuse500After(Duration::from_millis(500))]);
        let f = GatewayFlags {
            fault: vec![Fault::LeakSlots(None)],
            ..flags(Mode::Timeout)
        };
        let err = GatewayConfig::from_flags(f, None).unwrap_err().to_string();
        assert!(
            err.contains("field `fault`") && err.contains("leak-slots"),
            "{err}"
        );
    }

    fn flags(mode: Mode) -> GatewayFlags {
        GatewayFlags {
            mode: Some(mode),
            upstream: vec!["http://127.0.0.1:9".into()],
            ..GatewayFlags::default()
        }
    }

    #[test]
    fn flags_build_a_config_and_the_time_scale_compresses_it() {
        let f = GatewayFlags {
            concurrency: Some(8),
            queue: Some(11),
            wait_budget: Some(Duration::from_secs(2)),
            ..flags(Mode::Bounded)
        };
        let c = GatewayConfig::from_flags(f, Some("4")).unwrap();
        assert_eq!(c.mode, Mode::Bounded);
        assert_eq!((c.bounded.concurrency, c.bounded.queue), (8, 11));
        assert_eq!(c.bounded.wait_budget, Duration::from_millis(500));
        assert_eq!(
            c.listen,
            "127.0.0.1:0".parse().unwrap(),
            "loopback, any port"
        );
    }

    #[test]
    fn queue_and_wait_budget_follow_the_mode() {
        let f = GatewayFlags {
            queue: Some(5),
            initial: Some(4),
            floor: Some(2),
            ceiling: Some(9),
            latency_target: Some(Duration::from_millis(300)),
            ..flags(Mode::Aimd)
        };
        let c = GatewayConfig::from_flags(f, None).unwrap();
        assert_eq!(c.aimd.queue, 5);
        assert_eq!((c.aimd.initial, c.aimd.floor, c.aimd.ceiling), (4, 2, 9));
        assert_eq!(c.aimd.latency_target, Duration::from_millis(300));
    }

    #[test]
    fn flags_override_the_config_file() {
        let path = std::env::temp_dir().join(format!("rehearse-gw-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "mode = \"deadline\"\nupstream = \"http://127.0.0.1:9\"\n[deadline]\ntokens_per_minute = 1000\norder = \"lifo\"\n",
        )
        .unwrap();
        let f = GatewayFlags {
            config: Some(path.clone()),
            tokens_per_minute: Some(6000.0),
            ..GatewayFlags::default()
        };
        let c = GatewayConfig::from_flags(f, None).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(c.deadline.tokens_per_minute, 6000.0);
        assert_eq!(c.deadline.order, Order::Lifo, "kept from the file");
    }

    #[test]
    fn deadline_defaults_to_the_flash_promotion_account() {
        let c = GatewayConfig::from_flags(flags(Mode::Deadline), None).unwrap();
        assert_eq!(c.deadline.tokens_per_minute, 500_000.0);
        // ...and says so at start, unless a rate was given.
        let note = c.default_rate_note(false).unwrap();
        assert!(note.contains("500000 tokens/min"), "{note}");
        assert_eq!(c.default_rate_note(true), None);
        let bounded = GatewayConfig::new(Mode::Bounded, "http://127.0.0.1:9");
        assert_eq!(bounded.default_rate_note(false), None);
        let dir = std::env::temp_dir();
        let with = dir.join(format!("rehearse-gw-rate-{}.toml", std::process::id()));
        let without = dir.join(format!("rehearse-gw-norate-{}.toml", std::process::id()));
        std::fs::write(
            &with,
            "mode = \"deadline\"\n[deadline]\ntokens_per_minute = 6000\n",
        )
        .unwrap();
        std::fs::write(
            &without,
            "mode = \"deadline\"\n[deadline]\norder = \"lifo\"\n",
        )
        .unwrap();
        assert!(file_sets_rate(&with));
        assert!(!file_sets_rate(&without));
        assert!(!file_sets_rate(&dir.join("rehearse-gw-none.toml")));
        let given = |config: &Path, rate: Option<f64>| GatewayFlags {
            config: Some(config.to_path_buf()),
            tokens_per_minute: rate,
            ..GatewayFlags::default()
        };
        assert!(given(&with, None).rate_given());
        assert!(given(&without, Some(6000.0)).rate_given());
        assert!(!given(&without, None).rate_given());
        std::fs::remove_file(&with).unwrap();
        std::fs::remove_file(&without).unwrap();
    }

    #[test]
    fn repeated_upstreams_name_each_with_its_weight_and_priority() {
        let f = GatewayFlags {
            upstream: vec![
                "primary=http://127.0.0.1:9/v,weight=3".into(),
                "secondary=http://127.0.0.1:10,priority=1,weight=1".into(),
            ],
            routing: Some(Routing::Weighted),
            cooldown: Some(Duration::from_secs(8)),
            ..flags(Mode::Bounded)
        };
        let c = GatewayConfig::from_flags(f, Some("2")).unwrap();
        assert_eq!(c.upstream, "");
        assert_eq!(c.upstreams.len(), 2);
        assert_eq!(c.upstreams[0].name, "primary");
        assert_eq!(c.upstreams[0].url.as_deref(), Some("http://127.0.0.1:9/v"));
        assert_eq!((c.upstreams[0].weight, c.upstreams[0].priority), (3, 0));
        assert_eq!((c.upstreams[1].weight, c.upstreams[1].priority), (1, 1));
        assert_eq!(c.routing, Routing::Weighted);
        assert_eq!(c.cooldown, Duration::from_secs(4), "scaled by time");
        assert!(c.cooldowns_on(), "on with upstreams");
        let off = GatewayFlags {
            upstream: vec!["a=http://127.0.0.1:9".into()],
            no_cooldowns: true,
            ..flags(Mode::Naive)
        };
        assert!(!GatewayConfig::from_flags(off, None).unwrap().cooldowns_on());
        // A URL with `=` in its query is still one plain URL.
        let plain = GatewayFlags {
            upstream: vec!["http://127.0.0.1:9/p?x=1".into()],
            ..flags(Mode::Naive)
        };
        let c = GatewayConfig::from_flags(plain, None).unwrap();
        assert_eq!(
            (c.upstream.as_str(), c.upstreams.len()),
            ("http://127.0.0.1:9/p?x=1", 0)
        );
        for (bad, says) in [
            (
                vec!["http://127.0.0.1:9", "b=http://127.0.0.1:10"],
                "NAME=URL",
            ),
            (vec!["a=http://127.0.0.1:9,weight=x"], "whole number"),
            (
                vec!["a=http://127.0.0.1:9,speed=2"],
                "weight=W or priority=P",
            ),
        ] {
            let f = GatewayFlags {
                upstream: bad.iter().map(|s| s.to_string()).collect(),
                ..flags(Mode::Naive)
            };
            let err = GatewayConfig::from_flags(f, None).unwrap_err().to_string();
            assert!(err.contains("--upstream") && err.contains(says), "{err}");
        }
        let twice = GatewayFlags {
            upstream: vec![
                "a=http://127.0.0.1:9".into(),
                "a=http://127.0.0.1:10".into(),
            ],
            ..flags(Mode::Naive)
        };
        let err = GatewayConfig::from_flags(twice, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("upstreams[1].name"), "{err}");
    }

    #[test]
    fn bad_input_is_refused() {
        let no_upstream = GatewayFlags {
            upstream: Vec::new(),
            ..flags(Mode::Naive)
        };
        let err = GatewayConfig::from_flags(no_upstream, None).unwrap_err();
        assert!(matches!(err, FlagsError::Required), "{err}");
        let err = GatewayConfig::from_flags(flags(Mode::Naive), Some("0")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "REHEARSE_TIME_SCALE=`0`: expected a number above 0"
        );
        let f = GatewayFlags {
            concurrency: Some(0),
            ..flags(Mode::Bounded)
        };
        let err = GatewayConfig::from_flags(f, None).unwrap_err();
        assert!(err.to_string().contains("bounded.concurrency"), "{err}");
        let missing = GatewayFlags {
            config: Some("/nonexistent/gateway.toml".into()),
            ..GatewayFlags::default()
        };
        let err = GatewayConfig::from_flags(missing, None).unwrap_err();
        assert_eq!(err.to_string(), "cannot read /nonexistent/gateway.toml");
    }
}
