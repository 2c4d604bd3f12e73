//! A gateway to rehearse against: it sits between callers and an LLM
//! provider (OpenAI `/v1/chat/completions`, Anthropic `/v1/messages`),
//! forwards requests untouched (streams included, as they arrive), and
//! decides who may call the provider now, who waits and who is shed.
//!
//! Five admission modes, chosen by [`Mode`]:
//! - `naive`: one detached task per request, no bound, no notice of a
//!   caller hanging up (the incident to reproduce);
//! - `bounded`: N concurrent calls, a bounded queue (full: refused at once)
//!   and a wait budget (a job picked up past it is answered 503, never
//!   sent);
//! - `deadline`: dispatch paced to the quota's token rate; a job is admitted
//!   only if the tokens ahead of it plus its own drain in time for its
//!   caller's deadline, re-checked at dequeue; FIFO or LIFO;
//! - `aimd`: an adaptive concurrency limit, +1 on fast success, x0.9 the
//!   moment a call passes the latency target;
//! - `timeout`: no limit and no queue, only `upstream_timeout` (required).
//!
//! Every mode has an HTTP client of the kind a gateway built on a client
//! library has: `pool_max_connections` caps the calls in flight through it
//! (the pool of httpx and its kin; beyond the cap a call waits inside the
//! pool, and `/metrics` times that wait as provider latency unless
//! `split_pool_wait` exports it as `gateway_pool_wait_seconds`), and
//! `upstream_retries` retries the provider's refusals after their
//! Retry-After, holding the request and its connection meanwhile.
//!
//! # Several upstreams
//!
//! `upstream = URL` is one upstream (named `default`), passed every
//! refusal through as a plain proxy does. `upstreams = [{ name, url,
//! weight, priority }]` (or `provider = NAME` instead of `url` in a
//! scenario: [`GatewayConfig::resolve_providers`]) is several, routed by
//! `routing`: `failover` tries them in priority order (the lowest first,
//! then the order written), `weighted` by weight (smooth weighted round
//! robin) among those not cooling. An upstream that answers 429, 503 or
//! 529, passes `upstream_timeout` or cannot be reached is cooled down for
//! the Retry-After it gave (`retry-after-ms`, else `retry-after` in seconds
//! or as an HTTP date), else for `cooldown` (5 s), and the request it
//! refused is sent on at once to the next upstream not cooling, at most
//! once per upstream; a stream is only sent on before its first byte
//! (a refusal is a head: nothing of it reached the caller). With no
//! upstream left, the last refusal is passed on as it came. `cooldowns =
//! false` never cools (the router that retries into a cooling deployment):
//! the next request tries the refusing upstream again at once. When every
//! upstream is cooling, a request is refused at once (and a queued one at
//! dispatch), 503 `all_upstreams_cooling`, with a Retry-After of the
//! shortest cooldown left. Admission works on the capacity not cooling:
//! at a share `s` of the upstreams' weight open, bounded's and aimd's
//! limits are `ceil(N·s)` (at least 1) and their queues `ceil(Q·s)`, the
//! pacer's token rate `rate·s` (give weights in proportion to each
//! upstream's capacity, in failover too). `/metrics` labels every upstream
//! series `upstream="NAME"` (with a lone `upstream` they stay unlabelled,
//! as before) and adds each upstream's calls, send-ons, cooldowns and a
//! `gateway_upstream_cooling` gauge; every forwarded answer says which
//! upstream gave it in `x-gateway-upstream`.
//!
//! In every mode but naive, a caller hanging up drops its queued job and
//! cancels its upstream call. Every shed answer carries `retry-after` and
//! `retry-after-ms`: how long the live backlog takes to drain. Behind a
//! concurrency limit (bounded, aimd) that is when the queue's last job
//! will leave it, served or dropped past its budget, from when the calls
//! in flight end at the call time observed; in deadline mode, when its
//! queue's last job is dispatched at the pacer's own token rate. `/metrics` exports queue wait, upstream time and end-to-end
//! time apart, each kind of refusal apart, and in-flight, queue depth,
//! limit and resident memory gauges.
//!
//! # The refusal table
//!
//! Every mode refuses by one table. Two policies with two triggers must
//! not be mistaken for each other: a tenant's rate limit is an entitlement
//! (what an API key bought, enforced even on an idle gateway: 429), load
//! shedding answers scarcity (the gateway cannot serve everyone now,
//! whatever the entitlement: 503, with a Retry-After the client can use).
//! A refused request says which row fired in `x-gateway-reason`, and, when
//! the gateway wrote the body, in the `code` of its OpenAI-shaped JSON
//! error; [`ShedReason`] is the table in code.
//!
//! | policy | modes | when | status | reason | Retry-After |
//! |---|---|---|---|---|---|
//! | queue full | bounded, aimd | at admission | 429 (`queue_full_status = 503` for 503) | `queue_full` | yes |
//! | would miss its deadline | deadline | at admission | 503 | `would_miss_deadline` | yes |
//! | waited past its budget or deadline (stale) | bounded, aimd, deadline | at dequeue; never sent | 503 | `wait_expired` | yes |
//! | tenant over its entitlement | all | at admission, whatever the load | 429, with the tenant's `x-ratelimit-*` headers | `tenant_limited` | yes, from its bucket (none if the request exceeds the whole bucket: it never fits) |
//! | upstream timeout | all | `upstream_timeout` after dispatch; the call cancelled | 504 (an answer already streaming is cut instead) | `upstream_timeout` | no |
//! | provider refusal passed through | all | the provider answered 429, 503 or 529 (after `upstream_retries` retries, if set), and no other upstream is left to send it on to | the provider's | `upstream_refused` (header only: the body is the provider's) | the provider's |
//! | every upstream cooling | all, with cooldowns | at admission, or at dispatch for a queued job; never sent | 503 | `all_upstreams_cooling` | yes: the shortest cooldown left |
//!
//! The first four and the last never reach the provider; they also carry
//! `x-gateway-shed` (the older name, same value). A tenant is an API key
//! (`Authorization: Bearer KEY`, else `x-api-key`) listed in `[tenants]`
//! with its tokens (and optionally requests) per minute; a request is
//! charged prompt + max_tokens at admission and given it back if it is
//! then shed or its caller leaves before dispatch. A request with no key,
//! or a key not listed, has no entitlement to exceed: it is not rate
//! limited, only shed like every other. In `/metrics`:
//! `gateway_shed_total{reason="queue_full"|"would_miss_deadline"|"tenant_limited"}`,
//! `gateway_stale_drops_total`, `gateway_upstream_timeouts_total`,
//! `gateway_upstream_refused_total`,
//! `gateway_shed_total{reason="all_upstreams_cooling"}` (with cooldowns
//! on), never summed.
//!
//! On the wire: requests keep their `x-request-id` and their prompt; the
//! caller's remaining patience (`x-request-timeout-ms`, relative ms) is
//! passed on upstream as what is left of it at dispatch. Every forwarded
//! answer carries `x-gateway-queue-wait-us` (time spent in the gateway before
//! the upstream call).
//!
//! The rooms:
//! - `config`: [`GatewayConfig`] and each mode's knobs, from flags or TOML,
//!   time-scaled by `REHEARSE_TIME_SCALE`;
//! - `flags`: a gateway process's configuration from [`GatewayFlags`] over
//!   a `--config` file, time-scaled by `REHEARSE_TIME_SCALE`;
//! - `tenants`: each API key's entitlement, as rate-limit buckets;
//! - `server`: [`Gateway`] serves on a listener it is handed until a
//!   [`CancellationToken`](tokio_util::sync::CancellationToken) fires, and
//!   gives back a [`GatewayHandle`];
//! - `proxy`: one request's path: read, check, the tenant's entitlement,
//!   admit, forward within the upstream timeout (on to the next upstream
//!   when one refuses), stream back;
//! - `router`: the upstreams, their order or weights, their cooldowns;
//! - `admission`: the modes' policies (slots with a queue, a token pacer);
//! - `queue`: the waiting room, FIFO or LIFO, hang-ups removed at once;
//! - `aimd`: the adaptive limit's arithmetic;
//! - `drain`: the drain rate observed and the Retry-After it implies;
//! - `request`: what admission reads from a body (token cost, stream);
//! - `metrics`: [`ShedReason`], the refusal table's rows, and the
//!   Prometheus text of `/metrics`;
//! - `fault`: the mistakes it can be given on purpose ([`Fault`]:
//!   `--fault KIND`, `fault = "KIND"`), each to show a check failing;
//!   never for a real rehearsal; `proxy::fault` is what each does in the
//!   proxy's path;
//! - `error`: the errors this library returns.
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
mod fault;
mod flags;
mod metrics;
mod proxy;
mod queue;
mod request;
mod router;
mod server;
mod tenants;
mod upstream;

pub use config::{
    parse_duration, AimdConfig, BoundedConfig, DeadlineConfig, GatewayConfig, Mode, Order, Routing,
    TenantConfig, UpstreamConfig, MAX_UPSTREAMS, MAX_WEIGHT,
};
pub use error::{ConfigError, GatewayError};
pub use fault::{Fault, FAULT_KINDS};
pub use flags::{FlagsError, GatewayFlags, ABOUT as CLI_ABOUT};
pub use metrics::{resident_memory_bytes, ShedReason};
pub use server::{Gateway, GatewayHandle, GatewaySnapshot, UpstreamSnapshot};
