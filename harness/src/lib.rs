//! The rehearsal engine: from a scenario file to a judged run directory.
//!
//! A [`Scenario`] is read and validated once (every field located by file,
//! line and name when wrong), then turned into a [`Rehearsal`]: each typed
//! config at the run's [`Scale`] by the one rule of [`wire::Scale`]. The
//! plan ([`plan()`]) is the arithmetic a person would otherwise do by hand.
//! [`run()`] makes one rehearsal in named steps and judges it;
//! [`judge_dir`] judges a saved run directory again (`rehearse report`).
//!
//! The rooms, a folder for each job (each folder's `mod.rs` names its own):
//! - `scenario`: the scenario file, its `--set` edits and validation (read
//!   and parsed once; a run directory's saved scenario once when judged),
//!   its `[checklist]` values, its variants, the templates and `init`;
//! - `plan`: capacity, backlog, drain, late answers and Q*, by phase; the
//!   gateway's knobs sized from them, a healthy system's waiting, and the
//!   expectations the checks compare against;
//! - `gateway`: the gateway under test during a run (spawned or reached),
//!   as a process, supervised, its memory, gauges and metrics;
//! - `rehearsal`: the scenario at the run's scale, every part of it
//!   (providers, load, gateway, checklist) scaled once, with its plan;
//! - `provider`: where the run's fake providers are (in this process,
//!   remote, or none), their URLs, a remote one's admin API;
//! - `run`: the steps of a run, the run directory, its open files, its
//!   live series, judging a run directory, load from several machines;
//! - `compare`: one run per variant, run directories compared as they
//!   are, and a comparison's regression gate;
//! - `http`: the harness's own HTTP clients (trust and name resolution as
//!   the load generator's);
//! - `calibrate`: `rehearse calibrate`, where a target's latency curve
//!   bends;
//! - `rig`: `rehearse calibrate --rig`, this machine's load-generator
//!   ceiling per model of connections, kept in a file `plan` and `run`
//!   read;
//! - `host`: the program the library runs in: how a user spells each
//!   [`Input`] the messages point to, and how to start the program's own
//!   child processes ([`install`] a [`Host`]);
//! - `error`: [`RunError`], a variant for each thing that failed with its
//!   cause, and its [`RunErrorKind`] (bad input, or a run that could not
//!   be made), which the binary maps to an exit code.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod calibrate;
mod compare;
mod error;
mod gateway;
mod host;
mod http;
mod plan;
mod provider;
mod rehearsal;
mod rig;
mod run;
mod scenario;

pub use provider::remote;

pub use calibrate::{calibrate, knee_of, sweep_levels, CalibrateOptions, SweepEnd, SweepLimits};
pub use compare::baseline::{compare_runs, CompareInputs};
pub use compare::regression::{Compared, RegressionGate};
pub use compare::{compare, CompareOptions, Lineup};
pub use error::{RunError, RunErrorKind};
pub use gateway::metrics::{histogram_quantile, provider_latency_note};
pub use gateway::process::kill_live_group;
pub use host::{install, Host, Input, ShardCall};
pub use loadgen::Rate;
pub use plan::plan;
pub use provider::urls::ProviderUrls;
pub use provider::{ProviderAt, ProviderChoice};
pub use rehearsal::{scale_factor, Rehearsal};
pub use rig::{
    calibrate_rig, default_rig_path, write_rig, Rig, RigCeiling, RigCheck, RigFile, RigOptions,
    RigWarning,
};
pub use run::fds::{
    check_fds, expected_fds, is_out_of_files, out_of_files_note, predicted_fds, FdCheck,
    OpenFilesError,
};
pub use run::judge::{judge_dir, Judged};
pub use run::live_metrics::{serve_load_metrics, serve_metrics, MetricsSource};
pub use run::multi::{collect, stage, write_shard_offset, StageOptions};
pub use run::rundir::default_run_dir;
pub use run::{run, RunOptions};
pub use scenario::init::{scenario_keys, write_init, InitOptions, BUILTIN_SCENARIO};
pub use scenario::variants::Variant;
pub use scenario::{
    apply_sets, load_in_file, GatewayGauges, GatewayKind, GatewaySpec, LoadShape, Meta, Scenario,
    ScenarioError, Slo,
};
pub use wire::Scale;
