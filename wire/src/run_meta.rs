//! `run.json`: what the harness keeps of a run ([`RunMeta`]), so that a
//! later `rehearse report DIR` judges it again from the directory alone.
//! The harness writes it; the judge and the reports read it. Every field
//! added later has a default when read, so a directory written by an older
//! version still loads.

use serde::{Deserialize, Serialize};

use crate::Expectations;

/// What `run.json` keeps of a run, so that `rehearse report` can judge it
/// again from the directory alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    /// Scenario name.
    pub scenario: String,
    /// The gateway, as a person would name it.
    pub gateway: String,
    /// The time scale the run was made at.
    pub time_scale: f64,
    /// The quota scale.
    pub quota_scale: f64,
    /// What the checks compare against.
    pub expectations: Expectations,
    /// True if the run was stopped before its end (Ctrl-C).
    pub partial: bool,
    /// The fake provider's base URL.
    pub provider_url: String,
    /// The gateway's base URL.
    pub target_url: String,
    /// Things a reader of the report should know (gateway exit, ...).
    pub notes: Vec<String>,
    /// The gateway's deaths and restarts.
    #[serde(default)]
    pub gateway_events: Vec<GatewayEvent>,
    /// Why the run's records cannot be trusted, found when they were read
    /// (damaged lines): any makes the verdict `invalid`. Set when judging,
    /// not kept in run.json.
    #[serde(default, skip_serializing)]
    pub untrusted: Vec<String>,
    /// The provider was external (`--provider external`): no provider
    /// records; judged from the client side and the gateway's gauges.
    #[serde(default)]
    pub provider_external: bool,
    /// Checks that may go unjudged in an external run (`--allow-unjudged`).
    #[serde(default)]
    pub allow_unjudged: Vec<String>,
    /// How often the gateway's gauges were read, seconds.
    #[serde(default)]
    pub gauge_period_s: f64,
    /// This machine's load-generator ceiling as the run read it (`rehearse
    /// calibrate --rig`'s file), when it had one for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rig: Option<RigSeen>,
}

/// The rig's ceiling as a run read it, beside the run's own peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RigSeen {
    /// The machine it was measured on.
    pub host: String,
    /// Its cores.
    pub cores: u64,
    /// When it was measured (RFC 3339).
    pub measured: String,
    /// How the run's callers held connections: `per caller` or `from a
    /// pool of N`.
    pub model: String,
    /// The ceiling of that model, arrivals per second.
    pub ceiling_per_s: f64,
    /// The run's peak arrival rate, per second, at its scale.
    pub peak_per_s: f64,
}

/// What happened to a spawned gateway during the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayEvent {
    /// `died` or `restarted`.
    pub kind: String,
    /// When, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// The exit status and its cause, or the restart's downtime.
    pub detail: String,
}
