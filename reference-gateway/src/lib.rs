//! A gateway to rehearse against: it sits between callers and an LLM
//! provider (OpenAI `/v1/chat/completions`, Anthropic `/v1/messages`),
//! forwards requests untouched (streams included, as they arrive), and
//! decides who may call the provider now, who waits and who is shed.
//!
//! Four admission modes, chosen by [`Mode`]:
//! - `naive`: one detached task per request, no bound, no notice of a
//!   caller hanging up (the incident to reproduce);
//! - `bounded`: N concurrent calls, a bounded queue (full: 429 at once) and
//!   a wait budget (a job picked up past it is answered 503, never sent);
//! - `deadline`: dispatch paced to the quota's token rate; a job is admitted
//!   only if the tokens ahead of it plus its own drain in time for its
//!   caller's deadline, re-checked at dequeue; FIFO or LIFO;
//! - `aimd`: an adaptive concurrency limit, +1 on fast success, x0.9 the
//!   moment a call passes the latency target.
//!
//! In every mode but naive, a caller hanging up drops its queued job and
//! cancels its upstream call. Every shed answer carries `retry-after` and
//! `retry-after-ms` computed from the live backlog and the drain rate
//! observed. `/metrics` exports queue wait, upstream time and end-to-end
//! time apart, sheds and stale drops apart, and in-flight, queue depth,
//! limit and resident memory gauges.
//!
//! On the wire: requests keep their `x-request-id` and their prompt; the
//! caller's remaining patience (`x-request-timeout-ms`, relative ms) is
//! passed on upstream as what is left of it at dispatch. Every forwarded
//! answer carries `x-gateway-queue-wait-us` (time spent in the gateway before
//! the upstream call); every shed answer carries `x-gateway-shed` with the
//! reason (`queue_full`, `would_miss_deadline`, `wait_expired`), also the
//! `code` of its OpenAI-shaped JSON error body.
//!
//! The rooms:
//! - `config`: [`GatewayConfig`] and each mode's knobs, from flags or TOML,
//!   time-scaled by `REHEARSE_TIME_SCALE`;
//! - `server`: [`Gateway`] serves on a listener it is handed until a
//!   [`CancellationToken`](tokio_util::sync::CancellationToken) fires, and
//!   gives back a [`GatewayHandle`];
//! - `proxy`: one request's path: read, check, admit, forward, stream back;
//! - `admission`: the modes' policies (slots with a queue, a token pacer);
//! - `queue`: the waiting room, FIFO or LIFO, hang-ups removed at once;
//! - `aimd`: the adaptive limit's arithmetic;
//! - `drain`: the drain rate observed and the Retry-After it implies;
//! - `request`: what admission reads from a body (token cost, stream);
//! - `metrics`: the Prometheus text of `/metrics`.
//!
//! The request-id marker, the token estimate, the Retry-After rounding and
//! the header names are the ones every part of a rehearsal uses, from the
//! `wire` crate.
//!
//! ```no_run
//! use reference_gateway::{Gateway, GatewayConfig, Mode};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = GatewayConfig::new(Mode::Bounded, "http://127.0.0.1:8080");
//! config.bounded.concurrency = 8;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let shutdown = CancellationToken::new();
//! let gateway = Gateway::new(config)?.serve(listener, shutdown.clone())?;
//! println!("listening on {}", gateway.base_url());
//! gateway.stopped().await;
//! # Ok(()) }
//! ```

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod admission;
mod aimd;
mod config;
mod drain;
mod error;
mod metrics;
mod proxy;
mod queue;
mod request;
mod server;

pub use config::{
    parse_duration, AimdConfig, BoundedConfig, DeadlineConfig, GatewayConfig, Mode, Order,
};
pub use error::{ConfigError, GatewayError};
pub use metrics::{resident_memory_bytes, ShedReason};
pub use server::{Gateway, GatewayHandle, GatewaySnapshot};
