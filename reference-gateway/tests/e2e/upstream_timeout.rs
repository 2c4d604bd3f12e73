//! `upstream_timeout`, in every mode: past it, the upstream call is
//! cancelled (the provider records the hang-up) and the caller gets 504
//! `upstream_timeout` with no Retry-After; an answer already begun is cut.

use std::time::Duration;

use futures_util::StreamExt;
use reference_gateway::Mode;

use crate::support::*;

const ALL_MODES: [Mode; 5] = [
    Mode::Naive,
    Mode::Bounded,
    Mode::Deadline,
    Mode::Aimd,
    Mode::Timeout,
];

/// The provider takes 3 s to answer; the gateway's upstream timeout is
/// 300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_upstream_timeout_the_call_is_cancelled_and_the_caller_gets_504() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"3s\" }\n[completion_tokens]\nfixed = 3\n")
                .await;
        for mode in ALL_MODES {
            let mut cfg = config(mode, &provider);
            cfg.upstream_timeout = Some(Duration::from_millis(300));
            let gw = gateway(cfg).await;
            let client = client();
            let base = gw.base_url();
            let id = format!("{mode}-slow");
            let a = chat_as(&client, &base, None, &id).await;
            assert_row(&a, 504, "upstream_timeout", false);
            assert!(
                a.elapsed >= Duration::from_millis(300) && a.elapsed < Duration::from_secs(2),
                "{mode}: {a:?}"
            );
            // The provider saw the call hang up, long before its answer.
            until(|| provider.records().iter().any(|r| r.id == id)).await;
            let record = provider.records().into_iter().find(|r| r.id == id).unwrap();
            let hung_up = record
                .hung_up_us
                .unwrap_or_else(|| panic!("{mode}: no hang-up recorded: {record:?}"));
            assert!(hung_up - record.received_us < 2_000_000, "{record:?}");
            until(|| gw.snapshot().in_flight == 0).await;
            let snap = gw.snapshot();
            assert_eq!(snap.upstream_timeouts, 1, "{mode}: {snap:?}");
            assert_eq!(
                snap.cancelled_upstream, 0,
                "a timeout, not a hang-up: {snap:?}"
            );
            assert_eq!(
                metric(&client, &base, "gateway_upstream_timeouts_total").await,
                Some(1.0)
            );
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}

/// A stream that outlives the timeout: its head (200) has gone, so the
/// stream is cut where it stands, the upstream call cancelled, and the
/// timeout counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_still_running_at_the_upstream_timeout_is_cut() {
    bounded_in_time(async {
        let provider = provider(
            "[latency]\nttft = { fixed = \"10ms\" }\nper_token = { fixed = \"100ms\" }\n[completion_tokens]\nfixed = 40\n",
        )
        .await;
        for mode in ALL_MODES {
            let mut cfg = config(mode, &provider);
            cfg.upstream_timeout = Some(Duration::from_millis(500));
            let gw = gateway(cfg).await;
            let client = client();
            let id = format!("{mode}-stream");
            let resp = client
                .post(format!("{}/v1/chat/completions", gw.base_url()))
                .header("x-request-id", &id)
                .body(chat_body(&id, 40, 40, true))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let mut stream = resp.bytes_stream();
            let mut text = Vec::new();
            let mut cut = false;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(c) => text.extend_from_slice(&c),
                    Err(_) => {
                        cut = true;
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&text);
            assert!(cut, "{mode}: the stream ended cleanly: {text}");
            assert!(!text.contains("[DONE]"), "{mode}: {text}");
            assert!(text.starts_with("data: "), "{mode}: some tokens came first: {text}");
            until(|| {
                provider
                    .records()
                    .iter()
                    .any(|r| r.id == id && r.hung_up_us.is_some())
            })
            .await;
            until(|| gw.snapshot().in_flight == 0).await;
            assert_eq!(gw.snapshot().upstream_timeouts, 1, "{mode}");
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}
