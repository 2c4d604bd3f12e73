//! End to end: scenarios/failover.toml as shipped (a primary that slows 7x
//! for two minutes and is then throttled for one, a smaller secondary, the
//! reference gateway routing by priority with cooldowns) passes at
//! `--time-scale 30`, `failover`, `cooldown_honoured` and
//! `retry_amplification` among its checks,
//! and gives the same verdicts at `--time-scale 20`; the same gateway with
//! `cooldowns = false` calls the primary inside the Retry-After windows it
//! announced and fails `cooldown_honoured` (and `failover`: every request
//! goes to the troubled primary first); weighted routing without health
//! keeps its share of the calls on the troubled primary and fails
//! `failover`. The same scenario with the primary's slow phase made a down
//! phase: one that refuses connections is failed over like a slow one, and
//! one that hangs, behind a gateway without cooldowns, fails `failover`.
//! Each run is the scenario's nine minutes: 18 s at thirty times, 27 s at
//! twenty.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Rehearsal {
    code: Option<i32>,
    stdout: String,
    report: serde_json::Value,
    dir: PathBuf,
}

impl Rehearsal {
    fn check(&self, id: &str) -> &serde_json::Value {
        self.report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == id))
            .unwrap_or_else(|| panic!("no check {id} in {}", self.report))
    }

    fn status(&self, id: &str) -> &str {
        self.check(id)["status"].as_str().unwrap_or("")
    }

    fn figure(&self, id: &str) -> f64 {
        self.check(id)["figure"]["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("{id} has no figure: {}", self.check(id)))
    }

    /// Every check's (id, status), in report order.
    fn statuses(&self) -> Vec<(String, String)> {
        self.report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_string(),
                    c["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// `rehearse run scenarios/failover.toml` at `time_scale` with `sets`,
/// made again once if the load generator fell behind; panics when the run
/// is invalid (it would prove nothing). The send-lag bound is 20 ms (0.6
/// scenario seconds at thirty times, against 20 s of patience and a 5 s
/// upstream timeout) instead of 5 ms: a late send moves a request by that
/// much, which no check here turns on.
fn failover(tag: &str, time_scale: u32, sets: &[&str]) -> Rehearsal {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/failover.toml");
    failover_of(&scenario, tag, time_scale, sets)
}

/// scenarios/failover.toml with the primary's slow phase (1m to 3m) made a
/// down phase of `mode` instead, written to a scratch file.
fn failover_down(mode: &str) -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/failover.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    let slow = "latency = { multiplier = 7.0 }\n";
    assert!(text.contains(slow), "failover.toml's slow phase changed");
    let path = scratch("failover", &format!("down-{mode}")).join("failover-down.toml");
    std::fs::write(&path, text.replace(slow, &format!("down = \"{mode}\"\n"))).unwrap();
    path
}

/// [`failover`] of the scenario at `scenario`.
fn failover_of(scenario: &Path, tag: &str, time_scale: u32, sets: &[&str]) -> Rehearsal {
    let _one = one_at_a_time();
    let run = on_schedule(|attempt| {
        let dir = scratch("failover", &format!("{tag}-{attempt}"));
        let out_dir = dir.join("run");
        let mut cmd = rehearse();
        cmd.arg("run")
            .arg(scenario)
            .args([
                "--time-scale",
                &time_scale.to_string(),
                "--no-progress",
                "--out",
            ])
            .arg(&out_dir)
            .args(["--set", "load.send_lag_p99_max=\"20ms\""]);
        for set in sets {
            cmd.args(["--set", set]);
        }
        let started = Instant::now();
        let out = cmd.output().unwrap();
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            elapsed < Duration::from_secs(60),
            "a rehearsal in a test must take under a minute: {elapsed:?}"
        );
        let report = std::fs::read_to_string(out_dir.join("report.json")).unwrap_or_else(|e| {
            panic!("no report.json ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}")
        });
        let run = Rehearsal {
            code: out.status.code(),
            stdout,
            report: serde_json::from_str(&report).unwrap(),
            dir: out_dir.clone(),
        };
        (run, out_dir)
    });
    assert_ne!(
        run.report["harness"]["valid"], false,
        "the run is invalid; it proves nothing:\n{}",
        run.stdout
    );
    run
}

/// As shipped, every check passes or is skipped saying why; the two of
/// several providers are there and pass.
fn passes(run: &Rehearsal) {
    for (id, status) in run.statuses() {
        assert!(
            status == "pass" || (status == "skipped" && run.check(&id)["detail"] != ""),
            "{id}: {status}: {}\n{}",
            run.check(&id)["detail"],
            run.stdout
        );
    }
    for id in ["cooldown_honoured", "failover"] {
        assert_eq!(run.status(id), "pass", "{id}\n{}", run.stdout);
    }
    assert_eq!(run.code, Some(0), "{}", run.stdout);
}

/// The primary's calls per scenario second and the secondary's, from
/// timeline.csv's per-provider columns.
fn calls_per_second(dir: &Path) -> Vec<(u64, u64, u64)> {
    let timeline = std::fs::read_to_string(dir.join("timeline.csv")).unwrap();
    let mut rows = timeline.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}: {header:?}"))
    };
    let (t, p, s) = (col("t"), col("calls_primary"), col("calls_secondary"));
    assert!(header.contains(&"refusals_primary"), "{header:?}");
    rows.map(|r| r.split(',').collect::<Vec<_>>())
        .map(|r| {
            (
                r[t].parse().unwrap(),
                r[p].parse().unwrap(),
                r[s].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn failover_passes_and_its_calls_leave_the_troubled_primary() {
    let run = failover("pass-30", 30, &[]);
    passes(&run);
    // The mechanism, with room: from 5 s into each trouble (the primary
    // 7x slower from 60 s, throttled from 180 s to 240 s) the primary
    // takes under a tenth of the calls (the check's bound), while before
    // and after it takes most of them.
    let seconds = calls_per_second(&run.dir);
    let share = |from: u64, to: u64| {
        let (p, all) = seconds
            .iter()
            .filter(|(t, _, _)| (from..to).contains(t))
            .fold((0, 0), |(p, all), (_, cp, cs)| (p + cp, all + cp + cs));
        assert!(all > 20, "calls in [{from}, {to}): {all}");
        p as f64 / all as f64
    };
    assert!(share(65, 240) < 0.1, "{}", run.stdout);
    assert!(share(0, 60) > 0.6, "{}", run.stdout);
    assert!(share(300, 360) > 0.6, "back on the primary: {}", run.stdout);
    assert!(run.figure("failover") < 0.1);
    // Each request the gateway passed on cost the providers about one
    // call: a failover once per cooldown, no retry of its own
    // (`retry_amplification`; a run gave 1.08).
    assert_eq!(run.status("retry_amplification"), "pass");
    let ratio = run.figure("retry_amplification");
    assert!((1.0..1.2).contains(&ratio), "{}", run.stdout);
    // Refusals the primary gave with a Retry-After (in the peak, over its
    // quota), and no call into their windows.
    let observed = run.check("cooldown_honoured")["observed"].as_str().unwrap();
    assert!(observed.starts_with("primary: 0 of "), "{observed}");
    let announced = std::fs::read_to_string(run.dir.join("provider.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"provider\":\"primary\"") && l.contains("\"retry_after_ms\""))
        .count();
    assert!(announced > 0, "no Retry-After from the primary");
    // report.json has each provider's seconds.
    let providers = run.report["providers"].as_array().unwrap();
    let names: Vec<_> = providers
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["primary", "secondary"]);
    // And the report's charts: one of each provider's calls and refusals,
    // second in order, with its PNG copy.
    let html = std::fs::read_to_string(run.dir.join("report.html")).unwrap();
    assert!(
        html.contains("2. Calls and refusals per provider per second"),
        "no per-provider chart in report.html"
    );
    assert!(html.contains("primary: refused (429, 503, 529)"));
    let png = std::fs::read(run.dir.join("chart-providers.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

/// Time-scale invariance: at twenty times the same verdicts as at thirty
/// (every check as shipped, `failover` and `cooldown_honoured` passing).
#[test]
fn failover_gives_the_same_verdicts_at_time_scale_20() {
    let run = failover("pass-20", 20, &[]);
    passes(&run);
    let ids: Vec<String> = run.statuses().into_iter().map(|(id, _)| id).collect();
    let expected: Vec<String> = assertions::Check::ALL
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(ids, expected);
}

/// A router that never cools an upstream down calls the throttled primary
/// with every request, inside the Retry-After each of its 429s announced:
/// `cooldown_honoured` fails, by a share well over its 1% bound.
#[test]
fn without_cooldowns_the_gateway_calls_into_the_retry_after_windows() {
    let run = failover("no-cooldowns", 30, &["gateway.reference.cooldowns=false"]);
    assert_eq!(run.status("cooldown_honoured"), "fail", "{}", run.stdout);
    assert!(run.figure("cooldown_honoured") > 0.03, "{}", run.stdout);
    let detail = run.check("cooldown_honoured")["detail"].as_str().unwrap();
    assert!(
        detail.contains("reached primary inside a Retry-After window"),
        "{detail}"
    );
    // Every request tried the troubled primary first.
    assert_eq!(run.status("failover"), "fail", "{}", run.stdout);
    assert!(run.figure("failover") > 0.3, "{}", run.stdout);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
}

/// Weighted routing without health (no cooldowns): two calls in three go to
/// the primary whatever its state, so in its troubles it keeps far more
/// than a tenth of them and `failover` fails.
#[test]
fn weighted_without_health_keeps_calls_on_the_troubled_primary() {
    let run = failover(
        "weighted",
        30,
        &[
            "gateway.reference.routing=weighted",
            "gateway.reference.cooldowns=false",
        ],
    );
    assert_eq!(run.status("failover"), "fail", "{}", run.stdout);
    assert!(run.figure("failover") > 0.25, "{}", run.stdout);
    let short = run.check("failover")["short"].as_str().unwrap();
    assert!(short.starts_with("primary kept "), "{short}");
    assert_eq!(run.code, Some(1), "{}", run.stdout);
}

/// A primary that goes away (its listener closed from 1m to 3m: every
/// connection refused, then listening again) is trouble like a slow one:
/// the plan names it down with no capacity, the gateway sends its calls to
/// the secondary, `failover` passes, and none of the calls is lost; the
/// primary has calls again once it is back.
#[test]
fn a_primary_that_refuses_connections_is_failed_over_like_a_slow_one() {
    let scenario = failover_down("refuse");
    let run = failover_of(&scenario, "down-refuse", 30, &[]);
    assert_eq!(run.status("failover"), "pass", "{}", run.stdout);
    assert_eq!(run.status("no_silent_loss"), "pass", "{}", run.stdout);
    let plan = std::fs::read_to_string(run.dir.join("plan.json")).unwrap();
    assert!(plan.contains("down: refuses connections"), "{plan}");
    let seconds = calls_per_second(&run.dir);
    let primary = |from: u64, to: u64| {
        seconds
            .iter()
            .filter(|(t, _, _)| (from..to).contains(t))
            .map(|(_, p, _)| p)
            .sum::<u64>()
    };
    // No call reaches a provider that is not listening (a second of room
    // at each end for the cut and the reopening).
    assert_eq!(primary(61, 179), 0, "{}", run.stdout);
    assert!(
        primary(0, 60) > 10 && primary(300, 360) > 10,
        "{}",
        run.stdout
    );
}

/// A primary that hangs (accepts, answers nothing) behind a gateway that
/// never cools an upstream down: every request tries it first and waits
/// out the upstream timeout, so the primary keeps a large share of the
/// calls in its trouble (`failover` fails) and the provider records them
/// as hangs.
#[test]
fn a_hanging_primary_without_cooldowns_fails_failover() {
    let scenario = failover_down("hang");
    let run = failover_of(
        &scenario,
        "down-hang",
        30,
        &["gateway.reference.cooldowns=false"],
    );
    assert_eq!(run.status("failover"), "fail", "{}", run.stdout);
    assert!(run.figure("failover") > 0.3, "{}", run.stdout);
    let hangs = std::fs::read_to_string(run.dir.join("provider.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"provider\":\"primary\"") && l.contains("\"outcome\":\"hang\""))
        .count();
    assert!(hangs > 10, "{hangs} hangs recorded\n{}", run.stdout);
}
