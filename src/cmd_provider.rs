//! `rehearse provider`: serve the chaos fake LLM provider until Ctrl-C or
//! SIGTERM (then exit 0).

use std::path::PathBuf;

use anyhow::Context as _;
use fake_provider::{ConfigError, FakeProvider, ProviderConfig};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse provider`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A provider config file (the same schema as a scenario's [provider]).
    #[arg(long, conflicts_with = "scenario")]
    config: Option<PathBuf>,
    /// A scenario file: its [provider] section is used.
    scenario: Option<PathBuf>,
    /// Address to listen on. Loopback by default: the admin endpoints then
    /// answer only this machine.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Override the config's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Worker threads serving calls (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

/// Reads and validates the provider config named by the flags.
fn load(args: &Args) -> Result<ProviderConfig, ConfigError> {
    if let Some(path) = &args.config {
        let origin = path.display().to_string();
        return ProviderConfig::from_toml(&read(path, &origin)?, &origin);
    }
    let Some(path) = &args.scenario else {
        return Ok(ProviderConfig::default());
    };
    let origin = path.display().to_string();
    let text = read(path, &origin)?;
    let src = toml_located::Source::new(&text, &origin);
    // The scenario's other tables belong to other subcommands, which
    // check them.
    #[derive(serde::Deserialize)]
    struct Probe {
        provider: Option<toml::Table>,
    }
    if src.parse::<Probe>()?.provider.is_none() {
        return Ok(ProviderConfig::default());
    }
    // Deserialized in place so errors keep their lines.
    #[derive(serde::Deserialize)]
    struct Section {
        provider: ProviderConfig,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    let section: Section = src.parse()?;
    section.provider.validate(&src, "provider.")?;
    Ok(section.provider)
}

fn read(path: &std::path::Path, origin: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: 0,
        column: 0,
        field: String::new(),
        message: format!("cannot read the file: {e}"),
    })
}

/// Runs `rehearse provider`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let mut config = load(&args).bad_input()?;
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    let threads = args.threads.map(usize::from);
    crate::runtime::block_on(threads, None, |stop| serve(config, &args.listen, stop))
}

async fn serve(
    config: ProviderConfig,
    listen: &str,
    stop: CancellationToken,
) -> Result<Ended, Error> {
    let phases: Vec<String> = config.timeline.iter().map(|p| p.name.clone()).collect();
    let handle = FakeProvider::new(config)
        .bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
        .bad_input()?;
    let base = handle.base_url();
    let mut banner = format!(
        "fake provider listening on {base}\n  OpenAI:    {base}/v1/chat/completions   (SDK base_url: {base}/v1)\n  Anthropic: {base}/v1/messages           (SDK base_url: {base})\n  admin:     {base}/_fake/stats  /_fake/records  /_fake/phase  /_fake/overrides  /metrics\n"
    );
    if !phases.is_empty() {
        banner.push_str(&format!("  timeline:  {}\n", phases.join(", ")));
    }
    // A reader that went away (a closed pipe) must not stop the server.
    let mut out = std::io::stdout();
    let _ = std::io::Write::write_all(&mut out, banner.as_bytes());
    let _ = std::io::Write::flush(&mut out);
    stop.cancelled().await;
    eprintln!("stopping: {} calls served", handle.stats().received);
    handle.shutdown().await;
    Ok(Ended::Pass)
}
