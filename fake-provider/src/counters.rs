//! The provider's live counts, served by `/_fake/stats`: a run's counts
//! ([`Counters`], new at each reset) and the process's gauges ([`Gauges`],
//! calls open now, whatever their run). The record of each call is
//! [`wire::ProviderRecord`], stamped by a [`wire::Clock`]: the load
//! generator uses the same clock convention, so both sides join by id and
//! compare in time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use wire::{ProviderOutcome, ProviderRecord};

/// One run's counts: a reset starts the next run's at zero, while calls of
/// the run before still count in theirs.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) hung_up: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) completion_tokens: AtomicU64,
    by_outcome: [AtomicU64; ProviderOutcome::ALL.len()],
    /// Streamed calls' time from the request read to the answer's first
    /// byte (the first token): what a gateway's own first byte is compared
    /// with, live (`fake_provider_first_byte_seconds`).
    pub(crate) first_byte: FirstByte,
}

/// The upper bounds, in seconds, of [`FirstByte`]'s buckets.
pub(crate) const FIRST_BYTE_BOUNDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A fixed-bucket histogram counted with atomics when a call's record is
/// finished (not per token): one bucket add and one sum add a streamed
/// call.
#[derive(Debug, Default)]
pub(crate) struct FirstByte {
    counts: [AtomicU64; FIRST_BYTE_BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl FirstByte {
    fn observe_us(&self, us: u64) {
        let secs = us as f64 / 1e6;
        let i = FIRST_BYTE_BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(FIRST_BYTE_BOUNDS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The cumulative counts at each bound and past the last (`+Inf`),
    /// and the sum in seconds.
    pub(crate) fn cumulative(&self) -> ([u64; FIRST_BYTE_BOUNDS.len() + 1], f64) {
        let mut out = [0; FIRST_BYTE_BOUNDS.len() + 1];
        let mut total = 0;
        for (o, c) in out.iter_mut().zip(&self.counts) {
            total += c.load(Ordering::Relaxed);
            *o = total;
        }
        (out, self.sum_us.load(Ordering::Relaxed) as f64 / 1e6)
    }
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
        if let (true, Some(first)) = (r.stream, r.first_byte_us) {
            self.first_byte
                .observe_us(first.saturating_sub(r.received_us));
        }
    }

    pub(crate) fn snapshot(&self, gauges: &Gauges, in_service: u32, phase: String) -> Stats {
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
            queued: gauges.queued.load(Ordering::Relaxed),
            in_flight: gauges.in_flight.load(Ordering::Relaxed),
            hung_up: self.hung_up.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            by_outcome,
            phase,
            // The record file's figures and the run: the server fills
            // them in.
            records_written: 0,
            records_dropped: 0,
            run_id: String::new(),
        }
    }
}

/// Calls open now, of any run: a reset does not end them.
#[derive(Debug, Default)]
pub struct Gauges {
    pub(crate) queued: AtomicU64,
    pub(crate) in_flight: AtomicU64,
}

/// Live counts, as served by `/_fake/stats`: the counts are the current
/// run's (since the last reset), the gauges (`in_service`, `queued`,
/// `in_flight`) every call open now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Calls received in this run.
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
    /// The current run (`POST /_fake/reset` starts one).
    #[serde(default)]
    pub run_id: String,
}
