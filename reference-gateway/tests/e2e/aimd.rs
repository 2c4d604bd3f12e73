//! aimd: the limit falls during a provider slowdown and rises after it.

use std::time::{Duration, Instant};

use reference_gateway::Mode;

use crate::support::*;

/// Open-loop load at 100 requests/s. The provider answers in 40 ms, then in
/// 400 ms (a pinned 10x "slow" phase) for 2 s, then in 40 ms again. The
/// latency target is 150 ms: during the slowdown every call passes it and
/// the limit is cut; after it, fast successes with the limit in use raise
/// it again. The limit is read from /metrics as a client would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowers_its_limit_during_a_slowdown_and_raises_it_after() {
    let _alone = SUSTAINED_LOAD.lock().await;
    bounded_in_time(async {
        let provider = provider(
            r#"
[latency]
ttft = { fixed = "40ms" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 3
[[timeline]]
name = "slow"
from = "1h"
until = "2h"
latency = { multiplier = 10.0 }
"#,
        )
        .await;
        let mut cfg = config(Mode::Aimd, &provider);
        cfg.aimd.initial = 10;
        cfg.aimd.floor = 2;
        cfg.aimd.ceiling = 40;
        cfg.aimd.latency_target = Duration::from_millis(250);
        cfg.aimd.queue = 1000;
        cfg.aimd.wait_budget = Duration::from_secs(30);
        let gw = gateway(cfg).await;
        let client = client();
        let base = gw.base_url();
        let limit = |client: reqwest::Client, base: String| async move {
            metric(&client, &base, "gateway_concurrency_limit")
                .await
                .expect("limit on /metrics")
        };

        let start = Instant::now();
        let mut tasks = Vec::new();
        let mut slowest = f64::MAX;
        let mut before = 0.0;
        let mut phase = 0;
        let total = Duration::from_secs(7);
        let mut i = 0u32;
        let mut next = tokio::time::Instant::now();
        while start.elapsed() < total {
            // Phases: 0-2 s normal, 2-4 s slow, 4-7 s normal again.
            let t = start.elapsed();
            if phase == 0 && t >= Duration::from_secs(2) {
                before = limit(client.clone(), base.clone()).await;
                provider.set_phase(Some("slow")).unwrap();
                phase = 1;
            } else if phase == 1 && t >= Duration::from_secs(4) {
                provider.set_phase(None).unwrap();
                phase = 2;
            }
            if phase >= 1 {
                slowest = slowest.min(limit(client.clone(), base.clone()).await);
            }
            let id = format!("aimd-{i}");
            tasks.push(spawn_chat(
                &client,
                &base,
                &id,
                chat_body(&id, 40, 3, false),
                None,
            ));
            i += 1;
            next += Duration::from_millis(10);
            tokio::time::sleep_until(next).await;
        }
        let after = limit(client.clone(), base.clone()).await;
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap().status, 200);
        }
        assert!(
            slowest < before,
            "cut during the slowdown: before {before}, lowest {slowest}"
        );
        assert!(
            after > slowest,
            "raised after it: lowest {slowest}, after {after}"
        );
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
