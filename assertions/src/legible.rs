//! `refusals_legible`: can a person reading one refusal tell which policy
//! fired? The judge classes every refusal from the records ([`RefusalClass`]:
//! refused at once, dropped after waiting, a tenant over its entitlement,
//! refused after the provider was called) and counts them by class, status
//! and reason ([`RefusalLine`]). The check fails when one (status, reason)
//! pair is shared by two classes, each holding at least `min_share` of the
//! pair's refusals (so a refusal that a loaded machine made slow does not
//! turn "at once" into "after waiting" on its own).
//!
//! A gateway that labels its refusals (the README's refusal table:
//! `x-gateway-reason` or the body's error `code`) passes by construction
//! as long as it labels each policy apart; one that answers every refusal
//! with the same bare 503 fails as soon as two policies fire.

use std::collections::BTreeMap;

use wire::RefusalClass;

use crate::checks::Evidence;
use crate::expect::RefusalsLegibleThreshold;
use crate::timeline::RefusalLine;
use crate::verdict::{count, percent, plural, Figure, Status, Verdict};

const ID: &str = crate::Check::RefusalsLegible.id();

/// The (status, reason) pair of a refusal as a person reads it.
fn pair_text(status: u16, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{status} {r}"),
        None => format!("{status} without a reason"),
    }
}

/// The class as the check's text names it.
fn class_text(c: RefusalClass) -> &'static str {
    match c {
        RefusalClass::AtAdmission => "refused at once",
        RefusalClass::AtDequeue => "dropped after waiting",
        RefusalClass::TenantLimited => "tenant over its entitlement",
        RefusalClass::AfterDispatch => "refused after the provider was called",
    }
}

/// Judges the run's refusal table.
pub(crate) fn refusals_legible(ev: &Evidence, th: &RefusalsLegibleThreshold) -> Verdict {
    of_lines(&ev.summary.refusals, th)
}

/// Judges refusal `lines` (every tenant's lines together).
fn of_lines(lines: &[RefusalLine], th: &RefusalsLegibleThreshold) -> Verdict {
    if !th.enabled {
        return Verdict::off(ID);
    }
    let mut pairs: BTreeMap<(u16, Option<&str>), BTreeMap<RefusalClass, u64>> = BTreeMap::new();
    for l in lines {
        *pairs
            .entry((l.status, l.reason.as_deref()))
            .or_default()
            .entry(l.class)
            .or_default() += l.count;
    }
    let total: u64 = lines.iter().map(|l| l.count).sum();
    if total == 0 {
        return Verdict::skipped(ID, "no refusals", "no data: no request was refused");
    }
    let predicted = format!(
        "each (status, reason) pair names one kind of refusal (a second kind counts from {} of the pair)",
        percent(th.min_share)
    );
    let mut shared = Vec::new();
    for ((status, reason), classes) in &pairs {
        let n: u64 = classes.values().sum();
        let kinds: Vec<String> = classes
            .iter()
            .filter(|(_, &c)| c as f64 >= th.min_share * n as f64)
            .map(|(&k, &c)| format!("{} {}", count(c), class_text(k)))
            .collect();
        if kinds.len() > 1 {
            shared.push(format!(
                "{}: {}",
                pair_text(*status, *reason),
                kinds.join(", ")
            ));
        }
    }
    let kinds: Vec<String> = pairs.keys().map(|(s, r)| pair_text(*s, *r)).collect();
    let figure = Figure::higher(
        shared.len() as f64,
        "answers",
        "answers standing for two kinds",
    );
    if shared.is_empty() {
        return Verdict::new(
            ID,
            Status::Pass,
            format!(
                "{} refusals in {}, none shared",
                count(total),
                plural(kinds.len() as u64, "distinct answer", "distinct answers")
            ),
            predicted,
            format!("{} refusals in {} distinct answers", count(total), kinds.len()),
            format!(
                "every kind of refusal has answers of its own ({}): a person reading one can tell which policy fired",
                kinds.join("; ")
            ),
        )
        .with(figure);
    }
    Verdict::new(
        ID,
        Status::Fail,
        format!(
            "{} of {} answers stand for two kinds",
            shared.len(),
            kinds.len()
        ),
        predicted,
        format!("{} of {} answers shared by two kinds", shared.len(), kinds.len()),
        format!(
            "one answer stands for two policies, so a person reading it cannot tell which fired: {}; give each policy its own status or reason (x-gateway-reason, or the body's error code)",
            shared.join("; ")
        ),
    )
    .with(figure)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(class: RefusalClass, status: u16, reason: Option<&str>, n: u64) -> RefusalLine {
        RefusalLine {
            class,
            status,
            reason: reason.map(str::to_owned),
            tenant: None,
            count: n,
        }
    }

    #[test]
    fn labelled_refusals_pass_and_bare_ones_shared_by_two_kinds_fail() {
        let th = RefusalsLegibleThreshold::default();
        let labelled = [
            line(RefusalClass::AtAdmission, 429, Some("queue_full"), 40),
            line(RefusalClass::AtDequeue, 503, Some("wait_expired"), 7),
            line(RefusalClass::TenantLimited, 429, Some("tenant_limited"), 12),
        ];
        let v = of_lines(&labelled, &th);
        assert_eq!(v.status, Status::Pass, "{}", v.detail);
        assert_eq!(v.observed, "59 refusals in 3 distinct answers");

        let bare = [
            line(RefusalClass::AtAdmission, 503, None, 300),
            line(RefusalClass::AfterDispatch, 503, None, 25),
            line(
                RefusalClass::AtAdmission,
                429,
                Some("rate_limit_exceeded"),
                3,
            ),
        ];
        let v = of_lines(&bare, &th);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.detail.contains(
                "503 without a reason: 300 refused at once, 25 refused after the provider was called"
            ),
            "{}",
            v.detail
        );
    }

    #[test]
    fn a_stray_slow_refusal_does_not_make_a_second_kind() {
        let th = RefusalsLegibleThreshold::default();
        let v = of_lines(
            &[
                line(RefusalClass::AtAdmission, 503, None, 1_000),
                line(RefusalClass::AtDequeue, 503, None, 3),
            ],
            &th,
        );
        assert_eq!(v.status, Status::Pass, "{}", v.detail);
    }

    #[test]
    fn nothing_refused_is_skipped_with_the_reason() {
        let v = of_lines(&[], &RefusalsLegibleThreshold::default());
        assert_eq!(v.status, Status::Skipped);
        assert_eq!(v.detail, "no data: no request was refused");
    }
}
