//! What the provider records of each call, and its live counts.
//!
//! Times are integer microseconds since the Unix epoch, taken from one
//! wall-clock anchor plus a monotonic clock so they never go backwards; the
//! load generator uses the same convention, so both sides join by id and
//! compare in time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::dialect::Dialect;

/// How a call ended, as the provider decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Answered (or being answered, if the caller hung up first).
    Ok,
    /// Refused by the quota: 429 with retry-after.
    QuotaExceeded,
    /// Refused at the concurrency ceiling: 429 (OpenAI) or 529 (Anthropic).
    CapacityRejected,
    /// An injected error status.
    ErrorStatus,
    /// An injected connection reset before any answer.
    Reset,
    /// An injected hang: no answer at all.
    Hang,
    /// An injected cut in the middle of a stream.
    StreamCut,
    /// An injected malformed body.
    Malformed,
    /// The request was refused as invalid (400, 404, 413).
    BadRequest,
}

impl Outcome {
    /// All outcomes, for counters.
    pub const ALL: [Outcome; 9] = [
        Outcome::Ok,
        Outcome::QuotaExceeded,
        Outcome::CapacityRejected,
        Outcome::ErrorStatus,
        Outcome::Reset,
        Outcome::Hang,
        Outcome::StreamCut,
        Outcome::Malformed,
        Outcome::BadRequest,
    ];

    /// The snake_case name used in records and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::QuotaExceeded => "quota_exceeded",
            Outcome::CapacityRejected => "capacity_rejected",
            Outcome::ErrorStatus => "error_status",
            Outcome::Reset => "reset",
            Outcome::Hang => "hang",
            Outcome::StreamCut => "stream_cut",
            Outcome::Malformed => "malformed",
            Outcome::BadRequest => "bad_request",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// One call as the provider saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderRecord {
    /// From `x-request-id`, else a `[rehearse:id=…]` marker in the prompt,
    /// else generated (`fake-N`).
    pub id: String,
    /// Arrival order at this provider, from 0.
    pub seq: u64,
    /// Which API.
    pub dialect: Dialect,
    /// The model named.
    pub model: String,
    /// Streamed or not.
    pub stream: bool,
    /// The request was fully read.
    pub received_us: u64,
    /// The call got past the concurrency ceiling (its own queue).
    pub admitted_us: Option<u64>,
    /// The first byte of the answer (status line) went out.
    pub first_byte_us: Option<u64>,
    /// The answer was complete, or the call ended otherwise.
    pub finished_us: Option<u64>,
    /// The caller hung up before the answer was complete.
    pub hung_up_us: Option<u64>,
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// The caller's max_tokens, if any.
    pub max_tokens: Option<u32>,
    /// Completion tokens produced (sent, for a stream cut short).
    pub completion_tokens: u32,
    /// Tokens reserved against the quota at admission.
    pub reserved_tokens: u64,
    /// Active timeline phases joined by `+`, or `base`.
    pub phase: String,
    /// How the call ended.
    pub outcome: Outcome,
    /// The HTTP status answered; 0 if none (reset, hang).
    pub status: u16,
}

/// The provider's clock: monotonic, expressed as Unix microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    anchor_us: u64,
}

impl Clock {
    /// A clock anchored now.
    pub fn new() -> Self {
        let anchor_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Clock {
            start: Instant::now(),
            anchor_us,
        }
    }

    /// The instant the clock started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Microseconds since the Unix epoch for `at`.
    pub fn us_at(&self, at: Instant) -> u64 {
        self.anchor_us + at.saturating_duration_since(self.start).as_micros() as u64
    }

    /// Microseconds since the Unix epoch, now.
    pub fn now_us(&self) -> u64 {
        self.us_at(Instant::now())
    }

    /// Seconds since the clock started.
    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Live counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) hung_up: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) completion_tokens: AtomicU64,
    by_outcome: [AtomicU64; 9],
}

impl Counters {
    pub(crate) fn finished(&self, r: &ProviderRecord) {
        self.by_outcome[r.outcome.index()].fetch_add(1, Ordering::Relaxed);
        if r.hung_up_us.is_some() {
            self.hung_up.fetch_add(1, Ordering::Relaxed);
        }
        if r.outcome != Outcome::BadRequest {
            self.prompt_tokens
                .fetch_add(r.prompt_tokens as u64, Ordering::Relaxed);
        }
        self.completion_tokens
            .fetch_add(r.completion_tokens as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, in_service: u32, phase: String) -> Stats {
        let by_outcome = Outcome::ALL
            .iter()
            .map(|o| {
                (
                    o.name().to_string(),
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
}
