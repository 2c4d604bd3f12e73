//! A listening socket with a deep accept queue, for the servers an open
//! loop drives (the fake provider, the reference gateway).
//!
//! tokio's `TcpListener::bind` asks the kernel for a queue of 1,024
//! handshakes not yet accepted. An open loop whose callers find every
//! connection busy (the server stalled for a few milliseconds) opens
//! thousands at once; past 1,024 the kernel drops the handshake, and the
//! caller's connect is retried a second later (1 s, then 3 s): a hiccup of
//! milliseconds turned into seconds of latency and more connections
//! behind them. Measured at 50,000/s against `rehearse provider` on one
//! core: a run that opened 6,184 connections in a stall had a latency p99
//! of 188 ms and a maximum of 1.9 s.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, ToSocketAddrs};

/// The accept queue asked for; the kernel caps it at
/// `net.core.somaxconn` (4,096 by default since Linux 5.4).
pub(crate) const ACCEPT_QUEUE: u32 = 65_535;

/// Binds the first address `addr` resolves to, with SO_REUSEADDR (as
/// tokio's bind sets it) and an accept queue of 65,535 (`ACCEPT_QUEUE`).
pub async fn listen(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(addr).await? {
        match listen_on(addr) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_QUEUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// More handshakes than tokio's default queue holds complete while
    /// nothing accepts them: with a queue of 1,024 the 1,026th connect
    /// would wait for the kernel's retransmission and time out here.
    #[tokio::test]
    async fn handshakes_queue_past_tokio_s_default() {
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        assert!(
            somaxconn >= 1_500,
            "net.core.somaxconn is {somaxconn}: this kernel caps every accept queue below what the test needs"
        );
        let listener = listen("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let opened = tokio::task::spawn_blocking(move || {
            let mut held = Vec::new();
            for i in 0..1_400 {
                match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    Ok(s) => held.push(s),
                    Err(e) => return Err(format!("connect {i} failed: {e}")),
                }
            }
            Ok(held.len())
        })
        .await
        .unwrap();
        assert_eq!(opened, Ok(1_400));
        drop(listener);
    }
}
