//! `rehearse calibrate`: where a target's latency curve bends (the sweep
//! and the knee's method are `harness::calibrate`'s).

use std::path::PathBuf;
use std::time::Duration;

use harness::{CalibrateOptions, SweepEnd};
use reference_gateway::parse_duration;

use crate::exit::{Ended, Error};

/// Flags of `rehearse calibrate`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 a knee found; 1 none within the limits (or the sweep \
    stopped on errors first); 2 bad input; 3 the target answered nothing."
)]
pub struct Args {
    /// The base URL to drive: a fake provider, a gateway, or a provider.
    #[arg(long)]
    target: String,
    /// A scenario whose [load.request] shapes the requests (default: 100
    /// prompt tokens, 16 max_tokens, OpenAI).
    scenario: Option<PathBuf>,
    /// The most calls at once of any level.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_concurrency: u64,
    /// The most levels.
    #[arg(long, default_value_t = 16, value_name = "N")]
    max_levels: usize,
    /// Each level's length (its first fifth is a warm-up).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    step_duration: Duration,
    /// A call's timeout.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Stop when more than this share of a level's calls fail.
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    error_threshold: f64,
    /// The wait budget the suggested queue bounds are for.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    wait_budget: Duration,
    /// The slowdown of the degraded queue bound (a brownout's 7x).
    #[arg(long, default_value_t = 7.0, value_name = "FACTOR")]
    degraded_latency: f64,
    /// Where calibrate.json, calibrate.html and the charts go (default:
    /// runs/calibrate-YYYYmmdd-HHMMSS).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Allow a target outside loopback.
    #[arg(long)]
    allow_remote: bool,
    #[command(flatten)]
    tls: crate::cmd_load::TlsArgs,
}

/// Runs `rehearse calibrate` until its sweep ends or the first signal.
pub fn main(args: Args) -> Result<Ended, Error> {
    let scenario = match &args.scenario {
        Some(p) => Some((
            std::fs::read_to_string(p)
                .map_err(|e| Error::bad_input(anyhow::anyhow!("{}: {e}", p.display())))?,
            p.display().to_string(),
        )),
        None => None,
    };
    let opts = CalibrateOptions {
        target: args.target,
        allow_remote: args.allow_remote,
        scenario,
        max_concurrency: args.max_concurrency,
        max_levels: args.max_levels,
        step: args.step_duration,
        request_timeout: args.request_timeout,
        error_threshold: args.error_threshold,
        wait_budget: args.wait_budget,
        degraded_factor: args.degraded_latency,
        tls: args.tls.options(),
        out: args
            .out
            .unwrap_or_else(|| harness::default_run_dir("calibrate")),
    };
    let out = opts.out.clone();
    let note = "stopping the sweep (again to quit at once)";
    let (c, end) = crate::runtime::block_on(None, Some(note.into()), |cancel| async move {
        Ok(harness::calibrate(&opts, cancel).await?)
    })?;
    let width = report::Style::detect(report::Stream::Stdout, false).width;
    for text in std::iter::once(&c.summary).chain(&c.stopped) {
        for line in report::wrap(text, width, "", "  ") {
            println!("{line}");
        }
    }
    println!(
        "calibration: {}",
        out.join(report::CALIBRATE_JSON).display()
    );
    println!("page: {}", out.join(report::CALIBRATE_HTML).display());
    Ok(match end {
        SweepEnd::Knee => Ended::Pass,
        SweepEnd::NoKnee => Ended::Fail,
        SweepEnd::TargetFailed => Ended::Invalid,
    })
}
