//! A chaos fake LLM provider: the OpenAI (chat, Responses, embeddings;
//! Azure's paths too) and Anthropic APIs, with a
//! scriptable latency timeline, a concurrency ceiling, a token quota with
//! real 429s and rate-limit headers, and injected faults.
//!
//! Point a gateway at it the way it would be pointed at the real provider
//! (its base URL); every call is recorded (ids, times, tokens, outcome) so a
//! harness can split the gateway's queue wait from the provider's service
//! time, and count calls made for callers who had already left. Records go
//! to a file as calls end ([`FakeProvider::record_to`]), none is kept in
//! memory: a provider left running for days holds flat memory.
//!
//! Modules:
//! - `config`: the TOML schema, validation, and the merge of timeline
//!   phases and admin overrides into the settings in force;
//! - `ceiling`: at most C calls in service, a FIFO queue behind;
//! - `curve`: the load curve, latency growing with the calls in service
//!   past a knee;
//! - `dialect`: request parsing and answers in each provider's shape
//!   ([`ProviderDialect`], on `wire::Dialect`);
//! - `api`: OpenAI's Responses and embeddings APIs (requests, answers,
//!   typed stream events) and Azure OpenAI's deployment paths;
//! - `counters`: the live counts of `/_fake/stats` ([`Stats`]);
//! - `records`: the record file: each serving thread's lane of lines,
//!   the writer thread that takes them on a period, rotation and cap,
//!   and reading it back from a position ([`RecordsWritten`]); its
//!   `line` writes a record's line by hand (`wire::json`, serde_json's bytes);
//! - `run`: a run (what a reset starts anew: config, timeline start,
//!   counts, quota) and the lease (`POST /_fake/reset`, [`RunInfo`]);
//! - `admin`: the admin API (`/_fake/...`), who may call it, and metrics;
//! - `server`: HTTP serving and one call's life;
//! - `down`: the timeline's `down` phases (connections refused, or held
//!   unanswered; the calls in flight cut);
//! - `shared`: the state both of those read (the run, the phase pinned,
//!   the overrides, the lease book) and their HTTP helpers;
//! - `process`: what a provider process reads besides its flags (its
//!   config from a file or a scenario, the admin token by precedence, the
//!   test-only clock offset), its default records file and its banner;
//! - `timer`: the sub-millisecond timer behind the scripted delays;
//! - `head_timer`: the timer hyper is given for a connection's header
//!   read timeout;
//! - `listen`: a listening socket with a deep accept queue ([`listen`]).
//!
//! What it shares with the other parts of a rehearsal (the record, the
//! clock, the request-id marker, the token estimate, Retry-After, header
//! names, the quota's buckets and rate-limit headers, sizing the descriptor
//! table) is in the `wire` crate.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use fake_provider::{FakeProvider, ProviderConfig};
//! let config = ProviderConfig::from_toml("[concurrency]\nceiling = 4\n", "inline").unwrap();
//! let provider = FakeProvider::new(config).bind("127.0.0.1:0").await.unwrap();
//! // ... point a gateway at provider.base_url(), drive it, then:
//! assert!(provider.records().is_empty());
//! provider.shutdown().await;
//! # });
//! ```

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod admin;
mod api;
mod ceiling;
pub mod config;
mod counters;
pub mod curve;
mod dialect;
mod down;
mod head_timer;
mod listen;
pub mod process;
mod records;
mod run;
mod server;
mod shared;
mod timer;

pub use api::parse_request;
pub use config::{ConfigError, Overrides, ProviderConfig};
pub use counters::Stats;
pub use dialect::ProviderDialect;
pub use listen::listen;
pub use records::RecordsWritten;
pub use run::{LeaseInfo, PreviousRun, RunInfo};
pub use server::{FakeProvider, ProviderHandle};
pub use shared::{UnknownPhase, RECORDS_NEXT_HEADER};
