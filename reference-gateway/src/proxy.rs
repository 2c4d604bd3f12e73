//! One request's path through the gateway: read and check the body, pass
//! the tenant's entitlement and admission (or be refused, by the refusal
//! table's row that fired), call the upstream within its timeout, stream
//! its answer back.
//!
//! Its room `fault` is what each of [`crate::fault`]'s faults does in this
//! path, one hook each.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Sleep;
use tracing::{debug, warn};
use wire::headers::{
    GATEWAY_QUEUE_WAIT_US, GATEWAY_REASON, GATEWAY_SHED, REQUEST_ID, RETRY_AFTER_MS,
};
use wire::{ratelimit_headers, Dialect, QuotaLimit};

use crate::admission::{Admission, CallOutcome, Job, Permit, Refusal};
use crate::config::{GatewayConfig, Mode};
use crate::metrics::{Gauges, Metrics, ShedReason};
use crate::request::RequestShape;
use crate::router::{Router, Tried};
use crate::tenants::{OverEntitlement, Tenants};
use crate::upstream::{Answer, Call, Upstream};

mod fault;

use fault::Faults;

/// Errors a response body can carry (an upstream body that broke).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// What every response of the gateway carries.
pub(crate) type GatewayBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
/// When an upstream call's time is up (`upstream_timeout` after dispatch).
type CallDeadline = Option<tokio::time::Instant>;

/// Everything a request handler reads, shared by all connections.
pub(crate) struct Shared {
    pub(crate) mode: Mode,
    pub(crate) admission: Admission,
    pub(crate) metrics: Arc<Metrics>,
    client: Upstream,
    pub(crate) router: Arc<Router>,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    pub(crate) header_read_timeout: Duration,
    patience_header: HeaderName,
    default_deadline: Duration,
    default_max_tokens: u64,
    queue_full_status: StatusCode,
    upstream_timeout: Option<Duration>,
    tenants: Tenants,
    /// The faults given on purpose (`--fault`); None, the rule: each hook
    /// costs a gateway without faults one branch.
    faults: Option<Box<Faults>>,
}

/// On an answer passed on by a gateway with named `upstreams`: which one
/// gave it.
pub(crate) const GATEWAY_UPSTREAM: &str = "x-gateway-upstream";

/// How a request's attempts at the upstreams ended.
enum Attempted {
    /// An answer to pass on (a success, or the last refusal): its head,
    /// and when its upstream timeout passes.
    Answer(Response<Incoming>, CallDeadline),
    /// The last upstream tried could not be reached or broke (why).
    Failed(String),
    /// The last upstream tried passed its `upstream_timeout`.
    TimedOut,
}

impl Shared {
    pub(crate) fn new(
        config: &GatewayConfig,
        admission: Admission,
        metrics: Arc<Metrics>,
        router: Arc<Router>,
    ) -> Shared {
        Shared {
            mode: config.mode,
            admission,
            client: Upstream::new(config, metrics.clone()),
            metrics,
            router,
            max_body_bytes: config.max_body_bytes,
            body_read_timeout: config.body_read_timeout,
            header_read_timeout: config.header_read_timeout,
            patience_header: HeaderName::from_bytes(config.deadline.patience_header.as_bytes())
                .expect("validated by GatewayConfig::validate"),
            default_deadline: config.deadline.default_deadline,
            default_max_tokens: config.deadline.default_max_tokens,
            queue_full_status: StatusCode::from_u16(config.queue_full_status)
                .expect("validated by GatewayConfig::validate"),
            upstream_timeout: config.upstream_timeout,
            tenants: Tenants::new(&config.tenants, config.tenant_window),
            faults: Faults::new(config),
        }
    }

    /// The gauges of `/metrics`: the admission state's, and the pool's when
    /// its wait is metered.
    pub(crate) fn gauges(&self) -> Gauges {
        Gauges {
            pool: self.client.metered_cap(),
            ..self.admission.gauges()
        }
    }

    /// The `/metrics` text now.
    pub(crate) fn metrics_text(&self) -> String {
        let cooling = self.router.cooling_all(Instant::now());
        let mut text = self
            .metrics
            .render(&self.mode.to_string(), self.gauges(), &cooling);
        if let Some(faults) = &self.faults {
            faults.render(&mut text);
        }
        text
    }

    /// Routes one request. Never fails: every error is an HTTP answer.
    pub(crate) async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<GatewayBody>, Infallible> {
        // A call to one of the four APIs, at its path.
        if req.method() == Method::POST {
            if let Some(api) = wire::Api::of_path(req.uri().path()) {
                if self.faults.as_ref().is_some_and(|f| f.no_cancel) {
                    return Ok(fault::uncancelled(self, req, api).await);
                }
                return Ok(self.proxy(req, api).await);
            }
        }
        let response = match (req.method(), req.uri().path()) {
            (&Method::GET, "/v1/models") => self.pass_through(req).await,
            (&Method::GET, "/metrics") => {
                let text = self.metrics_text();
                let mut r = Response::new(full(text));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            }
            (&Method::GET, "/healthz") => Response::new(full("ok\n")),
            _ => error_response(
                StatusCode::NOT_FOUND,
                "not_found",
                "invalid_request_error",
                &format!("no route for {} {}", req.method(), req.uri().path()),
            ),
        };
        Ok(response)
    }

    /// Models and other reads go straight through: they cost no tokens.
    async fn pass_through(&self, req: Request<Incoming>) -> Response<GatewayBody> {
        let (parts, _) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let at = self.router.first_open(Instant::now());
        let Ok(uri) = self.router.route(at).uri(path) else {
            return bad_gateway("bad upstream URI");
        };
        let mut up = Request::new(Full::new(Bytes::new()));
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        copy_request_headers(&parts.headers, up.headers_mut());
        match self.client.plain(up).await {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.map_err(BoxError::from).boxed_unsync())
            }
            Err(e) => {
                self.metrics.upstreams[at]
                    .errors
                    .fetch_add(1, Ordering::Relaxed);
                bad_gateway(&e.to_string())
            }
        }
    }

    /// Reads a chat request's body within the time and size limits, and
    /// what admission needs from it; on failure, the answer to give.
    async fn read_body(
        &self,
        headers: &HeaderMap,
        body: Incoming,
        api: wire::Api,
    ) -> Result<(Bytes, RequestShape), Response<GatewayBody>> {
        let metrics = &self.metrics;
        // Refuse an oversized body before reading it when it says its size.
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body_bytes as u64) {
            return Err(self.too_large());
        }
        // A body that never finishes would hold the connection and its
        // task forever: past the timeout it is a 408, and the connection
        // closes (the rest of the body may still come).
        let collect = Limited::new(body, self.max_body_bytes).collect();
        let Ok(collected) = tokio::time::timeout(self.body_read_timeout, collect).await else {
            metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
            let mut r = error_response(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "invalid_request_error",
                "the request body was not sent in time",
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(r);
        };
        let bytes = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(self.too_large()),
            Err(e) => {
                metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                let mut r = error_response(
                    StatusCode::BAD_REQUEST,
                    "body_unreadable",
                    "invalid_request_error",
                    &format!("could not read the request body: {e}"),
                );
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return Err(r);
            }
        };
        match RequestShape::parse(&bytes, api) {
            Ok(shape) => Ok((bytes, shape)),
            Err(e) => {
                metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                Err(error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    "invalid_request_error",
                    &e.to_string(),
                ))
            }
        }
    }

    /// One call to the provider's API `api`: read, check, admit, call,
    /// stream back.
    pub(crate) async fn proxy(
        self: Arc<Self>,
        req: Request<Incoming>,
        api: wire::Api,
    ) -> Response<GatewayBody> {
        let dialect = api.dialect();
        let arrived = Instant::now();
        let metrics = &self.metrics;
        metrics.requests.fetch_add(1, Ordering::Relaxed);
        let (parts, body) = req.into_parts();
        let (bytes, shape) = match self.read_body(&parts.headers, body, api).await {
            Ok(read) => read,
            Err(answer) => return answer,
        };
        if let Some(faults) = &self.faults {
            if let Some(answer) = faults.before_admission(&bytes).await {
                return answer;
            }
        }
        let id = request_id(&parts.headers, &bytes);
        let patience = parts
            .headers
            .get(&self.patience_header)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0));
        let cost = shape.cost(self.default_max_tokens);
        let job = Job {
            arrived,
            cost: cost as f64,
            patience: patience.unwrap_or(self.default_deadline),
        };
        debug!(id = %id, dialect = dialect.as_str(), cost = job.cost, stream = shape.stream, "admitting");

        // An entitlement holds whatever the load: checked before shedding.
        let charge = match self.tenants.charge(&parts.headers, cost) {
            Ok(charge) => charge,
            Err(limited) => {
                metrics.refused(ShedReason::TenantLimited);
                debug!(id = %id, reason = ShedReason::TenantLimited.code(), "refused");
                return tenant_limited_response(&limited, dialect, &id);
            }
        };
        // No upstream can take it now: refused at once, never queued.
        if let Some(left) = self.router.all_cooling(arrived) {
            return self.cooling_response(left, arrived, &id);
        }
        let permit = match self.admission.admit(job).await {
            Ok(p) => p,
            Err(refusal) => {
                // The provider is not called: `charge`, dropped, goes back.
                metrics.queue_wait.observe(arrived.elapsed());
                debug!(id = %id, reason = refusal.reason.code(), "shed");
                return self.shed_response(refusal, &id);
            }
        };
        let dispatched = permit.dispatched();
        // Every upstream may have begun to cool while the job waited.
        let Some(first) = self.router.pick(Tried::default(), dispatched) else {
            let left = self.router.all_cooling(Instant::now()).unwrap_or_default();
            return self.cooling_response(left, arrived, &id);
        };
        if let Some(charge) = charge {
            charge.spend();
        }
        let queue_wait = dispatched.saturating_duration_since(arrived);
        metrics.queue_wait.observe(queue_wait);

        let up = match self.upstream_call(&parts, bytes.clone(), patience, arrived, first) {
            Ok(up) => up,
            Err(e) => return bad_gateway(&e.to_string()),
        };
        let call = CallGuard::new(self.clone(), permit, arrived, dispatched, bytes);
        let mut response = if self.mode == Mode::Naive {
            self.clone().call_detached(up, call, first, &id).await
        } else {
            self.call_attached(up, call, first, &id).await
        };
        if let Some(faults) = &self.faults {
            response = faults.pass_on(response).await;
        }
        response.headers_mut().insert(
            GATEWAY_QUEUE_WAIT_US,
            HeaderValue::from(queue_wait.as_micros() as u64),
        );
        response
    }

    /// The call to make upstream (at upstream `at` first): the caller's
    /// path and headers, and what is left of its patience.
    fn upstream_call(
        &self,
        parts: &http::request::Parts,
        body: Bytes,
        patience: Option<Duration>,
        arrived: Instant,
        at: usize,
    ) -> Result<Call, http::uri::InvalidUri> {
        let path = parts
            .uri
            .path_and_query()
            .map_or(parts.uri.path(), |p| p.as_str());
        let uri = self.router.route(at).uri(path)?;
        let mut headers = HeaderMap::new();
        copy_request_headers(&parts.headers, &mut headers);
        if let Some(p) = patience {
            // Pass on what is left of the caller's patience, so the provider
            // (or a harness reading its records) can tell a stale call.
            let left = p.saturating_sub(arrived.elapsed()).as_millis();
            headers.insert(self.patience_header.clone(), HeaderValue::from(left as u64));
        }
        Ok(Call {
            method: Method::POST,
            uri,
            headers,
            body,
        })
    }

    /// Sends `up` to upstream `first`, and on to the next upstream not
    /// cooling each time one refuses (429, 503, 529), times out or cannot
    /// be reached, once per upstream; each such upstream is cooled down
    /// (for its Retry-After, else `cooldown`) when cooldowns are on. Each
    /// attempt has its own `upstream_timeout` (the first from dispatch).
    /// Ends with the answer to pass on (a success, or the last refusal
    /// when no upstream is left), or how the last attempt failed.
    async fn attempts(&self, up: &mut Call, call: &mut CallGuard, first: usize) -> Attempted {
        let mut tried = Tried::default();
        let mut at = first;
        loop {
            // The first attempt's time runs from dispatch, as it always has.
            let started = if tried.is_empty() {
                call.dispatched
            } else {
                Instant::now()
            };
            tried.add(at);
            call.attempt(at, started);
            let deadline = self
                .upstream_timeout
                .map(|t| tokio::time::Instant::from_std(started + t));
            let request = self.client.send(up);
            let result = match deadline {
                None => Ok(request.await),
                Some(d) => tokio::time::timeout_at(d, request).await,
            };
            let result = match result {
                Ok(Ok(answer)) if !crate::upstream::is_refusal(answer.response.status()) => {
                    return Attempted::Answer(call.answered(answer), deadline);
                }
                other => other,
            };
            // Refused (429, 503, 529), failed or timed out.
            let now = Instant::now();
            if self.router.cools() {
                let headers = match &result {
                    Ok(Ok(answer)) => Some(answer.response.headers()),
                    _ => None,
                };
                let wait = self.router.cooldown_for(headers);
                if self.router.cool(at, wait, now) {
                    let m = &self.metrics.upstreams[at];
                    m.cooldowns.fetch_add(1, Ordering::Relaxed);
                    debug!(upstream = %self.router.route(at).name, cooldown_ms = wait.as_millis() as u64, retry_after = headers.is_some(), "cooling an upstream down");
                }
            }
            let next = self.router.pick(tried, now);
            match (result, next) {
                (Ok(Ok(answer)), None) => {
                    return Attempted::Answer(call.answered(answer), deadline)
                }
                (Ok(Err(e)), None) => {
                    call.failed();
                    return Attempted::Failed(error_chain(&e));
                }
                (Err(_), None) => {
                    // The request future is gone, and its connection with
                    // it: the provider sees the call hang up.
                    call.timed_out();
                    return Attempted::TimedOut;
                }
                (_, Some(next)) => {
                    // The refusal (or the call) is dropped unread: its
                    // connection closes, the caller sees none of it.
                    call.sent_on();
                    let path = self.router.route(at).path_of(&up.uri);
                    up.uri = match self.router.route(next).uri(path) {
                        Ok(uri) => uri,
                        Err(e) => return Attempted::Failed(e.to_string()),
                    };
                    debug!(from = %self.router.route(at).name, to = %self.router.route(next).name, "sent on");
                    at = next;
                }
            }
        }
    }

    /// Every mode but naive: the call lives inside the caller's request
    /// future and its response body. A caller hanging up drops them, which
    /// drops the upstream request and closes its connection; so does the
    /// upstream timeout passing.
    async fn call_attached(
        &self,
        mut up: Call,
        mut call: CallGuard,
        first: usize,
        id: &str,
    ) -> Response<GatewayBody> {
        match self.attempts(&mut up, &mut call, first).await {
            Attempted::Answer(resp, deadline) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                self.mark_answer(&mut parts, call.upstream);
                let body = GuardedBody {
                    inner: body,
                    call: Some(call),
                    deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
                    timed_out: false,
                };
                Response::from_parts(parts, body.boxed_unsync())
            }
            Attempted::Failed(cause) => {
                warn!(cause = %cause, "upstream call failed");
                bad_gateway(&cause)
            }
            Attempted::TimedOut => self.upstream_timeout_response(id),
        }
    }

    /// Naive mode: the call runs in a detached task that reads the upstream
    /// answer to its end whether or not anyone is still listening (the
    /// incident this mode reproduces). Only the upstream timeout, when one
    /// is set, ends it early.
    async fn call_detached(
        self: Arc<Self>,
        up: Call,
        call: CallGuard,
        first: usize,
        id: &str,
    ) -> Response<GatewayBody> {
        let (head_tx, head_rx) = oneshot::channel();
        // Unbounded on purpose: naive mode holds whatever the provider sends.
        let (frames_tx, frames_rx) = mpsc::unbounded_channel();
        let shared = self.clone();
        tokio::spawn(shared.relay_detached(up, call, first, head_tx, frames_tx));
        match head_rx.await {
            Ok(DetachedHead::Answer(mut parts)) => {
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, ChannelBody { rx: frames_rx }.boxed_unsync())
            }
            Ok(DetachedHead::Failed(cause)) => bad_gateway(&cause),
            Ok(DetachedHead::TimedOut) => self.upstream_timeout_response(id),
            Err(_) => bad_gateway("the upstream task ended without an answer"),
        }
    }

    /// Naive mode's detached call: the head to `head_tx`, then every frame
    /// to `frames_tx`, read to the end (or until the upstream timeout of
    /// the attempt that answered passes).
    async fn relay_detached(
        self: Arc<Self>,
        mut up: Call,
        mut call: CallGuard,
        first: usize,
        head_tx: oneshot::Sender<DetachedHead>,
        frames_tx: mpsc::UnboundedSender<Result<Frame<Bytes>, BoxError>>,
    ) {
        let (resp, deadline) = match self.attempts(&mut up, &mut call, first).await {
            Attempted::Answer(resp, deadline) => (resp, deadline),
            Attempted::Failed(cause) => {
                let _ = head_tx.send(DetachedHead::Failed(cause));
                return;
            }
            Attempted::TimedOut => {
                let _ = head_tx.send(DetachedHead::TimedOut);
                return;
            }
        };
        let (mut parts, body) = resp.into_parts();
        self.mark_answer(&mut parts, call.upstream);
        let _ = head_tx.send(DetachedHead::Answer(parts));
        let relay = relay_frames(body, &mut call, &frames_tx);
        let finished = match deadline {
            None => {
                relay.await;
                true
            }
            Some(at) => tokio::time::timeout_at(at, relay).await.is_ok(),
        };
        if !finished {
            // The relay, and the upstream body inside it, were dropped: the
            // provider sees the call hang up.
            call.timed_out_reading();
            let _ = frames_tx.send(Err(BoxError::from(UpstreamTimedOut)));
        }
    }

    /// The head of an answer passed on: a provider's refusal (429, 503,
    /// 529) goes back as it came, status, body and Retry-After, marked
    /// `x-gateway-reason: upstream_refused` so that it is not taken for the
    /// gateway's own; with named `upstreams`, every answer says which
    /// upstream gave it (`x-gateway-upstream`).
    fn mark_answer(&self, parts: &mut http::response::Parts, upstream: usize) {
        if crate::upstream::is_refusal(parts.status) {
            let reason = ShedReason::UpstreamRefused;
            self.metrics.refused_at(reason, upstream);
            parts
                .headers
                .insert(GATEWAY_REASON, HeaderValue::from_static(reason.code()));
        }
        if self.router.named {
            parts
                .headers
                .insert(GATEWAY_UPSTREAM, self.router.route(upstream).header.clone());
        }
    }

    /// 503 `all_upstreams_cooling`: every upstream is cooling down; retry
    /// when the first cooldown ends.
    fn cooling_response(
        &self,
        left: Duration,
        arrived: Instant,
        id: &str,
    ) -> Response<GatewayBody> {
        let reason = ShedReason::AllUpstreamsCooling;
        self.metrics.refused(reason);
        self.metrics.queue_wait.observe(arrived.elapsed());
        debug!(id = %id, reason = reason.code(), left_ms = left.as_millis() as u64, "shed");
        refusal_response(
            reason,
            StatusCode::SERVICE_UNAVAILABLE,
            "every upstream is cooling down after refusing, timing out or failing; retry after the time given (when the first cooldown ends)",
            Some(left.max(Duration::from_millis(1))),
            id,
        )
    }

    /// The answer to a request shed at admission or dropped at dequeue.
    fn shed_response(&self, refusal: Refusal, id: &str) -> Response<GatewayBody> {
        let reason = refusal.reason;
        let status = match reason {
            ShedReason::QueueFull => self.queue_full_status,
            other => other
                .status()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
        };
        let message = match reason {
            ShedReason::QueueFull => "load shedding: the gateway's queue is full; retry after the time given",
            ShedReason::WouldMissDeadline => "load shedding: the work queued ahead of this request would make it miss its deadline; retry after the time given",
            _ => "load shedding: this request waited in the gateway's queue past its budget and was dropped unsent; retry after the time given",
        };
        refusal_response(reason, status, message, Some(refusal.retry_after), id)
    }

    /// 504 `upstream_timeout`, with no Retry-After: nothing says when the
    /// provider will be quicker.
    fn upstream_timeout_response(&self, id: &str) -> Response<GatewayBody> {
        let after = self.upstream_timeout.unwrap_or_default();
        let message = format!(
            "the provider did not answer within the gateway's upstream timeout of {}; the call was cancelled",
            humantime::format_duration(after)
        );
        refusal_response(
            ShedReason::UpstreamTimeout,
            StatusCode::GATEWAY_TIMEOUT,
            &message,
            None,
            id,
        )
    }

    fn too_large(&self) -> Response<GatewayBody> {
        self.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
        let mut r = error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "invalid_request_error",
            &format!("the request body is over {} bytes", self.max_body_bytes),
        );
        // The rest of the body is still on the wire, unread: the connection
        // cannot carry another request, and the caller must not try.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    }
}

/// Times one upstream call and gives its permit back when it ends: when the
/// answer is delivered, when the call fails, or when it is dropped because
/// the caller hung up.
struct CallGuard {
    shared: Arc<Shared>,
    permit: Option<Permit>,
    arrived: Instant,
    dispatched: Instant,
    /// The upstream of the attempt now, and when that attempt began.
    upstream: usize,
    attempt_started: Instant,
    status: Option<StatusCode>,
    ended: bool,
    /// The pooled connection the answer comes on, and when it was had.
    connection: Option<OwnedSemaphorePermit>,
    connected: Option<Instant>,
    /// The request as the caller sent it, kept until the call ends, as a
    /// gateway does that may retry, fall back or log it: what the gateway
    /// holds per call is the prompt, in every mode. (In naive mode that is
    /// what makes an unbounded backlog show in its memory.)
    _request: Bytes,
}

impl CallGuard {
    fn new(
        shared: Arc<Shared>,
        permit: Permit,
        arrived: Instant,
        dispatched: Instant,
        request: Bytes,
    ) -> CallGuard {
        shared.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        CallGuard {
            shared,
            permit: Some(permit),
            arrived,
            dispatched,
            upstream: 0,
            attempt_started: dispatched,
            status: None,
            ended: false,
            connection: None,
            connected: None,
            _request: request,
        }
    }

    /// An attempt at upstream `at` begins.
    fn attempt(&mut self, at: usize, started: Instant) {
        self.upstream = at;
        self.attempt_started = started;
        self.shared.metrics.upstreams[at]
            .calls
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The attempt's upstream refused, timed out or failed, and the request
    /// goes on to the next: its call's time is counted at its upstream.
    fn sent_on(&mut self) {
        let m = &self.shared.metrics.upstreams[self.upstream];
        m.seconds.observe(self.attempt_started.elapsed());
        m.sent_on.fetch_add(1, Ordering::Relaxed);
    }

    /// The provider answered (its head): keeps the connection until the
    /// answer is read.
    fn answered(&mut self, answer: Answer) -> Response<Incoming> {
        self.status = Some(answer.response.status());
        self.connection = answer.connection;
        self.connected = Some(answer.connected);
        answer.response
    }

    /// The answer was read to its end.
    fn completed(&mut self) {
        let m = &self.shared.metrics;
        // The provider's time: from dispatch, which includes any wait for
        // a pooled connection, unless that wait is metered apart.
        let since = match self.connected {
            Some(at) if self.shared.client.split_pool_wait() => at,
            _ => self.attempt_started,
        };
        m.upstreams[self.upstream].seconds.observe(since.elapsed());
        m.end_to_end.observe(self.arrived.elapsed());
        self.connection.take();
        let outcome = match self.status.map(|s| s.as_u16()) {
            Some(200..=299) => CallOutcome::Success,
            Some(429 | 503 | 529) => CallOutcome::Overloaded,
            _ => CallOutcome::Other,
        };
        if let Some(p) = self.permit.as_mut() {
            p.finish(outcome);
        }
        self.ended = true;
    }

    /// `upstream_timeout` passed; the call is being dropped. For the AIMD
    /// limit this is a call past any latency target.
    fn timed_out(&mut self) {
        self.shared
            .metrics
            .refused_at(ShedReason::UpstreamTimeout, self.upstream);
        if let Some(p) = self.permit.as_mut() {
            p.finish(CallOutcome::Overloaded);
        }
        self.ended = true;
        if let Some(faults) = &self.shared.faults {
            faults.leak(&mut self.permit, &mut self.connection);
        }
        debug!("upstream call cancelled: upstream_timeout passed");
    }

    /// `upstream_timeout` passed while the answer was being read (its head
    /// already passed on): the call is cut, and its upstream cooled down
    /// for `cooldown`, as one that timed out before answering is.
    fn timed_out_reading(&mut self) {
        self.timed_out();
        let router = &self.shared.router;
        let wait = router.cooldown_for(None);
        if router.cool(self.upstream, wait, Instant::now()) {
            self.shared.metrics.upstreams[self.upstream]
                .cooldowns
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The upstream could not be reached or broke.
    fn failed(&mut self) {
        self.shared.metrics.upstreams[self.upstream]
            .errors
            .fetch_add(1, Ordering::Relaxed);
        if let Some(p) = self.permit.as_mut() {
            p.finish(CallOutcome::Overloaded);
        }
        self.ended = true;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let m = &self.shared.metrics;
        m.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.ended {
            m.cancelled_upstream.fetch_add(1, Ordering::Relaxed);
            debug!("upstream call cancelled: the caller hung up");
            if let Some(faults) = &self.shared.faults {
                faults.leak(&mut self.permit, &mut self.connection);
            }
        }
        // Dropping the permit hands the slot to the next job, and the
        // connection to the next call.
        self.permit.take();
        self.connection.take();
    }
}

/// What naive mode's detached call hands back first.
enum DetachedHead {
    /// The upstream's answer began: its head.
    Answer(http::response::Parts),
    /// The upstream could not be reached (why).
    Failed(String),
    /// `upstream_timeout` passed before any answer.
    TimedOut,
}

/// The error that ends an answer whose upstream timeout passed after its
/// head was sent: the only way left to tell the caller it is cut short.
#[derive(Debug)]
struct UpstreamTimedOut;

impl std::fmt::Display for UpstreamTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("upstream_timeout passed before the answer ended; the call was cancelled")
    }
}

impl std::error::Error for UpstreamTimedOut {}

/// The upstream's body, passed through frame by frame as it arrives, with
/// the call's guard riding along until the last frame, and the upstream
/// timeout still running.
struct GuardedBody {
    inner: Incoming,
    call: Option<CallGuard>,
    deadline: Option<Pin<Box<Sleep>>>,
    timed_out: bool,
}

impl GuardedBody {
    fn complete(&mut self) {
        if let Some(mut call) = self.call.take() {
            call.completed();
        }
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending() {
            // Nothing from the upstream yet: is its time up?
            let expired = this
                .deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready());
            if expired && this.call.is_some() {
                this.timed_out = true;
                if let Some(mut call) = this.call.take() {
                    call.timed_out_reading();
                }
                return Poll::Ready(Some(Err(BoxError::from(UpstreamTimedOut))));
            }
            return Poll::Pending;
        }
        match &polled {
            Poll::Ready(None) => this.complete(),
            // hyper stops polling a body of known length once its last byte
            // is written, so the end is noticed here, not only at `None`.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.complete(),
            Poll::Ready(Some(Err(_))) => {
                if let Some(mut call) = this.call.take() {
                    call.failed();
                }
            }
            _ => {}
        }
        polled.map(|f| f.map(|r| r.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.call.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        // Dropped after the upstream's last byte: delivered, not cancelled.
        if self.inner.is_end_stream() {
            self.complete();
        }
    }
}

/// Frames handed over by a detached task (naive mode's, `no-cancel`'s).
pub(crate) struct ChannelBody {
    rx: mpsc::UnboundedReceiver<Result<Frame<Bytes>, BoxError>>,
}

impl ChannelBody {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Result<Frame<Bytes>, BoxError>>) -> Self {
        ChannelBody { rx }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx.poll_recv(cx)
    }
}

/// Naive mode's relay of an answer's body: every frame to `frames_tx`,
/// read to the end whether or not anyone still listens.
async fn relay_frames(
    mut body: Incoming,
    call: &mut CallGuard,
    frames_tx: &mpsc::UnboundedSender<Result<Frame<Bytes>, BoxError>>,
) {
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                // A closed receiver is ignored: no notice of the caller
                // hanging up.
                let _ = frames_tx.send(Ok(f));
            }
            Err(e) => {
                call.failed();
                let _ = frames_tx.send(Err(BoxError::from(e)));
                return;
            }
        }
    }
    call.completed();
}

/// The call's id by the one rule ([`wire::request_id`]: `x-request-id`
/// trimmed and at most 128 bytes, else the `[rehearse:id=...]` marker),
/// else `-`.
fn request_id(headers: &HeaderMap, body: &[u8]) -> String {
    let header = headers.get(REQUEST_ID).map(HeaderValue::as_bytes);
    wire::request_id(header, body).unwrap_or("-").to_string()
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Copies the caller's headers to the upstream request, except those that
/// belong to one connection (and `host`, which the client sets).
fn copy_request_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if !is_hop_by_hop(name) && name != header::HOST {
            to.append(name.clone(), value.clone());
        }
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
}

fn full(text: impl Into<Bytes>) -> GatewayBody {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An error answer in the OpenAI shape: `{"error": {message, type, param, code}}`.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    kind: &str,
    message: &str,
) -> Response<GatewayBody> {
    let body = serde_json::json!({
        "error": { "message": message, "type": kind, "param": null, "code": code }
    });
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn bad_gateway(cause: &str) -> Response<GatewayBody> {
    error_response(
        StatusCode::BAD_GATEWAY,
        "upstream_unreachable",
        "api_error",
        &format!("the upstream provider could not be reached: {cause}"),
    )
}

/// A refusal the gateway writes itself, one row of its refusal table: the
/// row's status and `code` (in the body and in `x-gateway-reason`, and in
/// `x-gateway-shed` too when the provider was never called), and
/// Retry-After in seconds and in milliseconds when the row has one.
pub(crate) fn refusal_response(
    reason: ShedReason,
    status: StatusCode,
    message: &str,
    retry_after: Option<Duration>,
    id: &str,
) -> Response<GatewayBody> {
    let kind = match status {
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_exceeded",
        StatusCode::SERVICE_UNAVAILABLE => "overloaded",
        _ => "api_error",
    };
    let mut r = error_response(status, reason.code(), kind, message);
    let h = r.headers_mut();
    if let Some(wait) = retry_after {
        let (secs, ms) = wire::retry_after_values(wait);
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        h.insert(RETRY_AFTER_MS, HeaderValue::from(ms));
    }
    let code = HeaderValue::from_static(reason.code());
    if reason.before_dispatch() {
        h.insert(GATEWAY_SHED, code.clone());
    }
    h.insert(GATEWAY_REASON, code);
    if let Ok(v) = HeaderValue::from_str(id) {
        h.insert(REQUEST_ID, v);
    }
    r
}

/// 429 `tenant_limited`: the tenant's rate-limit headers as a provider
/// sends them (`x-ratelimit-*` always, and Anthropic's names too on an
/// Anthropic request), and a Retry-After from its bucket: when this
/// request would fit. A request larger than the whole bucket never fits
/// and gets no Retry-After (a number there would be a lie the client acts
/// on).
fn tenant_limited_response(
    limited: &OverEntitlement,
    dialect: Dialect,
    id: &str,
) -> Response<GatewayBody> {
    let q = &limited.refusal;
    let what = match q.limit {
        QuotaLimit::Requests => "requests",
        QuotaLimit::Tokens => "tokens",
    };
    let message = match q.retry_after {
        Some(_) => format!(
            "rate limit: this API key is over its entitlement of {} {what} per minute (requested {}); retry after the time given",
            q.limit_value, q.requested
        ),
        // What never fits is what the bucket holds: the entitlement per
        // minute, or one scenario minute of it in a time-scaled rehearsal.
        None => format!(
            "rate limit: this request ({} {what}) is larger than this API key's whole entitlement of {} {what} per minute; it can never be served",
            q.requested, q.capacity
        ),
    };
    let mut r = refusal_response(
        ShedReason::TenantLimited,
        StatusCode::TOO_MANY_REQUESTS,
        &message,
        q.retry_after,
        id,
    );
    let mut dialects = vec![Dialect::OpenAi];
    if dialect == Dialect::Anthropic {
        dialects.push(Dialect::Anthropic);
    }
    for d in dialects {
        for (name, value) in ratelimit_headers(d, &limited.snapshot, limited.now_us) {
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(name, v);
            }
        }
    }
    r
}

/// An error and its causes on one line ("connect error: Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refusals_carry_their_reason_and_retry_after_when_their_row_has_one() {
        let r = refusal_response(
            ShedReason::WaitExpired,
            StatusCode::SERVICE_UNAVAILABLE,
            "dropped",
            Some(Duration::from_millis(2_345)),
            "r-1",
        );
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "3");
        assert_eq!(r.headers()["retry-after-ms"], "2345");
        assert_eq!(r.headers()["x-request-id"], "r-1");
        assert_eq!(r.headers()["x-gateway-reason"], "wait_expired");
        assert_eq!(r.headers()["x-gateway-shed"], "wait_expired");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "wait_expired");
        assert_eq!(v["error"]["type"], "overloaded");

        let r = refusal_response(
            ShedReason::UpstreamTimeout,
            StatusCode::GATEWAY_TIMEOUT,
            "too slow",
            None,
            "r-2",
        );
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(r.headers().get("retry-after").is_none());
        assert!(r.headers().get("retry-after-ms").is_none());
        assert_eq!(r.headers()["x-gateway-reason"], "upstream_timeout");
        assert!(
            r.headers().get("x-gateway-shed").is_none(),
            "the provider was called"
        );
    }

    #[test]
    fn a_tenant_over_its_entitlement_gets_its_rate_limit_headers() {
        let limited = OverEntitlement {
            refusal: wire::QuotaRefusal {
                limit: QuotaLimit::Tokens,
                retry_after: Some(Duration::from_millis(1500)),
                limit_value: 600,
                capacity: 600,
                requested: 200,
            },
            snapshot: wire::QuotaSnapshot {
                requests: None,
                tokens: Some((600, 100, Duration::from_secs(50))),
            },
            now_us: 0,
        };
        let r = tenant_limited_response(&limited, Dialect::OpenAi, "t-1");
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = r.headers();
        assert_eq!(h["x-gateway-reason"], "tenant_limited");
        assert_eq!(h["x-ratelimit-limit-tokens"], "600");
        assert_eq!(h["x-ratelimit-remaining-tokens"], "100");
        assert_eq!(h["x-ratelimit-reset-tokens"], "50s");
        assert_eq!(h["retry-after"], "2");
        assert!(h.get("anthropic-ratelimit-tokens-remaining").is_none());
        let r = tenant_limited_response(&limited, Dialect::Anthropic, "t-2");
        assert_eq!(r.headers()["anthropic-ratelimit-tokens-remaining"], "100");
        assert_eq!(r.headers()["x-ratelimit-remaining-tokens"], "100");
        let never = OverEntitlement {
            refusal: wire::QuotaRefusal {
                retry_after: None,
                ..limited.refusal
            },
            ..limited
        };
        let r = tenant_limited_response(&never, Dialect::OpenAi, "t-3");
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().get("retry-after").is_none());
    }

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut from = HeaderMap::new();
        from.insert("x-request-id", HeaderValue::from_static("a"));
        from.insert("connection", HeaderValue::from_static("close"));
        from.insert("host", HeaderValue::from_static("gw"));
        from.insert("authorization", HeaderValue::from_static("Bearer k"));
        let mut to = HeaderMap::new();
        copy_request_headers(&from, &mut to);
        assert_eq!(to.len(), 2);
        assert_eq!(to["x-request-id"], "a");
        assert!(to.get("connection").is_none() && to.get("host").is_none());
    }

    #[test]
    fn request_id_falls_back_to_the_prompt_marker() {
        let mut h = HeaderMap::new();
        assert_eq!(request_id(&h, b"[rehearse:id=m-1] x"), "m-1");
        h.insert("x-request-id", HeaderValue::from_static("h-1"));
        assert_eq!(request_id(&h, b"[rehearse:id=m-1] x"), "h-1");
        assert_eq!(request_id(&HeaderMap::new(), b"{}"), "-");
        // The provider's rule: trimmed, and a header too long is no id.
        h.insert("x-request-id", HeaderValue::from_static("  h-2 "));
        assert_eq!(request_id(&h, b"[rehearse:id=m-1] x"), "h-2");
        let long = HeaderValue::from_str(&"h".repeat(129)).unwrap();
        h.insert("x-request-id", long);
        assert_eq!(request_id(&h, b"[rehearse:id=m-1] x"), "m-1");
        assert_eq!(request_id(&h, b"{}"), "-");
    }
}
