//! `rehearse provider`: serve the chaos fake LLM provider until Ctrl-C.

use std::path::PathBuf;

use anyhow::Context;
use fake_provider::{FakeProvider, ProviderConfig};

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

/// A scenario file seen only for its `[provider]` table; the other tables
/// belong to other subcommands and are checked by them.
#[derive(serde::Deserialize)]
struct ScenarioProvider {
    #[serde(default)]
    provider: Option<toml::Table>,
}

/// Reads and validates the provider config named by the flags.
fn load(args: &Args) -> Result<ProviderConfig, fake_provider::ConfigError> {
    if let Some(path) = &args.config {
        let origin = path.display().to_string();
        let text = read(path, &origin)?;
        return ProviderConfig::from_toml(&text, &origin);
    }
    if let Some(path) = &args.scenario {
        let origin = path.display().to_string();
        let text = read(path, &origin)?;
        let src = toml_located::Source::new(&text, &origin);
        let probe: ScenarioProvider = src.parse()?;
        if probe.provider.is_none() {
            return Ok(ProviderConfig::default());
        }
        // Deserialize the section in place so errors keep their lines.
        #[derive(serde::Deserialize)]
        struct Section {
            provider: ProviderConfig,
            #[serde(flatten)]
            _rest: toml::Table,
        }
        let section: Section = src.parse()?;
        section.provider.validate(&src, "provider.")?;
        return Ok(section.provider);
    }
    Ok(ProviderConfig::default())
}

fn read(path: &std::path::Path, origin: &str) -> Result<String, fake_provider::ConfigError> {
    std::fs::read_to_string(path).map_err(|e| fake_provider::ConfigError {
        origin: origin.to_string(),
        line: 0,
        column: 0,
        field: String::new(),
        message: format!("cannot read the file: {e}"),
    })
}

/// Runs `rehearse provider` and returns the exit code.
pub fn main(args: Args) -> u8 {
    let mut config = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = args.threads {
        builder.worker_threads(n as usize);
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return crate::exit::INVALID;
        }
    };
    match rt.block_on(serve(config, &args.listen)) {
        Ok(()) => crate::exit::OK,
        Err(e) => {
            eprintln!("error: {e:#}");
            crate::exit::BAD_INPUT
        }
    }
}

async fn serve(config: ProviderConfig, listen: &str) -> anyhow::Result<()> {
    let phases: Vec<String> = config.timeline.iter().map(|p| p.name.clone()).collect();
    let handle = FakeProvider::new(config)
        .bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    // Listen for signals before announcing the address: whoever reads it
    // may signal at once.
    let stop = shutdown_signal();
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
    stop.await;
    eprintln!("stopping: {} calls served", handle.stats().received);
    handle.shutdown().await;
    Ok(())
}

/// Registers for Ctrl-C and SIGTERM now, and returns a future that
/// resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
