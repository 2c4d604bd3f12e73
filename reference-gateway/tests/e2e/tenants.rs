//! Tenants: an entitlement per API key, enforced whatever the load (429
//! `tenant_limited` with the tenant's rate-limit headers), apart from load
//! shedding, which applies to every tenant.

use std::time::{Duration, Instant};

use reference_gateway::{GatewayConfig, Mode, TenantConfig};

use crate::support::*;

/// Every request of these tests costs 50 tokens (40 characters of prompt,
/// 10 tokens, and max_tokens 40).
fn with_tenants(mut cfg: GatewayConfig, entries: &[(&str, u64)]) -> GatewayConfig {
    for &(key, tokens_per_minute) in entries {
        cfg.tenants.insert(
            key.to_string(),
            TenantConfig {
                tokens_per_minute,
                requests_per_minute: None,
            },
        );
    }
    cfg
}

/// The number in header `name`.
fn remaining(a: &Answer, name: &str) -> u64 {
    a.header(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}: {a:?}"))
}

/// An idle gateway, in every mode: tenant A (60 tokens a minute) is served
/// once, then refused 429 `tenant_limited` with its remaining tokens and a
/// Retry-After from its bucket (40 tokens missing at 1 a second), while
/// tenant B, callers with no key and callers with an unknown key are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_entitlement_is_refused_on_an_idle_gateway() {
    bounded_in_time(async {
        let provider = provider("[latency]\nttft = { fixed = \"1ms\" }\n").await;
        for mode in [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd] {
            let cfg = with_tenants(config(mode, &provider), &[("key-a", 60), ("key-b", 60_000)]);
            let gw = gateway(cfg).await;
            let client = client();
            let base = gw.base_url();
            let a = chat_as(&client, &base, Some("key-a"), &format!("{mode}-a1")).await;
            assert_eq!(a.status, 200, "{a:?}");

            let snap = gw.snapshot();
            assert_eq!((snap.queue_depth, snap.in_flight), (0, 0), "idle: {snap:?}");
            let limited_id = format!("{mode}-a2");
            let a = chat_as(&client, &base, Some("key-a"), &limited_id).await;
            assert_row(&a, 429, "tenant_limited", true);
            assert_eq!(a.header("x-ratelimit-limit-tokens"), Some("60"), "{a:?}");
            // 10 left, and a token a second back since (a slow machine).
            assert!(
                (10..=12).contains(&remaining(&a, "x-ratelimit-remaining-tokens")),
                "{a:?}"
            );
            assert!(a.header("x-ratelimit-reset-tokens").is_some(), "{a:?}");
            let ms = a.retry_after_ms.unwrap();
            assert!((38_000..=40_000).contains(&ms), "40 tokens at 1/s: {ms}");

            for (key, id) in [
                (Some("key-b"), "b"),
                (None, "no-key"),
                (Some("key-z"), "unknown-key"),
            ] {
                let a = chat_as(&client, &base, key, &format!("{mode}-{id}")).await;
                assert_eq!(a.status, 200, "{id}: {a:?}");
            }
            assert_eq!(
                metric(
                    &client,
                    &base,
                    "gateway_shed_total{reason=\"tenant_limited\"}"
                )
                .await,
                Some(1.0)
            );
            let snap = gw.snapshot();
            assert_eq!((snap.tenant_limited, snap.shed), (1, 0), "{snap:?}");
            assert!(provider.records().iter().all(|r| r.id != limited_id));
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}

/// The key of an Anthropic caller is its `x-api-key`; its refusal carries
/// Anthropic's rate-limit headers as well as OpenAI's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_caller_is_known_by_its_x_api_key() {
    bounded_in_time(async {
        let provider = provider("[latency]\nttft = { fixed = \"1ms\" }\n").await;
        let gw = gateway(with_tenants(
            config(Mode::Bounded, &provider),
            &[("key-a", 60)],
        ))
        .await;
        let client = client();
        let send = |id: &'static str| {
            let req = client
                .post(format!("{}/v1/messages", gw.base_url()))
                .header("x-api-key", "key-a")
                .header("anthropic-version", "2023-06-01")
                .header("x-request-id", id)
                .json(&serde_json::json!({
                    "model": "claude-3-5-haiku-latest", "max_tokens": 40,
                    "messages": [{"role": "user", "content": "x".repeat(40)}],
                }));
            answer(id, Instant::now(), req)
        };
        assert_eq!(send("first").await.unwrap().status, 200);
        let a = send("second").await.unwrap();
        assert_row(&a, 429, "tenant_limited", true);
        assert!(
            (10..=12).contains(&remaining(&a, "anthropic-ratelimit-tokens-remaining")),
            "{a:?}"
        );
        assert_eq!(a.header("anthropic-ratelimit-tokens-limit"), Some("60"));
        assert!(a.header("anthropic-ratelimit-tokens-reset").is_some());
        assert!(
            (10..=12).contains(&remaining(&a, "x-ratelimit-remaining-tokens")),
            "{a:?}"
        );
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// Shedding is apart from the entitlement: a tenant well inside its
/// entitlement is shed `queue_full` when the gateway is full, and a shed
/// request costs it nothing (its reservation goes back). Tenant A may
/// spend 120 tokens a minute: two requests. Its first is shed, then two
/// are served, and only the fourth is over its entitlement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shed_request_is_not_charged_to_its_tenant() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"1s\" }\n[completion_tokens]\nfixed = 3\n")
                .await;
        let mut cfg = with_tenants(config(Mode::Bounded, &provider), &[("key-a", 120)]);
        cfg.bounded.concurrency = 1;
        cfg.bounded.queue = 0;
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
        let a = chat_as(&client, &base, Some("key-a"), "shed").await;
        assert_row(&a, 429, "queue_full", true);
        assert!(
            a.header("x-ratelimit-remaining-tokens").is_none(),
            "not a rate limit"
        );
        assert_eq!(held.await.unwrap().unwrap().status, 200);
        for id in ["served-1", "served-2"] {
            let a = chat_as(&client, &base, Some("key-a"), id).await;
            assert_eq!(a.status, 200, "{a:?}");
        }
        let a = chat_as(&client, &base, Some("key-a"), "over").await;
        assert_row(&a, 429, "tenant_limited", true);
        // 20 left, and 2 tokens a second back over the 2 s since.
        assert!(
            (20..50).contains(&remaining(&a, "x-ratelimit-remaining-tokens")),
            "{a:?}"
        );
        let snap = gw.snapshot();
        assert_eq!((snap.shed, snap.tenant_limited), (1, 1), "{snap:?}");
        assert!(a.elapsed < Duration::from_secs(1), "at once: {a:?}");
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
