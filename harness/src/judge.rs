//! Judging a run directory from its files alone (the end of `rehearse run`,
//! and all of `rehearse report`): read the records, judge the checklist,
//! write the reports.

use std::path::{Path, PathBuf};

use assertions::{Status, Thresholds};
use report::RunMeta;
use serde::Deserialize;
use wire::{ClientRecord, ProviderRecord, RssSample};

use wire::{files, Scale};

use crate::error::RunError;
use crate::rundir::{write_atomic, Records};
use crate::scenario;

/// The `[checklist]` of a scenario text, with located errors.
pub fn thresholds(text: &str, origin: &str) -> Result<Thresholds, RunError> {
    #[derive(Deserialize)]
    struct WithChecklist {
        #[serde(default)]
        checklist: Thresholds,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    toml_located::Source::new(text, origin)
        .parse::<WithChecklist>()
        .map(|w| w.checklist)
        .map_err(|e| RunError::BadInput(e.to_string()))
}

/// A run judged: its verdict, and what to tell a person about it.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The overall verdict.
    pub status: Status,
    /// The checklist as printed on the terminal.
    pub checklist: String,
    /// Where report.json is.
    pub report_json: PathBuf,
    /// Where report.html is.
    pub report_html: PathBuf,
}

/// Judges the run in `dir` from its files (with `sets` applied to the
/// saved scenario's checklist), rewrites report.json, junit.xml,
/// timeline.csv, report.html and its chart PNGs (and the JUnit report at
/// `junit` too, when given), and returns the verdict with the checklist.
pub fn judge_dir(dir: &Path, sets: &[String], junit: Option<&Path>) -> Result<Judged, RunError> {
    let meta_path = dir.join(files::RUN);
    let mut meta: RunMeta =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).map_err(|e| {
            RunError::BadInput(format!("{} is not a run directory: {e}", dir.display()))
        })?)
        .map_err(|e| RunError::BadInput(format!("{}: {e}", meta_path.display())))?;
    let scenario_path = dir.join(files::SCENARIO);
    let text = std::fs::read_to_string(&scenario_path)
        .map_err(|e| RunError::BadInput(format!("cannot read {}: {e}", scenario_path.display())))?;
    let text = scenario::apply_sets(&text, sets).map_err(|e| RunError::BadInput(e.to_string()))?;
    let origin = if sets.is_empty() {
        scenario_path.display().to_string()
    } else {
        format!("{} (with --set)", scenario_path.display())
    };
    scenario::check_gateway(&text, &origin).map_err(|e| RunError::BadInput(e.to_string()))?;
    let thresholds = thresholds(&text, &origin)?.scaled(Scale {
        time: meta.time_scale,
        quota: meta.quota_scale,
    });
    let mut client = Records::<ClientRecord>::open(dir, files::CLIENT_RECORDS)?;
    let mut provider = Records::<ProviderRecord>::open(dir, files::PROVIDER_RECORDS)?;
    let mut memory = Records::<RssSample>::open(dir, files::RSS_RECORDS)?;
    let attempts: Vec<ClientRecord> = client.by_ref().collect();
    let calls: Vec<ProviderRecord> = provider.by_ref().collect();
    let rss: Vec<RssSample> = memory.by_ref().collect();
    for (name, health) in [
        (files::CLIENT_RECORDS, client.health()),
        (files::PROVIDER_RECORDS, provider.health()),
        (files::RSS_RECORDS, memory.health()),
    ] {
        meta.notes.extend(health.notes(name));
        meta.untrusted.extend(health.untrusted(name));
    }
    meta.notes.extend(meta.untrusted.iter().cloned());
    let j = assertions::judge(&attempts, &calls, &rss, &meta.expectations, &thresholds);
    let report = report::report_json(&meta, &j);
    write_atomic(
        &dir.join(files::REPORT_JSON),
        serde_json::to_string_pretty(&report)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    let junit_xml = report::junit(&meta, &j);
    write_atomic(&dir.join(files::JUNIT), junit_xml.as_bytes())?;
    if let Some(extra) = junit {
        write_atomic(extra, junit_xml.as_bytes())?;
    }
    write_atomic(&dir.join(files::TIMELINE), j.timeline.to_csv().as_bytes())?;
    let html = report::write_html(dir, &meta, &j, &thresholds, &text)?;
    Ok(Judged {
        status: report::verdict(&meta, &j),
        checklist: report::checklist_text(&meta, &j),
        report_json: dir.join(files::REPORT_JSON),
        report_html: html,
    })
}
