//! The faults given on purpose (`--fault`), each shown doing what it says
//! against the real fake provider, beside the same gateway without it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use reference_gateway::{resident_memory_bytes, Fault, GatewayConfig, Mode};

use crate::support::*;

/// A stream of 20 tokens, one every 50 ms: its last token leaves the
/// provider about 1 s after its first.
const STREAMING: &str = r#"
[latency]
ttft = { fixed = "20ms" }
per_token = { fixed = "50ms" }
[completion_tokens]
fixed = 20
"#;

/// Room when comparing our reading of the system clock with the
/// provider's record of its last byte: under half the 50 ms between two
/// tokens, so "after the provider's end" still means after its last token.
const SAME_CLOCK_US: u64 = 20_000;

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn with(mut config: GatewayConfig, faults: &[&str]) -> GatewayConfig {
    config.fault = faults.iter().map(|f| f.parse().unwrap()).collect();
    config
}

/// What a streaming caller saw, on the provider's clock (Unix µs).
#[derive(Debug)]
struct Streamed {
    head_us: u64,
    first_byte_us: u64,
    reads: usize,
    body: String,
    content_type: String,
    /// The provider's end of the same call.
    provider_finished_us: u64,
}

async fn stream_once(
    gw: &reference_gateway::GatewayHandle,
    provider: &fake_provider::ProviderHandle,
    id: &str,
) -> Streamed {
    let resp = client()
        .post(format!("{}/v1/chat/completions", gw.base_url()))
        .header("x-request-id", id)
        .body(chat_body(id, 40, 20, true))
        .send()
        .await
        .unwrap();
    let head_us = unix_us();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    let mut stream = resp.bytes_stream();
    let mut first_byte_us = None;
    let mut reads = 0;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if chunk.is_empty() {
            continue;
        }
        first_byte_us.get_or_insert_with(unix_us);
        reads += 1;
        body.extend_from_slice(&chunk);
    }
    until(|| provider.records().iter().any(|r| r.id == id)).await;
    let record = provider.records().into_iter().find(|r| r.id == id).unwrap();
    assert_eq!(record.hung_up_us, None, "{record:?}");
    Streamed {
        head_us,
        first_byte_us: first_byte_us.expect("a body"),
        reads,
        body: String::from_utf8(body).unwrap(),
        content_type,
        provider_finished_us: record.finished_us.unwrap(),
    }
}

/// `buffer-stream`: nothing reaches the caller, head included, before the
/// provider's last token has left; then the whole stream in one piece,
/// with the upstream's status and content type. Without the fault the
/// first byte comes most of a second before the last token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_stream_sends_nothing_before_the_last_token() {
    bounded_in_time(async {
        let provider = provider(STREAMING).await;
        let plain = gateway(config(Mode::Bounded, &provider)).await;
        let s = stream_once(&plain, &provider, "plain").await;
        assert!(
            s.first_byte_us + 500_000 < s.provider_finished_us && s.reads >= 10,
            "streamed as it came: {s:?}"
        );
        let buffered = gateway(with(config(Mode::Bounded, &provider), &["buffer-stream"])).await;
        let s = stream_once(&buffered, &provider, "buffered").await;
        // The provider's clock and ours are the same system clock; 20 ms of
        // room, under half the gap between two tokens.
        assert!(
            s.head_us + SAME_CLOCK_US >= s.provider_finished_us,
            "the head waits for the last token: {s:?}"
        );
        assert!(
            s.first_byte_us + SAME_CLOCK_US >= s.provider_finished_us,
            "{s:?}"
        );
        assert_eq!(s.content_type, "text/event-stream", "{s:?}");
        assert!(
            s.body.contains("data: [DONE]") && s.body.matches("data: ").count() >= 20,
            "{s:?}"
        );
        plain.shutdown().await;
        buffered.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// `buffer-body`: the head comes at once, the body only once the provider
/// has sent its last token, in one piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_body_sends_the_head_at_once_and_the_body_whole_at_the_end() {
    bounded_in_time(async {
        let provider = provider(STREAMING).await;
        let gw = gateway(with(config(Mode::Aimd, &provider), &["buffer-body"])).await;
        let s = stream_once(&gw, &provider, "held").await;
        assert!(
            s.head_us + 500_000 < s.provider_finished_us,
            "the head at once: {s:?}"
        );
        assert!(
            s.first_byte_us + SAME_CLOCK_US >= s.provider_finished_us,
            "the body at the end: {s:?}"
        );
        // One write of the whole body; the transport may split it once.
        assert!(s.reads <= 2, "{s:?}");
        assert!(s.body.contains("data: [DONE]"), "{s:?}");
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// A provider answering in 5 ms, with a pinned 2 s "brownout" phase.
const BROWNOUT: &str = r#"
[latency]
ttft = { fixed = "5ms" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 3
[[timeline]]
name = "brownout"
from = "1h"
until = "2h"
latency = { ttft = { fixed = "2s" } }
"#;

/// A bounded gateway of 2 slots and no queue, its upstream timeout 200 ms.
fn two_slots(provider: &fake_provider::ProviderHandle, faults: &[&str]) -> GatewayConfig {
    let mut cfg = config(Mode::Bounded, provider);
    cfg.bounded.concurrency = 2;
    cfg.bounded.queue = 0;
    cfg.upstream_timeout = Some(Duration::from_millis(200));
    with(cfg, faults)
}

/// Two calls time out in a brownout, then the provider is healthy again:
/// with `leak-slots` both slots are gone and every request is refused at
/// once, the provider never called; without it every request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_slots_refuses_everything_on_a_healthy_provider_after_timeouts() {
    bounded_in_time(async {
        let provider = provider(BROWNOUT).await;
        let client = client();
        for leaking in [false, true] {
            let faults: &[&str] = if leaking { &["leak-slots"] } else { &[] };
            let gw = gateway(two_slots(&provider, faults)).await;
            let base = gw.base_url();
            provider.set_phase(Some("brownout")).unwrap();
            let slow: Vec<_> = (0..2)
                .map(|i| {
                    spawn_chat(
                        &client,
                        &base,
                        &format!("{leaking}-slow-{i}"),
                        chat_body("s", 40, 3, false),
                        None,
                    )
                })
                .collect();
            for t in slow {
                assert_eq!(t.await.unwrap().unwrap().status, 504);
            }
            provider.set_phase(None).unwrap();
            let called = provider.stats().received;
            let mut statuses = Vec::new();
            for i in 0..5 {
                let id = format!("{leaking}-after-{i}");
                statuses.push(chat_as(&client, &base, None, &id).await.status);
            }
            if leaking {
                assert_eq!(statuses, [429; 5], "every slot leaked");
                assert_eq!(
                    provider.stats().received,
                    called,
                    "the provider is never called"
                );
                assert_eq!(
                    metric(&client, &base, "gateway_fault_leaked_slots_total").await,
                    Some(2.0)
                );
            } else {
                assert_eq!(statuses, [200; 5], "the slots came back");
                assert_eq!(
                    metric(&client, &base, "gateway_fault_leaked_slots_total").await,
                    None
                );
            }
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}

/// `leak-slots=1`, and callers hanging up while their calls run: one slot
/// leaks, no more; the gateway goes on serving with the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_slots_n_leaks_at_most_n_and_a_hang_up_leaks_too() {
    bounded_in_time(async {
        let provider = provider(BROWNOUT).await;
        let mut cfg = two_slots(&provider, &["leak-slots=1"]);
        cfg.upstream_timeout = None;
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        provider.set_phase(Some("brownout")).unwrap();
        for i in 0..2 {
            let id = format!("leaves-{i}");
            let gone = chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 3, false),
                Some(Duration::from_millis(150)),
                None,
            )
            .await;
            assert!(gone.unwrap_err().is_timeout());
        }
        until(|| gw.snapshot().cancelled_upstream == 2).await;
        provider.set_phase(None).unwrap();
        assert_eq!(
            metric(&client, &base, "gateway_fault_leaked_slots_total").await,
            Some(1.0)
        );
        // One slot is left: one call at a time is served, two at once are
        // one too many.
        assert_eq!(chat_as(&client, &base, None, "one").await.status, 200);
        provider.set_phase(Some("brownout")).unwrap();
        let busy = spawn_chat(
            &client,
            &base,
            "busy",
            chat_body("busy", 40, 3, false),
            None,
        );
        until(|| gw.snapshot().in_flight == 1).await;
        assert_eq!(chat_as(&client, &base, None, "second").await.status, 429);
        provider.set_phase(None).unwrap();
        assert_eq!(busy.await.unwrap().unwrap().status, 200);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// `retry-storm`: against a provider that refuses every call with 429 (its
/// quota spent, a Retry-After of most of a minute) or 503, one request
/// makes 6 provider calls at once, no wait between them; a 500 is not
/// retried; without the fault, one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_storm_multiplies_the_calls_on_a_refusing_provider() {
    bounded_in_time(async {
        let client = client();
        let spent = "[quota]\nrequests_per_minute = 1\n";
        let failing = |status: &str| format!("[faults]\nerrors = {{ \"{status}\" = 1.0 }}\n");
        for (refusing, status, faults, calls) in [
            (spent.to_string(), 429, &["retry-storm"][..], 6),
            (failing("503"), 503, &["retry-storm"][..], 6),
            (failing("500"), 500, &["retry-storm"][..], 1),
            (spent.to_string(), 429, &[][..], 1),
        ] {
            let provider = provider(&refusing).await;
            if status == 429 {
                // The minute's one request, straight to the provider.
                let a = chat_as(&client, &provider.base_url(), None, "spend").await;
                assert_eq!(a.status, 200);
            }
            let gw = gateway(with(config(Mode::Naive, &provider), faults)).await;
            let start = Instant::now();
            let a = chat_as(&client, &gw.base_url(), None, "storm").await;
            assert_eq!(a.status, status, "{a:?}");
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "no wait: {:?}",
                start.elapsed()
            );
            let storm = |p: &fake_provider::ProviderHandle| {
                p.records().iter().filter(|r| r.id == "storm").count()
            };
            until(|| storm(&provider) == calls).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(storm(&provider), calls, "{status} {faults:?}");
            assert!(
                provider
                    .records()
                    .iter()
                    .all(|r| r.id != "storm" || r.status == status),
                "every call refused"
            );
            gw.shutdown().await;
            provider.shutdown().await;
        }
    })
    .await;
}

/// `no-cancel` on a bounded gateway of one slot: two callers leave, one
/// while its call runs and one while it waits in the queue; both calls run
/// to their end at the provider (no hang-up recorded) for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cancel_runs_queued_jobs_and_calls_of_callers_who_left() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"800ms\" }\n[completion_tokens]\nfixed = 5\n")
                .await;
        let mut cfg = with(config(Mode::Bounded, &provider), &["no-cancel"]);
        cfg.bounded.concurrency = 1;
        cfg.bounded.queue = 4;
        cfg.bounded.wait_budget = Duration::from_secs(10);
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        let leaving: Vec<_> = ["running", "queued"]
            .iter()
            .map(|id| {
                spawn_chat(
                    &client,
                    &base,
                    id,
                    chat_body(id, 40, 5, false),
                    Some(Duration::from_millis(300)),
                )
            })
            .collect();
        for t in leaving {
            assert!(t.await.unwrap().unwrap_err().is_timeout());
        }
        until(|| provider.records().len() == 2).await;
        for r in provider.records() {
            assert_eq!(r.hung_up_us, None, "run to its end: {r:?}");
            assert_eq!((r.status, r.completion_tokens), (200, 5), "{r:?}");
        }
        until(|| gw.snapshot().in_flight == 0).await;
        let snap = gw.snapshot();
        assert_eq!(
            (snap.cancelled_queued, snap.cancelled_upstream),
            (0, 0),
            "{snap:?}"
        );
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// `hoard`: every request body is kept: the count of bytes held grows
/// with the requests and stays when they are done, and so does the
/// process's resident memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hoard_keeps_every_request_body() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"0ms\" }\n[completion_tokens]\nfixed = 1\n")
                .await;
        let gw = gateway(with(config(Mode::Bounded, &provider), &["hoard"])).await;
        let client = client();
        let base = gw.base_url();
        const BODY: usize = 512 * 1024;
        const N: usize = 40;
        let before = resident_memory_bytes().expect("RSS on this platform");
        let mut sent = 0u64;
        for i in 0..N {
            let id = format!("h-{i}");
            let body = chat_body(&id, BODY, 1, false);
            sent += body.len() as u64;
            let a = chat(&client, &base, &id, body, None, None).await.unwrap();
            assert_eq!(a.status, 200, "{a:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = metric(&client, &base, "gateway_fault_hoarded_bytes").await;
        assert_eq!(held, Some(sent as f64));
        let grown = resident_memory_bytes().unwrap().saturating_sub(before);
        assert!(
            grown >= sent * 3 / 4,
            "RSS grew {grown} bytes for {sent} hoarded"
        );
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// `refuse-408`: every request is answered 408 at once, a JSON error, and
/// the provider never sees a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_408_answers_at_once_without_calling_the_provider() {
    bounded_in_time(async {
        let provider = provider(STREAMING).await;
        let gw = gateway(with(config(Mode::Bounded, &provider), &["refuse-408"])).await;
        let client = client();
        for i in 0..5 {
            let a = chat_as(&client, &gw.base_url(), None, &format!("r-{i}")).await;
            assert_eq!(a.status, 408, "{a:?}");
            assert_eq!(a.error_code().as_deref(), Some("request_timeout"), "{a:?}");
            assert_eq!(a.header("x-gateway-reason"), None, "not a row of the table");
            assert!(a.elapsed < Duration::from_millis(500), "{a:?}");
        }
        assert_eq!(provider.stats().received, 0);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// `refuse-500-after=300ms`: every request is held 300 ms, then answered
/// 500, the provider never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_500_after_holds_then_answers_500_without_calling_the_provider() {
    bounded_in_time(async {
        let provider = provider(STREAMING).await;
        let mut cfg = config(Mode::Deadline, &provider);
        cfg.fault = vec![Fault::Refuse500After(Duration::from_millis(300))];
        let gw = gateway(cfg).await;
        let client = client();
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                spawn_chat(
                    &client,
                    &gw.base_url(),
                    &format!("f-{i}"),
                    chat_body("f", 40, 3, false),
                    None,
                )
            })
            .collect();
        for t in tasks {
            let a = t.await.unwrap().unwrap();
            assert_eq!(a.status, 500, "{a:?}");
            assert!(
                a.elapsed >= Duration::from_millis(300) && a.elapsed < Duration::from_secs(2),
                "{a:?}"
            );
        }
        assert_eq!(provider.stats().received, 0);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
