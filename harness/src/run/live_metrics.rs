//! `--metrics-listen ADDR` (`rehearse run`, `rehearse load`): the
//! rehearsal's own series in Prometheus text at `GET /metrics` while it
//! runs, served as the fake provider and the reference gateway serve
//! theirs (hyper, HTTP/1.1). The load's side is
//! [`loadgen::Live::exposition`]; beside it the calls in flight at an
//! in-process fake provider and the backlog they leave (attempts inside
//! the gateway, not at the provider), the gateway's memory as the run
//! samples it (beside its idle baseline), and, passed through as they are,
//! the fake provider's and the reference gateway's own `/metrics`, so one
//! scrape target holds every series a dashboard overlays.
//!
//! A bare port binds loopback (`9464` is `127.0.0.1:9464`), as the
//! provider's admin API answers loopback callers only: name a host to
//! serve elsewhere.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use crate::error::RunError;

/// Where `--metrics-listen` was bound.
pub(crate) fn bind(listen: &str) -> Result<std::net::TcpListener, RunError> {
    let addr = if listen.parse::<u16>().is_ok() {
        format!("127.0.0.1:{listen}")
    } else {
        listen.to_string()
    };
    let listener = std::net::TcpListener::bind(&addr).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    });
    listener.map_err(|source| RunError::MetricsListen {
        listen: listen.to_string(),
        source,
    })
}

/// What the series are made from.
pub struct MetricsSource {
    /// The load generator's live counters.
    pub live: Arc<loadgen::Live>,
    /// The load at rehearsal scale (its phases, its send-lag bound).
    pub plan: loadgen::LoadPlan,
    /// `scenario` and `run_id`, as every series carries them.
    pub labels: String,
    /// The rehearsal's time scale.
    pub time_scale: f64,
    /// The in-process fake provider's `/metrics`, if there is one.
    pub provider_metrics: Option<String>,
    /// The reference gateway's `/metrics`, when the harness started it.
    pub gateway_metrics: Option<String>,
    /// The gateway's memory as the run samples it (`rss.jsonl`), when
    /// the run samples it.
    pub gateway_memory: Option<Arc<crate::gateway::memory::MemoryNow>>,
}

impl MetricsSource {
    /// The labels of a rehearsal of `scenario` whose run id is `run_id`.
    pub fn labels(scenario: &str, run_id: &str) -> String {
        format!(
            "scenario=\"{}\",run_id=\"{}\"",
            loadgen::label_value(scenario),
            loadgen::label_value(run_id)
        )
    }

    /// The text of one scrape.
    async fn text(&self, client: &reqwest::Client) -> String {
        let mut out = self.live.exposition(
            &self.plan,
            &self.labels,
            self.time_scale,
            crate::run::clock::now_us(),
        );
        let fetch = |url: Option<String>| async move {
            let r = client.get(url?).send().await.ok()?;
            r.status().is_success().then_some(())?;
            r.text().await.ok()
        };
        let (provider, gateway) = tokio::join!(
            fetch(self.provider_metrics.clone()),
            fetch(self.gateway_metrics.clone())
        );
        if let Some(p) = &provider {
            let in_flight = gauge(p, "fake_provider_in_flight").unwrap_or(0.0);
            let inside = self
                .live
                .in_flight
                .load(std::sync::atomic::Ordering::Relaxed) as f64;
            let labels = &self.labels;
            out.push_str(&format!(
                "# HELP rehearse_provider_in_flight Calls not yet finished at the fake provider.\n\
                 # TYPE rehearse_provider_in_flight gauge\nrehearse_provider_in_flight{{{labels}}} {in_flight}\n\
                 # HELP rehearse_backlog Attempts inside the gateway and not at the provider: sent, not answered, not in flight there.\n\
                 # TYPE rehearse_backlog gauge\nrehearse_backlog{{{labels}}} {}\n",
                (inside - in_flight).max(0.0)
            ));
        }
        if let Some(m) = &self.gateway_memory {
            out.push_str(&memory_series(m, &self.labels));
        }
        for text in [provider, gateway].into_iter().flatten() {
            out.push_str(&text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

/// The gateway's memory as last sampled (nothing before the first
/// sample): its resident set, the anonymous part of it, and the first
/// sample (the idle baseline `memory_ceiling` measures from); retained
/// memory is the resident set once the load has drained, less that.
fn memory_series(m: &crate::gateway::memory::MemoryNow, labels: &str) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let baseline = m.baseline.load(Relaxed);
    if baseline == 0 {
        return String::new();
    }
    let (rss, anon) = (m.rss.load(Relaxed), m.anon.load(Relaxed));
    let mut out = format!(
        "# HELP rehearse_gateway_memory_bytes The gateway's memory, sampled every 100 ms (kind: rss, the resident set; anon, its anonymous part, where /proc gives it).\n\
         # TYPE rehearse_gateway_memory_bytes gauge\n\
         rehearse_gateway_memory_bytes{{{labels},kind=\"rss\"}} {rss}\n"
    );
    if anon > 0 {
        out.push_str(&format!(
            "rehearse_gateway_memory_bytes{{{labels},kind=\"anon\"}} {anon}\n"
        ));
    }
    out.push_str(&format!(
        "# HELP rehearse_gateway_memory_baseline_bytes The gateway's resident set before the load: memory_ceiling's idle baseline.\n\
         # TYPE rehearse_gateway_memory_baseline_bytes gauge\n\
         rehearse_gateway_memory_baseline_bytes{{{labels}}} {baseline}\n"
    ));
    out
}

/// The value of an unlabelled sample `name` in Prometheus text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Binds `listen` (a bare port: loopback) and serves `GET /metrics` from
/// `source` there until `stop` (`rehearse load --metrics-listen`; `run`
/// binds before it starts anything).
pub fn serve_metrics(
    listen: &str,
    source: MetricsSource,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    serve(bind(listen)?, Arc::new(source), stop)
}

/// `rehearse load --metrics-listen`: when `listen` is given, serves the
/// live series of a load run of the scenario file `scenario` (its
/// `[scenario]` name, and its time scale unless `time_scale` replaces it)
/// into `out`, until `stop`; the run id is `out`'s name. Returns the
/// counters to give the load run (none without `listen`).
pub fn serve_load_metrics(
    plan: &loadgen::LoadPlan,
    (scenario, time_scale, listen): (&std::path::Path, Option<f64>, Option<&str>),
    out: &std::path::Path,
    stop: CancellationToken,
) -> Result<Option<Arc<loadgen::Live>>, RunError> {
    let Some(listen) = listen else {
        return Ok(None);
    };
    let meta = std::fs::read_to_string(scenario)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| t.get("scenario").cloned())
        .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
    let name = meta
        .get("name")
        .and_then(toml::Value::as_str)
        .map(str::to_string);
    let stem = scenario
        .file_stem()
        .map(|s| s.to_string_lossy().to_string());
    let file_scale = meta
        .get("time_scale")
        .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)));
    let run_id = out
        .file_name()
        .map_or("load".into(), |n| n.to_string_lossy().to_string());
    let live = Arc::new(loadgen::Live::default());
    let source = MetricsSource {
        live: live.clone(),
        plan: plan.clone(),
        labels: MetricsSource::labels(&name.or(stem).unwrap_or_default(), &run_id),
        time_scale: time_scale.or(file_scale).unwrap_or(1.0),
        provider_metrics: None,
        gateway_metrics: None,
        gateway_memory: None,
    };
    serve_metrics(listen, source, stop)?;
    Ok(Some(live))
}

/// Serves `GET /metrics` from `source` on `listener` until `stop`.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    source: Arc<MetricsSource>,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    let local = listener.local_addr().ok();
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|source| RunError::MetricsListen {
            listen: local.map_or(String::new(), |a| a.to_string()),
            source,
        })?;
    let client = crate::http::resolve::client()
        .timeout(Duration::from_millis(500))
        .build()
        .map_err(RunError::HttpClient)?;
    Ok(tokio::spawn(async move {
        loop {
            let (stream, _peer): (_, SocketAddr) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => {
                        // Usually EMFILE: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
                () = stop.cancelled() => return,
            };
            let (source, client) = (source.clone(), client.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (source, client) = (source.clone(), client.clone());
                    async move { Ok::<_, Infallible>(answer(&req, &source, &client).await) }
                });
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(5))
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

async fn answer(
    req: &Request<hyper::body::Incoming>,
    source: &MetricsSource,
    client: &reqwest::Client,
) -> Response<Full<Bytes>> {
    let (status, kind, body) =
        if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
            (
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                source.text(client).await,
            )
        } else {
            (
                404,
                "text/plain; charset=utf-8",
                "not found: the series are at GET /metrics\n".to_string(),
            )
        };
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, kind)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_binds_loopback_and_a_bad_address_is_named() {
        let l = bind("0").unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        let e = bind("nowhere:-1").unwrap_err();
        assert!(e.to_string().contains("metrics_listen nowhere:-1"), "{e}");
        assert_eq!(
            gauge(
                "x 1\nfake_provider_in_flight 7\n",
                "fake_provider_in_flight"
            ),
            Some(7.0)
        );
    }

    /// Nothing before the first sample; then the latest resident set, its
    /// anonymous part and the first sample as the baseline, which later
    /// samples do not move.
    #[test]
    fn the_gateway_memory_is_the_latest_sample_beside_the_first() {
        use std::sync::atomic::Ordering::Relaxed;
        let m = crate::gateway::memory::MemoryNow::default();
        assert_eq!(memory_series(&m, "run_id=\"r\""), "");
        m.baseline.store(10 << 20, Relaxed);
        m.rss.store(40 << 20, Relaxed);
        m.anon.store(30 << 20, Relaxed);
        let t = memory_series(&m, "run_id=\"r\"");
        for want in [
            "rehearse_gateway_memory_bytes{run_id=\"r\",kind=\"rss\"} 41943040\n",
            "rehearse_gateway_memory_bytes{run_id=\"r\",kind=\"anon\"} 31457280\n",
            "rehearse_gateway_memory_baseline_bytes{run_id=\"r\"} 10485760\n",
            "# TYPE rehearse_gateway_memory_bytes gauge\n",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
    }
}
