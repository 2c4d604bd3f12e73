//! A plain run: every person served, both sides agree on ids and counts.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fake_provider::{FakeProvider, ProviderConfig};
use loadgen::{LoadOptions, LoadPlan, Target};
use tokio_util::sync::CancellationToken;
use wire::{files, ClientOutcome};

use crate::{read_client_records, rehearse};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_run_is_joined_by_id_and_written_out() {
    let r = rehearse(
        r#"
[scenario]
name = "basics"
[load]
seed = 3
send_lag_p99_max = "100ms"
[[load.phases]]
duration = "2s"
rate = 50
[load.request]
prompt_tokens = { uniform = { min = 10, max = 40 } }
max_tokens = { fixed = 16 }
stream = 0.5
"#,
        "[completion_tokens]\nfixed = 8\n[latency]\nttft = { fixed = \"20ms\" }\n",
    )
    .await;
    assert_eq!(r.report.people, 100);
    assert_eq!(r.client.len(), 100);
    assert!(
        r.client.iter().all(|c| c.outcome == ClientOutcome::Ok),
        "{:?}",
        r.report.outcomes
    );
    assert!(r.client.iter().all(|c| c.tokens == 8), "tokens from usage");
    let streamed = r.client.iter().filter(|c| c.stream).count();
    assert!((30..=70).contains(&streamed), "{streamed} streamed");
    assert_eq!(r.report.ttft_stream_ok.count as usize, streamed);
    let client_ids: HashSet<_> = r.client.iter().map(|c| c.id.as_str()).collect();
    let provider_ids: HashSet<_> = r.provider.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(client_ids.len(), 100, "one id per person");
    assert_eq!(client_ids, provider_ids);
    for c in &r.client {
        assert!(c.intended_us <= c.sent_us && c.sent_us <= c.done_us);
        let fb = c.first_byte_us.expect("a body came");
        assert!(c.sent_us <= fb && fb <= c.done_us);
        // 20 ms of provider latency, timed from the intended send.
        assert!(c.latency_us() >= 20_000, "{c:?}");
    }
    assert!(r.report.valid, "{}", r.report.table());
    let offered: u64 = r.report.timeline.iter().map(|s| s.offered).sum();
    assert_eq!(offered, 100);
    assert_eq!(r.report.timeline.last().unwrap().outstanding, 0);
    for f in [files::LOAD_SUMMARY, files::LOAD_SECONDS, files::CLIENT_HLOG] {
        assert!(r.out.path().join(f).exists(), "{f} written");
    }
    // The harness's per-second file is not the load generator's to write.
    assert!(!r.out.path().join(files::TIMELINE).exists());
    let seconds = std::fs::read_to_string(r.out.path().join(files::LOAD_SECONDS)).unwrap();
    assert!(seconds.starts_with("second,offered,sent,"), "{seconds}");
    // Whole lines only, every one a record.
    let records = std::fs::read(r.out.path().join(files::CLIENT_RECORDS)).unwrap();
    assert_eq!(records.last(), Some(&b'\n'));
    assert_eq!(
        records.iter().filter(|&&b| b == b'\n').count(),
        r.client.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_dialect_streams_and_counts_tokens() {
    let r = rehearse(
        r#"
[load]
[[load.phases]]
duration = "1s"
rate = 20
[load.request]
dialect = "anthropic"
model = "claude-3-5-haiku-latest"
stream = 1.0
padding_kb = { fixed = 4 }
"#,
        "[completion_tokens]\nfixed = 5\n",
    )
    .await;
    assert_eq!(r.client.len(), 20);
    assert!(
        r.client
            .iter()
            .all(|c| c.outcome == ClientOutcome::Ok && c.stream && c.tokens == 5),
        "{:?}",
        r.client.first()
    );
    // The padding reached the provider as prompt tokens (4 KiB ≈ 1,000 tokens).
    assert!(
        r.provider.iter().all(|p| p.prompt_tokens > 1000),
        "{:?}",
        r.provider[0].prompt_tokens
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_opened_are_counted_and_capped() {
    // 50 people over a second, each answered after 200 ms: about ten at
    // once, on connections that come back and are reused.
    let scenario = |cap: &str| {
        format!(
            r#"
[load]
seed = 5
send_lag_p99_max = "100ms"
{cap}
[[load.phases]]
duration = "1s"
rate = 50
[load.request]
max_tokens = {{ fixed = 4 }}
"#
        )
    };
    let provider = "[latency]\nttft = { fixed = \"200ms\" }\n";
    let free = rehearse(&scenario(""), provider).await;
    assert_eq!(free.report.people, 50);
    let opened = free.report.connections_opened;
    eprintln!("uncapped: {opened} connections opened");
    assert!(
        (8..=35).contains(&opened),
        "uncapped: {opened} connections for about 10 at once"
    );
    let capped = rehearse(&scenario("max_connections = 3"), provider).await;
    assert!(capped.client.iter().all(|c| c.outcome == ClientOutcome::Ok));
    assert_eq!(capped.report.connections_opened, 3);
    let summary = std::fs::read_to_string(capped.out.path().join(files::LOAD_SUMMARY)).unwrap();
    assert!(summary.contains("\"connections_opened\": 3"), "{summary}");
}

/// A fake provider's timeline started by the load's `on_start` runs from
/// the load's `t = 0`, however long after the provider started the load
/// began: a phase of the first 400 ms (every call refused 503) meets every
/// call of a 300 ms load begun 700 ms after the provider bound, which a
/// timeline running from the bind would have left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_timeline_starts_with_the_load() {
    let config = ProviderConfig::from_toml(
        "[[timeline]]\nname = \"down\"\nfrom = \"0s\"\nuntil = \"400ms\"\nfaults = { errors = { \"503\" = 1.0 } }\n",
        "provider.toml",
    )
    .unwrap();
    let handle = FakeProvider::new(config).bind("127.0.0.1:0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let plan = LoadPlan::from_scenario_str(
        "[load]\nsend_lag_p99_max = \"10s\"\n[load.retry]\nmax_attempts = 1\n[[load.phases]]\nduration = \"300ms\"\nrate = 50\n",
        "scenario.toml",
        Path::new("."),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = Target::parse(&handle.base_url()).unwrap();
    let mut opts = LoadOptions::new(out.path());
    let told = Arc::new(AtomicU64::new(0));
    let (count, start) = (told.clone(), handle.timeline_starter());
    opts.on_start = Some(loadgen::OnStart(Arc::new(move |at| {
        count.fetch_add(1, Ordering::Relaxed);
        start(at);
    })));
    loadgen::run(&plan, &target, &opts, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(told.load(Ordering::Relaxed), 1, "told once");
    let client = read_client_records(&out.path().join(files::CLIENT_RECORDS));
    assert!(client.len() >= 10, "{} attempts", client.len());
    assert!(
        client.iter().all(|c| c.status == Some(503)),
        "every call in the phase: {:?}",
        client.iter().map(|c| c.status).collect::<Vec<_>>()
    );
    handle.shutdown().await;
}
