//! The scenario named on the command line, with its `--set` edits.

use std::path::Path;

use harness::Scenario;

use crate::exit::Error;

/// The `--set` flags of `run`, `report` and `plan`.
#[derive(clap::Args, Debug, Default)]
pub struct Sets {
    /// Override a scenario field: `dotted.key=value`, e.g.
    /// `gateway.reference.mode=naive` or `checklist.drain.within=5s`
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// Reads and validates the scenario at `path` (the built-in CI smoke
/// scenario when none is given) with `sets` applied.
pub fn load(path: Option<&Path>, sets: &Sets) -> Result<Scenario, Error> {
    Ok(Scenario::load_or_builtin(path, &sets.sets)?)
}
