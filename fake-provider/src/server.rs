//! The HTTP server: routing, and one call's life (quota, ceiling, faults,
//! latency, answer). The admin API and the metrics are in `admin`.

use std::io;
use std::net::SocketAddr;
use std::ops::ControlFlow::{self, Break, Continue};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use wire::headers::{
    ANTHROPIC_REQUEST_ID, ANTHROPIC_VERSION, REQUEST_ID, RETRY_AFTER, RETRY_AFTER_MS, X_API_KEY,
};
use wire::{
    go_duration, ratelimit_headers, retry_after_values, Api, Clock, Dialect, ProviderOutcome,
    ProviderRecord, QuotaLimit, QuotaRefusal, QuotaSnapshot,
};

use crate::ceiling::{Admission, Ceiling, Permit};
use crate::config::{Down, Effective, Overflow, Overrides, ProviderConfig};
use crate::counters::{Gauges, Stats};
use crate::dialect::{Answer, BadRequest, Finish, ProviderDialect, Request as CallRequest};
use crate::head_timer::HeadTimer;
use crate::records::{RecordFile, RecordsWritten};
use crate::run::{AdminRefusal, Book, ResetRequest, Run, RunInfo};
use crate::shared::{
    full, json_response, lock, read_body, respond, Body, Control, Shared, UnknownPhase,
};
// Scripted delays use the provider's own sub-millisecond timer, not
// tokio's millisecond wheel.
use crate::timer::sleep_until;

/// The chaos fake provider, configured and ready to serve.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use fake_provider::{FakeProvider, ProviderConfig};
/// let provider = FakeProvider::new(ProviderConfig::default())
///     .bind("127.0.0.1:0")
///     .await
///     .unwrap();
/// let url = format!("{}/v1/models", provider.base_url());
/// assert!(url.starts_with("http://127.0.0.1:"));
/// provider.shutdown().await;
/// # });
/// ```
pub struct FakeProvider {
    config: ProviderConfig,
    records_to: Option<PathBuf>,
    records_max_bytes: u64,
    clock_offset_us: i64,
}

impl FakeProvider {
    /// A provider with this (already validated) configuration. It records
    /// to a file in a temporary directory (removed when it stops) unless
    /// [`FakeProvider::record_to`] names one.
    pub fn new(config: ProviderConfig) -> Self {
        FakeProvider {
            config,
            records_to: None,
            records_max_bytes: u64::MAX,
            clock_offset_us: 0,
        }
    }

    /// Writes each call's record, one JSON line when the call ends, to
    /// `path` (kept when the provider stops). A non-empty file already
    /// there (an earlier run's) is renamed `path.1`, an earlier `path.1`
    /// to `path.2`, and so on. The directory must exist.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use fake_provider::{FakeProvider, ProviderConfig};
    /// let dir = std::env::temp_dir().join(format!("doc-record-to-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join(wire::files::PROVIDER_RECORDS);
    /// let provider = FakeProvider::new(ProviderConfig::default())
    ///     .record_to(&path)
    ///     .bind("127.0.0.1:0")
    ///     .await
    ///     .unwrap();
    /// assert_eq!(provider.records_path(), path);
    /// assert_eq!(provider.sync_records().await.records, 0);
    /// provider.shutdown().await;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # });
    /// ```
    pub fn record_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.records_to = Some(path.into());
        self
    }

    /// Caps the bytes of the record file and its earlier runs' files
    /// (`path.1`, `path.2`, ...) together; no cap by default. Past it the
    /// oldest run's file is deleted first; once the current run's file
    /// alone would pass it, later records are dropped and counted
    /// ([`Stats::records_dropped`]), and a warning is logged once.
    pub fn records_max_bytes(mut self, max: u64) -> Self {
        self.records_max_bytes = max;
        self
    }

    /// For tests only: shifts every time the provider gives (its records,
    /// `GET /_fake/time`, a reset's `start_at_unix_ms`, rate-limit reset
    /// dates) by `ms` milliseconds, as if its machine's clock were that
    /// far off. Durations it measures are unchanged.
    pub fn clock_offset_ms(mut self, ms: i64) -> Self {
        self.clock_offset_us = ms.saturating_mul(1000);
        self
    }

    /// Binds `addr` (with a deep accept queue: [`crate::listen`]) and
    /// serves on the current tokio runtime.
    pub async fn bind(self, addr: impl ToSocketAddrs) -> io::Result<ProviderHandle> {
        let listener = crate::listen(addr).await?;
        self.serve(listener)
    }

    /// Serves on an already bound listener, on the current tokio runtime.
    /// The provider's clock and its first run (and that run's timeline)
    /// start now. Fails if the record file cannot be rotated or opened.
    pub fn serve(self, listener: TcpListener) -> io::Result<ProviderHandle> {
        let addr = listener.local_addr()?;
        let records = RecordFile::open(self.records_to, self.records_max_bytes)?;
        let shutdown = CancellationToken::new();
        let clock = Clock::new().shifted(self.clock_offset_us);
        let mut config = self.config;
        // The token is the process's: no uploaded config can change it.
        let admin_token = config.admin_token.take();
        let first = format!("run-{}-0", clock.now_us() / 1000);
        let run = Run::new(first, 0, config, 0, &clock, clock.start());
        let shared = Arc::new(Shared {
            admin_token,
            clock,
            ceiling: Ceiling::default(),
            records,
            gauges: Gauges::default(),
            down: crate::down::DownState::default(),
            control: RwLock::new(Control {
                pinned: None,
                overrides: None,
                generation: 0,
                run: Arc::new(run),
            }),
            cache: Mutex::new(None),
            book: Mutex::new(Book::default()),
            resetting: tokio::sync::Mutex::new(()),
            shutdown: shutdown.clone(),
        });
        tokio::spawn(follow_down(shared.clone()));
        let task = tokio::spawn(accept_loop(listener, addr, shared.clone()));
        Ok(ProviderHandle {
            shared,
            addr,
            task: Some(task),
        })
    }
}

/// A running provider. Dropping it stops the server (without waiting) and
/// removes a temporary record file; [`ProviderHandle::shutdown`] waits.
pub struct ProviderHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProviderHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the base URL to give an SDK or a gateway (SDKs add
    /// `/v1/...` themselves when given `{base_url}/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every finished call so far, in the order they finished, read back
    /// from the record file once every record handed to the writer is
    /// written. Reads the whole file into memory: for tests and small
    /// runs (a long run's reader streams the file, or `GET
    /// /_fake/records?after=N`). Blocks the thread while the writer
    /// catches up (briefly: the writer is a thread of its own).
    pub fn records(&self) -> Vec<ProviderRecord> {
        self.shared.records.read_all()
    }

    /// The record file: one JSON line per finished call, in the order
    /// they finished. A reader while the provider runs reads whole lines
    /// up to [`ProviderHandle::sync_records`]'s `bytes`.
    pub fn records_path(&self) -> &Path {
        self.shared.records.path()
    }

    /// Waits until every call finished so far has its record written, and
    /// says what the file then holds.
    pub async fn sync_records(&self) -> RecordsWritten {
        self.shared.records.sync().await
    }

    /// Live counts.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The instant the current run's timeline starts (`t = 0` of its
    /// phases): when the provider started, until a reset names another.
    pub fn started(&self) -> Instant {
        self.shared.run().timeline_start
    }

    /// The current run: its id, its config's version, its lease.
    pub fn run_info(&self) -> RunInfo {
        self.shared.run_info(None)
    }

    /// Starts a new run, as `POST /_fake/reset` does (see [`ResetRequest`]).
    pub async fn reset(&self, request: ResetRequest) -> Result<RunInfo, AdminRefusal> {
        self.shared.reset(request).await
    }

    /// Pins the timeline to the named phase (`None`: back to the clock).
    pub fn set_phase(&self, name: Option<&str>) -> Result<(), UnknownPhase> {
        self.shared.set_phase(name)
    }

    /// Sets overrides on top of the timeline (`None` clears them).
    pub fn set_overrides(&self, overrides: Option<Overrides>) {
        self.shared.set_overrides(overrides)
    }

    /// Stops accepting, ends open connections gracefully and waits; calls
    /// still open are recorded (hung up), then the record file is written
    /// and closed (a temporary one removed) before this returns, saying
    /// what the file holds.
    pub async fn shutdown(mut self) -> RecordsWritten {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.shared.records.close().await
    }
}

impl Drop for ProviderHandle {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        self.shared.records.remove_if_temporary();
    }
}

/// Follows the timeline until the provider shuts down: publishes whether
/// it is down, and cuts every connection when a down phase begins and
/// when a `hang` phase ends.
async fn follow_down(shared: Arc<Shared>) {
    let mut current: Option<Down> = None;
    loop {
        // Registered before reading, so a change made meanwhile is seen.
        let changed = shared.down.changed.notified();
        let now = Instant::now();
        let (run, mask, pinned) = shared.phases_at(now);
        let down = crate::down::down_of(&run.config.timeline, mask);
        if down != current {
            // Said first, so that a connection accepted meanwhile is
            // refused and a call arriving meanwhile hangs.
            shared.down.set(down);
            if down.is_some() || current == Some(Down::Hang) {
                shared.down.cut_all();
            }
            current = down;
        }
        let next = if pinned { None } else { run.next_change(now) };
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            _ = changed => {}
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

async fn accept_loop(listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut listener = Some(listener);
    let mut down = shared.down.subscribe();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        // A `refuse` phase closes the listener; its end opens it again on
        // the same port (SO_REUSEADDR: the cut connections' TIME_WAIT
        // does not hold the port).
        let refusing = *down.borrow_and_update() == Some(Down::Refuse);
        if refusing {
            listener = None;
        } else if listener.is_none() {
            match crate::listen(addr).await {
                Ok(l) => listener = Some(l),
                Err(err) => {
                    warn!(%addr, cause = %err, "cannot listen again after a down phase; retrying");
                    tokio::select! {
                        _ = shared.shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                    continue;
                }
            }
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            _ = down.changed() => {}
            accepted = accept_on(listener.as_ref()) => match accepted {
                Ok((stream, peer)) => {
                    if shared.down.refusing() {
                        // Taken in the instant before the listener closed.
                        reset_now(&stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    conns.spawn(serve_connection(stream, peer, shared.clone()));
                }
                Err(err) => {
                    // Out of file descriptors, most likely: back off a
                    // little instead of spinning, and keep serving.
                    warn!(cause = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            // Reap finished connection tasks so the set stays small.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Give open connections a moment to finish what they are writing.
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        conns.abort_all();
        // An aborted task's future (and the calls in it, which record
        // themselves as they drop) is dropped by the time it is joined:
        // after this, every call is recorded.
        while conns.join_next().await.is_some() {}
    }
}

/// The next connection on `listener`; never, without one.
async fn accept_on(
    listener: Option<&TcpListener>,
) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// SO_LINGER 0 on `socket`: closing it then sends a reset.
fn reset_now(socket: &impl AsRawFd) {
    // SAFETY: the descriptor belongs to a socket the caller holds open for
    // the length of this call; only an option is set on it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(socket.as_raw_fd()) };
    let _ = socket2::SockRef::from(&borrowed).set_linger(Some(Duration::ZERO));
}

async fn serve_connection(stream: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let fd = stream.as_raw_fd();
    let cut = shared.down.connection_token();
    let svc_shared = shared.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = svc_shared.clone();
        async move { route(shared, req, peer, fd).await }
    });
    let header_read_timeout = shared.run().config.header_read_timeout;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(HeadTimer::default())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(64 * 1024)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(err) = res {
                debug!(%peer, cause = %err, "connection ended with an error");
            }
        }
        _ = shared.shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
        _ = cut.cancelled() => {
            // A down phase began (or a hang ended): the peer sees a
            // reset, and the calls in the connection record themselves as
            // it drops.
            // SAFETY: `fd` is this connection's socket, which `conn` owns
            // and keeps open until it drops at the end of this function;
            // only an option is set on it.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            let _ = socket2::SockRef::from(&borrowed).set_linger(Some(Duration::ZERO));
        }
    }
}

/// An error that makes hyper drop the connection; with SO_LINGER 0 set just
/// before, the peer sees a reset.
#[derive(Debug, thiserror::Error)]
#[error("connection reset by fault injection")]
struct ResetConnection;

type RouteResult = Result<Response<Body>, ResetConnection>;

/// Where a request goes, decided on its borrowed path (no copy of it).
enum Route {
    Call(Api),
    Azure,
    Models,
    Health,
    Admin,
    MethodNotAllowed,
    NotFound,
}

fn route_of(method: &Method, path: &str) -> Route {
    let api = match path {
        "/v1/chat/completions" => Some(Api::Chat),
        "/v1/messages" => Some(Api::Messages),
        "/v1/responses" => Some(Api::Responses),
        "/v1/embeddings" => Some(Api::Embeddings),
        _ => None,
    };
    match (method, api) {
        (&Method::POST, Some(api)) => Route::Call(api),
        (&Method::POST, None) if crate::api::azure_route(path).is_some() => Route::Azure,
        (&Method::GET, None) if path == "/v1/models" => Route::Models,
        (&Method::GET | &Method::HEAD, None) if path == "/health" => Route::Health,
        _ if path.starts_with("/_fake/") || path == "/metrics" => Route::Admin,
        (_, Some(_)) => Route::MethodNotAllowed,
        _ if path == "/v1/models" => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

async fn route(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
    fd: RawFd,
) -> RouteResult {
    match route_of(req.method(), req.uri().path()) {
        Route::Call(api) => call(shared, req, api, None, fd).await,
        Route::Azure => azure(shared, req, fd).await,
        // A hung worker answers nothing: the hang's end cuts these.
        Route::Models | Route::Health if shared.down.hanging() => Ok(held(&shared).await),
        Route::Models => Ok(models(&shared, req.headers())),
        Route::Health => Ok(health(&shared)),
        Route::Admin => Ok(crate::admin::admin(shared, req, peer).await),
        Route::MethodNotAllowed => Ok(simple_error(
            Dialect::OpenAi,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        )),
        Route::NotFound => Ok(simple_error(
            dialect_of(req.headers()),
            StatusCode::NOT_FOUND,
            &format!("no route for {}", req.uri().path()),
        )),
    }
}

/// `GET /health` as vLLM answers it (200, empty body) so routers'
/// health checks pass; 503 while a timeline phase says
/// `health = "failing"`. `HEAD` gets the same status.
fn health(shared: &Shared) -> Response<Body> {
    let status = if shared.healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // hyper sends no body for HEAD: one answer serves both methods.
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// A request held unanswered in a `hang` phase: the phase's end cuts its
/// connection; shutdown answers it 503.
async fn held(shared: &Shared) -> Response<Body> {
    shared.shutdown.cancelled().await;
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}

/// An Azure OpenAI call: its `api-version` required, its deployment one
/// of the provider's models (else Azure's 404), then a call like any other
/// with the deployment as its model.
async fn azure(shared: Arc<Shared>, req: Request<Incoming>, fd: RawFd) -> RouteResult {
    let path = req.uri().path().to_string();
    let Some((deployment, api)) = crate::api::azure_route(&path) else {
        return Ok(simple_error(
            Dialect::OpenAi,
            StatusCode::NOT_FOUND,
            "no route",
        ));
    };
    if crate::api::api_version(req.uri().query()).is_none() {
        let body = crate::api::azure_error(
            "404",
            "Resource not found: the api-version query parameter is required.",
        );
        return Ok(json_response(StatusCode::NOT_FOUND, body));
    }
    if !shared.run().config.models.iter().any(|m| m == deployment) {
        let body = crate::api::azure_error(
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
        );
        return Ok(json_response(StatusCode::NOT_FOUND, body));
    }
    let deployment = deployment.to_string();
    call(shared, req, api, Some(deployment), fd).await
}

fn dialect_of(headers: &HeaderMap) -> Dialect {
    if headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(X_API_KEY) {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

fn simple_error(dialect: Dialect, status: StatusCode, message: &str) -> Response<Body> {
    json_response(
        status,
        dialect.error_body(status.as_u16(), message, None, None),
    )
}

fn models(shared: &Shared, headers: &HeaderMap) -> Response<Body> {
    let created = shared.clock.now_us() / 1_000_000;
    let run = shared.run();
    let models = &run.config.models;
    let body = match dialect_of(headers) {
        Dialect::OpenAi => serde_json::json!({
            "object": "list",
            "data": models.iter().map(|m| serde_json::json!({
                "id": m, "object": "model", "created": created, "owned_by": "rehearse",
            })).collect::<Vec<_>>(),
        }),
        Dialect::Anthropic => serde_json::json!({
            "data": models.iter().map(|m| serde_json::json!({
                "type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z",
            })).collect::<Vec<_>>(),
            "has_more": false,
            "first_id": models.first(),
            "last_id": models.last(),
        }),
    };
    json_response(StatusCode::OK, body.to_string())
}

/// The call's id by the one rule ([`wire::request_id`]), else `fake-N`.
fn request_id(headers: &HeaderMap, body: &[u8], seq: u64) -> String {
    let header = headers.get(REQUEST_ID).map(HeaderValue::as_bytes);
    wire::request_id(header, body)
        .map_or_else(|| crate::api::prefixed_number("fake-", seq), str::to_string)
}

/// Everything a call holds while it lives. Whatever way the call ends,
/// dropping this writes its record, gives back unused quota and frees its
/// place under the ceiling; if the answer was not complete by then, the
/// caller hung up.
struct CallGuard {
    shared: Arc<Shared>,
    /// The run the call arrived in: its counts, quota and record file.
    run: Arc<Run>,
    record: ProviderRecord,
    /// When the call arrived (`record.received_us` on the monotonic clock).
    received: Instant,
    permit: Option<Permit>,
    queued: bool,
    done: bool,
    /// The provider's cuts ([`crate::down`]) when the call arrived: one
    /// since, and the call did not end by itself, means a down phase cut
    /// it.
    cut_epoch: u64,
    /// The index of its model's vLLM series in its run's counters
    /// ([`usize::MAX`] until admission looks it up).
    model_slot: usize,
}

impl CallGuard {
    /// Its model's vLLM series (once admission has looked it up).
    fn model(&self) -> &crate::counters::ModelSeries {
        &self.run.counters.by_model[self.model_slot]
    }

    fn finish(&mut self, outcome: ProviderOutcome, status: u16) {
        self.record.outcome = outcome;
        self.record.status = status;
        self.done = true;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.queued {
            self.shared.gauges.queued.fetch_sub(1, Ordering::Relaxed);
            self.model().waiting.fetch_sub(1, Ordering::Relaxed);
        }
        // A call that ended by itself has its times already.
        if !self.done || self.record.finished_us.is_none() {
            let now = self.shared.clock.now_us();
            if !self.done && self.shared.down.epoch() != self.cut_epoch {
                // The provider went down under it: cut, not hung up (a
                // call already hanging stays `hang`).
                if self.record.outcome != ProviderOutcome::Hang {
                    self.record.outcome = ProviderOutcome::Reset;
                }
                self.record.status = 0;
            } else if !self.done {
                self.record.hung_up_us = Some(now);
            }
            self.record.finished_us.get_or_insert(now);
        }
        if self.record.reserved_tokens > 0 {
            let used = if self.record.admitted_us.is_some() {
                self.record.prompt_tokens as u64 + self.record.completion_tokens as u64
            } else {
                0
            };
            let secs = self.shared.clock.secs();
            let mut q = lock(&self.run.quota);
            if self.record.admitted_us.is_some() {
                q.settle(self.record.reserved_tokens, used, secs);
            } else if !matches!(self.record.outcome, ProviderOutcome::QuotaExceeded) {
                q.cancel(self.record.reserved_tokens, secs);
            }
        }
        if self.permit.take().is_some() {
            self.model().running.fetch_sub(1, Ordering::Relaxed);
        }
        let slot = match self.model_slot {
            usize::MAX => self.run.counters.model_slot(&self.record.model),
            slot => slot,
        };
        self.run.counters.finished(&self.record, slot);
        let name = self.run.config.name.as_deref();
        // The run's id is the record file's to write (no copy a call).
        self.shared
            .records
            .push_named(self.run.number, &self.record, &self.run.id, name);
        // Out of flight only once its record is queued: whoever waits for
        // `in_flight == 0` and then syncs the records finds this one.
        self.shared.gauges.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn empty_record() -> ProviderRecord {
    ProviderRecord {
        id: String::new(),
        run_id: String::new(),
        seq: 0,
        dialect: Dialect::OpenAi,
        api: Api::Chat,
        model: String::new(),
        stream: false,
        received_us: 0,
        admitted_us: None,
        first_byte_us: None,
        finished_us: None,
        hung_up_us: None,
        prompt_tokens: 0,
        max_tokens: None,
        completion_tokens: 0,
        reserved_tokens: 0,
        phase: String::new(),
        outcome: ProviderOutcome::Ok,
        status: 0,
        retry_after_s: None,
        retry_after_ms: None,
        // The provider's name is written into the line by the record file
        // (it is the provider's, not the call's: no copy per call).
        provider: None,
    }
}

/// The response headers of a call: rate limits, request id.
fn call_headers(
    dialect: Dialect,
    id: &str,
    snap: Option<QuotaSnapshot>,
    clock: &Clock,
) -> HeaderMap {
    // Made once: `HeaderName::from_static` checks its name each call.
    static OPENAI_ID: HeaderName = HeaderName::from_static(REQUEST_ID);
    static ANTHROPIC_ID: HeaderName = HeaderName::from_static(ANTHROPIC_REQUEST_ID);
    let mut h = HeaderMap::new();
    let mut put = |name: &HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name.clone(), v);
        }
    };
    match dialect {
        Dialect::OpenAi => put(&OPENAI_ID, id),
        Dialect::Anthropic => put(&ANTHROPIC_ID, id),
    }
    if let Some(snap) = snap {
        for (name, value) in ratelimit_headers(dialect, &snap, clock.now_us()) {
            put(&HeaderName::from_static(name), &value);
        }
    }
    h
}

/// The fault drawn for one call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    Status(u16),
    Reset,
    Hang,
    StreamCut,
    Malformed,
}

fn draw_fault(eff: &Effective, u: f64) -> Fault {
    let mut acc = 0.0;
    for (status, rate) in &eff.faults.errors {
        acc += rate;
        if u < acc {
            return Fault::Status(status.parse().unwrap_or(500));
        }
    }
    for (fault, rate) in [
        (Fault::Reset, eff.faults.reset),
        (Fault::Hang, eff.faults.hang),
        (Fault::StreamCut, eff.faults.stream_cut),
        (Fault::Malformed, eff.faults.malformed),
    ] {
        acc += rate;
        if u < acc {
            return fault;
        }
    }
    Fault::None
}

/// The draws of [`CallGuard::draw`] from the call's random stream
/// (`stream`: the provider's seed and the call's sequence number), with
/// `in_service` calls in service.
fn draw_for(
    eff: &Effective,
    stream: (u64, u64),
    in_service: u32,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Draw {
    let mut rng = CallRng::new(stream);
    let f = &eff.faults;
    let no_fault = f.errors.values().all(|r| *r <= 0.0)
        && [f.reset, f.hang, f.stream_cut, f.malformed]
            .iter()
            .all(|r| *r <= 0.0);
    // With every rate 0 the fault is none whatever is drawn: its draw is
    // only skipped over, if a later draw needs the stream at all.
    let fault = if no_fault {
        rng.skip_f64();
        Fault::None
    } else {
        draw_fault(eff, rng.gen::<f64>())
    };
    let m = eff.latency.multiplier
        * crate::curve::load_factor(in_service, eff.latency.knee, eff.latency.knee_exponent);
    // Reading the prompt comes before the first token; no draw, so the
    // seeded draws stay those of a provider without it.
    let prefill = eff.latency.prefill_per_token.0 * prompt_tokens;
    let ttft = (eff.latency.ttft.sample(&mut rng) + prefill).mul_f64(m);
    let per_token = eff.latency.per_token.sample(&mut rng).mul_f64(m);
    let n = eff.completion_tokens.sample(&mut rng).min(max_tokens);
    let finish = if n >= max_tokens {
        Finish::Length
    } else {
        Finish::Stop
    };
    Draw {
        fault,
        ttft,
        per_token,
        n,
        finish,
    }
}

/// A call's random stream, made on its first draw: a call whose faults
/// are off and whose distributions are fixed draws nothing, and seeding a
/// ChaCha8 costs more than the rest of its draws. The values are those
/// of the stream made at once (a test compares them).
struct CallRng {
    stream: (u64, u64),
    /// A fault's draw skipped over: taken first when the stream is made.
    skipped: bool,
    rng: Option<ChaCha8Rng>,
}

impl CallRng {
    fn new(stream: (u64, u64)) -> CallRng {
        CallRng {
            stream,
            skipped: false,
            rng: None,
        }
    }

    /// Passes over one `f64` draw without making the stream for it.
    fn skip_f64(&mut self) {
        match &mut self.rng {
            Some(rng) => {
                let _: f64 = rng.gen();
            }
            None => self.skipped = true,
        }
    }

    fn rng(&mut self) -> &mut ChaCha8Rng {
        let (seed, seq) = self.stream;
        let skipped = self.skipped;
        self.rng.get_or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(seq);
            if skipped {
                let _: f64 = rng.gen();
            }
            rng
        })
    }
}

impl rand::RngCore for CallRng {
    fn next_u32(&mut self) -> u32 {
        self.rng().next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.rng().next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.rng().fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.rng().try_fill_bytes(dest)
    }
}

/// A step of a call's life: go on with `T`, or end the call here with this
/// response. Not a `Result`: a refusal is an answer, not an error (and a
/// response is too big to be a `Result`'s error unboxed).
type Step<T> = ControlFlow<Response<Body>, T>;

/// What is drawn for a call when it is admitted: its fault, its pace and
/// its length.
#[derive(Debug, PartialEq)]
struct Draw {
    fault: Fault,
    ttft: Duration,
    per_token: Duration,
    /// Completion tokens.
    n: u32,
    finish: Finish,
}

/// One provider call's life: read the request, take quota at arrival, wait
/// for a place under the concurrency ceiling, draw a fault and a pace, then
/// answer whole or as a stream. A step that ends the call early gives back
/// the response to send; whatever way the call ends, its [`CallGuard`]
/// writes the record.
///
/// This is the hot path. Only the steps that wait (the ceiling's queue, a
/// hang) are async, the pacing sleeps are here, and what is done with
/// (the request's headers and body, the settings at arrival) is dropped
/// early: the future every held call keeps stays small.
async fn call(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    api: Api,
    deployment: Option<String>,
    fd: RawFd,
) -> RouteResult {
    let dialect = api.dialect();
    let run = shared.run();
    let limit = run.config.max_body_bytes;
    // Boxed: the body read is over before the call's long wait begins, so
    // its state need not make every held call's future bigger.
    let (req_headers, body) =
        match Box::pin(read_body(req, limit, run.config.body_read_timeout)).await {
            Ok(x) => x,
            Err((status, msg)) => return Ok(simple_error(dialect, status, &msg)),
        };
    let default_max_tokens = run.config.default_max_tokens;
    let (mut g, eff) = CallGuard::open(&shared, run, api, &req_headers, &body);
    drop(req_headers);
    let parsed = g.parse(&body);
    if shared.down.hanging() {
        // A hung worker reads the request and answers nothing.
        drop((parsed, body));
        return Ok(g.hang().await);
    }
    let (mut parsed, inputs) = match parsed {
        Continue(p) => p,
        Break(refused) => return Ok(refused),
    };
    drop(body);
    if let Some(d) = deployment {
        // Azure's model is the deployment the path names.
        g.record.model.clone_from(&d);
        parsed.model = d;
    }
    // An embedding has no completion: its quota is its input alone.
    let max_tokens = match api {
        Api::Embeddings => 0,
        _ => parsed.max_tokens.unwrap_or(default_max_tokens),
    };
    let snap = match g.take_quota(&eff, &parsed, max_tokens) {
        Continue(snap) => snap,
        Break(refused) => return Ok(refused),
    };
    let admitted = match g.admit(&eff, snap.as_ref()).await {
        Continue(at) => at,
        Break(refused) => return Ok(refused),
    };
    drop(eff); // The draw reads the settings in force at admission.
    let draw = g.draw(admitted, max_tokens);
    let headers = call_headers(dialect, &g.record.id, snap, &shared.clock);

    match draw.fault {
        Fault::None | Fault::StreamCut | Fault::Malformed => {}
        Fault::Status(status) => return Ok(g.error_status(status, headers)),
        Fault::Reset => return Err(g.reset(fd)),
        Fault::Hang => return Ok(g.hang().await),
    }

    let answer = g.answer(parsed.model, parsed.prompt_tokens, &draw, admitted);
    let first_at = admitted + draw.ttft;
    // At zero latency a deadline is the instant of admission: no sleep
    // (and no clock read to find it past).
    if !parsed.stream {
        let done_at = first_at + draw.per_token * draw.n;
        if done_at > admitted {
            sleep_until(done_at).await;
        }
        return Ok(g.whole_answer(&answer, inputs, draw.fault, headers));
    }
    if first_at > admitted {
        sleep_until(first_at).await;
    }
    Ok(g.streamed_answer(answer, &draw, first_at, parsed.include_usage, headers))
}

/// The steps of [`call`], in the order a call goes through them.
impl CallGuard {
    /// Counts the call in and starts its record, under the settings in
    /// force at arrival (also returned: quota and the ceiling use them).
    fn open(
        shared: &Arc<Shared>,
        run: Arc<Run>,
        api: Api,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (CallGuard, Arc<Effective>) {
        let received = Instant::now();
        let seq = run.seq.fetch_add(1, Ordering::Relaxed);
        run.counters.received.fetch_add(1, Ordering::Relaxed);
        shared.gauges.in_flight.fetch_add(1, Ordering::Relaxed);
        let id = request_id(headers, body, seq);
        let (eff, label) = shared.effective_at(received);
        let g = CallGuard {
            shared: shared.clone(),
            record: ProviderRecord {
                id,
                seq,
                dialect: api.dialect(),
                api,
                received_us: shared.clock.us_at(received),
                phase: label.to_string(),
                ..empty_record()
            },
            received,
            run,
            permit: None,
            queued: false,
            done: false,
            cut_epoch: shared.down.epoch(),
            model_slot: usize::MAX,
        };
        (g, eff)
    }

    /// Reads what the provider needs from the body into the record; a body
    /// the dialect refuses ends the call with a 400 naming the parameter.
    fn parse(&mut self, body: &[u8]) -> Step<(CallRequest, u32)> {
        let dialect = self.record.dialect;
        let read = match self.record.api {
            Api::Chat | Api::Messages => dialect.parse(body).map(|p| (p, 1)),
            Api::Responses => crate::api::parse_responses(body).map(|p| (p, 1)),
            Api::Embeddings => crate::api::parse_embeddings(body),
        };
        let (parsed, inputs) = match read {
            Ok(p) => p,
            Err(BadRequest { param, message }) => {
                self.finish(ProviderOutcome::BadRequest, 400);
                let mut h = call_headers(dialect, &self.record.id, None, &self.shared.clock);
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                let body = dialect.error_body(400, &message, param, None);
                return Break(respond(
                    StatusCode::BAD_REQUEST,
                    h,
                    full(body),
                    "application/json",
                ));
            }
        };
        self.record.model = parsed.model.clone();
        self.record.stream = parsed.stream;
        self.record.prompt_tokens = parsed.prompt_tokens;
        self.record.max_tokens = parsed.max_tokens;
        Continue((parsed, inputs))
    }

    /// Quota, at arrival: a real provider answers 429 before any queueing.
    /// The prompt and the most the answer may take are reserved (the guard
    /// settles the reservation at the end). Gives the buckets' snapshot for
    /// the rate-limit headers, `None` when no limit is set.
    fn take_quota(
        &mut self,
        eff: &Effective,
        parsed: &CallRequest,
        max_tokens: u32,
    ) -> Step<Option<QuotaSnapshot>> {
        let reserve = parsed.prompt_tokens as u64 + max_tokens as u64;
        let limits = &eff.quota;
        let secs = self.shared.clock.secs_at(self.received);
        let (res, snap) = {
            let mut q = lock(&self.run.quota);
            q.configure(limits.requests_per_minute, limits.tokens_per_minute, secs);
            let res = q.reserve(reserve, secs);
            (res, q.snapshot(secs))
        };
        if let Err(refusal) = res {
            self.finish(ProviderOutcome::QuotaExceeded, 429);
            // What the refusal's headers will say (quota_refusal sends
            // these same values).
            if let Some((secs, ms)) = refusal.retry_after.map(retry_after_values) {
                self.record.retry_after_s = Some(secs);
                self.record.retry_after_ms = Some(ms);
            }
            return Break(quota_refusal(
                self.record.dialect,
                &self.record.id,
                refusal,
                snap,
                &self.shared.clock,
                &parsed.model,
            ));
        }
        if limits.requests_per_minute.is_some() || limits.tokens_per_minute.is_some() {
            self.record.reserved_tokens = reserve;
        }
        let has_quota = snap.requests.is_some() || snap.tokens.is_some();
        Continue(has_quota.then_some(snap))
    }

    /// The concurrency ceiling: a place in service now, or after a wait in
    /// the provider's own queue, or an "overloaded" refusal. Gives the
    /// instant of admission, from which the answer is paced.
    async fn admit(&mut self, eff: &Effective, snap: Option<&QuotaSnapshot>) -> Step<Instant> {
        let c = &eff.concurrency;
        let queue = c.overflow == Overflow::Queue;
        self.model_slot = self.run.counters.model_slot(&self.record.model);
        let permit = match self.shared.ceiling.admit(c.ceiling, queue, c.queue_limit) {
            Admission::Now(p) => p,
            Admission::Queued(rx) => {
                self.queued = true;
                self.shared.gauges.queued.fetch_add(1, Ordering::Relaxed);
                self.model().waiting.fetch_add(1, Ordering::Relaxed);
                let got = rx.await;
                self.queued = false;
                self.shared.gauges.queued.fetch_sub(1, Ordering::Relaxed);
                self.model().waiting.fetch_sub(1, Ordering::Relaxed);
                match got {
                    Ok(p) => p,
                    // The ceiling (and its queue) went away: shutdown.
                    Err(_) => {
                        self.finish(ProviderOutcome::CapacityRejected, 503);
                        return Break(simple_error(
                            self.record.dialect,
                            StatusCode::SERVICE_UNAVAILABLE,
                            "shutting down",
                        ));
                    }
                }
            }
            Admission::Rejected => return Break(self.overloaded(snap.copied())),
        };
        self.permit = Some(permit);
        self.model().running.fetch_add(1, Ordering::Relaxed);
        let admitted = Instant::now();
        self.record.admitted_us = Some(self.shared.clock.us_at(admitted));
        Continue(admitted)
    }

    /// No place under the ceiling and no room to queue: OpenAI's 429 or
    /// Anthropic's 529, each with its own words for "overloaded".
    fn overloaded(&mut self, snap: Option<QuotaSnapshot>) -> Response<Body> {
        let dialect = self.record.dialect;
        let status = dialect.overloaded_status();
        self.finish(ProviderOutcome::CapacityRejected, status);
        let msg = match dialect {
            Dialect::OpenAi => {
                "The server is overloaded: too many concurrent requests. Please retry."
            }
            Dialect::Anthropic => "Overloaded",
        };
        let h = call_headers(dialect, &self.record.id, snap, &self.shared.clock);
        let body = dialect.error_body(status, msg, None, Some("overloaded"));
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        respond(status, h, full(body), "application/json")
    }

    /// Draws the call's fault, pace and length with the settings in force
    /// at admission: a phase change applies to calls admitted after it.
    /// The draws come from the call's own random stream (the provider's
    /// seed, the call's sequence number), so they do not depend on how
    /// other calls interleave.
    fn draw(&mut self, admitted: Instant, max_tokens: u32) -> Draw {
        let (eff, label) = self.shared.effective_at(admitted);
        // The label at arrival is in the record already: copied again
        // only if a phase changed since.
        if self.record.phase != *label {
            self.record.phase.clear();
            self.record.phase.push_str(&label);
        }
        let in_service = self.shared.ceiling.in_service();
        let stream = (self.run.config.seed, self.record.seq);
        draw_for(
            &eff,
            stream,
            in_service,
            self.record.prompt_tokens,
            max_tokens,
        )
    }

    /// The fault of an error status: answered at once.
    fn error_status(&mut self, status: u16, headers: HeaderMap) -> Response<Body> {
        self.finish(ProviderOutcome::ErrorStatus, status);
        self.record.first_byte_us = Some(self.shared.clock.now_us());
        let msg = match status {
            500 => "The server had an error while processing your request.",
            502 => "Bad gateway.",
            503 => "The service is temporarily unavailable.",
            _ => "Overloaded",
        };
        let body = self.record.dialect.error_body(status, msg, None, None);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        respond(status, headers, full(body), "application/json")
    }

    /// The fault of a reset: SO_LINGER 0 on the call's socket, then the
    /// error that makes hyper drop the connection, so the peer sees a RST.
    fn reset(&mut self, fd: RawFd) -> ResetConnection {
        self.finish(ProviderOutcome::Reset, 0);
        // SAFETY: `fd` is the socket of the connection this very request
        // arrived on; hyper owns it and keeps it open while it polls this
        // service future, so it is a valid open descriptor here. We only
        // set an option on it and do not close it.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = socket2::SockRef::from(&borrowed).set_linger(Some(Duration::ZERO));
        ResetConnection
    }

    /// The fault of a hang: never answers. The guard records the hang-up
    /// when the caller gives up; shutdown ends it too.
    async fn hang(&mut self) -> Response<Body> {
        self.record.outcome = ProviderOutcome::Hang;
        self.shared.shutdown.cancelled().await;
        self.finish(ProviderOutcome::Hang, 0);
        simple_error(
            self.record.dialect,
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down",
        )
    }

    /// The answer's identity and sizes; `model` is the caller's, echoed.
    /// `created` is the second of admission, when the answer began.
    fn answer(&self, model: String, prompt_tokens: u32, draw: &Draw, admitted: Instant) -> Answer {
        let seq = self.record.seq;
        Answer {
            id: crate::api::answer_id(self.record.api, seq),
            model,
            created: self.shared.clock.us_at(admitted) / 1_000_000,
            prompt_tokens,
            completion_tokens: draw.n,
            finish: draw.finish,
        }
    }

    /// The whole answer, sent once it is all written (the caller has slept
    /// until then); a malformed fault sends half its JSON.
    fn whole_answer(
        &mut self,
        answer: &Answer,
        inputs: u32,
        fault: Fault,
        headers: HeaderMap,
    ) -> Response<Body> {
        let now = self.shared.clock.now_us();
        self.record.first_byte_us = Some(now);
        self.record.finished_us = Some(now);
        self.record.completion_tokens = answer.completion_tokens;
        let mut body = match self.record.api {
            Api::Chat | Api::Messages => answer.body(self.record.dialect),
            Api::Responses => crate::api::responses_body(answer),
            Api::Embeddings => {
                crate::api::embeddings_body(&answer.model, answer.prompt_tokens, inputs)
            }
        };
        if fault == Fault::Malformed {
            self.finish(ProviderOutcome::Malformed, 200);
            body = body.slice(..body.len() / 2);
        } else {
            self.finish(ProviderOutcome::Ok, 200);
        }
        respond(StatusCode::OK, headers, full(body), "application/json")
    }

    /// The streamed answer, from its first byte (the caller has slept until
    /// `first_at`): the guard moves into a [`TokenStream`] that paces the
    /// tokens, so the record is written when the stream ends or is dropped.
    /// A stream-cut or malformed fault strikes halfway.
    fn streamed_answer(
        mut self,
        answer: Answer,
        draw: &Draw,
        first_at: Instant,
        include_usage: bool,
        headers: HeaderMap,
    ) -> Response<Body> {
        self.record.first_byte_us = Some(self.shared.clock.now_us());
        let half = draw.n / 2;
        let stream = TokenStream {
            dialect: self.record.dialect,
            api: self.record.api,
            guard: self,
            answer,
            include_usage,
            first_at,
            per_token: draw.per_token,
            next: 0,
            head_sent: false,
            cut_at: (draw.fault == Fault::StreamCut).then_some(half),
            malformed_at: (draw.fault == Fault::Malformed).then_some(half),
            cut_now: false,
            finished: false,
        };
        let body = StreamBody::new(futures_util::stream::unfold(stream, |mut s| async move {
            s.step().await.map(|item| (item.map(Frame::data), s))
        }));
        let mut resp = respond(
            StatusCode::OK,
            headers,
            BodyExt::boxed(body),
            "text/event-stream",
        );
        resp.headers_mut().insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        resp
    }
}

fn quota_refusal(
    dialect: Dialect,
    id: &str,
    refusal: QuotaRefusal,
    snap: QuotaSnapshot,
    clock: &Clock,
    model: &str,
) -> Response<Body> {
    let mut h = call_headers(dialect, id, Some(snap), clock);
    let (what, short) = match refusal.limit {
        QuotaLimit::Requests => ("requests per min (RPM)", "requests"),
        QuotaLimit::Tokens => ("tokens per min (TPM)", "tokens"),
    };
    let message = match refusal.retry_after {
        Some(wait) => {
            let (secs, ms) = retry_after_values(wait);
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
            h.insert(RETRY_AFTER_MS, HeaderValue::from(ms));
            format!(
                "Rate limit reached for {model} on {what}: Limit {}, Requested {}. Please try again in {}.",
                refusal.limit_value,
                refusal.requested,
                go_duration(Duration::from_millis(ms))
            )
        }
        // What can never fit is what the bucket holds: the limit itself at
        // a one-minute window, one scenario minute of it in a rehearsal.
        None => format!(
            "Request too large for {model} on {what}: Limit {}, Requested {}. The request can never fit this limit.",
            refusal.capacity, refusal.requested
        ),
    };
    let body = dialect.error_body(429, &message, Some(short), Some("rate_limit_exceeded"));
    respond(
        StatusCode::TOO_MANY_REQUESTS,
        h,
        full(body),
        "application/json",
    )
}

/// A streamed answer, paced token by token. Owning the call's guard means
/// that if hyper drops the body (the caller hung up), the record says so.
struct TokenStream {
    guard: CallGuard,
    answer: Answer,
    dialect: Dialect,
    api: Api,
    include_usage: bool,
    first_at: Instant,
    per_token: Duration,
    next: u32,
    head_sent: bool,
    cut_at: Option<u32>,
    malformed_at: Option<u32>,
    cut_now: bool,
    finished: bool,
}

impl TokenStream {
    fn due(&self, i: u32) -> Instant {
        self.first_at + self.per_token * i
    }

    fn cut(&mut self) -> Option<io::Result<Bytes>> {
        self.finished = true;
        self.guard.finish(ProviderOutcome::StreamCut, 200);
        Some(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "stream cut by fault injection",
        )))
    }

    /// The next chunk: every token that is due, sent together (so a tiny
    /// per-token time does not cost one timer per token).
    async fn step(&mut self) -> Option<io::Result<Bytes>> {
        if self.finished {
            return None;
        }
        if self.cut_now {
            // Let hyper flush what was sent (it flushes when the body is
            // pending) so the caller sees half a stream, then cut.
            tokio::time::sleep(Duration::from_millis(5)).await;
            return self.cut();
        }
        let n = self.answer.completion_tokens;
        let mut out = Vec::new();
        if !self.head_sent {
            self.head_sent = true;
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_head(&self.answer),
                _ => self.answer.stream_head(self.dialect, self.include_usage),
            });
        } else {
            sleep_until(self.due(self.next)).await;
        }
        let now = Instant::now();
        while self.next < n && self.due(self.next) <= now {
            if self.cut_at == Some(self.next) {
                self.cut_now = true;
                break;
            }
            if self.malformed_at == Some(self.next) {
                out.extend_from_slice(b"data: {\"id\": \"broken\", \"choices\": [\n\n");
            }
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_token(&self.answer, self.next),
                _ => self
                    .answer
                    .stream_token(self.dialect, self.next, self.include_usage),
            });
            self.next += 1;
            self.guard.record.completion_tokens = self.next;
        }
        if self.cut_now {
            // Send what was due first; the cut comes on the next poll.
            return if out.is_empty() {
                self.cut()
            } else {
                Some(Ok(Bytes::from(out)))
            };
        }
        if self.next == n && self.due(n) <= now {
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_tail(&self.answer),
                _ => self.answer.stream_tail(self.dialect, self.include_usage),
            });
            self.guard.record.finished_us = Some(self.guard.shared.clock.now_us());
            let outcome = if self.malformed_at.is_some() {
                ProviderOutcome::Malformed
            } else {
                ProviderOutcome::Ok
            };
            self.guard.finish(outcome, 200);
            self.finished = true;
        }
        Some(Ok(Bytes::from(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let cases = [
            (Method::POST, "/v1/chat/completions", "call chat"),
            (Method::POST, "/v1/messages", "call messages"),
            (Method::POST, "/v1/responses", "call responses"),
            (Method::POST, "/v1/embeddings", "call embeddings"),
            (
                Method::POST,
                "/openai/deployments/d/chat/completions",
                "azure",
            ),
            (Method::GET, "/openai/deployments/d/chat/completions", "404"),
            (Method::GET, "/v1/models", "models"),
            (Method::GET, "/health", "health"),
            (Method::HEAD, "/health", "health"),
            (Method::POST, "/health", "404"),
            (Method::POST, "/v1/models", "405"),
            (Method::GET, "/v1/chat/completions", "405"),
            (Method::DELETE, "/v1/embeddings", "405"),
            (Method::GET, "/_fake/stats", "admin"),
            (Method::POST, "/_fake/reset", "admin"),
            (Method::GET, "/metrics", "admin"),
            (Method::GET, "/metricsx", "404"),
            (Method::POST, "/v1/chat/completions/", "404"),
            (Method::GET, "/", "404"),
        ];
        for (method, path, want) in cases {
            let got = match route_of(&method, path) {
                Route::Call(api) => format!("call {}", api.as_str()),
                Route::Azure => "azure".into(),
                Route::Models => "models".into(),
                Route::Health => "health".into(),
                Route::Admin => "admin".into(),
                Route::MethodNotAllowed => "405".into(),
                Route::NotFound => "404".into(),
            };
            assert_eq!(got, want, "{method} {path}");
        }
    }

    /// [`draw_for`] as it was: the stream made at once, the fault drawn
    /// whatever its rates.
    fn eager_draw(
        eff: &Effective,
        (seed, seq): (u64, u64),
        in_service: u32,
        prompt_tokens: u32,
        max_tokens: u32,
    ) -> Draw {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(seq);
        let fault = draw_fault(eff, rng.gen::<f64>());
        let m = eff.latency.multiplier
            * crate::curve::load_factor(in_service, eff.latency.knee, eff.latency.knee_exponent);
        let prefill = eff.latency.prefill_per_token.0 * prompt_tokens;
        let ttft = (eff.latency.ttft.sample(&mut rng) + prefill).mul_f64(m);
        let per_token = eff.latency.per_token.sample(&mut rng).mul_f64(m);
        let n = eff.completion_tokens.sample(&mut rng).min(max_tokens);
        let finish = if n >= max_tokens {
            Finish::Length
        } else {
            Finish::Stop
        };
        Draw {
            fault,
            ttft,
            per_token,
            n,
            finish,
        }
    }

    #[test]
    fn the_lazy_stream_draws_what_the_eager_one_drew() {
        let configs = [
            "completion_tokens = { fixed = 16 }\n",
            "[latency]\nttft = { uniform = { min = \"10ms\", max = \"90ms\" } }\n",
            "completion_tokens = { lognormal = { median = 40, p99 = 400 } }\n",
            "[latency]\nper_token = { exponential = { mean = \"5ms\" } }\nknee = 2\n",
            "[latency]\nttft = { fixed = \"5ms\" }\n[faults]\nerrors = { \"500\" = 0.3 }\nhang = 0.1\n",
            "completion_tokens = { mix = [ { value = 0, weight = 3 }, { value = 40, weight = 1 } ] }\n[faults]\nmalformed = 0.5\n",
            "[faults]\nreset = 0.2\nstream_cut = 0.2\n",
        ];
        for toml in configs {
            let cfg = ProviderConfig::from_toml(&format!("seed = 7\n{toml}"), "t")
                .unwrap_or_else(|e| panic!("{toml}: {e}"));
            let eff = cfg.effective([], None);
            for seq in 0..200 {
                let (in_service, prompt, max) = (seq as u32 % 5, seq as u32 % 300, 32);
                assert_eq!(
                    draw_for(&eff, (7, seq), in_service, prompt, max),
                    eager_draw(&eff, (7, seq), in_service, prompt, max),
                    "{toml} seq {seq}"
                );
            }
        }
    }

    #[test]
    fn faults_are_drawn_by_cumulative_rate() {
        let cfg = ProviderConfig::from_toml(
            "[faults]\nerrors = { \"500\" = 0.1, \"503\" = 0.1 }\nreset = 0.1\nhang = 0.1\nstream_cut = 0.1\nmalformed = 0.1\n",
            "t",
        )
        .unwrap();
        let eff = cfg.effective([], None);
        assert_eq!(draw_fault(&eff, 0.05), Fault::Status(500));
        assert_eq!(draw_fault(&eff, 0.15), Fault::Status(503));
        assert_eq!(draw_fault(&eff, 0.25), Fault::Reset);
        assert_eq!(draw_fault(&eff, 0.35), Fault::Hang);
        assert_eq!(draw_fault(&eff, 0.45), Fault::StreamCut);
        assert_eq!(draw_fault(&eff, 0.55), Fault::Malformed);
        assert_eq!(draw_fault(&eff, 0.65), Fault::None);
    }
}
