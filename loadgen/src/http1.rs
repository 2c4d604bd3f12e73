//! A small HTTP/1.1 client made for an open loop: one request per task,
//! written and read in that task, over keep-alive connections from a pool
//! bounded by what the callers can hold ([`slots`]).
//!
//! Why not hyper's pooled client: it runs each connection as a task of its
//! own and hands requests and responses across channels and a locked pool,
//! and keeps two 8 KiB buffers per connection for its whole life. Here an
//! outstanding request holds its socket and its task's state, and a read
//! buffer only while bytes are arriving, so 10,000 slow requests stay cheap
//! and one core keeps a 20,000/s schedule. Dropping the future drops the
//! socket: that is how a person hangs up.
//!
//! An `https://` target is spoken to over rustls ([`Conn::Tls`]): one
//! handshake per new connection, made as part of the request that opened
//! it, and the session kept while the connection is reused. A plain
//! connection is the bare socket, read on readiness as before; the enum
//! costs a branch per read, not an allocation.
//!
//! Its rooms: `slots`, the idle connections and the callers' places (a
//! pool of N shared, or one a caller up to the generator's bound); `pace`,
//! the bucket that holds new connections to `[load.clients]
//! connect_rate`.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

mod pace;
mod slots;

use pace::Pace;
pub(crate) use slots::BoundWait;
use slots::{Slot, Slots, Timed};

/// Response heads larger than this are refused.
const MAX_HEAD: usize = 64 * 1024;
/// How much to read at a time.
const READ_CHUNK: usize = 4096;
/// The response headers a caller reads; the rest are read and dropped.
/// Plain fields rather than a header map: an answer (no Retry-After, no
/// reason) costs no allocation at all.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// `content-type` says `text/event-stream`.
    pub(crate) event_stream: bool,
    /// `retry-after`, as sent.
    pub(crate) retry_after: Option<String>,
    /// `retry-after-ms`, as sent.
    pub(crate) retry_after_ms: Option<String>,
    /// `x-gateway-reason`, as sent.
    pub(crate) gateway_reason: Option<String>,
}

impl Kept {
    /// Keeps `value` if `name` is one of the headers read.
    fn keep(&mut self, name: &str, value: &[u8]) {
        let text = || std::str::from_utf8(value).ok().map(|v| v.trim().to_owned());
        if name.eq_ignore_ascii_case("content-type") {
            let v = value.trim_ascii_start();
            const SSE: &[u8] = b"text/event-stream";
            self.event_stream = v.len() >= SSE.len() && v[..SSE.len()].eq_ignore_ascii_case(SSE);
        } else if name.eq_ignore_ascii_case(wire::headers::RETRY_AFTER) {
            self.retry_after = text();
        } else if name.eq_ignore_ascii_case(wire::headers::RETRY_AFTER_MS) {
            self.retry_after_ms = text();
        } else if name.eq_ignore_ascii_case(wire::headers::GATEWAY_REASON) {
            self.gateway_reason = text();
        }
    }
}
/// Idle connections kept for reuse (each is only a socket).
const MAX_IDLE: usize = 65_536;
/// A connection idle longer than this is looked at (one `recv`) before it
/// is reused, in case the server closed it meanwhile. One back sooner is
/// reused as it is: servers close idle connections after seconds, not
/// microseconds, and a connection found closed anyway is replaced once
/// before any byte of the answer ([`Connector::send`]). At 50,000
/// requests a second connections come back within microseconds, and the
/// look was a system call in every request.
const LOOK_AFTER_IDLE: Duration = Duration::from_millis(250);

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// No connection could be made.
    #[error("connect: {0}")]
    Connect(io::Error),
    /// The connection broke or closed before the answer was complete.
    #[error("connection broke: {0}")]
    Reset(String),
    /// The peer did not speak HTTP/1.1.
    #[error("not HTTP/1.1: {0}")]
    Protocol(String),
    /// The body passed the scenario's `max_answer_bytes` (or announced a
    /// length past it): the connection is dropped rather than read on, so
    /// a target that sends without end cannot grow the generator.
    #[error("answer past {0} bytes")]
    Oversized(u64),
}

/// One connection to the target: the socket, or a TLS session over it
/// (boxed: a session's state is a kilobyte or so, and an enum the size of
/// the socket keeps idle pools and waiting requests small).
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// Writes the whole request (head and body in one buffer: one write
    /// on a plain socket) and, over TLS, flushes the records out.
    async fn write_request(&mut self, request: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(request).await,
            Conn::Tls(s) => {
                s.write_all(request).await?;
                s.flush().await
            }
        }
    }

    /// Appends what arrives next to `buf`; 0 at the end of the stream.
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => read_more(s, buf).await,
            Conn::Tls(s) => {
                tokio::task::consume_budget().await;
                // Decrypted bytes are waited for inside rustls and then
                // copied: as on a plain socket, a request waiting for its
                // answer holds no buffer of its own.
                let data = match s.fill_buf().await {
                    Ok(data) => data,
                    // A peer that closes the socket without close_notify:
                    // the end of the stream (HTTP frames its own bodies).
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                };
                let n = data.len();
                buf.extend_from_slice(data);
                s.consume(n);
                Ok(n)
            }
        }
    }

    /// Whether an idle connection is still open and quiet: a server that
    /// closed it shows EOF (or a close_notify, or stray bytes) when peeked
    /// at; WouldBlock means alive. Any byte found spoils it, so it is
    /// dropped, never read from.
    fn is_quiet(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let socket = match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => {
                let (socket, session) = s.get_mut();
                match session.process_new_packets() {
                    Ok(io) if io.plaintext_bytes_to_read() == 0 && !io.peer_has_closed() => {}
                    _ => return false,
                }
                socket
            }
        };
        matches!(socket.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// How to open TLS sessions with the target: the run's client
/// configuration and the name its certificate must carry (also the SNI).
#[derive(Clone)]
pub(crate) struct TlsTarget {
    pub(crate) connector: TlsConnector,
    pub(crate) name: ServerName<'static>,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTarget")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TlsTarget {
    /// A TLS session over `socket`: the handshake, within the caller's time.
    pub(crate) async fn handshake(&self, socket: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.connector.connect(self.name.clone(), socket).await
    }
}

/// Connections to one address, reused when an answer was read in full.
#[derive(Debug)]
pub(crate) struct Connector {
    addr: SocketAddr,
    /// For an `https://` target.
    tls: Option<TlsTarget>,
    /// Idle connections, the last returned last, each with when it was.
    idle: Mutex<Vec<(Conn, Slot, Instant)>>,
    /// One place per open connection, at most the limit in force.
    slots: Arc<Slots>,
    /// The callers' new connections per second at most, if limited.
    pace: Option<Pace>,
    /// Connections opened (connects that succeeded), pre-opened included.
    opened: AtomicU64,
    /// Connects refused for want of a local port (`EADDRNOTAVAIL`).
    no_port: AtomicU64,
    /// Connects refused for want of a file descriptor (`EMFILE`,
    /// `ENFILE`).
    no_descriptor: AtomicU64,
}

impl Connector {
    /// Connections to `addr`, at most `limit` open at once (a request
    /// then waits for one); `own` if that limit is the load generator's
    /// own bound, not the scenario's `max_connections` (see
    /// [`Connector::send`]).
    pub(crate) fn new(addr: SocketAddr, limit: usize, own: bool) -> Self {
        Connector {
            addr,
            tls: None,
            idle: Mutex::new(Vec::new()),
            slots: Slots::new(limit, own),
            pace: None,
            opened: AtomicU64::new(0),
            no_port: AtomicU64::new(0),
            no_descriptor: AtomicU64::new(0),
        }
    }

    /// Connects refused so far for want of a local port, and for want of a
    /// file descriptor: resources of the machine the load generator ran
    /// out of, not the target's doing.
    pub(crate) fn ran_short(&self) -> (u64, u64) {
        (
            self.no_port.load(Ordering::Relaxed),
            self.no_descriptor.load(Ordering::Relaxed),
        )
    }

    /// How many connections it has opened so far.
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The most connections open at once so far.
    pub(crate) fn most_open(&self) -> usize {
        self.slots.most()
    }

    /// The limit on open connections in force.
    pub(crate) fn limit(&self) -> usize {
        self.slots.limit()
    }

    /// A new limit on open connections (a phase starts), and whether it is
    /// the load generator's own bound.
    pub(crate) fn set_limit(&self, limit: usize, own: bool) {
        self.slots.set_limit(limit, own);
    }

    /// The same, opening at most `per_s` new connections a second.
    pub(crate) fn with_connect_rate(mut self, per_s: Option<f64>) -> Self {
        self.pace = per_s.filter(|r| *r > 0.0).map(Pace::new);
        self
    }

    /// Whether the limit in force is the load generator's own bound (not
    /// the callers' pool or the scenario's cap), and whether new
    /// connections are paced: what a wait in the client met.
    pub(crate) fn limits(&self) -> (bool, bool) {
        (self.slots.is_own(), self.pace.is_some())
    }

    /// The same, every connection a TLS session with `tls`.
    pub(crate) fn with_tls(mut self, tls: Option<TlsTarget>) -> Self {
        self.tls = tls;
        self
    }

    fn take_idle(&self) -> Option<(Conn, Slot)> {
        loop {
            let (mut stream, slot, since) =
                self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
            // A connection the server closed while idle: drop it.
            if since.elapsed() < LOOK_AFTER_IDLE || stream.is_quiet() {
                return Some((stream, slot));
            }
        }
    }

    fn put_idle(&self, stream: Conn, slot: Slot) {
        // Over a limit that fell: closed (the place freed) instead.
        if self.slots.over() {
            return;
        }
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push((stream, slot, Instant::now()));
        }
        self.slots.wake_one();
    }

    /// An idle connection, else a new one; at the limit (or past the
    /// connect rate), waits in the client for either, timed in `wait`.
    /// Returns whether the connection was reused.
    async fn checkout(&self, wait: &mut BoundWait) -> Result<(Conn, Slot, bool), HttpError> {
        if let Some((stream, slot)) = self.take_idle() {
            return Ok((stream, slot, true));
        }
        if let Some(slot) = self.slots.take() {
            match self.pace.as_ref().map(Pace::take) {
                None | Some(Ok(())) => return Ok((self.connect().await?, slot, false)),
                Some(Err(_)) => slot.give_back(),
            }
        }
        let timed = Timed::start(wait);
        let _waiting = self.slots.wait();
        let got = match &self.pace {
            None => self.wait_for_a_place().await,
            Some(pace) => self.wait_for_a_connect(pace).await,
        };
        timed.got();
        match got {
            (Some(stream), slot) => Ok((stream, slot, true)),
            (None, slot) => Ok((self.connect().await?, slot, false)),
        }
    }

    /// In the wait line: an idle connection, or a place for a new one.
    async fn wait_for_a_place(&self) -> (Option<Conn>, Slot) {
        loop {
            // Registered before looking, so a place freed in between is
            // not missed.
            let freed = self.slots.freed().notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some((stream, slot)) = self.take_idle() {
                return (Some(stream), slot);
            }
            if let Some(slot) = self.slots.take() {
                return (None, slot);
            }
            freed.await;
        }
    }

    /// In the wait line under a connect rate: an idle connection, or a
    /// place and a connect. One waiter at a time has the turn to wait for
    /// the connect (and a place); the others wait for an idle connection
    /// or the turn.
    async fn wait_for_a_connect(&self, pace: &Pace) -> (Option<Conn>, Slot) {
        let mut turn = None;
        loop {
            let freed = self.slots.freed().notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let placed = self.slots.placed().notified();
            tokio::pin!(placed);
            placed.as_mut().enable();
            if let Some((stream, slot)) = self.take_idle() {
                return (Some(stream), slot);
            }
            if turn.is_none() {
                turn = pace.turn().try_acquire().ok();
            }
            if turn.is_none() {
                tokio::select! {
                    () = freed => {}
                    t = pace.turn().acquire() => turn = t.ok(),
                }
                continue;
            }
            if let Err(at) = pace.ready() {
                tokio::select! {
                    () = freed => {}
                    () = tokio::time::sleep_until(at.into()) => {}
                }
                continue;
            }
            let Some(slot) = self.slots.take() else {
                tokio::select! {
                    () = freed => {}
                    () = placed => {}
                }
                continue;
            };
            match pace.take() {
                Ok(()) => return (None, slot),
                // Taken by a request that found it at once.
                Err(_) => slot.give_back(),
            }
        }
    }

    /// Opens up to `n` connections (as many as the limit and the connect
    /// rate allow now) and leaves them idle in the pool; one that fails
    /// ends the warming, silently (the run finds out for itself).
    pub(crate) async fn prewarm(&self, n: usize) {
        for _ in 0..n {
            let Some(slot) = self.slots.take() else {
                return;
            };
            if self.pace.as_ref().is_some_and(|p| p.take().is_err()) {
                slot.give_back();
                return;
            }
            match self.connect().await {
                Ok(stream) => self.put_idle(stream, slot),
                Err(_) => return,
            }
        }
    }

    async fn connect(&self) -> Result<Conn, HttpError> {
        let stream = TcpStream::connect(self.addr).await.map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EADDRNOTAVAIL) => self.no_port.fetch_add(1, Ordering::Relaxed),
                Some(libc::EMFILE | libc::ENFILE) => {
                    self.no_descriptor.fetch_add(1, Ordering::Relaxed)
                }
                _ => 0,
            };
            HttpError::Connect(e)
        })?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        // Requests are written whole; don't let Nagle hold the last segment.
        let _ = stream.set_nodelay(true);
        // A caller who hangs up closes with a reset, not a FIN: the socket
        // leaves no TIME_WAIT behind. A slow target makes one hang-up per
        // timed-out caller (10,000 a second at 20,000/s against a target
        // serving half), and a minute of TIME_WAIT each fills the 28,232
        // ephemeral ports of 127.0.0.1 in seconds: every later connect then
        // searches them in the kernel (__inet_hash_connect: a third of the
        // generator's core in a profile), and the schedule falls behind.
        let _ = stream.set_zero_linger();
        Ok(match &self.tls {
            None => Conn::Plain(stream),
            // A failed handshake (a certificate refused) is a connect error:
            // no request was sent. The handshake's state (the session, a
            // kilobyte or so) is boxed: held inline, it would widen every
            // person's future, waiting or not.
            Some(tls) => Conn::Tls(Box::new(
                Box::pin(tls.handshake(stream))
                    .await
                    .map_err(HttpError::Connect)?,
            )),
        })
    }

    /// Sends the request that `request` makes (head and body, whole) and
    /// reads the response head. The request is made when it is written and
    /// dropped right after, so a request waiting for its answer holds
    /// neither its head nor its body. A reused connection found closed
    /// before any byte of the answer is replaced by a fresh one, once, as
    /// the server never saw the request on it. A wait for a connection at
    /// the load generator's own bound is timed in `wait` (read by the
    /// caller even if this is dropped meanwhile); one at the scenario's
    /// `max_connections` is part of the request's latency, as the
    /// scenario's callers' own.
    pub(crate) async fn send(
        &self,
        request: impl Fn() -> Vec<u8>,
        wait: &mut BoundWait,
    ) -> Result<Response<'_>, HttpError> {
        loop {
            let (stream, slot, reused) = self.checkout(wait).await?;
            match exchange(stream, &request, reused).await {
                Ok(head) => return Ok(self.response(head, slot)),
                // Only a reused connection is stale; each is dropped, so
                // this ends on a fresh connection at the latest.
                Err(Failure::Stale) => continue,
                Err(Failure::Failed(e)) => return Err(e),
            }
        }
    }

    fn response(&self, head: Head, slot: Slot) -> Response<'_> {
        Response {
            status: head.status,
            headers: head.headers,
            connector: self,
            slot: Some(slot),
            stream: Some(head.stream),
            buf: head.rest,
            pos: 0,
            framing: head.framing,
            keep_alive: head.keep_alive,
        }
    }
}

enum Failure {
    /// A reused connection turned out closed: retry on a fresh one.
    Stale,
    Failed(HttpError),
}

struct Head {
    stream: Conn,
    status: u16,
    headers: Kept,
    rest: Vec<u8>,
    framing: Framing,
    keep_alive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (1xx, 204, 304).
    Empty,
    /// `content-length` bytes left.
    Length(u64),
    /// Chunked transfer coding, in this state.
    Chunked(Chunk),
    /// Until the server closes the connection.
    Eof,
    /// The body has been read.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

async fn read_more(stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    // A server that writes without end keeps the socket always readable,
    // and readiness alone never yields: without this, one attempt reading
    // an endless body held its worker, and its patience timer went
    // unchecked for seconds.
    tokio::task::consume_budget().await;
    loop {
        stream.readable().await?;
        // The buffer is only grown once bytes are waiting: a request that
        // waits for its answer holds no buffer at all.
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match stream.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn exchange(
    mut stream: Conn,
    request: &impl Fn() -> Vec<u8>,
    reused: bool,
) -> Result<Head, Failure> {
    let broke = |e: io::Error| {
        if reused {
            Failure::Stale
        } else {
            Failure::Failed(HttpError::Reset(e.to_string()))
        }
    };
    let bytes = request();
    stream.write_request(&bytes).await.map_err(broke)?;
    drop(bytes);
    let mut buf = Vec::new();
    loop {
        let n = match stream.read_more(&mut buf).await {
            Ok(n) => n,
            Err(e) if buf.is_empty() => return Err(broke(e)),
            Err(e) => return Err(Failure::Failed(HttpError::Reset(e.to_string()))),
        };
        if n == 0 {
            return Err(if buf.is_empty() && reused {
                Failure::Stale
            } else {
                Failure::Failed(HttpError::Reset("closed before the response head".into()))
            });
        }
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut slots);
        let protocol = |m: String| Failure::Failed(HttpError::Protocol(m));
        match parsed.parse(&buf) {
            Ok(httparse::Status::Partial) => {
                if buf.len() > MAX_HEAD {
                    return Err(protocol("response head too large".into()));
                }
            }
            Err(e) => return Err(protocol(e.to_string())),
            Ok(httparse::Status::Complete(len)) => {
                let status = parsed.code.unwrap_or(0);
                if (100..200).contains(&status) && status != 101 {
                    // An interim answer (100 Continue): the real one follows.
                    buf.drain(..len);
                    continue;
                }
                // Only the headers a caller reads are kept; framing and
                // keep-alive are decided here.
                let mut headers = Kept::default();
                let mut chunked = false;
                let mut close = false;
                let mut length = None;
                for h in parsed.headers.iter() {
                    let name = h.name;
                    let tokens = || {
                        std::str::from_utf8(h.value)
                            .unwrap_or("")
                            .split(',')
                            .map(|t| t.trim().to_ascii_lowercase())
                    };
                    if name.eq_ignore_ascii_case("transfer-encoding") {
                        chunked |= tokens().any(|t| t == "chunked");
                    } else if name.eq_ignore_ascii_case("connection") {
                        close |= tokens().any(|t| t == "close");
                    } else if name.eq_ignore_ascii_case("content-length") {
                        let n = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|s| s.trim().parse::<u64>().ok())
                            .ok_or_else(|| protocol("bad content-length".into()))?;
                        length = Some(n);
                    } else {
                        headers.keep(name, h.value);
                    }
                }
                let framing = if status == 204 || status == 304 || status < 200 {
                    Framing::Empty
                } else if chunked {
                    Framing::Chunked(Chunk::Size)
                } else if let Some(n) = length {
                    Framing::Length(n)
                } else {
                    Framing::Eof
                };
                let keep_alive = parsed.version == Some(1) && !close && framing != Framing::Eof;
                buf.drain(..len);
                return Ok(Head {
                    stream,
                    status,
                    headers,
                    rest: buf,
                    framing,
                    keep_alive,
                });
            }
        }
    }
}

/// How a response body arrived: when its first bytes came, how many reads
/// brought body bytes, and the longest wait between two of them. A read
/// is one time the connection handed over new bytes (one `read` on a plain
/// socket, one fill of a TLS session's buffer) of which the body's
/// decoding passed some on as body; the bytes that came with the head
/// count as the first read when there are body bytes among them. Why: a
/// stream relayed as it is made arrives in a read per event or few, spread
/// over the stream's time; one that something buffered whole arrives in
/// one or two reads, back to back.
///
/// Kept by the caller, so what was seen survives a hang-up (the reading
/// future dropped). Times after the first are microseconds after it, in
/// 32 bits (saturating at 71 minutes, longer than any patience): the
/// record sits in every waiting person's state, where two more instants
/// would cost 16 bytes more.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BodyPace {
    /// When the first read that brought body bytes handed them over.
    first: Option<Instant>,
    /// The last such read, in µs after `first`.
    last_us: u32,
    /// The longest time between two consecutive such reads, in µs.
    longest_gap_us: u32,
    /// How many reads brought body bytes.
    reads: u32,
}

impl BodyPace {
    /// One more read brought body bytes, handed over at `at`.
    fn data_read(&mut self, at: Instant) {
        self.reads = self.reads.saturating_add(1);
        let Some(first) = self.first else {
            self.first = Some(at);
            return;
        };
        let us = u32::try_from(at.saturating_duration_since(first).as_micros()).unwrap_or(u32::MAX);
        self.longest_gap_us = self.longest_gap_us.max(us.saturating_sub(self.last_us));
        self.last_us = us;
    }

    /// When the first body bytes were handed over, if any came.
    pub(crate) fn first(&self) -> Option<Instant> {
        self.first
    }

    /// How many reads brought body bytes (0: no body).
    pub(crate) fn reads(&self) -> u32 {
        self.reads
    }

    /// The longest time between two consecutive reads that brought body
    /// bytes, in µs (0 with fewer than two).
    pub(crate) fn longest_gap_us(&self) -> u64 {
        u64::from(self.longest_gap_us)
    }
}

/// A response whose head has been read; the body is read with
/// [`Response::read_body`].
#[derive(Debug)]
pub(crate) struct Response<'c> {
    pub(crate) status: u16,
    pub(crate) headers: Kept,
    connector: &'c Connector,
    slot: Option<Slot>,
    stream: Option<Conn>,
    buf: Vec<u8>,
    pos: usize,
    framing: Framing,
    keep_alive: bool,
}

impl Response<'_> {
    /// Reads the body to its end, handing each decoded piece to `sink` as
    /// it arrives, and noting in `pace` each read that brought body bytes
    /// (one clock read for each, taken before its first piece is handed
    /// on). The connection goes back to the pool when the body was read in
    /// full and the server keeps it alive. Past `cap` body bytes (or at
    /// a head announcing more) the read stops with
    /// [`HttpError::Oversized`] and the connection is dropped: no more than
    /// `cap` bytes are ever handed on, however much the server sends.
    pub(crate) async fn read_body(
        mut self,
        pace: &mut BodyPace,
        cap: u64,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(), HttpError> {
        match self.framing {
            Framing::Empty => self.framing = Framing::Done,
            Framing::Length(n) if n > cap => return Err(HttpError::Oversized(cap)),
            _ => {}
        }
        let mut passed: u64 = 0;
        loop {
            // Everything decoded in one pass came in one read (the head's,
            // or the last `read_more`): a chunked read of many events is one.
            // (A block: nothing of it is kept across the read's await.)
            {
                let mut at = None;
                let mut over = false;
                let decoded = self.decode(&mut |data: &[u8]| {
                    if at.is_none() {
                        at = Some(Instant::now());
                    }
                    passed = passed.saturating_add(data.len() as u64);
                    if passed > cap {
                        over = true;
                    } else if !over {
                        sink(data);
                    }
                });
                if let Some(at) = at {
                    pace.data_read(at);
                }
                if over {
                    return Err(HttpError::Oversized(cap));
                }
                decoded?;
            }
            if self.framing == Framing::Done {
                break;
            }
            if self.pos == self.buf.len() {
                self.buf.clear();
                self.pos = 0;
            } else if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            let stream = self
                .stream
                .as_mut()
                .expect("the stream is kept until the end");
            match stream.read_more(&mut self.buf).await {
                Ok(0) if self.framing == Framing::Eof => self.framing = Framing::Done,
                Ok(0) => return Err(HttpError::Reset("closed in the middle of the body".into())),
                Ok(_) => {}
                Err(e) => return Err(HttpError::Reset(e.to_string())),
            }
        }
        // Bytes past the end of the answer were not asked for (no request is
        // pipelined): the server broke its framing, so the connection is not
        // reused, or the next answer on it would be read from that surplus.
        if self.keep_alive && self.pos == self.buf.len() {
            if let (Some(stream), Some(slot)) = (self.stream.take(), self.slot.take()) {
                self.connector.put_idle(stream, slot);
            }
        }
        Ok(())
    }

    /// Decodes as much of the buffered bytes as possible.
    fn decode(&mut self, sink: &mut impl FnMut(&[u8])) -> Result<(), HttpError> {
        let protocol = |m: &str| HttpError::Protocol(m.into());
        loop {
            let avail = &self.buf[self.pos..];
            match self.framing {
                Framing::Empty | Framing::Done => {
                    self.framing = Framing::Done;
                    return Ok(());
                }
                Framing::Eof => {
                    if !avail.is_empty() {
                        sink(avail);
                    }
                    self.pos = self.buf.len();
                    return Ok(());
                }
                Framing::Length(left) => {
                    let n = (left.min(avail.len() as u64)) as usize;
                    if n > 0 {
                        sink(&avail[..n]);
                        self.pos += n;
                    }
                    let left = left - n as u64;
                    self.framing = if left == 0 {
                        Framing::Done
                    } else {
                        Framing::Length(left)
                    };
                    if left > 0 {
                        return Ok(());
                    }
                }
                Framing::Chunked(Chunk::Size) => {
                    let Some(eol) = find_crlf(avail) else {
                        if avail.len() > 1024 {
                            return Err(protocol("chunk size line too long"));
                        }
                        return Ok(());
                    };
                    let line = std::str::from_utf8(&avail[..eol])
                        .map_err(|_| protocol("bad chunk size"))?;
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size =
                        u64::from_str_radix(hex, 16).map_err(|_| protocol("bad chunk size"))?;
                    self.pos += eol + 2;
                    self.framing = Framing::Chunked(if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    });
                }
                Framing::Chunked(Chunk::Data(left)) => {
                    let n = (left.min(avail.len() as u64)) as usize;
                    if n == 0 {
                        return Ok(());
                    }
                    sink(&avail[..n]);
                    self.pos += n;
                    let left = left - n as u64;
                    self.framing = Framing::Chunked(if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    });
                }
                Framing::Chunked(Chunk::DataEnd) => {
                    if avail.len() < 2 {
                        return Ok(());
                    }
                    if &avail[..2] != b"\r\n" {
                        return Err(protocol("chunk not followed by CRLF"));
                    }
                    self.pos += 2;
                    self.framing = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailers) => {
                    let Some(eol) = find_crlf(avail) else {
                        return Ok(());
                    };
                    self.pos += eol + 2;
                    if eol == 0 {
                        self.framing = Framing::Done;
                    }
                }
            }
        }
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A limit no test reaches.
    const UNBOUNDED: usize = 1 << 20;

    /// A server that answers each connection's requests with `answers` in
    /// turn, written in pieces of `piece` bytes, then closes.
    async fn server(answers: Vec<Vec<u8>>, piece: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for answer in answers {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&b[..n]);
                }
                for part in answer.chunks(piece) {
                    s.write_all(part).await.unwrap();
                    s.flush().await.unwrap();
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        });
        addr
    }

    async fn body_of(c: &Connector) -> Result<(u16, Vec<u8>), HttpError> {
        capped_body_of(c, u64::MAX).await
    }

    async fn capped_body_of(c: &Connector, cap: u64) -> Result<(u16, Vec<u8>), HttpError> {
        let r = c
            .send(
                || b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
                &mut BoundWait::default(),
            )
            .await?;
        let status = r.status;
        let mut out = Vec::new();
        r.read_body(&mut BodyPace::default(), cap, |b| out.extend_from_slice(b))
            .await?;
        Ok((status, out))
    }

    #[tokio::test]
    async fn an_answer_past_the_cap_is_oversized_and_never_handed_on_whole() {
        // At the cap: read whole, and the connection kept.
        let at = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec();
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n".to_vec();
        let addr = server(vec![at, chunked], 4).await;
        let conn = Connector::new(addr, UNBOUNDED, true);
        assert_eq!(
            capped_body_of(&conn, 5).await.unwrap(),
            (200, b"hello".to_vec())
        );
        // Chunked, past it in its second chunk: counted as it passes.
        let e = capped_body_of(&conn, 5).await.unwrap_err();
        assert!(matches!(e, HttpError::Oversized(5)), "{e:?}");
        assert_eq!(conn.opened(), 1, "one connection for both");
        // A head announcing more than the cap: refused before any body.
        let huge = b"HTTP/1.1 200 OK\r\ncontent-length: 100000000000\r\n\r\nxx".to_vec();
        let conn = Connector::new(server(vec![huge], 64).await, UNBOUNDED, true);
        let e = capped_body_of(&conn, 1 << 20).await.unwrap_err();
        assert!(matches!(e, HttpError::Oversized(_)), "{e:?}");
    }

    #[tokio::test]
    async fn content_length_and_chunked_over_one_kept_alive_connection() {
        let a = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec();
        let b = b"HTTP/1.1 429 Too Many\r\nretry-after-ms: 40\r\nX-Gateway-Reason: queue_full\r\nContent-Type: Text/Event-Stream; x=y\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nt: 1\r\n\r\n".to_vec();
        let c = b"HTTP/1.1 204 No Content\r\n\r\n".to_vec();
        let addr = server(vec![a, b, c], 7).await;
        let conn = Connector::new(addr, UNBOUNDED, true);
        assert_eq!(body_of(&conn).await.unwrap(), (200, b"hello".to_vec()));
        let r = conn
            .send(
                || b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
                &mut BoundWait::default(),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 429);
        assert_eq!(
            r.headers,
            Kept {
                event_stream: true,
                retry_after: None,
                retry_after_ms: Some("40".into()),
                gateway_reason: Some("queue_full".into()),
            }
        );
        let mut out = Vec::new();
        r.read_body(&mut BodyPace::default(), u64::MAX, |b| {
            out.extend_from_slice(b)
        })
        .await
        .unwrap();
        assert_eq!(out, b"abcde");
        assert_eq!(body_of(&conn).await.unwrap(), (204, Vec::new()));
    }

    #[test]
    fn a_body_pace_counts_reads_and_keeps_the_longest_gap() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut pace = BodyPace::default();
        assert_eq!(
            (pace.first(), pace.reads(), pace.longest_gap_us()),
            (None, 0, 0)
        );
        pace.data_read(ms(5));
        assert_eq!(
            (pace.first(), pace.reads(), pace.longest_gap_us()),
            (Some(ms(5)), 1, 0)
        );
        for at in [15, 45, 50, 52] {
            pace.data_read(ms(at));
        }
        assert_eq!(pace.first(), Some(ms(5)), "the first read stays the first");
        assert_eq!((pace.reads(), pace.longest_gap_us()), (5, 30_000));
    }

    /// Reads one request head on `s`; false if the client left first.
    async fn request_head(s: &mut TcpStream) -> bool {
        let mut req = Vec::new();
        let mut b = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => req.extend_from_slice(&b[..n]),
            }
        }
        true
    }

    /// A server that answers one request with `writes`, each written
    /// whole after `pause` (Nagle off, so each goes out as it is written).
    async fn paced_server(writes: Vec<&'static [u8]>, pause: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            if !request_head(&mut s).await {
                return;
            }
            for (i, w) in writes.into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(pause).await;
                }
                if s.write_all(w).await.is_err() {
                    return;
                }
            }
        });
        addr
    }

    async fn paced_body(addr: SocketAddr) -> (Vec<u8>, BodyPace) {
        let conn = Connector::new(addr, UNBOUNDED, true);
        let r = conn
            .send(
                || b"GET / HTTP/1.1\r\n\r\n".to_vec(),
                &mut BoundWait::default(),
            )
            .await
            .unwrap();
        let mut pace = BodyPace::default();
        let mut out = Vec::new();
        r.read_body(&mut pace, u64::MAX, |b| out.extend_from_slice(b))
            .await
            .unwrap();
        (out, pace)
    }

    #[tokio::test]
    async fn a_body_sent_in_pieces_is_read_in_pieces_with_their_gaps() {
        const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        let pieces: Vec<&[u8]> = vec![
            HEAD,
            b"2\r\nab\r\n",
            b"2\r\ncd\r\n",
            b"2\r\nef\r\n",
            b"2\r\ngh\r\n",
            b"2\r\nij\r\n0\r\n\r\n",
        ];
        let (body, pace) = paced_body(paced_server(pieces, Duration::from_millis(40)).await).await;
        assert_eq!(body, b"abcdefghij");
        // Five pieces 40 ms apart: each its own read unless the test's
        // task was held up past a pause (a busy machine), when two merge.
        assert!((3..=5).contains(&pace.reads()), "{pace:?}");
        let gap = pace.longest_gap_us();
        assert!((30_000..2_000_000).contains(&gap), "{pace:?}");
    }

    #[tokio::test]
    async fn a_body_sent_at_once_is_one_read_and_framing_alone_is_no_read() {
        let whole: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabcdefghij";
        let (body, pace) = paced_body(paced_server(vec![whole], Duration::ZERO).await).await;
        assert_eq!(body, b"abcdefghij");
        assert_eq!((pace.reads(), pace.longest_gap_us()), (1, 0), "{pace:?}");
        assert!(pace.first().is_some());
        // A chunk's size line arriving on its own hands over no body.
        let parts: Vec<&[u8]> = vec![
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n",
            b"hello\r\n0\r\n\r\n",
        ];
        let (body, pace) = paced_body(paced_server(parts, Duration::from_millis(30)).await).await;
        assert_eq!(body, b"hello");
        assert_eq!((pace.reads(), pace.longest_gap_us()), (1, 0), "{pace:?}");
        // No body at all: no read, no first byte.
        let empty: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
        let (_, pace) = paced_body(paced_server(vec![empty], Duration::ZERO).await).await;
        assert_eq!((pace.first(), pace.reads()), (None, 0));
    }

    #[tokio::test]
    async fn body_until_close_and_cut_bodies() {
        let addr = server(
            vec![b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it".to_vec()],
            4,
        )
        .await;
        assert_eq!(
            body_of(&Connector::new(addr, UNBOUNDED, true))
                .await
                .unwrap(),
            (200, b"all of it".to_vec())
        );
        let addr = server(
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nshort".to_vec()],
            100,
        )
        .await;
        assert!(matches!(
            body_of(&Connector::new(addr, UNBOUNDED, true)).await,
            Err(HttpError::Reset(_))
        ));
        let addr = server(
            vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab".to_vec()],
            100,
        )
        .await;
        assert!(matches!(
            body_of(&Connector::new(addr, UNBOUNDED, true)).await,
            Err(HttpError::Reset(_))
        ));
        let addr = server(vec![b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()], 100).await;
        assert!(matches!(
            body_of(&Connector::new(addr, UNBOUNDED, true)).await,
            Err(HttpError::Protocol(_))
        ));
    }

    #[tokio::test]
    async fn a_closed_idle_connection_is_replaced() {
        // The server answers once on each connection and closes it; the
        // pool then holds a dead connection, and the next request must go
        // out on a new one: found dead on the first write and read (idle
        // a short while), or by a look before it is reused (idle longer).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..3 {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await.unwrap();
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                drop(s);
            }
        });
        let conn = Connector::new(addr, UNBOUNDED, true);
        assert_eq!(body_of(&conn).await.unwrap().1, b"ok");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(body_of(&conn).await.unwrap().1, b"ok");
        tokio::time::sleep(LOOK_AFTER_IDLE + Duration::from_millis(50)).await;
        assert_eq!(body_of(&conn).await.unwrap().1, b"ok");
    }

    /// A server that counts the connections it accepts and answers every
    /// request on them `ok`, after `delay`.
    async fn counting_server(delay: Duration) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 {
                            return;
                        }
                        tokio::time::sleep(delay).await;
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn prewarmed_connections_wait_idle_and_are_used() {
        let (addr, accepted) = counting_server(Duration::ZERO).await;
        let conn = Connector::new(addr, UNBOUNDED, true);
        conn.prewarm(3).await;
        assert_eq!(conn.idle.lock().unwrap().len(), 3);
        assert_eq!(body_of(&conn).await.unwrap().1, b"ok");
        // Under a cap, no more than it allows.
        let capped = Connector::new(addr, 2, false);
        capped.prewarm(5).await;
        assert_eq!(capped.idle.lock().unwrap().len(), 2);
        assert_eq!(body_of(&capped).await.unwrap().1, b"ok");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 5);
    }

    /// Sends a request on `conn`, reads its answer whole, and gives back
    /// how long it waited in the client for its connection.
    async fn waited_for(conn: Arc<Connector>) -> BoundWait {
        let mut wait = BoundWait::default();
        let r = conn
            .send(|| b"GET / HTTP/1.1\r\n\r\n".to_vec(), &mut wait)
            .await;
        let pace = &mut BodyPace::default();
        r.unwrap().read_body(pace, u64::MAX, |_| {}).await.unwrap();
        wait
    }

    #[tokio::test]
    async fn a_cap_makes_requests_share_connections() {
        let (addr, accepted) = counting_server(Duration::from_millis(5)).await;
        // The callers' pool of 2 (not the load generator's own bound).
        let conn = Arc::new(Connector::new(addr, 2, false));
        let tasks: Vec<_> = (0..10)
            .map(|_| tokio::spawn(waited_for(conn.clone())))
            .collect();
        let mut waited = 0;
        for t in tasks {
            let wait = t.await.unwrap();
            assert!(!wait.never_got());
            waited += usize::from(wait.waited_us().is_some());
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A wait at a pool is timed as at the bound: the client's wait.
        assert_eq!(waited, 8, "two went at once, eight waited in the client");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_connect_rate_requests_wait_for_an_idle_connection_or_a_connect() {
        let (addr, accepted) = counting_server(Duration::from_millis(30)).await;
        // 20 new connections a second: one at a time, 50 ms apart.
        let conn = Arc::new(Connector::new(addr, UNBOUNDED, true).with_connect_rate(Some(20.0)));
        let began = Instant::now();
        let tasks: Vec<_> = (0..12)
            .map(|_| tokio::spawn(waited_for(conn.clone())))
            .collect();
        let mut waited = 0;
        for t in tasks {
            waited += usize::from(t.await.unwrap().waited_us().is_some());
        }
        let elapsed = began.elapsed().as_secs_f64();
        let opened = conn.opened();
        assert!(
            opened as f64 <= 2.0 + elapsed * 20.0,
            "{opened} connections in {elapsed} s"
        );
        assert!((1..12).contains(&opened), "{opened}");
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst) as u64,
            opened
        );
        assert!(waited >= 12 - opened as usize, "{waited} waited");
        // Warming takes only what the rate has left: nothing now.
        let before = conn.opened();
        conn.prewarm(5).await;
        assert!(conn.opened() <= before + 1, "{}", conn.opened());
    }

    #[tokio::test]
    async fn refused_connection_is_a_connect_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert!(matches!(
            body_of(&Connector::new(addr, UNBOUNDED, true)).await,
            Err(HttpError::Connect(_))
        ));
    }

    #[tokio::test]
    async fn at_its_own_bound_a_request_waits_and_the_wait_is_timed() {
        let (addr, accepted) = counting_server(Duration::from_millis(20)).await;
        let conn = Arc::new(Connector::new(addr, 2, true));
        let tasks: Vec<_> = (0..6)
            .map(|_| tokio::spawn(waited_for(conn.clone())))
            .collect();
        let mut waited = 0;
        for t in tasks {
            let wait = t.await.unwrap();
            assert!(!wait.never_got());
            waited += usize::from(wait.waited_us().is_some());
        }
        assert_eq!(waited, 4, "two went at once, four waited at the bound");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(conn.most_open(), 2);
        // The bound falls below the connections open: each one coming
        // back is closed instead of kept idle, until they are within it.
        conn.set_limit(1, true);
        assert_eq!(conn.idle.lock().unwrap().len(), 2, "both idle still");
        let (a, b) = (conn.take_idle().unwrap(), conn.take_idle().unwrap());
        conn.put_idle(a.0, a.1);
        assert!(
            conn.idle.lock().unwrap().is_empty(),
            "closed: over the bound"
        );
        conn.put_idle(b.0, b.1);
        assert_eq!(conn.idle.lock().unwrap().len(), 1, "kept: within it");
    }

    /// A caller who hangs up mid-request closes with a reset: the server
    /// reads ECONNRESET, not an end of stream, and the client's port is
    /// left in no TIME_WAIT (the slow target's churn of hang-ups would
    /// otherwise fill the ephemeral ports).
    #[tokio::test]
    async fn a_hang_up_resets_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut b = [0u8; 1024];
            // The request, then no answer: the caller gives up.
            let mut got = 0;
            loop {
                match s.read(&mut b).await {
                    Ok(0) => return Ok(got),
                    Ok(n) => got += n,
                    Err(e) => return Err(e.kind()),
                }
            }
        });
        let conn = Connector::new(addr, UNBOUNDED, true);
        let patience = tokio::time::timeout(
            Duration::from_millis(100),
            conn.send(
                || b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
                &mut BoundWait::default(),
            ),
        )
        .await;
        assert!(patience.is_err(), "the server never answers");
        let read = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server saw the hang-up")
            .unwrap();
        assert_eq!(read, Err(std::io::ErrorKind::ConnectionReset));
    }
}
