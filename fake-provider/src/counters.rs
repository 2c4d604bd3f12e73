//! The provider's live counts, served by `/_fake/stats`. The record of
//! each call is [`wire::ProviderRecord`], stamped by a [`wire::Clock`]: the
//! load generator uses the same clock convention, so both sides join by id
//! and compare in time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use wire::{ProviderOutcome, ProviderRecord};

/// Live counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) hung_up: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) completion_tokens: AtomicU64,
    by_outcome: [AtomicU64; ProviderOutcome::ALL.len()],
}

impl Counters {
    pub(crate) fn finished(&self, r: &ProviderRecord) {
        self.by_outcome[r.outcome.index()].fetch_add(1, Ordering::Relaxed);
        if r.hung_up_us.is_some() {
            self.hung_up.fetch_add(1, Ordering::Relaxed);
        }
        if r.outcome != ProviderOutcome::BadRequest {
            self.prompt_tokens
                .fetch_add(r.prompt_tokens as u64, Ordering::Relaxed);
        }
        self.completion_tokens
            .fetch_add(r.completion_tokens as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, in_service: u32, phase: String) -> Stats {
        let by_outcome = ProviderOutcome::ALL
            .iter()
            .map(|o| {
                (
                    o.as_str().to_string(),
                    self.by_outcome[o.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        Stats {
            received: self.received.load(Ordering::Relaxed),
            in_service: in_service as u64,
            queued: self.queued.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            hung_up: self.hung_up.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            by_outcome,
            phase,
            // The record file's figures: the server fills them in.
            records_written: 0,
            records_dropped: 0,
        }
    }
}

/// Live counts, as served by `/_fake/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Calls received so far.
    pub received: u64,
    /// Calls in service now (past the ceiling).
    pub in_service: u64,
    /// Calls waiting in the provider's own queue now.
    pub queued: u64,
    /// Calls not yet finished (queued, in service, or hanging).
    pub in_flight: u64,
    /// Finished calls whose caller hung up early.
    pub hung_up: u64,
    /// Prompt tokens of finished calls.
    pub prompt_tokens: u64,
    /// Completion tokens produced.
    pub completion_tokens: u64,
    /// Finished calls by outcome.
    pub by_outcome: BTreeMap<String, u64>,
    /// The timeline phase in force.
    pub phase: String,
    /// Records written to the record file by this run (queued ones not
    /// yet): the position, in write order, its end is at.
    #[serde(default)]
    pub records_written: u64,
    /// Records not written: past the record file's size cap, or lost to a
    /// failed write.
    #[serde(default)]
    pub records_dropped: u64,
}
