//! What a check says: a [`Verdict`] with a [`Status`], and the number
//! formatting its sentences use.

use serde::{Deserialize, Serialize};

pub(crate) use wire::number::{count, num};

/// The outcome of one check, or of the whole checklist (read back from a
/// `report.json` by `rehearse compare`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The check holds.
    Pass,
    /// The check does not hold.
    Fail,
    /// The run cannot be judged: the harness did not keep its schedule.
    Invalid,
    /// The check did not run: nothing to judge, or data it needs missing.
    Skipped,
    /// The check is turned off in the thresholds' `[checklist]`: neither a
    /// pass nor a skip, so that a reader never takes it for either.
    Off,
}

impl Status {
    /// The name used in reports: `pass`, `fail`, `invalid`, `skipped` or
    /// `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Invalid => "invalid",
            Status::Skipped => "skipped",
            Status::Off => "off",
        }
    }
}

/// One line of the checklist.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The check's id, as in DESIGN.md (`shed_onset`, `retry_after`, ...).
    pub id: &'static str,
    /// Whether it holds.
    pub status: Status,
    /// What was observed against the bound, in a few words (`first shed at
    /// depth 31 (bound 54)`): the checklist's line on a terminal, the first
    /// line of junit.xml's failure message, summary.md's row.
    pub short: String,
    /// What the scenario predicts or requires.
    pub predicted: String,
    /// What the records show.
    pub observed: String,
    /// One sentence a person can act on.
    pub detail: String,
    /// What the short line measures, as a number (absent when the check
    /// measured nothing: skipped, or no data): what `rehearse compare`
    /// sets against a baseline run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figure: Option<Figure>,
}

/// A check's figure: the number its short line gives, its unit, and which
/// way counts as worse (a longer drain, a lower goodput).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// The number, in `unit`.
    pub value: f64,
    /// `s`, `ms`, `bytes`, `share` (0 to 1), `per_s`, or a count's noun
    /// (`requests`, `attempts`, `calls`, `answers`).
    pub unit: &'static str,
    /// What it is, in a few words (`drain time`).
    pub measures: &'static str,
    /// The direction that counts as worse.
    pub worse: Worse,
}

/// Which way a [`Figure`] gets worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    /// A larger value is worse (a latency, a share of failures).
    Higher,
    /// A smaller value is worse (answers per second).
    Lower,
}

impl Figure {
    /// A figure that is worse when higher.
    pub(crate) fn higher(value: f64, unit: &'static str, measures: &'static str) -> Figure {
        Figure {
            value,
            unit,
            measures,
            worse: Worse::Higher,
        }
    }
}

impl Verdict {
    pub(crate) fn new(
        id: &'static str,
        status: Status,
        short: impl Into<String>,
        predicted: impl Into<String>,
        observed: impl Into<String>,
        detail: impl Into<String>,
    ) -> Verdict {
        Verdict {
            id,
            status,
            short: short.into(),
            predicted: predicted.into(),
            observed: observed.into(),
            detail: detail.into(),
            figure: None,
        }
    }

    /// The verdict with its figure.
    pub(crate) fn with(self, figure: Figure) -> Verdict {
        Verdict {
            figure: Some(figure),
            ..self
        }
    }

    /// A check that did not run: `short` says why in a few words, `why`
    /// in a sentence.
    pub(crate) fn skipped(id: &'static str, short: &str, why: impl Into<String>) -> Verdict {
        Verdict::new(id, Status::Skipped, short, "", "", why)
    }

    /// The verdict of a check turned off in the thresholds' `[checklist]`.
    pub(crate) fn off(id: &'static str) -> Verdict {
        Verdict::new(id, Status::Off, DISABLED, "", "", DISABLED)
    }
}

/// The explanation of a check turned off.
pub(crate) const DISABLED: &str = "turned off in [checklist]";

/// A count with the noun that agrees with it: `plural(1, "answer was",
/// "answers were")` → `"1 answer was"`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// A non-negative quantity rounded to the nearest integer, with thousands
/// separators (a negative or non-finite one shows as 0).
pub(crate) fn round(x: f64) -> String {
    count(if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    })
}

/// Seconds with up to one decimal: `"25 s"`, `"1.5 s"`.
pub(crate) fn secs(s: f64) -> String {
    format!("{} s", num(s, 1))
}

/// Bytes in MiB with one decimal: `"412.3 MiB"`.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{} MiB", num(bytes as f64 / (1024.0 * 1024.0), 1))
}

/// A share as a percentage with up to one decimal: `"2.5%"`.
pub(crate) fn percent(share: f64) -> String {
    format!("{}%", num(share * 100.0, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_a_person_writes_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(174), "174");
        assert_eq!(count(9_360), "9,360");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(round(173.6), "174");
        assert_eq!(round(-3.0), "0");
        assert_eq!(num(25.0, 1), "25");
        assert_eq!(num(1234.56, 1), "1,234.6");
        assert_eq!(num(-0.04, 1), "0");
        assert_eq!(num(-2.5, 1), "-2.5");
        assert_eq!(secs(1.5), "1.5 s");
        assert_eq!(mib(512 * 1024 * 1024), "512 MiB");
        assert_eq!(percent(0.025), "2.5%");
        assert_eq!(plural(1, "call", "calls"), "1 call");
        assert_eq!(plural(1_000, "call", "calls"), "1,000 calls");
        assert_eq!(
            serde_json::to_string(&Status::Skipped).unwrap(),
            "\"skipped\""
        );
    }
}
