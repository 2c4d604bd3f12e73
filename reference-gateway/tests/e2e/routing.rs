//! Several upstreams: two real fake providers behind one gateway. An
//! upstream that refuses (a spent quota's 429 with its Retry-After, a 503,
//! a timeout, a dead port) is cooled down and the request sent on to the
//! next; a cooled upstream gets no calls inside its window (counted at the
//! provider); without cooldowns it is called again at once; with every
//! upstream cooling the gateway refuses at once, 503
//! `all_upstreams_cooling`, with the shortest cooldown left as its
//! Retry-After. Asserted on the mechanism (calls at each provider, the
//! gateway's own state), never on idle-machine timings: each window is
//! tens of seconds, the requests a handful.

use std::time::{Duration, Instant};

use fake_provider::ProviderHandle;
use reference_gateway::{GatewayConfig, Mode, Routing, UpstreamConfig};

use crate::support::*;

const ALL_MODES: [Mode; 4] = [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd];

const HEALTHY: &str = "[latency]\nttft = { fixed = \"1ms\" }\n";

/// 60 tokens a minute in a bucket of 55 s of refill: one request of
/// `chat_as` (50 tokens), then 429 with a Retry-After of tens of seconds.
const QUOTA_LONG: &str =
    "[latency]\nttft = { fixed = \"1ms\" }\n[quota]\ntokens_per_minute = 60\nwindow = \"55s\"\n";

/// 120 tokens a minute in a bucket of 30 s of refill: one request, then
/// 429 with a shorter Retry-After.
const QUOTA_SHORT: &str =
    "[latency]\nttft = { fixed = \"1ms\" }\n[quota]\ntokens_per_minute = 120\nwindow = \"30s\"\n";

fn named(name: &str, url: String, priority: u32) -> UpstreamConfig {
    UpstreamConfig {
        name: name.into(),
        url: Some(url),
        provider: None,
        weight: 1,
        priority,
    }
}

/// A gateway over `primary` (priority 0) and `secondary` (priority 1).
fn two(mode: Mode, primary: &ProviderHandle, secondary: &ProviderHandle) -> GatewayConfig {
    let mut c = GatewayConfig::new(mode, "");
    c.upstreams = vec![
        named("primary", primary.base_url(), 0),
        named("secondary", secondary.base_url(), 1),
    ];
    c
}

/// Waits until `p` has recorded `n` calls, and returns their statuses.
async fn calls(p: &ProviderHandle, n: usize) -> Vec<u16> {
    until(|| p.records().len() >= n).await;
    p.records().iter().map(|r| r.status).collect()
}

fn served_by(a: &Answer) -> Option<&str> {
    a.header("x-gateway-upstream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_moves_traffic_on_and_a_cooled_upstream_gets_no_calls_in_its_window() {
    bounded_in_time(async {
        for mode in ALL_MODES {
            let primary = provider(QUOTA_LONG).await;
            let secondary = provider(HEALTHY).await;
            let gw = gateway(two(mode, &primary, &secondary)).await;
            let (client, base) = (client(), gw.base_url());
            let first = chat_as(&client, &base, None, &format!("{mode}-first")).await;
            assert_eq!(
                (first.status, served_by(&first)),
                (200, Some("primary")),
                "{first:?}"
            );
            // The quota is spent: the primary answers 429 and its
            // Retry-After; the request goes on to the secondary at once.
            let moved = chat_as(&client, &base, None, &format!("{mode}-moved")).await;
            assert_eq!(
                (moved.status, served_by(&moved)),
                (200, Some("secondary")),
                "{moved:?}"
            );
            assert_eq!(calls(&primary, 2).await, [200, 429]);
            let up = gw.upstreams();
            assert_eq!((up[0].sent_on, up[0].cooldowns), (1, 1), "{up:?}");
            assert!(
                up[0].cooling_for > Duration::from_secs(10),
                "its Retry-After: {up:?}"
            );
            assert_eq!(up[1].cooling_for, Duration::ZERO);
            if mode == Mode::Bounded {
                // Admission works on the capacity not cooling: 8 x 1/2.
                assert_eq!(gw.snapshot().limit, Some(4));
            }
            for i in 0..8 {
                let a = chat_as(&client, &base, None, &format!("{mode}-after-{i}")).await;
                assert_eq!((a.status, served_by(&a)), (200, Some("secondary")), "{a:?}");
            }
            assert_eq!(calls(&secondary, 9).await.len(), 9);
            // Still inside the window (the gateway says so): no new call.
            assert!(gw.upstreams()[0].cooling_for > Duration::ZERO);
            assert_eq!(primary.records().len(), 2, "no call inside its window");
            let text = gw.metrics_text();
            assert_eq!(
                sample(&text, "gateway_upstream_calls_total{upstream=\"primary\"}"),
                Some(2.0),
                "{text}"
            );
            assert_eq!(
                sample(
                    &text,
                    "gateway_upstream_calls_total{upstream=\"secondary\"}"
                ),
                Some(9.0)
            );
            assert_eq!(
                sample(&text, "gateway_upstream_cooling{upstream=\"primary\"}"),
                Some(1.0)
            );
            assert_eq!(
                sample(&text, "gateway_upstream_cooling{upstream=\"secondary\"}"),
                Some(0.0)
            );
            assert_eq!(
                sample(
                    &text,
                    "gateway_upstream_refused_total{upstream=\"primary\"}"
                ),
                Some(0.0),
                "sent on, not passed on"
            );
            assert!(
                text.contains("gateway_upstream_seconds_count{upstream=\"secondary\"} 9\n"),
                "{text}"
            );
            gw.shutdown().await;
            primary.shutdown().await;
            secondary.shutdown().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cooldowns_the_refusing_upstream_is_called_again_at_once() {
    bounded_in_time(async {
        let primary = provider(QUOTA_LONG).await;
        let secondary = provider(HEALTHY).await;
        let mut c = two(Mode::Bounded, &primary, &secondary);
        c.cooldowns = Some(false);
        let gw = gateway(c).await;
        let (client, base) = (client(), gw.base_url());
        assert_eq!(chat_as(&client, &base, None, "first").await.status, 200);
        for i in 0..5 {
            let a = chat_as(&client, &base, None, &format!("again-{i}")).await;
            assert_eq!((a.status, served_by(&a)), (200, Some("secondary")), "{a:?}");
        }
        // Every request tried the primary first, into its Retry-After.
        assert_eq!(calls(&primary, 6).await, [200, 429, 429, 429, 429, 429]);
        let up = gw.upstreams();
        assert_eq!((up[0].sent_on, up[0].cooldowns), (5, 0), "{up:?}");
        assert_eq!(up[0].cooling_for, Duration::ZERO);
        assert!(!gw.metrics_text().contains("gateway_upstream_cooling"));
        gw.shutdown().await;
        primary.shutdown().await;
        secondary.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_upstream_cooling_the_gateway_refuses_at_once_with_the_shortest_cooldown() {
    bounded_in_time(async {
        for mode in ALL_MODES {
            let primary = provider(QUOTA_LONG).await;
            let secondary = provider(QUOTA_SHORT).await;
            let gw = gateway(two(mode, &primary, &secondary)).await;
            let (client, base) = (client(), gw.base_url());
            assert_eq!(chat_as(&client, &base, None, "one").await.status, 200);
            let two = chat_as(&client, &base, None, "two").await;
            assert_eq!((two.status, served_by(&two)), (200, Some("secondary")));
            // The secondary's quota is spent too, and no upstream is left to
            // send on to: its refusal is passed on as it came.
            let three = chat_as(&client, &base, None, "three").await;
            let refused_at = Instant::now();
            assert_row(&three, 429, "upstream_refused", true);
            assert_eq!(served_by(&three), Some("secondary"));
            let four = chat_as(&client, &base, None, &format!("{mode}-four")).await;
            assert_row(&four, 503, "all_upstreams_cooling", true);
            assert!(four.elapsed < Duration::from_secs(2), "at once: {four:?}");
            // The shortest cooldown left: the secondary's Retry-After, less
            // the time since it was given (within a second).
            let told = four.retry_after_ms.unwrap() as f64 / 1000.0;
            let left =
                three.retry_after_ms.unwrap() as f64 / 1000.0 - refused_at.elapsed().as_secs_f64();
            assert!((told - left).abs() <= 1.0, "{told} vs {left}: {four:?}");
            let up = gw.upstreams();
            let (primary_left, shortest) = (up[0].cooling_for, up[1].cooling_for);
            assert!(
                (told - shortest.as_secs_f64()).abs() <= 1.0,
                "{told} vs {up:?}"
            );
            assert!(
                primary_left.as_secs_f64() > told + 5.0,
                "the shortest, not the primary's: {told} vs {up:?}"
            );
            // Never sent.
            assert_eq!(calls(&primary, 2).await.len(), 2);
            assert_eq!(calls(&secondary, 2).await.len(), 2);
            assert!(secondary.records().iter().all(|r| !r.id.ends_with("four")));
            assert_eq!(gw.snapshot().all_upstreams_cooling, 1);
            assert_eq!(
                sample(
                    &gw.metrics_text(),
                    "gateway_shed_total{reason=\"all_upstreams_cooling\"}"
                ),
                Some(1.0)
            );
            gw.shutdown().await;
            primary.shutdown().await;
            secondary.shutdown().await;
        }
    })
    .await;
}

/// A 503 without Retry-After cools for `cooldown`; a stream refused before
/// its first byte is sent on; so are a call past `upstream_timeout` and an
/// upstream that cannot be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_timeouts_and_dead_upstreams_are_sent_on_and_cooled() {
    bounded_in_time(async {
        let healthy = provider(HEALTHY).await;
        let failing = provider(
            "[latency]\nttft = { fixed = \"1ms\" }\n[faults]\nerrors = { \"503\" = 1.0 }\n",
        )
        .await;
        let slow = provider("[latency]\nttft = { fixed = \"20s\" }\n").await;
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let mut c = GatewayConfig::new(Mode::Bounded, "");
        c.upstreams = vec![
            named("failing", failing.base_url(), 0),
            named("slow", slow.base_url(), 1),
            named("dead", dead, 2),
            named("healthy", healthy.base_url(), 3),
        ];
        c.cooldown = Duration::from_secs(30);
        c.upstream_timeout = Some(Duration::from_millis(300));
        let gw = gateway(c).await;
        let (client, base) = (client(), gw.base_url());
        let body = chat_body("streamed", 40, 8, true);
        let a = chat(&client, &base, "streamed", body, None, None)
            .await
            .unwrap();
        assert_eq!((a.status, served_by(&a)), (200, Some("healthy")), "{a:?}");
        assert!(a.body.contains("data: [DONE]"), "a whole stream: {a:?}");
        let up = gw.upstreams();
        for u in &up[..3] {
            assert_eq!((u.calls, u.sent_on, u.cooldowns), (1, 1, 1), "{u:?}");
            // No Retry-After given: the configured cooldown.
            assert!(
                u.cooling_for > Duration::from_secs(20) && u.cooling_for <= Duration::from_secs(30),
                "{u:?}"
            );
        }
        let again = chat_as(&client, &base, None, "again").await;
        assert_eq!((again.status, served_by(&again)), (200, Some("healthy")));
        let up = gw.upstreams();
        assert_eq!(
            up.iter().map(|u| u.calls).collect::<Vec<_>>(),
            [1, 1, 1, 2],
            "{up:?}"
        );
        assert_eq!(
            gw.snapshot().upstream_timeouts,
            0,
            "sent on, not answered 504"
        );
        gw.shutdown().await;
        for p in [healthy, failing, slow] {
            p.shutdown().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_routing_follows_the_weights_among_the_upstreams_not_cooling() {
    bounded_in_time(async {
        let big = provider(HEALTHY).await;
        let small = provider(HEALTHY).await;
        let mut c = GatewayConfig::new(Mode::Aimd, "");
        c.routing = Routing::Weighted;
        c.upstreams = vec![
            UpstreamConfig {
                weight: 3,
                ..named("big", big.base_url(), 0)
            },
            named("small", small.base_url(), 0),
        ];
        let gw = gateway(c).await;
        let (client, base) = (client(), gw.base_url());
        let mut by = Vec::new();
        for i in 0..8 {
            let a = chat_as(&client, &base, None, &format!("w-{i}")).await;
            assert_eq!(a.status, 200);
            by.push(served_by(&a).unwrap().to_string());
        }
        assert_eq!(by.iter().filter(|n| *n == "big").count(), 6, "{by:?}");
        assert_eq!(calls(&small, 2).await.len(), 2);
        gw.shutdown().await;
        big.shutdown().await;
        small.shutdown().await;
    })
    .await;
}

/// A stream already begun is never sent on: past `upstream_timeout` it is
/// cut, as with one upstream, and its upstream cooled down; the next
/// request goes to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_the_upstream_timeout_cools_its_upstream_and_is_not_sent_on() {
    bounded_in_time(async {
        let dragging = provider(
            "[latency]\nttft = { fixed = \"1ms\" }\nper_token = { fixed = \"1s\" }\n[completion_tokens]\nfixed = 16\n",
        )
        .await;
        let healthy = provider(HEALTHY).await;
        let mut c = two(Mode::Bounded, &dragging, &healthy);
        c.upstream_timeout = Some(Duration::from_millis(500));
        c.cooldown = Duration::from_secs(30);
        let gw = gateway(c).await;
        let (client, base) = (client(), gw.base_url());
        let body = chat_body("cut", 40, 16, true);
        // Cut mid-way: the client sees a broken or short body, never a
        // second upstream's answer spliced in.
        if let Ok(a) = chat(&client, &base, "cut", body, None, None).await {
            assert_eq!(served_by(&a), Some("primary"), "{a:?}");
            assert!(!a.body.contains("[DONE]"), "{a:?}");
        }
        until(|| gw.snapshot().upstream_timeouts == 1).await;
        let up = gw.upstreams();
        assert_eq!((up[0].calls, up[0].sent_on, up[0].cooldowns), (1, 0, 1), "{up:?}");
        assert!(up[0].cooling_for > Duration::from_secs(20), "{up:?}");
        assert_eq!(up[1].calls, 0, "not sent on");
        let next = chat_as(&client, &base, None, "next").await;
        assert_eq!((next.status, served_by(&next)), (200, Some("secondary")));
        gw.shutdown().await;
        dragging.shutdown().await;
        healthy.shutdown().await;
    })
    .await;
}
