//! The program the library runs in, and how it speaks: the inputs a user
//! gives it by name ([`Input`]), and the command lines of its own child
//! processes (a reference gateway, a shard of the load).
//!
//! The library says what an input is; the program that parses it (the
//! `rehearse` binary, whose flags they are) says once how a user spells
//! it, and how to start a piece of itself, by [`install`]ing a [`Host`]
//! before anything else. A message that points a user to an input writes
//! `{Input::AllowRemote}`: with the binary's host that reads
//! `--allow-remote`; with none (the library on its own, its tests) the
//! input's plain name, `allow_remote`. So the library never spells a flag,
//! and a flag renamed in the binary is renamed in every message.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

/// An input a user gives beside the scenario, that a message of the
/// library points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// Load may go to a host outside loopback.
    AllowRemote,
    /// A gateway the harness did not start was configured for the time
    /// scale.
    AllowTimeScale,
    /// An output may overwrite what is there.
    Force,
    /// Where the fake providers are (in-process, external, URLs).
    Provider,
    /// Where the in-process providers listen.
    ProviderListen,
    /// A provider's URL as a load process is told it (`NAME=URL`).
    ProviderUrl,
    /// The spending guard's budget of tokens.
    MaxSpendTokens,
    /// Where the live metrics are served.
    MetricsListen,
    /// A scenario field set on the command line (`dotted.key=value`).
    Set,
    /// One field over several values, a variant each.
    Each,
    /// A comparison's expectation of a variant.
    Expect,
    /// A comparison's tolerance.
    Tolerance,
    /// The time scale.
    TimeScale,
    /// The quota scale.
    QuotaScale,
    /// The gateway under test, already running, by URL.
    Target,
    /// The gateway under test, as a command to start.
    GatewayCommand,
    /// The API the callers speak.
    Dialect,
    /// `init`'s normal rate.
    NormalRate,
    /// `init`'s peak rate.
    PeakRate,
    /// `init`'s peak duration.
    PeakDuration,
    /// `init`'s provider quota, tokens a minute.
    QuotaTokensPerMinute,
    /// `init`'s tokens a request.
    TokensPerRequest,
    /// `init`'s callers' patience.
    Patience,
    /// `calibrate`'s most calls at once.
    MaxConcurrency,
    /// `calibrate`'s most levels.
    MaxLevels,
    /// `calibrate`'s time at each level.
    StepDuration,
    /// `calibrate`'s share of errors that ends the sweep.
    ErrorThreshold,
    /// Measuring this machine's load-generator ceiling (a command).
    MeasureRig,
}

impl Input {
    /// The input's plain name, as the library says it with no host.
    pub fn name(self) -> &'static str {
        match self {
            Input::AllowRemote => "allow_remote",
            Input::AllowTimeScale => "allow_time_scale",
            Input::Force => "force",
            Input::Provider => "provider",
            Input::ProviderListen => "provider_listen",
            Input::ProviderUrl => "provider_url",
            Input::MaxSpendTokens => "max_spend_tokens",
            Input::MetricsListen => "metrics_listen",
            Input::Set => "set",
            Input::Each => "each",
            Input::Expect => "expect",
            Input::Tolerance => "tolerance",
            Input::TimeScale => "time_scale",
            Input::QuotaScale => "quota_scale",
            Input::Target => "target",
            Input::GatewayCommand => "gateway_command",
            Input::Dialect => "dialect",
            Input::NormalRate => "normal_rate",
            Input::PeakRate => "peak_rate",
            Input::PeakDuration => "peak_duration",
            Input::QuotaTokensPerMinute => "quota_tokens_per_minute",
            Input::TokensPerRequest => "tokens_per_request",
            Input::Patience => "patience",
            Input::MaxConcurrency => "max_concurrency",
            Input::MaxLevels => "max_levels",
            Input::StepDuration => "step_duration",
            Input::ErrorThreshold => "error_threshold",
            Input::MeasureRig => "calibrate_rig",
        }
    }
}

impl fmt::Display for Input {
    /// As the host spells it, else its plain name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spelled = HOST.get().map_or(self.name(), |h| (h.spell)(*self));
        f.write_str(spelled)
    }
}

/// One shard of the load, as a child process is told it: what `rehearse
/// run --shards N` starts N of.
#[derive(Debug, Clone)]
pub struct ShardCall<'a> {
    /// The run directory's scenario.
    pub scenario: &'a Path,
    /// The gateway's URL.
    pub target: &'a str,
    /// The run's time scale.
    pub time_scale: f64,
    /// This shard, from 0.
    pub shard: u32,
    /// Of how many.
    pub count: u32,
    /// When the schedule starts, seconds since the Unix epoch.
    pub start_at_s: f64,
    /// Where it writes its records.
    pub out: &'a Path,
    /// A CA file to trust, for an `https://` target.
    pub ca_file: Option<&'a Path>,
    /// Trust any certificate.
    pub insecure: bool,
    /// Its share of the spending guard's tokens.
    pub spend_share: Option<u64>,
    /// The fake providers' URLs by name.
    pub provider_urls: Vec<(&'a str, &'a str)>,
}

/// The program the library runs in.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    /// How a user spells an input.
    pub spell: fn(Input) -> &'static str,
    /// The arguments (after the program) that start the reference gateway
    /// on the config at the path.
    pub reference_gateway: fn(&Path) -> Vec<OsString>,
    /// The arguments (after the program) that start one shard of the load.
    pub load_shard: fn(&ShardCall<'_>) -> Vec<OsString>,
}

static HOST: OnceLock<Host> = OnceLock::new();

/// Makes `host` the program's, once: returns false (and changes nothing)
/// if one was installed before.
pub fn install(host: Host) -> bool {
    HOST.set(host).is_ok()
}

/// The installed host, if any: a child process of the program's own can
/// be started only with one.
pub(crate) fn host() -> Option<&'static Host> {
    HOST.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_host_an_input_reads_as_its_plain_name() {
        // The library's tests install no host.
        assert!(host().is_none());
        assert_eq!(Input::AllowRemote.to_string(), "allow_remote");
        assert_eq!(format!("pass {}", Input::Force), "pass force");
    }
}
