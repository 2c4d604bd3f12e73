//! In every mode but naive, a caller hanging up drops its queued job and
//! cancels its upstream call: the provider records the hang-up.

use std::time::Duration;

use futures_util::StreamExt;
use reference_gateway::Mode;

use crate::support::*;

async fn hang_ups_cancel_queued_jobs_and_upstream_calls(mode: Mode) {
    let provider = provider(
        r#"
[latency]
ttft = { fixed = "3s" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 5
"#,
    )
    .await;
    let mut cfg = config(mode, &provider);
    // Two calls at a time in each mode; the rest wait in the gateway.
    cfg.bounded.concurrency = 2;
    cfg.bounded.queue = 10;
    cfg.bounded.wait_budget = Duration::from_secs(30);
    cfg.aimd.initial = 2;
    cfg.aimd.floor = 2;
    cfg.aimd.queue = 10;
    cfg.aimd.wait_budget = Duration::from_secs(30);
    cfg.aimd.latency_target = Duration::from_secs(20);
    // deadline: 100 tokens/s and 100-token requests, one dispatch a second.
    cfg.deadline.tokens_per_minute = 6000.0;
    cfg.deadline.default_deadline = Duration::from_secs(30);
    cfg.deadline.expected_service = Duration::from_secs(3);
    let gw = gateway(cfg).await;
    let client = client();
    let base = gw.base_url();

    let mut tasks = Vec::new();
    for i in 0..4 {
        let id = format!("{mode}-{i}");
        tasks.push(spawn_chat(
            &client,
            &base,
            &id,
            chat_body(&id, 40, 90, false),
            Some(Duration::from_millis(600)),
        ));
    }
    for t in tasks {
        let err = t.await.unwrap().expect_err("every caller gives up");
        assert!(err.is_timeout(), "{err}");
    }
    // The calls that had reached the provider are cut short there...
    until(|| provider.stats().in_flight == 0 && !provider.records().is_empty()).await;
    let records = provider.records();
    assert!(!records.is_empty());
    for r in &records {
        let hung_up = r
            .hung_up_us
            .unwrap_or_else(|| panic!("{mode}: the provider saw no hang-up: {r:?}"));
        // ...long before their 3 s answer would have been ready.
        assert!(hung_up - r.received_us < 2_500_000, "{r:?}");
    }
    // ...and the queued ones never reach it.
    until(|| gw.snapshot().queue_depth == 0 && gw.snapshot().in_flight == 0).await;
    let snap = gw.snapshot();
    // Every caller left: each job was dropped from the queue or had its
    // call cancelled (a job granted a slot the instant its caller left may
    // be cancelled before its request reached the provider).
    assert_eq!(
        snap.cancelled_queued + snap.cancelled_upstream,
        4,
        "{snap:?}"
    );
    // Nothing is sent after the hang-ups settle. A job granted a slot the
    // very instant its caller left can still reach the provider a moment
    // after the first look above; it must then be a call the gateway
    // cancelled, and the provider must have seen it hang up too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    until(|| provider.stats().in_flight == 0).await;
    let records = provider.records();
    assert_eq!(
        provider.stats().received,
        records.len() as u64,
        "every call that reached the provider has ended"
    );
    for r in &records {
        assert!(
            r.hung_up_us.is_some(),
            "{mode}: the provider saw no hang-up: {r:?}"
        );
    }
    assert!(snap.cancelled_upstream >= records.len() as u64, "{snap:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        provider.stats().received,
        records.len() as u64,
        "nothing sent after the hang-ups"
    );
    assert_eq!(
        metric(&client, &base, "gateway_cancelled_queued_total").await,
        Some(snap.cancelled_queued as f64)
    );
    gw.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_cancels_on_hang_up() {
    bounded_in_time(hang_ups_cancel_queued_jobs_and_upstream_calls(
        Mode::Bounded,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_cancels_on_hang_up() {
    bounded_in_time(hang_ups_cancel_queued_jobs_and_upstream_calls(
        Mode::Deadline,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aimd_cancels_on_hang_up() {
    bounded_in_time(hang_ups_cancel_queued_jobs_and_upstream_calls(Mode::Aimd)).await;
}

/// A caller leaving in the middle of a stream closes the upstream stream too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_up_mid_stream_cuts_the_upstream_stream() {
    bounded_in_time(async {
        let provider = provider(
            r#"
[latency]
ttft = { fixed = "10ms" }
per_token = { fixed = "100ms" }
[completion_tokens]
fixed = 40
"#,
        )
        .await;
        let gw = gateway(config(Mode::Bounded, &provider)).await;
        let client = client();
        let resp = client
            .post(format!("{}/v1/chat/completions", gw.base_url()))
            .header("x-request-id", "stream-1")
            .body(chat_body("stream-1", 40, 40, true))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut stream = resp.bytes_stream();
        let first = stream.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "), "{first:?}");
        drop(stream);
        until(|| provider.records().len() == 1).await;
        let r = &provider.records()[0];
        assert_eq!(r.id, "stream-1");
        assert!(r.hung_up_us.is_some(), "{r:?}");
        until(|| gw.snapshot().in_flight == 0).await;
        assert_eq!(gw.snapshot().cancelled_upstream, 1);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
