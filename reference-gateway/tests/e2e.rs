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
#[path = "e2e/deadline.rs"]
mod deadline;
#[path = "e2e/hang_up.rs"]
mod hang_up;
#[path = "e2e/naive.rs"]
mod naive;
#[path = "e2e/passthrough.rs"]
mod passthrough;
#[path = "e2e/pool_demo.rs"]
mod pool_demo;

/// Hostile clients, from raw sockets: slow-loris heads, bodies that never
/// finish, oversized heads and bodies, malformed JSON, invalid UTF-8,
/// pipelined garbage, thousands of idle connections. Each must get a 4xx or
/// a close in bounded time, and a normal client is served quickly while
/// the abusers are still connected.
mod hostile {
    use crate::support::*;
    use fake_provider::ProviderHandle;
    use reference_gateway::{GatewayHandle, Mode};
    use std::time::{Duration, Instant};
    use test_support::hostile::{abuse, chat_head, Then};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A normal request must be answered within this, abuse or not.
    const QUICK: Duration = Duration::from_secs(3);
    /// The gateway's slow-loris guard here (`header_read_timeout`).
    const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
    /// The gateway's body guard here (`body_read_timeout`).
    const BODY_TIMEOUT: Duration = Duration::from_secs(3);
    /// Slack for a shared two-core machine.
    const SLACK: Duration = Duration::from_secs(3);
    const PROVIDER: &str =
        "[latency]\nttft = { fixed = \"1ms\" }\nper_token = { fixed = \"0ms\" }\n";

    /// A provider and a bounded gateway in front of it, with short read
    /// guards and a 64 KiB body limit.
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

    /// Asserts that a normal chat request is answered 200 within [`QUICK`].
    async fn normal_ok(g: &GatewayHandle) {
        let start = Instant::now();
        let body = chat_body("normal", 40, 4, false);
        let answer = tokio::time::timeout(
            QUICK,
            chat(&client(), &g.base_url(), "normal", body, Some(QUICK), None),
        )
        .await
        .expect("a normal request is answered quickly during the abuse")
        .expect("a normal request gets an answer");
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(start.elapsed() < QUICK, "{:?}", start.elapsed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_loris_heads_are_closed_and_others_served() {
        let (p, g) = start().await;
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ".to_vec();
        let loris: Vec<_> = (0..20)
            .map(|_| {
                let head = head.clone();
                let addr = g.addr();
                tokio::spawn(async move {
                    abuse(
                        addr,
                        head,
                        Then::Drip(Duration::from_secs(1)),
                        HEADER_TIMEOUT + SLACK * 2,
                    )
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        normal_ok(&g).await;
        for l in loris {
            let e = l.await.expect("abuser");
            assert!(e.refused(), "{e:?}");
            assert!(e.elapsed <= HEADER_TIMEOUT + SLACK, "{e:?}");
        }
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_never_finishes_gets_408_in_bounded_time() {
        let (p, g) = start().await;
        let mut first = chat_head(1000);
        first.extend_from_slice(b"{\"model\":");
        let addr = g.addr();
        let stuck = tokio::spawn(abuse(addr, first, Then::Idle, BODY_TIMEOUT + SLACK * 2));
        tokio::time::sleep(Duration::from_millis(500)).await;
        normal_ok(&g).await;
        let e = stuck.await.expect("abuser");
        assert_eq!(e.status(), Some(408), "{e:?}");
        assert!(e.elapsed <= BODY_TIMEOUT + SLACK, "{e:?}");
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oversized_heads_and_bodies_are_refused_at_once() {
        let (p, g) = start().await;
        let addr = g.addr();
        let limit = Duration::from_secs(5);
        // A header line without end, flooded: over hyper's head buffer
        // (about 400 KiB).
        let head = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: ".to_vec();
        let big_head = tokio::spawn(abuse(addr, head, Then::Flood(vec![b'a'; 8192]), limit));
        // A declared length over max_body_bytes: 413 before any body.
        let declared = tokio::spawn(abuse(addr, chat_head(10_000_000), Then::Idle, limit));
        // No declared length (chunked), flooded: 413 once past the limit.
        let mut chunk = format!("{:x}\r\n", 8192).into_bytes();
        chunk.extend_from_slice(&[b' '; 8192]);
        chunk.extend_from_slice(b"\r\n");
        let chunked_head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        let chunked = tokio::spawn(abuse(addr, chunked_head, Then::Flood(chunk), limit));
        normal_ok(&g).await;
        let e = big_head.await.expect("abuser");
        assert!(e.refused(), "{e:?}");
        assert!(matches!(e.status(), Some(431) | None), "{e:?}");
        assert!(e.elapsed < limit, "{e:?}");
        let e = declared.await.expect("abuser");
        assert_eq!(e.status(), Some(413), "{e:?}");
        let e = chunked.await.expect("abuser");
        assert!(e.elapsed < limit, "{e:?}");
        assert!(matches!(e.status(), Some(413)) || e.refused(), "{e:?}");
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_json_and_invalid_utf8_get_400() {
        let (p, g) = start().await;
        let bodies: [&[u8]; 4] = [
            b"{\"model\": \"gpt-4o-mini\", \"messages\": [",
            b"{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xc0\"}]}",
            b"\xff\xfe\x00\x01",
            b"[1, 2, 3]",
        ];
        for body in bodies {
            let mut first = chat_head(body.len());
            first.extend_from_slice(body);
            let e = abuse(g.addr(), first, Then::Idle, QUICK).await;
            assert_eq!(
                e.status(),
                Some(400),
                "{:?}: {e:?}",
                String::from_utf8_lossy(body)
            );
        }
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_garbage_after_a_valid_request_is_refused() {
        let (p, g) = start().await;
        let body = chat_body("piped", 40, 4, false);
        let mut bytes = chat_head(body.len());
        bytes.extend_from_slice(body.as_bytes());
        bytes.extend_from_slice(b"\x00\x01GARBAGE \xff\r\n\r\n");
        let mut s = TcpStream::connect(g.addr()).await.expect("connect");
        s.write_all(&bytes).await.expect("write");
        let mut got = Vec::new();
        let read = tokio::time::timeout(QUICK, s.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "the server closes the connection: {:?}",
            String::from_utf8_lossy(&got)
        );
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
        // The valid request is answered in full; the garbage gets a 400 or
        // just the close.
        let second = text
            .match_indices("HTTP/1.1 ")
            .nth(1)
            .map(|(i, _)| &text[i..]);
        if let Some(second) = second {
            assert!(second.starts_with("HTTP/1.1 400"), "{text}");
        }
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_thousand_idle_connections_do_not_stop_service() {
        let (p, g) = start().await;
        let mut idle = Vec::with_capacity(2000);
        for _ in 0..2000 {
            idle.push(TcpStream::connect(g.addr()).await.expect("connect"));
        }
        normal_ok(&g).await;
        // And half-sent heads on top of them.
        for s in idle.iter_mut().take(500) {
            s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
                .await
                .expect("write");
        }
        normal_ok(&g).await;
        drop(idle);
        normal_ok(&g).await;
        g.shutdown().await;
        p.shutdown().await;
    }
}
