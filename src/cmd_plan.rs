//! `rehearse plan`: the arithmetic of a scenario, no traffic.

use std::path::PathBuf;

use crate::scenario::Scenario;

/// Flags of `rehearse plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file.
    scenario: PathBuf,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Override a scenario field: `dotted.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

/// Runs `rehearse plan` and returns the exit code.
pub fn main(args: Args) -> u8 {
    let scenario = match Scenario::load(&args.scenario, &args.sets) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let plan = crate::plan::plan(&scenario);
    if args.json {
        match serde_json::to_string_pretty(&plan) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write the plan as JSON: {e}");
                return crate::exit::INVALID;
            }
        }
    } else {
        print!("{}", crate::plan::render(&plan));
    }
    crate::exit::OK
}
