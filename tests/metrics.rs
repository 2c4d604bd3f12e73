//! `rehearse run --metrics-listen`: a real Prometheus server (Debian's
//! `prometheus`, which `.ci/run` installs) scrapes a short rehearsal every
//! 250 ms, and the series are read back through its HTTP query API: the
//! load's counters, a classic histogram's buckets, the phase as an info
//! gauge, the fake provider's and the reference gateway's own series
//! passed through. The dashboard (`deploy/grafana/rehearse.json`) is held
//! to the same scrapes: every series its queries name is one of them.

use crate::common;

use common::{one_at_a_time, rehearse, scratch};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Two phases (calm, then a peak the bounded gateway sheds), 8 s of
/// scenario time at --time-scale 2: about 4 s of load, 16 scrapes.
const SCENARIO: &str = r#"[scenario]
name = "metrics-live"
seed = 3

[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "200ms" }
per_token = { fixed = "0ms" }
[provider.concurrency]
ceiling = 6
overflow = "queue"

[gateway.reference]
mode = "bounded"
bounded = { concurrency = 4, queue = 6, wait_budget = "1s" }

[load]
patience = { fixed = "5s" }
send_lag_p99_max = "200ms"
[[load.phases]]
name = "calm"
duration = "4s"
rate = 5
[[load.phases]]
name = "peak"
duration = "4s"
rate = 60
[load.request]
prompt_tokens = { fixed = 50 }
max_tokens = { fixed = 10 }
stream = 0.5
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn prometheus_bin() -> PathBuf {
    let bin = PathBuf::from("/usr/bin/prometheus");
    assert!(
        bin.exists(),
        "Debian's prometheus is not installed: `apt-get update && apt-get install prometheus` (.ci/run does)"
    );
    bin
}

/// Starts Prometheus on `port`, scraping `target` every 250 ms, its
/// storage in `dir`; returns when it is ready to scrape it.
fn start_prometheus(dir: &Path, port: u16, target: &str) -> Killed {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\nscrape_configs:\n  - job_name: rehearse\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(prometheus_bin())
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Ready, and its target known: the discovery manager hands targets to
    // the scrape manager at most every 5 s, the first time included.
    let targets = format!("http://127.0.0.1:{port}/api/v1/targets");
    while !get(&targets).is_some_and(|t| t.contains(target)) {
        assert!(
            Instant::now() < deadline,
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

/// The body of a successful GET of `url`, if any.
fn get(url: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.text().await.ok()
    })
}

/// The result vector of an instant query.
fn query(port: u16, q: &str) -> Vec<serde_json::Value> {
    let url = format!(
        "http://127.0.0.1:{port}/api/v1/query?query={}",
        q.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    );
    let body = get(&url).unwrap_or_else(|| panic!("query {q} failed"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The value of a query's one sample.
fn value(r: &serde_json::Value) -> f64 {
    r["value"][1].as_str().unwrap().parse().unwrap()
}

/// The metric names of Prometheus text (sample lines only).
pub fn series_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn prometheus_scrapes_a_rehearsal_and_reads_its_series_back() {
    let _one = one_at_a_time();
    let dir = scratch("metrics", "live");
    let scenario = dir.join("live.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let (metrics_port, prom_port) = (free_port(), free_port());
    let _prometheus = start_prometheus(&dir, prom_port, &format!("127.0.0.1:{metrics_port}"));
    let out_dir = dir.join("run");
    let child = rehearse()
        .arg("run")
        .arg(&scenario)
        .args(["--time-scale", "2", "--no-progress", "--quiet", "--out"])
        .arg(&out_dir)
        .args(["--metrics-listen", &metrics_port.to_string()])
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    // Our own scrapes too, while it runs: every series name seen.
    let mut seen = BTreeSet::new();
    let mut scrapes = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the rehearsal did not end");
        if let Some(t) = get(&format!("http://127.0.0.1:{metrics_port}/metrics")) {
            seen.extend(series_names(&t));
            scrapes += 1;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let all = format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        status.code(),
        read("stdout"),
        read("stderr")
    );
    // A busy machine may make the run invalid (3): the series are tested.
    assert!(matches!(status.code(), Some(0 | 1 | 3)), "{all}");
    assert!(scrapes >= 3, "{scrapes} scrapes of /metrics: {all}");
    // Let the last scrape land.
    std::thread::sleep(Duration::from_millis(600));
    let sel = "{scenario=\"metrics-live\",job=\"rehearse\"}";
    let sent = query(
        prom_port,
        &format!("max_over_time(rehearse_sent_total{sel}[5m])"),
    );
    assert_eq!(sent.len(), 1, "{sent:?}");
    let report = common::json(&out_dir.join("report.json"));
    let counts = &report["counts"];
    // The last scrape is within 250 ms of the end: most of what was sent.
    let total = counts["sent"].as_f64().unwrap_or(0.0).max(1.0);
    assert!(value(&sent[0]) >= 0.5 * total, "{sent:?} of {counts}");
    assert_eq!(sent[0]["metric"]["run_id"], "run", "{sent:?}");
    let ok = query(
        prom_port,
        "max_over_time(rehearse_attempts_total{scenario=\"metrics-live\",outcome=\"ok\"}[5m])",
    );
    assert!(value(&ok[0]) > 0.0, "{ok:?}");
    let refused = query(
        prom_port,
        "max_over_time(rehearse_attempts_total{scenario=\"metrics-live\",outcome=~\"shed|stale\"}[5m])",
    );
    assert!(refused.iter().map(value).sum::<f64>() > 0.0, "{refused:?}");
    // A classic histogram: one series per bucket, cumulative to +Inf.
    let buckets = query(
        prom_port,
        "max_over_time(rehearse_latency_seconds_bucket{scenario=\"metrics-live\"}[5m])",
    );
    assert!(buckets.len() > 10, "{buckets:?}");
    assert!(
        buckets
            .iter()
            .any(|b| b["metric"]["le"] == "+Inf" && value(b) > 0.0),
        "{buckets:?}"
    );
    let p99 = query(
        prom_port,
        "histogram_quantile(0.99, max_over_time(rehearse_latency_seconds_bucket{scenario=\"metrics-live\"}[5m]))",
    );
    assert!(value(&p99[0]) > 0.05, "{p99:?}");
    // The phase as an info gauge: both phases were seen, each its own series.
    let phases = query(
        prom_port,
        "count by (phase) (count_over_time(rehearse_phase_info{scenario=\"metrics-live\"}[5m]))",
    );
    let names: BTreeSet<&str> = phases
        .iter()
        .filter_map(|p| p["metric"]["phase"].as_str())
        .collect();
    assert!(
        names.contains("calm") && names.contains("peak"),
        "{names:?}"
    );
    let retry_after = query(
        prom_port,
        "max_over_time(rehearse_retry_after_seconds_count{scenario=\"metrics-live\"}[5m])",
    );
    assert!(value(&retry_after[0]) > 0.0, "{retry_after:?}");
    // The figures the checklist judges at the end, live: streams' first
    // byte on both sides (the client's from the send, the provider's from
    // the request read: the client's is the later, what the gateway adds
    // lies between), and the gateway's memory beside its baseline.
    let streams = |name: &str| {
        let r = query(
            prom_port,
            &format!("max_over_time({name}{{scenario=~\"metrics-live|\"}}[5m])"),
        );
        r.iter().map(value).sum::<f64>()
    };
    let (client_streams, provider_streams) = (
        streams("rehearse_first_byte_seconds_count"),
        streams("fake_provider_first_byte_seconds_count"),
    );
    assert!(client_streams > 0.0, "{client_streams}");
    assert!(
        provider_streams >= client_streams,
        "{provider_streams} < {client_streams}"
    );
    let sums = (
        streams("rehearse_first_byte_seconds_sum") / client_streams,
        streams("fake_provider_first_byte_seconds_sum") / provider_streams,
    );
    // The provider's scripted first token is 200 ms, 100 ms at --time-scale
    // 2: its mean is about that, and the caller's (through the gateway, its
    // queue included) no earlier.
    assert!(
        (0.09..0.5).contains(&sums.1) && sums.0 >= sums.1 * 0.9,
        "{sums:?}"
    );
    // The provider's series under vLLM's names (a router reads it as it
    // reads a vLLM worker), per model: every streamed call in the
    // time-to-first-token histogram, the answered ones end to end.
    let vllm_ttft = streams("vllm:time_to_first_token_seconds_count");
    assert!(
        vllm_ttft >= client_streams && vllm_ttft <= provider_streams * 1.05 + 1.0,
        "{vllm_ttft} against {client_streams} and {provider_streams}"
    );
    assert!(streams("vllm:e2e_request_latency_seconds_count") > vllm_ttft);
    let running = query(prom_port, "max_over_time(vllm:num_requests_running[5m])");
    assert!(
        running
            .iter()
            .any(|r| r["metric"]["model_name"] == "gpt-4o-mini"),
        "{running:?}"
    );
    let memory = query(
        prom_port,
        "max_over_time(rehearse_gateway_memory_bytes{scenario=\"metrics-live\",kind=\"rss\"}[5m])",
    );
    let baseline = query(
        prom_port,
        "max_over_time(rehearse_gateway_memory_baseline_bytes{scenario=\"metrics-live\"}[5m])",
    );
    assert!(
        value(&memory[0]) > 1e6 && value(&baseline[0]) > 1e6,
        "{memory:?} {baseline:?}"
    );
    // The provider's and the reference gateway's own series, passed through.
    for name in [
        "fake_provider_in_flight",
        "gateway_queue_depth",
        "rehearse_backlog",
        "rehearse_harness_valid",
        "rehearse_send_lag_seconds_bucket",
    ] {
        assert!(
            !query(prom_port, &format!("max_over_time({name}[5m])")).is_empty(),
            "{name}: none in Prometheus; seen in our scrapes: {seen:?}"
        );
        assert!(seen.contains(name), "{name}: {seen:?}");
    }
    dashboard_names_only_series_that_exist(&seen, prom_port);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The dashboard's queries name only series a real scrape holds, and
/// Prometheus runs each (its variables filled in) without an error.
fn dashboard_names_only_series_that_exist(seen: &BTreeSet<String>, prom_port: u16) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/rehearse.json");
    let board: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    collect_exprs(&board, &mut exprs);
    assert!(exprs.len() >= 8, "{exprs:?}");
    // The phases are its annotations.
    let annotations = board["annotations"]["list"].as_array().unwrap();
    assert!(
        annotations.iter().any(|a| a["expr"]
            .as_str()
            .is_some_and(|e| e.starts_with("rehearse_phase_info"))
            && a["titleFormat"] == "{{phase}}"),
        "{annotations:?}"
    );
    let named: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    for side in ["rehearse_", "fake_provider_", "gateway_"] {
        assert!(
            named.iter().any(|n| n.starts_with(side)),
            "no {side} series: {named:?}"
        );
    }
    for e in &exprs {
        let filled = e
            .replace("$scenario", "metrics-live")
            .replace("$run_id", "run")
            .replace("$job", ".*")
            .replace("$__rate_interval", "1m");
        query(prom_port, &filled);
        for name in metric_names(e) {
            assert!(
                seen.contains(&name),
                "{path:?}: `{e}` names {name}, which no scrape holds"
            );
        }
    }
}

/// Every `expr` string of a dashboard (panels' targets, annotations).
fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The series a PromQL expression names: identifiers of the exporters'
/// prefixes (`rehearse_`, `fake_provider_`, `gateway_`), outside label
/// matchers and strings.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let (mut depth, mut quoted) = (0, false);
    let mut word = String::new();
    let mut flush = |word: &mut String, depth: i32| {
        let w = std::mem::take(word);
        if depth == 0
            && ["rehearse_", "fake_provider_", "gateway_"]
                .iter()
                .any(|p| w.starts_with(p))
        {
            names.push(w);
        }
    };
    for c in expr.chars() {
        if quoted {
            quoted = c != '"';
            continue;
        }
        match c {
            '"' => quoted = true,
            '{' => {
                flush(&mut word, depth);
                depth += 1;
            }
            '}' => depth -= 1,
            c if c.is_alphanumeric() || c == '_' || c == ':' => word.push(c),
            _ => flush(&mut word, depth),
        }
    }
    flush(&mut word, depth);
    names
}

#[test]
fn a_query_names_its_series_not_its_labels_or_strings() {
    let e = "histogram_quantile(0.99, sum by (le) (rate(rehearse_latency_seconds_bucket{scenario=\"gateway_x\",outcome=~\"a|b\"}[$__rate_interval]))) / gateway_in_flight";
    assert_eq!(
        metric_names(e),
        ["rehearse_latency_seconds_bucket", "gateway_in_flight"]
    );
    let seen: BTreeSet<String> =
        series_names("# HELP x y\nrehearse_sent_total{a=\"1\"} 3\nfake_provider_queued 0\n");
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["fake_provider_queued", "rehearse_sent_total"]
    );
}

/// With --shards the clients count in processes of their own: served from
/// the run, their series would read zero. Refused before anything starts.
#[test]
fn live_series_are_refused_with_shards_rather_than_served_empty() {
    let out = rehearse()
        .args([
            "run",
            "--shards",
            "2",
            "--metrics-listen",
            "0",
            "--no-progress",
        ])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("--metrics-listen: not with --shards 2"),
        "{all}"
    );
}
