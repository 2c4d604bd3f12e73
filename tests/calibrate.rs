//! `rehearse calibrate` against real fake providers (`rehearse provider`
//! processes on port 0): knees at 16 and at 40 calls in service, each
//! found within 15%; and a provider that refuses past 20 calls, where the
//! sweep stops by 24 and says why.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::{first_line, json, one_at_a_time, rehearse, scratch, text, Running};

/// A fake provider process serving `config` (TOML), and its base URL.
fn provider(dir: &Path, config: &str) -> (Running, String) {
    let path = dir.join("provider.toml");
    std::fs::write(&path, config).unwrap();
    let mut p = Running(
        rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let url = first_line(&mut p.0, "fake provider listening on ");
    (p, url)
}

/// Runs a sweep of 600 ms steps against `url`; its exit code and
/// calibrate.json.
fn sweep(dir: &Path, url: &str) -> (Option<i32>, serde_json::Value, String) {
    let out_dir = dir.join("out");
    let out = rehearse()
        .args([
            "calibrate",
            "--target",
            url,
            "--step-duration",
            "600ms",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let text = format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        json(&out_dir.join("calibrate.json")),
        text,
    )
}

fn knee_provider(knee: u32) -> String {
    format!(
        "[latency]\nttft = {{ fixed = \"50ms\" }}\nper_token = {{ fixed = \"0ms\" }}\nknee = {knee}\n[completion_tokens]\nfixed = 4\n"
    )
}

#[test]
fn the_knee_of_a_batching_provider_is_found_within_15_percent() {
    let _one = one_at_a_time();
    for knee in [16u32, 40] {
        let dir = scratch("calibrate", &format!("knee-{knee}"));
        let (_p, url) = provider(&dir, &knee_provider(knee));
        let (code, c, text) = sweep(&dir, &url);
        assert_eq!(code, Some(0), "{text}");
        let found = c["knee"]
            .as_f64()
            .unwrap_or_else(|| panic!("no knee: {text}"));
        let error = (found - f64::from(knee)).abs() / f64::from(knee);
        assert!(error <= 0.15, "knee {knee} found at {found}: {text}");
        // A limit below it, and queue bounds from the drain at that limit.
        let limit = c["recommended_limit"].as_u64().unwrap();
        assert!(limit < u64::from(knee) && limit > 0, "{c}");
        let healthy = c["queue_bound_healthy"].as_u64().unwrap();
        let degraded = c["queue_bound_degraded"].as_u64().unwrap();
        assert!(healthy > degraded && degraded > 0, "{c}");
        // Past the knee the median latency grew while throughput stayed.
        let levels = c["levels"].as_array().unwrap();
        let past = levels
            .iter()
            .filter(|l| l["concurrency"].as_f64().unwrap() >= 1.4 * f64::from(knee))
            .filter_map(|l| l["p50_ms"].as_f64())
            .fold(0.0, f64::max);
        assert!(past > 65.0, "latency past the knee {past} ms: {text}");
        assert!(levels.len() <= 16);
        // What it says fits a 100-column terminal (it is not one here: 80).
        for line in text.lines().skip(1) {
            assert!(line.chars().count() <= 100, "{line}");
        }
        let page = std::fs::read_to_string(dir.join("out/calibrate.html")).unwrap();
        assert!(page.contains("knee"), "the page");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_target_that_refuses_past_20_calls_stops_the_sweep_by_24() {
    let _one = one_at_a_time();
    let dir = scratch("calibrate", "refusing");
    let (_p, url) = provider(
        &dir,
        "[latency]\nttft = { fixed = \"50ms\" }\nper_token = { fixed = \"0ms\" }\n[completion_tokens]\nfixed = 4\n[concurrency]\nceiling = 20\noverflow = \"reject\"\n",
    );
    let (code, c, text) = sweep(&dir, &url);
    assert_eq!(code, Some(1), "no knee claimed: {text}");
    let levels = c["levels"].as_array().unwrap();
    let last = levels.last().unwrap()["concurrency"].as_u64().unwrap();
    assert!((21..=24).contains(&last), "stopped at {last}: {text}");
    let stopped = c["stopped"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {text}"));
    assert!(stopped.contains("refused"), "{stopped}");
    assert!(text.contains("stopped at"), "said on the terminal: {text}");
    assert!(c["knee"].is_null(), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_and_a_dead_target() {
    let dir = scratch("calibrate", "bad");
    let out = rehearse()
        .args(["calibrate", "--target", "http://10.9.8.7:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "outside loopback");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    let out = rehearse()
        .args([
            "calibrate",
            "--target",
            "http://127.0.0.1:9",
            "--max-concurrency",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no levels");
    // Nothing listens on the discard port: the target answered nothing.
    let out = rehearse()
        .args([
            "calibrate",
            "--target",
            "http://127.0.0.1:9",
            "--step-duration",
            "200ms",
            "--out",
        ])
        .arg(dir.join("dead"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `concurrency_below_knee` on scenarios/provider-knee.toml (its provider
/// bends at 32 calls in service): a gateway holding 25 calls passes it, a
/// naive one fails it.
#[test]
fn the_knee_check_holds_a_bounded_gateway_and_fails_a_naive_one() {
    let _one = one_at_a_time();
    let dir = scratch("calibrate", "knee-check");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/provider-knee.toml");
    for (mode, want) in [("bounded", "pass"), ("naive", "fail")] {
        let out_dir = dir.join(mode);
        let out = rehearse()
            .arg("run")
            .arg(&scenario)
            .args(["--time-scale", "4", "--no-progress", "--set"])
            .arg(format!("gateway.reference.mode={mode}"))
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        // A busy machine may make the run invalid: the check is judged all the same.
        assert!(
            matches!(out.status.code(), Some(0 | 1 | 3)),
            "{}",
            text(&out)
        );
        let report = json(&out_dir.join("report.json"));
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "concurrency_below_knee")
            .unwrap()
            .clone();
        assert_eq!(check["status"], want, "{mode}: {check}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rehearse calibrate --rig FILE` at small rates on loopback writes this
/// machine's ceiling; `plan` with that file says nothing of a peak within
/// 80% of it, and warns of one past it with the load processes (shards)
/// that would carry it; `run` keeps the ceiling beside its own peak in
/// run.json; a file of another machine is ignored with a warning, one that
/// does not parse is refused (exit 2) at its line and field.
#[test]
fn the_rig_is_measured_written_and_read_by_plan_and_run() {
    let dir = scratch("calibrate", "rig");
    let rig = dir.join("rig.toml");
    let out = rehearse()
        .args(["calibrate", "--rig"])
        .arg(&rig)
        .args([
            "--rig-start-rate",
            "50",
            "--rig-max-rate",
            "100",
            "--step-duration",
            "300ms",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let written = std::fs::read_to_string(&rig).unwrap();
    let table: toml::Table = toml::from_str(&written).unwrap();
    for model in ["per_caller", "pool"] {
        let rate = table[model]["rate_per_s"].as_float().unwrap();
        assert!(rate == 0.0 || (50.0..=100.0).contains(&rate), "{written}");
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("connections per caller: "),
        "{}",
        text(&out)
    );

    // The CI smoke scenario peaks at 30/s (150/s at time scale 5).
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/ci-smoke.toml");
    let with_ceiling = |per_caller: f64| {
        let t = written.replacen(
            "[per_caller]\nrate_per_s = ",
            &format!("[per_caller]\nrate_per_s = {per_caller}\n#"),
            1,
        );
        std::fs::write(&rig, t).unwrap();
    };
    let plan = |extra: &[&str]| {
        let out = rehearse()
            .arg("plan")
            .arg(&scenario)
            .arg("--rig")
            .arg(&rig)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    with_ceiling(1_000.0);
    let (code, err) = plan(&[]);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    with_ceiling(20.0);
    let (code, err) = plan(&[]);
    assert_eq!(code, Some(0), "{err}");
    // 80% of 20/s is 16/s a process: 30/s takes 2.
    assert!(err.contains("30/s") && err.contains("--shards 2"), "{err}");
    let (_, err) = plan(&["--time-scale", "5"]);
    assert!(
        err.contains("150/s") && err.contains("--shards 10"),
        "{err}"
    );

    let _turn = one_at_a_time();
    let run_dir = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(&scenario)
        .args(["--time-scale", "5", "--quiet", "--no-progress", "--rig"])
        .arg(&rig)
        .arg("--out")
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--shards")
            || String::from_utf8_lossy(&out.stderr).contains("(shards)"),
        "{}",
        text(&out)
    );
    let meta = json(&run_dir.join("run.json"));
    assert_eq!(meta["rig"]["ceiling_per_s"], 20.0, "{meta}");
    assert_eq!(meta["rig"]["peak_per_s"], 150.0, "{meta}");
    assert_eq!(meta["rig"]["model"], "per caller", "{meta}");
    assert!(
        meta["notes"]
            .to_string()
            .contains("load processes (shards)"),
        "{meta}"
    );

    // Another machine's file: ignored, said.
    std::fs::write(&rig, written.replacen("cores = ", "cores = 9", 1)).unwrap();
    let (code, err) = plan(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("not on this machine") && err.contains("ignored"),
        "{err}"
    );
    // A file that does not parse: refused at its line and field.
    std::fs::write(
        &rig,
        written.replacen("pool_connections = 64", "pool_connections = \"many\"", 1),
    )
    .unwrap();
    let (code, err) = plan(&[]);
    assert_eq!(code, Some(2), "{err}");
    let line = written
        .lines()
        .position(|l| l.starts_with("pool_connections"))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("rig.toml:{line}:")) && err.contains("pool_connections"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
