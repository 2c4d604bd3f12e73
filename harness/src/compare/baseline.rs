//! `rehearse compare DIR DIR...`: run directories already made, judged
//! side by side with the first as the baseline, in the same
//! `compare.json` as a comparison of variants (their figures held to the
//! baseline's by `regression`).
//!
//! A directory holding `run.json` is a run; anything else named is a
//! scenario ([`CompareInputs::of`]). A run whose `report.json` has no
//! figures (written before they were) is judged again first, which
//! rewrites its reports in place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use assertions::Status;
use report::{ComparedRun, Comparison};

use crate::compare::regression::{write_comparison, Compared, RegressionGate};
use crate::compare::{exit_code, flag_error, read_row};
use crate::error::RunError;
use crate::run::judge::judge_dir;
use crate::scenario::ScenarioError;

/// What `rehearse compare` was given: one scenario (its variants are run),
/// or run directories (compared as they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareInputs {
    /// A scenario file.
    Scenario(PathBuf),
    /// Two or more run directories, the baseline first.
    Runs(Vec<PathBuf>),
}

impl CompareInputs {
    /// Sorts the paths named: all run directories (each holding
    /// `run.json`, at least two), or one scenario; a mix, one run alone or
    /// two scenarios is bad input.
    pub fn of(inputs: &[PathBuf]) -> Result<CompareInputs, ScenarioError> {
        let is_run = |p: &PathBuf| p.join(wire::files::RUN).is_file();
        let runs = inputs.iter().filter(|p| is_run(p)).count();
        let named = inputs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        match (runs, inputs) {
            (0, [scenario]) => Ok(CompareInputs::Scenario(scenario.clone())),
            (n, _) if n == inputs.len() && n >= 2 => Ok(CompareInputs::Runs(inputs.to_vec())),
            (1, [_]) => Err(flag_error(
                &named,
                "one run directory alone: name a baseline run directory and at least one more to set beside it".into(),
            )),
            (0, _) => Err(flag_error(
                &named,
                "compare runs one scenario's variants (one file) or sets run directories (each holding run.json) side by side, not several scenarios".into(),
            )),
            _ => Err(flag_error(
                &named,
                "these are not all run directories (a directory holding run.json): compare either one scenario's variants or run directories".into(),
            )),
        }
    }
}

/// Judges the run directories `dirs` side by side (the first the
/// baseline), and writes `compare.json`, `compare.html` and `summary.md`
/// into `out`. Each run is read from its `report.json`, judged again
/// first when that has no figures. The outcome is the worst verdict of
/// the runs after the baseline (it is what they are measured against),
/// made a fail by a regression under `--fail-on-regression`.
pub fn compare_runs(
    dirs: &[PathBuf],
    out: &Path,
    gate: &RegressionGate,
) -> Result<Compared, RunError> {
    let tolerances = gate.tolerances()?;
    std::fs::create_dir_all(out).map_err(RunError::create_dir(out))?;
    let mut comparison = Comparison {
        compared: "runs".into(),
        file: dirs[0].display().to_string(),
        ..Comparison::default()
    };
    let mut scenarios = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let report_json = dir.join(wire::files::REPORT_JSON);
        let judged_again = needs_judging(&report_json);
        let verdict = if judged_again {
            judge_dir(dir, &[], None)?.status
        } else {
            verdict_of(&report_json)
        };
        let name = run_name(dir, i, &comparison.variants);
        let row = read_row(&report_json, verdict);
        let read = ScenarioRead::of(dir);
        if judged_again {
            comparison.differences.push(format!(
                "{name}: its report.json had no figures (written before them), so it was judged again"
            ));
        }
        comparison.variants.push(ComparedRun {
            name,
            // Absolute: the comparison's directory is elsewhere.
            dir: std::path::absolute(dir)
                .unwrap_or_else(|_| dir.clone())
                .display()
                .to_string(),
            ..row
        });
        scenarios.push(read);
    }
    comparison.scenario = scenario_title(&comparison.variants);
    comparison
        .differences
        .extend(differences(&comparison.variants, &scenarios));
    let after_baseline = &comparison.variants[1..];
    let status = if after_baseline
        .iter()
        .any(|r| !matches!(r.verdict, Status::Pass | Status::Fail))
    {
        Status::Invalid
    } else if after_baseline.iter().any(|r| r.verdict == Status::Fail) {
        Status::Fail
    } else {
        Status::Pass
    };
    let status = gate.apply(&mut comparison, tolerances, scenarios[0].time_scale, status);
    comparison.exit_code = exit_code(status);
    write_comparison(out, comparison, status)
}

/// True if and only if the run's `report.json` is missing, unreadable, or
/// has no check with a figure (written before figures were).
fn needs_judging(report_json: &Path) -> bool {
    let report: serde_json::Value = std::fs::read_to_string(report_json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    report::figures_of_report(&report).is_empty()
}

/// The verdict `report.json` says (invalid when it says none).
fn verdict_of(report_json: &Path) -> Status {
    std::fs::read_to_string(report_json)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| serde_json::from_value(v.get("verdict")?.clone()).ok())
        .unwrap_or(Status::Invalid)
}

/// A run's name in the comparison: its directory's own name, with its
/// parent's before it when that is taken (`main/pool-demo`), else its
/// place (`#2`).
fn run_name(dir: &Path, i: usize, taken: &[ComparedRun]) -> String {
    let last = |p: &Path| p.file_name().map(|n| n.to_string_lossy().to_string());
    let full = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let own = last(&full).unwrap_or_default();
    let with_parent = full
        .parent()
        .and_then(last)
        .map(|p| format!("{p}/{own}"))
        .unwrap_or_default();
    [own, with_parent]
        .into_iter()
        .find(|n| !n.is_empty() && !taken.iter().any(|r| &r.name == n))
        .unwrap_or_else(|| format!("#{}", i + 1))
}

/// The comparison's title: the scenario's name, or the names joined by
/// ` vs ` when the runs are of several.
fn scenario_title(runs: &[ComparedRun]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if !names.contains(&r.scenario.as_str()) {
            names.push(&r.scenario);
        }
    }
    names.join(" vs ")
}

/// What the comparison reads of a run's scenario: `scenario.toml`'s
/// fields, flattened to dotted keys, and `run.json`'s scales and target.
#[derive(Debug, Default)]
struct ScenarioRead {
    fields: BTreeMap<String, String>,
    time_scale: f64,
    quota_scale: f64,
    gateway: String,
}

impl ScenarioRead {
    fn of(dir: &Path) -> ScenarioRead {
        let mut fields = BTreeMap::new();
        if let Some(table) = std::fs::read_to_string(dir.join(wire::files::SCENARIO))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
        {
            flatten("", &toml::Value::Table(table), &mut fields);
        }
        let meta: serde_json::Value = std::fs::read_to_string(dir.join(wire::files::RUN))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        ScenarioRead {
            fields,
            time_scale: meta["time_scale"].as_f64().unwrap_or(1.0),
            quota_scale: meta["quota_scale"].as_f64().unwrap_or(1.0),
            gateway: meta["gateway"].as_str().unwrap_or_default().to_string(),
        }
    }
}

/// `value`'s leaves under `prefix`, as dotted keys and TOML text (an
/// array is one leaf: a phase list changed is one difference).
fn flatten(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// At most this many changed fields are named per run; the rest counted.
const FIELDS_NAMED: usize = 8;

/// How each run's scenario differs from the baseline's, a sentence per
/// run that differs: another scenario (said first, as the comparison is
/// then of unlike runs), another scale or gateway, the fields changed.
fn differences(runs: &[ComparedRun], scenarios: &[ScenarioRead]) -> Vec<String> {
    let (Some(base_run), Some(base)) = (runs.first(), scenarios.first()) else {
        return Vec::new();
    };
    let mut said = Vec::new();
    for (r, s) in runs.iter().zip(scenarios).skip(1) {
        if r.scenario != base_run.scenario {
            said.push(format!(
                "{} is a run of another scenario ({}, the baseline {}): runs of different scenarios, their figures are not like for like",
                r.name, r.scenario, base_run.scenario
            ));
        }
        let mut parts = Vec::new();
        if s.time_scale != base.time_scale || s.quota_scale != base.quota_scale {
            parts.push(format!(
                "time scale {} and quota scale {} (the baseline {} and {})",
                s.time_scale, s.quota_scale, base.time_scale, base.quota_scale
            ));
        }
        if s.gateway != base.gateway {
            parts.push(format!(
                "gateway {} (the baseline {})",
                s.gateway, base.gateway
            ));
        }
        let keys: BTreeSet<&String> = s.fields.keys().chain(base.fields.keys()).collect();
        let changed: Vec<String> = keys
            .into_iter()
            .filter(|k| k.as_str() != "scenario.name" && s.fields.get(*k) != base.fields.get(*k))
            .map(|k| {
                let v = |m: &BTreeMap<String, String>| m.get(k).cloned().unwrap_or("unset".into());
                format!("{k} = {} (the baseline {})", v(&s.fields), v(&base.fields))
            })
            .collect();
        if changed.len() > FIELDS_NAMED {
            let more = changed.len() - FIELDS_NAMED;
            parts.extend(changed.into_iter().take(FIELDS_NAMED));
            parts.push(format!("{more} more fields"));
        } else {
            parts.extend(changed);
        }
        if !parts.is_empty() {
            said.push(format!("{}: {}", r.name, parts.join("; ")));
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(name: &str, scenario: &str, time_scale: f64) -> PathBuf {
        let dir = std::env::temp_dir()
            .join(format!("rehearse-baseline-{}", std::process::id()))
            .join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(wire::files::RUN),
            format!("{{\"time_scale\": {time_scale}, \"quota_scale\": 1, \"gateway\": \"reference bounded\"}}"),
        )
        .unwrap();
        std::fs::write(dir.join(wire::files::SCENARIO), scenario).unwrap();
        dir
    }

    #[test]
    fn inputs_are_one_scenario_or_run_directories() {
        let a = run_dir("a", "", 1.0);
        let b = run_dir("b", "", 1.0);
        let scenario = PathBuf::from("scenarios/pool-demo.toml");
        assert_eq!(
            CompareInputs::of(std::slice::from_ref(&scenario)).unwrap(),
            CompareInputs::Scenario(scenario.clone())
        );
        assert_eq!(
            CompareInputs::of(&[a.clone(), b.clone()]).unwrap(),
            CompareInputs::Runs(vec![a.clone(), b.clone()])
        );
        let e = |i: &[PathBuf]| CompareInputs::of(i).unwrap_err().to_string();
        assert!(e(std::slice::from_ref(&a)).contains("one run directory alone"));
        assert!(e(&[a.clone(), scenario.clone()]).contains("not all run directories"));
        assert!(e(&[scenario.clone(), scenario]).contains("not several scenarios"));
    }

    #[test]
    fn a_run_of_another_scenario_or_with_changed_fields_is_said_to_differ() {
        let base = "[scenario]\nname = \"pool\"\nseed = 4\n[load]\nrate = 40\n";
        let dirs = [
            run_dir("base", base, 10.0),
            run_dir("same", base, 10.0),
            run_dir("edited", &base.replace("rate = 40", "rate = 50"), 5.0),
            run_dir("other", "[scenario]\nname = \"smoke\"\nseed = 4\n", 10.0),
        ];
        let scenarios: Vec<ScenarioRead> = dirs.iter().map(|d| ScenarioRead::of(d)).collect();
        let runs: Vec<ComparedRun> = ["base", "same", "edited", "other"]
            .iter()
            .zip(["pool", "pool", "pool", "smoke"])
            .map(|(n, s)| ComparedRun {
                scenario: s.into(),
                ..ComparedRun::named(n)
            })
            .collect();
        let said = differences(&runs, &scenarios);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(
            said[0].starts_with("edited: time scale 5")
                && said[0].contains("load.rate = 50 (the baseline 40)"),
            "{said:?}"
        );
        assert!(said[1].contains("runs of different scenarios"), "{said:?}");
        assert!(
            said[2].contains("load.rate = unset (the baseline 40)"),
            "{said:?}"
        );
        assert_eq!(scenario_title(&runs), "pool vs smoke");
        assert_eq!(run_name(&dirs[0], 0, &[]), "base");
        let taken = [ComparedRun::named("base")];
        assert!(run_name(&dirs[0], 1, &taken).ends_with("/base"));
    }

    /// A golden run directory, whose report predates figures, is judged
    /// again to get them; set beside itself nothing changed.
    #[test]
    fn an_old_run_directory_is_judged_again_for_its_figures() {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/pool-demo-bounded");
        let root =
            std::env::temp_dir().join(format!("rehearse-baseline-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut dirs = Vec::new();
        for name in ["main", "change"] {
            let dir = root.join(name).join("pool-demo");
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&golden).unwrap() {
                let path = entry.unwrap().path();
                let file = path.file_name().unwrap().to_string_lossy().to_string();
                if !file.starts_with("expected-") {
                    std::fs::copy(&path, dir.join(&file)).unwrap();
                }
            }
            dirs.push(dir);
        }
        let gate = RegressionGate {
            fail_on_regression: true,
            tolerance: Vec::new(),
        };
        let compared = compare_runs(&dirs, &root.join("out"), &gate).unwrap();
        let c = &compared.comparison;
        assert_eq!(c.compared, "runs");
        assert_eq!(c.variants[0].name, "pool-demo");
        assert_eq!(c.variants[1].name, "change/pool-demo");
        assert!(
            c.differences.iter().all(|d| d.contains("judged again")),
            "{:?}",
            c.differences
        );
        let drain = &c.variants[1].figures["drain"];
        assert_eq!((drain.unit.as_str(), drain.change), ("s", Some(0.0)));
        assert!(c.regressions.is_empty(), "{:?}", c.regressions);
        assert_eq!(compared.status, Status::Pass);
        assert!(root.join("out/summary.md").is_file() && root.join("out/compare.html").is_file());
        let _ = std::fs::remove_dir_all(&root);
    }
}
