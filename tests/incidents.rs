//! The incidents retold, end to end through the binary, at time and quota
//! scales that fit in well under a minute each. They assert mechanisms and
//! ratios, not the full-scale minutes (the scenarios' comments hold those):
//! - scenarios/brownout-pool.toml: the backlog of a brownout sits in the
//!   gateway's own connection pool, its "provider latency" metric blames
//!   the provider, and an account limit after the recovery keeps it
//!   draining for more than twice the slowdown;
//! - scenarios/policies.toml: four policies against one slow upstream in
//!   one `rehearse compare`.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch, text};

use std::path::{Path, PathBuf};

use wire::{ClientOutcome, ClientRecord};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// One column of timeline.csv, by its header.
fn column(dir: &Path, name: &str) -> Vec<f64> {
    let csv = std::fs::read_to_string(dir.join("timeline.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<_> = lines.next().unwrap().split(',').collect();
    let k = header.iter().position(|h| *h == name).unwrap();
    lines
        .map(|l| l.split(',').nth(k).unwrap().parse().unwrap_or(0.0))
        .collect()
}

/// Seed 000's brownout at time scale 100 and quota scale 10 (about 40 s,
/// 400 requests/s): a naive gateway with a pool of 100 (10 here), the
/// provider 6x slower from minute 3 to 15, then capped at 44 requests/s by
/// its account. Made again once if its load generator fell behind
/// ([`on_schedule`]), against a send-lag bound of 20 ms (2 scenario
/// seconds: what is judged here spans minutes) instead of the default 5.
/// At time scale 150 a debug build sending 600 requests a second fell
/// behind twice beside a release build (send lag p99 438 and 29 ms), and
/// such runs put the peak at minute 35 or later; at quota scale 20 a pool
/// of 5 and a cap of 2.2 requests a second once did so on a valid run.
#[test]
fn the_brownout_backlog_sits_in_the_pool_and_outlives_the_slowdown_twice_over() {
    let _one = one_at_a_time();
    let (out, dir) = on_schedule(|attempt| {
        let dir = scratch("incidents", &format!("brownout-{attempt}"));
        let out = rehearse()
            .arg("run")
            .arg(scenario("brownout-pool.toml"))
            .args(["--time-scale", "100", "--set", "scenario.quota_scale=10"])
            .args(["--set", "load.send_lag_p99_max=20ms"])
            .arg("--out")
            .arg(&dir)
            .arg("--no-progress")
            .output()
            .unwrap();
        ((out, dir.clone()), dir)
    });
    // The naive gateway fails its checklist; the run itself is valid.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json(&dir.join("report.json"));
    let checks = report["checks"].as_array().unwrap();
    let harness = checks.iter().find(|c| c["id"] == "harness_valid").unwrap();
    assert_eq!(harness["status"], "pass", "{harness}");

    // The harness's split: the wait was the gateway's, not the provider's.
    let latency = &report["latency_ms"];
    let queue_wait = f(&latency["queue_wait"]["p50"]);
    let provider = f(&latency["provider"]["p50"]);
    assert!(
        queue_wait >= 5.0 * provider,
        "queue wait p50 {queue_wait} ms against provider p50 {provider} ms"
    );

    // The gateway's own "provider latency" metric blames the provider.
    let metrics = std::fs::read_to_string(dir.join("gateway-metrics.txt")).unwrap();
    let own_ms = 1000.0
        * harness::histogram_quantile(&metrics, "gateway_upstream_seconds", 0.5)
            .expect("the gateway's upstream histogram");
    assert!(
        own_ms >= 5.0 * provider,
        "the gateway's metric {own_ms} ms against the provider's records {provider} ms"
    );
    assert!(
        !metrics.contains("gateway_pool_wait_seconds"),
        "the pool's wait is not metered"
    );
    let notes = report["notes"].to_string();
    assert!(notes.contains("gateway_upstream_seconds"), "{notes}");

    // The backlog inside the gateway (the pool's waiters, callers gone or
    // not) peaks near the recovery at minute 15 and drains at 4 a second
    // at full scale: still above a tenth of its peak more than twice the
    // 12-minute slowdown later, and gone before the end.
    let depth = column(&dir, "gateway_depth");
    let (peak_at, peak) =
        depth.iter().copied().enumerate().fold(
            (0, 0.0),
            |best, (t, d)| if d > best.1 { (t, d) } else { best },
        );
    assert!(
        (840..=1_100).contains(&peak_at),
        "peak {peak} at {peak_at} s"
    );
    // The plan's arithmetic: about 9,600 at full scale, 960 here.
    assert!((600.0..1_300.0).contains(&peak), "peak {peak}");
    let last_high = depth.iter().rposition(|&d| d > peak / 10.0).unwrap();
    let drain_s = last_high as f64 - 900.0;
    assert!(
        drain_s >= 2.0 * 720.0,
        "drained {drain_s} s after the recovery"
    );
    // (Gone 31 s before the records end at time scale 100 beside a release
    // build, where 150 on a quiet machine left 60: any margin shows it.)
    assert!(
        last_high + 15 < depth.len(),
        "the backlog drains before the end: {last_high} of {}",
        depth.len()
    );

    // Answers written to closed sockets: nearly every caller who gave up
    // was answered later, to nobody.
    let counts = &report["counts"];
    let (late, timeout, offered) = (
        f(&counts["late"]),
        f(&counts["timeout"]),
        f(&counts["offered"]),
    );
    assert!(late >= 0.9 * timeout && late >= 0.5 * offered, "{counts}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seed 001's four policies in one `rehearse compare` at time scale 18 and
/// quota scale 4 (about 45 s), the 400 MiB budget scaled with the account.
/// (At the scenario's quota scale 2 a debug build sends 180 requests of
/// 0.6 MB a second, and on a busy machine fell so far behind that the
/// unbounded gateway never held enough to die.)
#[test]
fn four_policies_against_a_slow_upstream_in_one_compare() {
    let _one = one_at_a_time();
    let dir = scratch("incidents", "policies");
    let out = rehearse()
        .arg("compare")
        .arg(scenario("policies.toml"))
        .args(["--set", "scenario.quota_scale=4"])
        .arg("--out")
        .arg(&dir)
        .arg("--no-progress")
        .output()
        .unwrap();
    // Every variant fails a check (callers time out in all four). A busy
    // machine can make a run invalid (its load generator behind): the
    // mechanisms below are asserted on any run, and the load generator's
    // own timings on a valid one (so it is not made again: four variants
    // take most of a minute).
    assert!(matches!(out.status.code(), Some(1 | 3)), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in [
        "unbounded",
        "timeout only",
        "limit 50 + timeout",
        "aimd + timeout",
    ] {
        assert!(stdout.contains(name), "{stdout}");
    }
    let compare = json(&dir.join("compare.json"));
    let variant = |name: &str| {
        compare["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variant {name}: {compare}"))
            .clone()
    };
    let (unbounded, timeout_only, limit, aimd) = (
        variant("unbounded"),
        variant("timeout only"),
        variant("limit 50 + timeout"),
        variant("aimd + timeout"),
    );
    let valid = |v: &serde_json::Value| v["checks"]["harness_valid"] == "pass";
    // Unbounded: it dies, losing what it held. Whether it dies a second
    // time after its restart is a matter of seconds at this quota scale:
    // what is left of the slow minute after the restart delay fills it to
    // its ceiling or just short of it (twice on most runs; once on a valid
    // CI run, 137 lost). The loop itself is the scenario's full-scale
    // figure (its comments); here, the death and its loss.
    assert!(f(&unbounded["crashes"]) >= 1.0, "{unbounded}");
    assert!(f(&unbounded["lost"]) > 0.0, "{unbounded}");
    // Timeout only: never dies, and the slow minute's callers all wait
    // the whole timeout to be told. Its peak sits near the budget (116 of
    // 124 MiB at quota scale 4; 211-213 of 216 at 2), so a run whose load
    // generator fell behind (an invalid run: its requests came in bursts)
    // can cross it; such a run proves nothing, as its own checklist says.
    if valid(&timeout_only) {
        assert_eq!(f(&timeout_only["crashes"]), 0.0, "{timeout_only}");
    } else {
        eprintln!("timeout only: run invalid, its crash count not judged: {timeout_only}");
    }
    // The slow minute's callers: none is told before the timeout. On a run
    // that fell behind, the callers of the minute's last seconds were
    // sent in bursts and queued behind the stuck calls; some got a slot
    // only once the minute ended and were answered at once, before the
    // timeout (22 to 46 of 300 on a busy machine, 2026-12-05, at 5cb70a5
    // as after): most of the minute still waits it out. How soon after it
    // they are told, and how fast limit 50 refuses, are timings of the
    // load generator's own: judged on a run that kept its schedule only
    // (one that fell behind fired its callers' timers up to 50% late and
    // read refusals tens of milliseconds late).
    let ended = slow_window(&dir, &timeout_only);
    let timeout_us = 15e6 / 18.0;
    // From the caller's arrival (its patience runs from there).
    let took = |a: &ClientRecord| (a.done_us - a.intended_us) as f64;
    let told_early = ended
        .iter()
        .filter(|a| took(a) < timeout_us * 0.999)
        .count();
    let early_share = if valid(&timeout_only) { 0.05 } else { 0.25 };
    assert!(
        told_early as f64 <= early_share * ended.len() as f64 && ended.len() > 200,
        "{told_early} of {} told before the timeout",
        ended.len()
    );
    if valid(&timeout_only) {
        let late = ended.iter().filter(|a| took(a) > timeout_us * 1.1).count();
        assert!(
            late as f64 <= 0.05 * ended.len() as f64,
            "{late} of {} told later than T + 10%",
            ended.len()
        );
    }
    // Limit 50 + timeout: most of the slow minute refused, at once: within
    // a tenth of the timeout (83 ms), where a caller that waited for it
    // would take all of it. (5 ms held on a quiet machine; four
    // rehearsals at once on a debug build took up to tens of ms.)
    let slow = slow_window(&dir, &limit);
    let fast_enough = |a: &&ClientRecord| {
        !valid(&limit) || ((a.done_us - a.on_the_wire_us()) as f64) < timeout_us / 10.0
    };
    let refused = slow
        .iter()
        .filter(|a| a.outcome == ClientOutcome::Shed)
        .filter(fast_enough)
        .count();
    assert!(
        refused as f64 >= 0.6 * slow.len() as f64,
        "{refused} of {} refused (within a tenth of the timeout, on a valid run)",
        slow.len()
    );
    // AIMD: at most half the timeouts of the fixed limit.
    let timeouts = |v: &serde_json::Value| f(&v["timeout"]) + f(&v["gateway_timeout"]);
    assert!(
        timeouts(&aimd) <= timeouts(&limit) / 2.0,
        "aimd {aimd}\nlimit {limit}"
    );
    let html = std::fs::read_to_string(dir.join("compare.html")).unwrap();
    assert!(html.contains("aimd + timeout"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first attempts of a variant's run that arrived in the slow minute
/// (scenario seconds 30 to 90, at time scale 18).
fn slow_window(dir: &Path, variant: &serde_json::Value) -> Vec<ClientRecord> {
    let run = dir.join(variant["dir"].as_str().unwrap());
    let start_us = json(&run.join("run.json"))["expectations"]["start_us"]
        .as_u64()
        .unwrap();
    let (from, until) = (start_us + 30_000_000 / 18, start_us + 90_000_000 / 18);
    std::fs::read_to_string(run.join("client.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<ClientRecord>(l).unwrap())
        .filter(|a| a.attempt == 1 && (from..until).contains(&a.intended_us))
        .collect()
}
