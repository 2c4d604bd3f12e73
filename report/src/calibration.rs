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

impl Calibration {
    /// The levels by concurrency, lowest first (a sweep refined near its
    /// knee runs them out of order); levels of one concurrency keep the
    /// order run.
    pub fn levels_by_concurrency(&self) -> Vec<&CalibrationLevel> {
        let mut levels: Vec<&CalibrationLevel> = self.levels.iter().collect();
        levels.sort_by_key(|l| l.concurrency);
        levels
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One level of a target whose latency is flat at 50 ms up to 32 calls
    /// in service and grows as n ÷ 32 past them: throughput 20/s a call up
    /// to the knee, 640/s after it.
    pub(crate) fn level(n: u64) -> CalibrationLevel {
        let p50 = 50.0 * (n as f64 / 32.0).max(1.0);
        let throughput = n as f64 / (p50 / 1000.0);
        let ok = (throughput * 2.0).round() as u64;
        CalibrationLevel {
            concurrency: n,
            measured_s: 2.0,
            ok,
            refused: if n > 48 { ok / 50 } else { 0 },
            errors: u64::from(n == 64),
            timeouts: 0,
            throughput_per_s: throughput,
            p50_ms: Some(p50),
            p90_ms: Some(p50 * 1.1),
            p99_ms: Some(p50 * 1.3),
        }
    }

    /// A sweep of that target, refined near its knee (levels out of order).
    pub(crate) fn knee_at_32() -> Calibration {
        Calibration {
            target: "http://127.0.0.1:8080".into(),
            request: "openai, 16 prompt + 64 completion tokens, not streamed".into(),
            step_s: 2.0,
            levels: [1, 2, 4, 8, 16, 32, 64, 24, 40, 48]
                .into_iter()
                .map(level)
                .collect(),
            knee: Some(32.0),
            method: "where the throughput added per call falls below a quarter of \
                     the first level's, refined between 16 and 64"
                .into(),
            flat_latency_ms: Some(50.0),
            plateau_per_s: Some(640.0),
            recommended_limit: Some(24),
            wait_budget_s: 2.0,
            queue_bound_healthy: Some(960),
            queue_bound_degraded: Some(137),
            degraded_factor: 7.0,
            stopped: None,
            summary: "knee ≈ 32 calls in flight (plateau 640/s, 50 ms flat): \
                      limit the gateway to 24"
                .into(),
        }
    }

    #[test]
    fn the_model_bends_at_32() {
        let c = knee_at_32();
        assert_eq!(level(16).throughput_per_s, 320.0);
        assert_eq!(level(32).throughput_per_s, 640.0);
        assert_eq!(level(64).throughput_per_s, 640.0);
        assert_eq!(level(64).p50_ms, Some(100.0));
        let sorted: Vec<u64> = c
            .levels_by_concurrency()
            .iter()
            .map(|l| l.concurrency)
            .collect();
        assert_eq!(sorted, [1, 2, 4, 8, 16, 24, 32, 40, 48, 64]);
        assert!(level(64).failed_share() > 0.0);
        assert_eq!(level(8).failed_share(), 0.0);
    }
}
