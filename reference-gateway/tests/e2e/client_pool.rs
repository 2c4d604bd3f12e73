//! The gateway's own HTTP client: a capped connection pool whose wait is
//! timed as provider latency unless metered apart, the `timeout` mode, and
//! retries of the provider's refusals after their Retry-After.

use std::time::Duration;

use reference_gateway::{GatewayConfig, Mode};

use crate::support::*;

/// The provider answers every call in 300 ms.
const SLOW: &str = "[latency]\nttft = { fixed = \"300ms\" }\nper_token = { fixed = \"0ms\" }\n[completion_tokens]\nfixed = 3\n";

/// Sends `n` requests at once and returns their answers.
async fn burst(base: &str, prefix: &str, n: usize) -> Vec<Answer> {
    let client = client();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            spawn_chat(
                &client,
                base,
                &format!("{prefix}-{i}"),
                chat_body(&format!("{prefix}-{i}"), 40, 3, false),
                None,
            )
        })
        .collect();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.expect("join").expect("an answer"));
    }
    answers
}

/// The most calls with `prefix` the provider served at once.
fn most_at_once(provider: &fake_provider::ProviderHandle, prefix: &str) -> usize {
    let records: Vec<_> = provider
        .records()
        .into_iter()
        .filter(|r| r.id.starts_with(prefix))
        .collect();
    records
        .iter()
        .map(|r| {
            records
                .iter()
                .filter(|o| {
                    o.received_us <= r.received_us
                        && o.finished_us.unwrap_or(u64::MAX) > r.received_us
                })
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The mean of a histogram from its `_sum` and `_count`.
fn mean(text: &str, name: &str) -> f64 {
    let sum = sample(text, &format!("{name}_sum")).expect("a sum");
    let count = sample(text, &format!("{name}_count")).expect("a count");
    sum / count
}

/// Six calls at once through a pool of two: the provider never serves more
/// than two, the last pair waits two calls' time in the pool, and the
/// gateway's "provider latency" includes that wait (about 600 ms on
/// average against the provider's 300 ms) until the wait is metered apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_caps_the_calls_and_its_wait_reads_as_provider_latency_unless_split() {
    bounded_in_time(async {
        let provider = provider(SLOW).await;
        for split in [false, true] {
            let mut cfg: GatewayConfig = config(Mode::Naive, &provider);
            cfg.pool_max_connections = Some(2);
            cfg.split_pool_wait = split;
            let gw = gateway(cfg).await;
            let prefix = format!("pool-{split}");
            let answers = burst(&gw.base_url(), &prefix, 6).await;
            assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
            let slowest = answers.iter().map(|a| a.elapsed).max().unwrap();
            assert!(
                slowest >= Duration::from_millis(850),
                "three rounds of two: {slowest:?}"
            );
            assert_eq!(most_at_once(&provider, &prefix), 2, "split {split}");
            let text = gw.metrics_text();
            let upstream = mean(&text, "gateway_upstream_seconds");
            if split {
                assert!(
                    upstream < 0.45,
                    "the provider's own time: {upstream} s\n{text}"
                );
                let waited = mean(&text, "gateway_pool_wait_seconds");
                assert!((0.25..0.5).contains(&waited), "mean pool wait {waited} s");
                assert_eq!(sample(&text, "gateway_pool_connections_max"), Some(2.0));
                assert_eq!(sample(&text, "gateway_pool_waiting"), Some(0.0));
            } else {
                assert!(
                    upstream > 0.5,
                    "the pool's wait counted as the provider's: {upstream} s"
                );
                assert!(!text.contains("gateway_pool_wait_seconds"), "{text}");
            }
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}

/// `timeout` mode with a pool of one: three calls at once, one answered in
/// 300 ms, the two behind it cancelled at the 450 ms upstream timeout,
/// which counts from dispatch, the pool's wait included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_mode_counts_the_pool_wait_in_its_timeout() {
    bounded_in_time(async {
        let provider = provider(SLOW).await;
        let mut cfg = config(Mode::Timeout, &provider);
        cfg.pool_max_connections = Some(1);
        cfg.upstream_timeout = Some(Duration::from_millis(450));
        let gw = gateway(cfg).await;
        let answers = burst(&gw.base_url(), "timeout", 3).await;
        let ok = answers.iter().filter(|a| a.status == 200).count();
        let timed_out: Vec<_> = answers.iter().filter(|a| a.status == 504).collect();
        assert_eq!((ok, timed_out.len()), (1, 2), "{answers:?}");
        for a in timed_out {
            assert_row(a, 504, "upstream_timeout", false);
            assert!(a.elapsed < Duration::from_millis(900), "{a:?}");
        }
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}

/// The timeout mode without a timeout is bad input, named by its field.
#[test]
fn the_timeout_mode_needs_its_timeout() {
    let err = GatewayConfig::from_toml(
        "mode = \"timeout\"\nupstream = \"http://127.0.0.1:1\"\n",
        "gw.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("upstream_timeout"), "{err}");
}

/// A provider account of 600 requests a minute that holds one second of
/// it (10 at once): twelve calls at once get ten answers and two 429s.
/// Passed on without retries; retried after their Retry-After with them,
/// so every caller is answered 200 and the retries are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_retries_turn_a_providers_429s_into_answers() {
    bounded_in_time(async {
        let provider = provider(
            "[latency]\nttft = { fixed = \"20ms\" }\nper_token = { fixed = \"0ms\" }\n[completion_tokens]\nfixed = 3\n[quota]\nrequests_per_minute = 600\nwindow = \"1s\"\n",
        )
        .await;
        for retries in [0, 5] {
            let mut cfg = config(Mode::Naive, &provider);
            cfg.upstream_retries = retries;
            cfg.upstream_retry_backoff = Duration::from_millis(20);
            let gw = gateway(cfg).await;
            // A full bucket for each round.
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let answers = burst(&gw.base_url(), &format!("retry-{retries}"), 12).await;
            let refused: Vec<_> = answers.iter().filter(|a| a.status == 429).collect();
            let text = gw.metrics_text();
            let counted = sample(&text, "gateway_upstream_retries_total").unwrap();
            if retries == 0 {
                assert_eq!(refused.len(), 2, "{answers:?}");
                for a in refused {
                    assert_eq!(a.header("x-gateway-reason"), Some("upstream_refused"));
                }
                assert_eq!(counted, 0.0);
            } else {
                assert!(refused.is_empty(), "{answers:?}");
                assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
                assert!(counted >= 2.0, "{text}");
                // Each retry waited for the provider's refill (100 ms a
                // call), not only for the client's 20 ms back-off.
                let slowest = answers.iter().map(|a| a.elapsed).max().unwrap();
                assert!(slowest >= Duration::from_millis(100), "{slowest:?}");
            }
            gw.shutdown().await;
        }
        provider.shutdown().await;
    })
    .await;
}
