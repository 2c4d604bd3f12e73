//! `rehearse plan`: the arithmetic of a scenario, no traffic.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::exit::{Classify as _, Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file.
    scenario: PathBuf,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sets: Sets,
}

/// Runs `rehearse plan`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let scenario = crate::scenario::load(Some(&args.scenario), &args.sets)?;
    let plan = harness::plan(&scenario);
    if args.json {
        let text = serde_json::to_string_pretty(&plan)
            .context("cannot write the plan as JSON")
            .invalid()?;
        println!("{text}");
    } else {
        print!("{}", report::plan_text(&plan));
    }
    Ok(Ended::Pass)
}
