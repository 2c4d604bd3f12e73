//! A spawned gateway under watch: started (and restarted) from one
//! [`Launch`], waited for until it is ready, its death recorded with the
//! memory limit's kills, and restarted after a delay when the scenario asks
//! for it, as an orchestrator would.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wire::{ClientRecord, GatewayEvent};

use crate::gateway::process::{GatewayProcess, MemoryLimit, SpawnError};
use crate::http::tls::Trusting as _;
use crate::run::clock::now_us;

/// How to start (and restart) the gateway.
pub(crate) struct Launch {
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) log: PathBuf,
    pub(crate) listen: std::net::SocketAddr,
    pub(crate) ready_path: Option<String>,
    pub(crate) ready_timeout: Duration,
    pub(crate) limit: Option<Arc<MemoryLimit>>,
    pub(crate) restart: bool,
    pub(crate) restart_delay: Duration,
}

impl Launch {
    async fn spawn(&self) -> Result<GatewayProcess, SpawnError> {
        let mut p = GatewayProcess::spawn(
            &self.argv,
            &self.env,
            &self.log,
            self.listen,
            self.limit.as_deref(),
        )?;
        let url = format!("http://{}", p.addr);
        let ready = tokio::select! {
            ready = wait_ready(&url, self.ready_path.as_deref(), self.ready_timeout, &PLAIN) => ready,
            _ = async {
                while p.exited().is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } => false,
        };
        if !ready {
            let status = p.exited();
            p.stop(Duration::from_millis(500));
            let log = p.log.clone();
            return Err(match status {
                Some(status) => SpawnError::Exited { status, log },
                None => SpawnError::NotReady {
                    addr: url,
                    waited: self.ready_timeout,
                    log,
                },
            });
        }
        Ok(p)
    }
}

pub(crate) struct SupState {
    pub(crate) process: Option<GatewayProcess>,
    events: Vec<GatewayEvent>,
}

/// A spawned gateway under watch: a death is recorded (with the memory
/// limit's kills) and, when asked, the gateway is restarted on the same
/// address after a delay, as an orchestrator would.
pub(crate) struct Supervised {
    pub(crate) state: Arc<Mutex<SupState>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Supervised {
    pub(crate) async fn start(launch: Launch) -> Result<Supervised, SpawnError> {
        let p = launch.spawn().await?;
        let state = Arc::new(Mutex::new(SupState {
            process: Some(p),
            events: Vec::new(),
        }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(watch(launch, state.clone(), stop.clone()));
        Ok(Supervised { state, stop, task })
    }

    /// Stops watching, ends the gateway's process group, and returns what
    /// happened to it.
    pub(crate) async fn stop(self, grace: Duration) -> Vec<GatewayEvent> {
        self.stop.cancel();
        let _ = self.task.await;
        let (process, events) = match self.state.lock() {
            Ok(mut s) => (s.process.take(), std::mem::take(&mut s.events)),
            Err(_) => (None, Vec::new()),
        };
        if let Some(mut p) = process {
            let _ = tokio::task::spawn_blocking(move || p.stop(grace)).await;
        }
        events
    }
}

/// How a death's detail says the memory limit killed the gateway.
pub(crate) const KILLED_BY_LIMIT: &str = "killed by its memory limit";

async fn watch(launch: Launch, state: Arc<Mutex<SupState>>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let died = {
            let Ok(mut s) = state.lock() else { return };
            match s.process.as_mut().and_then(|p| p.exited()) {
                Some(status) => {
                    s.process = None;
                    let oom = launch
                        .limit
                        .as_ref()
                        .and_then(|l| l.oom_kills().filter(|k| *k > 0).map(|k| (k, l.describe())));
                    let detail = match oom {
                        Some((k, how)) => {
                            format!("{status}; {KILLED_BY_LIMIT}, {how} ({k} OOM kills)")
                        }
                        None => status,
                    };
                    s.events.push(GatewayEvent {
                        kind: "died".into(),
                        at_us: now_us(),
                        detail,
                    });
                    true
                }
                None => false,
            }
        };
        if !died {
            continue;
        }
        if !launch.restart {
            return;
        }
        let down_at = Instant::now();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(launch.restart_delay) => {}
        }
        match launch.spawn().await {
            Ok(p) => {
                if let Ok(mut s) = state.lock() {
                    s.process = Some(p);
                    s.events.push(GatewayEvent {
                        kind: "restarted".into(),
                        at_us: now_us(),
                        detail: format!("down for {:.1} s", down_at.elapsed().as_secs_f64()),
                    });
                }
            }
            Err(e) => {
                if let Ok(mut s) = state.lock() {
                    s.events.push(GatewayEvent {
                        kind: "restart_failed".into(),
                        at_us: now_us(),
                        detail: e.to_string(),
                    });
                }
                return;
            }
        }
    }
}

/// A spawned gateway is spoken to over plain HTTP.
const PLAIN: loadgen::TlsOptions = loadgen::TlsOptions {
    ca_file: None,
    insecure: false,
};

/// Waits until `addr` accepts TCP connections and, if `path` is given,
/// answers it with a status below 500 (over TLS as `tls` says, for an
/// `https://` base).
pub(crate) async fn wait_ready(
    base: &str,
    path: Option<&str>,
    within: Duration,
    tls: &loadgen::TlsOptions,
) -> bool {
    let deadline = Instant::now() + within;
    let client = crate::http::resolve::client()
        .timeout(Duration::from_millis(500))
        .trusting(tls)
        .build();
    let authority = crate::http::tls::host_port(base).unwrap_or_default();
    while Instant::now() < deadline {
        let up = match (path, &client) {
            (Some(p), Ok(c)) => c
                .get(format!("{}{p}", base.trim_end_matches('/')))
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() < 500),
            _ => match loadgen::resolve_authority(&authority).await {
                Ok(addrs) => tokio::net::TcpStream::connect(&addrs[..]).await.is_ok(),
                Err(_) => false,
            },
        };
        if up {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The attempts inside the gateway when it died, counted in one pass over
/// the client's records.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Inside {
    /// Attempts sent before the death and not done 100 ms before it
    /// ([`assertions::inside_at_death`]).
    pub(crate) attempts: usize,
    /// Of those, the ones that ended in an error or without an answer.
    pub(crate) lost: usize,
}

impl Inside {
    /// Counts `a` if it was inside the gateway at `at_us`.
    pub(crate) fn count(&mut self, at_us: u64, a: &ClientRecord) {
        if assertions::inside_at_death(a, at_us) {
            self.attempts += 1;
            if a.outcome.is_silent_loss() || a.outcome.is_error() {
                self.lost += 1;
            }
        }
    }
}

/// A sentence for the report about what happened to the gateway. For a
/// death: how many requests were inside the gateway then and ended without
/// an answer.
pub fn event_note(event: &GatewayEvent, start_us: u64, inside: Inside) -> String {
    let at_s = event.at_us.saturating_sub(start_us) as f64 / 1e6;
    if event.kind == "died" {
        format!(
            "the gateway died {at_s:.1} s into the run ({}); {} requests were inside it, {} of them lost",
            event.detail, inside.attempts, inside.lost
        )
    } else if event.kind == "restarted" {
        format!(
            "the gateway was restarted {at_s:.1} s into the run ({})",
            event.detail
        )
    } else {
        format!(
            "the gateway could not be restarted {at_s:.1} s into the run: {}",
            event.detail
        )
    }
}
