//! End-to-end tests of `rehearse compare`: a scenario with two variants,
//! the pool demonstration's bounded gateway against a naive one, run by
//! the binary at a tenth of its length.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch, text};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// scenarios/pool-demo.toml (a 12-slot provider 7x slower from 2 s, 40
/// requests/s for 10 s) with a generous send-lag bound, so that a busy
/// machine at --time-scale 10 still makes a valid run, and two variants.
const POOL: &str = r#"[scenario]
name = "pool-compare"
seed = 4

[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "200ms" }
per_token = { fixed = "0ms" }
[provider.concurrency]
ceiling = 12
overflow = "queue"
[[provider.timeline]]
name = "provider 7x slower"
from = "2s"
latency = { multiplier = 7.0 }

[gateway]
memory_ceiling = "256MiB"
[gateway.reference]
mode = "bounded"
bounded = { concurrency = 8, queue = 11, wait_budget = "2s" }

[load]
patience = { fixed = "30s" }
send_lag_p99_max = "200ms"
[[load.phases]]
name = "40 requests/s"
duration = "10s"
rate = 40
[load.request]
prompt_tokens = { fixed = 100 }
max_tokens = { fixed = 10 }

[checklist]
drain = { within = "5s" }
served_latency = { p99_ms = 5000 }
goodput = { min_share = 0.5 }

[[variants]]
name = "bounded"

[[variants]]
name = "naive (unbounded)"
set = { "gateway.reference.mode" = "naive" }
"#;

/// Both variants run into their own directories, side by side in
/// compare.json, compare.html and the terminal table; naive is meant to
/// pass here, so the exit is 1 with a line saying so.
#[test]
fn two_variants_are_run_and_compared() {
    let _one = one_at_a_time();
    let dir = scratch("compare", "two");
    let scenario = dir.join("pool.toml");
    std::fs::write(&scenario, POOL).unwrap();
    // Made again once if a run's load generator fell behind (on_schedule).
    let (out, out_dir) = on_schedule(|attempt| {
        let out_dir = dir.join(format!("out-{attempt}"));
        let out = rehearse()
            .arg("compare")
            .arg(&scenario)
            .args(["--time-scale", "10", "--no-progress", "--out"])
            .arg(&out_dir)
            .args(["--expect", "naive (unbounded)=pass"])
            .output()
            .unwrap();
        ((out, out_dir.clone()), out_dir)
    });
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for head in [
        "variant",
        "verdict",
        "ok",
        "late",
        "timed out",
        "shed",
        "stale",
        "gw timeout",
        "lost",
        "crashes",
        "peak in flight",
        "peak RSS",
    ] {
        assert!(stdout.contains(head), "{head}: {all}");
    }
    assert!(
        stdout.contains(
            "unexpected: variant \"naive (unbounded)\" was expected to pass and did fail"
        ),
        "{all}"
    );
    // One run directory per variant, named after it.
    for run in ["bounded", "naive-unbounded"] {
        for file in [
            "report.json",
            "report.html",
            "client.jsonl",
            "chart-requests.png",
        ] {
            assert!(out_dir.join(run).join(file).exists(), "{run}/{file}: {all}");
        }
    }
    let c = json(&out_dir.join("compare.json"));
    assert_eq!(c["scenario"], "pool-compare");
    assert_eq!(c["exit_code"], 1);
    let v = c["variants"].as_array().unwrap();
    assert_eq!(v.len(), 2, "{c}");
    let (bounded, naive) = (&v[0], &v[1]);
    assert_eq!(bounded["name"], "bounded");
    assert_eq!(bounded["dir"], "bounded");
    assert_eq!(naive["name"], "naive (unbounded)");
    assert_eq!(naive["dir"], "naive-unbounded");
    assert_eq!(naive["sets"][0], "gateway.reference.mode=\"naive\"");
    assert_eq!(naive["verdict"], "fail", "{c}");
    assert_eq!(naive["exit_code"], 1);
    assert_eq!(naive["expected"], "pass");
    assert_eq!(naive["checks"]["shed_onset"], "fail");
    assert_eq!(
        naive["checks"].as_object().unwrap().len(),
        assertions::always_judged().count()
    );
    assert!(bounded["shed"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(naive["shed"], 0, "{c}");
    // Naive lets everyone in: far more in flight at once than bounded's
    // 8 calls and 11 waiting. Bounded's peak counts the refusals being
    // answered and the requests on their way in too, more of them the
    // busier the machine (23 seen, and over 29): it is held to twice its
    // bounds and a third of naive's, which lets in everyone who comes
    // (over 100; 400 arrive, most of them while the provider is slow).
    let peak = |r: &serde_json::Value| r["peak_in_flight"].as_u64().unwrap();
    assert!(peak(naive) > 100, "{c}");
    assert!(
        peak(bounded) <= 2 * (8 + 11) && 3 * peak(bounded) < peak(naive),
        "{c}"
    );
    for r in v {
        assert_eq!(r["crashes"], 0);
        assert_eq!(r["lost"], 0);
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
        // The columns are the run's report.json, not a second count.
        let report = json(&out_dir.join(r["dir"].as_str().unwrap()).join("report.json"));
        assert_eq!(r["ok"], report["counts"]["ok"]);
        assert_eq!(r["verdict"], report["verdict"]);
        assert_eq!(r["peak_in_flight"], report["gateway"]["peak_in_flight"]);
    }
    let html = std::fs::read_to_string(out_dir.join("compare.html")).unwrap();
    assert!(html.contains("bounded") && html.contains("naive (unbounded)"));
    assert!(html.contains("data:image/png;base64,"));
    assert_eq!(
        html.matches("<tr id=\"check-").count(),
        assertions::always_judged().count()
    );
    // Each check's figure is its report.json's, set against the first
    // variant's: naive's p99 is far worse than bounded's.
    let figure = |r: &serde_json::Value, id: &str| r["figures"][id]["value"].as_f64().unwrap();
    let naive_report = json(&out_dir.join("naive-unbounded/report.json"));
    let check = |id: &str| {
        let checks = naive_report["checks"].as_array().unwrap();
        checks.iter().find(|c| c["id"] == id).unwrap()["figure"].clone()
    };
    assert_eq!(
        figure(naive, "served_latency"),
        check("served_latency")["value"].as_f64().unwrap()
    );
    assert_eq!(check("served_latency")["worse"], "higher");
    assert!(
        naive["figures"]["served_latency"]["change"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{c}"
    );
    assert!(
        bounded["figures"]["served_latency"]["change"].is_null(),
        "{c}"
    );
    assert!(std::fs::read_to_string(out_dir.join("summary.md"))
        .unwrap()
        .contains("| `served_latency` |"));
    run_directories_are_compared_with_a_baseline(
        &out_dir.join("bounded"),
        &out_dir.join("naive-unbounded"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rehearse compare DIR DIR...` on the two runs just made: bounded set
/// beside itself changes nothing (exit 0 with --fail-on-regression);
/// naive, judged again with its failing checks loosened so that every
/// check passes, is worse than bounded beyond the tolerances: exit 1 with
/// --fail-on-regression, 0 without.
fn run_directories_are_compared_with_a_baseline(bounded: &Path, naive: &Path) {
    let itself = bounded.parent().unwrap().join("itself");
    let out = rehearse()
        .arg("compare")
        .args([bounded, bounded])
        .args(["--fail-on-regression", "--out"])
        .arg(&itself)
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let c = json(&itself.join("compare.json"));
    assert_eq!(c["compared"], "runs", "{c}");
    assert_eq!(c["scenario"], "pool-compare");
    assert_eq!(c["regressions"].as_array().unwrap().len(), 0, "{c}");
    let figures = c["variants"][1]["figures"].as_object().unwrap();
    assert!(figures.len() >= 6, "{c}");
    // A variant's flag would change nothing here: refused, named.
    let refused = rehearse()
        .arg("compare")
        .args([bounded, bounded])
        .args(["--time-scale", "2", "--out"])
        .arg(bounded.parent().unwrap().join("refused"))
        .output()
        .unwrap();
    let all = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{all}");
    assert!(all.contains("--time-scale: has no effect"), "{all}");
    assert!(figures.values().all(|f| f["change"] == 0.0), "{c}");
    // Naive judged again with what it fails loosened: every check passes.
    let loosened = rehearse()
        .arg("report")
        .arg(naive)
        .args([
            "--set",
            "checklist.shed_onset.enabled=false",
            "--set",
            "checklist.retry_after.enabled=false",
            "--set",
            "checklist.drain.within=10000s",
            "--set",
            "checklist.served_latency.p99_ms=10000000",
            "--set",
            "checklist.no_silent_loss.max_lost=100000",
            "--set",
            "checklist.stale_dispatch.max_share=1",
            // Naive never hangs up on the provider for a caller who left.
            "--set",
            "checklist.cancel_on_hangup.enabled=false",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert_eq!(loosened.status.code(), Some(0), "{}", text(&loosened));
    for (flags, code) in [(&["--fail-on-regression"][..], 1), (&[][..], 0)] {
        let out_dir = bounded.parent().unwrap().join(format!("worse-{code}"));
        let out = rehearse()
            .arg("compare")
            .args([bounded, naive])
            .args(flags)
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {all}");
        let c = json(&out_dir.join("compare.json"));
        assert_eq!(c["variants"][1]["verdict"], "pass", "{c}");
        let latency = &c["variants"][1]["figures"]["served_latency"];
        assert_eq!(latency["regressed"], true, "{c}");
        let said = c["regressions"].as_array().unwrap();
        assert!(
            said.iter()
                .any(|r| r.as_str().unwrap().contains("served_latency")),
            "{c}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let word = if code == 1 {
            "regression: naive-unbounded"
        } else {
            "worse: naive-unbounded"
        };
        assert!(
            stdout.contains(word) && stdout.contains("worse beyond tolerance"),
            "{all}"
        );
        let md = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
        assert!(
            md.contains("bounded (baseline) (PASS)") && md.contains(&format!("Exit code: {code}.")),
            "{md}"
        );
    }
}

/// Everything is checked before the first run: each of these exits 2 at
/// once, naming what is wrong, and leaves no run directory.
#[test]
fn bad_input_exits_2_before_any_run() {
    let dir = scratch("compare", "bad");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let good = write("good.toml", POOL);
    let no_variants = write("none.toml", POOL.split("[[variants]]").next().unwrap());
    let bad_value = write(
        "bad.toml",
        &format!("{POOL}\n[[variants]]\nname = \"fancy\"\nset = {{ \"gateway.reference.mode\" = \"fancy\" }}\n"),
    );
    let twice = write(
        "twice.toml",
        &format!("{POOL}\n[[variants]]\nname = \"bounded\"\n"),
    );
    let line_of =
        |needle: &str, text: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let bad_line = line_of("\"fancy\" }", &std::fs::read_to_string(&bad_value).unwrap());
    let cases: Vec<(Vec<&str>, &Path, Vec<String>)> = vec![
        (
            vec![],
            &no_variants,
            vec![
                "no variants to compare".into(),
                "[[variants]]".into(),
                "--each".into(),
            ],
        ),
        (
            vec!["--expect", "aimd=pass"],
            &good,
            vec!["no variant is named \"aimd\"".into()],
        ),
        (
            vec![],
            &bad_value,
            vec![
                format!("bad.toml:{bad_line}:"),
                "in variant \"fancy\"".into(),
                "gateway.reference.mode".into(),
            ],
        ),
        (vec![], &twice, vec!["used twice".into()]),
        (
            vec!["--each", "gateway.reference.mode=naive,,bounded"],
            &good,
            vec!["--each".into(), "[[variants]]".into()],
        ),
    ];
    for (flags, scenario, wanted) in cases {
        let out_dir = dir.join("out");
        let out = rehearse()
            .arg("compare")
            .arg(scenario)
            .args(&flags)
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {all}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for w in wanted {
            assert!(stderr.contains(&w), "{w}: {all}");
        }
        assert!(!out_dir.exists(), "{flags:?}: a run started");
    }
    // `rehearse plan` reads the same file, its variants ignored.
    let out = rehearse().arg("plan").arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM during the first variant: its run stops (a partial report),
/// the second is not run, compare.json says so, and the exit is 3.
#[test]
fn a_signal_stops_the_run_under_way_and_skips_the_rest() {
    let _one = one_at_a_time();
    let dir = scratch("compare", "signal");
    let scenario = dir.join("pool.toml");
    std::fs::write(&scenario, POOL).unwrap();
    let out_dir = dir.join("out");
    let child = rehearse()
        .arg("compare")
        .arg(&scenario)
        .args(["--no-progress", "--out"])
        .arg(&out_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(child);
    let log = out_dir.join("bounded/gateway.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on")) {
        assert!(Instant::now() < deadline, "the first run did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    let signalled = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "compare did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3));
    let c = json(&out_dir.join("compare.json"));
    assert_eq!(c["variants"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["variants"][0]["verdict"], "invalid");
    assert_eq!(c["skipped"][0], "naive (unbounded)");
    assert_eq!(c["exit_code"], 3);
    assert!(!out_dir.join("naive-unbounded").exists());
    assert_eq!(json(&out_dir.join("bounded/report.json"))["partial"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway killed 3 s into the load (`timeout -s KILL 3`), left down or
/// restarted after 0.5 s: crashes count its deaths; lost counts the
/// attempts inside it then and those refused while it was down, so far
/// fewer when it comes back.
#[test]
fn a_gateway_that_dies_is_counted_in_crashes_and_lost() {
    let _one = one_at_a_time();
    let dir = scratch("compare", "dies");
    let scenario = dir.join("dies.toml");
    let bin = common::rehearse_bin();
    let bin = bin.display();
    std::fs::write(
        &scenario,
        format!(
            r#"[scenario]
name = "dies"
[provider.latency]
ttft = {{ fixed = "300ms" }}
[gateway]
command = ["timeout", "-s", "KILL", "3", "{bin}", "gateway", "--mode", "bounded", "--upstream", "{{provider_url}}", "--listen", "{{listen}}"]
restart_delay = "500ms"
[load]
patience = {{ fixed = "2s" }}
# The gateway is being killed: schedule precision is not what is tested.
send_lag_p99_max = "200ms"
[[load.phases]]
duration = "6s"
rate = 20
[checklist]
memory_ceiling = {{ enabled = false }}

[[variants]]
name = "stays down"

[[variants]]
name = "restarted"
set = {{ "gateway.restart" = true }}
"#
        ),
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = rehearse()
        .arg("compare")
        .arg(&scenario)
        .args(["--no-progress", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let all = text(&out);
    // no_silent_loss fails (1), or a busy machine made a run invalid (3).
    assert!(matches!(out.status.code(), Some(1 | 3)), "{all}");
    let c = json(&out_dir.join("compare.json"));
    let (down, back) = (&c["variants"][0], &c["variants"][1]);
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    assert_eq!(n(down, "crashes"), 1, "{c}");
    // 3 s of 6 at 20 requests/s refused, and those inside it.
    let report = json(&out_dir.join("stays-down/report.json"));
    let ended_badly =
        report["counts"]["error"].as_u64().unwrap() + report["counts"]["timeout"].as_u64().unwrap();
    assert!((40..=ended_badly).contains(&n(down, "lost")), "{c}\n{all}");
    // Its restart (it may be killed again as the run ends) loses far fewer.
    assert!(n(back, "crashes") >= 1, "{c}");
    assert!(
        n(back, "lost") > 0 && n(back, "lost") < n(down, "lost") / 2,
        "{c}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
