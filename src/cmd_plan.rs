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
    /// Plan the rehearsal at this time scale instead of the scenario's,
    /// as `rehearse run --time-scale N` plays it.
    #[arg(long, value_name = "N", value_parser = harness::scale_factor)]
    time_scale: Option<f64>,
    #[command(flatten)]
    rig: harness::RigFile,
    #[command(flatten)]
    quiet_bar: crate::cmd_report::NoProgress,
    #[command(flatten)]
    sets: Sets,
}

/// Runs `rehearse plan`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let mut scenario = crate::scenario::load(Some(&args.scenario), &args.sets)?;
    scenario.at_time_scale(args.time_scale)?;
    let rehearsal = scenario.rehearsal();
    let rig = args.rig.check(&rehearsal)?;
    for said in &rig.said {
        eprintln!("warning: {said}");
    }
    if let Some(w) = &rig.warning {
        eprintln!("warning: {w}: rehearse run --shards {}", w.shards);
    }
    let plan = rehearsal.plan;
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
