//! `rehearse gateway`: the reference gateway in front of an upstream provider.
//!
//! Flags override a `--config` file. `REHEARSE_TIME_SCALE=N`, when set, then
//! compresses every duration N times and multiplies the token rate by N
//! ([`GatewayConfig::scaled`], time alone): for a gateway started by hand or
//! by another harness. `rehearse run` no longer uses it for the reference
//! gateway: it writes a `gateway.toml` already at rehearsal scale and
//! removes the variable from the gateway's environment (see `wire::Scale`).
//!
//! The bound address is printed on stdout (`listening on http://ADDR`) so a
//! harness can read the port when `--listen` asks for port 0 (the default).
//! Ctrl-C and SIGTERM are listened for before it is printed; either drains
//! the gateway and exits 0.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use reference_gateway::{parse_duration, Gateway, GatewayConfig, Mode, Order};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse gateway`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Admission mode: naive, bounded, deadline or aimd.
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
    let rate_given =
        args.tokens_per_minute.is_some() || args.config.as_deref().is_some_and(file_sets_rate);
    let config = build_config(args, time_scale.as_deref()).bad_input()?;
    if let Some(note) = default_rate_note(&config, rate_given) {
        eprintln!("{note}");
    }
    let gateway = Gateway::new(config.clone()).bad_input()?;
    crate::runtime::block_on(threads, None, |stop| serve(gateway, config.listen, stop))
}

/// Raw flags, file and time scale into one validated configuration.
fn build_config(args: Args, time_scale: Option<&str>) -> anyhow::Result<GatewayConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let mut c = GatewayConfig::from_toml(&text, &path.display().to_string())?;
            if let Some(m) = args.mode {
                c.mode = m;
            }
            if let Some(u) = &args.upstream {
                c.upstream = u.clone();
            }
            c
        }
        None => {
            let (Some(mode), Some(upstream)) = (args.mode, args.upstream.clone()) else {
                bail!("--mode and --upstream are required (or a --config file that sets them)");
            };
            GatewayConfig::new(mode, upstream)
        }
    };
    if let Some(v) = args.listen {
        config.listen = v;
    }
    if let Some(v) = args.max_body_bytes {
        config.max_body_bytes = v;
    }
    if let Some(v) = args.upstream_timeout {
        config.upstream_timeout = Some(v);
    }
    if let Some(v) = args.concurrency {
        config.bounded.concurrency = v as usize;
    }
    // --queue and --wait-budget belong to whichever of bounded and aimd runs.
    if let Some(v) = args.queue {
        match config.mode {
            Mode::Aimd => config.aimd.queue = v as usize,
            _ => config.bounded.queue = v as usize,
        }
    }
    if let Some(v) = args.wait_budget {
        match config.mode {
            Mode::Aimd => config.aimd.wait_budget = v,
            _ => config.bounded.wait_budget = v,
        }
    }
    let d = &mut config.deadline;
    if let Some(v) = args.tokens_per_minute {
        d.tokens_per_minute = v;
    }
    if let Some(v) = args.default_deadline {
        d.default_deadline = v;
    }
    if let Some(v) = args.expected_service {
        d.expected_service = v;
    }
    if let Some(v) = args.order {
        d.order = v;
    }
    if let Some(v) = args.patience_header {
        d.patience_header = v;
    }
    if let Some(v) = args.default_max_tokens {
        d.default_max_tokens = v;
    }
    let a = &mut config.aimd;
    if let Some(v) = args.initial {
        a.initial = v as usize;
    }
    if let Some(v) = args.floor {
        a.floor = v as usize;
    }
    if let Some(v) = args.ceiling {
        a.ceiling = v as usize;
    }
    if let Some(v) = args.latency_target {
        a.latency_target = v;
    }
    if let Some(raw) = time_scale {
        let scale: f64 = raw
            .trim()
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .with_context(|| format!("REHEARSE_TIME_SCALE=`{raw}`: expected a number above 0"))?;
        config = config.scaled(wire::Scale {
            time: scale,
            quota: 1.0,
        });
    }
    config
        .validate()
        .map_err(|(field, message)| anyhow::anyhow!("field `{field}`: {message}"))?;
    Ok(config)
}

/// True if and only if the config file at `path` writes
/// `deadline.tokens_per_minute` (an unreadable file is reported later, by
/// [`build_config`]).
fn file_sets_rate(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .is_some_and(|t| {
            t.get("deadline")
                .and_then(|d| d.get("tokens_per_minute"))
                .is_some()
        })
}

/// What a deadline gateway says at start when it runs on the default token
/// rate, given neither by flag nor by file.
fn default_rate_note(config: &GatewayConfig, rate_given: bool) -> Option<String> {
    (config.mode == Mode::Deadline && !rate_given).then(|| {
        format!(
            "deadline: no --tokens-per-minute given: pacing to {:.0} tokens/min, the default \
             (500,000 a minute, the flash-promotion account, times REHEARSE_TIME_SCALE when set); \
             give your provider quota's rate",
            config.deadline.tokens_per_minute
        )
    })
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

    fn parse(flags: &[&str]) -> Args {
        Cli::try_parse_from(std::iter::once("gateway").chain(flags.iter().copied()))
            .expect("flags parse")
            .args
    }

    #[test]
    fn flags_build_a_config_and_the_time_scale_compresses_it() {
        let args = parse(&[
            "--mode",
            "bounded",
            "--upstream",
            "http://127.0.0.1:9",
            "--concurrency",
            "8",
            "--queue",
            "11",
            "--wait-budget",
            "2s",
        ]);
        let c = build_config(args, Some("4")).unwrap();
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
        let args = parse(&[
            "--mode",
            "aimd",
            "--upstream",
            "http://127.0.0.1:9",
            "--queue",
            "5",
            "--initial",
            "4",
            "--floor",
            "2",
            "--ceiling",
            "9",
            "--latency-target",
            "300ms",
        ]);
        let c = build_config(args, None).unwrap();
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
        let args = parse(&[
            "--config",
            path.to_str().unwrap(),
            "--tokens-per-minute",
            "6000",
        ]);
        let c = build_config(args, None).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(c.deadline.tokens_per_minute, 6000.0);
        assert_eq!(c.deadline.order, Order::Lifo, "kept from the file");
    }

    #[test]
    fn deadline_defaults_to_the_flash_promotion_account() {
        let args = parse(&["--mode", "deadline", "--upstream", "http://127.0.0.1:9"]);
        let c = build_config(args, None).unwrap();
        assert_eq!(c.deadline.tokens_per_minute, 500_000.0);
        // ...and says so at start, unless a rate was given.
        let note = default_rate_note(&c, false).unwrap();
        assert!(note.contains("500000 tokens/min"), "{note}");
        assert_eq!(default_rate_note(&c, true), None);
        let bounded = GatewayConfig::new(Mode::Bounded, "http://127.0.0.1:9");
        assert_eq!(default_rate_note(&bounded, false), None);
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
        std::fs::remove_file(&with).unwrap();
        std::fs::remove_file(&without).unwrap();
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(
            build_config(parse(&["--mode", "naive"]), None).is_err(),
            "no upstream"
        );
        let args = parse(&["--mode", "naive", "--upstream", "http://127.0.0.1:9"]);
        assert!(build_config(args, Some("0")).is_err(), "time scale 0");
        let args = parse(&[
            "--mode",
            "bounded",
            "--upstream",
            "http://127.0.0.1:9",
            "--concurrency",
            "0",
        ]);
        let err = build_config(args, None).unwrap_err();
        assert!(
            format!("{err:#}").contains("bounded.concurrency"),
            "{err:#}"
        );
        assert!(Cli::try_parse_from(["gateway", "--mode", "fancy"]).is_err());
        assert!(Cli::try_parse_from(["gateway", "--wait-budget", "soon"]).is_err());
    }
}
