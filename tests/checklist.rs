//! Real rehearsals of the checks that speak in every run (issue 26):
//! `stale_share` against the bounded reference gateway with the pool
//! demo's queue (sized for its wait budget) and a queue too deep for it;
//! `retry_after` in seconds against the same gateway; and
//! `no_silent_truncation` with a provider that cuts streams, through the
//! reference gateway (the cut reaches the client as a break) and through
//! a relay made here that ends the client's stream cleanly after an
//! upstream cut (a truncated answer handed over as a success). Small
//! counts at high time scales; the figures asserted leave room for a busy
//! machine.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;
use bytes::Bytes;
use common::{json, one_at_a_time, rehearse, scratch, text};
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
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

fn pool_demo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/pool-demo.toml")
}

/// The pool demo ten times faster: its queue of 11 drains within the 2 s
/// wait budget (8 calls of 1.4 s at a time), so nearly every refusal comes
/// at admission, and its Retry-After is the drain time to within its
/// bound for most refusals; a queue of 32 holds more than the budget lets
/// it serve, and a quarter of its refusals come after a wait.
#[test]
fn stale_share_passes_a_queue_sized_for_its_budget_and_fails_a_deep_one() {
    let started = Instant::now();
    let dir = scratch("checklist", "queue-11");
    let (code, report) = run(&pool_demo(), &["--time-scale", "10"], &dir);
    assert_eq!(code, Some(0), "{report}");
    let stale = check(&report, "stale_share");
    assert_eq!(stale["status"], "pass", "{stale}");
    let (shed, stale_n) = (count(&report, "shed"), count(&report, "stale"));
    assert!(
        shed > 150 && (stale_n as f64) < 0.08 * (shed + stale_n) as f64,
        "{}",
        report["counts"]
    );
    // The reference gateway's Retry-After, in seconds: the median refusal
    // within max(1 ms, 25% of the drain time) of it.
    let ra = check(&report, "retry_after");
    assert_eq!(ra["status"], "pass", "{ra}");
    assert!(
        ra["short"].as_str().unwrap().contains("median error 0.0"),
        "{ra}"
    );
    // The records say which header gave the value: retry-after-ms.
    let records = std::fs::read_to_string(dir.join("client.jsonl")).unwrap();
    assert!(
        records.contains(r#""retry_after_header":"retry_after_ms""#),
        "no header named in the records"
    );
    // Its drain is judged against the plan's baseline (the load stops
    // with the overload), and passes.
    let drain = check(&report, "drain");
    assert_eq!(drain["status"], "pass", "{drain}");
    assert!(
        drain["detail"]
            .as_str()
            .unwrap()
            .contains("baseline: the plan's 0 waiting"),
        "{drain}"
    );

    let dir = scratch("checklist", "queue-32");
    let (code, report) = run(
        &pool_demo(),
        &[
            "--time-scale",
            "10",
            "--set",
            "gateway.reference.bounded.queue=32",
        ],
        &dir,
    );
    assert_eq!(code, Some(1), "{report}");
    let stale = check(&report, "stale_share");
    assert_eq!(stale["status"], "fail", "{stale}");
    let (shed, stale_n) = (count(&report, "shed"), count(&report, "stale"));
    assert!(
        (stale_n as f64) > 0.15 * (shed + stale_n) as f64,
        "{}",
        report["counts"]
    );
    assert!(
        stale["detail"]
            .as_str()
            .unwrap()
            .contains("the queue is deeper than its wait budget"),
        "{stale}"
    );
    // It still sheds at admission once the queue is full.
    assert_eq!(check(&report, "shed_onset")["status"], "pass");
    eprintln!("two pool demos in {:?}", started.elapsed());
}

/// Streamed answers from a provider that cuts a quarter of its streams
/// halfway: 20 requests/s for 3 s, 20 tokens each at 5 ms a token.
fn cutting(gateway: &str) -> String {
    format!(
        r#"[scenario]
name = "stream-cuts"
seed = 3

[provider]
completion_tokens = {{ fixed = 20 }}
[provider.latency]
ttft = {{ fixed = "20ms" }}
per_token = {{ fixed = "5ms" }}
[provider.faults]
stream_cut = 0.25

[gateway]
{gateway}

[load]
patience = {{ fixed = "5s" }}
send_lag_p99_max = "20ms"
[[load.phases]]
duration = "3s"
rate = 20
[load.request]
prompt_tokens = {{ fixed = 20 }}
max_tokens = {{ fixed = 20 }}
stream = 1.0
"#
    )
}

/// Through the reference gateway, a cut stream reaches the client as a
/// break: `no_silent_truncation` passes with the cuts counted, and
/// `no_silent_loss` counts the resets.
#[test]
fn a_cut_passed_on_as_a_break_is_no_silent_truncation() {
    let dir = scratch("checklist", "cut-through");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, cutting("reference = { mode = \"naive\" }")).unwrap();
    let out = dir.join("run");
    let (code, report) = run(&path, &[], &out);
    assert_eq!(code, Some(1), "{report}");
    let v = check(&report, "no_silent_truncation");
    assert_eq!(v["status"], "pass", "{v}");
    let short = v["short"].as_str().unwrap();
    let cut: u64 = short
        .split(" of ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{short}"));
    assert!(cut >= 5, "{short}");
    assert!(short.starts_with("0 of "), "{short}");
    let loss = check(&report, "no_silent_loss");
    assert_eq!(loss["status"], "fail", "{loss}");
    assert!(loss["detail"].as_str().unwrap().contains("reset"), "{loss}");
}

/// A relay in front of the provider that, when the provider's stream
/// breaks, ends its own stream to the client cleanly with `[DONE]`: each
/// cut answer is handed over as a success, and `no_silent_truncation`
/// fails with them counted.
#[test]
fn a_relay_that_ends_a_cut_stream_cleanly_fails_no_silent_truncation() {
    let dir = scratch("checklist", "relay");
    // The in-process provider's address, chosen here so that the relay can
    // be pointed at it before the run starts.
    let provider = free_addr();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let relay = rt.block_on(relay(format!("http://{provider}")));
    let path = dir.join("scenario.toml");
    std::fs::write(&path, cutting(&format!("url = \"http://{relay}\""))).unwrap();
    let out = dir.join("run");
    let (code, report) = run(&path, &["--provider-listen", &provider.to_string()], &out);
    assert_eq!(code, Some(1), "{report}");
    let v = check(&report, "no_silent_truncation");
    assert_eq!(v["status"], "fail", "{v}");
    let short = v["short"].as_str().unwrap();
    let numbers: Vec<u64> = short
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // "N of M cut streams answered ok, P% (bound 0%)": nearly every cut
    // reached the client as an answer.
    assert!(
        numbers.len() >= 2 && numbers[1] >= 5 && numbers[0] * 10 >= numbers[1] * 8,
        "{short}"
    );
    // And nothing looked lost: the client saw answers.
    assert_eq!(check(&report, "no_silent_loss")["status"], "pass");
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// A loopback address nothing listens on now.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Starts the relay: every request is sent on to `upstream` (same path,
/// headers and body) and its answer streamed back, whole events only;
/// when the upstream's body breaks, the relay sends `data: [DONE]` and
/// ends its own stream as if the answer were complete.
async fn relay(upstream: String) -> SocketAddr {
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
                    forward(client.clone(), upstream.clone(), req)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

type RelayBody =
    StreamBody<futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

async fn forward(
    client: reqwest::Client,
    upstream: String,
    req: Request<Incoming>,
) -> Result<Response<RelayBody>, Infallible> {
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
    let answer = match call.body(body).send().await {
        Ok(a) => a,
        Err(_) => {
            let empty = futures_util::stream::empty().boxed();
            let mut r = Response::new(StreamBody::new(empty));
            *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            return Ok(r);
        }
    };
    let status = answer.status();
    let content_type = answer.headers().get("content-type").cloned();
    let events = answer.bytes_stream();
    // Whole events (up to the last blank line) go on as they come; at a
    // break the partial event is dropped and a clean end is made up.
    let frames = futures_util::stream::unfold(
        (events, Vec::<u8>::new(), false),
        |(mut events, mut buf, ended)| async move {
            if ended {
                return None;
            }
            loop {
                match events.next().await {
                    Some(Ok(chunk)) => {
                        buf.extend_from_slice(&chunk);
                        if let Some(end) = buf.windows(2).rposition(|w| w == b"\n\n") {
                            let whole: Vec<u8> = buf.drain(..end + 2).collect();
                            let frame = Ok(Frame::data(Bytes::from(whole)));
                            return Some((frame, (events, buf, false)));
                        }
                    }
                    Some(Err(_)) => {
                        let done = Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n")));
                        return Some((done, (events, Vec::new(), true)));
                    }
                    None => {
                        let rest = Ok(Frame::data(Bytes::from(std::mem::take(&mut buf))));
                        return Some((rest, (events, Vec::new(), true)));
                    }
                }
            }
        },
    );
    let mut r = Response::new(StreamBody::new(frames.boxed()));
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, ct);
    }
    Ok(r)
}
