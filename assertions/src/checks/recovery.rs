//! `recovery`: once the last trouble has ended and drained, the answered
//! share of what was offered against what a healthy system answers there.

use crate::expect::RecoveryThreshold;
use crate::verdict::Verdict;

use super::Evidence;

/// `recovery` (not judged yet: its figures are still to be kept).
pub(crate) fn recovery(ev: &Evidence, th: &RecoveryThreshold) -> Verdict {
    const ID: &str = crate::Check::Recovery.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    Verdict::skipped(ID, "not judged", "not judged yet")
}
