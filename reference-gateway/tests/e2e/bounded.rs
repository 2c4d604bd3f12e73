//! bounded: N calls, a bounded queue (full: 429 at once) and a wait budget
//! (picked up past it: 503, and the provider is never called).

use std::time::Duration;

use reference_gateway::Mode;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sheds_at_once_when_full_and_never_calls_the_provider_for_an_expired_job() {
    bounded_in_time(async {
        let provider = provider(
            r#"
[latency]
ttft = { fixed = "2s" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 5
"#,
        )
        .await;
        let mut cfg = config(Mode::Bounded, &provider);
        cfg.bounded.concurrency = 2;
        cfg.bounded.queue = 3;
        cfg.bounded.wait_budget = Duration::from_millis(300);
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();

        let mut in_service = Vec::new();
        for i in 0..2 {
            let id = format!("served-{i}");
            in_service.push(spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 5, false),
                None,
            ));
        }
        until(|| gw.snapshot().in_flight == 2).await;
        let mut queued = Vec::new();
        for i in 0..3 {
            let id = format!("queued-{i}");
            queued.push(spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 5, false),
                None,
            ));
        }
        until(|| gw.snapshot().queue_depth == 3).await;

        // The queue is full: each further request is refused without
        // waiting for a slot (a slot frees only after 2 s).
        for i in 0..4 {
            let id = format!("refused-{i}");
            let a = chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 5, false),
                None,
                None,
            )
            .await
            .unwrap();
            assert_eq!(a.status, 429, "{a:?}");
            assert_eq!(a.error_code().as_deref(), Some("queue_full"));
            assert!(
                a.elapsed < Duration::from_secs(1),
                "refused without waiting: {:?}",
                a.elapsed
            );
            let ms = a.retry_after_ms.expect("retry-after-ms");
            assert!(ms > 0);
            assert_eq!(a.retry_after, Some(ms.div_ceil(1000)), "{a:?}");
        }
        assert_eq!(
            metric(&client, &base, "gateway_shed_total{reason=\"queue_full\"}").await,
            Some(4.0)
        );

        // The queued three waited 2 s > 300 ms budget: dropped at dequeue.
        for t in queued {
            let a = t.await.unwrap().unwrap();
            assert_eq!(a.status, 503, "{a:?}");
            assert_eq!(a.error_code().as_deref(), Some("wait_expired"));
            assert!(a.retry_after_ms.is_some() && a.retry_after.is_some());
        }
        for t in in_service {
            assert_eq!(t.await.unwrap().unwrap().status, 200);
        }
        assert_eq!(
            metric(&client, &base, "gateway_stale_drops_total").await,
            Some(3.0)
        );

        // The provider saw exactly the two that were served.
        let mut ids: Vec<String> = provider.records().into_iter().map(|r| r.id).collect();
        ids.sort();
        assert_eq!(ids, vec!["served-0", "served-1"]);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
