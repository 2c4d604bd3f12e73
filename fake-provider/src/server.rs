//! The HTTP server's face: [`FakeProvider`] and its [`ProviderHandle`],
//! accepting connections (and closing and reopening the listener for a
//! `down` phase), serving each. The admin API and the metrics are in
//! `admin`.
//!
//! Its rooms:
//! - `route`: where a request goes (a call, the models, `/health`, the
//!   admin API, an HTTP error), and the answers that are not calls;
//! - `call`: one call's life: quota, the ceiling, the draws of its fault,
//!   pace and length, the answer;
//! - `guard`: what a call holds while it lives, and its record written
//!   as it ends (`finish`), or when its task is dropped mid-call;
//! - `stream`: a streamed answer, paced token by token.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use wire::{Clock, ProviderRecord};

use crate::ceiling::Ceiling;
use crate::config::{Down, Overrides, ProviderConfig};
use crate::counters::{Gauges, Stats};
use crate::head_timer::HeadTimer;
use crate::records::{RecordFile, RecordsWritten};
use crate::run::{Book, Run, RunInfo};
use crate::shared::{Control, Shared, UnknownPhase};

mod call;
mod guard;
mod route;
mod stream;

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

    /// Pins the timeline to the named phase (`None`: back to the clock).
    pub fn set_phase(&self, name: Option<&str>) -> Result<(), UnknownPhase> {
        self.shared.set_phase(name)
    }

    /// Starts the current run's timeline (`t = 0` of its phases) now,
    /// keeping its id, its config, its record file and its arrival
    /// numbers; its counts and quota buckets start afresh. A harness calls
    /// it as its load starts: the timeline then runs from the load's
    /// start, however long the gateway took to become ready, as a remote
    /// provider's does from the reset's `start_at_unix_ms`.
    pub fn start_timeline_now(&self) {
        self.shared.restart_timeline(Instant::now());
    }

    /// What starts the timeline at a given instant, as
    /// [`ProviderHandle::start_timeline_now`] does now, from any thread: a
    /// load generator calls it with the instant its schedule starts (a
    /// moment to come: until then the timeline is in no phase), so the
    /// provider's `t = 0` is the load's however long its set-up took.
    pub fn timeline_starter(&self) -> impl Fn(Instant) + Send + Sync + 'static {
        let shared = self.shared.clone();
        move |at| shared.restart_timeline(at)
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
        async move { route::route(shared, req, peer, fd).await }
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
