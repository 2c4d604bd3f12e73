//! `rehearse provider`: serve the chaos fake LLM provider (a scenario's
//! several, each on its own port) until Ctrl-C or SIGTERM (then exit 0),
//! writing each call's record to a file.

use std::path::PathBuf;

use anyhow::Context as _;
use fake_provider::{process, FakeProvider, ProviderConfig};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse provider`.
#[derive(clap::Args, Debug)]
#[command(after_help = process::AFTER_HELP)]
pub struct Args {
    /// A provider config file (the same schema as a scenario's [provider]).
    #[arg(long, conflicts_with = "scenario")]
    config: Option<PathBuf>,
    /// A scenario file: its [provider], or each of its [[providers]]
    /// (with neither, the providers --listen NAME=ADDR names, each at the
    /// defaults until a harness uploads its table).
    scenario: Option<PathBuf>,
    /// Address to listen on. Loopback by default: the admin endpoints then
    /// answer only this machine. Several providers: one port each, the
    /// ports after ADDR's, or NAME=ADDR for each (repeatable).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR|NAME=ADDR")]
    listen: Vec<String>,
    /// Override the config's seed (several providers: plus each one's
    /// place, from 0).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker threads serving calls (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// The file each call's record is written to, as a JSON line, when
    /// the call ends; an earlier run's is rotated to FILE.1 (several
    /// providers: each its own, FILE with -NAME before its extension)
    /// [default: $TMPDIR/rehearse-provider-PID/provider.jsonl, kept after
    /// exit]
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

/// One provider of the process, ready to serve.
struct Served {
    provider: FakeProvider,
    name: Option<String>,
    listen: String,
    records: PathBuf,
    /// The banner's lines after its addresses.
    said: String,
}

/// Runs `rehearse provider`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let configs = match (&args.config, &args.scenario) {
        (None, None) => process::configs_named_by(&args.listen).bad_input()?,
        (config, scenario) => {
            process::load_configs(config.as_deref(), scenario.as_deref()).bad_input()?
        }
    };
    let names: Vec<&str> = configs
        .iter()
        .map(ProviderConfig::name_or_default)
        .collect();
    let listens = process::listen_addrs(&args.listen, &names).bad_input()?;
    let records = match &args.records {
        Some(path) => path.clone(),
        None => process::default_records_path()
            .context("cannot make a directory for the records file")
            .invalid()?,
    };
    let count = configs.len();
    let mut served = Vec::new();
    for (i, (mut config, listen)) in configs.into_iter().zip(listens).enumerate() {
        if let Some(seed) = args.seed {
            config.seed = seed.wrapping_add(i as u64);
        }
        let (offset_ms, said) =
            process::apply_environment(&mut config, args.admin_token_file.as_deref())
                .bad_input()?;
        let name = config.name.clone();
        let records = process::records_path_of(&records, config.name_or_default(), count);
        served.push(Served {
            provider: FakeProvider::new(config).clock_offset_ms(offset_ms),
            name,
            listen,
            records,
            said,
        });
    }
    let threads = args.threads.map(usize::from);
    crate::runtime::block_on(threads, None, |stop| serve(served, &args, stop))
}

/// Serves each provider on its own port until `stop`.
async fn serve(served: Vec<Served>, args: &Args, stop: CancellationToken) -> Result<Ended, Error> {
    let mut handles = Vec::new();
    let mut out = std::io::stdout();
    for s in served {
        let listen = &s.listen;
        let listener = fake_provider::listen(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))
            .bad_input()?;
        let handle = s
            .provider
            .record_to(&s.records)
            .records_max_bytes(args.records_max_bytes)
            .serve(listener)
            .context("--records") // the cause names the file
            .bad_input()?;
        let banner = process::listening_banner(
            s.name.as_deref(),
            &handle.base_url(),
            &s.said,
            &s.records,
            args.records_max_bytes,
        );
        // A reader that went away (a closed pipe) must not stop the server.
        let _ = std::io::Write::write_all(&mut out, banner.as_bytes());
        handles.push((handle, s.records));
    }
    let _ = std::io::Write::flush(&mut out);
    stop.cancelled().await;
    let received: u64 = handles.iter().map(|(h, _)| h.stats().received).sum();
    eprintln!("stopping: {received} calls served");
    for (handle, records) in handles {
        let dropped = handle.stats().records_dropped;
        let written = handle.shutdown().await.records;
        eprintln!("{}", process::stopped_note(written, dropped, &records));
    }
    Ok(Ended::Pass)
}
