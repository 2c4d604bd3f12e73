//! Hostile gateways: servers built here on 127.0.0.1:0 that answer with
//! garbage, wrong lengths, endless bodies, stalled streams, close-delimited
//! bodies, absurd Retry-After values and heads that never end. Each attempt
//! must end in a clear outcome, and no later than its patience (plus a
//! little scheduling slack): the load generator never hangs on a gateway.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use loadgen::{LoadOptions, LoadPlan, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use wire::{files, ClientOutcome, ClientRecord};

use crate::read_client_records;

/// Every attempt's patience in these tests.
const PATIENCE: Duration = Duration::from_millis(1000);
/// Slack for scheduling on a shared two-core machine, in a debug build.
const SLACK: Duration = Duration::from_millis(700);

/// A valid OpenAI chat completion.
const ANSWER: &str = r#"{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"abcd abcd"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;

/// Starts a server that reads each request (head and `content-length`
/// body) and then hands the connection to `answer`.
async fn hostile<F, Fut>(answer: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                if read_request(&mut stream).await {
                    answer(stream).await;
                }
            });
        }
    });
    addr
}

/// Reads one request; returns false if the client left first.
async fn read_request(stream: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return true;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Runs `people` arrivals (10 a second, one attempt each unless `retry`
/// says otherwise) against `addr` and returns the attempts' records.
async fn drive(addr: SocketAddr, people: u32, retry: &str) -> Vec<ClientRecord> {
    drive_at(addr, people, 10, retry).await
}

/// [`drive`] at `rate` arrivals a second.
async fn drive_at(addr: SocketAddr, people: u32, rate: u32, retry: &str) -> Vec<ClientRecord> {
    drive_capped(addr, (people, rate), retry, "").await
}

/// [`drive_at`] with a line more in `[load]` (`max_answer_bytes`).
async fn drive_capped(
    addr: SocketAddr,
    (people, rate): (u32, u32),
    retry: &str,
    load_line: &str,
) -> Vec<ClientRecord> {
    let scenario = format!(
        r#"
[load]
seed = 5
{load_line}
patience = {{ fixed = "{}ms" }}
[[load.phases]]
duration = "{}ms"
rate = {rate}
[load.request]
stream = 0.0
[load.retry]
{retry}
"#,
        PATIENCE.as_millis(),
        people * 1000 / rate,
    );
    let plan = LoadPlan::from_scenario_str(&scenario, "hostile.toml", std::path::Path::new("."))
        .expect("a valid [load] table");
    let out = tempfile::tempdir().expect("a temp dir");
    let target = Target::parse(&format!("http://{addr}")).expect("a URL");
    tokio::time::timeout(
        Duration::from_secs(30),
        loadgen::run(
            &plan,
            &target,
            &LoadOptions::new(out.path()),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the run ends by itself, whatever the gateway does")
    .expect("the run succeeds");
    let records = read_client_records(&out.path().join(files::CLIENT_RECORDS));
    assert!(!records.is_empty(), "attempts were recorded");
    for r in &records {
        let took = Duration::from_micros(r.done_us.saturating_sub(r.intended_us));
        assert!(
            took <= PATIENCE + SLACK,
            "an attempt took {took:?}, past its patience: {r:?}"
        );
    }
    records
}

/// Asserts every attempt ended in `want`, and returns them.
async fn expect_all(addr: SocketAddr, want: ClientOutcome) -> Vec<ClientRecord> {
    let records = drive(addr, 3, "policy = \"none\"").await;
    assert_eq!(records.len(), 3, "{records:?}");
    for r in &records {
        assert_eq!(r.outcome, want, "{r:?}");
    }
    records
}

/// The head of a 200 JSON answer, with `extra` header lines.
fn ok_head(extra: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_http_is_malformed_at_once() {
    let addr = hostile(|mut s: TcpStream| async move {
        let _ = s.write_all(b"\x00\xff\xfe SSH-2.0-garbage\r\n\r\n").await;
        // Keep the connection open: the client must not wait for more.
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Malformed).await {
        assert_eq!(r.status, None);
        assert!(
            r.done_us - r.sent_us < 300_000,
            "garbage is refused at once, not at the patience: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_shorter_than_the_body_is_malformed() {
    let addr = hostile(|mut s: TcpStream| async move {
        let head = ok_head("content-length: 10\r\n");
        let _ = s.write_all(format!("{head}{ANSWER}").as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Malformed).await {
        assert_eq!(r.status, Some(200));
        assert!(r.done_us - r.sent_us < 300_000, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_longer_than_the_body_then_close_is_a_reset() {
    let addr = hostile(|mut s: TcpStream| async move {
        let head = ok_head("content-length: 100000\r\n");
        let _ = s.write_all(format!("{head}{ANSWER}").as_bytes()).await;
        // Dropped: the connection closes with the body unfinished.
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Reset).await {
        assert_eq!(r.status, Some(200));
        assert!(r.done_us - r.sent_us < 300_000, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_longer_than_the_body_kept_open_times_out() {
    let addr = hostile(|mut s: TcpStream| async move {
        let head = ok_head("content-length: 100000\r\n");
        let _ = s.write_all(format!("{head}{ANSWER}").as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    expect_all(addr, ClientOutcome::Timeout).await;
}

/// The process's peak resident memory so far, in bytes (`VmHWM`): nextest
/// runs each test in a process of its own, so it is this test's.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmHWM line");
    kb * 1024
}

/// A server that answers 200 and then sends body bytes as fast as the
/// client reads, without end (chunked or not), until it hangs up.
async fn endless(chunked: bool) -> SocketAddr {
    let framing = if chunked {
        "transfer-encoding: chunked\r\n"
    } else {
        ""
    };
    hostile(move |mut s: TcpStream| async move {
        let _ = s.write_all(ok_head(framing).as_bytes()).await;
        let mut piece = vec![b' '; 64 * 1024];
        piece[..12].copy_from_slice(b"{\"choices\":[");
        loop {
            let res = if chunked {
                let mut c = format!("{:x}\r\n", piece.len()).into_bytes();
                c.extend_from_slice(&piece);
                c.extend_from_slice(b"\r\n");
                s.write_all(&c).await
            } else {
                s.write_all(&piece).await
            };
            if res.is_err() {
                break;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_or_huge_answer_is_oversized_and_memory_stays_bounded() {
    // A normal run first: its peak is the yardstick.
    let normal = hostile(|mut s: TcpStream| async move {
        let head = ok_head(&format!("content-length: {}\r\n", ANSWER.len()));
        let _ = s.write_all(format!("{head}{ANSWER}").as_bytes()).await;
    })
    .await;
    for r in drive_at(normal, 40, 40, "policy = \"none\"").await {
        assert_eq!(r.outcome, ClientOutcome::Ok, "{r:?}");
    }
    let yardstick = peak_rss();

    // 100 GB announced: refused at the head, nothing of it read.
    let huge = hostile(|mut s: TcpStream| async move {
        let head = ok_head("content-length: 100000000000\r\n");
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(&[b' '; 64 * 1024]).await;
        // Kept open: only the generator's cap ends the attempt.
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let mut servers = vec![("100 GB content-length", huge)];
    servers.push(("endless chunked", endless(true).await));
    servers.push(("endless close-delimited", endless(false).await));
    // A cap of 512 KiB (the default is 4 MiB): 40 attempts at once, the
    // most a machine so busy that none ends before the last begins can
    // make of them, hold 20 MiB at the cap. Without a cap each keeps
    // reading for its patience, 16 MiB and more.
    let cap = "max_answer_bytes = \"512 KiB\"";
    for (what, addr) in servers {
        let records = drive_capped(addr, (40, 40), "policy = \"none\"", cap).await;
        assert_eq!(records.len(), 40, "{what}");
        for r in &records {
            assert_eq!(r.outcome, ClientOutcome::Malformed, "{what}: {r:?}");
            assert_eq!(
                r.reason.as_deref(),
                Some(loadgen::OVERSIZED),
                "{what}: {r:?}"
            );
            assert_eq!(r.status, Some(200), "{what}: {r:?}");
        }
    }
    // Each attempt keeps at most the cap, and only while it reads. Without
    // it each kept 16 MiB until its patience, some 40 at once at this
    // rate: hundreds of MiB.
    let grew = peak_rss().saturating_sub(yardstick);
    assert!(
        grew < 32 << 20,
        "the peak RSS grew {} MiB past a normal run's",
        grew >> 20
    );
    eprintln!(
        "peak RSS past a normal run's: {:.1} MiB",
        grew as f64 / 1048576.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stops_sending_times_out() {
    let addr = hostile(|mut s: TcpStream| async move {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let event = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"abcd\"}}]}\n\n";
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        let _ = s.write_all(format!("{head}{chunk}").as_bytes()).await;
        // Then nothing, the connection open: no [DONE], no end.
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Timeout).await {
        assert_eq!(r.status, Some(200));
        let first = r.first_byte_us.expect("the first event arrived");
        assert!(first - r.sent_us < 300_000, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_delimited_body_is_a_valid_answer() {
    // HTTP/1.0 without a length, and HTTP/1.1 with `connection: close`:
    // the body ends when the server closes, which is valid framing.
    for version in ["HTTP/1.0", "HTTP/1.1"] {
        let addr = hostile(move |mut s: TcpStream| async move {
            let head = format!(
                "{version} 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
            );
            let _ = s.write_all(head.as_bytes()).await;
            // In two pieces, to be read as one body.
            let (a, b) = ANSWER.split_at(40);
            let _ = s.write_all(a.as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = s.write_all(b.as_bytes()).await;
            let _ = s.shutdown().await;
        })
        .await;
        for r in expect_all(addr, ClientOutcome::Ok).await {
            assert_eq!(r.tokens, 2, "{version}: {r:?}");
        }
    }
    // A close-delimited body that is not an answer is malformed, not ok.
    let addr = hostile(|mut s: TcpStream| async move {
        let _ = s
            .write_all(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"choices\":")
            .await;
    })
    .await;
    expect_all(addr, ClientOutcome::Malformed).await;
}

/// A gateway that sheds everything with this Retry-After value.
async fn shedding(retry_after: &'static str) -> SocketAddr {
    hostile(move |mut s: TcpStream| async move {
        let body = r#"{"error":{"message":"busy","type":"rate_limit"}}"#;
        let answer = format!(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {retry_after}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(answer.as_bytes()).await;
        let _ = s.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_retry_after_values_are_sheds_and_never_stall_a_retry() {
    // (header, what is recorded in retry_after_ms)
    let cases: [(&str, Option<u64>); 5] = [
        ("-5", None),
        ("1000000000000", Some(1_000_000_000_000_000)),
        ("1e300", None),
        ("Wed, 32 Foo 2015 25:61:00 GMT", None),
        ("Thu, 01 Jan 1970 00:00:00 GMT", Some(0)),
    ];
    for (value, want) in cases {
        let addr = shedding(value).await;
        // Honour Retry-After up to 60 s; beyond it (or without one) back off
        // briefly. Two attempts each: none may wait for the absurd value.
        let retry = "policy = \"retry_after\"\nmax_attempts = 2\ncap = \"60s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"";
        let records = drive(addr, 2, retry).await;
        assert_eq!(records.len(), 4, "{value}: {records:?}");
        for r in &records {
            assert_eq!(r.outcome, ClientOutcome::Shed, "{value}: {r:?}");
            assert_eq!(r.status, Some(429));
            assert_eq!(r.retry_after_ms, want, "{value}: {r:?}");
        }
        for retry in records.iter().filter(|r| r.attempt == 2) {
            let first = records
                .iter()
                .find(|r| r.id == retry.id && r.attempt == 1)
                .expect("the first attempt");
            let waited = retry.intended_us.saturating_sub(first.done_us);
            assert!(
                waited <= 250_000,
                "{value}: the retry waited {waited} µs: {first:?} -> {retry:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_never_ends_times_out_or_is_refused() {
    // Slowly: a header line every 100 ms, forever.
    let addr = hostile(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
        for i in 0.. {
            let line = format!("x-drip-{i}: {}\r\n", "a".repeat(20));
            if s.write_all(line.as_bytes()).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Timeout).await {
        assert_eq!(r.status, None, "the head never ended: {r:?}");
    }
    // Quickly: header lines as fast as they go; past the client's head
    // limit (64 KiB) the answer is refused at once, as not HTTP.
    let addr = hostile(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
        let line = format!("x-flood: {}\r\n", "a".repeat(1000));
        while s.write_all(line.as_bytes()).await.is_ok() {}
    })
    .await;
    for r in expect_all(addr, ClientOutcome::Malformed).await {
        assert!(r.done_us - r.sent_us < 500_000, "{r:?}");
    }
}
