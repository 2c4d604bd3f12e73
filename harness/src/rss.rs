//! The gateway's resident memory, sampled every 100 ms: from its process
//! group in /proc when the harness spawned it, else from a Prometheus metric.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wire::RssSample;

use crate::clock::now_us;
use crate::process;
use crate::supervise::SupState;

/// Memory samples of the gateway, taken every 100 ms.
#[derive(Clone, Default)]
struct RssLog(Arc<Mutex<Vec<RssSample>>>);

/// The sampler while it runs.
pub(crate) struct RssSampler {
    log: RssLog,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    /// Starts sampling `source` every 100 ms.
    pub(crate) fn start(source: RssSource) -> RssSampler {
        let log = RssLog::default();
        let stop = CancellationToken::new();
        let task = tokio::spawn(sample_rss(source, log.clone(), stop.clone()));
        RssSampler { log, stop, task }
    }

    /// Stops sampling and returns the samples.
    pub(crate) async fn stop(self) -> Vec<RssSample> {
        self.stop.cancel();
        let _ = self.task.await;
        self.log.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

pub(crate) enum RssSource {
    Group(Arc<Mutex<SupState>>),
    Metric { url: String, metric: String },
    None,
}

async fn sample_rss(source: RssSource, log: RssLog, stop: CancellationToken) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .ok();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let bytes = match &source {
            RssSource::Group(state) => {
                let pgid = state
                    .lock()
                    .ok()
                    .and_then(|s| s.process.as_ref().map(|p| p.pid() as i32));
                match pgid {
                    Some(pgid) => tokio::task::spawn_blocking(move || process::group_rss(pgid))
                        .await
                        .ok(),
                    // Dead (and maybe restarting): nothing resident.
                    None => Some(0),
                }
            }
            RssSource::Metric { url, metric } => match &client {
                Some(c) => match c.get(url).send().await {
                    Ok(r) => r
                        .text()
                        .await
                        .ok()
                        .and_then(|t| process::prometheus_value(&t, metric))
                        .map(|v| v as u64),
                    Err(_) => None,
                },
                None => None,
            },
            RssSource::None => break,
        };
        if let Some(b) = bytes.filter(|b| *b > 0) {
            if let Ok(mut l) = log.0.lock() {
                l.push(RssSample {
                    t_us: now_us(),
                    rss_bytes: b,
                });
            }
        }
    }
}
