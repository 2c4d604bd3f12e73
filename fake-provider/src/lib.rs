//! A chaos fake LLM provider: the OpenAI and Anthropic APIs, with a
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
//! - `dialect`: request parsing and answers in each provider's shape
//!   ([`ProviderDialect`], on `wire::Dialect`);
//! - `counters`: the live counts of `/_fake/stats` ([`Stats`]);
//! - `records`: the record file, its writer thread, rotation and cap, and
//!   reading it back from a position ([`RecordsWritten`]);
//! - `server`: HTTP serving, one call's life, the admin API and metrics;
//! - `timer`: the sub-millisecond timer behind the scripted delays.
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

mod ceiling;
pub mod config;
mod counters;
mod dialect;
mod records;
mod server;
mod timer;

pub use config::{ConfigError, Overrides, ProviderConfig};
pub use counters::Stats;
pub use dialect::ProviderDialect;
pub use records::RecordsWritten;
pub use server::{FakeProvider, ProviderHandle, UnknownPhase, RECORDS_NEXT_HEADER};
