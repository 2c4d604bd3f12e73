//! `rehearse gateway`: the reference gateway in front of an upstream
//! provider (what it does with its flags, `REHEARSE_TIME_SCALE` and its
//! address: `reference_gateway::CLI_ABOUT`, its `--help`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use reference_gateway::{parse_duration, Gateway, GatewayConfig, GatewayFlags, Mode, Order};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse gateway`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Admission mode: naive, bounded, deadline, aimd or timeout.
    #[arg(long)]
    mode: Option<Mode>,
    /// Base URL of the provider, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    upstream: Option<String>,
    /// Address to listen on (127.0.0.1:0 picks a free port and prints it).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// A TOML file with any of these settings; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Request bodies over this many bytes are answered 413.
    #[arg(long)]
    max_body_bytes: Option<usize>,
    /// Every mode: an upstream call still running this long after dispatch
    /// is cancelled and answered 504 upstream_timeout (default: none).
    #[arg(long, value_parser = parse_duration)]
    upstream_timeout: Option<Duration>,
    /// Every mode: at most N upstream calls at once (a client's connection
    /// pool); beyond it calls wait in the pool, timed as provider latency.
    #[arg(long, value_name = "N")]
    pool_max_connections: Option<usize>,
    /// Meter the pool's wait apart (gateway_pool_wait_seconds).
    #[arg(long)]
    split_pool_wait: bool,
    /// Every mode: retry a provider's 429/503/529 up to N times, after its
    /// Retry-After (default 0).
    #[arg(long, value_name = "N")]
    upstream_retries: Option<u32>,
    /// bounded: upstream calls in flight at once.
    #[arg(long)]
    concurrency: Option<u32>,
    /// bounded, aimd: jobs allowed to wait; one more is answered 429.
    #[arg(long)]
    queue: Option<u32>,
    /// bounded, aimd: a job that waited longer is dropped unsent (503).
    #[arg(long, value_parser = parse_duration)]
    wait_budget: Option<Duration>,
    /// deadline: the quota's tokens per minute (the drain rate); default
    /// 500,000, the flash-promotion account (said on stderr at start: set
    /// it to your provider quota's, or requests are admitted or refused by
    /// a rate the upstream never had).
    #[arg(long)]
    tokens_per_minute: Option<f64>,
    /// deadline: the caller's patience when the request carries none.
    #[arg(long, value_parser = parse_duration)]
    default_deadline: Option<Duration>,
    /// deadline: the provider's expected service time.
    #[arg(long, value_parser = parse_duration)]
    expected_service: Option<Duration>,
    /// deadline: fifo or lifo.
    #[arg(long)]
    order: Option<Order>,
    /// deadline: header carrying the caller's remaining patience (ms).
    #[arg(long)]
    patience_header: Option<String>,
    /// deadline: max_tokens assumed for a request that sets none.
    #[arg(long)]
    default_max_tokens: Option<u64>,
    /// aimd: the limit at start.
    #[arg(long)]
    initial: Option<u32>,
    /// aimd: the lowest limit.
    #[arg(long)]
    floor: Option<u32>,
    /// aimd: the highest limit.
    #[arg(long)]
    ceiling: Option<u32>,
    /// Worker threads serving requests (default: one per core).
    #[arg(long)]
    threads: Option<u32>,
    /// aimd: a call running past this cuts the limit x0.9.
    #[arg(long, value_parser = parse_duration)]
    latency_target: Option<Duration>,
}

/// Runs `rehearse gateway` until Ctrl-C or SIGTERM.
pub fn main(args: Args) -> Result<Ended, Error> {
    let time_scale = std::env::var("REHEARSE_TIME_SCALE").ok();
    // `--threads 0` means one per core, as no flag does.
    let threads = args.threads.filter(|&n| n > 0).map(|n| n as usize);
    let flags = args.flags();
    let rate_given = flags.rate_given();
    let config = GatewayConfig::from_flags(flags, time_scale.as_deref()).bad_input()?;
    if let Some(note) = config.default_rate_note(rate_given) {
        eprintln!("{note}");
    }
    let gateway = Gateway::new(config.clone()).bad_input()?;
    crate::runtime::block_on(threads, None, |stop| serve(gateway, config.listen, stop))
}

impl Args {
    /// The flags but `--threads`, for [`GatewayConfig::from_flags`].
    fn flags(self) -> GatewayFlags {
        GatewayFlags {
            mode: self.mode,
            upstream: self.upstream,
            listen: self.listen,
            config: self.config,
            max_body_bytes: self.max_body_bytes,
            upstream_timeout: self.upstream_timeout,
            pool_max_connections: self.pool_max_connections,
            split_pool_wait: self.split_pool_wait,
            upstream_retries: self.upstream_retries,
            concurrency: self.concurrency,
            queue: self.queue,
            wait_budget: self.wait_budget,
            tokens_per_minute: self.tokens_per_minute,
            default_deadline: self.default_deadline,
            expected_service: self.expected_service,
            order: self.order,
            patience_header: self.patience_header,
            default_max_tokens: self.default_max_tokens,
            initial: self.initial,
            floor: self.floor,
            ceiling: self.ceiling,
            latency_target: self.latency_target,
        }
    }
}

async fn serve(
    gateway: Gateway,
    listen: SocketAddr,
    stop: CancellationToken,
) -> Result<Ended, Error> {
    let listener = tokio::net::TcpListener::bind(listen)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn the_flags_parse_into_the_library_s_settings() {
        let flags = [
            "gateway",
            "--mode",
            "aimd",
            "--upstream",
            "http://127.0.0.1:9",
        ];
        let more = ["--queue", "5", "--wait-budget", "2s", "--threads", "3"];
        let args = Cli::try_parse_from(flags.iter().chain(&more)).unwrap().args;
        assert_eq!(args.threads, Some(3));
        let f = args.flags();
        assert_eq!((f.mode, f.queue), (Some(Mode::Aimd), Some(5)));
        assert_eq!(f.wait_budget, Some(Duration::from_secs(2)));
        assert!(Cli::try_parse_from(["gateway", "--mode", "fancy"]).is_err());
        assert!(Cli::try_parse_from(["gateway", "--wait-budget", "soon"]).is_err());
    }
}
