//! End-to-end tests of a run stopped before its end (SIGTERM, as Ctrl-C
//! stops one): its checks are judged over the scenario time it covered.
//! The stop is kept in run.json (`expectations.stopped_us`); an overload
//! the run never reached is not judged, and one it stopped inside is
//! judged over the part it covered, not as if its whole window had run.
//! Real processes and sockets on 127.0.0.1 only.

use crate::common;

use common::{json, one_at_a_time, rehearse, scratch, Running};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A calm 20 s at half what the provider serves (8 slots of 500 ms:
/// 16/s), then 60 s at twice it: the overload begins 20 scenario seconds
/// in, 4 s of the rehearsal at time scale 5.
const SCENARIO: &str = r#"
[scenario]
name = "stopped"
description = "a calm 20 s, then twice what the provider serves for 60 s"
seed = 7

[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "500ms" }
per_token = { fixed = "0ms" }
[provider.concurrency]
ceiling = 8
overflow = "queue"

[gateway.reference]
mode = "bounded"
bounded = { concurrency = 8, queue = 8, wait_budget = "2s" }

[load]
patience = { fixed = "10s" }

[[load.phases]]
name = "calm"
duration = "20s"
rate = 8

[[load.phases]]
name = "peak"
duration = "60s"
rate = 32

[load.request]
prompt_tokens = { fixed = 100 }
max_tokens = { fixed = 10 }
"#;

/// Runs the scenario at time scale 5, stops it with SIGTERM `after` the
/// load's first record was written, and returns its run directory once
/// the partial report is out.
fn stopped(name: &str, after: Duration) -> std::path::PathBuf {
    let _turn = one_at_a_time();
    let dir = scratch("partial", name);
    let scenario = dir.join("stopped.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = dir.join("run");
    let child = rehearse()
        .arg("run")
        .arg(&scenario)
        .args(["--time-scale", "5", "--no-progress", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    // The load has begun once an attempt's record is written.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::metadata(out.join("client.jsonl")).is_ok_and(|m| m.len() > 0) {
        assert!(Instant::now() < deadline, "the load did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(after);
    Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = running.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the run did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3), "a partial run is not a pass");
    out
}

/// The check `id` of a report.
fn check(report: &serde_json::Value, id: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
        .clone()
}

/// The stop and the overload as run.json keeps them, in seconds of the
/// rehearsal since its start: (stopped, overload from, overload to).
fn stop_and_overload(dir: &Path) -> (f64, f64, f64) {
    let e = &json(&dir.join("run.json"))["expectations"];
    let start = e["start_us"].as_u64().unwrap();
    let s = |v: &serde_json::Value| (v.as_u64().unwrap() - start) as f64 / 1e6;
    let stopped = e
        .get("stopped_us")
        .unwrap_or_else(|| panic!("no stopped_us in {e}"));
    (s(stopped), s(&e["overload"][0]), s(&e["overload"][1]))
}

/// Stopped in the calm before the overload: nothing that reads the
/// overload is judged, and each check says why (not "0 answers in the
/// 12 s overload").
#[test]
fn a_run_stopped_before_its_overload_says_so_instead_of_judging_it() {
    let dir = stopped("before", Duration::from_millis(1_000));
    let (stop, from, _) = stop_and_overload(&dir);
    assert!(
        stop < from,
        "stopped at {stop} s, the overload began at {from} s"
    );
    let report = json(&dir.join("report.json"));
    assert_eq!(report["partial"], true);
    assert_eq!(report["verdict"], "invalid");
    for id in ["goodput", "shed_onset", "drain"] {
        let c = check(&report, id);
        assert_eq!(c["status"], "skipped", "{c}");
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the run stopped at ")
                && detail.contains(", before the overload began at 4 s"),
            "{id}: {detail}"
        );
    }
}

/// Stopped inside the overload: `goodput` counts the answers of the part
/// it covered over that part, and the bounded gateway, answering at
/// capacity there, passes it (over the whole 12 s window it would read a
/// quarter of its rate, and fail); the drain after the overload was never
/// seen.
#[test]
fn a_run_stopped_inside_its_overload_is_judged_over_the_part_it_covered() {
    let dir = stopped("inside", Duration::from_millis(7_000));
    let (stop, from, to) = stop_and_overload(&dir);
    assert!(
        from < stop && stop < to,
        "stopped at {stop} s, the overload from {from} s to {to} s"
    );
    let report = json(&dir.join("report.json"));
    let goodput = check(&report, "goodput");
    let detail = goodput["detail"].as_str().unwrap();
    assert!(
        detail.contains("of the overload the run covered (the run stopped at "),
        "{detail}"
    );
    assert_eq!(goodput["status"], "pass", "{goodput}");
    let drain = check(&report, "drain");
    assert_eq!(drain["status"], "skipped", "{drain}");
    assert!(
        drain["detail"]
            .as_str()
            .unwrap()
            .contains("before the overload ended at 16 s: the drain after it was never seen"),
        "{drain}"
    );
}
