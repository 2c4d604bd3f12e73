//! The reports of a judged run: `report.json`, `junit.xml` and the
//! checklist printed on the terminal.

use assertions::{Judgement, Status, Verdict};
use serde::Serialize;

use crate::documents::RunMeta;

/// The refusals of a count line, each kind apart (never summed): shed and
/// stale always, the other kinds when any happened.
fn refusal_counts(c: &assertions::Counts) -> String {
    let n = |v: u64| crate::plan_text::thousands(v as f64);
    let mut parts = vec![
        format!("shed {}", n(c.shed)),
        format!("stale {}", n(c.stale)),
    ];
    for (label, v) in [
        ("tenant-limited", c.tenant_limited),
        ("gateway timeouts", c.gateway_timeout),
        ("provider refusals passed through", c.upstream_refused),
    ] {
        if v > 0 {
            parts.push(format!("{label} {}", n(v)));
        }
    }
    parts.join(", ")
}

/// `report.json`.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// The gateway rehearsed.
    pub gateway: &'a str,
    /// pass, fail or invalid.
    pub verdict: Status,
    /// True if the run was stopped before its end.
    pub partial: bool,
    /// One entry per check.
    pub checks: &'a [Verdict],
    /// Counts, provider, latency_ms, gateway, drain_s, harness.
    #[serde(flatten)]
    pub summary: &'a assertions::Summary,
    /// The time scale the run was made at.
    pub time_scale: f64,
    /// The quota scale.
    pub quota_scale: f64,
    /// What a reader should know.
    pub notes: &'a [String],
}

/// The overall verdict. A partial run (stopped before its end), or one
/// whose records are damaged, is `invalid` whatever its checks say: the
/// scenario was not rehearsed, or cannot be judged.
pub fn verdict(meta: &RunMeta, j: &Judgement) -> Status {
    if meta.partial || !meta.untrusted.is_empty() {
        Status::Invalid
    } else {
        j.overall
    }
}

/// Builds `report.json`.
pub fn report_json<'a>(meta: &'a RunMeta, j: &'a Judgement) -> Report<'a> {
    Report {
        scenario: &meta.scenario,
        gateway: &meta.gateway,
        verdict: verdict(meta, j),
        partial: meta.partial,
        checks: &j.verdicts,
        summary: &j.summary,
        time_scale: meta.time_scale,
        quota_scale: meta.quota_scale,
        notes: &meta.notes,
    }
}

/// Builds `junit.xml`: one test case per check, so CI shows the checklist.
pub fn junit(meta: &RunMeta, j: &Judgement) -> String {
    let mut report = quick_junit::Report::new("rehearse");
    let mut suite = quick_junit::TestSuite::new(meta.scenario.as_str());
    for v in &j.verdicts {
        let status = match v.status {
            Status::Pass => quick_junit::TestCaseStatus::success(),
            Status::Fail => {
                let mut s =
                    quick_junit::TestCaseStatus::non_success(quick_junit::NonSuccessKind::Failure);
                s.set_message(v.detail.as_str());
                s.set_description(format!(
                    "predicted: {}\nobserved: {}",
                    v.predicted, v.observed
                ));
                s
            }
            Status::Invalid => {
                let mut s =
                    quick_junit::TestCaseStatus::non_success(quick_junit::NonSuccessKind::Error);
                s.set_message(v.detail.as_str());
                s
            }
            Status::Skipped => {
                let mut s = quick_junit::TestCaseStatus::skipped();
                s.set_message(v.detail.as_str());
                s
            }
        };
        let mut case = quick_junit::TestCase::new(v.id, status);
        case.set_classname(format!("rehearse.{}", meta.scenario));
        suite.add_test_case(case);
    }
    report.add_test_suite(suite);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- cannot write junit: {e} -->\n"))
}

/// The checklist as printed at the end of a run.
pub fn checklist_text(meta: &RunMeta, j: &Judgement) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let overall = verdict(meta, j);
    let _ = writeln!(
        out,
        "\nChecklist: {} against {} — {}{}",
        meta.scenario,
        meta.gateway,
        overall.as_str().to_uppercase(),
        if meta.partial { " (partial run)" } else { "" }
    );
    for v in &j.verdicts {
        let _ = writeln!(
            out,
            "  {:<7} {:<15} predicted {:<22} observed {:<22} {}",
            v.status.as_str().to_uppercase(),
            v.id,
            v.predicted,
            v.observed,
            v.detail
        );
    }
    let c = &j.summary.counts;
    let n = |v: u64| crate::plan_text::thousands(v as f64);
    let _ = writeln!(
        out,
        "  counts: offered {}, sent {}, ok {}, {}, timed out {}, errors {}, late answers {}",
        n(c.offered),
        n(c.sent),
        n(c.ok),
        refusal_counts(c),
        n(c.timeout),
        n(c.error),
        n(c.late)
    );
    for (tenant, c) in &j.summary.tenants {
        let _ = writeln!(
            out,
            "  tenant {tenant}: offered {}, ok {}, {}, timed out {}, errors {}",
            n(c.offered),
            n(c.ok),
            refusal_counts(c),
            n(c.timeout),
            n(c.error)
        );
    }
    for n in &meta.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}
