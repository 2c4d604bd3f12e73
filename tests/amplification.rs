//! End to end: `retry_amplification` (issue 42, item 4) on
//! scenarios/retry-storm.toml as shipped (a quota that serves 4 of 20
//! requests/s in its peak, the bounded reference gateway cooling its one
//! upstream down for each Retry-After): every check passes, one provider
//! call for each attempt that reached the provider; with the `retry-storm`
//! fault (each 429 sent again at once, up to 5 more times) the same
//! gateway makes about 4 calls for each, and `retry_amplification` fails
//! with that ratio. Each run is the scenario's 45 s at five times: 9 s.
//! (scenarios/failover.toml, the reference gateway failing over with
//! cooldowns, passes it too: tests/failover.rs.)

use crate::common;

use common::{json, on_schedule, one_at_a_time, rehearse, scratch, text};

use std::path::{Path, PathBuf};

/// `rehearse run scenarios/retry-storm.toml --time-scale 5` with `sets`,
/// made again once if the load generator fell behind: its exit code,
/// report.json and run directory. The send-lag bound is 20 ms (0.1
/// scenario seconds at five times, against arrivals 50 ms apart and a
/// patience of 10 s) instead of 5 ms: a late send moves a request by that
/// much, which no check here turns on.
fn retry_storm(tag: &str, sets: &[&str]) -> (Option<i32>, serde_json::Value, PathBuf) {
    let _one = one_at_a_time();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/retry-storm.toml");
    let (code, report, dir, out) = on_schedule(|attempt| {
        let dir = scratch("amplification", &format!("{tag}-{attempt}")).join("run");
        let mut cmd = rehearse();
        cmd.arg("run")
            .arg(&scenario)
            .args(["--time-scale", "5", "--no-progress", "--out"])
            .arg(&dir)
            .args(["--set", "load.send_lag_p99_max=\"20ms\""]);
        for set in sets {
            cmd.args(["--set", set]);
        }
        let out = cmd.output().unwrap();
        let report = dir.join("report.json");
        assert!(report.exists(), "no report.json: {}", text(&out));
        (
            (out.status.code(), json(&report), dir.clone(), text(&out)),
            dir,
        )
    });
    assert_ne!(
        report["harness"]["valid"], false,
        "the run is invalid; it proves nothing:\n{out}"
    );
    (code, report, dir)
}

fn check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
}

/// timeline.csv's `column`, summed over the run.
fn column_sum(dir: &Path, column: &str) -> u64 {
    let csv = std::fs::read_to_string(dir.join("timeline.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let k = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no column {column}: {header:?}"));
    lines
        .map(|l| l.split(',').nth(k).unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn retry_storm_passes_with_a_gateway_that_passes_each_429_on_once() {
    let (code, report, dir) = retry_storm("reference", &[]);
    for c in report["checks"].as_array().unwrap() {
        let status = c["status"].as_str().unwrap();
        assert!(
            status == "pass" || (status == "skipped" && c["detail"] != ""),
            "{}: {status}: {}",
            c["id"],
            c["detail"]
        );
    }
    assert_eq!(code, Some(0), "{report}");
    let v = check(&report, "retry_amplification");
    assert_eq!(v["status"], "pass", "{v}");
    let ratio = v["figure"]["value"].as_f64().unwrap();
    assert!((0.9..=1.1).contains(&ratio), "{v}");
    assert_eq!(v["figure"]["unit"], "calls per attempt");
    // The mechanism: the quota refused, the gateway cooled down (its own
    // refusals while it did), and passed the provider's 429s on once.
    assert_eq!(check(&report, "cooldown_honoured")["status"], "pass");
    assert!(report["counts"]["shed"].as_u64().unwrap() > 100, "{report}");
    assert!(
        report["counts"]["upstream_refused"].as_u64().unwrap() > 20,
        "{report}"
    );
    // timeline.csv's columns hold the ratio: every call of the run joined
    // an attempt, counted in its attempt's second.
    let calls = column_sum(&dir, "provider_calls");
    let dispatched = column_sum(&dir, "dispatched");
    assert_eq!(calls, report["provider"]["calls"].as_u64().unwrap());
    assert_eq!(calls as f64 / dispatched as f64, ratio);
    assert_eq!(
        column_sum(&dir, "sent"),
        report["counts"]["sent"].as_u64().unwrap()
    );
    // And the traffic chart says it per second when pointed at.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("provider calls for them: 1.00 calls per attempt</title>"),
        "no calls per attempt in the traffic chart's tooltips"
    );
}

#[test]
fn retry_storm_fails_a_gateway_that_retries_each_429_five_times() {
    let (code, report, _) = retry_storm("fault", &["gateway.reference.fault=\"retry-storm\""]);
    let v = check(&report, "retry_amplification");
    assert_eq!(v["status"], "fail", "{v}");
    // About 4 calls for each attempt that reached the provider (a run on
    // an idle machine: 3.97), with room for a busy one, where the bucket
    // refills during a storm more often and ends it sooner.
    let ratio = v["figure"]["value"].as_f64().unwrap();
    assert!((2.5..=6.0).contains(&ratio), "{v}");
    let short = v["short"].as_str().unwrap();
    assert!(short.ends_with("calls per attempt (bound 1.2)"), "{short}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("its own retries multiply the load"),
        "{detail}"
    );
    // Most of the calls were made for nothing: refused.
    assert!(
        v["observed"]
            .as_str()
            .unwrap()
            .contains("reached a provider inside a Retry-After window it had announced"),
        "{v}"
    );
    assert_eq!(code, Some(1), "{report}");
}
