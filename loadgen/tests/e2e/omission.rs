//! No coordinated omission: while the target stalls for 2 s, requests keep
//! being sent on schedule and their latency, timed from the intended send,
//! shows the stall.

use wire::ClientOutcome;

use crate::rehearse;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_a_stall_are_sent_on_time_and_show_it() {
    let r = rehearse(
        r#"
[load]
send_lag_p99_max = "100ms"
[[load.phases]]
duration = "4s"
rate = 50
"#,
        r#"
[latency]
ttft = { fixed = "5ms" }
[[timeline]]
name = "stall"
from = "1s"
until = "3s"
latency = { ttft = { fixed = "2s" } }
"#,
    )
    .await;
    assert_eq!(r.client.len(), 200);
    assert!(r.client.iter().all(|c| c.outcome == ClientOutcome::Ok));
    // Sent on schedule, stall or not: every attempt within 100 ms of its
    // intended time (a generator that waited for answers would be up to
    // 2 s late), and the run is valid. The bound is loose because the test
    // may share a busy machine; the benchmark measures the real figure.
    for c in &r.client {
        assert!(c.send_lag_us() < 100_000, "{c:?}");
    }
    assert!(r.report.valid, "{}", r.report.table());
    // Evenly spaced intended times: the schedule did not bend.
    let mut intended: Vec<u64> = r.client.iter().map(|c| c.intended_us).collect();
    intended.sort_unstable();
    assert!(intended
        .windows(2)
        .all(|w| w[1] - w[0] == 20_000 || w[1] - w[0] == 20_001 || w[1] - w[0] == 19_999));
    // About 2 s × 50/s arrived during the stall, as scheduled.
    let stalled: Vec<_> = r.provider.iter().filter(|p| p.phase == "stall").collect();
    assert!(
        (98..=102).contains(&stalled.len()),
        "{} during the stall",
        stalled.len()
    );
    for p in &stalled {
        let c = r.client.iter().find(|c| c.id == p.id).unwrap();
        let l = c.latency_us();
        assert!((2_000_000..3_000_000).contains(&l), "{} took {l} µs", c.id);
    }
    let stalled_max = r.report.outcome(ClientOutcome::Ok).latency.max_us;
    assert!(
        stalled_max >= 2_000_000,
        "the stall shows in the histogram: {stalled_max}"
    );
    for c in r
        .client
        .iter()
        .filter(|c| !stalled.iter().any(|p| p.id == c.id))
    {
        assert!(c.latency_us() < 1_000_000, "{c:?}");
    }
}
