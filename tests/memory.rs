//! `memory_ceiling`'s arc in real rehearsals (issue 42, 6): the gateway's
//! memory idle before the load, at its peak, and once the load is gone
//! (ended, drained, idle for `settle`). The reference gateway keeps a few
//! MiB and passes; a gateway of a few lines of Python that
//! keeps every request body it relays (with 256 KB of its own beside each,
//! so that 300 requests hold some 90 MiB) fails with the bytes it kept,
//! though no ceiling is set. Short rehearsals at time scale 5: two seconds
//! of load, two of settling.

use std::path::{Path, PathBuf};

use crate::common;
use common::{json, on_schedule, one_at_a_time, rehearse, scratch, text};

/// 30 requests/s for 10 s of 64 KB bodies against a provider that answers
/// in 100 ms with room for all of them: no overload, so whatever memory a
/// gateway keeps afterwards is what it kept of requests it served. No
/// memory ceiling: the check judges what is kept without one.
fn scenario(gateway: &str) -> String {
    format!(
        r#"
[scenario]
name = "memory-arc"
seed = 42

[provider]
completion_tokens = {{ fixed = 10 }}

[provider.latency]
ttft = {{ fixed = "100ms" }}
per_token = {{ fixed = "0ms" }}

[provider.concurrency]
ceiling = 64
overflow = "queue"

[gateway]
ready_timeout = "20s"
{gateway}

[load]
patience = {{ fixed = "10s" }}
send_lag_p99_max = "50ms"

[[load.phases]]
name = "steady"
duration = "10s"
rate = 30

[load.request]
prompt_tokens = {{ fixed = 50 }}
padding_kb = {{ fixed = 64 }}
max_tokens = {{ fixed = 10 }}
"#
    )
}

/// A relay that keeps every request body it has seen, and 256 KB of its
/// own beside each (touched, so resident): the shape of a gateway that
/// logs or caches requests without a bound.
const HOARDING_GATEWAY: &str = r#"
import sys, threading, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

listen, upstream = sys.argv[1], sys.argv[2]
kept, lock = [], threading.Lock()

class Hoard(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            kept.append((body, bytes([len(kept) % 251]) * (256 * 1024)))
        headers = {"content-type": "application/json"}
        if self.headers.get("x-request-id"):
            headers["x-request-id"] = self.headers["x-request-id"]
        req = urllib.request.Request(upstream + self.path, data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, out = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, out = e.code, e.read()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

host, port = listen.rsplit(":", 1)
Server((host, int(port)), Hoard).serve_forever()
"#;

/// `rehearse run` of `scenario` (written into `dir`) at time scale 5, made
/// again if its load generator fell behind: its exit code, stderr, and run
/// directory.
fn rehearse_at_5(dir: &Path, scenario: &str) -> (Option<i32>, String, PathBuf) {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, scenario).unwrap();
    let _one = one_at_a_time();
    on_schedule(|attempt| {
        let out_dir = dir.join(format!("run-{attempt}"));
        let out = rehearse()
            .arg("run")
            .arg(&path)
            .args(["--time-scale", "5", "--no-progress", "--out"])
            .arg(&out_dir)
            .output()
            .unwrap();
        assert!(
            out_dir.join("report.json").exists(),
            "no report.json: {}",
            text(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        ((out.status.code(), stderr, out_dir.clone()), out_dir)
    })
}

fn memory_ceiling(run: &Path) -> serde_json::Value {
    let report = json(&run.join("report.json"));
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "memory_ceiling"))
        .unwrap_or_else(|| panic!("no memory_ceiling in {report}"))
        .clone()
}

/// What every run with the check on shows of the arc's mechanism: the run
/// said it waited and waited its `settle` (10 s of scenario time, 2 s at
/// time scale 5), sampled the anonymous memory, and took samples before
/// the load (the baseline) and through the wait.
fn waited_and_sampled(stderr: &str, run: &Path) {
    assert!(
        stderr.contains("the gateway idles 2 s for its memory to settle"),
        "{stderr}"
    );
    let meta = json(&run.join("run.json"));
    let e = &meta["expectations"];
    let (from, to) = (
        e["memory_settle"][0].as_u64().unwrap(),
        e["memory_settle"][1].as_u64().unwrap(),
    );
    let start = e["start_us"].as_u64().unwrap();
    assert!(
        (1_900_000..4_000_000).contains(&(to - from)),
        "waited {} us",
        to - from
    );
    let samples: Vec<serde_json::Value> = std::fs::read_to_string(run.join("rss.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        samples
            .iter()
            .all(|s| s["rss_anon_bytes"].as_u64().is_some()),
        "{samples:?}"
    );
    let t = |s: &serde_json::Value| s["t_us"].as_u64().unwrap();
    // The idle baseline: the sample taken at once, before the load.
    assert!(
        samples.iter().any(|s| t(s) < start),
        "no sample before the load"
    );
    assert!(
        samples
            .iter()
            .filter(|s| (from..=to).contains(&t(s)))
            .count()
            >= 10
    );
}

/// The reference gateway (bounded, its defaults) keeps less than the
/// allowance of what the load made it take (measured: 3.4 MiB of
/// anonymous memory idle, 7.8 at the peak and after: its allocator keeps
/// the 4.5 MiB it grew), and the check passes without a ceiling.
#[test]
fn the_reference_gateway_keeps_less_than_its_allowance_after_the_load() {
    let dir = scratch("memory", "reference");
    let scenario = scenario("[gateway.reference]\nmode = \"bounded\"\n");
    let (code, stderr, run) = rehearse_at_5(&dir, &scenario);
    let v = memory_ceiling(&run);
    eprintln!("reference gateway: {} / {}", v["short"], v["observed"]);
    assert_eq!(v["status"], "pass", "{v}\n{stderr}");
    assert!(
        v["short"].as_str().unwrap().starts_with("peak ")
            && v["short"]
                .as_str()
                .unwrap()
                .contains("(no ceiling); retained "),
        "{v}"
    );
    assert!(
        v["observed"].as_str().unwrap().ends_with("(RssAnon)"),
        "{v}"
    );
    waited_and_sampled(&stderr, &run);
    assert_eq!(code, Some(0), "{stderr}");
}

/// A gateway that keeps every request body fails, with the bytes it kept
/// in the verdict: 300 requests of 64 KB bodies and 256 KB beside each.
#[test]
fn a_gateway_that_keeps_every_request_body_fails_with_the_bytes_it_kept() {
    let dir = scratch("memory", "hoard");
    let gateway = dir.join("hoard.py");
    std::fs::write(&gateway, HOARDING_GATEWAY).unwrap();
    let scenario = scenario(&format!(
        "command = [\"python3\", \"{}\", \"{{listen}}\", \"{{provider_url}}\"]\n",
        gateway.display()
    ));
    let (code, stderr, run) = rehearse_at_5(&dir, &scenario);
    let v = memory_ceiling(&run);
    eprintln!("hoarding gateway: {} / {}", v["short"], v["observed"]);
    assert_eq!(v["status"], "fail", "{v}\n{stderr}");
    assert_eq!(code, Some(1), "{stderr}");
    let detail = v["detail"].as_str().unwrap();
    // "the gateway kept 93.1 MiB (97,6..,... bytes) above its idle baseline".
    let kept_mib: f64 = detail
        .strip_prefix("the gateway kept ")
        .and_then(|d| d.split(" MiB (").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    let kept_bytes: u64 = detail
        .split(" MiB (")
        .nth(1)
        .and_then(|d| d.split(" bytes)").next())
        .map(|n| n.replace(',', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    // 300 × 320 KB is 94 MiB; the answers it relayed were not kept. Room
    // for a run that lost a few requests and for the interpreter's own.
    assert!((60.0..140.0).contains(&kept_mib), "{detail}");
    assert!(
        (kept_bytes as f64 / 1048576.0 - kept_mib).abs() < 0.1,
        "{detail}"
    );
    assert!(
        detail.contains("above its idle baseline once the load was gone, over the 32 MiB allowed"),
        "{detail}"
    );
    waited_and_sampled(&stderr, &run);
}
