//! End-to-end tests of the `rehearse` binary: real processes, real sockets.

use crate::common;

use common::{on_schedule, one_at_a_time};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn rehearse() -> Command {
    Command::new(common::rehearse_bin())
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Kills the child when dropped, so a failing test leaves no server behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

mod provider {
    use super::*;

    #[test]
    fn bad_config_exits_2_naming_file_line_and_field() {
        let path = write_temp("bad.toml", "seed = 1\n\n[latency]\nmultiplier = 2.0\nttft = { fixed = \"10ms\" }\nper_tokn = { fixed = \"1ms\" }\n");
        let out = rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{}:6:", path.display())), "{err}");
        assert!(err.contains("per_tokn"), "{err}");
    }

    #[test]
    fn bad_value_in_a_scenario_section_names_its_line() {
        let path = write_temp(
            "scenario.toml",
            "[scenario]\nname = \"x\"\n\n[provider]\nseed = 2\n[provider.concurrency]\nceiling = 0\n",
        );
        let out = rehearse()
            .arg("provider")
            .arg(&path)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(":7:"), "{err}");
        assert!(err.contains("provider.concurrency.ceiling"), "{err}");
    }

    #[test]
    fn missing_file_is_bad_input() {
        let out = rehearse()
            .args(["provider", "--config", "/nonexistent/provider.toml"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/provider.toml"));
    }

    #[test]
    fn serves_on_the_address_it_prints_and_stops_on_sigterm() {
        let path = write_temp("ok.toml", "completion_tokens = { fixed = 3 }\n");
        let mut child = rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut running = Running(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("fake provider listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let body: serde_json::Value = rt.block_on(async {
            reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        assert_eq!(body["usage"]["completion_tokens"], 3);
        // SIGTERM: the server stops by itself, exit 0.
        let pid = running.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = running.0.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "provider did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM right after N calls, nobody having read the records (they
    /// may all still be in the serving threads' lanes, waiting for the
    /// writer's period): the file holds N whole records, one per call.
    #[test]
    fn sigterm_after_n_calls_leaves_n_records() {
        const N: usize = 400;
        let path = write_temp("n.toml", "completion_tokens = { fixed = 2 }\n");
        let records = write_temp("n-provider.jsonl", "");
        let mut child = rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--threads", "2", "--records"])
            .arg(&records)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut running = Running(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("fake provider listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = reqwest::Client::new();
            let mut tasks = tokio::task::JoinSet::new();
            for w in 0..8 {
                let (client, url) = (client.clone(), format!("{base}/v1/chat/completions"));
                tasks.spawn(async move {
                    for i in (w..N).step_by(8) {
                        let resp = client
                            .post(&url)
                            .header("x-request-id", format!("call-{i}"))
                            .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(resp.status(), 200);
                        resp.bytes().await.unwrap();
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        let pid = running.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while running.0.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "provider did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stderr = String::new();
        std::io::Read::read_to_string(running.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(
            running.0.try_wait().unwrap().unwrap().code(),
            Some(0),
            "{stderr}"
        );
        let text = std::fs::read_to_string(&records).unwrap();
        assert!(text.ends_with('\n'), "the file ends mid-line");
        let mut ids: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<wire::ProviderRecord>(l).unwrap().id)
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), N, "one record per call: {stderr}");
        assert!(stderr.contains(&format!("{N} records in")), "{stderr}");
    }
}

mod plan {
    use super::*;

    fn scenario(name: &str) -> String {
        format!("{}/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// The figures a person computes by hand from SCENARIOS.md: 500,000
    /// tokens/min ÷ 1,200 tokens = 416.7 requests/min; 40 minutes at 2,000
    /// offered serve 16,667 and leave 63,333 waiting; at 200/min after the
    /// promotion that drains in 63,333 ÷ 216.7 = 292.3 minutes.
    #[test]
    fn flash_promotion_json_has_the_hand_figures() {
        let out = rehearse()
            .args(["plan", "--json"])
            .arg(scenario("flash-promotion.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mu = 500_000.0 / 1200.0;
        let promo = &v["phases"][1];
        let close = |got: &serde_json::Value, want: f64, tol: f64| {
            let g = got.as_f64().unwrap_or(f64::NAN);
            assert!((g - want).abs() <= tol, "{g} vs {want}");
        };
        close(&promo["offered_per_min"], 2000.0, 1e-6);
        close(&promo["capacity_per_min"], mu, 1e-6);
        close(&promo["served"], 40.0 * mu, 1.0);
        close(&promo["backlog_at_end"], 40.0 * (2000.0 - mu), 1.0);
        close(
            &v["drain_minutes_unbounded"],
            40.0 * (2000.0 - mu) / (mu - 200.0),
            0.1,
        );
        // Q* = μ·(D − S) with D = 25 s and S = TTFT + 200 × 20 ms ≈ 5 s.
        let q = v["queue_bound_requests"].as_f64().unwrap();
        assert!((130.0..=140.0).contains(&q), "{q}");
        close(&v["queue_bound_tokens"], q * 1200.0, 1e-3);
        // Nearly every promotion arrival, and the 1,000 after it, are late.
        let late = v["late_answers"].as_f64().unwrap();
        assert!((80_000.0..81_000.0).contains(&late), "{late}");
        // The peak backlog held at 6 KB a request: about 380 MB.
        let bytes = v["unbounded_backlog_bytes"].as_f64().unwrap();
        assert!((375e6..385e6).contains(&bytes), "{bytes}");
        // And at rehearsal scale, depths are a tenth.
        close(&v["rehearsal"]["queue_bound_requests"], q / 10.0, 1e-6);
    }

    #[test]
    fn every_shipped_scenario_plans() {
        let dir = format!("{}/scenarios", env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let out = rehearse().arg("plan").arg(&path).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                n += 1;
            }
        }
        assert!(n >= 5, "the five scenarios are shipped");
    }

    /// A typo in `[gateway.reference]` is refused when the scenario loads,
    /// with file, line and field, not found later as a dead gateway.
    #[test]
    fn a_typo_in_the_reference_gateway_exits_2_with_the_line() {
        let text = std::fs::read_to_string(scenario("pool-demo.toml")).unwrap();
        let text = text.replacen(
            "mode = \"bounded\"",
            "mode = \"bounded\"\nconcurency = 8",
            1,
        );
        let line = text
            .lines()
            .position(|l| l.starts_with("concurency"))
            .unwrap()
            + 1;
        let path = write_temp("typo-scenario.toml", &text);
        for command in ["plan", "run"] {
            let mut cmd = rehearse();
            cmd.arg(command).arg(&path);
            if command == "run" {
                cmd.args(["--out", "/nonexistent/never-written"]);
            }
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{command}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("typo-scenario.toml:{line}:"))
                    && err.contains("gateway.reference.concurency"),
                "{command}: {err}"
            );
        }
    }

    #[test]
    fn bad_scenario_exits_2_with_the_line() {
        let path = write_temp("bad-scenario.toml", "[scenario]\nname = \"x\"\n[gateway]\nurl = \"http://127.0.0.1:9\"\n[load]\n[[load.phases]]\nduration = \"10s\"\nrate = -3\n");
        let out = rehearse().arg("plan").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(":8:") && err.contains("load.phases[0].rate"),
            "{err}"
        );
        let out = rehearse()
            .arg("plan")
            .arg(scenario("pool-demo.toml"))
            .args(["--set", "gateway.reference.mode=fancy"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("gateway.reference.mode"));
    }

    /// A threshold out of its range (a share of 1.5, a negative ratio) is
    /// refused where it is written, as written or through --set.
    #[test]
    fn a_threshold_out_of_range_names_its_line_and_field() {
        let text = std::fs::read_to_string(scenario("pool-demo.toml")).unwrap()
            + "\n[checklist.recovery]\nmin_share = 1.5\n";
        let line = text.lines().count();
        let path = write_temp("share-scenario.toml", &text);
        let out = rehearse().arg("plan").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("share-scenario.toml:{line}:"))
                && err.contains("checklist.recovery.min_share")
                && err.contains("a share from 0 to 1"),
            "{err}"
        );
        let out = rehearse()
            .arg("plan")
            .arg(scenario("pool-demo.toml"))
            .args(["--set", "checklist.retry_amplification.max_ratio=-2"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("checklist.retry_amplification.max_ratio"),
            "{err}"
        );
    }
}

mod run {
    use super::*;

    /// A public trace replayed (the Mooncake sample at 10x): before any
    /// load, `rehearse run` says what it read and what each way of
    /// playing it 10x does to the provider's per-minute quota, as `plan`
    /// does; every one of the 3,360 arrivals is recorded.
    #[test]
    fn a_replayed_trace_is_described_before_its_load_and_every_arrival_recorded() {
        let dir = common::scratch("cli", "trace-replay");
        let out = common::rehearse()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "run",
                "scenarios/trace-replay.toml",
                "--time-scale",
                "60",
                "--no-progress",
                "--out",
            ])
            .arg(dir.join("run"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Replayed log (mooncake, numeric timestamps in ms): 336 rows"),
            "{err}"
        );
        assert!(
            err.contains("by multiply (copies at the log's pace): 1,000"),
            "{err}"
        );
        let said = err.find("Replayed log").unwrap();
        let ended = err.find("the load has ended").unwrap_or(err.len());
        assert!(said < ended, "{err}");
        let records = std::fs::read_to_string(dir.join("run/client.jsonl")).unwrap();
        let first = records
            .lines()
            .filter(|l| l.contains("\"attempt\":1,"))
            .count();
        assert_eq!(first, 3_360, "{err}");
    }

    struct Rehearsal {
        code: Option<i32>,
        stdout: String,
        report: serde_json::Value,
        dir: std::path::PathBuf,
    }

    impl Rehearsal {
        fn status(&self, id: &str) -> String {
            self.report["checks"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["id"] == id))
                .map(|c| c["status"].as_str().unwrap_or("").to_string())
                .unwrap_or_else(|| panic!("no check {id} in {}", self.report))
        }

        fn detail(&self, id: &str) -> String {
            self.report["checks"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["id"] == id))
                .map(|c| c["detail"].as_str().unwrap_or("").to_string())
                .unwrap_or_default()
        }
    }

    /// `rehearse run SCENARIO --out DIR --no-progress EXTRA`, made again
    /// once if its load generator fell behind ([`on_schedule`]).
    fn rehearse_run(scenario: &str, extra: &[&str]) -> Rehearsal {
        let _one = one_at_a_time();
        let run = on_schedule(|attempt| {
            let dir = std::env::temp_dir().join(format!(
                "rehearse-run-{}-{}-{}-{attempt}",
                std::process::id(),
                scenario.trim_end_matches(".toml").replace('/', "-"),
                extra.join("_").replace(['/', '=', '.', ' '], "-")
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let started = Instant::now();
            let out = rehearse()
                .arg("run")
                .arg(if scenario.starts_with('/') {
                    scenario.to_string()
                } else {
                    format!("{}/scenarios/{scenario}", env!("CARGO_MANIFEST_DIR"))
                })
                .arg("--out")
                .arg(&dir)
                .arg("--no-progress")
                .args(extra)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "a rehearsal in a test must take under a minute"
            );
            let report = std::fs::read_to_string(dir.join("report.json")).unwrap_or_else(|e| {
                panic!("no report.json ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}")
            });
            let report: serde_json::Value = serde_json::from_str(&report).unwrap();
            let run = Rehearsal {
                code: out.status.code(),
                stdout,
                report,
                dir: dir.clone(),
            };
            (run, dir)
        });
        assert_ne!(
            run.report["harness"]["valid"], false,
            "the run is invalid; it proves nothing:\n{}",
            run.stdout
        );
        run
    }

    /// SCENARIOS.md 4: against `naive` the pool demo never sheds and keeps
    /// draining long after the last arrival. (At five times its speed, as
    /// its bounded run: the counts and the verdicts are the scenario's at
    /// any time scale, `time_scales_give_the_same_verdicts`.)
    #[test]
    fn pool_demo_fails_against_naive() {
        let naive = rehearse_run(
            "pool-demo.toml",
            &["--time-scale", "5", "--set", "gateway.reference.mode=naive"],
        );
        assert_eq!(naive.code, Some(1), "{}", naive.stdout);
        assert_eq!(naive.status("shed_onset"), "fail");
        assert!(
            naive.detail("shed_onset").starts_with("never shed: "),
            "{}",
            naive.detail("shed_onset")
        );
        // Its provider slows down 2 s in, too short a baseline of its own:
        // the drain is judged against the plan's (nothing arrives after the
        // overload), and its backlog is still draining long after.
        assert_eq!(naive.status("drain"), "fail");
        assert!(
            naive
                .detail("drain")
                .contains("baseline: the plan's 0 waiting (nothing arrives after the overload)"),
            "{}",
            naive.detail("drain")
        );
        // report.json's drain_s is in the run's own seconds: at time scale
        // 5, 5.4-5.6 (27-28 scenario seconds after the last arrival, the
        // 262 queued served 8 at a time); more than 15 scenario seconds.
        let drain_s = naive.report["drain_s"].as_f64().unwrap_or(f64::NAN);
        assert!(
            drain_s * 5.0 > 15.0,
            "drained in {drain_s} s at time scale 5"
        );
        assert!(
            naive.report["counts"]["ok"].as_u64().unwrap() > 350,
            "naive serves nearly everything, late"
        );
    }

    /// Against `bounded` it serves about a third, sheds most of the rest at
    /// once, and drains at once: every check passes.
    #[test]
    fn pool_demo_passes_against_bounded() {
        let bounded = rehearse_run("pool-demo.toml", &["--time-scale", "5"]);
        assert_eq!(bounded.code, Some(0), "{}", bounded.stdout);
        assert_eq!(bounded.report["verdict"], "pass");
        let ok = bounded.report["counts"]["ok"].as_u64().unwrap();
        let shed = bounded.report["counts"]["shed"].as_u64().unwrap();
        assert!((90..=200).contains(&ok), "about a third served: {ok}");
        assert!(shed > 200, "most of the rest shed: {shed}");
        for file in [
            "report.json",
            "junit.xml",
            "client.jsonl",
            "provider.jsonl",
            "timeline.csv",
            "client.hlog",
            "gateway.log",
        ] {
            assert!(
                bounded.dir.join(file).exists(),
                "{file} is in the run directory"
            );
        }
        let junit = std::fs::read_to_string(bounded.dir.join("junit.xml")).unwrap();
        assert!(
            junit.contains("shed_onset") && junit.contains("testsuite"),
            "{junit}"
        );
    }

    const MAIN_FOUR: [&str; 4] = ["shed_onset", "retry_after", "memory_ceiling", "drain"];

    /// The CI smoke scenario (at twice its speed, 15 s; at four times a
    /// debug build's load generator falls behind with its 256 KiB requests
    /// on a busy machine): a deadline gateway passes the four main checks
    /// (shed onset, Retry-After, memory ceiling, drain)...
    #[test]
    fn ci_smoke_passes_against_deadline() {
        let deadline = rehearse_run("ci-smoke.toml", &["--time-scale", "2"]);
        for id in MAIN_FOUR {
            assert_eq!(
                deadline.status(id),
                "pass",
                "{id}: {}\n{}",
                deadline.detail(id),
                deadline.stdout
            );
        }
    }

    /// ...and naive fails all four.
    #[test]
    fn ci_smoke_fails_against_naive() {
        let naive = rehearse_run(
            "ci-smoke.toml",
            &["--time-scale", "2", "--set", "gateway.reference.mode=naive"],
        );
        for id in MAIN_FOUR {
            assert_eq!(
                naive.status(id),
                "fail",
                "{id}: {}\n{}",
                naive.detail(id),
                naive.stdout
            );
        }
        assert_eq!(naive.code, Some(1));
    }

    /// Little's-law quantities do not change with the time scale, and the
    /// timeline's rows are seconds of scenario time at any scale, so
    /// neither do the verdicts, nor the figures once unscaled: the same
    /// scenario at time scales 2, 10 and 20. (A scenario of its own: 10 s
    /// of baseline for the drain, 8 s at twice the provider's 2/s, 8 s
    /// after; 13 s at scale 2, and 80 requests/s at the peak at twenty
    /// times.)
    ///
    /// Tolerances, in scenario terms: counts within 10% (or 3), the most
    /// waiting within 20% (or 2), the drain time within 2 s (its rows are
    /// whole scenario seconds, read through a 5 s window). At twenty times
    /// a scenario second is 50 ms, and the patience 300 ms: a busy
    /// machine's scheduling noise of a few milliseconds moves an event
    /// across a row at most, where at forty times (150 ms of patience) it
    /// moved callers past their patience.
    #[test]
    fn time_scales_give_the_same_verdicts() {
        let path = write_temp(
            "scaled.toml",
            r#"[scenario]
name = "scaled"
[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "1s" }
per_token = { fixed = "0ms" }
[provider.concurrency]
ceiling = 2
[gateway]
memory_ceiling = "256MiB"
[gateway.reference]
mode = "bounded"
bounded = { concurrency = 2, queue = 8, wait_budget = "5s" }
[load]
patience = { fixed = "6s" }
# Service takes 1 s (25 ms at forty times): a 20 ms send lag still keeps
# the schedule inside what is measured, on a shared 2-core machine.
send_lag_p99_max = "20ms"
[[load.phases]]
name = "baseline"
duration = "10s"
rate = 1
[[load.phases]]
name = "overload"
duration = "8s"
rate = 4
[[load.phases]]
name = "after"
duration = "8s"
rate = 0.5
[checklist]
drain = { within = "10s" }
goodput = { min_share = 0.6 }
served_latency = { p99_ms = 6000 }
"#,
        );
        let path = path.to_str().unwrap();
        let runs: Vec<(f64, Rehearsal)> = [2.0, 10.0, 20.0]
            .into_iter()
            .map(|ts| (ts, rehearse_run(path, &["--time-scale", &ts.to_string()])))
            .collect();
        let (base_ts, base) = (runs[0].0, &runs[0].1);
        assert_eq!(base.report["verdict"], "pass", "{}", base.stdout);
        let ids: Vec<String> = base.report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        let close = |what: &str, a: f64, b: f64, share: f64, floor: f64, ts: f64| {
            assert!(
                (a - b).abs() <= (share * b.abs()).max(floor),
                "{what} at scale {ts}: {a}, at scale {base_ts}: {b}"
            );
        };
        for (ts, run) in &runs[1..] {
            let ts = *ts;
            assert_eq!(run.report["time_scale"], ts);
            for id in &ids {
                assert_eq!(
                    run.status(id),
                    base.status(id),
                    "{id} at scale {ts}: {} / at scale {base_ts}: {}",
                    run.detail(id),
                    base.detail(id)
                );
            }
            let f = |r: &Rehearsal, k: &str, f: &str| r.report[k][f].as_f64().unwrap_or(f64::NAN);
            assert_eq!(
                run.report["counts"]["offered"], base.report["counts"]["offered"],
                "the same schedule at every scale"
            );
            for count in ["ok", "shed", "timeout"] {
                let (a, b) = (f(run, "counts", count), f(base, "counts", count));
                close(count, a, b, 0.1, 3.0, ts);
            }
            let (a, b) = (
                f(run, "gateway", "peak_backlog"),
                f(base, "gateway", "peak_backlog"),
            );
            close("peak backlog", a, b, 0.2, 2.0, ts);
            let drain = |r: &Rehearsal| r.report["drain_s"].as_f64();
            match (drain(run), drain(base)) {
                (Some(a), Some(b)) => {
                    close("drain time (unscaled)", a * ts, b * base_ts, 0.0, 2.0, ts);
                }
                (a, b) => assert_eq!(a, b, "drain time at scale {ts}"),
            }
        }
    }

    /// `rehearse report DIR --set` judges the saved records again.
    #[test]
    fn report_rejudges_a_saved_run_with_new_thresholds() {
        let run = rehearse_run(
            "pool-demo.toml",
            &["--time-scale", "10", "--junit", "/dev/null"],
        );
        assert_eq!(run.code, Some(0), "{}", run.stdout);
        let out = rehearse()
            .arg("report")
            .arg(&run.dir)
            .args([
                "--set",
                "checklist.memory_ceiling.enabled=false",
                "--set",
                "checklist.served_latency.p99_ms=1",
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.dir.join("report.json")).unwrap())
                .unwrap();
        let status = |id: &str| {
            report["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["id"] == id)
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(status("served_latency"), "fail");
        // Turned off by the new thresholds: "off", never "skipped" or "pass".
        assert_eq!(status("memory_ceiling"), "off");
        let out = rehearse()
            .args(["report", "/nonexistent/run"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        // A typo in the reference gateway's table is bad input here too.
        let out = rehearse()
            .arg("report")
            .arg(&run.dir)
            .args(["--set", "gateway.reference.concurency=8"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("scenario.toml (with --set):")
                && err.contains("gateway.reference.concurency"),
            "{err}"
        );
    }

    #[test]
    fn a_remote_target_is_refused_without_allow_remote() {
        // TEST-NET-1: refused before any traffic, nothing is sent there.
        let out = rehearse()
            .args([
                "run",
                "--no-progress",
                "--target",
                "http://192.0.2.10:8080",
                "--out",
            ])
            .arg(std::env::temp_dir().join(format!("rehearse-remote-{}", std::process::id())))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    }

    #[test]
    fn a_bad_scenario_exits_2_naming_the_line() {
        let path = write_temp("bad-run.toml", "[scenario]\nname = \"x\"\n[gateway]\nreference = { mode = \"bounded\" }\n[load]\npatience = { fixed = \"forever\" }\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n");
        let out = rehearse().arg("run").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(":6:") && err.contains("load.patience"),
            "{err}"
        );
    }
}

mod faults {
    use super::*;

    /// A scenario whose gateway is `rehearse gateway` wrapped in `timeout`,
    /// so it is killed (SIGKILL) a few seconds into the load.
    fn dying_gateway_scenario(name: &str, restart: bool) -> std::path::PathBuf {
        let bin = common::rehearse_bin();
        let bin = bin.display();
        write_temp(
            name,
            &format!(
                r#"[scenario]
name = "{name}"
[provider.latency]
ttft = {{ fixed = "300ms" }}
[gateway]
command = ["timeout", "-s", "KILL", "3", "{bin}", "gateway", "--mode", "bounded", "--upstream", "{{provider_url}}", "--listen", "{{listen}}"]
restart = {restart}
restart_delay = "500ms"
[load]
patience = {{ fixed = "2s" }}
# The gateway is being killed: schedule precision is not what is tested.
send_lag_p99_max = "50ms"
[[load.phases]]
duration = "6s"
rate = 20
[checklist]
memory_ceiling = {{ enabled = false }}
"#
            ),
        )
    }

    fn run_scenario(
        path: &std::path::Path,
        out: &std::path::Path,
    ) -> (Option<i32>, serde_json::Value, String) {
        let _one = one_at_a_time();
        let _ = std::fs::remove_dir_all(out);
        let o = rehearse()
            .arg("run")
            .arg(path)
            .arg("--out")
            .arg(out)
            .arg("--no-progress")
            .output()
            .unwrap();
        let stdout =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        let report = std::fs::read_to_string(out.join("report.json"))
            .unwrap_or_else(|e| panic!("no report.json: {e}\n{stdout}"));
        (
            o.status.code(),
            serde_json::from_str(&report).unwrap(),
            stdout,
        )
    }

    fn check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()
    }

    /// The gateway dies mid-run: the run goes on to its end, the report
    /// says when it died and how many requests it took with it, and
    /// no_silent_loss fails with that number.
    #[test]
    fn a_gateway_killed_mid_run_is_reported_and_its_losses_counted() {
        let path = dying_gateway_scenario("dies", false);
        let out = std::env::temp_dir().join(format!("rehearse-dies-{}", std::process::id()));
        let (code, report, stdout) = run_scenario(&path, &out);
        // A check failed (1), or a busy machine made the run invalid (3):
        // either way not a pass, and the notes below are what is tested.
        assert!(matches!(code, Some(1) | Some(3)), "{code:?}: {stdout}");
        let notes = report["notes"].to_string();
        assert!(
            notes.contains("the gateway died") && notes.contains("requests were inside it"),
            "{notes}"
        );
        let loss = check(&report, "no_silent_loss");
        assert_eq!(loss["status"], "fail", "{loss}");
        // Everything after the death fails to connect: far more than zero lost.
        let errors = report["counts"]["error"].as_u64().unwrap()
            + report["counts"]["timeout"].as_u64().unwrap();
        assert!(errors >= 20, "{}", report["counts"]);
    }

    /// With `restart = true` the harness restarts it after the delay, as an
    /// orchestrator would, and counts the downtime.
    #[test]
    fn a_dead_gateway_is_restarted_when_asked() {
        let path = dying_gateway_scenario("restarts", true);
        let out = std::env::temp_dir().join(format!("rehearse-restarts-{}", std::process::id()));
        let (_, report, stdout) = run_scenario(&path, &out);
        let notes = report["notes"].to_string();
        assert!(notes.contains("the gateway died"), "{notes}\n{stdout}");
        assert!(
            notes.contains("the gateway was restarted") && notes.contains("down for"),
            "{notes}"
        );
        // Served before the death and again after the restart.
        assert!(
            report["counts"]["ok"].as_u64().unwrap() > 60,
            "{}",
            report["counts"]
        );
    }

    /// `memory_limit` runs the gateway under that limit: an unbounded
    /// gateway whose backlog outgrows it is killed, and the report says so.
    #[test]
    fn a_memory_limit_kills_an_unbounded_gateway() {
        let path = write_temp(
            "oom.toml",
            r#"[scenario]
name = "oom"
[provider.latency]
ttft = { fixed = "4s" }
[gateway]
memory_limit = "48MiB"
[gateway.reference]
mode = "naive"
[load]
patience = { fixed = "6s" }
# The gateway is being killed: schedule precision is not what is tested.
send_lag_p99_max = "50ms"
[[load.phases]]
duration = "5s"
rate = 40
[load.request]
padding_kb = { fixed = 512 }
"#,
        );
        let out = std::env::temp_dir().join(format!("rehearse-oom-{}", std::process::id()));
        let (code, report, stdout) = run_scenario(&path, &out);
        // A check failed (1), or a busy machine made the run invalid (3):
        // either way not a pass, and the notes below are what is tested.
        assert!(matches!(code, Some(1) | Some(3)), "{code:?}: {stdout}");
        let notes = report["notes"].to_string();
        assert!(notes.contains("the gateway died"), "{notes}\n{stdout}");
        assert!(
            notes.contains("memory limit") || notes.contains("signal"),
            "{notes}"
        );
        assert_eq!(check(&report, "no_silent_loss")["status"], "fail");
    }

    /// SIGTERM during a run: the load stops, the gateway's group is ended,
    /// and a report marked partial is written within about 2 seconds.
    #[test]
    fn sigterm_writes_a_partial_report_quickly() {
        let _one = one_at_a_time();
        let out = std::env::temp_dir().join(format!("rehearse-sigterm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let child = rehearse()
            .arg("run")
            .arg(format!(
                "{}/scenarios/pool-demo.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("--out")
            .arg(&out)
            .arg("--no-progress")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the gateway is up, then let the load flow a while.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(out.join("gateway.log"))
            .is_ok_and(|l| l.contains("listening on"))
        {
            assert!(Instant::now() < deadline, "the run did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(3));
        let gateway_cfg = std::fs::read_to_string(out.join("gateway.toml")).unwrap();
        let listen = gateway_cfg
            .lines()
            .find_map(|l| l.strip_prefix("listen = "))
            .unwrap()
            .trim_matches('"')
            .to_string();
        let signalled = Instant::now();
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let mut running = Running(child);
        let status = loop {
            if let Some(s) = running.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(10),
                "the run did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = signalled.elapsed();
        assert_eq!(status.code(), Some(3), "a partial run is not a pass");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(report["partial"], true);
        assert_eq!(report["verdict"], "invalid");
        // The gateway's process group is gone: nothing listens any more.
        assert!(
            std::net::TcpStream::connect(&listen).is_err(),
            "the gateway still listens on {listen}"
        );
        // No half-written files.
        for entry in std::fs::read_dir(&out).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            assert!(!name.ends_with(".tmp"), "{name} left behind");
        }
        // The release binary writes its partial report about 1.1 s after
        // SIGTERM (0.5 s of grace for requests in flight, then the reports);
        // this debug build on a shared machine is given more room.
        assert!(took < Duration::from_secs(10), "took {took:?} to stop");
        eprintln!("stopped {took:?} after SIGTERM");
    }

    /// A second SIGTERM (or Ctrl-C) exits at once, and still ends the
    /// gateway's process group.
    #[test]
    fn a_second_signal_exits_at_once_and_ends_the_gateway() {
        let _one = one_at_a_time();
        let out = std::env::temp_dir().join(format!("rehearse-sigterm2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let child = rehearse()
            .arg("run")
            .arg(format!(
                "{}/scenarios/pool-demo.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("--out")
            .arg(&out)
            .arg("--no-progress")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut running = Running(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(out.join("gateway.log"))
            .is_ok_and(|l| l.contains("listening on"))
        {
            assert!(Instant::now() < deadline, "the run did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(1));
        let listen = std::fs::read_to_string(out.join("gateway.toml"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("listen = ")
                    .map(|v| v.trim_matches('"').to_string())
            })
            .unwrap();
        let pid = running.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let signalled = Instant::now();
        let status = loop {
            if let Some(s) = running.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(3),
                "the second signal did not exit at once"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(130));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            std::net::TcpStream::connect(&listen).is_err(),
            "the gateway outlived the harness"
        );
    }

    /// Before a run the harness predicts the connections it will hold; if
    /// even the hard limit on open files cannot hold what it expects at its
    /// peak, it refuses to start, with the numbers, before any traffic.
    #[test]
    fn too_few_file_descriptors_refuse_the_run() {
        let out = std::env::temp_dir().join(format!("rehearse-fds-{}", std::process::id()));
        let o = Command::new("prlimit")
            .arg("--nofile=200:200")
            .arg(common::rehearse_bin())
            .arg("run")
            .arg(format!(
                "{}/scenarios/pool-demo.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("--out")
            .arg(&out)
            .arg("--no-progress")
            .output()
            .expect("prlimit (util-linux) runs");
        assert_eq!(o.status.code(), Some(3));
        let err = String::from_utf8_lossy(&o.stderr);
        // The backlog the plan predicts (264 held a side at the end of
        // the slow phase), x2 sides x2 margin + 256; and the worst case,
        // 40/s held 30 s.
        assert!(
            err.contains("expects to hold about 1310 open files")
                && err.contains("3856 in the worst case")
                && err.contains("limit is 200"),
            "{err}"
        );
        assert!(!out.join("client.jsonl").exists(), "no load was sent");
    }

    /// 200 requests/s against a 50 ms provider, 3 s of patience: about 10
    /// sockets a side expected (296 open files with the margins and the
    /// harness's own), 2,056 in the worst case. A hard limit of 400 lies
    /// between the two.
    const SQUEEZE: &str = r#"
[scenario]
name = "fd-squeeze"
seed = 5
[provider]
completion_tokens = { fixed = 5 }
[provider.latency]
ttft = { fixed = "50ms" }
per_token = { fixed = "0ms" }
[gateway.reference]
mode = "naive"
[load]
patience = { fixed = "3s" }
send_lag_p99_max = "100ms"
[[load.phases]]
duration = "2s"
rate = 200
[load.request]
prompt_tokens = { fixed = 10 }
max_tokens = { fixed = 5 }
"#;

    /// `rehearse run` of [`SQUEEZE`] under a hard limit of 400 open files,
    /// with `sets`: its exit code, stderr and run directory.
    fn squeezed(name: &str, sets: &[&str]) -> (Option<i32>, String, std::path::PathBuf) {
        let _one = one_at_a_time();
        let scenario = write_temp(&format!("{name}.toml"), SQUEEZE);
        let out = std::env::temp_dir().join(format!("rehearse-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let mut cmd = Command::new("prlimit");
        cmd.arg("--nofile=400:400")
            .arg(common::rehearse_bin())
            .arg("run")
            .arg(&scenario)
            .arg("--out")
            .arg(&out)
            .arg("--no-progress");
        for s in sets {
            cmd.args(["--set", s]);
        }
        let o = cmd.output().expect("prlimit (util-linux) runs");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        (o.status.code(), err, out)
    }

    fn notes(out: &std::path::Path) -> String {
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        report["notes"].to_string()
    }

    /// Only the worst case over the limit: the run warns with both numbers
    /// and goes ahead; its files never run out, and nothing says they did.
    #[test]
    fn a_worst_case_over_the_limit_warns_and_runs() {
        let (code, err, out) = squeezed("fds-warn", &[]);
        assert!(
            err.contains("expects to hold about 296")
                && err.contains("up to 2056")
                && err.contains("limit of 400"),
            "{err}"
        );
        assert_ne!(code, Some(2), "{err}");
        let notes = notes(&out);
        assert!(notes.contains("up to 2056"), "{notes}");
        assert!(!notes.contains("ran out of open files"), "{notes}");
        let records = std::fs::read_to_string(out.join("client.jsonl")).unwrap();
        assert_eq!(records.lines().count(), 400, "one record per arrival");
    }

    /// The same run with every provider call hanging: each caller is held
    /// to the end of their patience, the worst case. The load generator
    /// keeps its connections within the open files it can spare (400 less
    /// 256 kept, halved because the in-process fake provider takes its
    /// sockets from the same table: 72; with 144 the provider's 250 hung
    /// calls beside them ran the process out of files when the machine was
    /// busy). The gateway is one that cancels its upstream call when its
    /// caller hangs up (`timeout` mode, its timeout past the patience), so
    /// the provider holds no more calls than the generator has callers: a
    /// naive gateway keeps every hung call after its caller left (321 of
    /// them in one CI run), a number no bound of the generator's limits.
    /// So the descriptors never run out: the callers past
    /// that wait for a connection at the load generator's own bound (their
    /// `client_wait_us`; a wait of the generator's, not the callers': the
    /// run is invalid), every arrival is still recorded,
    /// nothing panics, and the notes say the bound was reached and why.
    #[test]
    fn a_worst_case_past_the_open_files_waits_within_them_and_says_so() {
        // The hung calls would hold the harness for its drain allowance
        // (a minute by default) after the load: not what is tested here.
        let (code, err, out) = squeezed(
            "fds-out",
            &[
                "provider.faults.hang=1.0",
                "checklist.drain.within=1s",
                "gateway.reference.mode=timeout",
                "gateway.reference.upstream_timeout=10s",
            ],
        );
        assert!(err.contains("up to 2056"), "{err}");
        assert_eq!(code, Some(3), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        let log = std::fs::read_to_string(out.join("gateway.log")).unwrap_or_default();
        assert!(!log.contains("panicked"), "{log}");
        let notes = notes(&out);
        assert!(
            notes.contains("bound on open connections was reached")
                && notes.contains("open-files limit of 400")
                && notes.contains("halved: the fake provider serves from this process"),
            "{notes}"
        );
        assert!(!notes.contains("ran out of open files"), "{notes}");
        let records = std::fs::read_to_string(out.join("client.jsonl")).unwrap();
        let records: Vec<serde_json::Value> = records
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: std::collections::HashSet<_> =
            records.iter().map(|r| r["id"].to_string()).collect();
        assert_eq!(ids.len(), 400, "every arrival recorded");
        let out_of_files = records
            .iter()
            .filter(|r| {
                r["reason"]
                    .as_str()
                    .is_some_and(|c| c.contains("Too many open files"))
            })
            .count();
        assert_eq!(out_of_files, 0, "a connect ran out of open files");
        let waited = records
            .iter()
            .filter(|r| r["client_wait_us"].as_u64().is_some_and(|w| w > 0))
            .count();
        assert!(waited > 0, "no caller waited in the client at the bound");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["connection_bound"]["largest"], 72, "{summary}");
        let most_open = summary["connection_bound"]["most_open"].as_u64().unwrap();
        assert!(most_open <= 72, "{most_open} open at once");
    }
}

/// `report.html` in a real browser: headless Chromium (Debian's
/// `chromium`, which `.ci/run` installs) opens a real run's report from
/// disk, and the DevTools protocol reports what a person would see go wrong.
mod html_report {
    use super::*;
    use std::ffi::OsStr;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use headless_chrome::protocol::cdp::types::Event;
    use headless_chrome::protocol::cdp::{Log, Network, Page, Runtime};
    use headless_chrome::{Browser, LaunchOptions};

    const CHROMIUM: &str = "/usr/bin/chromium";
    const CHARTS: [&str; 6] = [
        "traffic",
        "requests",
        "latency",
        "memory",
        "retry-after",
        "distribution",
    ];

    /// A short real rehearsal (the pool demo, ten times faster); returns
    /// its run directory and what `rehearse run` printed.
    fn short_run() -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("rehearse-html-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = rehearse()
            .arg("run")
            .arg(format!(
                "{}/scenarios/pool-demo.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(["--time-scale", "10", "--no-progress", "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            dir.join("report.html").exists(),
            "no report.html\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir, stdout)
    }

    /// Evaluates `js` (an expression returning a string) in the page.
    fn eval(tab: &headless_chrome::Tab, js: &str) -> String {
        let v = tab.evaluate(js, false).unwrap().value;
        match v {
            Some(serde_json::Value::String(s)) => s,
            other => panic!("{js} gave {other:?}"),
        }
    }

    #[test]
    fn report_html_opens_from_disk_in_headless_chromium_with_every_chart_drawn() {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: this test opens report.html in Debian's headless Chromium; \
             `bash .ci/run` installs it (apt-get install -y chromium)"
        );
        // The browser too runs alone: on a small machine it would make a
        // rehearsal in another test miss its schedule.
        let _one = one_at_a_time();
        let started = Instant::now();
        let (dir, stdout) = short_run();
        let html = dir.join("report.html");
        assert_eq!(
            stdout.trim_end().lines().last(),
            Some(format!("charts: {}", html.display()).as_str()),
            "the terminal output ends with the path of report.html:\n{stdout}"
        );
        for id in CHARTS {
            let png = std::fs::read(dir.join(format!("chart-{id}.png"))).unwrap();
            assert_eq!(&png[1..4], b"PNG", "chart-{id}.png");
        }

        let profile = dir.join("chromium-profile");
        let options = LaunchOptions::default_builder()
            .path(Some(CHROMIUM.into()))
            .headless(true)
            .sandbox(false)
            .window_size(Some((1280, 1000)))
            .user_data_dir(Some(profile))
            .idle_browser_timeout(Duration::from_secs(60))
            .args(
                [
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ]
                .iter()
                .map(OsStr::new)
                .collect(),
            )
            .build()
            .unwrap();
        let browser = Browser::new(options).expect("headless chromium starts");
        let tab = browser.new_tab().unwrap();
        tab.set_default_timeout(Duration::from_secs(20));

        // Everything that goes wrong while the page loads: console errors
        // and warnings, uncaught exceptions, failed requests; and every
        // request the page makes.
        let problems = Arc::new(Mutex::new(Vec::<String>::new()));
        let requests = Arc::new(Mutex::new(Vec::<String>::new()));
        {
            let (problems, requests) = (problems.clone(), requests.clone());
            tab.add_event_listener(Arc::new(move |event: &Event| {
                let problem = match event {
                    Event::LogEntryAdded(e)
                        if matches!(
                            e.params.entry.level,
                            Log::LogEntryLevel::Error | Log::LogEntryLevel::Warning
                        ) =>
                    {
                        Some(format!("log: {}", e.params.entry.text))
                    }
                    Event::RuntimeConsoleAPICalled(e)
                        if matches!(
                            e.params.Type,
                            Runtime::ConsoleAPICalledEventTypeOption::Error
                                | Runtime::ConsoleAPICalledEventTypeOption::Warning
                                | Runtime::ConsoleAPICalledEventTypeOption::Assert
                        ) =>
                    {
                        Some(format!("console: {:?}", e.params.args))
                    }
                    Event::RuntimeExceptionThrown(e) => {
                        Some(format!("exception: {:?}", e.params.exception_details))
                    }
                    Event::NetworkLoadingFailed(e) => {
                        Some(format!("failed request: {}", e.params.error_text))
                    }
                    Event::NetworkRequestWillBeSent(e) => {
                        requests.lock().unwrap().push(e.params.request.url.clone());
                        None
                    }
                    _ => None,
                };
                if let Some(p) = problem {
                    problems.lock().unwrap().push(p);
                }
            }))
            .unwrap();
        }
        tab.enable_log().unwrap();
        tab.enable_runtime().unwrap();
        tab.call_method(Network::Enable {
            max_total_buffer_size: None,
            max_resource_buffer_size: None,
            max_post_data_size: None,
            report_direct_socket_traffic: None,
            enable_durable_messages: None,
        })
        .unwrap();
        let url = format!("file://{}", html.display());
        tab.navigate_to(&url)
            .unwrap()
            .wait_until_navigated()
            .unwrap();

        // Every chart is drawn at a size a person can see.
        let sizes: Vec<(String, f64, f64)> = serde_json::from_str(&eval(
            &tab,
            "JSON.stringify([...document.querySelectorAll('figure.chart')].map(f => {
                const s = f.querySelector('svg');
                const r = s ? s.getBoundingClientRect() : { width: 0, height: 0 };
                return [f.id, r.width, r.height];
            }))",
        ))
        .unwrap();
        let ids: Vec<_> = sizes.iter().map(|s| s.0.as_str()).collect();
        let want: Vec<_> = CHARTS.iter().map(|c| format!("chart-{c}")).collect();
        assert_eq!(ids, want);
        for (id, w, h) in &sizes {
            assert!(*w > 300.0 && *h > 100.0, "{id} is drawn {w} x {h}");
        }
        // The checklist above them, one row per check, and nothing loaded
        // from anywhere (no image, font, script or style sheet).
        assert_eq!(
            eval(
                &tab,
                "String(document.querySelectorAll('#checklist tbody tr').length)"
            ),
            assertions::always_judged().count().to_string()
        );
        assert_eq!(
            eval(
                &tab,
                "String(performance.getEntriesByType('resource').length)"
            ),
            "0"
        );

        // A screenshot of the whole page, as a test artifact.
        let height: f64 = eval(&tab, "String(document.documentElement.scrollHeight)")
            .parse()
            .unwrap();
        let shot = tab
            .call_method(Page::CaptureScreenshot {
                format: Some(Page::CaptureScreenshotFormatOption::Png),
                quality: None,
                clip: Some(Page::Viewport {
                    x: 0.0,
                    y: 0.0,
                    width: 1280.0,
                    height: height.min(16_000.0),
                    scale: 1.0,
                }),
                from_surface: Some(true),
                capture_beyond_viewport: Some(true),
                optimize_for_speed: None,
            })
            .unwrap()
            .data;
        let png = base64_decode(&shot);
        assert_eq!(&png[1..4], b"PNG");
        let artifact = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
        std::fs::write(&artifact, &png).unwrap();
        std::fs::write(dir.join("report-screenshot.png"), &png).unwrap();

        let problems = problems.lock().unwrap();
        assert!(
            problems.is_empty(),
            "{url} in Chromium:\n{}",
            problems.join("\n")
        );
        let requests = requests.lock().unwrap();
        assert!(
            requests.iter().all(|r| *r == url),
            "report.html must fetch nothing: {requests:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "a rehearsal and a page load must take under a minute"
        );
        eprintln!("screenshot: {}", artifact.display());

        // `rehearse report DIR` writes the page and its PNGs again, and
        // ends with its path too.
        std::fs::remove_file(&html).unwrap();
        std::fs::remove_file(dir.join("chart-traffic.png")).unwrap();
        let out = rehearse().arg("report").arg(&dir).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim_end().lines().last(),
            Some(format!("charts: {}", html.display()).as_str()),
            "{stdout}"
        );
        assert!(std::fs::read_to_string(&html)
            .unwrap()
            .contains("id=\"chart-distribution\""));
        assert!(dir.join("chart-traffic.png").exists());
    }

    /// Standard base64 (the screenshot as DevTools sends it).
    fn base64_decode(s: &str) -> Vec<u8> {
        let value = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        };
        let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').map(value).collect();
        let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
        for chunk in bytes.chunks(4) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (18 - 6 * i)));
            for i in 0..chunk.len().saturating_sub(1) {
                out.push((n >> (16 - 8 * i)) as u8);
            }
        }
        out
    }
}

/// `rehearse load`: the load generator on its own, against a fake provider
/// in this process.
mod load {
    use super::*;
    use std::path::{Path, PathBuf};

    const SMALL: &str =
        "[load]\nsend_lag_p99_max = \"1s\"\n[[load.phases]]\nduration = \"500ms\"\nrate = 20\n";

    /// A fresh folder holding `scenario` as scenario.toml.
    fn scratch(name: &str, scenario: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rehearse-load-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("scenario.toml"), scenario).unwrap();
        dir
    }

    /// `rehearse load` on `dir`'s scenario, its records into `dir`/out.
    fn load(dir: &Path, target: &str) -> Command {
        let mut cmd = rehearse();
        cmd.arg("load")
            .arg(dir.join("scenario.toml"))
            .args(["--target", target, "--no-progress", "--out"])
            .arg(dir.join("out"));
        cmd
    }

    /// A fake provider answering after `ttft`, on a port of its own.
    fn provider(rt: &tokio::runtime::Runtime, ttft: &str) -> fake_provider::ProviderHandle {
        let config = fake_provider::ProviderConfig::from_toml(
            &format!("[latency]\nttft = {{ fixed = \"{ttft}\" }}\n"),
            "test",
        )
        .unwrap();
        rt.block_on(fake_provider::FakeProvider::new(config).bind("127.0.0.1:0"))
            .unwrap()
    }

    #[test]
    fn bad_load_table_is_bad_input() {
        let dir = scratch(
            "bad",
            "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = \"fast\"\n",
        );
        let out = load(&dir, "http://127.0.0.1:9").output().unwrap();
        assert_eq!(out.status.code(), Some(2));
    }

    #[test]
    fn unreachable_target_is_bad_input_and_fast() {
        let dir = scratch("unreachable", SMALL);
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let began = Instant::now();
        let out = load(&dir, &format!("http://127.0.0.1:{port}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(began.elapsed() < Duration::from_secs(5));
        assert!(!dir.join("out").join("client.jsonl").exists());
    }

    #[test]
    fn a_run_against_the_fake_provider_writes_its_records() {
        let _one = one_at_a_time();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let provider = provider(&rt, "10ms");
        let dir = scratch("run", SMALL);
        let out = load(&dir, &provider.base_url()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = dir.join("out");
        let lines = std::fs::read_to_string(out.join("client.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 10);
        for f in ["summary.json", wire::files::LOAD_SECONDS, "client.hlog"] {
            assert!(out.join(f).exists(), "{f}");
        }
        rt.block_on(provider.shutdown());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two shards started at one instant play the scenario's schedule at
    /// its scale: 20/s for 500 ms at time_scale 2 is 40/s for 250 ms, 10
    /// people, the even ones in shard 0/2, the odd in 1/2. A start that
    /// has passed is refused (exit 2).
    #[test]
    fn shards_split_the_scaled_schedule_at_an_agreed_start() {
        let _one = one_at_a_time();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let provider = provider(&rt, "10ms");
        let dir = scratch(
            "shards",
            &format!("[scenario]\nname = \"s\"\ntime_scale = 2\n{SMALL}"),
        );
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            + 1.5;
        let shard = |i: u32| {
            let mut cmd = rehearse();
            cmd.arg("load")
                .arg(dir.join("scenario.toml"))
                .args(["--target", &provider.base_url(), "--no-progress", "--out"])
                .arg(dir.join(format!("out{i}")))
                .args([
                    "--shard",
                    &format!("{i}/2"),
                    "--start-at",
                    &format!("{at:.3}"),
                ])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let children = [shard(0), shard(1)];
        let mut ids = Vec::new();
        for (i, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = std::fs::read_to_string(dir.join(format!("out{i}/client.jsonl"))).unwrap();
            for line in text.lines() {
                let r: wire::ClientRecord = serde_json::from_str(line).unwrap();
                let n: u64 = r.id.trim_start_matches('r').parse().unwrap();
                assert_eq!(n % 2, i as u64, "{} in shard {i}/2", r.id);
                // The schedule starts at the agreed instant.
                assert!(r.intended_us as f64 >= at * 1e6 - 1_000.0, "{r:?}");
                // ...and lasts 250 ms, not 500: the scenario's time scale.
                assert!((r.intended_us as f64) < at * 1e6 + 251_000.0, "{r:?}");
                ids.push(n);
            }
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<u64>>());
        let late = load(&dir, &provider.base_url())
            .args(["--shard", "0/2", "--start-at", "2020-01-01T00:00:00Z"])
            .output()
            .unwrap();
        assert_eq!(late.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&late.stderr).contains("start time passed"));
        rt.block_on(provider.shutdown());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// SIGTERM with requests in flight (the provider answers after 5 s,
    /// the callers wait 30 s): the load stops within 2 s, exit 3 (the run
    /// is partial), every record line whole and the summary written.
    #[test]
    fn sigterm_stops_within_2s_with_whole_records_and_exit_3() {
        let _one = one_at_a_time();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let provider = provider(&rt, "5s");
        let dir = scratch(
            "sigterm",
            "[load]\nsend_lag_p99_max = \"1s\"\npatience = { fixed = \"30s\" }\n\
             [[load.phases]]\nduration = \"20s\"\nrate = 20\n",
        );
        let child = load(&dir, &provider.base_url())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut running = Running(child);
        std::thread::sleep(Duration::from_secs(1));
        let signalled = Instant::now();
        Command::new("kill")
            .args(["-TERM", &running.0.id().to_string()])
            .status()
            .unwrap();
        let status = loop {
            if let Some(s) = running.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(2),
                "rehearse load did not stop within 2 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(3), "a partial run is not a pass");
        let out = dir.join("out");
        let records = std::fs::read_to_string(out.join("client.jsonl")).unwrap();
        assert!(!records.is_empty(), "requests were in flight");
        assert!(records.ends_with('\n'), "the last line is whole");
        for line in records.lines() {
            let _: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not a record ({e}): {line}"));
        }
        for f in ["summary.json", "client.hlog"] {
            assert!(out.join(f).exists(), "{f}");
        }
        drop(provider);
        rt.shutdown_background();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

mod gateway {
    use super::*;

    /// SIGTERM as soon as the address is printed: the handler is already
    /// in place (registered before the print), so the gateway drains and
    /// exits 0 instead of dying of the default action.
    #[test]
    fn sigterm_right_after_the_address_exits_0() {
        let child = rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream"])
            .args(["http://127.0.0.1:9", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut running = Running(child);
        let mut line = String::new();
        BufReader::new(running.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening on http://"), "{line:?}");
        Command::new("kill")
            .args(["-TERM", &running.0.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = running.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "gateway did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "{status:?}");
    }

    /// `--fault` is in `rehearse gateway --help` with its warning and its
    /// kinds; a gateway given `refuse-408` says so on stderr and answers
    /// 408 without calling its upstream (nothing listens there: a call
    /// would be a 502).
    #[test]
    fn a_fault_is_documented_said_at_start_and_served() {
        let help = rehearse().args(["gateway", "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(
            help.contains("--fault <KIND>")
                && help.contains("A fault to show a check failing; never for a real rehearsal")
                && help.contains("refuse-500-after=DURATION"),
            "{help}"
        );
        let child = rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream"])
            .args(["http://127.0.0.1:9", "--listen", "127.0.0.1:0"])
            .args(["--fault", "refuse-408", "--fault", "hoard"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut running = Running(child);
        let mut line = String::new();
        BufReader::new(running.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (status, body) = rt.block_on(async {
            let r = reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        });
        assert_eq!(status, 408, "{body}");
        assert!(body.contains("request_timeout"), "{body}");
        let _ = running.0.kill();
        let _ = running.0.wait();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut running.0.stderr.take().unwrap(), &mut out).unwrap();
        for fault in ["refuse-408", "hoard"] {
            assert!(
                out.contains(&format!("fault {fault}: given on purpose")),
                "{out}"
            );
        }
    }

    /// `fault = "refuse-500-after=1s"` in a scenario's `[gateway.reference]`
    /// reaches the gateway the harness starts, at the rehearsal's scale: at
    /// five times, every request is held about 200 ms, then answered 500,
    /// and the provider sees no call.
    #[test]
    fn a_scenario_fault_reaches_the_reference_gateway_scaled() {
        let _one = common::one_at_a_time();
        let path = write_temp(
            "fault.toml",
            r#"[scenario]
name = "fault"
[provider]
completion_tokens = { fixed = 5 }
[gateway.reference]
mode = "bounded"
fault = "refuse-500-after=1s"
[load]
patience = { fixed = "10s" }
[[load.phases]]
name = "steady"
duration = "5s"
rate = 4
"#,
        );
        let dir = std::env::temp_dir().join(format!("rehearse-fault-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = rehearse()
            .arg("run")
            .arg(&path)
            .arg("--out")
            .arg(&dir)
            .args(["--no-progress", "--time-scale", "5"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(2), "{said}");
        let gateway_toml = std::fs::read_to_string(dir.join("gateway.toml")).unwrap_or_default();
        let clients = std::fs::read_to_string(dir.join("client.jsonl"))
            .unwrap_or_else(|e| panic!("no client.jsonl ({e}): {said}"));
        let records: Vec<wire::ClientRecord> = clients
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(records.len() >= 15, "{} records", records.len());
        for r in &records {
            assert_eq!(r.status, Some(500), "{r:?}\n{gateway_toml}");
            let held = r.done_us - r.on_the_wire_us();
            assert!(
                (190_000..900_000).contains(&held),
                "held 1 s ÷ 5, not 1 s: {r:?}\n{gateway_toml}"
            );
        }
        let provider = std::fs::read_to_string(dir.join("provider.jsonl")).unwrap_or_default();
        assert_eq!(provider.lines().count(), 0, "{provider}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
