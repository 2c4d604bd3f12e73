//! The refusal table, row by row, in each mode it applies to: the status,
//! `x-gateway-reason`, the body's `code`, and Retry-After or none. (The
//! tenant's row is in `tenants.rs`, the upstream timeout's in
//! `upstream_timeout.rs`.)

use std::time::{Duration, Instant};

use reference_gateway::{GatewayConfig, Mode};

use crate::support::*;

const ALL_MODES: [Mode; 4] = [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd];

/// One upstream call at a time in bounded and aimd, with `queue` places.
fn one_slot(mut cfg: GatewayConfig, queue: usize, wait_budget: Duration) -> GatewayConfig {
    cfg.bounded.concurrency = 1;
    cfg.bounded.queue = queue;
    cfg.bounded.wait_budget = wait_budget;
    cfg.aimd.initial = 1;
    cfg.aimd.floor = 1;
    cfg.aimd.ceiling = 1;
    cfg.aimd.queue = queue;
    cfg.aimd.wait_budget = wait_budget;
    cfg
}

/// Queue full, at admission: 429 by default, 503 when `queue_full_status`
/// says so; Retry-After either way (bounded, aimd: the modes with a queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_full_is_429_or_the_status_configured() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"2s\" }\n[completion_tokens]\nfixed = 3\n")
                .await;
        for mode in [Mode::Bounded, Mode::Aimd] {
            for status in [429, 503] {
                let mut cfg = one_slot(config(mode, &provider), 0, Duration::from_secs(10));
                cfg.queue_full_status = status;
                let gw = gateway(cfg).await;
                let client = client();
                let base = gw.base_url();
                let held = spawn_chat(
                    &client,
                    &base,
                    "held",
                    chat_body("held", 40, 3, false),
                    None,
                );
                until(|| gw.snapshot().in_flight == 1).await;
                let a = chat_as(&client, &base, None, &format!("{mode}-{status}")).await;
                assert_row(&a, status, "queue_full", true);
                assert!(a.elapsed < Duration::from_secs(1), "at once: {a:?}");
                assert_eq!(
                    metric(&client, &base, "gateway_shed_total{reason=\"queue_full\"}").await,
                    Some(1.0)
                );
                // The caller in service hangs up; its call is cancelled.
                held.abort();
                until(|| gw.snapshot().in_flight == 0).await;
                gw.shutdown().await;
            }
        }
        provider.shutdown().await;
    })
    .await;
}

/// Would miss its deadline, at admission (deadline): 503 with Retry-After,
/// even on an idle gateway when the caller's patience is shorter than the
/// expected service time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_cannot_be_met_is_503() {
    bounded_in_time(async {
        let provider = provider("[latency]\nttft = { fixed = \"1ms\" }\n").await;
        let gw = gateway(config(Mode::Deadline, &provider)).await;
        let client = client();
        let base = gw.base_url();
        let a = chat(
            &client,
            &base,
            "hurried",
            chat_body("hurried", 40, 40, false),
            None,
            Some(1),
        )
        .await
        .unwrap();
        assert_row(&a, 503, "would_miss_deadline", true);
        assert_eq!(gw.snapshot().shed, 1);
        assert!(provider.records().is_empty(), "never sent");
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// Waited past its budget, at dequeue (bounded, aimd): 503 with
/// Retry-After, the provider never called for it, counted as a stale drop
/// and not as a shed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_wait_budget_is_503_at_dequeue() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"400ms\" }\n[completion_tokens]\nfixed = 3\n")
                .await;
        for mode in [Mode::Bounded, Mode::Aimd] {
            let cfg = one_slot(config(mode, &provider), 1, Duration::from_millis(100));
            let gw = gateway(cfg).await;
            let client = client();
            let base = gw.base_url();
            let first = format!("{mode}-first");
            let served = spawn_chat(
                &client,
                &base,
                &first,
                chat_body(&first, 40, 3, false),
                None,
            );
            until(|| gw.snapshot().in_flight == 1).await;
            let id = format!("{mode}-stale");
            let a = chat_as(&client, &base, None, &id).await;
            assert_row(&a, 503, "wait_expired", true);
            assert_eq!(served.await.unwrap().unwrap().status, 200);
            let snap = gw.snapshot();
            assert_eq!((snap.stale_drops, snap.shed), (1, 0), "{snap:?}");
            assert!(provider.records().iter().all(|r| r.id != id));
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}

/// Past its deadline at dequeue (deadline, LIFO): 100 tokens/s. The first
/// job (100 tokens) is dispatched at once and holds the pacer 1 s. A
/// (50 tokens, patience 1.8 s) is admitted: (100 + 50)/100 + 0.1 = 1.6 s.
/// B (100 tokens) arrives after it and, LIFO, is dispatched first at 1 s,
/// holding the pacer until 2 s: by then A could not finish before 2.1 s,
/// past its 1.8 s. A is dropped unsent: 503 `wait_expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_drops_at_dequeue_what_can_no_longer_make_it() {
    bounded_in_time(async {
        let provider = provider("[latency]\nttft = { fixed = \"1ms\" }\n").await;
        let mut cfg = config(Mode::Deadline, &provider);
        cfg.deadline.tokens_per_minute = 100.0 * 60.0;
        cfg.deadline.expected_service = Duration::from_millis(100);
        cfg.deadline.order = reference_gateway::Order::Lifo;
        cfg.deadline.default_deadline = Duration::from_secs(60);
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        let first = chat(
            &client,
            &base,
            "first",
            chat_body("first", 40, 90, false),
            None,
            None,
        )
        .await
        .unwrap();
        assert_eq!(first.status, 200);
        let (c, b) = (client.clone(), base.clone());
        let a = tokio::spawn(async move {
            chat(&c, &b, "a", chat_body("a", 40, 40, false), None, Some(1800)).await
        });
        until(|| gw.snapshot().queue_depth == 1).await;
        let b = spawn_chat(&client, &base, "b", chat_body("b", 40, 90, false), None);
        until(|| gw.snapshot().queue_depth == 2).await;
        assert_eq!(b.await.unwrap().unwrap().status, 200);
        let a = a.await.unwrap().unwrap();
        assert_row(&a, 503, "wait_expired", true);
        assert_eq!(gw.snapshot().stale_drops, 1);
        assert!(provider.records().iter().all(|r| r.id != "a"));
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// The provider's own refusals go back as the provider sent them (status,
/// body, Retry-After), marked `upstream_refused`, in every mode: a 429
/// from its quota (with its Retry-After), a 503 and an Anthropic 529.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_refusals_pass_through_marked_as_the_providers() {
    bounded_in_time(async {
        for mode in ALL_MODES {
            // 60 tokens a minute: one 50-token request, then 429.
            let quota = provider(
                "[latency]\nttft = { fixed = \"1ms\" }\n[quota]\ntokens_per_minute = 60\n",
            )
            .await;
            let gw = gateway(config(mode, &quota)).await;
            let client = client();
            let base = gw.base_url();
            assert_eq!(chat_as(&client, &base, None, "fits").await.status, 200);
            let a = chat_as(&client, &base, None, &format!("{mode}-quota")).await;
            assert_row(&a, 429, "upstream_refused", true);
            let provider_says: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(
                provider_says["error"]["code"], "rate_limit_exceeded",
                "the provider's body"
            );
            assert!(
                a.retry_after_ms.unwrap() > 1_000,
                "the provider's wait: {a:?}"
            );
            assert!(a.header("x-ratelimit-remaining-tokens").is_some(), "{a:?}");
            gw.shutdown().await;
            quota.shutdown().await;

            let failing = provider(
                "[latency]\nttft = { fixed = \"1ms\" }\n[faults]\nerrors = { \"503\" = 1.0 }\n",
            )
            .await;
            let gw = gateway(config(mode, &failing)).await;
            let a = chat_as(&client, &gw.base_url(), None, &format!("{mode}-503")).await;
            assert_row(&a, 503, "upstream_refused", false);
            gw.shutdown().await;
            failing.shutdown().await;

            let overloaded = provider(
                "[latency]\nttft = { fixed = \"1ms\" }\n[faults]\nerrors = { \"529\" = 1.0 }\n",
            )
            .await;
            let gw = gateway(config(mode, &overloaded)).await;
            let start = Instant::now();
            let req = client
                .post(format!("{}/v1/messages", gw.base_url()))
                .header("anthropic-version", "2023-06-01")
                .json(&serde_json::json!({
                    "model": "claude-3-5-haiku-latest", "max_tokens": 4,
                    "messages": [{"role": "user", "content": "hi"}],
                }));
            let a = answer("529", start, req).await.unwrap();
            assert_row(&a, 529, "upstream_refused", false);
            assert_eq!(
                metric(&client, &gw.base_url(), "gateway_upstream_refused_total").await,
                Some(1.0)
            );
            assert_eq!(gw.snapshot().upstream_refused, 1);
            gw.shutdown().await;
            overloaded.shutdown().await;
        }
    })
    .await;
}
