//! naive: no bound anywhere, and no notice of a caller hanging up.

use std::time::Duration;

use reference_gateway::Mode;

use crate::support::*;

/// While the provider is slow (a ceiling of 2, the rest queued behind it),
/// the naive gateway forwards everything at once: its in-flight count grows
/// with the load, it never sheds, and the calls of callers who hung up run
/// to their end at the provider (no hung_up in its records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_without_limit_and_keeps_calling_for_callers_who_left() {
    bounded_in_time(async {
        let provider = provider(
            r#"
[latency]
ttft = { fixed = "400ms" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 5
[concurrency]
ceiling = 2
overflow = "queue"
"#,
        )
        .await;
        let gw = gateway(config(Mode::Naive, &provider)).await;
        let client = client();
        let base = gw.base_url();
        const N: usize = 16;
        let mut tasks = Vec::new();
        for i in 0..N {
            let id = format!("naive-{i}");
            // Odd callers give up after 300 ms, long before their answer.
            let patience = (i % 2 == 1).then_some(Duration::from_millis(300));
            tasks.push(spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 5, false),
                patience,
            ));
        }
        // Every request is forwarded at once: no bound in the gateway.
        until(|| gw.snapshot().in_flight == N as u64).await;
        until(|| provider.stats().received == N as u64).await;
        let inflight = metric(&client, &base, "gateway_in_flight").await;
        assert_eq!(inflight, Some(N as f64));
        assert_eq!(
            metric(&client, &base, "gateway_queue_depth").await,
            Some(0.0)
        );

        let mut served = 0;
        let mut timed_out = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(a) => {
                    assert_eq!(a.status, 200, "naive never sheds: {a:?}");
                    served += 1;
                }
                Err(e) => {
                    assert!(e.is_timeout(), "{e}");
                    timed_out += 1;
                }
            }
        }
        assert_eq!((served, timed_out), (N / 2, N / 2));

        // The callers who left still cost a full provider call each.
        until(|| provider.records().len() == N).await;
        let records = provider.records();
        for r in &records {
            assert_eq!(r.hung_up_us, None, "naive mode never cancels: {r:?}");
            assert_eq!(r.status, 200, "{r:?}");
        }
        let snap = gw.snapshot();
        assert_eq!(snap.cancelled_upstream, 0);
        assert_eq!(snap.shed, 0);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
