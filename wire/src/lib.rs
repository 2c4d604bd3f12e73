//! What rehearse's parts say to each other (no tokio, no hyper).
//!
//! A rehearsal has three parts that run apart and meet only on the wire
//! and on disk: the load generator, the gateway under test and the fake
//! provider; then the checklist reads what they left. Everything they must
//! agree on is defined here, once: the records and their outcomes, the
//! clock that stamps them, how a request carries its id, the header names,
//! how Retry-After is written and read, the token estimate, how a value
//! drawn per call is written and drawn, the names of a run directory's
//! files, and the documents the engine writes there for the judge and the
//! reports (`run.json`, `plan.json`).
//!
//! The rooms:
//! - `record`: [`ClientRecord`] and [`ClientOutcome`] (`client.jsonl`),
//!   [`ProviderRecord`] and [`ProviderOutcome`] (`provider.jsonl`),
//!   [`RssSample`] (`rss.jsonl`);
//! - `dialect`: [`Dialect`], OpenAI or Anthropic, and [`Api`], chat,
//!   messages, responses or embeddings;
//! - `dist`: [`Dist`], a value drawn per call or per person (fixed,
//!   uniform, lognormal, exponential, mix), for the provider, the load
//!   and the plan alike;
//! - `clock`: [`Clock`], Unix microseconds from a monotonic clock;
//! - `request_id`: the `[rehearse:id=…]` prompt marker ([`marker`],
//!   [`marker_id`], [`is_request_id`]) and a call's id, header first
//!   ([`request_id`]);
//! - [`headers`]: every header name the parts read or write;
//! - [`json`]: the one JSON writer of the hot paths (the records' lines,
//!   answers and request bodies), byte for byte serde_json's;
//! - `retry_after`: [`retry_after_values`], [`parse_retry_after`] and
//!   [`read_retry_after`] (with the [`RetryAfterHeader`] it read);
//! - `go_duration`: Go's duration text ([`go_duration`],
//!   [`parse_go_duration`]) of OpenAI's rate-limit reset headers;
//! - `quota`: a provider's request and token buckets ([`QuotaBuckets`])
//!   and the rate-limit headers that describe them
//!   ([`ratelimit_headers`]);
//! - `tokens`: [`estimate_tokens`], one token per [`CHARS_PER_TOKEN`];
//! - [`number`]: `9,360`-style numbers and the lognormal's p99 z-score;
//! - `fd_table`: [`raise_open_files_limit`] and [`presize_fd_table`];
//! - [`files`]: the run directory's file names and [`files::write_atomic`];
//! - `run_meta`: `run.json`, [`RunMeta`] and its [`GatewayEvent`]s, with
//!   the [`Expectations`] the checks compare against, with what follows
//!   the last trouble ([`AfterTrouble`]) (`expectations`);
//! - `plan`: `plan.json`, [`Plan`] and its [`Figures`], [`Segment`],
//!   [`Overload`], [`HealthyWaiting`], [`Knobs`], [`ErrorBudget`] and
//!   [`Spend`]: the engine
//!   computes and writes them, the reports render them;
//! - `scale`: [`Scale`], the one rule that shrinks an event to a rehearsal.
//!
//! ```
//! use wire::{ClientOutcome, ClientRecord};
//!
//! let line = r#"{"id":"r000001","attempt":1,"intended_us":10,"sent_us":12,
//!     "first_byte_us":null,"done_us":100,"status":429,"outcome":"shed",
//!     "retry_after_ms":1500,"tokens":0,"stream":false,"last":true,"patience_ms":25000}"#;
//! let r: ClientRecord = serde_json::from_str(line)?;
//! assert_eq!(r.outcome, ClientOutcome::Shed);
//! assert_eq!(r.latency_us(), 90);
//! # Ok::<(), serde_json::Error>(())
//! ```

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod clock;
mod dialect;
mod dist;
mod expectations;
mod fd_table;
pub mod files;
mod go_duration;
pub mod headers;
pub mod json;
pub mod number;
mod plan;
mod quota;
mod record;
mod request_id;
mod retry_after;
mod run_meta;
mod scale;
mod tokens;

pub use clock::Clock;
pub use dialect::{Api, Dialect};
pub use dist::{Dist, DistError, Dur, MixEntry, Quantity};
pub use expectations::{AfterTrouble, Expectations};
pub use fd_table::{presize_fd_table, raise_open_files_limit, PRESIZE_MAX};
pub use go_duration::{go_duration, parse_go_duration};
pub use plan::{
    ClientsPlan, ErrorBudget, Figures, HealthyWaiting, Knobs, Overload, Plan, ProviderPhase,
    ProviderPlan, ReplayPlan, Segment, Spend, Trouble,
};
pub use quota::{
    ratelimit_headers, rfc3339_utc, QuotaBuckets, QuotaLimit, QuotaRefusal, QuotaSnapshot,
    TokenBucket,
};
pub use record::{
    is_provider_name, ClientOutcome, ClientRecord, GatewaySample, Join, ProviderEnd,
    ProviderOutcome, ProviderRecord, RefusalClass, RssSample, AT_ONCE_US, DEFAULT_PROVIDER,
    NOT_SENT_PREFIX,
};
pub use request_id::{
    is_request_id, marker, marker_id, request_id, Marker, MARKER_CLOSE, MARKER_OPEN, MAX_ID_LEN,
};
pub use retry_after::{
    parse_retry_after, read_retry_after, retry_after_values, RetryAfterHeader,
    UNRECORDED_GRANULARITY_MS,
};
pub use run_meta::{GatewayEvent, RigSeen, RunMeta};
pub use scale::Scale;
pub use tokens::{estimate_tokens, CHARS_PER_TOKEN};
