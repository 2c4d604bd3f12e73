//! End to end: the shipped flash-promotion scenario (a deadline gateway
//! admitting on the far tail of the provider's service time) passes at
//! `--time-scale 30`, its mean-service variant loses the callers whose
//! calls run into the tail, and a deadline gateway given no token rate at
//! all is refused with the field named. The scenario is played short: 1 of
//! its 2 quiet minutes before (the drain's baseline needs 10 s), 8 of the
//! promotion's 40, 2 of the 5 after (the drain is judged within one). The
//! backlog reaches its steady depth (about 12 waiting) within two minutes
//! of the promotion, and what is judged (who is admitted, who times out,
//! the drain after the end) is the same in the minutes after; in a
//! promotion of 4 minutes the mean-service gateway lost no caller. Thirty times, not sixty: a busy machine's
//! delays of 20-40 ms were 1.2-2.4 scenario seconds at sixty times, enough
//! to time out a caller the far-tail admission had rightly let in.

use crate::common;

use common::{on_schedule, one_at_a_time};

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn rehearse() -> Command {
    Command::new(common::rehearse_bin())
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

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

    fn detail(&self, id: &str) -> &str {
        self.check(id)["detail"].as_str().unwrap_or("")
    }

    fn records(&self, file: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The attempts that ended in a timeout: (its request id, attempt number).
    fn timeouts(&self) -> Vec<(String, u64)> {
        self.records("client.jsonl")
            .iter()
            .filter(|a| a["outcome"] == "timeout")
            .map(|a| {
                (
                    a["id"].as_str().unwrap().to_string(),
                    a["attempt"].as_u64().unwrap(),
                )
            })
            .collect()
    }
}

/// The quiet minutes before the promotion played here (2 in the shipped
/// scenario).
const BEFORE_MIN: f64 = 1.0;
/// The promotion's minutes played here (40 in the shipped scenario).
const PROMOTION_MIN: f64 = 8.0;
/// The quiet minutes after it played here (5 in the shipped scenario).
const AFTER_MIN: f64 = 2.0;

/// `rehearse run` of scenarios/flash-promotion.toml with its phases cut to
/// [`BEFORE_MIN`], [`PROMOTION_MIN`] and [`AFTER_MIN`], at
/// `--time-scale 30`, with `sets`, into a fresh directory; made again once
/// if the load generator fell behind ([`on_schedule`]), and panics when
/// the run is invalid (it would prove nothing). The send-lag bound is
/// 20 ms (0.6 scenario seconds, against the 25 s patience) instead of the
/// scenario's 5 ms: a late send only shortens its caller's patience, which
/// can make a timeout, never hide one.
fn flash(tag: &str, sets: &[&str]) -> Rehearsal {
    let _one = one_at_a_time();
    let text = std::fs::read_to_string(scenario("flash-promotion.toml")).unwrap();
    let mut text = text;
    for (shipped, played) in [
        ("2m", BEFORE_MIN),
        ("40m", PROMOTION_MIN),
        ("5m", AFTER_MIN),
    ] {
        let line = format!("duration = \"{shipped}\"");
        assert_eq!(text.matches(&line).count(), 1, "{line}");
        text = text.replace(&line, &format!("duration = \"{played}m\""));
    }
    let run = on_schedule(|attempt| {
        let dir = std::env::temp_dir().join(format!(
            "rehearse-flash-{}-{tag}-{attempt}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flash-promotion.toml");
        std::fs::write(&path, &text).unwrap();
        let out_dir = dir.join("run");
        let mut cmd = rehearse();
        cmd.arg("run")
            .arg(&path)
            .args(["--time-scale", "30", "--no-progress", "--out"])
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
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        let run = Rehearsal {
            code: out.status.code(),
            stdout,
            report,
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

/// As shipped, every check passes (or is skipped, saying why): the gateway
/// admits a request only if it can still be served in the provider's
/// slowest plausible time after its wait, so nobody it admits times out.
/// Its token rate is the provider's quota, taken by the harness and noted.
/// `drain` passes: the promotion's backlog is gone within a minute, and a
/// cluster of arrivals minutes later in the "after" phase is not a drain
/// that failed (the rule's 30 s confirmation).
#[test]
fn flash_promotion_passes_at_time_scale_30() {
    let run = flash("pass", &[]);
    for check in run.report["checks"].as_array().unwrap() {
        let (id, status) = (
            check["id"].as_str().unwrap(),
            check["status"].as_str().unwrap(),
        );
        assert!(
            status == "pass" || (status == "skipped" && check["detail"] != ""),
            "{id}: {status}: {}\n{}",
            check["detail"],
            run.stdout
        );
    }
    assert_eq!(run.status("drain"), "pass", "{}", run.stdout);
    assert_eq!(run.code, Some(0), "{}", run.stdout);
    assert_eq!(run.timeouts(), Vec::new(), "{}", run.stdout);
    // The backlog the promotion leaves (about 12 waiting) is gone within a
    // minute of its end, in scenario seconds.
    let timeline = std::fs::read_to_string(run.dir.join("timeline.csv")).unwrap();
    let mut rows = timeline.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (t, backlog) = (col("t"), col("backlog"));
    let end = (BEFORE_MIN + PROMOTION_MIN) * 60.0;
    let empty_at = rows
        .map(|r| r.split(',').collect::<Vec<_>>())
        .map(|r| {
            (
                r[t].parse::<f64>().unwrap(),
                r[backlog].parse::<f64>().unwrap(),
            )
        })
        .find(|&(at, n)| at >= end && n == 0.0)
        .map(|(at, _)| at - end);
    assert!(
        empty_at.is_some_and(|s| s <= 60.0),
        "the backlog empties {empty_at:?} s after the promotion"
    );
    let notes = run.report["notes"].to_string();
    assert!(
        notes.contains("paces its calls to the provider's quota, 500,000 tokens/min"),
        "the derived token rate is noted: {notes}"
    );
}

/// Admitting on about the mean service time (4.95 s; 4.5 s here, so that
/// a quiet run cannot be lucky) leaves the slower calls no room: a request
/// admitted at the back of the queue whose call runs into the service
/// time's tail is still running when its caller gives up.
#[test]
fn flash_promotion_on_the_mean_service_time_loses_its_slowest_calls() {
    let run = flash(
        "mean",
        &["gateway.reference.deadline.expected_service=4.5s"],
    );
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert_eq!(run.status("no_silent_loss"), "fail", "{}", run.stdout);
    assert!(
        run.detail("no_silent_loss").contains("timeout"),
        "{}",
        run.detail("no_silent_loss")
    );
    // The mechanism: callers admitted, handed to the provider, and gone
    // before their answer came (not retries refused at the last moment).
    let called: HashSet<String> = run
        .records("provider.jsonl")
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let admitted_then_lost = run
        .timeouts()
        .iter()
        .filter(|(id, attempt)| *attempt == 1 && called.contains(id))
        .count();
    assert!(
        admitted_then_lost > 0,
        "timeouts: {:?}\n{}",
        run.timeouts(),
        run.stdout
    );
}

/// A deadline gateway paces its calls to a token rate: with none written
/// and no provider quota to take it from, the scenario is refused (exit 2)
/// at the field, not rehearsed against a gateway that sheds everything.
#[test]
fn a_deadline_gateway_without_a_rate_or_a_quota_exits_2_naming_the_field() {
    let path = scenario("slow-upstream.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().position(|l| l.starts_with("mode = ")).unwrap() + 1;
    for command in ["plan", "run"] {
        let mut cmd = rehearse();
        cmd.arg(command)
            .arg(&path)
            .args(["--set", "gateway.reference.mode=deadline"]);
        if command == "run" {
            cmd.args(["--out", "/nonexistent/never-written"]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(
            err.contains(&format!("slow-upstream.toml (with --set):{line}:"))
                && err.contains("field `gateway.reference.deadline.tokens_per_minute`"),
            "{command}: {err}"
        );
    }
}
