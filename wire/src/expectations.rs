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
}
