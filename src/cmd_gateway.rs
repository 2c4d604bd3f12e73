//! `rehearse gateway`: the reference gateway in front of an upstream
//! provider (what it does with its flags, `REHEARSE_TIME_SCALE` and its
//! address: `reference_gateway::CLI_ABOUT`, its `--help`).

use std::io::Write as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use reference_gateway::{Gateway, GatewayConfig, GatewayFlags};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse gateway`: the library's own ([`GatewayFlags`]), and
/// the worker threads.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    flags: GatewayFlags,
    /// Worker threads serving requests (default: one per core).
    #[arg(long)]
    threads: Option<u32>,
}

/// Runs `rehearse gateway` until Ctrl-C or SIGTERM.
pub fn main(args: Args) -> Result<Ended, Error> {
    let time_scale = std::env::var("REHEARSE_TIME_SCALE").ok();
    // `--threads 0` means one per core, as no flag does.
    let threads = args.threads.filter(|&n| n > 0).map(|n| n as usize);
    let rate_given = args.flags.rate_given();
    let config = GatewayConfig::from_flags(args.flags, time_scale.as_deref()).bad_input()?;
    if let Some(note) = config.default_rate_note(rate_given) {
        eprintln!("{note}");
    }
    for fault in &config.fault {
        eprintln!(
            "fault {fault}: given on purpose, to show a check failing; never for a real rehearsal"
        );
    }
    let gateway = Gateway::new(config.clone()).bad_input()?;
    crate::runtime::block_on(threads, None, |stop| serve(gateway, config.listen, stop))
}

async fn serve(
    gateway: Gateway,
    listen: SocketAddr,
    stop: CancellationToken,
) -> Result<Ended, Error> {
    let listener = fake_provider::listen(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
        .invalid()?;
    let handle = gateway.serve(listener, stop.clone()).invalid()?;
    println!("listening on {}", handle.base_url());
    let _ = std::io::stdout().flush();
    stop.cancelled().await;
    eprintln!("shutting down");
    handle.stopped().await;
    Ok(Ended::Pass)
}
