//! The floor of any extra hop: a TCP relay with no logic at all, for the
//! overhead benchmark (bench/gateway/run.sh) to compare the gateway with.
//!
//! ```text
//! cargo run --release -p reference-gateway --example tcp_relay -- 127.0.0.1:0 127.0.0.1:8080
//! ```
//! Prints `listening on http://ADDR`, then copies bytes both ways between
//! each accepted connection and a new connection to the target, on one
//! worker thread (as the benchmark runs the gateway).

use std::io::Write as _;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(target)) = (args.next(), args.next()) else {
        eprintln!("usage: tcp_relay LISTEN_ADDR TARGET_ADDR");
        std::process::exit(2);
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    loop {
        let (mut inbound, _) = listener.accept().await?;
        let target = target.clone();
        tokio::spawn(async move {
            let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}
