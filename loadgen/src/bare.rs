//! The bare target: a hyper server that answers every request, whatever
//! its path, with the same OpenAI chat completion (16 completion tokens,
//! keep-alive) once it has read the request's body, and does nothing else.
//! It is what the load generator is measured against (the side-by-side
//! benchmark, `rehearse calibrate --rig`): the fake provider records every
//! call and draws every answer, which costs it about as much CPU per
//! request as the generator spends, so a rate measured against it would
//! be the provider's.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

/// The one answer: an OpenAI chat completion as the fake provider writes it.
const ANSWER: &str = r#"{"id":"chatcmpl-bare","object":"chat.completion","created":1796133226,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"sun cat map red oak sky tea ink fox bay elm owl jar fig ivy pen ","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":16,"completion_tokens":16,"total_tokens":32},"system_fingerprint":"fp_bare"}"#;

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // The body is read (a real server would), then dropped.
    let _ = req.into_body().collect().await;
    let mut response = Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// Binds `addr` with a deep accept queue (the kernel caps it at
/// net.core.somaxconn): tokio's default of 1,024 overflowed when an open
/// loop opened a few hundred connections at once, and each dropped
/// handshake cost its request a retransmission (200 ms to 1 s).
pub fn bind_bare(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(65_535)
}

/// Serves the bare target on `listener` until `stop`, each connection a
/// task of the current runtime.
pub async fn serve_bare(listener: TcpListener, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, most likely: wait, as a server
                // under load does, rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let stop = stop.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(answer));
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// The bare target on a thread of its own (one runtime thread, as the
/// benchmark pins it to one core), bound to `addr`; it serves until
/// `stop`. Returns where it listens.
pub fn spawn_bare(addr: SocketAddr, stop: CancellationToken) -> std::io::Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("bare-target".into())
        .spawn(move || {
            let bound = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|rt| {
                    let listener = rt.block_on(async { bind_bare(addr) })?;
                    Ok((rt, listener))
                });
            match bound {
                Ok((rt, listener)) => {
                    let _ = tx.send(listener.local_addr());
                    rt.block_on(serve_bare(listener, stop));
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })?;
    rx.recv().map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bare_target_answers_a_chat_completion_and_stops() {
        let stop = CancellationToken::new();
        let at = spawn_bare("127.0.0.1:0".parse().unwrap(), stop.clone()).unwrap();
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut conn = tokio::net::TcpStream::connect(at).await.unwrap();
        conn.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
        )
        .await
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 16);
        stop.cancel();
        // Stopped: nothing accepts there any more (the listener is dropped
        // once the serving loop returns).
        let mut refused = false;
        for _ in 0..50 {
            if tokio::net::TcpStream::connect(at).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(refused, "the bare target still accepts after its stop");
    }
}
