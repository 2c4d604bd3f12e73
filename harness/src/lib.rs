//! The rehearsal engine: from a scenario file to a judged run directory.
//!
//! A [`Scenario`] is read and validated once (every field located by file,
//! line and name when wrong), then turned into a [`Rehearsal`]: each typed
//! config at the run's [`Scale`] by the one rule of [`wire::Scale`]. The
//! plan ([`plan()`]) is the arithmetic a person would otherwise do by hand.
//! [`run()`] makes one rehearsal in named steps and judges it;
//! [`judge_dir`] judges a saved run directory again (`rehearse report`).
//!
//! The rooms:
//! - `scenario`: the scenario file, its `--set` edits and validation (read
//!   and parsed once; a run directory's saved scenario once when judged);
//! - `checklist`: the `[checklist]` values held to their ranges (a share
//!   from 0 to 1, a ratio of at least 1), by each field's name;
//! - `plan`: capacity, backlog, drain, late answers and Q*, by phase;
//!   its `clients`: the callers' connection model and the connections the
//!   target sees at the peak;
//! - `healthy`: the waiting a healthy system holds after the overload
//!   (Erlang C), `drain`'s baseline when a run has none of its own;
//! - `run`: the steps of a run;
//! - `gateway`: the gateway under test during a run (spawned or reached);
//! - `provider_side`: the run's fake providers (in this process, remote,
//!   or none), started, asked and ended together;
//! - `provider_urls`: their base URLs by name, as a gateway is told them
//!   (placeholders, environment, the reference gateway's upstreams);
//! - `process`: a gateway as a child process group, its memory limit and
//!   its resident memory from /proc;
//! - `supervise`: a spawned gateway watched, its deaths noted, restarted;
//! - `rss`: sampling the gateway's memory;
//! - `fds`: predicting and securing the open files a run needs;
//! - `rundir`: the run directory's files, written whole or read by line;
//! - `init`: scenarios to start from (the built-in one, `rehearse init`'s);
//! - `template`: reading a config's template (its fields, defaults and
//!   what they mean, kept beside each config's type), which `init` writes;
//! - `judge`: a run directory judged from its files alone;
//! - `live_metrics`: the live series at `GET /metrics` (`--metrics-listen`);
//! - `variants`: a scenario's `[[variants]]` (and `--each`), each
//!   validated whole;
//! - `compare`: one run per variant, and the comparison of their reports;
//! - `baseline`: run directories compared as they are;
//! - `regression`: a comparison's figures held to its first run's
//!   (`--fail-on-regression`), and its files written;
//! - `error`: [`RunError`], a variant for each thing that failed with its
//!   cause, and its [`RunErrorKind`] (bad input, or a run that could not
//!   be made), which the binary maps to an exit code.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod baseline;
mod calibrate;
mod checklist;
mod clients;
mod clock;
mod compare;
mod error;
mod expectations;
mod fds;
mod gateway;
mod gateway_metrics;
mod gateway_samples;
mod healthy;
mod https;
mod init;
mod judge;
mod live_metrics;
mod multi;
mod plan;
mod process;
mod provider_side;
mod provider_urls;
mod regression;
pub mod remote;
mod resolve;
mod rss;
mod run;
mod rundir;
mod scenario;
mod sizing;
mod supervise;
mod template;
mod variants;

pub use baseline::{compare_runs, CompareInputs};
pub use calibrate::{calibrate, knee_of, sweep_levels, CalibrateOptions, SweepEnd, SweepLimits};
pub use compare::{compare, CompareOptions, Lineup, COMPARE_AFTER_HELP};
pub use error::{RunError, RunErrorKind};
pub use fds::{
    check_fds, expected_fds, is_out_of_files, out_of_files_note, predicted_fds, FdCheck,
    OpenFilesError,
};
pub use gateway_metrics::{histogram_quantile, provider_latency_note};
pub use init::{scenario_keys, write_init, InitOptions, BUILTIN_SCENARIO};
pub use judge::{judge_dir, Judged};
pub use live_metrics::{serve_load_metrics, serve_metrics, MetricsSource};
pub use loadgen::Rate;
pub use multi::{collect, stage, write_shard_offset, StageOptions, SHARD_OFFSET};
pub use plan::plan;
pub use process::kill_live_group;
pub use provider_side::{ProviderAt, ProviderChoice};
pub use provider_urls::ProviderUrls;
pub use regression::{Compared, RegressionGate};
pub use run::{run, RunOptions};
pub use rundir::default_run_dir;
pub use scenario::{
    apply_sets, load_in_file, GatewayGauges, GatewayKind, GatewaySpec, LoadShape, Meta, Scenario,
    ScenarioError, Slo,
};
pub use variants::Variant;
pub use wire::Scale;

/// A scenario at rehearsal scale: each part's typed config as the run
/// starts it.
#[derive(Debug, Clone)]
pub struct Rehearsal {
    /// The scale applied.
    pub scale: Scale,
    /// The fake providers' configs, in the scenario's order (see
    /// [`Scenario::providers`]).
    pub providers: Vec<fake_provider::ProviderConfig>,
    /// The load.
    pub load: loadgen::LoadPlan,
    /// The reference gateway's config, when the scenario uses it (upstream
    /// and listen are set when it starts).
    pub reference: Option<reference_gateway::GatewayConfig>,
    /// The checklist's thresholds.
    pub thresholds: assertions::Thresholds,
}

impl Rehearsal {
    /// The first provider's config (see [`Scenario::provider`]).
    pub fn provider(&self) -> &fake_provider::ProviderConfig {
        &self.providers[0]
    }
}

impl Scenario {
    /// Plays the scenario at time scale `ts` instead of its own
    /// (`--time-scale N` of `run`, `plan` and `stage`); `None` leaves it.
    ///
    /// ```
    /// let mut s = harness::Scenario::load_or_builtin(None, &[]).unwrap();
    /// s.at_time_scale(Some(7.0)).unwrap();
    /// assert_eq!(s.scale().time, 7.0);
    /// assert!(s.at_time_scale(Some(0.0)).is_err());
    /// ```
    pub fn at_time_scale(&mut self, ts: Option<f64>) -> Result<(), RunError> {
        if let Some(ts) = ts {
            if !(ts.is_finite() && ts > 0.0) {
                return Err(RunError::flag(
                    format!("--time-scale {ts}"),
                    "must be a number above 0",
                ));
            }
            self.meta.time_scale = ts;
        }
        Ok(())
    }

    /// The scale the scenario asks for.
    pub fn scale(&self) -> Scale {
        Scale {
            time: self.meta.time_scale,
            quota: self.meta.quota_scale,
        }
    }

    /// The scenario at its scale.
    pub fn rehearsal(&self) -> Rehearsal {
        let scale = self.scale();
        Rehearsal {
            scale,
            providers: self.providers.iter().map(|p| p.scaled(scale)).collect(),
            load: self.load_plan.clone().scaled(scale),
            reference: match &self.gateway.kind {
                GatewayKind::Reference(c) => Some(c.as_ref().clone().scaled(scale)),
                _ => None,
            },
            thresholds: self.checklist.scaled(scale),
        }
    }
}
