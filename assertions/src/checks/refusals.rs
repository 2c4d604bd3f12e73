//! `retry_after`: whether the gateway's refusals say when to come back, and
//! whether that is true (each refusal's Retry-After against its drain).

use std::collections::BTreeSet;

use hdrhistogram::Histogram;

use crate::expect::RetryAfterThreshold;
use crate::tally::Tally;
use crate::verdict::{count, num, percent, secs, Figure, Status, Verdict};

use super::Evidence;

/// The share of honouring retries that must be admitted after the overload.
const HONOURED_ADMITTED_SHARE: f64 = 0.9;
/// The fewest retries that honoured Retry-After over which that share is
/// judged: over fewer, one retry a busy machine delivered a moment early
/// decides it (a flash promotion run with 1 such retry, refused, failed
/// a gateway whose other figures all held).
const HONOURED_MIN: u64 = 10;

/// Sheds needed before Retry-After must vary.
const SHEDS_BEFORE_VARYING: usize = 5;

/// `retry_after`: every gateway shed (at admission and stale) carries a
/// Retry-After; it varies; the median refusal's is within its bound of the
/// backlog drain time at that refusal, |Retry-After − drain| ≤ max(the
/// header's granularity, tolerance × drain) (at least half of them are);
/// and retries that honour it after the overload are admitted. Every
/// provider refusal the gateway relays (`upstream_refused`) carries a
/// Retry-After no shorter than the provider's, to its header's
/// granularity ([`crate::tally::relayed_retry_after`]): a gateway that
/// strips or shortens it sends its callers back into the provider's
/// window. The verdict says which refusals it judged: the gateway's own
/// sheds, the provider's relayed, or both; "never shed" only when there
/// was neither.
pub(crate) fn retry_after(ev: &Evidence, th: &RetryAfterThreshold) -> Verdict {
    const ID: &str = crate::Check::RetryAfter.id();
    if let Some(skipped) = ev.skip_before(ID, th.enabled) {
        return skipped;
    }
    let predicted = format!(
        "every shed (at admission or stale at dequeue; not a tenant's entitlement, not the provider's refusal) carries a Retry-After; the median refusal's is within max(its header's granularity: 1 ms for retry-after-ms, 1 s for retry-after; {} of the drain time) of the backlog drain time at it; at least {} distinct values; {} of the retries that honour it are admitted after the overload; every refusal of the provider's relayed (upstream_refused) carries a Retry-After no shorter than the provider's, to its header's granularity",
        percent(th.tolerance),
        th.min_distinct,
        percent(HONOURED_ADMITTED_SHARE),
    );
    let relayed = Relayed::gather(ev.tally);
    if ev.tally.sheds == 0 && relayed.refusals == 0 {
        if let Some(before) = ev.stop.and_then(|s| s.before_overload()) {
            return Verdict::skipped(
                ID,
                "no shed, stopped before the overload",
                format!("the gateway never shed, and {before}"),
            );
        }
        if ev.expect.overload.is_none() {
            return Verdict::skipped(
                ID,
                "no shed, no overload",
                "the gateway never shed and the scenario never overloads",
            );
        }
        return Verdict::new(
            ID,
            Status::Fail,
            "never shed, so no Retry-After",
            predicted,
            "no gateway shed",
            format!(
                "never shed, so no Retry-After was ever given: {} requests were queued at the peak",
                count(ev.peak_waiting())
            ),
        );
    }
    if ev.tally.sheds == 0 {
        return relayed.alone(predicted);
    }
    let mut found = RetryAfterFindings::gather(ev.tally);
    found.stopped = ev.stop.and_then(|s| s.before_overload_ended());
    let mut failures: Vec<(String, String)> = found
        .failures(th)
        .into_iter()
        .map(|(short, detail)| (format!("{OWN}: {short}"), detail))
        .collect();
    failures.extend(relayed.failure());
    let observed = format!("{}{}", found.observed(), relayed.observed());
    let note = old_tolerance_note(th.tolerance);
    let v = if failures.is_empty() {
        // Under 70 characters: with relayed refusals beside, no p90.
        let short = if relayed.refusals == 0 {
            format!(
                "{OWN}: median error {}, p90 {}; {} in bound",
                found.error_text(0.5),
                found.error_text(0.9),
                percent(found.within_share()),
            )
        } else {
            format!(
                "{OWN}: median error {}, {} in bound; relayed: {}/{} kept",
                found.error_text(0.5),
                percent(found.within_share()),
                count(relayed.kept),
                count(relayed.judged),
            )
        };
        Verdict::new(
            ID,
            Status::Pass,
            short,
            predicted,
            observed,
            format!(
                "all {} sheds carried a Retry-After ({} distinct values); {} of them within their bound of the backlog drain time (median error {}, p90 {}); {}{}{note}",
                count(found.sheds as u64),
                count(found.distinct.len() as u64),
                found.within_text(),
                found.error_text(0.5),
                found.error_text(0.9),
                found.honour_note(),
                relayed.kept_note(),
            ),
        )
    } else {
        let (shorts, details): (Vec<String>, Vec<String>) = failures.into_iter().unzip();
        let mut short = shorts[0].clone();
        if shorts.len() > 1 {
            short.push_str(&format!(" (+{} more)", shorts.len() - 1));
        }
        Verdict::new(
            ID,
            Status::Fail,
            short,
            predicted,
            observed,
            format!("{}{note}", details.join("; ")),
        )
    };
    match found.median_error_s() {
        Some(error) => v.with(Figure::higher(error, "s", "median Retry-After error")),
        None => v,
    }
}

/// What the checklist's line calls the gateway's own sheds, and the
/// provider's refusals it relayed: the line says which it judged.
const OWN: &str = "own sheds";
const RELAYED: &str = "relayed refusals";

/// The provider's refusals the gateway relayed, by what became of the
/// provider's Retry-After.
struct Relayed {
    /// Refusals relayed (`upstream_refused`).
    refusals: u64,
    /// Those whose provider refusal announced a wait: kept, stripped or
    /// shortened.
    judged: u64,
    kept: u64,
    stripped: u64,
    shortened: u64,
}

impl Relayed {
    fn gather(t: &Tally) -> Self {
        Relayed {
            refusals: t.relayed,
            judged: t.relayed_judged(),
            kept: t.relayed_kept,
            stripped: t.relayed_stripped,
            shortened: t.relayed_shortened,
        }
    }

    /// Relayed refusals with no wait of the provider's to keep.
    fn unjudged(&self) -> u64 {
        self.refusals - self.judged
    }

    /// How the relayed refusals fall short, in a few words and in a
    /// sentence; `None` when every wait was kept.
    fn failure(&self) -> Option<(String, String)> {
        let lost = self.stripped + self.shortened;
        if lost == 0 {
            return None;
        }
        let short = format!(
            "{RELAYED}: {} Retry-Afters stripped, {} shortened, of {}",
            count(self.stripped),
            count(self.shortened),
            count(self.judged)
        );
        let detail = format!(
            "of the {} refusals of the provider's the gateway relayed with the provider's Retry-After, {} reached the client without one and {} with a shorter one: a client told nothing, or too little, comes back inside the provider's window and is refused again; pass the provider's Retry-After on",
            count(self.judged),
            count(self.stripped),
            count(self.shortened)
        );
        Some((short, detail))
    }

    /// The sentence that ends a passing verdict's detail about the relayed
    /// refusals, or nothing without them.
    fn kept_note(&self) -> String {
        if self.refusals == 0 {
            return String::new();
        }
        let mut note = format!(
            "; it relayed {} refusals of the provider's and kept the provider's Retry-After on all {} that carried one",
            count(self.refusals),
            count(self.judged)
        );
        if self.unjudged() > 0 {
            note.push_str(&format!(
                " ({} carried none of the provider's to keep)",
                count(self.unjudged())
            ));
        }
        note
    }

    /// What `observed` adds about the relayed refusals.
    fn observed(&self) -> String {
        if self.refusals == 0 {
            return String::new();
        }
        format!(
            "; {} provider refusals relayed: {} kept the provider's Retry-After, {} stripped it, {} shortened it, {} had none of the provider's to keep",
            count(self.refusals),
            count(self.kept),
            count(self.stripped),
            count(self.shortened),
            count(self.unjudged())
        )
    }

    /// The verdict of a gateway that never shed on its own but relayed the
    /// provider's refusals: judged by those alone.
    fn alone(&self, predicted: String) -> Verdict {
        const ID: &str = crate::Check::RetryAfter.id();
        let observed = format!("no gateway shed{}", self.observed());
        if self.judged == 0 {
            return Verdict::skipped(
                ID,
                &format!("{RELAYED}: none with the provider's Retry-After"),
                format!(
                    "the gateway never shed on its own; it relayed {} refusals of the provider's, none of which carried a Retry-After of the provider's to keep",
                    count(self.refusals)
                ),
            );
        }
        match self.failure() {
            Some((short, detail)) => Verdict::new(
                ID,
                Status::Fail,
                short,
                predicted,
                observed,
                format!("the gateway never shed on its own; {detail}"),
            ),
            None => Verdict::new(
                ID,
                Status::Pass,
                format!(
                    "{RELAYED}: the provider's Retry-After kept on {} of {}",
                    count(self.kept),
                    count(self.judged)
                ),
                predicted,
                observed,
                format!("the gateway never shed on its own{}", self.kept_note()),
            ),
        }
    }
}

/// What a `tolerance` of its old meaning says now: before, it was the
/// median relative error allowed over all refusals (1.0, 100%, by
/// default); now it is each refusal's own allowed error as a share of its
/// drain time (0.25 by default). A value of 1 or more was likely written
/// for the old meaning (a `--set` on an old run): said in the verdict.
fn old_tolerance_note(tolerance: f64) -> String {
    if tolerance >= 1.0 {
        format!(
            " (tolerance {}: it is now each refusal's allowed error as a share of its drain time, 0.25 by default, no longer the median relative error over all refusals it was, 1.0 by default; a value of 1 lets a Retry-After of twice the drain time pass)",
            num(tolerance, 2)
        )
    } else {
        String::new()
    }
}

/// What a run shows about the Retry-After of the gateway's sheds, for
/// [`retry_after`] to judge.
struct RetryAfterFindings {
    /// Gateway sheds.
    sheds: usize,
    /// Sheds without a Retry-After.
    missing: usize,
    /// The distinct Retry-After values given, in milliseconds.
    distinct: BTreeSet<u64>,
    /// Each Retry-After's error against the drain time at its refusal, in
    /// microseconds; empty when no shed carried one.
    errors: Histogram<u64>,
    /// Refusals with a Retry-After, and those within their bound.
    judged: u64,
    within: u64,
    /// Retries that honoured a Retry-After after the overload, and how many
    /// of them were admitted (see [`crate::tally::honoured`]).
    honouring: u64,
    admitted: u64,
    /// Why no retry after the overload was seen: the run stopped before
    /// it ended (`crate::covered`).
    stopped: Option<String>,
}

impl RetryAfterFindings {
    /// What the tally shows of the gateway's sheds and the retries after
    /// them.
    fn gather(t: &Tally) -> Self {
        RetryAfterFindings {
            sheds: t.sheds as usize,
            missing: t.sheds_without_retry_after as usize,
            distinct: t.retry_after_values.clone(),
            errors: t.retry_after_errors.clone(),
            judged: t.retry_after_errors.len(),
            within: t.retry_after_within,
            honouring: t.honouring,
            admitted: t.honoured_admitted,
            stopped: None,
        }
    }

    /// Returns true if and only if the median refusal is within its bound:
    /// at least half of those with a Retry-After are (none to judge: true).
    fn median_within(&self) -> bool {
        self.within.saturating_mul(2) >= self.judged
    }

    /// The share of refusals with a Retry-After within their bound.
    fn within_share(&self) -> f64 {
        if self.judged == 0 {
            1.0
        } else {
            self.within as f64 / self.judged as f64
        }
    }

    /// `112 of 157`.
    fn within_text(&self) -> String {
        format!("{} of {}", count(self.within), count(self.judged))
    }

    /// The median error, in seconds (none when no shed carried a
    /// Retry-After).
    fn median_error_s(&self) -> Option<f64> {
        (!self.errors.is_empty()).then(|| self.errors.value_at_quantile(0.5) as f64 / 1e6)
    }

    /// The error at quantile `q`, in seconds, or `n/a`.
    fn error_text(&self, q: f64) -> String {
        if self.errors.is_empty() {
            return "n/a".to_string();
        }
        let us = self.errors.value_at_quantile(q) as f64;
        // Under a second, to the millisecond: a 1 ms header's errors.
        if us < 1e6 {
            format!("{} s", num(us / 1e6, 3))
        } else {
            secs(us / 1e6)
        }
    }

    /// Every way the findings fall short, in the order the prediction
    /// names them, in a few words and in a sentence; empty when the check
    /// passes.
    fn failures(&self, th: &RetryAfterThreshold) -> Vec<(String, String)> {
        let mut failures = Vec::new();
        if self.missing > 0 {
            let short = format!(
                "{} of {} without Retry-After",
                count(self.missing as u64),
                count(self.sheds as u64)
            );
            failures.push((
                short,
                format!(
                    "{} of {} sheds carried no Retry-After",
                    count(self.missing as u64),
                    count(self.sheds as u64)
                ),
            ));
        }
        if self.sheds >= SHEDS_BEFORE_VARYING && self.distinct.len() < th.min_distinct {
            let values = self
                .distinct
                .iter()
                .map(|&v| format!("{} ms", count(v)))
                .collect::<Vec<_>>()
                .join(", ");
            let short = format!(
                "{} distinct values (bound at least {})",
                count(self.distinct.len() as u64),
                th.min_distinct
            );
            failures.push((
                short,
                format!(
                    "Retry-After never varies: {} sheds said {} whatever the backlog",
                    count(self.sheds as u64),
                    if values.is_empty() {
                        "nothing".to_string()
                    } else {
                        values
                    }
                ),
            ));
        }
        if !self.median_within() {
            let short = format!(
                "median error {}, p90 {}; {} in bound",
                self.error_text(0.5),
                self.error_text(0.9),
                percent(self.within_share())
            );
            failures.push((short, format!(
                "Retry-After is off the backlog drain time by {} at the median (p90 {}): only {} refusals were within max(their header's granularity, {} of the drain time), under half",
                self.error_text(0.5),
                self.error_text(0.9),
                self.within_text(),
                percent(th.tolerance)
            )));
        }
        if self.honouring >= HONOURED_MIN
            && (self.admitted as f64 / self.honouring as f64) < HONOURED_ADMITTED_SHARE
        {
            let short = format!(
                "{} of {} honouring retries admitted (bound {})",
                count(self.admitted),
                count(self.honouring),
                percent(HONOURED_ADMITTED_SHARE)
            );
            failures.push((short, format!("only {}", self.honour_note())));
        }
        failures
    }

    fn observed(&self) -> String {
        format!(
            "{} sheds, {} without Retry-After, {} distinct values, errors against the drain time median {} and p90 {}, {} within their bound, {}/{} honouring retries admitted",
            count(self.sheds as u64),
            count(self.missing as u64),
            count(self.distinct.len() as u64),
            self.error_text(0.5),
            self.error_text(0.9),
            self.within_text(),
            count(self.admitted),
            count(self.honouring),
        )
    }

    /// How the retries that honoured Retry-After fared, or why that was
    /// not judged.
    fn honour_note(&self) -> String {
        if let (0, Some(stopped)) = (self.honouring, &self.stopped) {
            format!("{stopped}, so no retry after it was seen and their admission was not judged")
        } else if self.honouring == 0 {
            "no retry honoured a Retry-After after the overload (retry policy none?), so admission was not judged".to_string()
        } else if self.honouring < HONOURED_MIN {
            format!(
                "{} of {} retries that honoured Retry-After after the overload were admitted (fewer than {HONOURED_MIN}: too few to judge the share)",
                count(self.admitted),
                count(self.honouring)
            )
        } else {
            format!(
                "{} of {} retries that honoured Retry-After after the overload were admitted",
                count(self.admitted),
                count(self.honouring)
            )
        }
    }
}
