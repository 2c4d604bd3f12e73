//! SCENARIOS.md #4, the small pool demonstration, compressed 4x the way
//! `REHEARSE_TIME_SCALE=4` would: a provider serving 12 calls at a time,
//! 0.2 s per call, 7x slower from 2 s in; 40 req/s for 10 s; a gateway of 8
//! calls, a queue of 11 and a 2 s wait budget. Bounded serves about a third
//! and sheds the rest at once; naive serves everything, late, and keeps
//! draining long after the last arrival.

use std::time::{Duration, Instant};

use reference_gateway::{GatewayConfig, Mode};

use crate::support::*;

const SCALE: f64 = 4.0;
const REQUESTS: usize = 400;

fn scaled(d: Duration) -> Duration {
    Duration::from_secs_f64(d.as_secs_f64() / SCALE)
}

struct Outcome {
    answers: Vec<Answer>,
    load_lasted: Duration,
    last_answer: Duration,
}

/// Plays the scenario's load against `gw` (open loop: each request spawned
/// at its own time), slowing the provider 7x two (scaled) seconds in.
async fn play(
    gw: &reference_gateway::GatewayHandle,
    provider: &fake_provider::ProviderHandle,
) -> Outcome {
    let client = client();
    let base = gw.base_url();
    let gap = scaled(Duration::from_millis(25)); // 40 req/s
    let slow_at = scaled(Duration::from_secs(2));
    let start = tokio::time::Instant::now();
    let clock = Instant::now();
    let mut tasks = Vec::with_capacity(REQUESTS);
    let mut slowed = false;
    for i in 0..REQUESTS {
        let due = start + gap * i as u32;
        if !slowed && due >= start + slow_at {
            tokio::time::sleep_until(start + slow_at).await;
            provider.set_phase(Some("slow")).unwrap();
            slowed = true;
        }
        tokio::time::sleep_until(due).await;
        let id = format!("{}-{i}", gw.mode());
        let task = spawn_chat(&client, &base, &id, chat_body(&id, 40, 5, false), None);
        tasks.push(async move {
            let a = task.await.unwrap().unwrap();
            (a, clock.elapsed())
        });
    }
    let load_lasted = clock.elapsed();
    let mut answers = Vec::new();
    let mut last_answer = Duration::ZERO;
    for t in tasks {
        let (a, at) = t.await;
        last_answer = last_answer.max(at);
        answers.push(a);
    }
    Outcome {
        answers,
        load_lasted,
        last_answer,
    }
}

async fn demo_provider() -> fake_provider::ProviderHandle {
    provider(
        r#"
[latency]
ttft = { fixed = "50ms" }
per_token = { fixed = "0ms" }
[completion_tokens]
fixed = 5
[concurrency]
ceiling = 12
overflow = "queue"
[[timeline]]
name = "slow"
from = "1h"
until = "2h"
latency = { multiplier = 7.0 }
"#,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_serves_a_third_and_sheds_the_rest_where_naive_drains_for_long() {
    let _alone = SUSTAINED_LOAD.lock().await;
    bounded_in_time(async {
        // bounded: the scenario's gateway, time-scaled.
        let provider = demo_provider().await;
        let mut cfg = GatewayConfig::new(Mode::Bounded, provider.base_url());
        cfg.bounded.concurrency = 8;
        cfg.bounded.queue = 11;
        cfg.bounded.wait_budget = Duration::from_secs(2);
        let gw = gateway(cfg.time_scaled(SCALE)).await;
        let run = play(&gw, &provider).await;
        let count = |s: u16| run.answers.iter().filter(|a| a.status == s).count();
        let (served, shed, stale) = (count(200), count(429), count(503));
        eprintln!(
            "bounded: {served} served, {shed} shed (429), {stale} stale (503); load {:?}, last answer {:?}",
            run.load_lasted, run.last_answer
        );
        assert_eq!(served + shed + stale, REQUESTS, "nothing else: no errors, no hangs");
        assert!(
            (REQUESTS / 5..=REQUESTS / 2).contains(&served),
            "about a third served: {served} served, {shed} shed, {stale} stale"
        );
        assert!(shed >= REQUESTS * 2 / 5, "most of the rest shed: {shed}");
        let snap = gw.snapshot();
        assert_eq!(snap.shed as usize, shed);
        assert_eq!(snap.stale_drops as usize, stale);
        // No provider call for anything shed or dropped.
        until(|| provider.stats().in_flight == 0).await;
        assert_eq!(provider.records().len(), served);
        gw.shutdown().await;
        provider.shutdown().await;

        // naive: the same load, no bound.
        let provider = demo_provider().await;
        let gw = gateway(GatewayConfig::new(Mode::Naive, provider.base_url())).await;
        let run = play(&gw, &provider).await;
        assert!(run.answers.iter().all(|a| a.status == 200), "naive serves everything");
        eprintln!(
            "naive: {} served; load {:?}, last answer {:?}",
            run.answers.len(),
            run.load_lasted,
            run.last_answer
        );
        // 12 calls at a time, 0.35 s each once slow: ~34 req/s against 160
        // offered. The backlog outlives the load by several times its length.
        assert!(
            run.last_answer > run.load_lasted * 2,
            "the backlog drains long after the last arrival: load {:?}, last answer {:?}",
            run.load_lasted,
            run.last_answer
        );
        assert_eq!(gw.snapshot().shed, 0);
        gw.shutdown().await;
        provider.shutdown().await;
    })
    .await;
}
