//! `loadgen`: the open-loop load generator of `rehearse`.
//!
//! It drives a gateway with the traffic of a scenario's `[load]` table and
//! tells the truth about latency: every attempt is timed from its *intended*
//! send time, a slow target never slows the schedule (no coordinated
//! omission), and the generator watches its own send lag so that a run it
//! could not keep on schedule is marked invalid rather than green.
//!
//! The rooms:
//! - `config`: the `[load]` schema ([`LoadConfig`]) and its validation into a
//!   [`LoadPlan`]; errors name the file, line and field;
//! - `schedule`: when people arrive (phases: constant, Poisson, ramps; or a
//!   replayed log with speed-up and multiply), independent of when to stop;
//! - `rate`: a rate as a person writes it (`2000/min`), in a scenario and
//!   on `rehearse init`'s command line alike;
//! - `replay`: reading CSV / JSONL traffic logs and public traces (Mooncake,
//!   BurstGPT, Azure, Bailian) as published;
//! - `request`: OpenAI and Anthropic bodies, with the `[rehearse:id=…]`
//!   marker, and validating answers;
//! - `retry`: what is retried, backoff honouring Retry-After (read by
//!   [`wire::parse_retry_after`]) and the retry budget;
//! - `http1`: a lean HTTP/1.1 client with a keep-alive pool, over TCP
//!   or TLS; its `slots`: the places for open connections under a limit
//!   that changes with the phase; its `pace`: the callers' new
//!   connections per second at most (`connect_rate`);
//! - `tls`: rustls for `https://` targets ([`TlsOptions`]: the public
//!   roots, a CA file, or `--insecure`);
//! - `run`: the dispatcher, the person tasks (patience, hang-up, retries)
//!   and the record writer, one [`wire::ClientRecord`] per attempt streamed
//!   to `client.jsonl`; entry point [`run()`]; its `bound`: the load
//!   generator's own bound on open connections, what its callers can hold,
//!   or their pool (`[load.clients]`: [`Clients`], [`ConnectionBound`],
//!   [`NOT_SENT_AT_BOUND`], [`NOT_SENT_IN_CLIENT`]);
//! - `stats`: HDR histograms by outcome, the per-second counts
//!   ([`LoadSecond`], `load-seconds.csv`), the [`RunReport`] and its
//!   summary table;
//! - `progress`: live counters and the progress bar;
//! - `exposition`: the live counters as Prometheus text (`--metrics-listen`);
//! - `bare`: the bare target, a server that answers every request with the
//!   same completion, which the generator's own ceiling is measured against
//!   (`rehearse calibrate --rig`, the side-by-side benchmark);
//! - `closed`: the closed-loop model (N workers back to back) that
//!   `rehearse calibrate` sweeps, on the caller's HTTP client;
//! - `resolve`: host names to addresses from `/etc/hosts` and
//!   `/etc/resolv.conf`, without the C library's name service switch (the
//!   static binary has none);
//! - `shard`: load from several processes or machines, shard `I/N` playing
//!   its share of the one seeded schedule;
//! - `spend`: a budget of tokens for a real provider account, each request
//!   counted at what it may cost before it is sent.
//!
//! ```
//! use loadgen::LoadPlan;
//!
//! let scenario = r#"
//! [scenario]
//! name = "flash promotion"
//!
//! [load]
//! seed = 7
//! patience = { fixed = "25s" }
//! [[load.phases]]
//! duration = "30s"
//! rate = 200
//! per = "minute"
//! [[load.phases]]
//! duration = "1m"
//! rate = 200
//! ramp_to = 2000
//! per = "minute"
//! arrivals = "poisson"
//! "#;
//! let plan = LoadPlan::from_scenario_str(scenario, "flash.toml", std::path::Path::new("."))?;
//! assert_eq!(plan.schedule_length(), std::time::Duration::from_secs(90));
//! assert_eq!(plan.expected_arrivals().round(), 100.0 + 1100.0);
//!
//! // A mistake is reported with its place and field.
//! let bad = "[load]\n[[load.phases]]\nduration = \"30s\"\nrate = 200\nper = \"fortnight\"\n";
//! let err = LoadPlan::from_scenario_str(bad, "flash.toml", std::path::Path::new(".")).unwrap_err();
//! assert!(err.to_string().starts_with("flash.toml:5:"), "{err}");
//! # Ok::<(), loadgen::LoadError>(())
//! ```

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod bare;
mod closed;
mod config;
mod exposition;
mod http1;
mod progress;
mod rate;
mod replay;
mod request;
mod resolve;
mod retry;
mod run;
mod schedule;
mod shard;
mod spend;
mod stats;
mod tls;

pub use bare::{bind_bare, serve_bare, spawn_bare};
pub use closed::{closed_level, CallEnd, ClosedLevel, ClosedTally, SweepRequests};
pub use config::{
    Clients, ClientsConfig, ConnectionsModel, LoadConfig, LoadError, LoadPlan, LoadTenant,
    LoadTenantRequest, PhaseConfig, PlannedPhase, ReplayConfig, RequestConfig, RetryConfig,
    RetryKind, RetryPolicy,
};
pub use exposition::label_value;
pub use progress::{Live, LiveHistogram};
pub use rate::{Rate, RateUnit};
pub use replay::{
    parse_replay_log, FailedRows, ReplayColumns, ReplayFormat, ReplayRead, TimestampUnit,
};
pub use resolve::{resolve, resolve_authority};
pub use run::{
    probe, probe_tls, run, LoadOptions, LoadRunError, OnStart, StopCondition, Target, TargetError,
};
pub use schedule::PhaseArrivals;
pub use shard::{parse_start_at, Shard, ShardError};
pub use spend::SpendBudget;
pub use stats::{
    was_not_sent, ConnectionBound, LoadPercentiles, LoadSecond, OutcomeSummary, RunReport, Spent,
    NOT_SENT_AT_BOUND, NOT_SENT_IN_CLIENT, NOT_SENT_LATE, OVERSIZED,
};
pub use tls::{TlsError, TlsOptions, INSECURE_WARNING};
