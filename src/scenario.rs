//! The scenario named on the command line, with its `--set` edits.

use std::path::Path;

use harness::Scenario;

use crate::exit::Error;

/// The scenario run when none is named: the CI smoke rehearsal, shipped in
/// the binary so a fresh checkout runs it from anywhere.
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/ci-smoke.toml");

/// The `--set` flags of `run`, `report` and `plan`.
#[derive(clap::Args, Debug, Default)]
pub struct Sets {
    /// Override a scenario field: `dotted.key=value`, e.g.
    /// `gateway.reference.mode=naive` or `checklist.drain.within=5s`
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// Reads and validates the scenario at `path` (the built-in one when none
/// is given) with `sets` applied.
pub fn load(path: Option<&Path>, sets: &Sets) -> Result<Scenario, Error> {
    let scenario = match path {
        Some(path) => Scenario::load(path, &sets.sets)?,
        None => {
            let text = harness::apply_sets(DEFAULT_SCENARIO, &sets.sets)?;
            Scenario::from_str(&text, "built-in ci-smoke.toml", Path::new("ci-smoke.toml"))?
        }
    };
    Ok(scenario)
}
