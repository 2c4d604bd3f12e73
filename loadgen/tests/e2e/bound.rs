//! A slow target (the fake provider serving half the offered rate): its
//! backlog grows and callers time out, while the load generator keeps its
//! connections within what the callers can hold; past its own bound (here
//! the open files it is given) requests wait for a connection, and the
//! wait is the load generator's: counted as send lag, never as time in
//! the target, those never sent recorded so, and the run says it.

use std::path::Path;

use wire::ClientOutcome;

use super::*;

/// 10 calls at a time, 50 ms each: 200 a second, for 400 offered.
const HALF: &str = "[concurrency]\nceiling = 10\n[latency]\nttft = { fixed = \"50ms\" }\n";

/// 400 people a second for 2 s, each waiting `patience` (500 ms on
/// average): about 200 waiting at once against a slow target.
fn scenario(patience: &str) -> String {
    format!(
        r#"
[load]
seed = 3
send_lag_p99_max = "10s"
patience = {patience}
[[load.phases]]
duration = "2s"
rate = 400
[load.request]
max_tokens = {{ fixed = 4 }}
"#
    )
}

/// The most calls the provider had open at once: each holds a connection
/// of its own, so this is at most the connections open at once.
fn most_calls_at_once(provider: &[ProviderRecord]) -> usize {
    let mut edges: Vec<(u64, i32)> = provider
        .iter()
        .flat_map(|p| {
            let end = p.finished_us.or(p.hung_up_us).unwrap_or(p.received_us);
            [(p.received_us, 1), (end, -1)]
        })
        .collect();
    // Ends before starts at the same instant.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_is_measured_within_what_the_callers_hold() {
    let r = rehearse(&scenario("{ fixed = \"500ms\" }"), HALF).await;
    let bound = r.report.connection_bound;
    // 400/s x 0.5 s x 1.25 + 256.
    assert_eq!(bound.largest, 506);
    // The target's backlog grew and callers gave up: it, not the load
    // generator, is what gave out.
    let timed_out = r.report.outcome(ClientOutcome::Timeout).first_attempts;
    assert!(timed_out > 50, "{timed_out} timed out");
    assert!(r.report.outcome(ClientOutcome::Ok).first_attempts > 100);
    assert_eq!(
        (bound.waited, bound.not_sent),
        (0, 0),
        "within what the callers hold, nobody waits for a connection"
    );
    assert!(bound.most_open <= bound.largest, "{bound:?}");
    assert!(r.report.notes.is_empty(), "{:?}", r.report.notes);
}

/// Every call held 5 s, ten times the patience: each connection is freed
/// only as its caller gives up.
const HOLDING: &str = "[latency]\nttft = { fixed = \"5s\" }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_own_bound_requests_wait_the_wait_is_the_load_generators_and_it_is_said() {
    // Open files for 60 connections beyond those kept for the rest, each
    // freed only as its caller gives up: the others wait, and those of
    // little patience give up before one comes free.
    let patience = "{ uniform = { min = \"100ms\", max = \"900ms\" } }";
    let r = rehearse_with(Path::new("."), &scenario(patience), HOLDING, |o| {
        o.open_files = Some(256 + 60)
    })
    .await;
    let bound = r.report.connection_bound;
    assert_eq!(bound.largest, 60);
    assert_eq!(bound.most_open, 60, "{bound:?}");
    // Seen from the target: no more calls at once than connections, but
    // for the few hung up whose end it had not noticed yet when the next
    // connection's call arrived (it sees a hang-up when it next reads).
    let most = most_calls_at_once(&r.provider);
    assert!(most <= 63, "the provider had {most} calls at once");
    assert!(
        bound.not_sent > 100 && bound.waited > bound.not_sent,
        "{bound:?}"
    );
    // Those never sent are the load generator's, said in their reason,
    // and were never in the target: sent when they ended.
    let not_sent: Vec<_> = r
        .client
        .iter()
        .filter(|c| {
            c.reason
                .as_deref()
                .is_some_and(|x| x.starts_with(loadgen::NOT_SENT_AT_BOUND))
        })
        .collect();
    assert_eq!(not_sent.len() as u64, bound.not_sent);
    for c in &not_sent {
        assert_eq!(c.outcome, ClientOutcome::ConnectError);
        assert_eq!(c.sent_us, c.done_us, "{c:?}");
        assert!(
            !r.provider.iter().any(|p| p.id == c.id),
            "{} reached the target",
            c.id
        );
    }
    // Those that waited were sent when they got a connection: the wait
    // is in their send lag.
    let late = r
        .client
        .iter()
        .filter(|c| c.reason.is_none() && c.sent_us > c.intended_us + 20_000)
        .count();
    assert!(late > 0, "no attempt was sent after a wait");
    assert!(
        r.client.iter().all(|c| !c
            .reason
            .as_deref()
            .is_some_and(|x| x.contains("open files"))),
        "no connect failed for want of a descriptor"
    );
    // Said in the run's notes and in summary.json.
    assert_eq!(r.report.notes.len(), 1, "{:?}", r.report.notes);
    let note = &r.report.notes[0];
    assert!(
        note.contains("bound on open connections was reached"),
        "{note}"
    );
    assert!(note.contains("open-files limit of 316"), "{note}");
    let summary = std::fs::read_to_string(r.out.path().join(files::LOAD_SUMMARY)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(v["connection_bound"]["largest"], 60);
    assert_eq!(v["connection_bound"]["not_sent"], bound.not_sent);
    assert!(
        v["notes"][0].as_str().unwrap().contains("bound"),
        "{summary}"
    );
}

/// People whose patience has ended by the time the load generator comes
/// to them (none at all here: it always comes at or after their due time)
/// are not sent: sending would only hang up at once on a target that
/// gets a call for a caller already gone. Said so, their own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn those_come_to_after_their_patience_are_not_sent_and_it_is_said() {
    let scenario = r#"
[load]
send_lag_p99_max = "10s"
patience = { fixed = "0ms" }
[[load.phases]]
duration = "500ms"
rate = 40
"#;
    let r = rehearse(scenario, "").await;
    assert_eq!(r.client.len(), 20);
    for c in &r.client {
        assert_eq!(c.outcome, ClientOutcome::ConnectError, "{c:?}");
        assert_eq!(c.reason.as_deref(), Some(loadgen::NOT_SENT_LATE));
        assert!(loadgen::was_not_sent(c.reason.as_deref().unwrap()));
        assert_eq!(c.sent_us, c.done_us);
    }
    assert!(
        r.provider.is_empty(),
        "the target got {} calls",
        r.provider.len()
    );
    let sent: u64 = r.report.timeline.iter().map(|s| s.sent).sum();
    assert_eq!(sent, 0, "counted sent in load-seconds.csv");
    assert_eq!(r.report.notes.len(), 1, "{:?}", r.report.notes);
    assert!(
        r.report.notes[0].contains("20 attempts"),
        "{:?}",
        r.report.notes
    );
}
