//! A slow target (the fake provider serving half the offered rate): its
//! backlog grows and callers time out, while the load generator keeps its
//! connections within what the callers can hold; past its own bound (here
//! the open files it is given) requests wait in the client for a
//! connection: the wait is recorded as their `client_wait_us`, never as
//! send lag nor as time in the target, those never sent recorded so, and
//! the run says it. With a pool smaller than the concurrency the target
//! needs, the callers' wait shows in the client, and the target's queue
//! stays empty.

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

/// A target far slower than the callers expect (`time_in_system`): they
/// hold the connections a target answering as expected would keep, and
/// past them wait in the client, the wait theirs (in their latency, the
/// run valid), so the target is measured rather than flooded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_slower_than_expected_is_measured_not_flooded() {
    let scenario = r#"
[load]
seed = 5
send_lag_p99_max = "10s"
patience = { fixed = "1s" }
[[load.phases]]
duration = "1s"
rate = 1000
[load.request]
max_tokens = { fixed = 4 }
[load.clients]
time_in_system = "10ms"
"#;
    let r = rehearse(scenario, HOLDING).await;
    let bound = r.report.connection_bound;
    // 1,000/s x 10 ms x 4 + 256, where the patience would allow
    // 1,000/s x 1 s x 1.25 + 256 = 1,506.
    assert_eq!(bound.largest, 296);
    assert!(bound.most_open <= 296, "{bound:?}");
    let most = most_calls_at_once(&r.provider);
    assert!(most <= 300, "the provider had {most} calls at once");
    // Every caller held past its patience would have opened its own: a
    // thousand waited at once; most of them waited in the client instead.
    assert!(bound.waited > 300, "{bound:?}");
    assert_eq!(
        bound.waited_at_own_bound, 0,
        "the callers' bound: {bound:?}"
    );
    assert!(r.report.valid, "{:?}", r.report.notes);
    let waited = r.client.iter().filter(|c| c.client_wait_us > 0).count();
    assert!(waited as u64 >= bound.waited / 2, "{waited} of {bound:?}");
    let note = r.report.notes.join(" ");
    assert!(note.contains("the callers' own limits"), "{note}");
    assert!(note.contains("10 ms of expected time"), "{note}");
}

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
    // and were never in the target: they waited in the client to the end,
    // handed on when due.
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
        let waited = c.done_us - c.sent_us;
        assert!(c.client_wait_us.abs_diff(waited) <= 2, "{c:?}");
        assert!(
            !r.provider.iter().any(|p| p.id == c.id),
            "{} reached the target",
            c.id
        );
    }
    // Those that waited got a connection after it: the wait is in their
    // latency as client_wait_us, not in their send lag.
    let waited: Vec<_> = r
        .client
        .iter()
        .filter(|c| c.reason.is_none() && c.client_wait_us > 20_000)
        .collect();
    assert!(!waited.is_empty(), "no attempt was sent after a wait");
    for c in &waited {
        assert!(c.latency_us() >= c.client_wait_us, "{c:?}");
    }
    // Not its lateness (the send lag stays small), but its own limit: the
    // run could not open what its callers would have, and is invalid.
    let (lag, wait) = (&r.report.send_lag, &r.report.client_wait);
    assert!(
        lag.p99_us < wait.p50_us,
        "send lag {lag:?}, client wait {wait:?}"
    );
    assert_eq!(bound.waited_at_own_bound, bound.waited);
    assert!(!r.report.valid);
    assert!(
        r.client.iter().all(|c| !c
            .reason
            .as_deref()
            .is_some_and(|x| x.contains("open files"))),
        "no connect failed for want of a descriptor"
    );
    // Said in the run's notes and in summary.json.
    assert_eq!(r.report.notes.len(), 2, "{:?}", r.report.notes);
    assert_eq!(r.report.gave_out, Some("connections"));
    assert!(r.report.notes[1].starts_with("what gave out: connections"));
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

/// 20 ms a call and no ceiling: at 300 a second the callers need 6
/// connections at once.
const QUICK: &str = "[latency]\nttft = { fixed = \"20ms\" }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_smaller_than_the_target_needs_shows_as_the_clients_wait_not_the_targets_queue() {
    // 300 a second for 1 s over a pool of 4: it carries about 200 a
    // second, so a line of callers grows in the client and drains after.
    let scenario = r#"
[load]
seed = 5
send_lag_p99_max = "10s"
patience = { fixed = "5s" }
[[load.phases]]
duration = "1s"
rate = 300
[load.request]
max_tokens = { fixed = 4 }
[load.clients]
pool = 4
"#;
    let r = rehearse(scenario, QUICK).await;
    let bound = r.report.connection_bound;
    assert_eq!((bound.model, bound.largest), ("pool", 4), "{bound:?}");
    assert!(bound.most_open <= 4, "{bound:?}");
    assert_eq!(
        r.report.outcome(ClientOutcome::Ok).first_attempts,
        300,
        "the pool serves everyone in time"
    );
    // The target never holds more than the pool, and serves each call in
    // about its 20 ms: no queue there.
    let most = most_calls_at_once(&r.provider);
    assert!(most <= 4, "the provider had {most} calls at once");
    for p in &r.provider {
        let took = p.finished_us.unwrap_or(u64::MAX) - p.received_us;
        assert!(took < 250_000, "{p:?}");
    }
    // The callers' wait shows in the client: most waited, the longest a
    // good part of the backlog's drain, each in its latency.
    let waited: Vec<&ClientRecord> = r.client.iter().filter(|c| c.client_wait_us > 0).collect();
    assert!(waited.len() > 150, "{} waited", waited.len());
    let longest = waited.iter().map(|c| c.client_wait_us).max().unwrap();
    assert!(longest > 100_000, "the longest wait {longest} us");
    for c in &r.client {
        assert!(c.latency_us() >= c.client_wait_us, "{c:?}");
    }
    // Not in the send lag: the generator was on time.
    let lag = r.report.send_lag.p99_us;
    assert!(
        lag < longest / 4,
        "send lag p99 {lag} us, wait {longest} us"
    );
    assert_eq!(bound.waited, waited.len() as u64);
    assert_eq!(r.report.client_wait.count, waited.len() as u64);
    assert!(r.report.client_wait.max_us >= longest * 99 / 100);
    assert_eq!((bound.not_sent, bound.waited_at_own_bound), (0, 0));
    assert!(
        r.report.valid,
        "the callers' pool is theirs, not the generator's limit"
    );
    let note = r.report.notes.join("\n");
    assert!(note.contains("callers' own limits"), "{note}");
    assert!(note.contains("pool of 4"), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connect_rate_callers_wait_in_the_client_for_a_connection() {
    // 200 a second for 1 s against 20 ms calls (4 connections at once
    // would do), opening at most 10 connections a second: the first
    // arrivals wait for the few opened, none is lost, the run is valid.
    let scenario = r#"
[load]
seed = 9
send_lag_p99_max = "10s"
patience = { fixed = "5s" }
[[load.phases]]
duration = "1s"
rate = 200
[load.request]
max_tokens = { fixed = 4 }
[load.clients]
connect_rate = 10
"#;
    let r = rehearse(scenario, QUICK).await;
    let bound = r.report.connection_bound;
    assert_eq!(
        (bound.model, bound.connect_rate_per_s),
        ("per caller", Some(10.0))
    );
    assert_eq!(r.report.outcome(ClientOutcome::Ok).first_attempts, 200);
    let secs = r.report.elapsed_ms as f64 / 1000.0;
    let most = 2.0 + 10.0 * (secs + 0.1);
    assert!(
        (r.report.connections_opened as f64) <= most,
        "{} connections opened in {secs} s",
        r.report.connections_opened
    );
    assert!(r.report.client_wait.count > 0, "{:?}", r.report.client_wait);
    assert_eq!((bound.not_sent, bound.waited_at_own_bound), (0, 0));
    assert!(r.report.valid);
    assert!(
        r.report
            .notes
            .join("\n")
            .contains("at most 10 new connections a second"),
        "{:?}",
        r.report.notes
    );
}

/// A run that misses its schedule's bound says what gave out: here no
/// resource was refused, so the core (all of it used) or the machine
/// (other work held it); its CPU share is in summary.json either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_run_says_what_gave_out() {
    let scenario = r#"
[load]
send_lag_p99_max = "1us"
patience = { fixed = "1s" }
[[load.phases]]
duration = "500ms"
rate = 400
"#;
    let r = rehearse(scenario, "").await;
    assert!(!r.report.valid, "a 1 µs bound is missed");
    let what = r
        .report
        .gave_out
        .expect("an invalid run names what gave out");
    assert!(matches!(what, "core" | "machine"), "{what}");
    let share = r.report.cpu_share.expect("getrusage on Linux");
    assert!(share > 0.0 && share < 1.5, "{share}");
    let note = r.report.notes.last().unwrap();
    assert!(note.starts_with("what gave out: "), "{note}");
    let table = r.report.table();
    assert!(table.contains("(what gave out: "), "{table}");
}
