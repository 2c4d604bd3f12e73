//! The gateway's own gauges, sampled while the load runs: the metrics the
//! scenario names (queue depth, calls in flight upstream, stale drops) read
//! from its `metrics_url` every `metrics_period` into
//! `gateway-samples.jsonl`. A run whose provider the harness does not see
//! (`--provider external`) judges the inside of the gateway by them.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wire::{files, GatewaySample};

use crate::gateway::process::prometheus_value;
use crate::http::tls::Trusting as _;
use crate::run::clock::now_us;
use crate::scenario::GatewayGauges;

/// A sampler running until stopped.
pub(crate) struct GaugeSampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<u64>>,
}

impl GaugeSampler {
    /// Starts reading the gauges `g` names from its `metrics_url`, if any.
    pub(crate) fn for_gateway(
        g: &crate::GatewaySpec,
        tls: &loadgen::TlsOptions,
        dir: &Path,
    ) -> Result<Option<GaugeSampler>, crate::RunError> {
        let Some(url) = &g.metrics_url else {
            return Ok(None);
        };
        GaugeSampler::start(url, &g.gauges, tls, dir).map_err(crate::RunError::GaugeSamples)
    }

    /// Stops `sampler`, when there is one, noting a sampling that read
    /// nothing or broke.
    pub(crate) async fn stop_noting(
        sampler: Option<GaugeSampler>,
        g: &crate::GatewaySpec,
        notes: &mut Vec<String>,
    ) {
        let Some(sampler) = sampler else {
            return;
        };
        match sampler.stop().await {
            Ok(0) => notes.push(format!(
                "the gateway's gauges named in the scenario were never read from {}",
                g.metrics_url.as_deref().unwrap_or_default()
            )),
            Ok(_) => {}
            Err(e) => notes.push(format!("the gateway's gauge samples are incomplete: {e}")),
        }
    }

    /// Starts reading `gauges` from `url` into `dir`'s gateway-samples.jsonl;
    /// `None` when no gauge is named.
    pub(crate) fn start(
        url: &str,
        gauges: &GatewayGauges,
        tls: &loadgen::TlsOptions,
        dir: &Path,
    ) -> std::io::Result<Option<GaugeSampler>> {
        if !gauges.any() {
            return Ok(None);
        }
        let file = std::fs::File::create(dir.join(files::GATEWAY_SAMPLES))?;
        let client = crate::http::resolve::client()
            .timeout(gauges.period.min(Duration::from_secs(2)))
            .trusting(tls)
            .build()
            .map_err(std::io::Error::other)?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(sample(
            client,
            url.to_string(),
            gauges.clone(),
            file,
            stop.clone(),
        ));
        Ok(Some(GaugeSampler { stop, task }))
    }

    /// Stops sampling; returns how many samples were written.
    pub(crate) async fn stop(self) -> std::io::Result<u64> {
        self.stop.cancel();
        self.task
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }
}

/// One sample of `gauges` from a `/metrics` text.
pub(crate) fn parse(text: &str, gauges: &GatewayGauges, t_us: u64) -> GatewaySample {
    let value = |name: &Option<String>| name.as_deref().and_then(|n| prometheus_value(text, n));
    GatewaySample {
        t_us,
        queue_depth: value(&gauges.queue_depth),
        in_flight: value(&gauges.in_flight),
        stale_drops: value(&gauges.stale_drops),
    }
}

async fn sample(
    client: reqwest::Client,
    url: String,
    gauges: GatewayGauges,
    mut file: std::fs::File,
    stop: CancellationToken,
) -> std::io::Result<u64> {
    let mut tick = tokio::time::interval(gauges.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut written = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let t_us = now_us();
        let Ok(r) = client.get(&url).send().await else {
            continue;
        };
        let Ok(text) = r.text().await else {
            continue;
        };
        let s = parse(&text, &gauges, t_us);
        if s.queue_depth.is_none() && s.in_flight.is_none() && s.stale_drops.is_none() {
            continue;
        }
        let mut line = serde_json::to_vec(&s).map_err(std::io::Error::other)?;
        line.push(b'\n');
        file.write_all(&line)?;
        written += 1;
    }
    file.sync_all()?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_gauges_are_read_from_the_text() {
        let gauges = GatewayGauges {
            queue_depth: Some("gateway_queue_depth".into()),
            in_flight: Some("gateway_in_flight".into()),
            stale_drops: None,
            period: Duration::from_secs(1),
        };
        let text = "# TYPE gateway_in_flight gauge\ngateway_in_flight 7\ngateway_queue_depth 3\n";
        let s = parse(text, &gauges, 5);
        assert_eq!(
            (s.t_us, s.queue_depth, s.in_flight, s.stale_drops),
            (5, Some(3.0), Some(7.0), None)
        );
    }
}
