//! End-to-end tests: the gateway on port 0, the real fake provider behind it
//! (also on port 0), and a real HTTP client in front, driving it open-loop
//! (each request spawned at its time, never waiting for the previous one).

#[path = "e2e/support.rs"]
mod support;

#[path = "e2e/aimd.rs"]
mod aimd;
#[path = "e2e/bad_input.rs"]
mod bad_input;
#[path = "e2e/bounded.rs"]
mod bounded;
#[path = "e2e/client_pool.rs"]
mod client_pool;
#[path = "e2e/deadline.rs"]
mod deadline;
#[path = "e2e/faults.rs"]
mod faults;
#[path = "e2e/hang_up.rs"]
mod hang_up;
#[path = "e2e/naive.rs"]
mod naive;
#[path = "e2e/passthrough.rs"]
mod passthrough;
#[path = "e2e/pool_demo.rs"]
mod pool_demo;
#[path = "e2e/refusals.rs"]
mod refusals;
#[path = "e2e/routing.rs"]
mod routing;
#[path = "e2e/tenants.rs"]
mod tenants;
#[path = "e2e/upstream_timeout.rs"]
mod upstream_timeout;

/// Hostile clients, from raw sockets: slow-loris heads, bodies that never
/// finish, oversized heads and bodies, malformed JSON, invalid UTF-8,
/// pipelined garbage, thousands of idle connections. Each must get a 4xx or
/// a close in bounded time, and a normal client is served quickly while
/// the abusers are still connected.
mod hostile {
    use crate::support::*;
    use fake_provider::ProviderHandle;
    use reference_gateway::{GatewayHandle, Mode};
    use std::net::SocketAddr;
    use std::time::Instant;
    use test_support::suite::{self, HostileTarget, BODY_TIMEOUT, HEADER_TIMEOUT, QUICK};

    const PROVIDER: &str =
        "[latency]\nttft = { fixed = \"1ms\" }\nper_token = { fixed = \"0ms\" }\n";

    /// A provider and a bounded gateway in front of it, with the suite's
    /// read guards and a 64 KiB body limit.
    async fn start() -> (ProviderHandle, GatewayHandle) {
        let p = provider(PROVIDER).await;
        let mut c = config(Mode::Bounded, &p);
        c.bounded.concurrency = 64;
        c.max_body_bytes = 65536;
        c.header_read_timeout = HEADER_TIMEOUT;
        c.body_read_timeout = BODY_TIMEOUT;
        let g = gateway(c).await;
        (p, g)
    }

    struct Gateway<'a>(&'a GatewayHandle);

    impl HostileTarget for Gateway<'_> {
        fn addr(&self) -> SocketAddr {
            self.0.addr()
        }

        async fn normal_ok(&self) {
            let start = Instant::now();
            let body = chat_body("normal", 40, 4, false);
            let answer = tokio::time::timeout(
                QUICK,
                chat(
                    &client(),
                    &self.0.base_url(),
                    "normal",
                    body,
                    Some(QUICK),
                    None,
                ),
            )
            .await
            .expect("a normal request is answered quickly during the abuse")
            .expect("a normal request gets an answer");
            assert_eq!(answer.status, 200, "{answer:?}");
            assert!(start.elapsed() < QUICK, "{:?}", start.elapsed());
        }

        fn chat_body(&self) -> String {
            chat_body("piped", 40, 4, false)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_loris_heads_are_closed_and_others_served() {
        let (p, g) = start().await;
        suite::slow_loris_heads_are_closed_and_others_served(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_never_finishes_gets_408_in_bounded_time() {
        let (p, g) = start().await;
        suite::a_body_that_never_finishes_gets_408_in_bounded_time(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oversized_heads_and_bodies_are_refused_at_once() {
        let (p, g) = start().await;
        suite::oversized_heads_and_bodies_are_refused_at_once(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_json_and_invalid_utf8_get_400() {
        let (p, g) = start().await;
        suite::malformed_json_and_invalid_utf8_get_400(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_garbage_after_a_valid_request_is_refused() {
        let (p, g) = start().await;
        suite::pipelined_garbage_after_a_valid_request_is_refused(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_thousand_idle_connections_do_not_stop_service() {
        let (p, g) = start().await;
        suite::two_thousand_idle_connections_do_not_stop_service(&Gateway(&g)).await;
        g.shutdown().await;
        p.shutdown().await;
    }
}
