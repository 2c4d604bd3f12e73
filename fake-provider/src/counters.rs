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
#[derive(Debug)]
pub struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) hung_up: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) completion_tokens: AtomicU64,
    by_outcome: [AtomicU64; ProviderOutcome::ALL.len()],
    /// Streamed calls' time from the request read to the answer's first
    /// byte (the first token): what a gateway's own first byte is compared
    /// with, live (`fake_provider_first_byte_seconds`).
    pub(crate) first_byte: Buckets,
    /// The run's models (its config's), whose vLLM series are kept one a
    /// model, in this order; calls naming another model are kept under
    /// [`OTHER_MODEL`], last.
    pub(crate) models: Vec<String>,
    pub(crate) by_model: Box<[ModelSeries]>,
}

/// The upper bounds, in seconds, of `fake_provider_first_byte_seconds`.
pub(crate) const FIRST_BYTE_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// vLLM's bounds for `vllm:time_to_first_token_seconds`.
pub(crate) const VLLM_TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// vLLM's bounds for `vllm:e2e_request_latency_seconds`.
pub(crate) const VLLM_E2E_BOUNDS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A fixed-bucket histogram counted with atomics when a call's record is
/// finished (not per token): one bucket add and one sum add a call.
#[derive(Debug)]
pub(crate) struct Buckets {
    bounds: &'static [f64],
    /// One a bound, and one past the last (`+Inf`).
    counts: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

impl Buckets {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Buckets {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    fn observe_us(&self, us: u64) {
        let secs = us as f64 / 1e6;
        let i = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The bounds.
    pub(crate) fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// The cumulative counts at each bound and past the last (`+Inf`),
    /// and the sum in seconds.
    pub(crate) fn cumulative(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let out = self
            .counts
            .iter()
            .map(|c| {
                total += c.load(Ordering::Relaxed);
                total
            })
            .collect();
        (out, self.sum_us.load(Ordering::Relaxed) as f64 / 1e6)
    }
}

/// What vLLM says of one model on its /metrics, for routers that read a
/// worker as they read vLLM: its calls running (in service) and waiting
/// (in the provider's queue) now, its streamed calls' time to first
/// token, and its answered calls' time from arrival to the last token.
#[derive(Debug)]
pub(crate) struct ModelSeries {
    pub(crate) running: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) ttft: Buckets,
    pub(crate) e2e: Buckets,
}

impl Default for ModelSeries {
    fn default() -> Self {
        ModelSeries {
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            ttft: Buckets::new(VLLM_TTFT_BOUNDS),
            e2e: Buckets::new(VLLM_E2E_BOUNDS),
        }
    }
}

/// The label of the series of calls naming a model the config does not
/// list.
pub(crate) const OTHER_MODEL: &str = "other";

impl Counters {
    /// A run's counts, for a config listing `models`.
    pub(crate) fn new(models: &[String]) -> Self {
        Counters {
            received: AtomicU64::new(0),
            hung_up: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
            by_outcome: Default::default(),
            first_byte: Buckets::new(FIRST_BYTE_BOUNDS),
            models: models.to_vec(),
            by_model: (0..=models.len()).map(|_| ModelSeries::default()).collect(),
        }
    }

    /// The index in `by_model` of `model`'s series.
    pub(crate) fn model_slot(&self, model: &str) -> usize {
        self.models
            .iter()
            .position(|m| m == model)
            .unwrap_or(self.models.len())
    }

    /// Each model's name (the last [`OTHER_MODEL`]) and series.
    pub(crate) fn model_series(&self) -> impl Iterator<Item = (&str, &ModelSeries)> {
        let names = self.models.iter().map(String::as_str).chain([OTHER_MODEL]);
        names.zip(self.by_model.iter())
    }

    pub(crate) fn finished(&self, r: &ProviderRecord, slot: usize) {
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
        let model = &self.by_model[slot.min(self.by_model.len() - 1)];
        if let (true, Some(first)) = (r.stream, r.first_byte_us) {
            let us = first.saturating_sub(r.received_us);
            self.first_byte.observe_us(us);
            model.ttft.observe_us(us);
        }
        if let (ProviderOutcome::Ok, None, Some(end)) = (r.outcome, r.hung_up_us, r.finished_us) {
            model.e2e.observe_us(end.saturating_sub(r.received_us));
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
