//! `rehearse stage` and `rehearse collect`: the first and last steps of a
//! rehearsal whose load comes from several machines (harness::stage,
//! harness::collect; README, "Load from several machines").

use std::path::PathBuf;

use crate::exit::{Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse stage`.
#[derive(clap::Args, Debug)]
pub struct StageArgs {
    /// The scenario file.
    scenario: PathBuf,
    /// The fake provider beside the gateway (admin token from
    /// REHEARSE_PROVIDER_TOKEN).
    #[arg(long, value_name = "URL")]
    provider: String,
    /// When the provider's timeline and the shards' schedules start (RFC
    /// 3339 or Unix seconds): give every shard the same value.
    #[arg(long, value_name = "TIME", value_parser = loadgen::parse_start_at)]
    start_at: std::time::SystemTime,
    /// The run directory to prepare.
    #[arg(long)]
    out: PathBuf,
    /// The gateway the shards drive (for the report).
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Compress every duration by N and multiply every rate by N.
    #[arg(long, value_name = "N")]
    time_scale: Option<f64>,
    /// Reset the provider even if another run holds its lease.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    sets: Sets,
}

/// Flags of `rehearse collect`.
#[derive(clap::Args, Debug)]
pub struct CollectArgs {
    /// The run directory `rehearse stage` prepared.
    dir: PathBuf,
    /// The shards' --out folders.
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// The fake provider the run used.
    #[arg(long, value_name = "URL")]
    provider: String,
}

/// Runs `rehearse stage`.
pub fn stage(args: StageArgs) -> Result<Ended, Error> {
    let scenario = crate::scenario::load(Some(&args.scenario), &args.sets)?;
    let opts = harness::StageOptions {
        out: args.out,
        provider: args.provider,
        start_at: args.start_at,
        time_scale: args.time_scale,
        target: args.target,
        force: args.force,
    };
    let out = opts.out.clone();
    crate::runtime::block_on(None, None, |_| async move {
        Ok(harness::stage(&scenario, &opts).await?)
    })?;
    println!("staged: {}", out.display());
    Ok(Ended::Pass)
}

/// Runs `rehearse collect`; `rehearse report DIR` judges the result.
pub fn collect(args: CollectArgs) -> Result<Ended, Error> {
    let dir = args.dir.clone();
    crate::runtime::block_on(None, None, |_| async move {
        Ok(harness::collect(&args.dir, &args.shards, &args.provider).await?)
    })?;
    println!("collected: judge it with rehearse report {}", dir.display());
    Ok(Ended::Pass)
}
