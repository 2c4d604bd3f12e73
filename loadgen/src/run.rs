//! The run: one dispatcher that keeps the schedule, one task per person,
//! one writer thread for records and aggregates.
//!
//! The dispatcher (a task, woken by a timerfd) sleeps until each
//! arrival's fixed deadline
//! (`start + offset`, never "now + gap", so lateness does not accumulate)
//! and spawns the person; it never waits for a connection, a worker or an
//! answer. Each person task makes its attempts within its patience, hangs up
//! (drops the connection) when patience runs out, and sends one record per
//! attempt to the writer.
//!
//! Its rooms: `alarm`, the timerfd the dispatcher sleeps on; `bound`, the
//! generator's own bound on its open connections; `writer`, the record
//! writer's thread and the run's aggregates; `line`, a record as a line of
//! `client.jsonl`, written field by field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Uri;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, warn, Instrument};
use wire::headers::{ANTHROPIC_VERSION, REQUEST_ID};
use wire::{files, ClientOutcome, ClientRecord, Clock, Dialect};

use crate::config::LoadPlan;
use crate::config::RequestShape;
use crate::http1::{BodyPace, BoundWait, Connector, HttpError, TlsTarget};
use crate::progress::Live;
use crate::request::head::{Head, DEFAULT_TENANT};
use crate::request::{json, AnswerReader, Drawn};
use crate::retry::{retryable, RetryBudget};
use crate::schedule::{Arrivals, Source};
use crate::stats::{RunReport, Stats};
use crate::tls::{TlsError, TlsOptions};

mod alarm;
mod bound;
mod line;
mod writer;

use alarm::Alarm;
use writer::spawn_writer;

/// Where requests go: an `http://` or `https://host:port[/base]` URL.
#[derive(Debug, Clone)]
pub struct Target {
    authority: String,
    base_path: String,
    /// The URL's query string, sent after the path's own.
    query: Option<String>,
    host_port: String,
    /// `https://`: the host, as the certificate must name it (and as SNI).
    tls_host: Option<String>,
}

/// Why a target URL is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not a URL.
    #[error("`{url}` is not a URL: {cause}")]
    NotAUrl {
        /// The text given.
        url: String,
        /// The parser's complaint.
        cause: String,
    },
    /// Neither HTTP nor HTTPS.
    #[error("`{url}`: only http:// and https:// targets are supported")]
    Scheme {
        /// The text given.
        url: String,
    },
}

impl Target {
    /// Parses `http[s]://host[:port][/base/path]`; request paths
    /// (`/v1/chat/completions`) are appended to the base path.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| TargetError::NotAUrl {
                url: url.into(),
                cause: e.to_string(),
            })?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(TargetError::Scheme { url: url.into() }),
        };
        let authority = uri.authority().ok_or_else(|| TargetError::NotAUrl {
            url: url.into(),
            cause: "no host".into(),
        })?;
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let host = authority.host();
        let tls_host = match tls {
            true if crate::tls::server_name(host).is_none() => {
                return Err(TargetError::NotAUrl {
                    url: url.into(),
                    cause: format!("`{host}` cannot be a TLS server name"),
                })
            }
            true => Some(host.to_string()),
            false => None,
        };
        let base_path = uri.path().trim_end_matches('/');
        Ok(Target {
            authority: authority.as_str().to_string(),
            base_path: base_path.to_string(),
            query: uri.query().map(str::to_owned),
            host_port: format!("{host}:{port}"),
            tls_host,
        })
    }

    /// The full URL of `path` at this target.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}{}{}", self.authority, self.base_path, path)
    }

    /// Whether this is an `https://` target.
    pub fn is_tls(&self) -> bool {
        self.tls_host.is_some()
    }

    /// How to open sessions with an `https://` target under `config`.
    fn tls_target(&self, config: Arc<rustls::ClientConfig>) -> Option<TlsTarget> {
        let name = crate::tls::server_name(self.tls_host.as_deref()?)?;
        Some(TlsTarget {
            connector: config.into(),
            name,
        })
    }
}

/// When to stop sending, independent of the schedule: the run stops at the
/// first of the schedule's end, this condition, and the cancellation token.
#[derive(Debug, Clone, Copy, Default)]
pub struct StopCondition {
    /// No arrival later than this after the start.
    pub after: Option<Duration>,
    /// No more than this many people.
    pub max_people: Option<u64>,
}

/// How to run, beyond the plan.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where `client.jsonl`, `client.hlog`, `summary.json` and
    /// `load-seconds.csv` go (names in [`wire::files`]).
    pub out_dir: PathBuf,
    /// Draw an indicatif progress bar on stderr.
    pub progress: bool,
    /// When to stop early.
    pub stop: StopCondition,
    /// How long the connect probe before the run may take.
    pub probe_timeout: Duration,
    /// After a cancellation, how long attempts in flight may still finish;
    /// those still running then end as `cancelled`.
    pub cancel_grace: Duration,
    /// How an `https://` target's certificate is checked.
    pub tls: TlsOptions,
    /// The part of the schedule this process plays (the whole by default).
    pub shard: crate::Shard,
    /// When the schedule's offset 0 is, agreed between shards; `None`:
    /// just after the connect probe.
    pub start_at: Option<std::time::SystemTime>,
    /// Write `client.jsonl` (the default). When false, every attempt's
    /// record is still made and counted into the report, the histograms
    /// and the per-second counts, but no line is made of it and nothing is
    /// written: what the records cost is the difference
    /// (`rehearse load --no-records`).
    pub records: bool,
    /// A spending guard for a real account (`--max-spend-tokens`): the
    /// load stops, as if cancelled, before a request (a retry included)
    /// would take the tokens sent past it (see [`crate::SpendBudget`]).
    pub max_spend_tokens: Option<u64>,
    /// The open files this process has, the ceiling of the load
    /// generator's bound on its open connections (less 256 kept for the
    /// rest); `None`: the soft limit, raised to the hard one, read when
    /// the run starts.
    pub open_files: Option<u64>,
    /// True if the fake provider serves from this process (a rehearsal's
    /// in-process provider): its sockets come from the same open files,
    /// so the bound takes half of what is spare.
    pub open_files_shared: bool,
    /// The live counters to count into, for a caller that reads them
    /// while the run goes on (`--metrics-listen`); `None`: the run's own.
    pub live: Option<Arc<Live>>,
    /// What a scenario header's `{provider_url}` (the first) and
    /// `{provider_url:NAME}` are: the providers behind the gateway (a
    /// rehearsal's fake providers), (name, base URL) in the scenario's
    /// order. Empty: a header that needs one is an error when the run
    /// starts.
    pub provider_urls: Vec<(String, String)>,
}

impl LoadOptions {
    /// Options writing to `out_dir`, no progress bar, no early stop.
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        LoadOptions {
            out_dir: out_dir.into(),
            progress: false,
            stop: StopCondition::default(),
            probe_timeout: Duration::from_secs(3),
            cancel_grace: Duration::from_millis(500),
            tls: TlsOptions::default(),
            shard: crate::Shard::default(),
            start_at: None,
            records: true,
            max_spend_tokens: None,
            open_files: None,
            open_files_shared: false,
            live: None,
            provider_urls: Vec::new(),
        }
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadRunError {
    /// A scenario header cannot be made for this run (it needs a provider
    /// URL none was given).
    #[error("{0}")]
    Headers(String),
    /// The target did not accept a TCP connection.
    #[error("target {target} is unreachable: {cause}")]
    Unreachable {
        /// host:port
        target: String,
        /// What the connect attempt said.
        cause: String,
    },
    /// The TLS settings cannot be used (a CA file that cannot be read).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The target accepted a connection but no TLS session: its
    /// certificate was refused, or it does not speak TLS.
    #[error("TLS handshake with {target} failed: {cause}")]
    Handshake {
        /// host:port
        target: String,
        /// What the handshake said, and for a refused certificate what to
        /// do about it.
        cause: String,
    },
    /// An output file could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The agreed start instant had passed when the run was ready.
    #[error("the agreed start time passed {0:?} ago: give every shard a --start-at far enough ahead for all of them to be ready")]
    StartPassed(Duration),
}

fn output_error(path: &Path) -> impl FnOnce(std::io::Error) -> LoadRunError + '_ {
    move |source| LoadRunError::Output {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks that the target accepts connections, within `within`; returns
/// the address that did (names are resolved once, here).
pub async fn probe(target: &Target, within: Duration) -> Result<SocketAddr, LoadRunError> {
    let unreachable = |cause: String| LoadRunError::Unreachable {
        target: target.host_port.clone(),
        cause,
    };
    let attempt = async {
        let mut last = None;
        for addr in crate::resolve::resolve_authority(&target.host_port).await? {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => return Ok(addr),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("the name has no address")))
    };
    match tokio::time::timeout(within, attempt).await {
        Ok(Ok(addr)) => Ok(addr),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!(
            "no answer to a connect within {within:?}"
        ))),
    }
}

/// Checks that an `https://` target makes a TLS session under `tls`
/// within `within` (a TCP probe first); a plain target only gets the TCP
/// probe. A refused certificate fails at once, naming the problem.
pub async fn probe_tls(
    target: &Target,
    tls: &TlsOptions,
    within: Duration,
) -> Result<SocketAddr, LoadRunError> {
    let config = tls.client_config()?;
    let addr = probe(target, within).await?;
    if let Some(t) = target.tls_target(config) {
        handshake_probe(target, &t, addr, within).await?;
    }
    Ok(addr)
}

/// One TLS handshake with `addr`, within `within`.
async fn handshake_probe(
    target: &Target,
    tls: &TlsTarget,
    addr: SocketAddr,
    within: Duration,
) -> Result<(), LoadRunError> {
    let failed = |cause: String| LoadRunError::Handshake {
        target: target.host_port.clone(),
        cause,
    };
    let attempt = async {
        let socket = tokio::net::TcpStream::connect(addr).await?;
        tls.handshake(socket).await
    };
    match tokio::time::timeout(within, attempt).await {
        Ok(Ok(_session)) => Ok(()),
        Ok(Err(e)) if crate::tls::is_certificate_error(&e) => Err(failed(format!(
            "{e}: the target's certificate is not trusted here (--ca-file PEM trusts a \
             private CA; --insecure accepts any certificate)"
        ))),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(_) => Err(failed(format!("no handshake within {within:?}"))),
    }
}

/// What every person task shares.
struct Shared {
    plan: Arc<LoadPlan>,
    /// The arrivals this process plays.
    shard: crate::Shard,
    connector: Connector,
    /// The request heads: the plan's own, then one per tenant (their API
    /// keys, paths and headers differ).
    heads: Vec<Head>,
    clock: Clock,
    start: Instant,
    records: mpsc::UnboundedSender<ClientRecord>,
    live: Arc<Live>,
    budget: RetryBudget,
    cancel: CancellationToken,
    /// Cancelled `cancel_grace` after `cancel`: attempts still in flight
    /// then end as `cancelled`.
    hard_stop: CancellationToken,
    /// Whether the first connect error was logged.
    connect_warned: AtomicBool,
    /// The spending guard, when one is set.
    spend: Option<crate::SpendBudget>,
    /// The limit on open connections, phase by phase.
    bounds: Vec<bound::Step>,
    /// Attempts that waited in the client for a connection (at the bound,
    /// a busy pool, the connect rate), and those of them that got no
    /// connection within their patience.
    bound_waits: AtomicU64,
    not_sent: AtomicU64,
    /// Of the waits, those at the load generator's own bound.
    own_bound_waits: AtomicU64,
    /// Attempts not sent because the load generator came to them only
    /// after their person's patience had ended.
    not_sent_late: AtomicU64,
}

impl Shared {
    /// The spending guard: true if `drawn` may be sent; false (and the
    /// load stopped) when it would take the tokens sent past the budget.
    fn affordable(&self, drawn: &Drawn) -> bool {
        match &self.spend {
            Some(b) if !b.take(crate::spend::cost(drawn)) => {
                self.cancel.cancel();
                false
            }
            _ => true,
        }
    }
}

/// Runs `plan` against `target` until the schedule ends, `options.stop`
/// says so or `cancel` is cancelled, then waits for the people still
/// waiting (each at most their patience; no new retries after a cancel).
/// Records go to `client.jsonl` in `options.out_dir`, line by line as
/// attempts end; the report to `summary.json` and `load-seconds.csv`, the
/// histograms to `client.hlog`, each written whole at the end
/// ([`wire::files::write_atomic`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use loadgen::{LoadOptions, LoadPlan, Target};
/// let plan = LoadPlan::from_scenario_str(
///     "[load]\n[[load.phases]]\nduration = \"2s\"\nrate = 50\n",
///     "inline.toml",
///     std::path::Path::new("."),
/// )?;
/// let target = Target::parse("http://127.0.0.1:8080")?;
/// let report = loadgen::run(
///     &plan,
///     &target,
///     &LoadOptions::new("out"),
///     tokio_util::sync::CancellationToken::new(),
/// )
/// .await?;
/// println!("{}", report.table());
/// # Ok(()) }
/// ```
pub async fn run(
    plan: &LoadPlan,
    target: &Target,
    options: &LoadOptions,
    cancel: CancellationToken,
) -> Result<RunReport, LoadRunError> {
    let tls_config = options.tls.client_config()?;
    let addr = probe(target, options.probe_timeout).await?;
    let tls = target.tls_target(tls_config);
    if let Some(t) = &tls {
        handshake_probe(target, t, addr, options.probe_timeout).await?;
    }
    std::fs::create_dir_all(&options.out_dir).map_err(output_error(&options.out_dir))?;
    let records_path = options.out_dir.join(files::CLIENT_RECORDS);
    let file = match options.records {
        true => Some(std::fs::File::create(&records_path).map_err(output_error(&records_path))?),
        false => None,
    };

    let plan = Arc::new(plan.clone());
    let heads = heads(&plan, target, &options.provider_urls)?;

    let bounds = bound::steps(&plan, options.shard.count, bound::open_files(options));
    let connector = Connector::new(addr, bounds[0].limit, bounds[0].own())
        .with_connect_rate(plan.clients.connect_rate_per_s)
        .with_tls(tls);
    connector.prewarm(prewarm_count(&plan, options.shard)).await;

    let clock = Clock::new();
    // Start a little after now so the first arrivals are not late because
    // of the setup above; or at the agreed instant.
    let start = match options.start_at {
        None => Instant::now() + Duration::from_millis(20),
        Some(at) => match at.duration_since(clock.system_time(Instant::now())) {
            Ok(wait) => Instant::now() + wait,
            Err(late) => return Err(LoadRunError::StartPassed(late.duration())),
        },
    };
    let start_us = clock.us_at(start);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = spawn_writer(rx, file, records_path.clone(), Stats::new(start_us));
    let live = Live::starting(options.live.clone(), start_us);
    let progress = options
        .progress
        .then(|| crate::progress::spawn(live.clone(), start, plan.schedule_length()));

    // The grace after a cancellation: in-flight attempts get this long to
    // finish, then end as `cancelled` (one task for the run, so each person
    // future stays small).
    let hard_stop = CancellationToken::new();
    {
        let (cancel, hard_stop, grace) = (cancel.clone(), hard_stop.clone(), options.cancel_grace);
        tokio::spawn(async move {
            cancel.cancelled().await;
            tokio::time::sleep(grace).await;
            hard_stop.cancel();
        });
    }
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        shard: options.shard,
        connector,
        heads,
        clock,
        start,
        records: tx,
        live: live.clone(),
        budget: RetryBudget::default(),
        cancel: cancel.clone(),
        hard_stop: hard_stop.clone(),
        connect_warned: AtomicBool::new(false),
        spend: options.max_spend_tokens.map(crate::SpendBudget::new),
        bounds,
        bound_waits: AtomicU64::new(0),
        not_sent: AtomicU64::new(0),
        own_bound_waits: AtomicU64::new(0),
        not_sent_late: AtomicU64::new(0),
    });

    let tracker = TaskTracker::new();
    // The dispatcher is a task of the runtime (see `alarm`); it ends with
    // the schedule, the stop condition or the cancellation.
    let dispatcher = tokio::spawn(dispatch(
        shared.clone(),
        tracker.clone(),
        options.stop,
        cancel.clone(),
    ));
    if let Err(e) = dispatcher.await {
        // Only a panic in it, and then there is nothing more to dispatch.
        warn!(cause = %e, "the dispatcher stopped");
    }
    tracker.close();
    tracker.wait().await;
    let elapsed = start.elapsed();
    let spend = shared.spend.as_ref().map(crate::SpendBudget::summary);
    let connections_opened = shared.connector.opened();
    let (connection_bound, bound_notes) = bound_met(&shared);
    drop(shared);
    if let Some(p) = progress {
        p.finish().await;
    }

    let stats = tokio::task::spawn_blocking(move || writer.join())
        .await
        .expect("the join task does not panic")
        .expect("the writer thread does not panic")?;
    let hlog_path = options.out_dir.join(files::CLIENT_HLOG);
    let mut hlog = Vec::new();
    stats
        .write_histogram_log(&mut hlog, clock.system_time(start), elapsed)
        .and_then(|()| files::write_atomic(&hlog_path, &hlog))
        .map_err(output_error(&hlog_path))?;
    let mut report = stats.into_report(elapsed, plan.send_lag_bound);
    report.spend = spend;
    report.connections_opened = connections_opened;
    // Waits at its own bound: it could not open what the callers would.
    report.valid &= connection_bound.waited_at_own_bound == 0;
    report.connection_bound = connection_bound;
    report.notes.extend(bound_notes);
    write_summary(&report, &options.out_dir)?;
    Ok(report)
}

/// The request heads, made once: the plan's own, then each tenant's
/// (request line with the path and both query strings, host, content
/// type, the key as its auth says, the scenario's headers).
fn heads(
    plan: &LoadPlan,
    target: &Target,
    provider_urls: &[(String, String)],
) -> Result<Vec<Head>, LoadRunError> {
    let head = |shape: &RequestShape, tenant: &str| {
        let path = crate::request::head::request_target(
            &target.base_path,
            shape.path(),
            target.query.as_deref(),
        );
        let mut prefix = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n",
            target.authority
        );
        prefix.push_str(&shape.auth.line(&shape.api_key));
        if shape.api.dialect() == Dialect::Anthropic {
            prefix.push_str(&format!("{ANTHROPIC_VERSION}: 2023-06-01\r\n"));
        }
        Head::new(prefix.into_bytes(), &shape.headers, tenant, provider_urls)
            .map_err(LoadRunError::Headers)
    };
    std::iter::once(head(&plan.request, DEFAULT_TENANT))
        .chain(plan.tenants.iter().map(|t| head(&t.request, &t.name)))
        .collect()
}

/// `summary.json` and `load-seconds.csv`, each written whole.
fn write_summary(report: &RunReport, out_dir: &Path) -> Result<(), LoadRunError> {
    let summary_path = out_dir.join(files::LOAD_SUMMARY);
    let summary = serde_json::to_vec_pretty(report).expect("a report always serializes");
    files::write_atomic(&summary_path, &summary).map_err(output_error(&summary_path))?;
    let seconds_path = out_dir.join(files::LOAD_SECONDS);
    files::write_atomic(&seconds_path, report.seconds_csv().as_bytes())
        .map_err(output_error(&seconds_path))
}

/// Keeps the schedule: spawns each person at its fixed deadline.
///
/// It sleeps on an [`Alarm`] (a timerfd the runtime's I/O driver waits on)
/// rather than on tokio's timer, whose millisecond wheel rounds every
/// deadline up and would add about a millisecond of send lag to every
/// arrival; without a timerfd (not Linux), on tokio's timer.
async fn dispatch(
    shared: Arc<Shared>,
    tracker: TaskTracker,
    stop: StopCondition,
    cancel: CancellationToken,
) {
    // Wake-ups are at least this far apart; arrivals due in between are
    // spawned together at the next wake-up, at most this late. At 50,000/s
    // that is a wake-up per 10 arrivals instead of one each, for a lag
    // still well under the millisecond.
    const MIN_WAKE_GAP: Duration = Duration::from_micros(200);
    // At most this many people are spawned in a row; then the dispatcher
    // yields, and runs again once the runtime has read what the network
    // brought meanwhile. In step (10 a wake-up at 50,000/s) it never
    // yields. Behind (its core was taken for a while, and thousands are
    // due at once), it hands people out no faster than the runtime gets
    // through them, so each finds the connections freed by the answers
    // read before it, instead of all finding every connection busy and
    // opening thousands (a loopback connect costs this core tens of
    // microseconds: at 50,000/s such a storm made the next stall longer,
    // and grew to 15,000 connections and a collapse).
    const MAX_IN_A_ROW: u32 = 32;
    let mut in_a_row = 0;
    let alarm = Alarm::new()
        .inspect_err(|e| warn!(cause = %e, "no timerfd: the schedule is kept to the millisecond"))
        .ok();
    let after_us = stop.after.map(|d| d.as_micros() as u64);
    let mut last_wake = Instant::now();
    let shard = shared.shard;
    let arrivals = (0u64..)
        .zip(shared.plan.arrivals.iter(shared.plan.seed))
        .filter(|(index, _)| shard.owns(*index));
    // The next phase's bound on open connections, set as its first person
    // is due.
    let mut bounds = shared.bounds.iter().skip(1).peekable();
    for (index, arrival) in arrivals {
        if stop.max_people.is_some_and(|m| index >= m)
            || after_us.is_some_and(|a| arrival.offset_us > a)
        {
            break;
        }
        while let Some(step) = bounds.next_if(|s| s.from_us <= arrival.offset_us) {
            shared.connector.set_limit(step.limit, step.own());
        }
        let due = shared.start + Duration::from_micros(arrival.offset_us);
        let now = Instant::now();
        if now < due {
            let until = due.max(last_wake + MIN_WAKE_GAP);
            let slept = async {
                match &alarm {
                    Some(alarm) => alarm.sleep(until - now).await,
                    None => {
                        tokio::time::sleep_until(until.into()).await;
                        Ok(())
                    }
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                slept = slept => if let Err(e) = slept {
                    warn!(cause = %e, "the schedule's timer failed");
                    return;
                },
            }
            last_wake = Instant::now();
            in_a_row = 0;
        } else if cancel.is_cancelled() {
            return;
        } else if in_a_row >= MAX_IN_A_ROW {
            tokio::task::yield_now().await;
            in_a_row = 0;
        }
        in_a_row += 1;
        shared.live.offered.fetch_add(1, Ordering::Relaxed);
        shared.live.outstanding.fetch_add(1, Ordering::Relaxed);
        // Boxed: a person's state (about 2 KiB, most of it reserved for
        // the attempt it will make) is made once, on the heap, instead of
        // being copied whole into the spawn, into the task's cell and out
        // again as the task ends (callgrind: ~3,000 instructions of memcpy
        // a person).
        let person = Box::pin(person(
            shared.clone(),
            index,
            arrival.offset_us,
            arrival.source,
        ));
        tracker.spawn(person.instrument(info_span!("person", index)));
    }
}

/// How many connections are opened before the schedule starts: one for
/// each person due in its first [`PREWARM_SPAN`] (at most
/// [`PREWARM_MAX`]), the number a cold start needs while the first
/// connections are still being accepted. Started cold at 50,000/s, the
/// first milliseconds' people each opened a connection while the target
/// was still accepting the ones before, and half the runs never caught
/// up. Persons take these as they take any idle connection.
fn prewarm_count(plan: &LoadPlan, shard: crate::Shard) -> usize {
    let span_us = PREWARM_SPAN.as_micros() as u64;
    (0u64..)
        .zip(plan.arrivals.iter(plan.seed))
        .take_while(|(_, a)| a.offset_us < span_us)
        .filter(|(index, _)| shard.owns(*index))
        .take(PREWARM_MAX)
        .count()
}

/// See [`prewarm_count`].
const PREWARM_SPAN: Duration = Duration::from_millis(5);
/// See [`prewarm_count`].
const PREWARM_MAX: usize = 256;

/// A seed per person, so a person's draws do not depend on task order.
fn person_seed(seed: u64, index: u64) -> u64 {
    // splitmix64 of the index, mixed with the run's seed.
    let mut z = index
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(seed.rotate_left(17));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn person(shared: Arc<Shared>, index: u64, offset_us: u64, source: Source) {
    let plan = &shared.plan;
    let mut rng = ChaCha8Rng::seed_from_u64(person_seed(plan.seed, index));
    let row = match (source, &plan.arrivals) {
        (Source::Row(i), Arrivals::Replay { rows, .. }) => rows.get(i),
        _ => None,
    };
    let tenant = plan.draw_tenant(&mut rng, source);
    let drawn = plan.shape(tenant).draw(&mut rng, row);
    let id = format!("{}{:06}", plan.id_prefix, index);
    let patience = plan.draw_patience(&mut rng);
    let first_intended = shared.start + Duration::from_micros(offset_us);
    let give_up = first_intended + patience;
    if !shared.affordable(&drawn) {
        // Never sent, so never counted done by a record: no longer
        // outstanding either (the dispatcher counted it in).
        shared.live.outstanding.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    shared.budget.first_attempt();
    let mut intended = first_intended;
    let mut attempt = 1;
    loop {
        if attempt > 1 {
            tokio::select! {
                _ = tokio::time::sleep_until(intended.into()) => {}
                // Stopped while waiting to retry: no new attempt.
                _ = Box::pin(shared.cancel.cancelled()) => break,
            }
        }
        let mut rec =
            attempt_once(&shared, (&id, tenant, &drawn), attempt, intended, give_up).await;
        rec.patience_ms = patience.as_millis() as u64;
        let mut next = None;
        let policy = &plan.retry;
        if attempt < policy.max_attempts
            && retryable(rec.outcome, rec.status)
            && !shared.cancel.is_cancelled()
        {
            let ra = rec.retry_after_ms.map(Duration::from_millis);
            let due = Instant::now() + policy.delay(attempt + 1, ra, &mut rng);
            next = retry_at(due, give_up, plan.send_lag_bound())
                .filter(|_| shared.budget.take(policy.budget))
                .filter(|_| shared.affordable(&drawn));
        }
        rec.last = next.is_none();
        shared.live.count(rec.outcome, attempt, rec.last);
        let bound_us = plan.send_lag_bound().as_micros() as u64;
        shared.live.count_record(&rec, bound_us);
        debug!(attempt, outcome = rec.outcome.as_str(), "attempt done");
        // The writer only goes away when the run is over.
        let _ = shared.records.send(rec);
        match next {
            Some(due) => {
                intended = due;
                attempt += 1;
            }
            None => break,
        }
    }
}

/// When a person retries, if at all: at `due`, unless that leaves less than
/// `margin` (the load generator's send-lag bound) before the person gives
/// up. A retry due closer to the end of the patience can be sent only
/// after it (a timer wakes a little late), and would end as a timeout that
/// no target could have avoided: on a deadline gateway, whose Retry-After
/// lands retries near the end of the patience, a dozen per rehearsal.
fn retry_at(due: Instant, give_up: Instant, margin: Duration) -> Option<Instant> {
    (due + margin < give_up).then_some(due)
}

/// What is known of an attempt so far; read back after a hang-up.
#[derive(Default)]
struct Seen {
    status: Option<u16>,
    /// How the body arrived: its first byte, and for a stream how many
    /// reads brought it and the longest gap between two.
    body: BodyPace,
    retry_after: Option<Duration>,
    /// The header `retry_after` was read from (a field of its own: one
    /// byte in the struct's padding, where a pair would add eight).
    retry_after_header: Option<wire::RetryAfterHeader>,
    /// A wait at the load generator's own bound for a connection.
    wait: BoundWait,
}

/// The wait in the client for a connection of an attempt handed on at
/// `began` (its sent time: the load generator's lateness ends there), and
/// what it makes of the attempt. One that got a connection waited
/// `client_wait_us`: in its latency, not in its send lag nor in the
/// gateway's queue. One that got none within its patience was never
/// sent: a connect error, its reason [`crate::NOT_SENT_AT_BOUND`] (the
/// load generator's own bound) or [`crate::NOT_SENT_IN_CLIENT`] (the
/// callers' pool or connect rate), its wait all the time to its end.
/// Gives the wait, the outcome and the reason.
fn in_the_client(
    shared: &Shared,
    wait: BoundWait,
    (began, done): (Instant, Instant),
    outcome: ClientOutcome,
    reason: Option<String>,
) -> (u64, ClientOutcome, Option<String>) {
    if !wait.never_got() && wait.waited_us().is_none() {
        return (0, outcome, reason);
    }
    shared.bound_waits.fetch_add(1, Ordering::Relaxed);
    let at_own_bound = shared.connector.limits() == (true, false);
    if at_own_bound {
        shared.own_bound_waits.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(us) = wait.waited_us() {
        return (us, outcome, reason);
    }
    let waited = done.saturating_duration_since(began).as_micros() as u64;
    if outcome != ClientOutcome::Timeout {
        // Stopped (cancelled) while waiting: not sent either.
        return (waited, outcome, reason);
    }
    shared.not_sent.fetch_add(1, Ordering::Relaxed);
    let limit = shared.connector.limit();
    let reason = match at_own_bound {
        true => format!("{}: {limit} open", crate::NOT_SENT_AT_BOUND),
        false => format!("{}: {limit} open", crate::NOT_SENT_IN_CLIENT),
    };
    (waited, ClientOutcome::ConnectError, Some(reason))
}

/// What the run's bound on open connections met: the summary's figures,
/// and notes when it was met (and when attempts came up too late to be
/// sent).
fn bound_met(shared: &Shared) -> (crate::ConnectionBound, Vec<String>) {
    let waited = shared.bound_waits.load(Ordering::Relaxed);
    let not_sent = shared.not_sent.load(Ordering::Relaxed);
    let clients = shared.plan.clients;
    let figures = crate::ConnectionBound {
        largest: shared.bounds.iter().map(|s| s.limit).max().unwrap_or(0) as u64,
        most_open: shared.connector.most_open() as u64,
        waited,
        not_sent,
        waited_at_own_bound: shared.own_bound_waits.load(Ordering::Relaxed),
        model: if clients.pool.is_some() {
            "pool"
        } else {
            "per caller"
        },
        connect_rate_per_s: clients.connect_rate_per_s,
    };
    let mut said: Vec<String> = shared.bounds.iter().map(bound::Step::said).collect();
    said.dedup();
    if let Some(r) = clients.connect_rate_per_s {
        said.push(format!(
            "at most {r} new connections a second (connect_rate)"
        ));
    }
    let late = shared.not_sent_late.load(Ordering::Relaxed);
    let late_note = (late > 0).then(|| {
        format!(
            "the load generator fell behind its schedule by more than the patience: {} attempts \
             came up only after their person had given up and were not sent (connect_error, \
             reason \"{}\")",
            wire::number::count(late),
            crate::NOT_SENT_LATE,
        )
    });
    let whose = match figures.waited_at_own_bound {
        0 => "the callers' own limits on connections were reached".to_owned(),
        n => format!(
            "the load generator's own bound on open connections was reached ({} attempts waited \
             at it: it could not open the connections its callers would have, so the run is \
             invalid)",
            wire::number::count(n)
        ),
    };
    let note = (waited > 0).then(|| {
        format!(
            "{whose}: {} attempts waited in the client for a connection (client_wait_us in \
             their records: in their latency, not in their send lag nor in the gateway's \
             queue), {} got none within their patience and were not sent (connect_error, \
             reason \"not sent: ...\"); the limits: {}; at most {} were open at once",
            wire::number::count(waited),
            wire::number::count(not_sent),
            said.join("; "),
            wire::number::count(figures.most_open),
        )
    });
    (figures, note.into_iter().chain(late_note).collect())
}

/// Where a response body goes: the dialect's reader for an answer, a
/// bounded buffer for a refusal (read for its error code when the
/// `x-gateway-reason` header gave no reason). One or the other: the state
/// of a waiting request grows by neither.
enum Sink {
    Answer(AnswerReader),
    Refusal {
        reason: Option<String>,
        body: Vec<u8>,
    },
}

impl Sink {
    fn feed(&mut self, data: &[u8]) {
        match self {
            Sink::Answer(r) => r.feed(data),
            Sink::Refusal { body, .. } => {
                let room = REFUSAL_BODY_MAX.saturating_sub(body.len());
                body.extend_from_slice(&data[..data.len().min(room)]);
            }
        }
    }
}

/// The most of a refusal's body kept to read its error code.
const REFUSAL_BODY_MAX: usize = 4096;

/// The error `code` of a JSON error body (`{"error": {"code": ...}}`), if
/// it is a string.
fn body_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("error")?.get("code")?.as_str().map(str::to_owned)
}

/// One attempt's request, whole: the tenant's head prefix, the request
/// id, the patience left (as it is written), the body's length, then the
/// body; in one buffer, made as it is written and dropped after.
fn request_bytes(
    shared: &Shared,
    (id, tenant, drawn): (&str, Option<u16>, &Drawn),
    attempt: u32,
    give_up: Instant,
) -> Vec<u8> {
    let head = &shared.heads[tenant.map_or(0, |t| usize::from(t) + 1)];
    let shape = shared.plan.shape(tenant);
    let body_len = shape.body_len(id, drawn);
    let mut out =
        Vec::with_capacity(head.prefix.len() + 128 + id.len() + head.pieces_len(id) + body_len);
    out.extend_from_slice(&head.prefix);
    out.extend_from_slice(REQUEST_ID.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\r\n");
    head.put_pieces(&mut out, id, attempt);
    if let Some(name) = &shared.plan.patience_header {
        let left = give_up
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        json::push_u64(&mut out, left);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    json::push_u64(&mut out, body_len as u64);
    out.extend_from_slice(b"\r\n\r\n");
    shape.put_body(&mut out, id, drawn);
    out
}

async fn attempt_once(
    shared: &Shared,
    (id, tenant, drawn): (&str, Option<u16>, &Drawn),
    attempt: u32,
    intended: Instant,
    give_up: Instant,
) -> ClientRecord {
    let sent = Instant::now();
    // Come to only after the person gave up (the load generator fell
    // behind by more than the patience): not sent. Sending it would hang
    // up at once, cost the target a call for a caller gone and the load
    // generator a connection, and so slow its catching up.
    let late = sent >= give_up;
    if !late {
        shared.live.sent.fetch_add(1, Ordering::Relaxed);
        shared.live.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    let mut seen = Seen::default();
    let api = shared.plan.shape(tenant).api;
    let clock = shared.clock;
    let exchange = async {
        let resp = match shared
            .connector
            .send(
                || request_bytes(shared, (id, tenant, drawn), attempt, give_up),
                &mut seen.wait,
            )
            .await
        {
            Ok(r) => r,
            Err(HttpError::Connect(e)) => {
                if !shared.connect_warned.swap(true, Ordering::Relaxed) {
                    warn!(cause = %e, "cannot connect to the target; later connect errors are only counted");
                }
                // The cause is kept (in the record's `reason`): "too many
                // open files" is the load generator's own limit, which
                // makes a run invalid, where a refused connect is the
                // target's doing.
                return (ClientOutcome::ConnectError, 0, Some(e.to_string()));
            }
            Err(HttpError::Protocol(e)) => {
                // An answer, but not HTTP: the target is broken, not gone.
                debug!(cause = %e, "not an HTTP answer");
                return (ClientOutcome::Malformed, 0, None);
            }
            Err(e) => {
                debug!(cause = %e, "request failed");
                return (ClientOutcome::Reset, 0, None);
            }
        };
        let status = resp.status;
        seen.status = Some(status);
        let headers = &resp.headers;
        if headers.retry_after_ms.is_some() || headers.retry_after.is_some() {
            let read = wire::read_retry_after(
                headers.retry_after_ms.as_deref(),
                headers.retry_after.as_deref(),
                clock.system_time(Instant::now()),
            );
            seen.retry_after = read.map(|(wait, _)| wait);
            seen.retry_after_header = read.map(|(_, header)| header);
        }
        let success = (200..300).contains(&status);
        // An answer is read by the dialect's reader; a refusal's first
        // bytes are kept for its error code. One or the other, never both.
        let mut sink = if success {
            Sink::Answer(AnswerReader::new(api, resp.headers.event_stream))
        } else {
            Sink::Refusal {
                reason: resp.headers.gateway_reason.clone(),
                body: Vec::new(),
            }
        };
        let cap = shared.plan.max_answer_bytes;
        let read = resp
            .read_body(&mut seen.body, cap, |data| sink.feed(data))
            .await;
        match read {
            Ok(()) => {}
            Err(HttpError::Oversized(cap)) => {
                // A kind of malformed answer: the reason says which, and
                // the checklist counts it with every malformed one.
                debug!(cap, "answer past max_answer_bytes");
                let reason = Some(crate::OVERSIZED.to_owned());
                return (ClientOutcome::Malformed, 0, reason);
            }
            Err(HttpError::Protocol(e)) if success => {
                debug!(cause = %e, "bad body framing");
                return (ClientOutcome::Malformed, 0, None);
            }
            Err(e) => {
                debug!(cause = %e, "body broke");
                return (ClientOutcome::Reset, 0, None);
            }
        }
        match sink {
            Sink::Answer(r) => match r.finish() {
                Some(tokens) => (ClientOutcome::Ok, tokens, None),
                None => (ClientOutcome::Malformed, 0, None),
            },
            Sink::Refusal { reason, body } => {
                let reason = reason.or_else(|| body_code(&body));
                (ClientOutcome::refused(status, reason.as_deref()), 0, reason)
            }
        }
    };
    // Dropping the exchange at the deadline drops its connection: the
    // client hangs up, as a person who gave up does.
    let (outcome, tokens, reason): (ClientOutcome, u64, Option<String>) = if late {
        drop(exchange);
        let not_sent = Some(crate::NOT_SENT_LATE.to_owned());
        (ClientOutcome::ConnectError, 0, not_sent)
    } else {
        tokio::select! {
            r = tokio::time::timeout_at(give_up.into(), exchange) => match r {
                Ok(r) => r,
                Err(_) => (ClientOutcome::Timeout, 0, None),
            },
            // Boxed: 8 bytes in every waiting person's state instead of the
            // cancellation future itself.
            () = Box::pin(shared.hard_stop.cancelled()) => (ClientOutcome::Cancelled, 0, None),
        }
    };
    let done = Instant::now();
    if !late {
        shared.live.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
    let times = (intended, sent, done);
    attempt_record(
        shared,
        (id, tenant, drawn),
        attempt,
        times,
        late,
        &seen,
        (outcome, tokens, reason),
    )
}

/// The record of an attempt that ended at `done`: begun at `sent`, not
/// sent at all if `late`, else sent when it got its connection. Inlined:
/// out of line, a request cost a few hundred instructions more (the record
/// made, then copied out; callgrind at 1,000/s: 26,800-28,000 against
/// 25,600-26,500).
#[inline(always)]
fn attempt_record(
    shared: &Shared,
    (id, tenant, drawn): (&str, Option<u16>, &Drawn),
    attempt: u32,
    (intended, sent, done): (Instant, Instant, Instant),
    late: bool,
    seen: &Seen,
    (outcome, tokens, reason): (ClientOutcome, u64, Option<String>),
) -> ClientRecord {
    let (sent, client_wait_us, outcome, reason) = match late {
        true => {
            shared.not_sent_late.fetch_add(1, Ordering::Relaxed);
            (done, 0, outcome, reason)
        }
        false => {
            let (waited, outcome, reason) =
                in_the_client(shared, seen.wait, (sent, done), outcome, reason);
            (sent, waited, outcome, reason)
        }
    };
    let clock = shared.clock;
    let streamed_body = drawn.stream && seen.body.reads() > 0;
    ClientRecord {
        id: id.to_string(),
        attempt,
        intended_us: clock.us_at(intended),
        sent_us: clock.us_at(sent),
        client_wait_us,
        first_byte_us: seen.body.first().map(|t| clock.us_at(t)),
        done_us: clock.us_at(done),
        status: seen.status,
        outcome,
        retry_after_ms: seen.retry_after.map(|d| d.as_millis() as u64),
        retry_after_header: seen.retry_after_header,
        tokens,
        stream: drawn.stream,
        last: true,
        patience_ms: 0,
        reason,
        tenant: tenant
            .and_then(|t| shared.plan.tenants.get(usize::from(t)))
            .map(|t| t.name.clone()),
        // Said of streams only (how an answer not streamed arrives says
        // nothing of a relay), and only when a body came.
        body_reads: streamed_body.then_some(seen.body.reads()),
        longest_gap_us: streamed_body.then_some(seen.body.longest_gap_us()),
    }
}

impl Live {
    fn count(&self, outcome: ClientOutcome, attempt: u32, last: bool) {
        let c = match outcome {
            ClientOutcome::Ok => &self.ok,
            o if o.is_refusal() => &self.shed,
            ClientOutcome::Timeout => &self.timed_out,
            _ => &self.errors,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if attempt > 1 {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        if last {
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_body_gives_its_error_code() {
        let code = |b: &[u8]| body_code(b);
        assert_eq!(
            code(br#"{"error":{"message":"m","type":"t","code":"wait_expired"}}"#).as_deref(),
            Some("wait_expired")
        );
        assert_eq!(code(br#"{"error":{"code":null}}"#), None);
        assert_eq!(
            code(b"<html>503 Service Temporarily Unavailable</html>"),
            None
        );
        let mut sink = Sink::Refusal {
            reason: None,
            body: Vec::new(),
        };
        sink.feed(&vec![b'x'; REFUSAL_BODY_MAX + 100]);
        sink.feed(b"more");
        match sink {
            Sink::Refusal { body, .. } => assert_eq!(body.len(), REFUSAL_BODY_MAX),
            Sink::Answer(_) => unreachable!(),
        }
    }

    #[test]
    fn target_urls() {
        let t = Target::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(t.url("/v1/messages"), "http://127.0.0.1:9000/v1/messages");
        assert_eq!(t.host_port, "127.0.0.1:9000");
        let t = Target::parse("http://gw.local/openai/").unwrap();
        assert_eq!(t.url("/v1/x"), "http://gw.local/openai/v1/x");
        assert_eq!(t.host_port, "gw.local:80");
        assert!(!t.is_tls());
        let t = Target::parse("https://a.b").unwrap();
        assert!(t.is_tls());
        assert_eq!(t.host_port, "a.b:443");
        assert_eq!(t.tls_host.as_deref(), Some("a.b"));
        assert_eq!(t.url("/v1/x"), "https://a.b/v1/x");
        let t = Target::parse("https://127.0.0.1:8443/gw").unwrap();
        assert_eq!(t.host_port, "127.0.0.1:8443");
        assert_eq!(t.url("/v1/x"), "https://127.0.0.1:8443/gw/v1/x");
        assert!(Target::parse("https://[::1]:8443").unwrap().is_tls());
        assert!(matches!(
            Target::parse("ftp://a.b"),
            Err(TargetError::Scheme { .. })
        ));
        assert!(Target::parse("not a url").is_err());
    }

    #[test]
    fn a_retry_is_due_the_send_lag_bound_before_the_person_gives_up() {
        let now = Instant::now();
        let give_up = now + Duration::from_millis(400);
        let margin = Duration::from_millis(5);
        let at = |ms| retry_at(now + Duration::from_millis(ms), give_up, margin);
        assert_eq!(at(100), Some(now + Duration::from_millis(100)));
        assert_eq!(at(394), Some(now + Duration::from_millis(394)));
        assert_eq!(at(395), None, "sent maybe after the person left");
        assert_eq!(at(399), None);
        assert_eq!(at(500), None);
    }

    #[test]
    fn the_first_milliseconds_people_get_connections_before_the_start() {
        let plan = |rate: u32| {
            let text = format!("[load]\n[[load.phases]]\nduration = \"10s\"\nrate = {rate}\n");
            LoadPlan::from_scenario_str(&text, "t.toml", Path::new(".")).unwrap()
        };
        let whole = crate::Shard::default();
        // 50,000/s: 250 people in the first 5 ms.
        assert_eq!(prewarm_count(&plan(50_000), whole), 250);
        assert_eq!(prewarm_count(&plan(1_000_000), whole), PREWARM_MAX);
        // One at offset 0 at any rate.
        assert_eq!(prewarm_count(&plan(10), whole), 1);
        let half: crate::Shard = "0/2".parse().unwrap();
        assert_eq!(prewarm_count(&plan(50_000), half), 125);
    }

    #[test]
    fn person_seeds_differ() {
        let a: std::collections::HashSet<_> = (0..10_000).map(|i| person_seed(1, i)).collect();
        assert_eq!(a.len(), 10_000);
        assert_ne!(person_seed(1, 5), person_seed(2, 5));
    }

    #[tokio::test]
    async fn unreachable_target_fails_fast() {
        // Bind then drop a listener: its port is now closed.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let began = Instant::now();
        let e = probe(&t, Duration::from_secs(3)).await.unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(3));
        assert!(e.to_string().contains("unreachable"), "{e}");
    }
}

#[cfg(test)]
mod size_probe {
    fn size_of_return<A, R>(_: impl Fn(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A waiting person is the bulk of what an outstanding request costs
    /// (with its socket): keep the task's state small.
    #[test]
    fn a_person_task_is_small() {
        let n = size_of_return(|s: std::sync::Arc<super::Shared>| {
            super::person(s, 0, 0, crate::schedule::Source::Phase(0))
        });
        // 2,048 before tenants and refusal reasons; they add 32 (the
        // tenant's index and the wider outcome of an exchange). A refusal's
        // body and reason share the answer reader's room.
        assert!(n <= 2_112, "person future: {n} bytes");
        assert_eq!(
            std::mem::size_of::<super::Sink>(),
            std::mem::size_of::<crate::request::AnswerReader>()
        );
    }
}
