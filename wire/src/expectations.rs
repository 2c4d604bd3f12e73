//! What the checks compare against, as the engine says it to the judge:
//! the predictions of the scenario's plan placed on the run's clock. The
//! harness fills them ([`RunMeta::expectations`](crate::RunMeta), in
//! `run.json`); the assertions crate judges by them.

use serde::{Deserialize, Serialize};

use crate::HealthyWaiting;

/// The predictions of the scenario's plan, filled by the harness, at the scale
/// the run was made (durations in seconds, rates per second, times in
/// microseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectations {
    /// When the run started.
    pub start_us: u64,
    /// The last scheduled arrival.
    pub load_end_us: u64,
    /// The window `(from_us, to_us)` during which offered load exceeds
    /// capacity, or `None` if the scenario never overloads.
    pub overload: Option<(u64, u64)>,
    /// μ: requests per second the provider can serve in the overload window.
    pub capacity_per_s: f64,
    /// D: the callers' patience, in seconds.
    pub patience_s: f64,
    /// S: the expected provider time per call in the overload window, in
    /// seconds.
    pub service_s: f64,
    /// Q* = μ·(D − S): the predicted number of requests that may wait.
    pub queue_bound: f64,
    /// C: the calls in service at the provider at capacity.
    pub in_flight_at_provider: f64,
    /// G: the longest a request may wait inside a gateway that never sheds,
    /// in FIFO order (the plan's peak backlog ÷ its lowest capacity), in
    /// seconds at the run's scale; 0 without an overload. The judge waits
    /// this much longer before it takes an attempt whose caller left with
    /// no call made to have left the gateway: a naive gateway's orphans
    /// still wait in it.
    #[serde(default)]
    pub gateway_wait_s: f64,
    /// The provider's load-curve knee at the run's scale (calls in service
    /// past which every call slows), when the scenario names one: what
    /// `concurrency_below_knee` holds the calls in service to.
    #[serde(default)]
    pub knee: Option<f64>,
    /// The waiting the plan expects after the overload in a healthy system
    /// (`plan.json`'s `drain_baseline`): `drain`'s baseline when the run
    /// has fewer than 10 scenario seconds of its own. Absent from run
    /// directories written before it (`rehearse report` plans their saved
    /// scenario again).
    #[serde(default)]
    pub drain_baseline: Option<HealthyWaiting>,
    /// When the last trouble the plan knows of ends and what the provider
    /// serves after it: what `recovery` judges the rest of the load
    /// against (`None` without a trouble, and in run directories written
    /// before it: `recovery` then takes the overload's end and judges
    /// against the offered load alone).
    #[serde(default)]
    pub after_trouble: Option<AfterTrouble>,
    /// The gateway's memory budget, if the scenario gives one.
    pub memory_ceiling_bytes: Option<u64>,
    /// The wait after the load for the gateway's memory to settle
    /// (`memory_ceiling`'s `settle`), `(from_us, to_us)`: from the load's
    /// end with the backlog drained to the end of the wait, the memory
    /// sampled throughout. `None` when the run did not wait (the check
    /// off, the memory not sampled, a run stopped before its end, or a
    /// run directory written before it).
    #[serde(default)]
    pub memory_settle: Option<(u64, u64)>,
    /// The load generator's allowed 99th-percentile send lag.
    pub send_lag_bound_ms: f64,
    /// The load generator's measured 99th-percentile send lag.
    pub send_lag_p99_ms: f64,
    /// When the run was stopped before its end (Ctrl-C, SIGTERM, the
    /// spending guard), on the run's clock; `None` for a run that went its
    /// whole course, and in run directories written before it. The judge
    /// cuts the overload window and the load's end here, so that a partial
    /// run's checks are judged over the scenario time it covered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_us: Option<u64>,
}

/// The end of the last trouble of a run (the overload's end, or the end of
/// a provider's timeline phase the plan calls trouble: it slows at least
/// 2x, fails half its calls, or serves half what it did), and the plan's
/// capacity from then to the load's end: what a healthy system answers
/// once the trouble is over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AfterTrouble {
    /// When the last trouble ends, microseconds since the Unix epoch.
    pub from_us: u64,
    /// The plan's capacity μ after it (the lowest of its segments from
    /// then to the load's end), requests per second at the run's scale;
    /// `None`: unlimited.
    pub capacity_per_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run.json`'s expectations as a run directory written before
    /// `after_trouble` holds them still load, without it; a new one
    /// round-trips.
    #[test]
    fn expectations_without_after_trouble_still_load() {
        let old = serde_json::json!({
            "start_us": 1, "load_end_us": 2, "overload": [1, 2], "capacity_per_s": 8.0,
            "patience_s": 3.0, "service_s": 1.0, "queue_bound": 16.0,
            "in_flight_at_provider": 8.0, "memory_ceiling_bytes": null,
            "send_lag_bound_ms": 5.0, "send_lag_p99_ms": 1.0
        });
        let e: Expectations = serde_json::from_value(old).unwrap();
        assert_eq!(e.after_trouble, None);
        let new = Expectations {
            after_trouble: Some(AfterTrouble {
                from_us: 2,
                capacity_per_s: None,
            }),
            ..e
        };
        let back: Expectations =
            serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
    }
}
