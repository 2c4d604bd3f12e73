//! The reports of a judged run: `report.json`, `junit.xml`, `summary.md`
//! and the checklist printed on the terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use assertions::{Counts, Judgement, Status, Verdict};
use serde::Serialize;

use crate::terminal::{columns, fit, pad, wrap, Style, MAX_WIDTH};
use crate::{write_whole, ReportError};
use wire::RunMeta;

/// The refusals of a count line, each kind apart (never summed): shed and
/// stale always, the other kinds when any happened.
fn refusal_counts(c: &assertions::Counts) -> String {
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
    /// With several providers, each one's calls and refusals per scenario
    /// second (absent with one: its report is as it was).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub providers: &'a [assertions::ProviderSeconds],
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
        providers: &j.timeline.providers,
        notes: &meta.notes,
    }
}

/// Builds `junit.xml`: one test case per check, so CI shows the
/// checklist. A check that did not pass has the checklist's short line as
/// its message (the first line CI shows), and its explanation, prediction
/// and observation below.
pub fn junit(meta: &RunMeta, j: &Judgement) -> String {
    use quick_junit::{NonSuccessKind, TestCaseStatus};
    let mut report = quick_junit::Report::new("rehearse");
    let mut suite = quick_junit::TestSuite::new(meta.scenario.as_str());
    for v in &j.verdicts {
        let mut status = match v.status {
            Status::Pass => TestCaseStatus::success(),
            Status::Fail => TestCaseStatus::non_success(NonSuccessKind::Failure),
            Status::Invalid => TestCaseStatus::non_success(NonSuccessKind::Error),
            Status::Skipped | Status::Off => TestCaseStatus::skipped(),
        };
        if v.status != Status::Pass {
            status.set_message(v.short.as_str());
            let mut text = format!("{}\n{}", v.short, v.detail);
            if !v.predicted.is_empty() {
                let _ = write!(
                    text,
                    "\npredicted: {}\nobserved: {}",
                    v.predicted, v.observed
                );
            }
            status.set_description(text);
        }
        let mut case = quick_junit::TestCase::new(v.id, status);
        case.set_classname(format!("rehearse.{}", meta.scenario));
        suite.add_test_case(case);
    }
    report.add_test_suite(suite);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- cannot write junit: {e} -->\n"))
}

/// The file name of the checklist as Markdown, in the run directory.
pub const SUMMARY_MD: &str = wire::files::SUMMARY_MD;

/// A judged run as a person reads it on a terminal, in a CI log or a
/// pull-request comment: the verdict, one line per check, the counts and
/// the notes. Rendered for a [`Style`] when printed ([`Checklist::text`]),
/// or as Markdown ([`Checklist::markdown`]).
#[derive(Debug, Clone)]
pub struct Checklist {
    /// The scenario's name.
    pub scenario: String,
    /// The gateway rehearsed.
    pub gateway: String,
    /// The overall verdict ([`verdict`]).
    pub verdict: Status,
    /// The run was stopped before its end.
    pub partial: bool,
    /// One per check.
    pub verdicts: Vec<Verdict>,
    /// The run's counts.
    pub counts: Counts,
    /// The counts of each tenant, when the load has several.
    pub tenants: BTreeMap<String, Counts>,
    /// What a reader should know.
    pub notes: Vec<String>,
}

/// The columns of a check's mark (`INVALID`, `SKIPPED`) and id
/// (`refusals_legible`) on a checklist line.
const MARK: usize = 7;
const ID: usize = 16;

impl Checklist {
    /// The checklist of a judged run.
    pub fn new(meta: &RunMeta, j: &Judgement) -> Checklist {
        Checklist {
            scenario: meta.scenario.clone(),
            gateway: meta.gateway.clone(),
            verdict: verdict(meta, j),
            partial: meta.partial,
            verdicts: j.verdicts.clone(),
            counts: j.summary.counts,
            tenants: j.summary.tenants.clone(),
            notes: meta.notes.clone(),
        }
    }

    /// The verdict line: `Checklist: NAME against GATEWAY: PASS`, wrapped
    /// at the style's width.
    pub fn verdict_line(&self, style: &Style) -> String {
        let mark = style.paint(
            &format!("1;{}", colour(self.verdict)),
            &self.verdict.as_str().to_uppercase(),
        );
        let text = format!(
            "Checklist: {} against {}: {}{}",
            self.scenario,
            self.gateway,
            self.verdict.as_str().to_uppercase(),
            if self.partial { " (partial run)" } else { "" }
        );
        let mut out = String::new();
        for line in wrap(&text, style.width, "", "  ") {
            out.push_str(&line);
            out.push('\n');
        }
        // Painted after wrapping, so that escapes take no columns.
        let verdict = self.verdict.as_str().to_uppercase();
        match out.rfind(&verdict) {
            Some(at) if style.colour => {
                out.replace_range(at..at + verdict.len(), &mark);
                out
            }
            _ => out,
        }
    }

    /// The checklist as printed at the end of a run: the verdict line; a
    /// line per check (its mark, id and short line, at most 100 columns;
    /// with `verbose`, predicted, observed and the explanation too); the
    /// explanation of each check that failed or was invalid, wrapped; the
    /// counts and the notes, wrapped.
    pub fn text(&self, style: &Style) -> String {
        let mut out = String::from("\n");
        out.push_str(&self.verdict_line(style));
        for v in &self.verdicts {
            out.push_str(&check_line(v, style));
        }
        let why: Vec<&Verdict> = self
            .verdicts
            .iter()
            .filter(|v| matches!(v.status, Status::Fail | Status::Invalid))
            .collect();
        if !style.verbose && !why.is_empty() {
            out.push_str("\nWhy:\n");
            for v in why {
                let text = format!("{}: {}", v.id, v.detail);
                push_wrapped(&mut out, &text, style.width, "  ", "    ");
            }
            out.push('\n');
        }
        let c = &self.counts;
        let counts = format!(
            "counts: offered {}, sent {}, ok {}, {}, timed out {}, errors {}, late answers {}",
            n(c.offered),
            n(c.sent),
            n(c.ok),
            refusal_counts(c),
            n(c.timeout),
            n(c.error),
            n(c.late)
        );
        push_wrapped(&mut out, &counts, style.width, "  ", "    ");
        for (tenant, c) in &self.tenants {
            let text = format!(
                "tenant {tenant}: offered {}, ok {}, {}, timed out {}, errors {}",
                n(c.offered),
                n(c.ok),
                refusal_counts(c),
                n(c.timeout),
                n(c.error)
            );
            push_wrapped(&mut out, &text, style.width, "  ", "    ");
        }
        for note in &self.notes {
            push_wrapped(
                &mut out,
                &format!("note: {note}"),
                style.width,
                "  ",
                "    ",
            );
        }
        out
    }

    /// The checklist as Markdown (`summary.md`): a heading with the
    /// verdict, a table of the checks (mark, id, short line), each failed
    /// or invalid check's explanation, the counts and the notes. Suitable
    /// for a CI job's summary (`$GITHUB_STEP_SUMMARY`) or a pull-request
    /// comment.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "### {} {}: {} against {}{}\n\n| | check | observed (bound) |\n|---|---|---|\n",
            emoji(self.verdict),
            self.verdict.as_str().to_uppercase(),
            md(&self.scenario),
            md(&self.gateway),
            if self.partial { " (partial run)" } else { "" }
        );
        for v in &self.verdicts {
            let _ = writeln!(
                out,
                "| {} {} | `{}` | {} |",
                emoji(v.status),
                v.status.as_str().to_uppercase(),
                v.id,
                md(&v.short)
            );
        }
        let why: Vec<&Verdict> = self
            .verdicts
            .iter()
            .filter(|v| matches!(v.status, Status::Fail | Status::Invalid))
            .collect();
        if !why.is_empty() {
            out.push('\n');
            for v in why {
                let _ = writeln!(out, "- `{}`: {}", v.id, md(&v.detail));
            }
        }
        let c = &self.counts;
        let _ = write!(
            out,
            "\nCounts: offered {}, sent {}, ok {}, {}, timed out {}, errors {}, late answers {}.\n",
            n(c.offered),
            n(c.sent),
            n(c.ok),
            refusal_counts(c),
            n(c.timeout),
            n(c.error),
            n(c.late)
        );
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "> {}", md(note));
            }
        }
        out
    }

    /// Writes `summary.md` ([`Checklist::markdown`]) into the run
    /// directory `dir` and returns its path.
    pub fn write_markdown(&self, dir: &Path) -> Result<PathBuf, ReportError> {
        let path = dir.join(SUMMARY_MD);
        write_whole(&path, self.markdown().as_bytes())?;
        Ok(path)
    }
}

/// A count with thousands separators.
fn n(v: u64) -> String {
    wire::number::count(v)
}

/// One check's line: `  PASS    shed_onset        first shed at depth 8
/// (bound 368)`, cut to 100 columns; with `verbose`, today's whole line.
fn check_line(v: &Verdict, style: &Style) -> String {
    let word = v.status.as_str().to_uppercase();
    let mark = style.paint(colour(v.status), &word);
    let mark = format!("{mark}{}", " ".repeat(MARK.saturating_sub(word.len())));
    if style.verbose {
        return format!(
            "  {mark} {:<15} predicted {:<22} observed {:<22} {}\n",
            v.id, v.predicted, v.observed, v.detail
        );
    }
    // However wide the terminal, the line fits in MAX_WIDTH columns (a
    // narrower terminal folds it: the short words are never cut to it).
    // An id longer than its column pushes the short line right: it is cut
    // the more.
    let room = MAX_WIDTH.saturating_sub(2 + MARK + 1 + columns(v.id).max(ID) + 2);
    format!("  {mark} {}  {}\n", pad(v.id, ID), fit(&v.short, room))
}

/// The ANSI colour of a status: green, red, magenta, yellow.
fn colour(s: Status) -> &'static str {
    match s {
        Status::Pass => "32",
        Status::Fail => "31",
        Status::Invalid => "35",
        Status::Skipped => "33",
        Status::Off => "2",
    }
}

/// The mark of a status in Markdown.
fn emoji(s: Status) -> &'static str {
    match s {
        Status::Pass => "✅",
        Status::Fail => "❌",
        Status::Invalid => "⚠️",
        Status::Skipped => "⏭️",
        Status::Off => "⏸️",
    }
}

/// Text made safe for a Markdown table cell: `|` escaped, no line breaks.
fn md(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `text` wrapped at `width` onto `out`, a line each.
fn push_wrapped(out: &mut String, text: &str, width: usize, first: &str, rest: &str) {
    for line in wrap(text, width, first, rest) {
        out.push_str(&line);
        out.push('\n');
    }
}
