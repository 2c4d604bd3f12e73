//! `rehearse calibrate`'s documents: `calibrate.json` (the sweep level by
//! level, the knee under `knee`, the gateway knobs it suggests) and
//! `calibrate.html` (the latency and throughput curves with the knee
//! marked, PNG copies beside it).

use serde::{Deserialize, Serialize};

/// The name of the sweep's JSON document in its directory.
pub const CALIBRATE_JSON: &str = "calibrate.json";
/// The name of its page.
pub const CALIBRATE_HTML: &str = "calibrate.html";

/// One concurrency level of a sweep: N workers sending back to back for a
/// step, measured after a warm-up.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CalibrationLevel {
    /// Workers (calls in flight at once, closed loop).
    pub concurrency: u64,
    /// Seconds measured (the step after its warm-up).
    pub measured_s: f64,
    /// Answers (2xx) that ended in the measured span.
    pub ok: u64,
    /// Refusals (429, 503, 529) that ended in it.
    pub refused: u64,
    /// Other error statuses and transport errors.
    pub errors: u64,
    /// Calls that passed the request timeout.
    pub timeouts: u64,
    /// Answers per second.
    pub throughput_per_s: f64,
    /// Latency of the answers, milliseconds (`None`: no answer).
    pub p50_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
}

impl CalibrationLevel {
    /// Calls that ended in the measured span, however.
    pub fn ended(&self) -> u64 {
        self.ok + self.refused + self.errors + self.timeouts
    }

    /// The share of them that were not answers.
    pub fn failed_share(&self) -> f64 {
        let n = self.ended();
        if n == 0 {
            0.0
        } else {
            (n - self.ok) as f64 / n as f64
        }
    }
}

/// A whole sweep and what it found.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Calibration {
    /// The base URL driven.
    pub target: String,
    /// The request sent, in words (dialect, tokens, stream).
    pub request: String,
    /// Seconds per level.
    pub step_s: f64,
    /// The levels, in the order run.
    pub levels: Vec<CalibrationLevel>,
    /// The knee: the calls in flight past which throughput stops growing
    /// and latency grows instead; `None` when the sweep found none.
    pub knee: Option<f64>,
    /// How the knee was found, in words.
    pub method: String,
    /// The flat part's latency (the lowest median below the knee), ms.
    pub flat_latency_ms: Option<f64>,
    /// The throughput plateau (the highest measured), answers per second.
    pub plateau_per_s: Option<f64>,
    /// A concurrency limit below the knee, for the gateway.
    pub recommended_limit: Option<u64>,
    /// The wait budget the queue bounds are for, seconds.
    pub wait_budget_s: f64,
    /// Queue bound = drain rate at the recommended limit × wait budget,
    /// healthy.
    pub queue_bound_healthy: Option<u64>,
    /// The same with every call `degraded_factor` times slower.
    pub queue_bound_degraded: Option<u64>,
    /// The degradation the second bound is for (a brownout's 7x).
    pub degraded_factor: f64,
    /// Why the sweep stopped before its last level, when it did.
    pub stopped: Option<String>,
    /// What it concluded, in one line.
    pub summary: String,
}
