//! `rehearse compare`: one scenario run once per variant, one after
//! another, each a whole [`run()`](crate::run) into its own run directory
//! under the comparison's; then `compare.json` and `compare.html` from the
//! runs' `report.json` files.
//!
//! Every variant is validated (and every `--expect` checked against their
//! names) before the first run starts, in [`Lineup::prepare`]. The first
//! signal stops the run under way (a partial report) and skips the rest;
//! `compare.json` is written for what ran.
//!
//! The rooms beside this one:
//! - `baseline`: run directories already made, compared as they are;
//! - `regression`: a comparison's figures held to its first run's, and its files written.

pub(crate) mod baseline;
pub(crate) mod regression;

use std::path::{Path, PathBuf};

use assertions::Status;
use report::{ComparedRun, Comparison};
use tokio_util::sync::CancellationToken;
use toml_located::ConfigError;

use crate::compare::regression::Compared;
use crate::error::RunError;
use crate::host::Input;
use crate::run::{run, RunOptions};
use crate::scenario::variants::{dir_names, how_to_add_variants, Variant};
use crate::scenario::{Scenario, ScenarioError};

/// The variants of a scenario, validated and ready to run.
#[derive(Debug, Clone)]
pub struct Lineup {
    /// The scenario file.
    pub path: PathBuf,
    /// The scenario's name (`[scenario] name`).
    pub scenario: String,
    /// Each variant, its scenario and its run directory's name.
    runs: Vec<(Variant, Scenario, String)>,
    /// The command line's `--set`, applied after each variant's.
    sets: Vec<String>,
    /// `--expect`: the verdict each named variant is meant to have.
    expect: Vec<(String, Status)>,
}

/// An error about a flag's value (`--expect`), as bad input.
pub(crate) fn flag_error(flag: &str, message: String) -> ScenarioError {
    ScenarioError::Config(ConfigError {
        origin: flag.to_string(),
        line: 0,
        column: 0,
        field: String::new(),
        message,
    })
}

impl Lineup {
    /// Reads the scenario at `path` and its `[[variants]]` (or the
    /// variants of `each`, `KEY=V1,V2,...`, instead), validates the
    /// scenario and every variant with `sets` applied after the variant's
    /// own overrides, and reads `expect` (`NAME=pass|fail`, each NAME a
    /// variant's): all before anything runs.
    pub fn prepare(
        path: &Path,
        each: Option<&str>,
        sets: &[String],
        expect: &[String],
    ) -> Result<Lineup, ScenarioError> {
        // Read once: the base scenario and each variant are edits of it.
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = Scenario::with_sets(&text, path, sets)?;
        let variants = match each {
            Some(arg) => Variant::each(arg)?,
            None => Variant::in_text(&text, &path.display().to_string())?,
        };
        if variants.is_empty() {
            return Err(flag_error(
                &path.display().to_string(),
                format!("no variants to compare: {}", how_to_add_variants()),
            ));
        }
        let dirs = dir_names(&variants);
        let mut runs = Vec::new();
        for (v, dir) in variants.into_iter().zip(dirs) {
            let s = v.scenario(&text, path, sets)?;
            runs.push((v, s, dir));
        }
        let mut expected = Vec::new();
        for e in expect {
            let flag = format!("{} {e}", Input::Expect);
            let (name, verdict) = e
                .rsplit_once('=')
                .ok_or_else(|| flag_error(&flag, "expected NAME=pass or NAME=fail".into()))?;
            let verdict = match verdict.trim() {
                "pass" => Status::Pass,
                "fail" => Status::Fail,
                _ => return Err(flag_error(&flag, "the verdict is `pass` or `fail`".into())),
            };
            let name = name.trim();
            if !runs.iter().any(|(v, _, _)| v.name == name) {
                let names: Vec<&str> = runs.iter().map(|(v, _, _)| v.name.as_str()).collect();
                return Err(flag_error(
                    &flag,
                    format!(
                        "no variant is named \"{name}\" (the variants: {})",
                        names.join(", ")
                    ),
                ));
            }
            expected.retain(|(n, _)| n != name);
            expected.push((name.to_string(), verdict));
        }
        Ok(Lineup {
            path: path.to_path_buf(),
            scenario: base.meta.name,
            runs,
            sets: sets.to_vec(),
            expect: expected,
        })
    }

    /// The variants' names, in the order they run.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.runs.iter().map(|(v, _, _)| v.name.as_str())
    }

    fn expected(&self, name: &str) -> Option<Status> {
        self.expect.iter().find(|(n, _)| n == name).map(|&(_, s)| s)
    }
}

/// What a comparison needs beyond its lineup. Its runs drive the
/// scenario's own gateway against an in-process fake provider.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The comparison's directory: a run directory per variant under it.
    pub out: PathBuf,
    /// Overrides the scenario's time scale, for every run.
    pub time_scale: Option<f64>,
    /// Show each run's progress bar.
    pub progress: bool,
    /// Say nothing on stderr while the runs go on (`--quiet`).
    pub quiet: bool,
    /// How the variants' figures are held to the first variant's.
    pub gate: crate::compare::regression::RegressionGate,
}

impl CompareOptions {
    /// The options of the run of the variant whose directory is `dir`.
    fn run(&self, dir: &str) -> RunOptions {
        RunOptions {
            out: self.out.join(dir),
            time_scale: self.time_scale,
            target: None,
            allow_remote: false,
            junit: None,
            progress: self.progress,
            provider: crate::ProviderChoice::IN_PROCESS,
            allow_time_scale: false,
            tls: loadgen::TlsOptions::default(),
            shards: 1,
            quiet: self.quiet,
            allow_unjudged: Vec::new(),
            rig: crate::RigFile::default(),
            max_spend_tokens: None,
            metrics_listen: None,
        }
    }
}

/// How `rehearse run` exits for a verdict (src/exit.rs): 0, 1, else 3.
pub(crate) fn exit_code(status: Status) -> u8 {
    match status {
        Status::Pass => 0,
        Status::Fail => 1,
        Status::Invalid | Status::Skipped | Status::Off => 3,
    }
}

/// Runs every variant of `lineup` in turn, each into `opts.out/DIR`, then
/// writes `compare.json` and
/// `compare.html` into `opts.out`. A run that cannot be made is an
/// `invalid` row, and the next one runs; `cancel` stops the run under
/// way and skips the rest.
pub async fn compare(
    lineup: &Lineup,
    opts: &CompareOptions,
    cancel: CancellationToken,
) -> Result<Compared, RunError> {
    let tolerances = opts.gate.tolerances()?;
    std::fs::create_dir_all(&opts.out).map_err(RunError::create_dir(&opts.out))?;
    let mut comparison = Comparison {
        scenario: lineup.scenario.clone(),
        file: lineup.path.display().to_string(),
        compared: "variants".into(),
        ..Comparison::default()
    };
    let mut time_scale = None;
    let total = lineup.runs.len();
    for (i, (variant, scenario, dir)) in lineup.runs.iter().enumerate() {
        if cancel.is_cancelled() {
            comparison.skipped.push(variant.name.clone());
            continue;
        }
        let sets: Vec<String> = variant.sets.iter().chain(&lineup.sets).cloned().collect();
        crate::run::tell(opts.quiet, "");
        let said = format!(
            "variant {}/{total}: {} ({})",
            i + 1,
            variant.name,
            if sets.is_empty() {
                "the scenario as written".to_string()
            } else {
                sets.join(", ")
            }
        );
        crate::run::tell(opts.quiet, &said);
        let run_opts = opts.run(dir);
        time_scale.get_or_insert(opts.time_scale.unwrap_or(scenario.meta.time_scale));
        let row = match run(scenario, &run_opts, cancel.clone()).await {
            Ok(judged) => read_row(&judged.report_json, judged.status),
            Err(e) => ComparedRun {
                error: Some(e.to_string()),
                ..read_row(
                    &run_opts.out.join(wire::files::REPORT_JSON),
                    Status::Invalid,
                )
            },
        };
        let said = format!(
            "variant {}: {}",
            variant.name,
            row.verdict.as_str().to_uppercase()
        );
        crate::run::tell(opts.quiet, &said);
        comparison.variants.push(ComparedRun {
            name: variant.name.clone(),
            sets,
            dir: dir.clone(),
            expected: lineup.expected(&variant.name),
            ..row
        });
    }
    let any_expected = !lineup.expect.is_empty();
    let (status, unexpected) = outcome(&comparison.variants, any_expected);
    let status = if comparison.skipped.is_empty() {
        status
    } else {
        Status::Invalid
    };
    comparison.unexpected = unexpected;
    let status = opts.gate.apply(
        &mut comparison,
        tolerances,
        time_scale.unwrap_or(1.0),
        status,
    );
    comparison.exit_code = exit_code(status);
    crate::compare::regression::write_comparison(&opts.out, comparison, status)
}

/// A run's row from its `report.json` (columns and checks) and verdict;
/// without a readable report, empty columns and checks.
pub(crate) fn read_row(report_json: &Path, verdict: Status) -> ComparedRun {
    let report: serde_json::Value = std::fs::read_to_string(report_json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    ComparedRun {
        verdict,
        exit_code: exit_code(verdict),
        columns: report::Columns::of_report(&report),
        checks: report::checks_of_report(&report),
        scenario: report["scenario"].as_str().unwrap_or_default().to_string(),
        figures: report::figures_of_report(&report),
        ..ComparedRun::named("")
    }
}

/// The comparison's outcome from its runs. Any run invalid (or not
/// judged): invalid. Else, without `--expect`, the worst verdict; with it,
/// fail if and only if a variant it names has another verdict than the
/// one expected (the variants it does not name do not count), with a
/// sentence for each.
fn outcome(runs: &[ComparedRun], any_expected: bool) -> (Status, Vec<String>) {
    if runs
        .iter()
        .any(|r| !matches!(r.verdict, Status::Pass | Status::Fail))
    {
        return (Status::Invalid, Vec::new());
    }
    if !any_expected {
        let failed = runs.iter().any(|r| r.verdict == Status::Fail);
        return (if failed { Status::Fail } else { Status::Pass }, Vec::new());
    }
    // `--expect` states which variants are meant to fail: a variant it
    // does not name is meant to pass.
    let unexpected: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let e = r.expected.unwrap_or(Status::Pass);
            (e != r.verdict).then(|| {
                format!(
                    "variant \"{}\" was expected to {} and did {}",
                    r.name,
                    e.as_str(),
                    r.verdict.as_str()
                )
            })
        })
        .collect();
    let status = if unexpected.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
    (status, unexpected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, verdict: Status, expected: Option<Status>) -> ComparedRun {
        ComparedRun {
            name: name.into(),
            expected,
            ..read_row(Path::new("/nonexistent/report.json"), verdict)
        }
    }

    #[test]
    fn the_exit_is_the_worst_run_without_expectations() {
        use Status::{Fail, Invalid, Pass};
        let of = |v: &[Status]| {
            let runs: Vec<_> = v.iter().map(|&s| row("x", s, None)).collect();
            outcome(&runs, false).0
        };
        assert_eq!(of(&[Pass, Pass]), Pass);
        assert_eq!(of(&[Pass, Fail]), Fail);
        assert_eq!(of(&[Fail, Invalid, Pass]), Invalid);
        assert_eq!(of(&[]), Pass);
        assert_eq!(exit_code(Fail), 1);
        assert_eq!(exit_code(Status::Skipped), 3);
    }

    #[test]
    fn with_expectations_each_variant_gets_its_verdict_and_the_unnamed_pass() {
        use Status::{Fail, Invalid, Pass};
        let runs = [
            row("naive", Fail, Some(Fail)),
            row("bounded", Pass, Some(Pass)),
            row("aimd", Pass, None),
        ];
        assert_eq!(outcome(&runs, true), (Pass, Vec::new()));
        // A variant --expect does not name is meant to pass.
        let runs = [row("naive", Fail, Some(Fail)), row("aimd", Fail, None)];
        let (status, lines) = outcome(&runs, true);
        assert_eq!(status, Fail);
        assert_eq!(
            lines,
            ["variant \"aimd\" was expected to pass and did fail"]
        );
        let runs = [
            row("naive", Pass, Some(Fail)),
            row("bounded", Pass, Some(Pass)),
        ];
        let (status, lines) = outcome(&runs, true);
        assert_eq!(status, Fail);
        assert_eq!(
            lines,
            ["variant \"naive\" was expected to fail and did pass"]
        );
        // An invalid run is neither a pass nor a fail.
        let runs = [row("naive", Invalid, Some(Fail))];
        assert_eq!(outcome(&runs, true).0, Invalid);
    }

    use crate::scenario::TEST_SCENARIO as SCENARIO;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rehearse-lineup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_lineup_is_checked_whole_before_anything_runs() {
        let variants =
            "\n[[variants]]\nname = \"naive\"\nset = { \"gateway.reference.mode\" = \"naive\" }\n\
                        [[variants]]\nname = \"as written\"\n";
        let path = file("two.toml", &format!("{SCENARIO}{variants}"));
        let l = Lineup::prepare(&path, None, &[], &["naive=fail".into()]).unwrap();
        assert_eq!(l.names().collect::<Vec<_>>(), ["naive", "as written"]);
        assert_eq!(l.runs[1].2, "as-written");
        assert_eq!(l.expected("naive"), Some(Status::Fail));
        assert_eq!(l.expected("as written"), None);
        // --each replaces the file's variants.
        let l = Lineup::prepare(&path, Some("load.seed=1,2,3"), &[], &[]).unwrap();
        assert_eq!(l.names().count(), 3);
        let e = |each: Option<&str>, expect: &[&str]| {
            let expect: Vec<String> = expect.iter().map(|s| s.to_string()).collect();
            Lineup::prepare(&path, each, &[], &expect)
                .unwrap_err()
                .to_string()
        };
        let msg = e(None, &["aimd=pass"]);
        assert!(
            msg.contains("no variant is named \"aimd\"") && msg.contains("naive, as written"),
            "{msg}"
        );
        assert!(e(None, &["naive=maybe"]).contains("`pass` or `fail`"));
        assert!(e(None, &["naive"]).contains("NAME=pass"));
        // A scenario without variants says how to add them.
        let bare = file("bare.toml", SCENARIO);
        let msg = Lineup::prepare(&bare, None, &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no variants to compare")
                && msg.contains("[[variants]]")
                && msg.contains("each KEY=V1"),
            "{msg}"
        );
        // A bad variant is refused with the rest.
        let bad = file(
            "bad.toml",
            &format!("{SCENARIO}{variants}[[variants]]\nname = \"oops\"\nset = {{ \"gateway.reference.mode\" = \"fancy\" }}\n"),
        );
        let msg = Lineup::prepare(&bad, None, &[], &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("in variant \"oops\""), "{msg}");
    }
}
