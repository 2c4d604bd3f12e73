//! deadline: admission in tokens against the caller's deadline.

use std::time::Duration;

use reference_gateway::Mode;
use wire::estimate_tokens;

use crate::support::*;

/// 100 tokens/s; every request costs 100 tokens (prompt + max_tokens), so
/// the pacer dispatches one a second. Deadline 5.55 s, expected service
/// 50 ms: request k waits behind (k-1) x 100 tokens, so it is admitted
/// if and only if k x 100 / 100 + 0.05 <= 5.55, i.e. k <= 5.5: five are
/// admitted (one dispatched, four queued, 500 tokens deep with the pacer's
/// debt), the rest shed. The half request of margin leaves the burst half
/// a second to arrive. Once the backlog drains, it admits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sheds_at_the_predicted_token_depth_and_admits_again_after_draining() {
    bounded_in_time(async {
        let provider = provider(
            r#"
[latency]
ttft = { fixed = "10ms" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 5
"#,
        )
        .await;
        let mut cfg = config(Mode::Deadline, &provider);
        cfg.deadline.tokens_per_minute = 100.0 * 60.0;
        cfg.deadline.default_deadline = Duration::from_millis(5550);
        cfg.deadline.expected_service = Duration::from_millis(50);
        let rate = 100.0;
        let (prompt_chars, max_tokens) = (40, 90);
        let cost = estimate_tokens(prompt_chars) + max_tokens;
        assert_eq!(cost, 100);
        let predicted_admitted = ((rate * (5.55 - 0.05)) / cost as f64).floor() as usize;
        assert_eq!(predicted_admitted, 5);

        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        let mut tasks = Vec::new();
        for i in 0..10 {
            let id = format!("dl-{i}");
            tasks.push(spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, prompt_chars, max_tokens, false),
                None,
            ));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap().unwrap());
        }
        let admitted: Vec<_> = answers.iter().filter(|a| a.status == 200).collect();
        // A missed deadline is scarcity, not an entitlement: 503.
        let shed: Vec<_> = answers.iter().filter(|a| a.status == 503).collect();
        assert_eq!(admitted.len(), predicted_admitted, "{answers:?}");
        assert_eq!(shed.len(), 10 - predicted_admitted, "{answers:?}");
        for a in &shed {
            assert_eq!(a.error_code().as_deref(), Some("would_miss_deadline"));
            // 500 tokens ahead + 100 own: seconds, at the rate observed.
            assert!(a.retry_after_ms.unwrap() >= 1000, "{a:?}");
        }
        assert_eq!(
            metric(
                &client,
                &base,
                "gateway_shed_total{reason=\"would_miss_deadline\"}"
            )
            .await,
            Some(5.0)
        );
        // The shed requests never reached the provider.
        let seen: Vec<String> = provider.records().into_iter().map(|r| r.id).collect();
        assert_eq!(seen.len(), predicted_admitted);
        assert!(shed.iter().all(|a| !seen.contains(&a.id)));

        // Drained: the queue is empty and the pacer's last debt (1 s) is
        // paid; a new request is admitted and served at once.
        until(|| gw.snapshot().queued_tokens == Some(0.0)).await;
        let a = chat(
            &client,
            &base,
            "after",
            chat_body("after", prompt_chars, max_tokens, false),
            None,
            None,
        )
        .await
        .unwrap();
        assert_eq!(a.status, 200, "{a:?}");
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// Retry-After is the live backlog over the observed drain rate: probes
/// with no patience at all are shed at once, and the Retry-After they get
/// grows as the queue fills, and shrinks when the queue's callers leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_grows_with_the_backlog() {
    bounded_in_time(async {
        let provider =
            provider("[latency]\nttft = { fixed = \"5ms\" }\n[completion_tokens]\nfixed = 3\n")
                .await;
        let mut cfg = config(Mode::Deadline, &provider);
        // 5 tokens/s, 100 tokens a request: one every 20 s, so the queue
        // built below does not move while it is probed, even on a busy
        // machine (at one every 4 s, a CI run under load once saw a second
        // dispatch between two probes, which doubled the observed rate).
        cfg.deadline.tokens_per_minute = 5.0 * 60.0;
        // Patience enough for the whole backlog (900 tokens ahead at 5/s).
        cfg.deadline.default_deadline = Duration::from_secs(3600);
        // The observed rate is the one dispatch over a tenth of this
        // window, the same for every probe however slowly the test runs.
        cfg.drain_window = Duration::from_secs(600);
        cfg.deadline.expected_service = Duration::from_millis(10);
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        // A probe with 1 ms of patience: shed at once, never queued.
        let probe = |n: usize| {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let id = format!("probe-{n}");
                chat(
                    &client,
                    &base,
                    &id,
                    chat_body(&id, 40, 90, false),
                    None,
                    Some(1),
                )
                .await
                .unwrap()
            }
        };
        let mut backlog = Vec::new();
        let mut readings = Vec::new();
        for (step, add) in [1usize, 4, 4].into_iter().enumerate() {
            for i in 0..add {
                let id = format!("backlog-{step}-{i}");
                backlog.push(spawn_chat(
                    &client,
                    &base,
                    &id,
                    chat_body(&id, 40, 90, false),
                    None,
                ));
            }
            if step == 0 {
                // The first is dispatched at once; wait until it was, so
                // that a later one cannot overtake it on a loaded machine
                // (a CI run once saw backlog-1-0 reach the gateway first).
                until(|| provider.stats().received == 1).await;
            }
            let want = backlog.len() - 1;
            until(|| gw.snapshot().queue_depth == want).await;
            let a = probe(step).await;
            assert_eq!(a.status, 503, "{a:?}");
            let ms = a.retry_after_ms.unwrap();
            assert_eq!(a.retry_after, Some(ms.div_ceil(1000)));
            readings.push(ms);
        }
        assert!(
            readings[0] < readings[1] && readings[1] < readings[2],
            "{readings:?}"
        );

        // The queued callers hang up: their jobs leave the queue at once,
        // the provider never sees them, and Retry-After falls.
        for t in backlog.iter().skip(1) {
            t.abort();
        }
        until(|| gw.snapshot().queue_depth == 0).await;
        let a = probe(9).await;
        assert_eq!(a.status, 503);
        assert!(
            a.retry_after_ms.unwrap() < readings[2],
            "{} vs {readings:?}",
            a.retry_after_ms.unwrap()
        );
        assert!(gw.snapshot().cancelled_queued >= 1);
        let seen: Vec<String> = provider.records().into_iter().map(|r| r.id).collect();
        assert!(
            seen.iter()
                .all(|id| !id.starts_with("backlog-1") && !id.starts_with("backlog-2")),
            "{seen:?}"
        );
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
