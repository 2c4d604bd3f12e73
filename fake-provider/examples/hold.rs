//! Benchmark client: holds N delayed calls open at once against a running
//! fake provider (a separate process), and reports the provider's memory per
//! call and how far the observed latency strays from the scripted one.
//!
//! Usage: hold BASE_URL PROVIDER_PID N SCRIPTED_MS
//!
//! It opens N connections first, then starts one call on each, spread over
//! five seconds; the calls are held for the scripted latency (longer than
//! the spread, so all are in flight at once), and each is timed from its
//! send to its complete response. Memory per call counts its connection.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn main() {
    // Before the runtime's threads start, so that growing the descriptor
    // table to 10,000 connections does not stall this client (and skew its
    // timings) at each doubling.
    wire::presize_fd_table();
    // One thread: the client is pinned to one core, where a second worker
    // only adds hand-offs between threads to its timings.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(hold());
}

async fn hold() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: hold BASE_URL PROVIDER_PID N SCRIPTED_MS");
        std::process::exit(2);
    }
    let base = args[1].trim_start_matches("http://").to_string();
    let pid = args[2].clone();
    let n: usize = args[3].parse().expect("N");
    let scripted = Duration::from_millis(args[4].parse().expect("SCRIPTED_MS"));

    let baseline = rss_kib(&pid);
    let body = Bytes::from_static(
        br#"{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hold on [rehearse:id=hold]"}]}"#,
    );
    // All N connections are opened first, so the schedule below is only
    // sends: connecting (and the provider accepting) while calls arrive
    // made the arrivals, and so the answers, come in bursts.
    let mut senders = Vec::with_capacity(n);
    for _ in 0..n {
        let stream = tokio::net::TcpStream::connect(&base)
            .await
            .expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        senders.push(sender);
    }
    // Each call is sent at its own moment, spread over the spread, and
    // timed from its send. With the scripted latency longer than the
    // spread, all N are held at once.
    let start = Instant::now();
    let spread = Duration::from_secs(5);
    let mut tasks = Vec::with_capacity(n);
    for (i, mut sender) in senders.into_iter().enumerate() {
        let at = start + spread.mul_f64(i as f64 / n as f64);
        let body = body.clone();
        let host = base.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            sender.ready().await.ok()?;
            let req = hyper::Request::post("/v1/chat/completions")
                .header("host", host)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .ok()?;
            let sent = Instant::now();
            let resp = sender.send_request(req).await.ok()?;
            let status = resp.status();
            let _ = resp.into_body().collect().await;
            Some((status.as_u16(), sent.elapsed(), i))
        }));
    }
    // Sample the provider while every call is in flight.
    tokio::time::sleep_until((start + spread + (scripted - spread) / 2).into()).await;
    let peak = rss_kib(&pid);
    let mut lat = Vec::with_capacity(n);
    let mut by_call = Vec::with_capacity(n);
    let mut bad = 0;
    for t in tasks {
        match t.await.ok().flatten() {
            Some((200, took, i)) => {
                let late = (took.as_secs_f64() - scripted.as_secs_f64()) * 1000.0;
                lat.push(late);
                by_call.push((late, i));
            }
            _ => bad += 1,
        }
    }
    by_call.sort_by(|a, b| b.0.total_cmp(&a.0));
    let worst: Vec<String> = by_call
        .iter()
        .take(10)
        .map(|(late, i)| format!("#{i}:{late:.2}"))
        .collect();
    if lat.is_empty() {
        eprintln!("no call succeeded");
        std::process::exit(1);
    }
    lat.sort_by(f64::total_cmp);
    let per_call = (peak.saturating_sub(baseline)) as f64 * 1024.0 / n as f64;
    println!(
        "calls={n} failed={bad} scripted_ms={}",
        scripted.as_millis()
    );
    println!("provider_rss_kib baseline={baseline} in_flight={peak}");
    println!("bytes_per_call_incl_connection={per_call:.0}");
    println!(
        "latency_minus_scripted_ms p50={:.3} p90={:.3} p99={:.3} max={:.3} min={:.3}",
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        lat[lat.len() - 1],
        lat[0]
    );
    println!("worst (call index: ms late) {}", worst.join(" "));
    provider_view(&base, scripted).await;
}

/// The same error as the provider's own records see it: finished minus
/// admitted minus the scripted latency (the caller's view above adds both
/// sides' network and scheduling).
async fn provider_view(host: &str, scripted: Duration) {
    let Ok(stream) = tokio::net::TcpStream::connect(host).await else {
        return;
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return;
    };
    tokio::spawn(conn);
    let Ok(req) = hyper::Request::get("/_fake/records")
        .header("host", host)
        .body(Full::new(Bytes::new()))
    else {
        return;
    };
    let Ok(resp) = sender.send_request(req).await else {
        return;
    };
    let Ok(body) = resp.into_body().collect().await else {
        return;
    };
    let mut late: Vec<f64> = body
        .to_bytes()
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter_map(|r| Some((r["finished_us"].as_u64()?, r["admitted_us"].as_u64()?)))
        .map(|(fin, adm)| (fin - adm) as f64 / 1000.0 - scripted.as_secs_f64() * 1000.0)
        .collect();
    if late.is_empty() {
        return;
    }
    late.sort_by(f64::total_cmp);
    println!(
        "provider_records finished_minus_admitted_minus_scripted_ms p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        pct(&late, 0.5),
        pct(&late, 0.9),
        pct(&late, 0.99),
        late[late.len() - 1]
    );
}
