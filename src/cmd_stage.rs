//! `rehearse stage` and `rehearse collect`: the first and last steps of a
//! rehearsal whose load comes from several machines (harness::stage,
//! harness::collect; README, "Load from several machines").

use std::path::PathBuf;

use crate::exit::{Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse stage`: the scenario, the library's own
/// ([`harness::StageOptions`]) and `--set`.
#[derive(clap::Args, Debug)]
pub struct StageArgs {
    /// The scenario file.
    scenario: PathBuf,
    #[command(flatten)]
    opts: harness::StageOptions,
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
    /// The fake provider the run used; several: NAME=URL for each
    /// (repeatable), as `rehearse stage` was given them.
    #[arg(long, value_name = "URL|NAME=URL", required = true)]
    provider: Vec<String>,
}

/// Runs `rehearse stage`.
pub fn stage(args: StageArgs) -> Result<Ended, Error> {
    let scenario = crate::scenario::load(Some(&args.scenario), &args.sets)?;
    let opts = args.opts;
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
