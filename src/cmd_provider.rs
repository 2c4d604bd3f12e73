//! `rehearse provider`: serve the chaos fake LLM provider until Ctrl-C or
//! SIGTERM (then exit 0), writing each call's record to a file.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fake_provider::{process, FakeProvider};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse provider`.
#[derive(clap::Args, Debug)]
#[command(after_help = process::AFTER_HELP)]
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
    /// The file each call's record is written to, as a JSON line, when
    /// the call ends; an earlier run's is rotated to FILE.1 [default:
    /// $TMPDIR/rehearse-provider-PID/provider.jsonl, kept after exit]
    #[arg(long, value_name = "FILE")]
    records: Option<PathBuf>,
    /// The most bytes FILE and its earlier runs' files (FILE.1, FILE.2,
    /// ...) hold together: a number of bytes, or with a unit (KiB, MiB,
    /// GiB, TiB; kB, MB, GB, TB)
    #[arg(long, value_name = "N", default_value = "1GiB", value_parser = process::parse_byte_size)]
    records_max_bytes: u64,
    /// A file holding the admin token (surrounding whitespace ignored);
    /// before REHEARSE_ADMIN_TOKEN and the config's admin_token
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
}

/// Runs `rehearse provider`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let mut config =
        process::load_config(args.config.as_deref(), args.scenario.as_deref()).bad_input()?;
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    let (offset_ms, said) =
        process::apply_environment(&mut config, args.admin_token_file.as_deref()).bad_input()?;
    let records = match &args.records {
        Some(path) => path.clone(),
        None => process::default_records_path()
            .context("cannot make a directory for the records file")
            .invalid()?,
    };
    let threads = args.threads.map(usize::from);
    let provider = FakeProvider::new(config).clock_offset_ms(offset_ms);
    crate::runtime::block_on(threads, None, |stop| {
        serve(provider, &args, &records, said, stop)
    })
}

/// Serves `provider`; `said` goes in the banner after the addresses.
async fn serve(
    provider: FakeProvider,
    args: &Args,
    records: &Path,
    said: String,
    stop: CancellationToken,
) -> Result<Ended, Error> {
    let listen = &args.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
        .bad_input()?;
    let handle = provider
        .record_to(records)
        .records_max_bytes(args.records_max_bytes)
        .serve(listener)
        .context("--records") // the cause names the file
        .bad_input()?;
    let banner =
        process::listening_banner(&handle.base_url(), &said, records, args.records_max_bytes);
    // A reader that went away (a closed pipe) must not stop the server.
    let mut out = std::io::stdout();
    let _ = std::io::Write::write_all(&mut out, banner.as_bytes());
    let _ = std::io::Write::flush(&mut out);
    stop.cancelled().await;
    let stats = handle.stats();
    eprintln!("stopping: {} calls served", stats.received);
    let written = handle.shutdown().await.records;
    eprintln!(
        "{}",
        process::stopped_note(written, stats.records_dropped, records)
    );
    Ok(Ended::Pass)
}
