//! `plan.json`: the plan's figures ([`Plan`]) at full and at rehearsal
//! scale, by segment ([`Segment`]), with the overload window the checks
//! are judged against ([`Overload`]), the waiting a healthy system holds
//! after it ([`HealthyWaiting`]), the knobs it suggests ([`Knobs`]), the
//! error budget it burns ([`ErrorBudget`]) and what the run sends
//! ([`Spend`]). The harness computes and writes it; the reports render it.
//! Every field has a default when read, so a directory written by an older
//! version still renders.

use serde::{Deserialize, Serialize};

use crate::Scale;

/// One stretch of time with one load phase and one set of provider settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Segment {
    /// Load phase name, and the provider's phase when one is active.
    pub name: String,
    /// Start, seconds from the start of the load.
    pub start_s: f64,
    /// Length in seconds.
    pub duration_s: f64,
    /// Mean offered rate, requests per minute.
    pub offered_per_min: f64,
    /// Provider capacity μ, requests per minute (`null`: unlimited).
    pub capacity_per_min: Option<f64>,
    /// Mean provider service time S, seconds.
    pub service_s: f64,
    /// Requests answered during the segment (by a gateway that never sheds).
    pub served: f64,
    /// Requests waiting at the segment's end.
    pub backlog_at_end: f64,
    /// Q* = μ·(D − S) in requests (`null` when μ is unlimited).
    pub queue_bound_requests: Option<f64>,
    /// L = λ·S: the calls in flight a gateway that never sheds holds at
    /// this phase's mean rate (Little's law), however far under capacity.
    pub in_flight: f64,
}

/// The plan at one scale.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// Per segment.
    pub phases: Vec<Segment>,
    /// Minutes to drain the peak backlog at the rate that follows it, if the
    /// queue were unbounded (`null`: it never drains, the load stays above μ).
    pub drain_minutes_unbounded: Option<f64>,
    /// Answers that would arrive after their caller left.
    pub late_answers: f64,
    /// Q* in requests, in the tightest overloaded segment.
    pub queue_bound_requests: Option<f64>,
    /// Q* in tokens.
    pub queue_bound_tokens: Option<f64>,
    /// Memory the unbounded backlog (and the calls in flight) would hold at
    /// its peak, at the scenario's prompt size.
    pub unbounded_backlog_bytes: f64,
    /// The peak backlog, requests.
    pub peak_backlog: f64,
    /// The share of the overloaded phases' arrivals over capacity: what a
    /// gateway that sheds the excess refuses (`null` without an overload).
    pub refused_share: Option<f64>,
    /// The share of all arrivals answered after their caller left, by a
    /// gateway that never sheds.
    pub late_share: f64,
    /// Tokens generated for callers who had left (late answers × tokens
    /// per request).
    pub wasted_tokens: f64,
    /// Seconds from the first phase whose in-flight calls outgrow the
    /// memory ceiling to the moment a gateway that never sheds reaches it
    /// (`null`: it never does, or no ceiling).
    pub memory_full_after_s: Option<f64>,
    /// Requests whose answer would come later than the SLO's latency
    /// (`null` without an SLO).
    pub slo_misses: Option<f64>,
    /// The backlog, drain and memory above are a gateway's that holds
    /// requests; a pass-through gateway (each request sent on at once)
    /// holds none of them: these are the arrivals the provider refuses at
    /// once past what it takes (its quota, a ceiling that rejects), which
    /// such a gateway relays.
    pub passthrough_refused: f64,
    /// The most requests that wait at the provider (a ceiling with a
    /// queue, a knee), held by a pass-through gateway as open calls; 0
    /// when the provider refuses what it cannot take.
    pub passthrough_peak_waiting: f64,
}

/// What the plan suggests for the gateway's own knobs (full scale).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Knobs {
    /// A concurrency limit below where the provider's curve bends.
    pub concurrency_limit: Option<f64>,
    /// Where it comes from, in words.
    pub limit_basis: String,
    /// The wait budget the queue bounds are for, seconds.
    pub wait_budget_s: f64,
    /// Where that comes from, in words.
    pub wait_budget_basis: String,
    /// Queue bound = drain at the limit (limit ÷ S) × wait budget, with the
    /// healthy provider's S.
    pub queue_healthy: Option<f64>,
    /// The same with the slowest phase's S.
    pub queue_slowest: Option<f64>,
    /// The bound in tokens: the token quota's rate × wait budget.
    pub queue_tokens: Option<f64>,
}

/// What the run sends, for a budget on a real account (at the scenario's
/// own scale: what `rehearse run` sends as written).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spend {
    /// Per phase (segment): its name, requests and tokens sent.
    pub phases: Vec<(String, f64, f64)>,
    /// Tokens each request is sent with: its prompt (4 characters a token,
    /// padding included) plus its `max_tokens`.
    pub tokens_per_request: f64,
    /// Requests in all (first attempts).
    pub requests: f64,
    /// Tokens in all.
    pub tokens: f64,
    /// Attempts per person at most (`[load.retry] max_attempts`; 1 without
    /// retries).
    pub max_attempts: u32,
    /// Tokens with every retry made: tokens × max_attempts.
    pub tokens_with_retries: f64,
}

/// What the event costs of the scenario's error budget (full scale).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBudget {
    /// The SLO's latency, seconds.
    pub latency_s: f64,
    /// Its objective (0.99: 99% of requests within the latency).
    pub objective: f64,
    /// Its window, seconds.
    pub window_s: f64,
    /// Requests the window holds at its mean rate.
    pub window_requests: f64,
    /// Misses the objective allows in the window.
    pub allowed: f64,
    /// The event's misses (requests later than the latency).
    pub misses: f64,
    /// misses ÷ allowed.
    pub burned_share: f64,
}

/// What the checks are judged against (derived from the plan at rehearsal scale).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Overload {
    /// Start of the first overloaded segment, seconds from the load's start.
    pub from_s: f64,
    /// End of the last overloaded segment.
    pub until_s: f64,
    /// μ in the tightest overloaded segment, requests per second.
    pub capacity_per_s: f64,
    /// S there.
    pub service_s: f64,
    /// Q* there.
    pub queue_bound: f64,
}

/// The waiting the arrivals after the overload leave in a healthy system,
/// at rehearsal scale: what `drain` holds the backlog to when the run has
/// fewer than 10 scenario seconds of baseline of its own (plus the same
/// margin, max(1, 10% of Q*)). Without an overload window, "after the
/// overload" is after the load's end: no arrivals.
///
/// ```
/// let w = wire::HealthyWaiting::ErlangC { servers: 8, arrivals_per_s: 4.0, service_s: 1.0, waiting: 0.4 };
/// assert_eq!(w.waiting(), Some(0.4));
/// assert_eq!(wire::HealthyWaiting::Saturated { servers: 2, arrivals_per_s: 4.0, service_s: 1.0 }.waiting(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum HealthyWaiting {
    /// Nothing arrives after the overload (the load stops with it): nothing
    /// is left to wait.
    NoArrivals,
    /// Evenly spaced arrivals below what the servers serve: none wait.
    Constant {
        /// The highest mean rate of a segment after the overload.
        arrivals_per_s: f64,
    },
    /// Poisson arrivals with no limit on the calls at once (no gateway
    /// limit, no provider ceiling): none wait.
    Unlimited {
        /// The highest mean rate of a segment after the overload.
        arrivals_per_s: f64,
    },
    /// Poisson arrivals below capacity: Erlang C's mean queue Lq for
    /// `servers` servers, each serving one call in `service_s` (the
    /// segment after the overload where it is largest).
    ErlangC {
        /// c: the reference gateway's concurrency limit, else the
        /// provider's ceiling (the lower of the two when both are known).
        servers: u32,
        /// λ of that segment.
        arrivals_per_s: f64,
        /// S of that segment.
        service_s: f64,
        /// Lq: requests waiting, on average.
        waiting: f64,
    },
    /// Arrivals at or over what the servers serve (λ·S ≥ c): a healthy
    /// system has no steady state to come back to.
    Saturated {
        /// c.
        servers: u32,
        /// λ of the first such segment.
        arrivals_per_s: f64,
        /// S there.
        service_s: f64,
    },
}

impl HealthyWaiting {
    /// The requests waiting on average; `None` when saturated.
    pub fn waiting(&self) -> Option<f64> {
        match *self {
            HealthyWaiting::NoArrivals
            | HealthyWaiting::Constant { .. }
            | HealthyWaiting::Unlimited { .. } => Some(0.0),
            HealthyWaiting::ErlangC { waiting, .. } => Some(waiting),
            HealthyWaiting::Saturated { .. } => None,
        }
    }
}

/// The whole plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// Scenario name.
    pub scenario: String,
    /// Mean tokens a request settles (prompt + completion).
    pub tokens_per_request: f64,
    /// Callers' mean patience D, seconds (full scale).
    pub patience_s: f64,
    /// Bytes held per waiting request.
    pub prompt_bytes: f64,
    /// Divides quotas and rates.
    pub quota_scale: f64,
    /// Divides durations, multiplies rates.
    pub time_scale: f64,
    /// At full scale (top-level fields of `--json`).
    #[serde(flatten)]
    pub full: Figures,
    /// At rehearsal scale.
    pub rehearsal: Figures,
    /// The overload window at rehearsal scale, if the scenario overloads.
    pub overload: Option<Overload>,
    /// The waiting a healthy system holds after the overload (or the
    /// load's end), at rehearsal scale; absent from plans written before it.
    pub drain_baseline: Option<HealthyWaiting>,
    /// The gateway's knobs the arithmetic suggests.
    pub knobs: Knobs,
    /// The error budget the event burns, when the scenario gives an SLO.
    pub error_budget: Option<ErrorBudget>,
    /// What the run sends, at its own scale.
    pub spend: Spend,
    /// With several providers: each one's phases (capacity and trouble),
    /// full scale; empty with one (a one-provider plan is as it was).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderPlan>,
    /// With several providers: each stretch of time a provider is in
    /// trouble, and what the others can serve meanwhile (what a failover
    /// gateway can serve while it is down), full scale.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub troubles: Vec<Trouble>,
    /// How the callers hold connections (`[load.clients]`) and what the
    /// target sees of them at the peak, at rehearsal scale; absent from
    /// plans written before it.
    pub clients: ClientsPlan,
    /// With a replayed log: what was read, and what playing it faster or
    /// multiplied does to the provider's per-minute quota (full scale).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayPlan>,
}

/// The callers as a population (`[load.clients]`), at rehearsal scale:
/// the model the run uses and what it implies for the target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientsPlan {
    /// `per caller` (a connection per caller waiting, opened when none is
    /// idle) or `pool` (the callers share `pool` connections).
    pub model: String,
    /// The most connections open at once: the pool, or the load
    /// generator's bound in the per-caller model (the peak's rate × the
    /// expected time in the system, or else the callers' mean patience,
    /// with room for bursts).
    pub limit: u64,
    /// New connections a second at most (`connect_rate`), if limited.
    pub connect_rate_per_s: Option<f64>,
    /// Per caller: the expected time of a call at the target, queue
    /// included, that bounds the callers' connections (the peak's rate ×
    /// this, with room), from the plan or `[load.clients] time_in_system`;
    /// `None` when the callers' patience bounds them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_in_system_s: Option<f64>,
    /// Callers waiting for an answer at once at the peak, by the fluid
    /// model (calls in flight plus the backlog of a gateway that never
    /// sheds, at most the arrivals of one patience).
    pub peak_callers: f64,
    /// The connections the target sees at the peak: the peak's callers, at
    /// most `limit`.
    pub peak_connections: f64,
}

impl ClientsPlan {
    /// [`ClientsPlan::time_in_system_s`] as a duration.
    pub fn time_in_system(&self) -> Option<std::time::Duration> {
        self.time_in_system_s
            .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
    }
}

/// A replayed log as read (log time), and the busiest minute of the run
/// were it played `times` over either way, against the provider's
/// per-minute quota.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplayPlan {
    /// The format read (`csv`, `mooncake`, ...).
    pub format: String,
    /// The unit numeric timestamps were read in.
    pub unit: String,
    /// Rows replayed.
    pub rows: usize,
    /// The trace's failed requests, and whether they were dropped (else
    /// among `rows`).
    pub failed: usize,
    pub failed_dropped: bool,
    /// From the first row to the last, seconds of log time.
    pub span_s: f64,
    /// Requests/s over the log, and in its busiest minute.
    pub mean_per_s: f64,
    pub peak_minute_per_s: f64,
    /// Prompt and completion sizes the log gives, p50 and p99 (tokens).
    pub prompt_tokens: Option<(u32, u32)>,
    pub max_tokens: Option<(u32, u32)>,
    /// As set in the scenario.
    pub speedup: f64,
    pub multiply: f64,
    /// How many times over the log is played: `speedup` × `multiply`.
    pub times: f64,
    /// The busiest minute of the run were the log played `times` over by
    /// `multiply` (copies at its own pace) and by `speedup` (compressed).
    pub peak_per_min_multiplied: f64,
    pub peak_per_min_sped_up: f64,
    /// The provider's requests-per-minute quota (none: unlimited).
    pub quota_per_min: Option<f64>,
}

/// One provider of several, phase by phase (full scale).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderPlan {
    /// Its name (`[[providers]] name`).
    pub name: String,
    /// Its timeline cut where it changes, over the load.
    pub phases: Vec<ProviderPhase>,
}

/// A stretch of one provider's timeline with one set of settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderPhase {
    /// Its timeline's phases active (joined by `+`), or `base`.
    pub phase: String,
    /// Start, seconds from the start of the load, and length.
    pub start_s: f64,
    pub duration_s: f64,
    /// What its quota serves, requests per minute (`null`: no quota).
    pub quota_per_min: Option<f64>,
    /// What its concurrency ceiling serves (ceiling ÷ S), requests per
    /// minute (`null`: no ceiling).
    pub ceiling_per_min: Option<f64>,
    /// Its capacity μ: the lesser of the two (and of a load curve's
    /// knee), requests per minute; 0 while it refuses every call
    /// (`null`: unlimited).
    pub capacity_per_min: Option<f64>,
    /// Its mean service time S, seconds.
    pub service_s: f64,
    /// Why this stretch is trouble, when it is (it slows at least 2x, it
    /// refuses or fails at least half its calls, its quota or ceiling
    /// serves at most half of what it did): what `failover` expects a
    /// gateway to route around.
    pub trouble: Option<String>,
}

/// A provider in trouble, and what the others serve meanwhile (full
/// scale): what `failover` is judged against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Trouble {
    /// The provider in trouble.
    pub provider: String,
    /// Why ([`ProviderPhase::trouble`]).
    pub why: String,
    /// Start, seconds from the start of the load, and length.
    pub start_s: f64,
    pub duration_s: f64,
    /// What the other providers not in trouble can serve meanwhile, in
    /// sum, requests per minute (`null`: unlimited).
    pub others_per_min: Option<f64>,
    /// The offered load meanwhile (its mean), requests per minute.
    pub offered_per_min: f64,
}

impl Trouble {
    /// What a failover gateway can serve meanwhile: the offered load, at
    /// most what the others can serve, requests per minute.
    pub fn servable_per_min(&self) -> f64 {
        self.others_per_min
            .map_or(self.offered_per_min, |o| o.min(self.offered_per_min))
    }
}

impl Figures {
    /// The figures at rehearsal scale, by the one rule of [`Scale`]:
    /// times ÷ time; rates × time ÷ quota; requests and bytes held ÷ quota.
    pub fn scaled(&self, scale: Scale) -> Figures {
        Figures {
            phases: self
                .phases
                .iter()
                .map(|g| Segment {
                    name: g.name.clone(),
                    start_s: scale.secs(g.start_s),
                    duration_s: scale.secs(g.duration_s),
                    offered_per_min: scale.rate(g.offered_per_min),
                    capacity_per_min: g.capacity_per_min.map(|c| scale.rate(c)),
                    service_s: scale.secs(g.service_s),
                    served: scale.depth(g.served),
                    backlog_at_end: scale.depth(g.backlog_at_end),
                    queue_bound_requests: g.queue_bound_requests.map(|q| scale.depth(q)),
                    in_flight: scale.depth(g.in_flight),
                })
                .collect(),
            drain_minutes_unbounded: self.drain_minutes_unbounded.map(|m| scale.secs(m)),
            late_answers: scale.depth(self.late_answers),
            queue_bound_requests: self.queue_bound_requests.map(|q| scale.depth(q)),
            queue_bound_tokens: self.queue_bound_tokens.map(|q| scale.depth(q)),
            unbounded_backlog_bytes: scale.depth(self.unbounded_backlog_bytes),
            peak_backlog: scale.depth(self.peak_backlog),
            refused_share: self.refused_share,
            late_share: self.late_share,
            wasted_tokens: scale.depth(self.wasted_tokens),
            memory_full_after_s: self.memory_full_after_s.map(|s| scale.secs(s)),
            slo_misses: self.slo_misses.map(|m| scale.depth(m)),
            passthrough_refused: scale.depth(self.passthrough_refused),
            passthrough_peak_waiting: scale.depth(self.passthrough_peak_waiting),
        }
    }
}
