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

/// Every call takes 3 s at the provider (20 tokens); four callers leave
/// after 1 s. Returns the provider's records of their calls, once every
/// call has ended there.
async fn callers_leave_after_one_second(mode: Mode, faults: &[&str]) -> Vec<wire::ProviderRecord> {
    let provider = provider(
        r#"
[latency]
ttft = { fixed = "2050ms" }
per_token = { fixed = "50ms" }
[completion_tokens]
fixed = 20
"#,
    )
    .await;
    let mut cfg = config(mode, &provider);
    // Room for all four at once in every mode: nothing waits but the call.
    cfg.bounded.concurrency = 8;
    cfg.aimd.latency_target = Duration::from_secs(20);
    cfg.upstream_timeout = Some(Duration::from_secs(20));
    cfg.fault = faults.iter().map(|f| f.parse().unwrap()).collect();
    let gw = gateway(cfg).await;
    let client = client();
    let base = gw.base_url();
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let id = format!("{mode}-leaves-{i}");
            spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 20, false),
                Some(Duration::from_secs(1)),
            )
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().unwrap_err().is_timeout(), "{mode}");
    }
    until(|| provider.records().len() == 4 && provider.stats().in_flight == 0).await;
    gw.shutdown().await;
    let records = provider.records();
    provider.shutdown().await;
    records
}

/// The modes that bound their work hang up on the provider within about
/// 1 s of the caller leaving (1 s after it sent, here): the provider
/// records the hang-up well before the call's 3 s, and no later than 2 s
/// after it received the call.
async fn hangs_up_on_the_provider_within_a_second(mode: Mode) {
    bounded_in_time(async {
        for r in callers_leave_after_one_second(mode, &[]).await {
            let hung_up = r
                .hung_up_us
                .unwrap_or_else(|| panic!("{mode}: the provider saw no hang-up: {r:?}"));
            let after = hung_up - r.received_us;
            assert!(
                (800_000..2_000_000).contains(&after),
                "{mode}: hung up {after} µs after the call arrived: {r:?}"
            );
            assert!(r.completion_tokens < 20, "{mode}: {r:?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_hangs_up_on_the_provider_when_its_caller_leaves() {
    hangs_up_on_the_provider_within_a_second(Mode::Bounded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_hangs_up_on_the_provider_when_its_caller_leaves() {
    hangs_up_on_the_provider_within_a_second(Mode::Deadline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aimd_hangs_up_on_the_provider_when_its_caller_leaves() {
    hangs_up_on_the_provider_within_a_second(Mode::Aimd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_hangs_up_on_the_provider_when_its_caller_leaves() {
    hangs_up_on_the_provider_within_a_second(Mode::Timeout).await;
}

/// `naive`, like the service it models, and any mode given the
/// `no-cancel` fault let every call run its 3 s to the end for nobody.
async fn lets_the_calls_of_callers_who_left_run(mode: Mode, faults: &[&str]) {
    bounded_in_time(async {
        for r in callers_leave_after_one_second(mode, faults).await {
            assert_eq!(r.hung_up_us, None, "{mode} {faults:?}: {r:?}");
            assert_eq!((r.status, r.completion_tokens), (200, 20), "{r:?}");
            let took = r.finished_us.unwrap() - r.received_us;
            assert!(took >= 2_900_000, "the whole 3 s: {r:?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_lets_the_calls_of_callers_who_left_run() {
    lets_the_calls_of_callers_who_left_run(Mode::Naive, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cancel_on_bounded_lets_the_calls_of_callers_who_left_run() {
    lets_the_calls_of_callers_who_left_run(Mode::Bounded, &["no-cancel"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cancel_on_timeout_lets_the_calls_of_callers_who_left_run() {
    lets_the_calls_of_callers_who_left_run(Mode::Timeout, &["no-cancel"]).await;
}
