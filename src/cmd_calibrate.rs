//! `rehearse calibrate`: where a target's latency curve bends (the sweep
//! and the knee's method are `harness::calibrate`'s).

use std::path::PathBuf;

use harness::{CalibrateOptions, SweepEnd};

use crate::exit::{Ended, Error};

/// Flags of `rehearse calibrate`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 a knee found; 1 none within the limits (or the sweep \
    stopped on errors first); 2 bad input; 3 the target answered nothing."
)]
pub struct Args {
    /// The base URL to drive: a fake provider, a gateway, or a provider.
    #[arg(long, required_unless_present = "rig")]
    target: Option<String>,
    /// Instead of a target: this machine's load-generator ceiling, per
    /// model of connections, against the built-in bare target; written to
    /// FILE (default: rehearse/rig.toml under $XDG_CACHE_HOME, else
    /// ~/.cache), which `plan` and `run` read.
    #[arg(long, value_name = "FILE", num_args = 0..=1, conflicts_with = "target")]
    rig: Option<Option<PathBuf>>,
    #[command(flatten)]
    rig_sweep: harness::RigOptions,
    /// A scenario whose [load.request] shapes the requests (default: 100
    /// prompt tokens, 16 max_tokens, OpenAI).
    scenario: Option<PathBuf>,
    #[command(flatten)]
    limits: harness::SweepLimits,
    /// Where calibrate.json, calibrate.html and the charts go (default:
    /// runs/calibrate-YYYYmmdd-HHMMSS).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// Allow a target outside loopback.
    #[arg(long)]
    allow_remote: bool,
    #[command(flatten)]
    tls: crate::cmd_load::TlsArgs,
}

/// Runs `rehearse calibrate` until its sweep ends or the first signal.
pub fn main(args: Args) -> Result<Ended, Error> {
    let Some(target) = args.target else {
        return rig(args.rig.flatten(), args.rig_sweep, args.limits.step);
    };
    let scenario = match &args.scenario {
        Some(p) => Some((
            std::fs::read_to_string(p)
                .map_err(|e| Error::bad_input(anyhow::anyhow!("{}: {e}", p.display())))?,
            p.display().to_string(),
        )),
        None => None,
    };
    let opts = CalibrateOptions {
        target,
        allow_remote: args.allow_remote,
        scenario,
        limits: args.limits,
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

/// `rehearse calibrate --rig [FILE]`: the ceiling measured, written, said.
fn rig(
    path: Option<PathBuf>,
    mut sweep: harness::RigOptions,
    step: std::time::Duration,
) -> Result<Ended, Error> {
    let path = path.or_else(harness::default_rig_path).ok_or_else(|| {
        Error::bad_input(anyhow::anyhow!(
            "--rig: no cache directory ($XDG_CACHE_HOME, $HOME): give --rig FILE"
        ))
    })?;
    sweep.step = step;
    let note = "stopping the sweep (again to quit at once)";
    let say = |s: &str| eprintln!("{s}");
    let rig = crate::runtime::block_on(None, Some(note.into()), |cancel| async move {
        Ok(harness::calibrate_rig(&sweep, &say, cancel).await?)
    })?;
    harness::write_rig(&rig, &path)?;
    for line in rig.said() {
        println!("{line}");
    }
    println!("rig: {}", path.display());
    Ok(Ended::Pass)
}
