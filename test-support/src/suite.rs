//! The hostile-client suite, the same for every server that takes chat
//! requests (the fake provider, the reference gateway): slow-loris heads,
//! bodies that never finish, oversized heads and bodies, malformed JSON,
//! invalid UTF-8, pipelined garbage, thousands of idle connections. Each
//! must get a 4xx or a close in bounded time, and a normal client is served
//! quickly while the abusers are still connected.
//!
//! A crate's tests start its server with [`HEADER_TIMEOUT`] and
//! [`BODY_TIMEOUT`] as its read guards and a 64 KiB body limit, wrap it in
//! a [`HostileTarget`], and call each function from a `#[tokio::test]` of its own.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::hostile::{abuse, chat_head, Then};

/// A normal request must be answered within this, abuse or not.
pub const QUICK: Duration = Duration::from_secs(3);
/// The slow-loris guard the server under test is started with.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// The body guard the server under test is started with.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(3);
/// Slack for a shared two-core machine.
pub const SLACK: Duration = Duration::from_secs(3);

/// The server under test.
pub trait HostileTarget {
    /// Where it listens.
    fn addr(&self) -> SocketAddr;
    /// Asserts that a normal chat request is answered 200 within [`QUICK`].
    fn normal_ok(&self) -> impl Future<Output = ()>;
    /// A valid chat completion request body.
    fn chat_body(&self) -> String;
}

/// Twenty clients drip a header byte a second: each is closed (or refused)
/// within the header guard, and a normal request is served meanwhile.
pub async fn slow_loris_heads_are_closed_and_others_served(t: &impl HostileTarget) {
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ".to_vec();
    let loris: Vec<_> = (0..20)
        .map(|_| {
            let head = head.clone();
            let addr = t.addr();
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
    t.normal_ok().await;
    for l in loris {
        let e = l.await.expect("abuser");
        assert!(e.refused(), "{e:?}");
        assert!(e.elapsed <= HEADER_TIMEOUT + SLACK, "{e:?}");
    }
    t.normal_ok().await;
}

/// A body that stops half-way gets 408 within the body guard.
pub async fn a_body_that_never_finishes_gets_408_in_bounded_time(t: &impl HostileTarget) {
    let mut first = chat_head(1000);
    first.extend_from_slice(b"{\"model\":");
    let addr = t.addr();
    let stuck = tokio::spawn(abuse(addr, first, Then::Idle, BODY_TIMEOUT + SLACK * 2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    t.normal_ok().await;
    let e = stuck.await.expect("abuser");
    assert_eq!(e.status(), Some(408), "{e:?}");
    assert!(e.elapsed <= BODY_TIMEOUT + SLACK, "{e:?}");
    t.normal_ok().await;
}

/// An endless header line, a declared length over the limit, and an endless
/// chunked body are each refused within seconds.
pub async fn oversized_heads_and_bodies_are_refused_at_once(t: &impl HostileTarget) {
    let addr = t.addr();
    let limit = Duration::from_secs(5);
    // A header line without end, flooded: over the server's head buffer.
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
    t.normal_ok().await;
    let e = big_head.await.expect("abuser");
    assert!(e.refused(), "{e:?}");
    assert!(matches!(e.status(), Some(431) | None), "{e:?}");
    assert!(e.elapsed < limit, "{e:?}");
    let e = declared.await.expect("abuser");
    assert_eq!(e.status(), Some(413), "{e:?}");
    let e = chunked.await.expect("abuser");
    assert!(e.elapsed < limit, "{e:?}");
    assert!(matches!(e.status(), Some(413)) || e.refused(), "{e:?}");
    t.normal_ok().await;
}

/// Broken JSON, invalid UTF-8 and a JSON array each get 400.
pub async fn malformed_json_and_invalid_utf8_get_400(t: &impl HostileTarget) {
    let bodies: [&[u8]; 4] = [
        b"{\"model\": \"gpt-4o-mini\", \"messages\": [",
        b"{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xc0\"}]}",
        b"\xff\xfe\x00\x01",
        b"[1, 2, 3]",
    ];
    for body in bodies {
        let mut first = chat_head(body.len());
        first.extend_from_slice(body);
        let e = abuse(t.addr(), first, Then::Idle, QUICK).await;
        assert_eq!(
            e.status(),
            Some(400),
            "{:?}: {e:?}",
            String::from_utf8_lossy(body)
        );
    }
    t.normal_ok().await;
}

/// A valid request followed by garbage on the same connection: the request
/// is answered in full, the garbage gets 400 or the close.
pub async fn pipelined_garbage_after_a_valid_request_is_refused(t: &impl HostileTarget) {
    let body = t.chat_body();
    let mut bytes = chat_head(body.len());
    bytes.extend_from_slice(body.as_bytes());
    bytes.extend_from_slice(b"\x00\x01GARBAGE \xff\r\n\r\n");
    let mut s = TcpStream::connect(t.addr()).await.expect("connect");
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
    t.normal_ok().await;
}

/// Two thousand idle connections, 500 of them with half-sent heads, do not
/// stop a normal request being served.
pub async fn two_thousand_idle_connections_do_not_stop_service(t: &impl HostileTarget) {
    let mut idle = Vec::with_capacity(2000);
    for _ in 0..2000 {
        idle.push(TcpStream::connect(t.addr()).await.expect("connect"));
    }
    t.normal_ok().await;
    // And half-sent heads on top of them.
    for s in idle.iter_mut().take(500) {
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
            .await
            .expect("write");
    }
    t.normal_ok().await;
    drop(idle);
    t.normal_ok().await;
}
