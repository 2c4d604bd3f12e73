//! Why a rehearsal could not be made, planned or judged: one variant per
//! thing that failed, carrying its cause, and two broad kinds
//! ([`RunErrorKind`]) that the binary maps to its exit codes.

use std::path::PathBuf;
use std::time::Duration;

use report::ReportError;

use crate::gateway::process::SpawnError;
use crate::host::Input;
use crate::provider::remote::RemoteError;
use crate::run::fds::OpenFilesError;
use crate::scenario::ScenarioError;

/// Why a run could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    // Bad input: the scenario, a flag or a directory given is wrong.
    /// The scenario (or a run directory's `scenario.toml`) is wrong; the
    /// error names file, line and field.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The `[load]` of `rehearse calibrate --scenario` is wrong.
    #[error(transparent)]
    Load(#[from] loadgen::LoadError),
    /// A `[load.request]` header a calibration sweep cannot make.
    #[error("{0}")]
    SweepHeaders(String),
    /// A flag's value is wrong, or it needs another flag.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag, with its value when that is what is wrong.
        flag: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A child process of the program's own (a reference gateway, a shard
    /// of the load) was to be started, and no [`crate::Host`] says how.
    #[error("cannot start {what}: the program did not install a host (harness::install) that says how to start its own processes")]
    NoHost {
        /// The process.
        what: &'static str,
    },
    /// An external provider (the gateway calls a real one) with no gateway
    /// already serving to drive: the harness would start a gateway of its
    /// own, with no provider to call. The binary refuses this where it
    /// parses its flags; a library caller is told here.
    #[error("an external provider needs a target: the gateway already serving that calls the real provider")]
    ExternalNeedsTarget,
    /// A rig file (`rehearse calibrate --rig`'s) that cannot be read or
    /// does not parse; the message names the file, line and field.
    #[error("{message}")]
    Rig {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        message: String,
    },
    /// A time or quota scale that is not a number above 0.
    #[error("{what} {value}: must be a number above 0")]
    BadScale {
        /// Which scale.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// The target is not an http:// or https:// URL.
    #[error(transparent)]
    Target(#[from] loadgen::TargetError),
    /// The target is outside loopback and `--allow-remote` was not given.
    #[error(
        "target {target} is outside loopback: pass {} to send load there",
        Input::AllowRemote
    )]
    RemoteTarget {
        /// The target's URL.
        target: String,
    },
    /// The target is a gateway the harness did not start, so the run's
    /// time scale does not compress it, and `--allow-time-scale` was not
    /// given.
    #[error("target {target} is a gateway the harness did not start, so it is not compressed {time_scale}x in time as the provider and the load are: run at {} 1, or pass {} if the gateway was configured for it (its timeouts and budgets divided by {time_scale})", Input::TimeScale, Input::AllowTimeScale)]
    UnscaledTarget {
        /// The target's URL.
        target: String,
        /// The run's time scale.
        time_scale: f64,
    },
    /// The TLS settings cannot be used (a CA file that cannot be read).
    #[error(transparent)]
    Tls(#[from] loadgen::TlsError),
    /// An `https://` gateway's certificate is refused under the TLS
    /// settings, or it speaks no TLS.
    #[error("the gateway at {url}: {source}")]
    GatewayTls {
        /// The gateway's URL.
        url: String,
        /// The handshake's failure.
        source: loadgen::LoadRunError,
    },
    /// `rehearse init` would overwrite a file.
    #[error("{} exists: give {} to overwrite it", path.display(), Input::Force)]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The directory to judge lacks a file it must have (`run.json`,
    /// `scenario.toml`), or it cannot be read.
    #[error("{} is not a run directory: {}: {reason}; {}", dir.display(), dir.join(file).display(), written_by(file))]
    NotARunDir {
        /// The directory.
        dir: PathBuf,
        /// The file it lacks.
        file: &'static str,
        /// Why that file cannot be read (said in the message, not a
        /// cause of its own).
        reason: std::io::Error,
    },
    /// A run directory's `run.json` is not one.
    #[error("{}: {source}", path.display())]
    RunJson {
        /// The file.
        path: PathBuf,
        /// Where and why it is not.
        source: serde_json::Error,
    },
    /// `rehearse collect`'s directory was not staged (no readable
    /// `run.json`).
    #[error("{}: {source} (run rehearse stage first)", path.display())]
    NotStaged {
        /// Its `run.json`.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// A remote shard's folder has no clock offset to move its records by.
    #[error("{} has no {file}: run each shard with {} URL so its clock is measured against the provider's", dir.display(), Input::Provider)]
    NoShardOffset {
        /// The shard's folder.
        dir: PathBuf,
        /// The offset's file name.
        file: &'static str,
    },
    /// A record file of the run directory to judge exists but cannot be
    /// read.
    #[error("cannot read {}: {source}", path.display())]
    ReadRecords {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },

    // Invalid: the run could not be made.
    /// A report file could not be written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A file of the run directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A directory could not be made.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The open files the run needs do not fit the limit.
    #[error(transparent)]
    OpenFiles(#[from] OpenFilesError),
    /// A reference gateway's upstream names a provider the run has none
    /// of (`--provider external`, or flags naming others).
    #[error("{}: field `{field}`: {message}", path.display())]
    GatewayUpstream {
        /// The scenario.
        path: std::path::PathBuf,
        /// Its field, e.g. `gateway.reference.upstreams[1].provider`.
        field: String,
        /// Why.
        message: String,
    },
    /// The reference gateway's config could not be written as TOML.
    #[error("cannot write the gateway's config: {0}")]
    GatewayConfig(#[source] toml::ser::Error),
    /// This program's own path, to start it again (the reference gateway,
    /// load shards), is unknown.
    #[error("cannot find the rehearse binary: {0}")]
    NoBinary(#[source] std::io::Error),
    /// No loopback port was free for a spawned gateway.
    #[error("cannot find a free port: {0}")]
    NoFreePort(#[source] std::io::Error),
    /// A spawned gateway did not start, or not in time.
    #[error(transparent)]
    Gateway(#[from] SpawnError),
    /// A gateway said to be running already refused the connection, and
    /// the scenario asks for no wait.
    #[error("the gateway at {url} refused the connection ({refusal}): nothing listens there; start it first, or check the URL; if it is still starting, give it time with `ready_timeout = \"60s\"` in the scenario's [gateway] table")]
    TargetRefused {
        /// Its URL.
        url: String,
        /// The refusal (said in the message, not a cause of its own).
        refusal: std::io::Error,
    },
    /// A gateway already serving was not ready in time.
    #[error("the gateway at {url} was not ready within {waited:?} (the scenario's [gateway] ready_timeout gives it more time)")]
    NotReady {
        /// Its URL.
        url: String,
        /// How long the harness waited.
        waited: Duration,
    },
    /// A gateway already serving could not be reached to check its TLS.
    #[error("the gateway at {url}: {source}")]
    GatewayUnreachable {
        /// Its URL.
        url: String,
        /// What the probe said.
        source: loadgen::LoadRunError,
    },
    /// `--metrics-listen` could not be bound.
    #[error("{} {listen}: cannot listen there: {source}", Input::MetricsListen)]
    MetricsListen {
        /// The address asked for.
        listen: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The in-process fake provider could not listen.
    #[error("the fake provider cannot listen on {listen}: {source}")]
    ProviderListen {
        /// The address asked for.
        listen: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A remote fake provider could not be readied or read.
    #[error(transparent)]
    Provider(#[from] RemoteError),
    /// The gateway's gauges cannot be sampled into the run directory.
    #[error("cannot write the gateway's samples: {0}")]
    GaugeSamples(#[source] std::io::Error),
    /// The HTTP client of a sweep could not be made.
    #[error("cannot make an HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The `run.json` `rehearse stage` wrote is damaged.
    #[error("{}: {source}", path.display())]
    StagedRunJson {
        /// The file.
        path: PathBuf,
        /// Where and why it is not one.
        source: serde_json::Error,
    },
    /// A shard's file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadShard {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A shard's clock offset is not one.
    #[error("{}: {source}", path.display())]
    ShardOffset {
        /// The file.
        path: PathBuf,
        /// Where and why it is not one.
        source: serde_json::Error,
    },
    /// The shards' latency histograms could not be written as one log.
    #[error("cannot write {}: {source}", path.display())]
    Hlog {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: hdrhistogram::serialization::interval_log::IntervalLogWriterError<
            hdrhistogram::serialization::V2DeflateSerializeError,
        >,
    },
    /// A load shard's process could not be started (`--shards N`).
    #[error("cannot start load shard {shard}: {source}")]
    ShardStart {
        /// Its index.
        shard: usize,
        /// The cause.
        source: std::io::Error,
    },
    /// The load shards were stopped by a signal before their end.
    #[error("stopped: the load shards were sent SIGTERM")]
    ShardsStopped,
    /// A load shard's process could not be waited for.
    #[error("load shard {shard}: {source}")]
    ShardWait {
        /// Its index.
        shard: usize,
        /// The cause.
        source: std::io::Error,
    },
    /// A load shard failed (other than by missing its schedule, exit 3).
    #[error("load shard {shard} failed ({status}): {stderr}")]
    ShardFailed {
        /// Its index.
        shard: usize,
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it said on stderr.
        stderr: String,
    },
    /// A load shard left no readable report.
    #[error("{} has no readable {}", dir.display(), wire::files::LOAD_SUMMARY)]
    ShardSummary {
        /// The shard's folder.
        dir: PathBuf,
    },
}

/// The two broad kinds of [`RunError`], which fix `rehearse`'s exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunErrorKind {
    /// The input is wrong: a scenario, a flag, a directory given (exit 2).
    BadInput,
    /// The run could not be made: the gateway did not start, the provider
    /// could not listen, the run directory could not be written (exit 3).
    Invalid,
}

impl RunError {
    /// Whether the input was wrong or the run could not be made.
    pub fn kind(&self) -> RunErrorKind {
        use RunError as E;
        match self {
            E::Scenario(_)
            | E::Load(_)
            | E::SweepHeaders(_)
            | E::Flag { .. }
            | E::BadScale { .. }
            | E::ExternalNeedsTarget
            | E::Rig { .. }
            | E::Target(_)
            | E::RemoteTarget { .. }
            | E::UnscaledTarget { .. }
            | E::Tls(_)
            | E::GatewayTls { .. }
            | E::Exists { .. }
            | E::NotARunDir { .. }
            | E::RunJson { .. }
            | E::NotStaged { .. }
            | E::NoShardOffset { .. }
            | E::ReadRecords { .. }
            | E::MetricsListen { .. }
            | E::GatewayUpstream { .. } => RunErrorKind::BadInput,
            E::Report(_)
            | E::Write { .. }
            | E::CreateDir { .. }
            | E::OpenFiles(_)
            | E::GatewayConfig(_)
            | E::NoBinary(_)
            | E::NoHost { .. }
            | E::NoFreePort(_)
            | E::Gateway(_)
            | E::NotReady { .. }
            | E::TargetRefused { .. }
            | E::GatewayUnreachable { .. }
            | E::ProviderListen { .. }
            | E::Provider(_)
            | E::GaugeSamples(_)
            | E::HttpClient(_)
            | E::StagedRunJson { .. }
            | E::ReadShard { .. }
            | E::ShardOffset { .. }
            | E::Hlog { .. }
            | E::ShardStart { .. }
            | E::ShardsStopped
            | E::ShardWait { .. }
            | E::ShardFailed { .. }
            | E::ShardSummary { .. } => RunErrorKind::Invalid,
        }
    }

    /// An input's value that is wrong, and why.
    pub(crate) fn flag(input: Input, message: impl Into<String>) -> RunError {
        RunError::Flag {
            flag: input.to_string(),
            message: message.into(),
        }
    }

    /// An input's `value` that is wrong, and why.
    pub(crate) fn flag_value(input: Input, value: &str, message: impl Into<String>) -> RunError {
        RunError::Flag {
            flag: format!("{input} {value}"),
            message: message.into(),
        }
    }

    /// A child process of the program's own (`what`) that cannot be
    /// started: no host was installed to say how.
    pub(crate) fn no_host(what: &'static str) -> RunError {
        RunError::NoHost { what }
    }

    /// A file of the run directory that could not be written.
    pub(crate) fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
        move |source| RunError::Write {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A directory that could not be made.
    pub(crate) fn create_dir(
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> RunError + '_ {
        move |source| RunError::CreateDir {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Which command writes a run directory's file `name`, and when, for a
/// person who finds it missing (`rehearse report DIR`).
pub(crate) fn written_by(name: &str) -> &'static str {
    use wire::files;
    match name {
        files::RUN => {
            "`rehearse run` writes it when its rehearsal ends (a run that stopped before its \
             load started, a gateway that was not ready, leaves none: its error said why), \
             `rehearse stage` for a rehearsal from several machines"
        }
        files::SCENARIO | files::PLAN => {
            "`rehearse run` writes it first, `rehearse stage` for a rehearsal from several \
             machines"
        }
        files::CLIENT_RECORDS => {
            "`rehearse run`'s load generator writes it, `rehearse collect` for a staged run"
        }
        files::PROVIDER_RECORDS => {
            "`rehearse run`'s fake provider writes it, `rehearse collect` for a staged run"
        }
        _ => "`rehearse run` writes it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_names_what_failed_and_keeps_its_cause() {
        let io = || std::io::Error::other("disk full");
        let e = RunError::write(std::path::Path::new("runs/x/plan.json"))(io());
        assert_eq!(e.to_string(), "cannot write runs/x/plan.json: disk full");
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("disk full".into())
        );
        assert_eq!(e.kind(), RunErrorKind::Invalid);
        let e = RunError::flag(Input::TimeScale, "must be a positive number");
        assert_eq!(e.to_string(), "time_scale: must be a positive number");
        assert_eq!(e.kind(), RunErrorKind::BadInput);
        let e = RunError::from(ScenarioError::BadSet("x".into()));
        assert_eq!(e.to_string(), "set x: expected dotted.key=value");
        assert_eq!(e.kind(), RunErrorKind::BadInput);
        let e = RunError::NotARunDir {
            dir: "runs/none".into(),
            file: wire::files::RUN,
            reason: io(),
        };
        assert!(
            e.to_string().starts_with(
                "runs/none is not a run directory: runs/none/run.json: disk full; `rehearse run` writes it"
            ),
            "{e}"
        );
        assert_eq!(e.kind(), RunErrorKind::BadInput);
    }
}
