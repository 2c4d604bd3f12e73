//! Replaying a recorded log: its rows' times, sped up, and their columns
//! (model, stream, max_tokens) reach the target; multiply adds copies.

use std::collections::HashMap;

use wire::ClientOutcome;

use crate::rehearse_in;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_log_is_replayed_faster_and_multiplied() {
    let dir = tempfile::tempdir().unwrap();
    // 20 requests 100 ms apart (2 s of log); every 4th streamed with a
    // different model.
    let mut log = String::from("timestamp,model,stream,max_tokens\n");
    for i in 0..20 {
        let (model, stream) = if i % 4 == 0 {
            ("claude-like", "true")
        } else {
            ("gpt-4o-mini", "false")
        };
        log.push_str(&format!(
            "{}.{},{model},{stream},7\n",
            1_700_000_000 + i / 10,
            i % 10
        ));
    }
    std::fs::write(dir.path().join("traffic.csv"), log).unwrap();
    let r = rehearse_in(
        dir.path(),
        r#"
[load]
seed = 5
[load.replay]
file = "traffic.csv"
speedup = 2.0
multiply = 2.0
jitter = "200ms"
"#,
        "",
    )
    .await;
    assert_eq!(r.client.len(), 40, "two copies of each row");
    assert!(r.client.iter().all(|c| c.outcome == ClientOutcome::Ok));
    let t0 = r.client.iter().map(|c| c.intended_us).min().unwrap();
    let span = r.client.iter().map(|c| c.intended_us).max().unwrap() - t0;
    // 1.9 s of log at twice the speed, copies jittered by up to 0.1 s of run time.
    assert!((850_000..=1_060_000).contains(&span), "span {span} µs");
    let streamed = r.client.iter().filter(|c| c.stream).count();
    assert_eq!(streamed, 10);
    let models: HashMap<&str, usize> = r.provider.iter().fold(HashMap::new(), |mut m, p| {
        *m.entry(p.model.as_str()).or_default() += 1;
        m
    });
    assert_eq!(models.get("claude-like"), Some(&10), "{models:?}");
    assert!(r.provider.iter().all(|p| p.max_tokens == Some(7)));
}
