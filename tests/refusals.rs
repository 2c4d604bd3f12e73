//! Refusals told by the join, not by the status alone (issue 42, items 9
//! and 7), in real rehearsals: the reference gateway given the faults
//! `refuse-408` (every request answered 408 at once, the provider never
//! called) and `refuse-500-after` (held, then answered 500) is seen to
//! shed, at admission and after waiting, by `shed_onset`, `retry_after`
//! and `stale_share`; a raw relay made here that passes the provider's
//! quota 429s through, without a reason, has them counted as the
//! provider's refusals relayed, and `retry_after` passes it when it keeps
//! the provider's Retry-After and fails it when it strips it. Small counts
//! at high time scales; the figures asserted leave room for a busy
//! machine.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common;
use bytes::Bytes;
use common::{json, one_at_a_time, rehearse, scratch, text};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// `rehearse run SCENARIO ARGS --out DIR`: its exit code and report. A run
/// the harness declares invalid (the machine too busy to keep the
/// schedule) proves nothing: it is made once more.
fn run(scenario: &Path, args: &[&str], dir: &Path) -> (Option<i32>, serde_json::Value) {
    let _one = one_at_a_time();
    for attempt in 1..=2 {
        let _ = std::fs::remove_dir_all(dir);
        let out = rehearse()
            .arg("run")
            .arg(scenario)
            .args(["--no-progress", "--out"])
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        let report = dir.join("report.json");
        assert!(report.exists(), "no report.json: {}", text(&out));
        let report = json(&report);
        if report["harness"]["valid"] != false || attempt == 2 {
            assert_ne!(
                report["harness"]["valid"],
                false,
                "the load generator missed its schedule twice: {}",
                text(&out)
            );
            return (out.status.code(), report);
        }
    }
    unreachable!("the loop returns")
}

fn check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
}

fn count(report: &serde_json::Value, what: &str) -> u64 {
    report["counts"][what].as_u64().unwrap_or(0)
}

fn short(report: &serde_json::Value, id: &str) -> String {
    check(report, id)["short"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn pool_demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/pool-demo.toml")
}

/// The pool demo five times faster (400 requests in 2 s) against the
/// bounded reference gateway given `fault`; no call reaches the provider.
fn faulty(fault: &str, name: &str) -> serde_json::Value {
    let dir = scratch("refusals", name);
    let set = format!("gateway.reference.fault={fault}");
    let args = [
        "--time-scale",
        "5",
        "--set",
        &set,
        // Its refusals are classed by the join, not by their timing to the
        // millisecond: a busy machine's late sends change nothing here.
        "--set",
        "load.send_lag_p99_max=200ms",
    ];
    let (code, report) = run(&pool_demo(), &args, &dir);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["provider"]["calls"], 0, "{}", report["provider"]);
    assert_eq!(count(&report, "error"), 0, "{}", report["counts"]);
    report
}

/// A router's own `408 Request Timeout` at once, the provider never
/// called (vllm-router's queue timeout): its refusals are the gateway's
/// sheds, not provider errors, and `shed_onset`, `stale_share` and
/// `retry_after` judge them. Before, they were 400 `provider_error`s, and
/// `shed_onset` and `retry_after` said "never shed".
#[test]
fn a_gateway_refusing_408_at_once_is_seen_to_shed() {
    let report = faulty("refuse-408", "refuse-408");
    let (shed, stale) = (count(&report, "shed"), count(&report, "stale"));
    // Every one the gateway's own: at once, but for those a busy machine
    // answered more than 20 ms after the send (`wire::AT_ONCE_US`), taken
    // for a wait (on a loaded machine, most of them).
    assert_eq!(shed + stale, 400, "{}", report["counts"]);
    let onset = short(&report, "shed_onset");
    if shed > 0 {
        assert!(onset.starts_with("first shed at depth "), "{onset}");
    } else {
        assert!(
            onset.starts_with("no shed at admission; 400 dropped"),
            "{onset}"
        );
    }
    let stale_share = short(&report, "stale_share");
    assert!(
        stale_share.starts_with(&format!("{stale} of 400 refusals after waiting")),
        "{stale_share}"
    );
    // Its 408s carry no Retry-After: every own shed without one.
    let ra = check(&report, "retry_after");
    assert_eq!(ra["status"], "fail", "{ra}");
    let n = shed + stale;
    assert!(
        ra["short"]
            .as_str()
            .unwrap()
            .starts_with(&format!("own sheds: {n} of {n} without Retry-After")),
        "{ra}"
    );
    let lines = report["refusals"].as_array().unwrap();
    let classed: u64 = lines
        .iter()
        .filter(|l| l["status"] == 408)
        .filter(|l| l["class"] == "at_admission" || l["class"] == "at_dequeue")
        .map(|l| l["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(classed, 400, "{lines:?}");
}

/// A gateway that holds every request 2 s (400 ms at x5), then answers
/// 500, the provider never called: every refusal is a stale drop after
/// waiting, and `shed_onset` and `stale_share` fail it for that.
#[test]
fn a_gateway_answering_500_after_a_wait_is_seen_to_drop_after_waiting() {
    let report = faulty("refuse-500-after=2s", "refuse-500");
    let (shed, stale) = (count(&report, "shed"), count(&report, "stale"));
    assert_eq!(shed + stale, 400, "{}", report["counts"]);
    assert!(stale > 350, "after waiting: {}", report["counts"]);
    let stale_share = check(&report, "stale_share");
    assert_eq!(stale_share["status"], "fail", "{stale_share}");
    assert!(
        short(&report, "stale_share").starts_with(&format!(
            "{stale} of {} refusals after waiting",
            shed + stale
        )),
        "{stale_share}"
    );
    let onset = check(&report, "shed_onset");
    assert_eq!(onset["status"], "fail", "{onset}");
    assert!(
        !onset["short"].as_str().unwrap().starts_with("never shed"),
        "{onset}"
    );
    let ra = check(&report, "retry_after");
    assert_eq!(ra["status"], "fail", "{ra}");
    assert!(
        ra["short"].as_str().unwrap().starts_with("own sheds: "),
        "{ra}"
    );
}

/// A provider whose quota serves 10 requests/s, offered 40/s for 4 s, in
/// front of the gateway at `url`; the callers do not retry.
fn quota(url: &str) -> String {
    format!(
        r#"[scenario]
name = "relayed-429s"
seed = 5

[provider]
completion_tokens = {{ fixed = 5 }}
[provider.latency]
ttft = {{ fixed = "50ms" }}
per_token = {{ fixed = "0ms" }}
[provider.quota]
requests_per_minute = 600
window = "1s"

[gateway]
url = "{url}"

[load]
patience = {{ fixed = "30s" }}
# What the relay does with a refusal does not hang on the send's timing.
send_lag_p99_max = "200ms"
[[load.phases]]
duration = "4s"
rate = 40
[load.request]
prompt_tokens = {{ fixed = 20 }}
max_tokens = {{ fixed = 5 }}
[load.retry]
policy = "none"
"#
    )
}

/// The quota scenario through a raw relay that passes the provider's
/// answers through, keeping its Retry-After headers or not: the report.
fn through_relay(keep_retry_after: bool, name: &str) -> serde_json::Value {
    let dir = scratch("refusals", name);
    let provider = free_addr();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let relay = rt.block_on(relay(format!("http://{provider}"), keep_retry_after));
    let path = dir.join("scenario.toml");
    std::fs::write(&path, quota(&format!("http://{relay}"))).unwrap();
    let (_, report) = run(
        &path,
        &[
            "--time-scale",
            "4",
            // The relay has no timeout or budget to scale.
            "--allow-time-scale",
            "--provider-listen",
            &provider.to_string(),
        ],
        &dir.join("run"),
    );
    rt.shutdown_timeout(Duration::from_secs(1));
    report
}

/// The provider's 429s passed through, no reason given: the provider's
/// refusals relayed (`upstream_refused`), not the gateway's sheds; with
/// the provider's Retry-After kept, `retry_after` passes on them.
#[test]
fn a_relay_keeping_the_providers_retry_after_passes_retry_after() {
    let report = through_relay(true, "relay-keeps");
    let relayed = count(&report, "upstream_refused");
    assert!(relayed >= 40, "{}", report["counts"]);
    assert_eq!(
        count(&report, "shed") + count(&report, "stale"),
        0,
        "{}",
        report["counts"]
    );
    let ra = check(&report, "retry_after");
    assert_eq!(ra["status"], "pass", "{ra}");
    assert_eq!(
        ra["short"],
        format!("relayed refusals: the provider's Retry-After kept on {relayed} of {relayed}"),
        "{ra}"
    );
}

/// The same relay stripping the provider's Retry-After: `retry_after`
/// fails, saying how many reached the client without one.
#[test]
fn a_relay_stripping_the_providers_retry_after_fails_retry_after() {
    let report = through_relay(false, "relay-strips");
    let relayed = count(&report, "upstream_refused");
    assert!(relayed >= 40, "{}", report["counts"]);
    let ra = check(&report, "retry_after");
    assert_eq!(ra["status"], "fail", "{ra}");
    assert_eq!(
        ra["short"],
        format!("relayed refusals: {relayed} Retry-Afters stripped, 0 shortened, of {relayed}"),
        "{ra}"
    );
}

/// A loopback address nothing listens on now.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Starts the relay: every request is sent on to `upstream` (same path,
/// headers and body) and its answer read whole and passed back with its
/// status and content type, and, when `keep_retry_after`, its
/// `retry-after` and `retry-after-ms`; nothing else, no reason of its own.
async fn relay(upstream: String, keep_retry_after: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = reqwest::Client::new();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    pass_through(client.clone(), upstream.clone(), keep_retry_after, req)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn pass_through(
    client: reqwest::Client,
    upstream: String,
    keep_retry_after: bool,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut call = client.post(format!("{upstream}{}", parts.uri.path()));
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            call = call.header(name, value);
        }
    }
    let mut r = Response::new(Full::new(Bytes::new()));
    let Ok(answer) = call.body(body).send().await else {
        *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
        return Ok(r);
    };
    *r.status_mut() = answer.status();
    let mut kept = vec!["content-type"];
    if keep_retry_after {
        kept.extend(["retry-after", "retry-after-ms"]);
    }
    for name in kept {
        if let Some(value) = answer.headers().get(name) {
            r.headers_mut().insert(name, value.clone());
        }
    }
    *r.body_mut() = Full::new(answer.bytes().await.unwrap_or_default());
    Ok(r)
}
