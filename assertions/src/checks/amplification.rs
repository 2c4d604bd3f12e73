//! `retry_amplification`: provider calls per gateway attempt, over the run
//! and in each scenario second.

use crate::expect::RetryAmplificationThreshold;
use crate::verdict::Verdict;

use super::Evidence;

/// `retry_amplification` (not judged yet: its figures are still to be kept).
pub(crate) fn retry_amplification(ev: &Evidence, th: &RetryAmplificationThreshold) -> Verdict {
    const ID: &str = crate::Check::RetryAmplification.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    Verdict::skipped(ID, "not judged", "not judged yet")
}
