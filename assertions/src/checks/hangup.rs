//! `cancel_on_hangup`: of the provider calls in service when their caller
//! gave up, the share the gateway hung up on promptly; the tokens made for
//! nobody.

use crate::expect::CancelOnHangupThreshold;
use crate::verdict::Verdict;

use super::Evidence;

/// `cancel_on_hangup` (not judged yet: its figures are still to be kept).
pub(crate) fn cancel_on_hangup(ev: &Evidence, th: &CancelOnHangupThreshold) -> Verdict {
    const ID: &str = crate::Check::CancelOnHangup.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    Verdict::skipped(ID, "not judged", "not judged yet")
}
