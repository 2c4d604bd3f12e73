//! Hostile clients from raw sockets: connect, send some bytes, then idle,
//! drip or flood, and report what the server did about it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What an abuser got back.
#[derive(Debug)]
pub struct Ending {
    /// The bytes read (a response, if the server answered).
    pub bytes: Vec<u8>,
    /// The server closed (EOF or reset).
    pub closed: bool,
    /// From connecting to the end of the read.
    pub elapsed: Duration,
}

impl Ending {
    /// The status of the response read, if one began.
    pub fn status(&self) -> Option<u16> {
        let text = std::str::from_utf8(self.bytes.get(..12)?).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.trim().parse().ok()
    }
    /// Returns true if and only if the server answered 4xx or closed
    /// without answering.
    pub fn refused(&self) -> bool {
        matches!(self.status(), Some(400..=499)) || (self.bytes.is_empty() && self.closed)
    }
}

/// How an abuser goes on after its first bytes.
#[derive(Clone)]
pub enum Then {
    /// Nothing more, the connection held open.
    Idle,
    /// One byte (`a`) at this interval, forever.
    Drip(Duration),
    /// This chunk, again and again, as fast as the server reads.
    Flood(Vec<u8>),
}

/// Connects, writes `first`, goes on as `then` says, and reads until a
/// whole response head has arrived, the server closes, or `within`.
pub async fn abuse(addr: SocketAddr, first: Vec<u8>, then: Then, within: Duration) -> Ending {
    let start = Instant::now();
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        if wr.write_all(&first).await.is_err() {
            return;
        }
        loop {
            let res = match &then {
                Then::Idle => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(())
                }
                Then::Drip(every) => {
                    tokio::time::sleep(*every).await;
                    wr.write_all(b"a").await
                }
                Then::Flood(chunk) => wr.write_all(chunk).await,
            };
            if res.is_err() {
                return;
            }
        }
    });
    let mut bytes = Vec::new();
    let mut closed = false;
    let mut buf = vec![0u8; 16 * 1024];
    let read = async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    bytes.extend_from_slice(&buf[..n]);
                    if bytes.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    writer.abort();
    Ending {
        bytes,
        closed,
        elapsed: start.elapsed(),
    }
}

/// The head of a chat completion request announcing `content_length` bytes.
pub fn chat_head(content_length: usize) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {content_length}\r\n\r\n"
    )
    .into_bytes()
}
