//! The document of a comparison's directory, `compare.json`
//! ([`Comparison`]), and what it reads of each run's `report.json`
//! ([`Columns`], [`checks_of_report`]). The harness writes it; the
//! comparison's table and page read it back. Every field has a default
//! when read, so a directory written by an older version still renders.
//! (A run directory's `run.json` and `plan.json` are `wire`'s:
//! [`wire::RunMeta`], [`wire::Plan`].)

use std::collections::BTreeMap;

use assertions::Status;
use serde::{Deserialize, Serialize};

/// `compare.json`: one scenario run once per variant (`rehearse compare
/// SCENARIO`), in the comparison's directory beside the variants' run
/// directories; or run directories already made, judged side by side
/// (`rehearse compare DIR DIR...`: each a "variant" named by its
/// directory). The first run is the baseline the others' figures are set
/// against.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Comparison {
    /// Scenario name.
    pub scenario: String,
    /// The scenario file, as named on the command line.
    pub file: String,
    /// The variants run, in the order they ran.
    pub variants: Vec<ComparedRun>,
    /// The variants not run: the comparison was stopped first.
    pub skipped: Vec<String>,
    /// How `rehearse compare` exits: the worst of the runs' codes, or with
    /// `--expect`, 0 when every named variant's verdict is as expected.
    pub exit_code: u8,
    /// A sentence per verdict that was not as expected (`--expect`).
    pub unexpected: Vec<String>,
    /// What was compared: `variants` of one scenario, or `runs` (run
    /// directories); absent in a file written before runs could be.
    pub compared: String,
    /// A sentence per way a run's scenario differs from the baseline's
    /// (another scenario, another time scale, a changed field).
    pub differences: Vec<String>,
    /// A sentence per figure worse than the baseline's beyond its tolerance.
    pub regressions: Vec<String>,
    /// The tolerances the figures were held to, by check id.
    pub tolerances: BTreeMap<String, Tolerance>,
    /// `--fail-on-regression`: a regression makes the exit 1.
    pub fail_on_regression: bool,
}

impl Comparison {
    /// The checks its rows show: every one judged in every run, then the
    /// conditional ones ([`assertions::Check::always`]) a run has (several
    /// providers, or a provider that announced a Retry-After), in
    /// [`assertions::Check::ALL`] order.
    pub fn check_ids(&self) -> Vec<&'static str> {
        assertions::Check::ALL
            .into_iter()
            .filter(|c| c.always() || self.variants.iter().any(|r| r.checks.contains_key(c.id())))
            .map(assertions::Check::id)
            .collect()
    }
}

/// One variant's run in `compare.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComparedRun {
    /// The variant's name.
    pub name: String,
    /// Its overrides, `dotted.key=value`, then the command line's `--set`.
    pub sets: Vec<String>,
    /// Its run directory, relative to the comparison's.
    pub dir: String,
    /// The run's verdict (`invalid` when it could not be made).
    pub verdict: Status,
    /// How `rehearse run` would have exited: 0 pass, 1 fail, 3 invalid.
    pub exit_code: u8,
    /// The verdict `--expect` asked for, if it named this variant.
    #[serde(default)]
    pub expected: Option<Status>,
    /// Why the run could not be made, if it could not.
    #[serde(default)]
    pub error: Option<String>,
    /// The columns, from the run's `report.json`.
    #[serde(flatten)]
    pub columns: Columns,
    /// Each check's verdict, by id.
    #[serde(default)]
    pub checks: BTreeMap<String, Status>,
    /// The run's scenario (its `report.json`'s `scenario`).
    #[serde(default)]
    pub scenario: String,
    /// Each check's figure, by id, with its change from the baseline's.
    #[serde(default)]
    pub figures: BTreeMap<String, ComparedFigure>,
}

impl ComparedRun {
    /// A run of that name with nothing read yet: no verdict (invalid), no
    /// columns, checks or figures.
    pub fn named(name: &str) -> ComparedRun {
        ComparedRun {
            name: name.to_string(),
            sets: Vec::new(),
            dir: String::new(),
            verdict: Status::Invalid,
            exit_code: 3,
            expected: None,
            error: None,
            columns: Columns::default(),
            checks: BTreeMap::new(),
            scenario: String::new(),
            figures: BTreeMap::new(),
        }
    }
}

/// A check's figure in one run of a comparison (`report.json`'s `figure`),
/// with its change from the baseline run's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedFigure {
    /// The number, in `unit`.
    pub value: f64,
    /// Its unit (`s`, `ms`, `bytes`, `share`, `per_s`, or a count's noun).
    pub unit: String,
    /// What it is, in a few words.
    pub measures: String,
    /// The direction that counts as worse.
    pub worse: assertions::Worse,
    /// This value minus the baseline's (none in the baseline, or when the
    /// baseline has no figure for the check).
    #[serde(default)]
    pub change: Option<f64>,
    /// The change is worse than the baseline's beyond the check's tolerance.
    #[serde(default)]
    pub regressed: bool,
}

/// The columns of a comparison, from one run's `report.json` (the README's
/// "Comparing variants" defines each from the records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Columns {
    /// Attempts answered (`counts.ok`).
    pub ok: u64,
    /// Answers finished after their caller had left (`counts.late`).
    pub late: u64,
    /// Attempts whose caller gave up (`counts.timeout`).
    pub timeout: u64,
    /// Refused at admission (`counts.shed`).
    pub shed: u64,
    /// Dropped at dequeue (`counts.stale`).
    pub stale: u64,
    /// The gateway gave up on the provider (`counts.gateway_timeout`).
    pub gateway_timeout: u64,
    /// Lost to the gateway's deaths (`gateway.lost`).
    pub lost: u64,
    /// The gateway's deaths (`gateway.crashes`).
    pub crashes: u64,
    /// The most attempts inside the gateway at once (`gateway.peak_in_flight`).
    pub peak_in_flight: u64,
    /// The gateway's largest resident memory (`gateway.peak_rss_bytes`).
    pub peak_rss_bytes: Option<u64>,
}

impl Columns {
    /// The columns of a run's `report.json`; a figure it lacks (a report
    /// written before the figure was) is 0, or `None`.
    ///
    /// ```
    /// let report = serde_json::json!({
    ///     "counts": { "ok": 7, "shed": 2 },
    ///     "gateway": { "peak_in_flight": 9, "peak_rss_bytes": 1024 }
    /// });
    /// let c = report::Columns::of_report(&report);
    /// assert_eq!((c.ok, c.shed, c.lost, c.peak_in_flight), (7, 2, 0, 9));
    /// assert_eq!(c.peak_rss_bytes, Some(1024));
    /// ```
    pub fn of_report(report: &serde_json::Value) -> Columns {
        let n = |path: &str| report.pointer(path).and_then(serde_json::Value::as_u64);
        let count = |key: &str| n(&format!("/counts/{key}")).unwrap_or(0);
        let gateway = |key: &str| n(&format!("/gateway/{key}"));
        Columns {
            ok: count("ok"),
            late: count("late"),
            timeout: count("timeout"),
            shed: count("shed"),
            stale: count("stale"),
            gateway_timeout: count("gateway_timeout"),
            lost: gateway("lost").unwrap_or(0),
            crashes: gateway("crashes").unwrap_or(0),
            peak_in_flight: gateway("peak_in_flight").unwrap_or(0),
            peak_rss_bytes: gateway("peak_rss_bytes"),
        }
    }
}

/// Each check's verdict in a run's `report.json`, by id.
///
/// ```
/// use assertions::Status;
/// let report = serde_json::json!({
///     "checks": [{ "id": "drain", "status": "fail" }, { "id": "goodput", "status": "pass" }]
/// });
/// let checks = report::checks_of_report(&report);
/// assert_eq!(checks["drain"], Status::Fail);
/// assert_eq!(checks.len(), 2);
/// ```
pub fn checks_of_report(report: &serde_json::Value) -> BTreeMap<String, Status> {
    report
        .get("checks")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let id = c.get("id")?.as_str()?.to_string();
            let status = serde_json::from_value(c.get("status")?.clone()).ok()?;
            Some((id, status))
        })
        .collect()
}

/// How much worse than the baseline a figure may get before it counts as
/// a regression (the checks' own type: for seconds and milliseconds,
/// `at_least` is at full scale, divided by the baseline's time scale).
pub use assertions::Tolerance;
