//! How a streamed answer's body arrived (`body_reads`, `longest_gap_us`):
//! the fake provider's stream, paced token by token, reaches the client in
//! about a read per token with gaps of about the provider's own; a relay
//! of our own that holds the stream back and sends it whole reaches it in
//! one or two reads, whatever the stream took upstream.

use std::net::SocketAddr;
use std::time::Duration;

use loadgen::{LoadOptions, LoadPlan, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use wire::{files, ClientOutcome, ClientRecord};

use crate::{read_client_records, rehearse};

/// Tokens in every answer, and the provider's pace between two.
const TOKENS: u64 = 20;
const PER_TOKEN: Duration = Duration::from_millis(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_relayed_as_it_is_made_arrives_in_many_reads() {
    let r = rehearse(
        r#"
[load]
seed = 11
[[load.phases]]
duration = "2s"
rate = 10
[load.request]
max_tokens = { fixed = 20 }
stream = 0.7
"#,
        &format!(
            "[completion_tokens]\nfixed = {TOKENS}\n[latency]\nttft = {{ fixed = \"20ms\" }}\n\
             per_token = {{ fixed = \"{}ms\" }}\n",
            PER_TOKEN.as_millis()
        ),
    )
    .await;
    assert_eq!(r.client.len(), 20);
    assert!(
        r.client.iter().all(|c| c.outcome == ClientOutcome::Ok),
        "{:?}",
        r.report.outcomes
    );
    let (streamed, whole): (Vec<&ClientRecord>, Vec<_>) = r.client.iter().partition(|c| c.stream);
    assert!(
        streamed.len() >= 5 && !whole.is_empty(),
        "{} streamed",
        streamed.len()
    );
    // An answer not streamed says nothing of how it arrived.
    for c in &whole {
        assert_eq!((c.body_reads, c.longest_gap_us), (None, None), "{c:?}");
    }
    // 20 tokens 20 ms apart: a read each (the usage and the end may come
    // with the last). A busy machine can hold the client up past a pause
    // and merge two reads, and stretch one gap: most streams keep at
    // least half their reads and a longest gap well under their length.
    let mut paced = 0;
    for c in &streamed {
        let reads = c.body_reads.expect("a streamed body's reads");
        let gap = c.longest_gap_us.expect("beside its reads");
        let first = c.first_byte_us.expect("a body came");
        let length = c.done_us - first;
        assert!(reads >= 3, "a paced stream in {reads} reads: {c:?}");
        assert!(gap <= length, "{c:?}");
        // The provider's 19 gaps of 20 ms make 380 ms.
        assert!(length >= 300_000, "{c:?}");
        if u64::from(reads) >= TOKENS / 2 && gap < length / 3 {
            paced += 1;
        }
    }
    eprintln!(
        "body reads: {:?}; longest gaps (µs): {:?}",
        streamed.iter().map(|c| c.body_reads).collect::<Vec<_>>(),
        streamed
            .iter()
            .map(|c| c.longest_gap_us)
            .collect::<Vec<_>>()
    );
    assert!(
        paced * 5 >= streamed.len() * 4,
        "{paced} of {} streams arrived paced",
        streamed.len()
    );
}

/// One OpenAI chat stream of [`TOKENS`] tokens, whole: the events, the
/// usage and the end.
fn whole_stream() -> String {
    let mut body = String::new();
    for i in 0..TOKENS {
        body += &format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"t{i} \"}}}}]}}\n\n");
    }
    body += &format!("data: {{\"choices\":[],\"usage\":{{\"completion_tokens\":{TOKENS}}}}}\n\n");
    body + "data: [DONE]\n\n"
}

/// How the relay holds the stream back.
#[derive(Clone, Copy)]
enum Holds {
    /// The head at once, then the body, chunked, in one write once the
    /// whole stream is in (a proxy that flushes headers but buffers).
    Body,
    /// Head and body in one write, with a length, once the whole stream
    /// is in (`Response(r.content)`).
    Everything,
}

/// A relay that reads each request on a connection and answers it with
/// the whole stream after `upstream` (the time the stream took to make).
async fn buffering_relay(holds: Holds, upstream: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                while read_request(&mut s).await {
                    if answer(&mut s, holds, upstream).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn answer(s: &mut TcpStream, holds: Holds, upstream: Duration) -> std::io::Result<()> {
    let body = whole_stream();
    const SSE: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";
    match holds {
        Holds::Body => {
            s.write_all(format!("{SSE}transfer-encoding: chunked\r\n\r\n").as_bytes())
                .await?;
            tokio::time::sleep(upstream).await;
            let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
            s.write_all(chunked.as_bytes()).await
        }
        Holds::Everything => {
            tokio::time::sleep(upstream).await;
            let whole = format!("{SSE}content-length: {}\r\n\r\n{body}", body.len());
            s.write_all(whole.as_bytes()).await
        }
    }
}

/// Reads one request (head and `content-length` body); false if the
/// client left first.
async fn read_request(s: &mut TcpStream) -> bool {
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
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Ten streamed attempts against `addr`; their records.
async fn drive(addr: SocketAddr) -> Vec<ClientRecord> {
    let scenario = r#"
[load]
seed = 5
patience = { fixed = "5s" }
[[load.phases]]
duration = "1s"
rate = 10
[load.request]
stream = 1.0
"#;
    let plan = LoadPlan::from_scenario_str(scenario, "relay.toml", std::path::Path::new("."))
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
    .expect("the run ends by itself")
    .expect("the run succeeds");
    read_client_records(&out.path().join(files::CLIENT_RECORDS))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_buffered_whole_arrives_in_one_or_two_reads() {
    // What the provider above takes to make the stream.
    let upstream = PER_TOKEN * (TOKENS as u32 - 1);
    for (holds, name) in [
        (Holds::Body, "head at once, body held"),
        (Holds::Everything, "all held"),
    ] {
        let records = drive(buffering_relay(holds, upstream).await).await;
        assert_eq!(records.len(), 10, "{name}");
        eprintln!(
            "{name}: body reads {:?}, longest gaps (µs) {:?}",
            records.iter().map(|c| c.body_reads).collect::<Vec<_>>(),
            records.iter().map(|c| c.longest_gap_us).collect::<Vec<_>>()
        );
        for c in &records {
            assert_eq!(
                (c.outcome, c.tokens, c.stream),
                (ClientOutcome::Ok, TOKENS, true),
                "{name}: {c:?}"
            );
            let reads = c.body_reads.expect("a streamed body's reads");
            assert!(reads <= 2, "{name}: {reads} reads: {c:?}");
            assert!(c.longest_gap_us.is_some(), "{name}: {c:?}");
            // The hold shows in the first byte, not in the reads' gaps.
            let first = c.first_byte_us.expect("a body came");
            assert!(first - c.sent_us >= 300_000, "{name}: {c:?}");
        }
    }
}
