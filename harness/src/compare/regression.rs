//! A comparison's figures held to its first run's ([`RegressionGate`]:
//! `--fail-on-regression` and `--tolerance`), and its files written
//! (`compare.json`, `compare.html`, `summary.md`), for a comparison of
//! variants and of run directories alike.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assertions::Status;
use report::{Comparison, Tolerance};
use toml_located::ConfigError;

use crate::error::RunError;
use crate::run::rundir::write_atomic;
use crate::scenario::ScenarioError;

/// A comparison made: what `compare.json` holds, where it and the page
/// are, and its outcome (pass: exit 0, fail: 1, invalid: 3).
#[derive(Debug, Clone)]
pub struct Compared {
    /// `compare.json`.
    pub comparison: Comparison,
    /// The outcome: the worst run's verdict, or, with `--expect`, whether
    /// every named variant's verdict was as expected.
    pub status: Status,
    /// Where `compare.json` is.
    pub json: PathBuf,
    /// Where `compare.html` is.
    pub html: PathBuf,
}

/// How a comparison's figures are held to its first run's. With the
/// `clap` feature these are `rehearse compare`'s flags themselves.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RegressionGate {
    /// Exit 1 when a check's figure got worse than the first run's beyond
    /// its tolerance, though every check passes.
    #[cfg_attr(feature = "clap", arg(long))]
    pub fail_on_regression: bool,
    /// A check's tolerance instead of its default (repeatable): a share of
    /// the baseline's figure, and optionally the change allowed whatever
    /// the baseline, in the figure's unit (e.g. `drain=0.5:2`).
    #[cfg_attr(feature = "clap", arg(long, value_name = "ID=SHARE[:AT_LEAST]"))]
    pub tolerance: Vec<String>,
}

impl RegressionGate {
    /// The tolerances in force, or the flag that is wrong.
    pub fn tolerances(&self) -> Result<BTreeMap<String, Tolerance>, ScenarioError> {
        report::tolerances(&self.tolerance).map_err(|message| {
            ScenarioError::Config(ConfigError {
                origin: crate::host::Input::Tolerance.to_string(),
                line: 0,
                column: 0,
                field: String::new(),
                message,
            })
        })
    }

    /// Sets the comparison's figures against its first run's (their
    /// changes, the regressions), and makes a regression exit 1 under
    /// `--fail-on-regression` when the comparison would otherwise pass.
    /// Returns the outcome.
    pub(crate) fn apply(
        &self,
        c: &mut Comparison,
        tolerances: BTreeMap<String, Tolerance>,
        time_scale: f64,
        status: Status,
    ) -> Status {
        c.regressions = report::mark_regressions(c, &tolerances, time_scale);
        c.tolerances = tolerances;
        c.fail_on_regression = self.fail_on_regression;
        if self.fail_on_regression && !c.regressions.is_empty() && status == Status::Pass {
            Status::Fail
        } else {
            status
        }
    }
}

/// Writes `compare.json`, `compare.html` and `summary.md` of `c` into
/// `out`.
pub(crate) fn write_comparison(
    out: &Path,
    comparison: Comparison,
    status: Status,
) -> Result<Compared, RunError> {
    let json = out.join(report::COMPARE_JSON);
    write_atomic(
        &json,
        serde_json::to_string_pretty(&comparison)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    write_atomic(
        &out.join(wire::files::SUMMARY_MD),
        report::compare_markdown(&comparison).as_bytes(),
    )?;
    let html = report::write_compare_html(out, &comparison)?;
    Ok(Compared {
        comparison,
        status,
        json,
        html,
    })
}
