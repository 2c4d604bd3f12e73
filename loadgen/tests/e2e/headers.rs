//! The scenario's headers, path and auth as they reach the target: a
//! server that keeps every request head it is sent, refusing each
//! person's first attempt so that `{attempt}` is seen at 1 and 2.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loadgen::{LoadOptions, LoadPlan, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use wire::ClientOutcome;

use crate::read_client_records;

/// The request heads received, in order; the first of each request id
/// answered 429 with `Retry-After: 0`, the rest 200 with a Responses body.
async fn keeping_server() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let kept = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (kept, seen) = (kept.clone(), seen.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + 4 + len);
                    let id = head
                        .lines()
                        .find_map(|l| l.strip_prefix("x-request-id: "))
                        .unwrap_or("")
                        .to_string();
                    let first = {
                        let mut seen = seen.lock().unwrap();
                        let n = seen.entry(id).or_default();
                        *n += 1;
                        *n == 1
                    };
                    kept.lock().unwrap().push(head);
                    let answer = if first {
                        "HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\ncontent-length: 0\r\n\r\n"
                            .to_string()
                    } else {
                        let body = r#"{"object":"response","output":[],"usage":{"input_tokens":1,"output_tokens":3}}"#;
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_paths_and_keys_reach_the_target_filled_in() {
    let (addr, heads) = keeping_server().await;
    let scenario = r#"
[load]
send_lag_p99_max = "100ms"
[[load.phases]]
duration = "1s"
rate = 8
[load.request]
api = "responses"
auth = "api-key"
path = "/openai/deployments/gpt-4o-mini/responses?api-version=2025-04-01-preview"
headers = { "X-App" = "app-{tenant}", "x-trace" = "{request_id}/{attempt}", "x-portkey-config" = '{"retry":0}' }
[load.retry]
policy = "retry_after"
max_attempts = 2
jitter = 0.0
[[load.tenants]]
name = "shop"
api_key = "k-shop"
[[load.tenants]]
name = "batch"
api_key = "k-batch"
request = { auth = "bearer", headers = { "x-app" = "nightly" } }
"#;
    let plan = LoadPlan::from_scenario_str(scenario, "s.toml", std::path::Path::new(".")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = Target::parse(&format!("http://{addr}/gw?team=a")).unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        loadgen::run(
            &plan,
            &target,
            &LoadOptions::new(out.path()),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the run ends by itself")
    .expect("the run succeeds");
    let client = read_client_records(&out.path().join(wire::files::CLIENT_RECORDS));
    let ok: Vec<_> = client
        .iter()
        .filter(|c| c.outcome == ClientOutcome::Ok)
        .collect();
    assert_eq!(ok.len(), 8, "{}", report.table());
    assert!(ok.iter().all(|c| c.attempt == 2 && c.tokens == 3), "{ok:?}");

    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 16);
    for head in &heads {
        let line = head.lines().next().unwrap();
        assert_eq!(
            line,
            "POST /gw/openai/deployments/gpt-4o-mini/responses?api-version=2025-04-01-preview&team=a HTTP/1.1"
        );
        let get = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap_or_else(|| panic!("no {name} in {head}"))
        };
        let id = get("x-request-id");
        let tenant = client.iter().find(|c| c.id == id).unwrap().tenant.clone();
        match tenant.as_deref() {
            Some("shop") => {
                assert_eq!(get("api-key"), "k-shop");
                assert_eq!(get("x-app"), "app-shop");
                assert!(!head.contains("authorization"), "{head}");
            }
            Some("batch") => {
                assert_eq!(get("authorization"), "Bearer k-batch");
                assert_eq!(get("x-app"), "nightly");
            }
            other => panic!("tenant {other:?}"),
        }
        assert!(get("x-trace").starts_with(&format!("{id}/")));
        assert_eq!(get("x-portkey-config"), r#"{"retry":0}"#);
    }
    for id in ok.iter().map(|c| &c.id) {
        let traces: Vec<_> = heads
            .iter()
            .filter_map(|h| h.lines().find_map(|l| l.strip_prefix("x-trace: ")))
            .filter(|t| t.starts_with(&format!("{id}/")))
            .collect();
        assert_eq!(traces, [format!("{id}/1"), format!("{id}/2")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_and_embeddings_are_counted_as_the_provider_recorded_them() {
    for (api, stream, tokens) in [("responses", 0.5, 6), ("embeddings", 0.0, 0)] {
        let r = crate::rehearse(
            &format!(
                "[load]\nsend_lag_p99_max = \"100ms\"\n[[load.phases]]\nduration = \"1s\"\nrate = 20\n\
                 [load.request]\napi = \"{api}\"\nstream = {stream}\nprompt_tokens = {{ fixed = 12 }}\n"
            ),
            "completion_tokens = { fixed = 6 }\n",
        )
        .await;
        assert_eq!(r.client.len(), 20);
        assert!(
            r.client
                .iter()
                .all(|c| c.outcome == ClientOutcome::Ok && c.tokens == tokens),
            "{api}: {:?}",
            r.report.outcomes
        );
        assert!(r
            .provider
            .iter()
            .all(|p| p.api.as_str() == api && p.prompt_tokens >= 12));
        assert_eq!(
            r.provider.iter().filter(|p| p.stream).count(),
            r.client.iter().filter(|c| c.stream).count()
        );
    }
}
