//! The gateway's HTTP client to the provider, as a gateway built on a
//! client library has one: hyper's client (which opens a connection
//! whenever none is idle and caps nothing) behind an optional connection
//! cap, the pool a library such as httpx keeps (`pool_max_connections`),
//! and the retries of provider refusals an SDK client makes
//! (`upstream_retries`).
//!
//! A call beyond the cap waits inside the pool for a free connection. A
//! gateway that times `await client.post(...)` times that wait as provider
//! latency; this one does too, unless `split_pool_wait` meters the wait
//! apart. A retry keeps its connection through its back-off: retries never
//! multiply the calls in the pool, and the pool keeps its order.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;
use wire::headers::{RETRY_AFTER, RETRY_AFTER_MS};

use crate::config::GatewayConfig;
use crate::fault::{Fault, STORM_RETRIES};
use crate::metrics::Metrics;

type UpstreamClient = Client<HttpConnector, Full<Bytes>>;

/// The client every upstream call goes through.
pub(crate) struct Upstream {
    client: UpstreamClient,
    pool: Option<Arc<Semaphore>>,
    cap: Option<usize>,
    split_pool_wait: bool,
    retries: u32,
    backoff: Duration,
    /// The `retry-storm` fault: a 429 or 503 is sent again at once, up to
    /// [`STORM_RETRIES`] times, before any retry of `upstream_retries`.
    storm: bool,
    metrics: Arc<Metrics>,
}

/// One call to make: what is sent at each attempt.
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Call {
    fn request(&self) -> Request<Full<Bytes>> {
        let mut up = Request::new(Full::new(self.body.clone()));
        *up.method_mut() = self.method.clone();
        *up.uri_mut() = self.uri.clone();
        *up.headers_mut() = self.headers.clone();
        up
    }
}

/// The provider's answer (its head; the body still to read) and the pooled
/// connection it came on, held until the body is read.
pub(crate) struct Answer {
    pub(crate) response: Response<Incoming>,
    pub(crate) connection: Option<OwnedSemaphorePermit>,
    /// When the call had its connection: where the provider's time starts
    /// when the pool's wait is metered apart.
    pub(crate) connected: Instant,
}

impl Upstream {
    pub(crate) fn new(config: &GatewayConfig, metrics: Arc<Metrics>) -> Upstream {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        // The legacy client opens a new connection whenever none is idle and
        // never caps connections per host, so without `pool_max_connections`
        // it cannot become a hidden bounded queue behind the gateway's own
        // admission (naive mode depends on that). Idle connections are kept,
        // all of them.
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Upstream {
            client,
            pool: config
                .pool_max_connections
                .map(|n| Arc::new(Semaphore::new(n))),
            cap: config.pool_max_connections,
            split_pool_wait: config.split_pool_wait,
            retries: config.upstream_retries,
            backoff: config.upstream_retry_backoff,
            storm: config.fault.contains(&Fault::RetryStorm),
            metrics,
        }
    }

    /// The pool's cap when its wait is metered (for the gauges).
    pub(crate) fn metered_cap(&self) -> Option<usize> {
        self.cap.filter(|_| self.split_pool_wait)
    }

    /// Whether the provider's time starts at the connection rather than at
    /// dispatch.
    pub(crate) fn split_pool_wait(&self) -> bool {
        self.split_pool_wait && self.pool.is_some()
    }

    /// A request that skips the pool and the retries (reads such as
    /// `/v1/models`).
    pub(crate) async fn plain(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(req).await
    }

    /// Waits for a pooled connection, sends `call`, and retries a provider
    /// refusal up to `upstream_retries` times. Cancel-safe: dropping the
    /// future gives the connection back and hangs the call up.
    pub(crate) async fn send(
        &self,
        call: &Call,
    ) -> Result<Answer, hyper_util::client::legacy::Error> {
        let connection = self.connect().await;
        let connected = Instant::now();
        let mut retried = 0;
        let mut stormed = 0;
        loop {
            let response = self.client.request(call.request()).await?;
            if self.storm
                && stormed < STORM_RETRIES
                && matches!(response.status().as_u16(), 429 | 503)
            {
                // No wait, no Retry-After read: the refusal is read to its
                // end (its connection carries the next call) and sent again.
                let _ = response.into_body().collect().await;
                stormed += 1;
                self.metrics
                    .upstream_retries
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if retried >= self.retries || !is_refusal(response.status()) {
                return Ok(Answer {
                    response,
                    connection,
                    connected,
                });
            }
            let asked = wire::parse_retry_after(
                header_text(response.headers(), RETRY_AFTER_MS),
                header_text(response.headers(), RETRY_AFTER),
                SystemTime::now(),
            );
            // Read the refusal to its end so its connection can carry the
            // retry.
            let _ = response.into_body().collect().await;
            let wait = self.wait_before(retried, asked);
            retried += 1;
            self.metrics
                .upstream_retries
                .fetch_add(1, Ordering::Relaxed);
            debug!(
                retry = retried,
                wait_ms = wait.as_millis() as u64,
                "retrying a provider refusal"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes a pooled connection, waiting for one when all are busy.
    async fn connect(&self) -> Option<OwnedSemaphorePermit> {
        let pool = self.pool.as_ref()?;
        let since = Instant::now();
        let waiting = WaitingGauge::new(&self.metrics);
        let permit = pool.clone().acquire_owned().await.ok();
        drop(waiting);
        if self.split_pool_wait {
            self.metrics.pool_wait.observe(since.elapsed());
        }
        permit
    }

    /// The back-off before retry `n` (from 0): the client's own (the base,
    /// doubled each time up to 16 times it, plus up to a quarter of jitter)
    /// or the provider's Retry-After, whichever is longer.
    fn wait_before(&self, n: u32, asked: Option<Duration>) -> Duration {
        let own = self.backoff * 2u32.pow(n.min(4));
        let own = own + own.mul_f64(rand::random::<f64>() / 4.0);
        asked.map_or(own, |a| a.max(own))
    }
}

/// Counts a call waiting for a connection while it lives.
struct WaitingGauge<'a>(&'a Metrics);

impl<'a> WaitingGauge<'a> {
    fn new(metrics: &'a Metrics) -> Self {
        metrics.pool_waiting.fetch_add(1, Ordering::Relaxed);
        WaitingGauge(metrics)
    }
}

impl Drop for WaitingGauge<'_> {
    fn drop(&mut self) {
        self.0.pool_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The provider refusals a client retries and the gateway passes on marked
/// `upstream_refused`: 429, 503, 529.
pub(crate) fn is_refusal(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 503 | 529)
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mode;

    fn upstream(retries: u32) -> Upstream {
        let mut c = GatewayConfig::new(Mode::Naive, "http://127.0.0.1:1");
        c.upstream_retries = retries;
        c.upstream_retry_backoff = Duration::from_millis(100);
        Upstream::new(&c, Arc::new(Metrics::default()))
    }

    #[tokio::test]
    async fn the_back_off_doubles_to_sixteen_times_and_a_longer_retry_after_wins() {
        let u = upstream(3);
        for (n, base) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1600), (9, 1600)] {
            let w = u.wait_before(n, None);
            let base = Duration::from_millis(base);
            assert!(w >= base && w <= base + base / 4, "retry {n}: {w:?}");
        }
        let asked = Duration::from_secs(7);
        assert_eq!(u.wait_before(0, Some(asked)), asked);
        // A Retry-After shorter than the client's own back-off does not
        // make it retry sooner.
        assert!(u.wait_before(2, Some(Duration::from_millis(5))) >= Duration::from_millis(400));
    }

    #[test]
    fn refusals_are_the_providers_overload_answers() {
        for s in [429, 503, 529] {
            assert!(is_refusal(StatusCode::from_u16(s).unwrap()));
        }
        for s in [200, 400, 500, 502, 504] {
            assert!(!is_refusal(StatusCode::from_u16(s).unwrap()));
        }
    }
}
