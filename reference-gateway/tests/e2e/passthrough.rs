//! What passes through untouched: the request id header, the prompt, both
//! APIs, and streams as they arrive.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reference_gateway::Mode;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_prompts_and_both_apis_pass_through() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"1ms\" }\n[completion_tokens]\nfixed = 4\n")
                .await;
        let gw = gateway(config(Mode::Bounded, &provider)).await;
        let client = client();
        // The id only in the header (no marker in the prompt): the provider
        // can know it only if the gateway passed the header on.
        let prompt = "y".repeat(400);
        let body = serde_json::json!({
            "model": "gpt-4o-mini", "max_tokens": 4,
            "messages": [{"role": "user", "content": prompt}],
        });
        let r = client
            .post(format!("{}/v1/chat/completions", gw.base_url()))
            .header("x-request-id", "hdr-only")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");

        let r = client
            .post(format!("{}/v1/messages", gw.base_url()))
            .header("x-request-id", "anthropic-1")
            .header("anthropic-version", "2023-06-01")
            .json(&serde_json::json!({
                "model": "claude-3-5-haiku-latest", "max_tokens": 4,
                "messages": [{"role": "user", "content": "[rehearse:id=anthropic-1] hi"}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["type"], "message");

        let r = client
            .get(format!("{}/v1/models", gw.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        let records = provider.records();
        let openai = records
            .iter()
            .find(|r| r.id == "hdr-only")
            .expect("id passed on");
        assert_eq!(openai.prompt_tokens as u64, wire::estimate_tokens(400));
        assert!(records.iter().any(|r| r.id == "anthropic-1"));

        let text = client
            .get(format!("{}/metrics", gw.base_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for name in [
            "gateway_queue_wait_seconds_count 2",
            "gateway_upstream_seconds_count 2",
            "gateway_request_seconds_count 2",
            "gateway_in_flight 0",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
        assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 1e6);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// Tokens reach the caller as the provider sends them, not at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_pass_through_as_they_arrive() {
    bounded_in_time(async {
        let provider = provider(
            "[latency]\nttft = { fixed = \"10ms\" }\nper_token = { fixed = \"60ms\" }\n[completion_tokens]\nfixed = 15\n",
        )
        .await;
        for mode in [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd] {
            let gw = gateway(config(mode, &provider)).await;
            let client = client();
            let start = Instant::now();
            let resp = client
                .post(format!("{}/v1/chat/completions", gw.base_url()))
                .body(chat_body(&format!("s-{mode}"), 40, 15, true))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let mut stream = resp.bytes_stream();
            let mut arrivals = Vec::new();
            let mut all = Vec::new();
            while let Some(chunk) = stream.next().await {
                arrivals.push(start.elapsed());
                all.extend_from_slice(&chunk.unwrap());
            }
            let text = String::from_utf8(all).unwrap();
            assert!(text.trim_end().ends_with("data: [DONE]"), "{mode}: {text}");
            // 15 tokens 60 ms apart: the first arrives ~0.8 s before the last.
            let spread = *arrivals.last().unwrap() - arrivals[0];
            assert!(spread > Duration::from_millis(400), "{mode}: not streamed: {arrivals:?}");
            until(|| gw.snapshot().in_flight == 0).await;
            assert_eq!(gw.snapshot().cancelled_upstream, 0, "{mode}: a completed stream is not a hang-up");
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}
