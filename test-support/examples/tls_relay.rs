//! A TLS (or plain) relay in front of a server on loopback, for
//! `bench/tls/run.sh`: makes a private CA and a certificate for
//! `localhost` (test_support::tls), writes the CA's PEM, and relays every
//! connection to the upstream until its time is up.
//!
//! ```sh
//! cargo run --release -p test-support --example tls_relay -- \
//!     --upstream 127.0.0.1:18391 --listen 127.0.0.1:18392 --ca-out ca.pem --for 60
//! ```
//! `--plain` relays without TLS (the same path, for comparison). On SIGTERM
//! or at the end it says how many connections it accepted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use test_support::tls::{serve, TestCa};

fn main() {
    let mut upstream: Option<SocketAddr> = None;
    let mut listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut ca_out = None;
    let mut plain = false;
    let mut seconds = 60u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--upstream" => upstream = value().parse().ok(),
            "--listen" => listen = value().parse().unwrap_or_else(|_| usage("bad --listen")),
            "--ca-out" => ca_out = Some(value()),
            "--for" => seconds = value().parse().unwrap_or_else(|_| usage("bad --for")),
            "--plain" => plain = true,
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    let upstream = upstream.unwrap_or_else(|| usage("--upstream ADDR is needed"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let acceptor = if plain {
            None
        } else {
            let ca = TestCa::new();
            if let Some(path) = &ca_out {
                std::fs::write(path, &ca.ca_pem).expect("write the CA's PEM");
            }
            Some(tokio_rustls::TlsAcceptor::from(ca.server.clone()))
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .expect("bind the relay");
        eprintln!(
            "relay ({}) on {} to {upstream} for {seconds} s",
            if plain { "plain" } else { "TLS" },
            listener.local_addr().expect("an address")
        );
        let accepted = Arc::new(AtomicUsize::new(0));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::time::timeout(
                Duration::from_secs(seconds),
                serve(listener, acceptor, upstream, accepted.clone()),
            ) => {}
            _ = term.recv() => {}
        }
        eprintln!(
            "relay ({}): {} connections accepted",
            if plain { "plain" } else { "TLS" },
            accepted.load(Ordering::SeqCst)
        );
    });
}

fn usage(why: &str) -> ! {
    eprintln!("tls_relay: {why}\nusage: tls_relay --upstream ADDR [--listen ADDR] [--ca-out FILE] [--plain] [--for SECS]");
    std::process::exit(2)
}
