//! The gateway's resident memory, sampled every 100 ms: from its process
//! group in /proc when the harness spawned it (the resident set and its
//! anonymous part, `RssAnon`), else from a Prometheus metric (the resident
//! set alone).

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wire::RssSample;

use crate::gateway::process;
use crate::gateway::supervise::SupState;
use crate::http::tls::Trusting as _;
use crate::run::clock::now_us;

/// The sampler while it runs. Each sample is appended to `rss.jsonl` as a
/// whole line when it is taken, so nothing is held and a killed run leaves
/// the file readable up to its last sample.
pub(crate) struct RssSampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// How many samples have been written.
    taken: tokio::sync::watch::Receiver<u64>,
    /// The latest sample and the first, for the live series.
    now: Arc<MemoryNow>,
}

/// The gateway's memory as last sampled, for `--metrics-listen`
/// (`rehearse_gateway_memory_bytes`): the resident set, its anonymous
/// part (0 where not sampled), and the first sample of the run, taken
/// before the load: `memory_ceiling`'s idle baseline. All 0 until a
/// sample has been taken.
#[derive(Debug, Default)]
pub struct MemoryNow {
    /// Resident bytes, the latest sample.
    pub rss: AtomicU64,
    /// Anonymous resident bytes (`RssAnon`), the latest sample.
    pub anon: AtomicU64,
    /// Resident bytes of the first sample: the idle baseline.
    pub baseline: AtomicU64,
}

impl MemoryNow {
    pub(crate) fn store(&self, rss: u64, anon: Option<u64>) {
        let _ = self
            .baseline
            .compare_exchange(0, rss, Ordering::Relaxed, Ordering::Relaxed);
        self.rss.store(rss, Ordering::Relaxed);
        self.anon.store(anon.unwrap_or(0), Ordering::Relaxed);
    }
}

/// How often the memory is sampled.
pub(crate) const PERIOD: Duration = Duration::from_millis(100);

impl RssSampler {
    /// Starts sampling `source` every [`PERIOD`] into `file` (`rss.jsonl`).
    pub(crate) fn start(source: RssSource, file: std::fs::File) -> RssSampler {
        let stop = CancellationToken::new();
        let (count, taken) = tokio::sync::watch::channel(0);
        let now = Arc::new(MemoryNow::default());
        let task = tokio::spawn(sample_rss(source, file, stop.clone(), (count, now.clone())));
        RssSampler {
            stop,
            task,
            taken,
            now,
        }
    }

    /// The latest sample, kept up to date while the sampler runs.
    pub(crate) fn now(&self) -> Arc<MemoryNow> {
        self.now.clone()
    }

    /// Waits until `n` samples have been written, at most `within`
    /// (a source that gives nothing, or a sampler that stopped, is waited
    /// for no longer). Returns how many there are.
    pub(crate) async fn samples(&mut self, n: u64, within: Duration) -> u64 {
        let _ = tokio::time::timeout(within, self.taken.wait_for(|taken| *taken >= n)).await;
        *self.taken.borrow()
    }

    /// Stops sampling; the file is complete when this returns.
    pub(crate) async fn stop(self) -> std::io::Result<()> {
        self.stop.cancel();
        self.task
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }
}

pub(crate) enum RssSource {
    Group(Arc<Mutex<SupState>>),
    Metric {
        url: String,
        metric: String,
        /// How an `https://` metrics URL's certificate is checked.
        tls: loadgen::TlsOptions,
    },
    None,
}

async fn sample_rss(
    source: RssSource,
    mut file: std::fs::File,
    stop: CancellationToken,
    (taken, now): (tokio::sync::watch::Sender<u64>, Arc<MemoryNow>),
) -> std::io::Result<()> {
    let plain = loadgen::TlsOptions::default();
    let client = crate::http::resolve::client()
        .timeout(Duration::from_millis(500))
        .trusting(match &source {
            RssSource::Metric { tls, .. } => tls,
            _ => &plain,
        })
        .build()
        .ok();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let memory = match &source {
            RssSource::Group(state) => {
                let pgid = state
                    .lock()
                    .ok()
                    .and_then(|s| s.process.as_ref().map(|p| p.pid() as i32));
                match pgid {
                    Some(pgid) => tokio::task::spawn_blocking(move || process::group_memory(pgid))
                        .await
                        .ok(),
                    // Dead (and maybe restarting): nothing resident.
                    None => None,
                }
            }
            RssSource::Metric { url, metric, .. } => match &client {
                Some(c) => match c.get(url).send().await {
                    Ok(r) => r
                        .text()
                        .await
                        .ok()
                        .and_then(|t| process::prometheus_value(&t, metric))
                        .map(|v| process::GroupMemory {
                            rss: v as u64,
                            anon: None,
                        }),
                    Err(_) => None,
                },
                None => None,
            },
            RssSource::None => break,
        };
        if let Some(m) = memory.filter(|m| m.rss > 0) {
            let sample = RssSample {
                t_us: now_us(),
                rss_bytes: m.rss,
                rss_anon_bytes: m.anon,
            };
            let mut line = serde_json::to_vec(&sample).map_err(std::io::Error::other)?;
            line.push(b'\n');
            // Ten small lines a second: one write each, whole.
            file.write_all(&line)?;
            now.store(m.rss, m.anon);
            taken.send_modify(|n| *n += 1);
        }
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first sample stays the baseline; the latest replaces the last.
    #[test]
    fn the_first_sample_is_kept_as_the_baseline() {
        let m = MemoryNow::default();
        m.store(100, Some(60));
        m.store(300, None);
        assert_eq!(m.baseline.load(Ordering::Relaxed), 100);
        assert_eq!(m.rss.load(Ordering::Relaxed), 300);
        assert_eq!(m.anon.load(Ordering::Relaxed), 0);
    }
}
