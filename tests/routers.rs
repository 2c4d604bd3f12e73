//! A router teams put in front of self-hosted inference workers,
//! rehearsed: vllm-router 0.1.17 (PyPI `vllm-router`, a Rust router in a
//! Python wheel; `.ci/run` installs it under `target/vllm-router`, or where
//! `VLLM_ROUTER_DIR` says) over two fake providers playing vLLM workers, as
//! `gateways/vllm-router/` ships it: one worker 5x slower for 7 s, then the
//! other down (connections refused) for 7 s, 40 requests a second against
//! the 32 the two serve, the router at a shedding configuration.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch};

use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where vllm-router is installed: `VLLM_ROUTER_DIR`, else
/// `target/vllm-router`.
fn router_dir() -> PathBuf {
    match std::env::var_os("VLLM_ROUTER_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("target/vllm-router"),
    }
}

/// The calls each worker received in each scenario second, from
/// timeline.csv: (second, worker-a, worker-b).
fn calls_per_second(dir: &Path) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string(dir.join("timeline.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (t, a, b) = (col("t"), col("calls_worker-a"), col("calls_worker-b"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<f64>().unwrap_or(0.0) as u64;
            (n(t), n(a), n(b))
        })
        .collect()
}

/// The router's verdicts, each for its reason: its refusals carry no
/// Retry-After (`retry_after` fails), a full queue and a wait past its
/// timeout both answer 408 (`refusals_legible` fails), most of them come
/// after a wait (`stale_share` fails), and it keeps sending a share of the
/// calls to the slow worker (`failover` fails: its health check asks
/// /health, which the slow worker passes); the worker that goes away is
/// taken out at once (no call reaches it while it refuses connections);
/// its retries cost little (`retry_amplification` passes) and it loses
/// nobody. The scenario's 20 s at time scale 2 (the router's queue timeout
/// divided by run.sh): about 20 s with the router's start.
#[test]
fn vllm_router_sheds_illegibly_and_keeps_calling_a_slow_worker() {
    let launcher = router_dir().join("vllm_router/launch_router.py");
    assert!(
        launcher.exists(),
        "this test needs vllm-router: python3 -m pip install --target {} vllm-router==0.1.17 (.ci/run installs it)",
        router_dir().display()
    );
    let _one = one_at_a_time();
    let dir = scratch("routers", "vllm-router");
    let (out, out_dir) = on_schedule(|attempt| {
        let out_dir = dir.join(format!("run-{attempt}"));
        let out = rehearse()
            .current_dir(repo())
            .env("VLLM_ROUTER_DIR", router_dir())
            .args([
                "run",
                "gateways/vllm-router/scenario.toml",
                "--time-scale",
                "2",
                "--no-progress",
                "--out",
            ])
            .arg(&out_dir)
            .output()
            .unwrap();
        ((out, out_dir.clone()), out_dir)
    });
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    let check = |id: &str| {
        rep["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}: {stdout}"))
            .clone()
    };
    assert_eq!(rep["harness"]["valid"], true, "{stdout}");
    for (id, status) in [
        ("retry_after", "fail"),
        ("refusals_legible", "fail"),
        ("stale_share", "fail"),
        ("failover", "fail"),
        ("retry_amplification", "pass"),
        ("no_silent_loss", "pass"),
    ] {
        assert_eq!(check(id)["status"], status, "{id}: {}\n{stdout}", check(id));
    }
    let failover = check("failover");
    assert!(
        failover["short"].as_str().unwrap().contains("worker-a"),
        "{failover}"
    );
    // Its refusals are its own, all 408, none with a Retry-After.
    let client: Vec<serde_json::Value> = std::fs::read_to_string(out_dir.join("client.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refused: Vec<_> = client.iter().filter(|c| c["status"] == 408).collect();
    assert!(refused.len() > 50, "{} refusals\n{stdout}", refused.len());
    assert!(refused.iter().all(|c| c["retry_after_ms"].is_null()));
    // The timelines run from the load's start: worker-a serves at its
    // slow pace from 2 s to 9 s (its 4 calls at a time of 1.25 s: about 3
    // a second, against about 16 before), and worker-b, down from 11 s to
    // 18 s, gets no call while it refuses connections (a second of room
    // at each end).
    let seconds = calls_per_second(&out_dir);
    let sum = |from: u64, to: u64, which: usize| {
        seconds
            .iter()
            .filter(|(t, _, _)| (from..to).contains(t))
            .map(|s| if which == 0 { s.1 } else { s.2 })
            .sum::<u64>()
    };
    assert!(sum(0, 2, 0) > 2 * sum(3, 8, 0) / 5, "{seconds:?}");
    assert!(sum(3, 8, 0) < 5 * 8, "worker-a not slowed: {seconds:?}");
    assert!(sum(0, 10, 1) > 50, "{seconds:?}");
    assert_eq!(
        sum(12, 17, 1),
        0,
        "calls reached the down worker: {seconds:?}"
    );
}
