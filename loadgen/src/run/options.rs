//! How a run is asked ([`LoadOptions`], [`StopCondition`]) and why one
//! could not be made ([`LoadRunError`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::progress::Live;
use crate::tls::{TlsError, TlsOptions};

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
    /// Told the instant the schedule starts (its `t = 0`), once, before
    /// the first arrival: what starts a fake provider's timeline at the
    /// load's start, set-up (probes, connections opened ahead) and all.
    pub on_start: Option<OnStart>,
}

/// What a run tells the instant its schedule starts ([`LoadOptions::on_start`]).
#[derive(Clone)]
pub struct OnStart(pub Arc<dyn Fn(std::time::Instant) + Send + Sync>);

impl std::fmt::Debug for OnStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnStart")
    }
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
            on_start: None,
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

pub(super) fn output_error(path: &Path) -> impl FnOnce(std::io::Error) -> LoadRunError + '_ {
    move |source| LoadRunError::Output {
        path: path.to_path_buf(),
        source,
    }
}
