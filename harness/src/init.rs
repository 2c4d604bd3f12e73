//! Scenarios to start from: the built-in one a bare `rehearse run`
//! rehearses, and (`rehearse init`) a commented scenario written from a few
//! figures.

use std::path::Path;

use crate::scenario::{apply_sets, Scenario, ScenarioError};

/// The scenario rehearsed when none is named: the CI smoke rehearsal
/// (`scenarios/ci-smoke.toml`), shipped in the binary so that a fresh
/// checkout runs it from anywhere.
pub const BUILTIN_SCENARIO: &str = include_str!("../../scenarios/ci-smoke.toml");

impl Scenario {
    /// Reads and validates the scenario at `path` with `sets` applied, or
    /// the built-in one ([`BUILTIN_SCENARIO`]) when no path is given.
    ///
    /// ```
    /// let s = harness::Scenario::load_or_builtin(None, &["scenario.seed=3".into()]).unwrap();
    /// assert_eq!((s.meta.name.as_str(), s.meta.seed), ("ci-smoke", Some(3)));
    /// ```
    pub fn load_or_builtin(
        path: Option<&Path>,
        sets: &[String],
    ) -> Result<Scenario, ScenarioError> {
        match path {
            Some(path) => Scenario::load(path, sets),
            None => {
                let text = apply_sets(BUILTIN_SCENARIO, sets)?;
                Scenario::from_str(&text, "built-in ci-smoke.toml", Path::new("ci-smoke.toml"))
            }
        }
    }
}
