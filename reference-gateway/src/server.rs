//! The server: accepts connections on a listener it is handed, serves each
//! on its own task, and stops when told to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::admission::Admission;
use crate::config::{GatewayConfig, Mode};
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::proxy::Shared;
use crate::router::Router;

/// A validated gateway, ready to serve.
///
/// ```
/// use reference_gateway::{Gateway, GatewayConfig, Mode};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = GatewayConfig::new(Mode::Bounded, "http://127.0.0.1:9");
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let handle = Gateway::new(config)?.serve(listener, CancellationToken::new())?;
/// assert!(handle.base_url().starts_with("http://127.0.0.1:"));
/// handle.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Gateway {
    config: GatewayConfig,
}

impl Gateway {
    /// Checks `config`; no I/O happens yet.
    pub fn new(config: GatewayConfig) -> Result<Gateway, GatewayError> {
        config
            .validate()
            .map_err(|(field, message)| GatewayError::InvalidConfig { field, message })?;
        Ok(Gateway { config })
    }

    /// Serves on `listener` until `shutdown` is cancelled or the returned
    /// handle is shut down or dropped. Must be called inside a Tokio runtime.
    pub fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<GatewayHandle, GatewayError> {
        let addr = listener.local_addr().map_err(GatewayError::Listener)?;
        // Our own child token: dropping the handle stops this gateway
        // without cancelling the caller's token.
        let stop = shutdown.child_token();
        // The pacer outlives `stop` until the connections have drained, so
        // that jobs queued at shutdown are still dispatched or refused.
        let background = CancellationToken::new();
        let router = Arc::new(Router::new(&self.config));
        let metrics = Arc::new(Metrics::new(router.names(), router.named, router.cools()));
        let admission = Admission::new(&self.config, metrics.clone(), router.clone(), &background);
        let shared = Arc::new(Shared::new(&self.config, admission, metrics, router));
        let grace = self.config.shutdown_grace;
        let span = tracing::info_span!("gateway", mode = %self.config.mode, %addr);
        if self.config.upstreams.is_empty() {
            info!(parent: &span, upstream = %self.config.upstream, "serving");
        } else {
            let names = shared.router.names().join(",");
            let routing = self.config.routing;
            let cooldowns = self.config.cooldowns_on();
            info!(parent: &span, upstreams = %names, %routing, cooldowns, "serving");
        }
        if !self.config.fault.is_empty() {
            let faults: Vec<String> = self.config.fault.iter().map(|f| f.to_string()).collect();
            warn!(parent: &span, faults = %faults.join(","), "serving with faults given on purpose, to show a check failing; never for a real rehearsal");
        }
        let task = tokio::spawn(
            accept_loop(listener, shared.clone(), stop.clone(), background, grace).instrument(span),
        );
        Ok(GatewayHandle {
            addr,
            mode: self.config.mode,
            stop,
            task: Some(task),
            shared,
        })
    }
}

/// A running gateway. Dropping it stops the gateway (without waiting).
///
/// ```
/// use reference_gateway::{Gateway, GatewayConfig, Mode};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut config = GatewayConfig::new(Mode::Aimd, "http://127.0.0.1:9");
/// config.aimd.initial = 5;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let handle = Gateway::new(config)?.serve(listener, CancellationToken::new())?;
/// assert_eq!(handle.snapshot().limit, Some(5));
/// assert!(handle.metrics_text().contains("gateway_concurrency_limit 5"));
/// handle.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub struct GatewayHandle {
    addr: SocketAddr,
    mode: Mode,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// A reading of the gateway's admission state and counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatewaySnapshot {
    /// Upstream calls in flight.
    pub in_flight: u64,
    /// Jobs waiting in the gateway.
    pub queue_depth: usize,
    /// The concurrency limit now (bounded, aimd).
    pub limit: Option<usize>,
    /// Tokens waiting, including the pacer's debt (deadline).
    pub queued_tokens: Option<f64>,
    /// Requests shed at admission (`queue_full`, `would_miss_deadline`):
    /// load shedding, without the tenants' rate limits.
    pub shed: u64,
    /// Requests refused at admission because their tenant was over its
    /// entitlement (`tenant_limited`).
    pub tenant_limited: u64,
    /// Queued jobs dropped unsent at dequeue (`wait_expired`).
    pub stale_drops: u64,
    /// Upstream calls cancelled because `upstream_timeout` passed.
    pub upstream_timeouts: u64,
    /// Provider refusals (429, 503, 529) passed on (`upstream_refused`).
    pub upstream_refused: u64,
    /// Queued jobs whose caller hung up.
    pub cancelled_queued: u64,
    /// Upstream calls cancelled because their caller hung up.
    pub cancelled_upstream: u64,
    /// Requests refused because every upstream was cooling
    /// (`all_upstreams_cooling`).
    pub all_upstreams_cooling: u64,
}

/// A reading of one upstream's calls and cooldown.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSnapshot {
    /// Its name (`default` for a lone `upstream`).
    pub name: String,
    /// Calls sent to it (each attempt).
    pub calls: u64,
    /// Its refusals passed on to callers (`upstream_refused`).
    pub refused: u64,
    /// Requests it refused, timed out on or failed that were sent on.
    pub sent_on: u64,
    /// Times it was put to cool down.
    pub cooldowns: u64,
    /// What is left of its cooldown now (zero: not cooling).
    pub cooling_for: std::time::Duration,
}

impl GatewayHandle {
    /// The address the gateway listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, to point a client at.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The admission mode it runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The `/metrics` text, without a round trip.
    pub fn metrics_text(&self) -> String {
        self.shared.metrics_text()
    }

    /// Reads each upstream's counters and cooldown now, in the order
    /// configured.
    pub fn upstreams(&self) -> Vec<UpstreamSnapshot> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = std::time::Instant::now();
        let cooling = self.shared.router.cooling_all(now);
        self.shared
            .metrics
            .upstreams
            .iter()
            .zip(cooling)
            .map(|(u, left)| UpstreamSnapshot {
                name: u.name.clone(),
                calls: u.calls.load(Relaxed),
                refused: u.refused.load(Relaxed),
                sent_on: u.sent_on.load(Relaxed),
                cooldowns: u.cooldowns.load(Relaxed),
                cooling_for: left,
            })
            .collect()
    }

    /// Reads the admission state and counters now.
    pub fn snapshot(&self) -> GatewaySnapshot {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.shared.metrics;
        let g = self.shared.admission.gauges();
        GatewaySnapshot {
            in_flight: m.in_flight.load(Relaxed),
            queue_depth: g.queue_depth,
            limit: g.limit,
            queued_tokens: g.queued_tokens,
            shed: m.shed_queue_full.load(Relaxed) + m.shed_deadline.load(Relaxed),
            tenant_limited: m.tenant_limited.load(Relaxed),
            stale_drops: m.stale_drops.load(Relaxed),
            upstream_timeouts: m.upstream_total(|u| &u.timeouts),
            upstream_refused: m.upstream_total(|u| &u.refused),
            cancelled_queued: m.cancelled_queued.load(Relaxed),
            cancelled_upstream: m.cancelled_upstream.load(Relaxed),
            all_upstreams_cooling: m.shed_cooling.load(Relaxed),
        }
    }

    /// Stops accepting, lets open connections finish within the shutdown
    /// grace, and waits for that.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Waits until the gateway stops (its shutdown token was cancelled).
    pub async fn stopped(mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for GatewayHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
    background: CancellationToken,
    grace: Duration,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let span = tracing::debug_span!("connection", %peer);
                    connections.spawn(serve_connection(stream, shared.clone(), stop.clone()).instrument(span));
                }
                Err(e) => {
                    // Usually EMFILE: back off instead of spinning.
                    warn!(cause = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            left = connections.len(),
            "connections still open after the shutdown grace; closing them"
        );
        connections.shutdown().await;
    }
    background.cancel();
    info!("stopped");
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, stop: CancellationToken) {
    // Answers are small frames that should leave at once.
    let _ = stream.set_nodelay(true);
    let header_read_timeout = shared.header_read_timeout;
    let service = service_fn(move |req| shared.clone().handle(req));
    // half_close(false) is hyper's default and matters here: a caller's EOF
    // ends the connection, which drops its in-flight request future, which
    // is how a hang-up cancels a queued job or an upstream call.
    // Without a timer hyper applies no header timeout at all: a caller
    // sending its head a byte a second held a connection forever.
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                debug!(cause = %e, "connection ended with an error");
            }
        }
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
