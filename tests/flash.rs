//! End to end: the shipped flash-promotion scenario (a deadline gateway
//! admitting on the far tail of the provider's service time) passes at
//! `--time-scale 60`, its mean-service variant loses the callers whose
//! calls run into the tail, and a deadline gateway given no token rate at
//! all is refused with the field named.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn rehearse() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rehearse"))
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

/// Rehearsals in this binary run one at a time: two at once on a 2-core
/// machine would make the load generator miss its schedule.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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

/// `rehearse run scenarios/flash-promotion.toml --time-scale 60` with
/// `sets`, into a fresh directory; panics when the run could not keep its
/// schedule (it would prove nothing).
fn flash(tag: &str, sets: &[&str]) -> Rehearsal {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("rehearse-flash-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = rehearse();
    cmd.arg("run")
        .arg(scenario("flash-promotion.toml"))
        .args(["--time-scale", "60", "--no-progress", "--out"])
        .arg(&dir);
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
    let report = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_ne!(
        report["harness"]["valid"], false,
        "the load generator missed its schedule; the run proves nothing:\n{stdout}"
    );
    Rehearsal {
        code: out.status.code(),
        stdout,
        report,
        dir,
    }
}

/// As shipped, every check passes (or is skipped, saying why): the gateway
/// admits a request only if it can still be served in the provider's
/// slowest plausible time after its wait, so nobody it admits times out.
/// Its token rate is the provider's quota, taken by the harness and noted.
/// `drain` passes: the promotion's backlog is gone within a minute, and a
/// cluster of arrivals minutes later in the "after" phase is not a drain
/// that failed (the rule's 30 s confirmation).
#[test]
fn flash_promotion_passes_at_time_scale_60() {
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
    // minute of its end (2 + 40 minutes in), in scenario seconds.
    let timeline = std::fs::read_to_string(run.dir.join("timeline.csv")).unwrap();
    let mut rows = timeline.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (t, backlog) = (col("t"), col("backlog"));
    let end = 42.0 * 60.0;
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
