//! A judged run as documents: what a person, a CI job and a later
//! `rehearse report` read of it.
//!
//! The harness judges a run directory ([`assertions::judge`]) and hands the
//! [`Judgement`](assertions::Judgement) here with the run's
//! [`RunMeta`](wire::RunMeta) (`run.json`) and [`Plan`](wire::Plan)
//! (`plan.json`), both `wire`'s: the engine makes them, this crate only
//! renders them. It turns them into files and text; it judges nothing and
//! reads no records (the latency distribution chart draws the judge's
//! histograms).
//!
//! The rooms:
//! - `documents`: the schema of `compare.json` ([`Comparison`],
//!   [`ComparedRun`], [`Columns`]), written by the harness and read back
//!   here;
//! - `checklist`: `report.json`, `junit.xml`, the [`Checklist`] printed on
//!   the terminal and written as `summary.md`, and the overall [`verdict`];
//! - `terminal`: text laid out for a terminal ([`Style`]: its width, colour
//!   or not), in display columns (a wide character counts as two);
//! - `plan_text`: `rehearse plan` as a person reads it, and `plan_sizing`
//!   its second half (overload from latency and memory, the gateway's
//!   knobs, what the event costs);
//! - `html`: `report.html`, one self-contained page, and its chart PNGs;
//! - `compare`: a comparison (`compare.json`) as the terminal table,
//!   `compare.html` and its `summary.md`;
//! - `regression`: each check's figure against the baseline run's, and the
//!   [`Tolerance`] a change is held to (`--fail-on-regression`);
//! - `calibration`, `calibration_html`: `rehearse calibrate`'s sweep
//!   ([`Calibration`], `calibrate.json`) and its page, `calibrate.html`
//!   ([`write_calibration`]);
//! - `charts`: the six charts and the calibration's two curves as SVG
//!   (plotters), rasterised to PNG (resvg).

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod calibration;
mod calibration_html;
mod charts;
mod checklist;
mod compare;
mod documents;
mod html;
mod plan_sizing;
mod plan_text;
mod regression;
mod terminal;

use std::path::{Path, PathBuf};

pub use calibration::{Calibration, CalibrationLevel, CALIBRATE_HTML, CALIBRATE_JSON};
pub use calibration_html::write_calibration;
pub use checklist::{junit, report_json, verdict, Checklist, Report, SUMMARY_MD};
pub use compare::{compare_markdown, compare_text, write_compare_html, COMPARE_HTML, COMPARE_JSON};
pub use documents::{
    checks_of_report, Columns, ComparedFigure, ComparedRun, Comparison, Tolerance,
};
pub use html::{write as write_html, Inputs};
pub use plan_text::{render as plan_text, replay_text};
pub use regression::{change_text, figures_of_report, mark_regressions, tolerances, value_text};
pub use terminal::{columns, table, wrap, Stream, Style};

/// A report file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct ReportError {
    /// The file.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

/// Writes a whole report file through a temporary name and a rename
/// ([`wire::files::write_atomic`]), so a reader never sees half of it.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    wire::files::write_atomic(path, bytes).map_err(|source| ReportError {
        path: path.to_path_buf(),
        source,
    })
}
