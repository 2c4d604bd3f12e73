//! What a call holds while it lives ([`CallGuard`]): its record, its
//! place under the ceiling, its quota. Each way a call ends by itself
//! writes the record with [`CallGuard::finish`]; dropping the guard
//! unfinished (the caller hung up, a down phase cut it) writes it too.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::HeaderMap;
use wire::headers::REQUEST_ID;
use wire::{Api, Dialect, ProviderOutcome, ProviderRecord};

use crate::ceiling::Permit;
use crate::run::Run;
use crate::shared::{lock, Shared};

/// The call's id by the one rule ([`wire::request_id`]), else `fake-N`.
pub(super) fn request_id(headers: &HeaderMap, body: &[u8], seq: u64) -> String {
    let header = headers.get(REQUEST_ID).map(HeaderValue::as_bytes);
    wire::request_id(header, body)
        .map_or_else(|| crate::api::prefixed_number("fake-", seq), str::to_string)
}

/// Everything a call holds while it lives. Its end gives back unused quota,
/// frees its place under the ceiling and writes its record: explicitly
/// ([`CallGuard::finish`]) where the call ends by itself, from `Drop`
/// where its task was dropped mid-call.
pub(super) struct CallGuard {
    pub(super) shared: Arc<Shared>,
    /// The run the call arrived in: its counts, quota and record file.
    pub(super) run: Arc<Run>,
    pub(super) record: ProviderRecord,
    /// When the call arrived (`record.received_us` on the monotonic clock).
    pub(super) received: Instant,
    pub(super) permit: Option<Permit>,
    pub(super) queued: bool,
    /// Its record is written: the call ended by itself ([`CallGuard::finish`]).
    pub(super) done: bool,
    /// The provider's cuts ([`crate::down`]) when the call arrived: one
    /// since, and the call did not end by itself, means a down phase cut
    /// it.
    pub(super) cut_epoch: u64,
    /// The index of its model's vLLM series in its run's counters
    /// ([`usize::MAX`] until admission looks it up).
    pub(super) model_slot: usize,
}

impl CallGuard {
    /// Its model's vLLM series (once admission has looked it up).
    pub(super) fn model(&self) -> &crate::counters::ModelSeries {
        &self.run.counters.by_model[self.model_slot]
    }

    /// Ends the call by itself with `outcome` and `status` and writes its
    /// record (finished now, unless the answer set when): each way a call
    /// ends calls it once, as the call ends, with the record complete.
    pub(super) fn finish(&mut self, outcome: ProviderOutcome, status: u16) {
        debug_assert!(!self.done, "a call ends once");
        self.record.outcome = outcome;
        self.record.status = status;
        self.done = true;
        if self.record.finished_us.is_none() {
            self.record.finished_us = Some(self.shared.clock.now_us());
        }
        self.close();
    }

    /// Gives back what the call held and writes its record.
    fn close(&mut self) {
        if self.queued {
            self.shared.gauges.queued.fetch_sub(1, Ordering::Relaxed);
            self.model().waiting.fetch_sub(1, Ordering::Relaxed);
        }
        if self.record.reserved_tokens > 0 {
            let used = if self.record.admitted_us.is_some() {
                self.record.prompt_tokens as u64 + self.record.completion_tokens as u64
            } else {
                0
            };
            let secs = self.shared.clock.secs();
            let mut q = lock(&self.run.quota);
            if self.record.admitted_us.is_some() {
                q.settle(self.record.reserved_tokens, used, secs);
            } else if !matches!(self.record.outcome, ProviderOutcome::QuotaExceeded) {
                q.cancel(self.record.reserved_tokens, secs);
            }
        }
        if self.permit.take().is_some() {
            self.model().running.fetch_sub(1, Ordering::Relaxed);
        }
        let slot = match self.model_slot {
            usize::MAX => self.run.counters.model_slot(&self.record.model),
            slot => slot,
        };
        self.run.counters.finished(&self.record, slot);
        let name = self.run.config.name.as_deref();
        // The run's id is the record file's to write (no copy a call).
        self.shared
            .records
            .push_named(self.run.number, &self.record, &self.run.id, name);
        // Out of flight only once its record is queued: whoever waits for
        // `in_flight == 0` and then syncs the records finds this one.
        self.shared.gauges.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The safety net for a task dropped mid-call, before the call ended by
/// itself: hyper drops a call's future (or its streamed body) when the
/// caller hangs up, and a down phase drops the calls it cuts. Every other
/// end is [`CallGuard::finish`], which writes the record; here an
/// unfinished call's record is written as hung up, or cut (`reset`) when
/// the provider went down under it.
impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let now = self.shared.clock.now_us();
        if self.shared.down.epoch() != self.cut_epoch {
            // Cut, not hung up (a call already hanging stays `hang`).
            if self.record.outcome != ProviderOutcome::Hang {
                self.record.outcome = ProviderOutcome::Reset;
            }
            self.record.status = 0;
        } else {
            self.record.hung_up_us = Some(now);
        }
        self.record.finished_us.get_or_insert(now);
        self.close();
    }
}

pub(super) fn empty_record() -> ProviderRecord {
    ProviderRecord {
        id: String::new(),
        run_id: String::new(),
        seq: 0,
        dialect: Dialect::OpenAi,
        api: Api::Chat,
        model: String::new(),
        stream: false,
        received_us: 0,
        admitted_us: None,
        first_byte_us: None,
        finished_us: None,
        hung_up_us: None,
        prompt_tokens: 0,
        max_tokens: None,
        completion_tokens: 0,
        reserved_tokens: 0,
        phase: String::new(),
        outcome: ProviderOutcome::Ok,
        status: 0,
        retry_after_s: None,
        retry_after_ms: None,
        // The provider's name is written into the line by the record file
        // (it is the provider's, not the call's: no copy per call).
        provider: None,
    }
}
