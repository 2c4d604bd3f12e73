//! The bare target ([`loadgen::serve_bare`]) as a program, for the load
//! generator's throughput benchmark (`bench/loadgen/run.sh`,
//! `bench/side-by-side.sh`): every request, whatever its path, is read to
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

use std::net::SocketAddr;

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
        let listener = loadgen::bind_bare(addr)?;
        println!("listening on http://{}", listener.local_addr()?);
        loadgen::serve_bare(listener, tokio_util::sync::CancellationToken::new()).await;
        Ok(())
    })
}
