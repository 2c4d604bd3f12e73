//! The binary as the library's host: how a user spells each input the
//! library's messages point to (this binary's flags), and the command
//! lines of the binary's own child processes the library starts (a
//! reference gateway, a shard of the load). Installed first thing in
//! `main`.

use std::ffi::OsString;
use std::path::Path;

use harness::{Host, Input, ShardCall};

/// This binary's host.
pub(crate) const HOST: Host = Host {
    spell,
    reference_gateway,
    load_shard,
};

/// The flag (or command) a user gives for `input`.
fn spell(input: Input) -> &'static str {
    match input {
        Input::AllowRemote => "--allow-remote",
        Input::AllowTimeScale => "--allow-time-scale",
        Input::Force => "--force",
        Input::Provider => "--provider",
        Input::ProviderListen => "--provider-listen",
        Input::ProviderUrl => "--provider-url",
        Input::MaxSpendTokens => "--max-spend-tokens",
        Input::MetricsListen => "--metrics-listen",
        Input::Set => "--set",
        Input::Each => "--each",
        Input::Expect => "--expect",
        Input::Tolerance => "--tolerance",
        Input::TimeScale => "--time-scale",
        Input::QuotaScale => "--quota-scale",
        Input::Target => "--target",
        Input::GatewayCommand => "--gateway-command",
        Input::Dialect => "--dialect",
        Input::NormalRate => "--normal-rate",
        Input::PeakRate => "--peak-rate",
        Input::PeakDuration => "--peak-duration",
        Input::QuotaTokensPerMinute => "--quota-tokens-per-minute",
        Input::TokensPerRequest => "--tokens-per-request",
        Input::Patience => "--patience",
        Input::MaxConcurrency => "--max-concurrency",
        Input::MaxLevels => "--max-levels",
        Input::StepDuration => "--step-duration",
        Input::ErrorThreshold => "--error-threshold",
        Input::MeasureRig => "rehearse calibrate --rig",
    }
}

/// `rehearse gateway --config FILE`.
fn reference_gateway(config: &Path) -> Vec<OsString> {
    vec!["gateway".into(), "--config".into(), config.into()]
}

/// `rehearse load SCENARIO --shard I/N ...`, one shard of a run's load.
fn load_shard(s: &ShardCall<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["load".into(), s.scenario.into()];
    let mut flag = |name: &str, value: OsString| {
        a.push(name.into());
        a.push(value);
    };
    flag("--target", s.target.into());
    flag(spell(Input::TimeScale), s.time_scale.to_string().into());
    flag("--shard", format!("{}/{}", s.shard, s.count).into());
    flag("--start-at", format!("{:.6}", s.start_at_s).into());
    flag("--out", s.out.into());
    if let Some(ca) = s.ca_file {
        flag("--ca-file", ca.into());
    }
    if let Some(n) = s.spend_share {
        flag(spell(Input::MaxSpendTokens), n.to_string().into());
    }
    for (name, url) in &s.provider_urls {
        flag(spell(Input::ProviderUrl), format!("{name}={url}").into());
    }
    if s.insecure {
        a.push("--insecure".into());
    }
    a.push("--no-progress".into());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_told_its_part_of_the_run() {
        let call = ShardCall {
            scenario: Path::new("run/scenario.toml"),
            target: "http://127.0.0.1:9",
            time_scale: 10.0,
            shard: 1,
            count: 4,
            start_at_s: 1.5,
            out: Path::new("run/shards/1"),
            ca_file: None,
            insecure: true,
            spend_share: Some(250),
            provider_urls: vec![("primary", "http://127.0.0.1:7")],
        };
        let argv: Vec<String> = load_shard(&call)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            argv.join(" "),
            "load run/scenario.toml --target http://127.0.0.1:9 --time-scale 10 --shard 1/4 \
             --start-at 1.500000 --out run/shards/1 --max-spend-tokens 250 \
             --provider-url primary=http://127.0.0.1:7 --insecure --no-progress"
        );
        assert_eq!(
            reference_gateway(Path::new("g.toml")),
            ["gateway", "--config", "g.toml"].map(OsString::from)
        );
        assert_eq!(spell(Input::MeasureRig), "rehearse calibrate --rig");
    }
}
