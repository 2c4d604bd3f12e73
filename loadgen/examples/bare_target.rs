//! A bare hyper 1.x server for the load generator's throughput benchmark
//! (`bench/loadgen/run.sh`): every request, whatever its path, is read to
//! its end and answered with the same OpenAI chat completion (16
//! completion tokens, keep-alive), and nothing else is done. The fake
//! provider records every call and draws every answer, which costs it
//! about as much CPU per request as the load generator spends; at 40,000
//! requests a second on one core it is the slower of the two, and a
//! benchmark of the load generator against it measures the provider.
//! This target has room to spare at 80,000 a second.
//!
//! ```sh
//! cargo run --release -p loadgen --example bare_target -- 127.0.0.1:18281
//! ```
//!
//! One runtime thread (pin it with `taskset`); it prints
//! `listening on http://ADDR` once it serves.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

/// The one answer: an OpenAI chat completion as the fake provider writes it.
const ANSWER: &str = r#"{"id":"chatcmpl-bare","object":"chat.completion","created":1796133226,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"sun cat map red oak sky tea ink fox bay elm owl jar fig ivy pen ","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":16,"completion_tokens":16,"total_tokens":32},"system_fingerprint":"fp_bare"}"#;

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // The body is read (a real server would), then dropped.
    let _ = req.into_body().collect().await;
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
        .expect("a static response is valid"))
}

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()
        .map_err(std::io::Error::other)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // A deep accept queue (the kernel caps it at net.core.somaxconn):
        // tokio's default of 1,024 overflowed when an open loop opened a
        // few hundred connections at once, and each dropped handshake cost
        // its request a retransmission (200 ms to 1 s).
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(65_535)?;
        println!("listening on http://{}", listener.local_addr()?);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer))
                    .await;
            });
        }
    })
}
