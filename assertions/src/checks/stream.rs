//! `stream_intact`: a streamed answer reaches the client as it is made:
//! the time the gateway added to its first token, and whether it came in
//! pieces or in one lump.

use crate::expect::StreamIntactThreshold;
use crate::verdict::Verdict;

use super::Evidence;

/// `stream_intact` (not judged yet: its figures are still to be kept).
pub(crate) fn stream_intact(ev: &Evidence, th: &StreamIntactThreshold) -> Verdict {
    const ID: &str = crate::Check::StreamIntact.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    Verdict::skipped(ID, "not judged", "not judged yet")
}
