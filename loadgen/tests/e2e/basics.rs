//! A plain run: every person served, both sides agree on ids and counts.

use std::collections::HashSet;

use wire::{files, ClientOutcome};

use crate::rehearse;

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
