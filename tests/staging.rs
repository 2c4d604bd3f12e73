//! A fake provider the harness did not start, as beside a staging
//! gateway: `rehearse run --provider URL --target GATEWAY`, and the
//! multi-machine steps (`stage`, `load --shard` twice, `collect`,
//! `report`). The provider's clock is shifted by ±250 ms (a test-only
//! setting) and must come back corrected. Real processes on 127.0.0.1.

use std::path::Path;
use std::process::{Child, Stdio};

const TOKEN: &str = "staging-secret";

/// No overload: 20 requests/s for 3 s against a provider that answers in
/// 50 ms; every attempt is answered, whatever the split.
const SCENARIO: &str = r#"[scenario]
name = "staging"
seed = 41

[provider]
completion_tokens = { fixed = 8 }

[provider.latency]
ttft = { fixed = "50ms" }
per_token = { fixed = "0ms" }

# The staging gateway, given with --target.
[gateway]
url = "http://127.0.0.1:9"

[load]
patience = { fixed = "5s" }
send_lag_p99_max = "50ms"

[[load.phases]]
name = "steady"
duration = "3s"
rate = 20
arrivals = "poisson"

[load.request]
prompt_tokens = { fixed = 30 }
max_tokens = { fixed = 8 }

[checklist]
drain = { enabled = false }
"#;

use crate::common;
use common::{
    first_attempts, first_line, json, ok, on_schedule, one_at_a_time, rehearse, scratch, Running,
};

/// A provider with its clock shifted by `shift_ms` and an admin token, and
/// a bounded reference gateway in front of it.
fn provider_and_gateway(dir: &Path, shift_ms: i64) -> (Running, String, Running, String) {
    let config = dir.join("provider.toml");
    std::fs::write(&config, "").unwrap();
    let mut p = Running(
        rehearse()
            .args(["provider", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .env("REHEARSE_ADMIN_TOKEN", TOKEN)
            .env("REHEARSE_TEST_CLOCK_OFFSET_MS", shift_ms.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let provider = first_line(&mut p.0, "fake provider listening on ");
    let mut g = Running(
        rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream", &provider])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let gateway = first_line(&mut g.0, "listening on ");
    (p, provider, g, gateway)
}

/// The clock offset the run's notes give, in ms.
fn noted_offset_ms(report: &serde_json::Value) -> f64 {
    let notes = report["notes"].as_array().unwrap();
    let note = notes
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.contains("its clock is "))
        .unwrap_or_else(|| panic!("no clock note in {notes:?}"));
    let after = note.split("its clock is ").nth(1).unwrap();
    after.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_remote_provider_is_driven_and_its_clock_corrected() {
    let _one = one_at_a_time();
    let dir = scratch("staging", "remote");
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let (_p, provider, _g, gateway) = provider_and_gateway(&dir, 250);

    // Without the token the provider refuses, and the run says why.
    let out = rehearse()
        .arg("run")
        .arg(&scenario)
        .args([
            "--provider",
            &provider,
            "--target",
            &gateway,
            "--no-progress",
            "--out",
        ])
        .arg(dir.join("refused"))
        .env_remove("REHEARSE_PROVIDER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));

    // Made again once if its load generator fell behind (on_schedule).
    let (out, run) = on_schedule(|attempt| {
        let run = dir.join(format!("run-{attempt}"));
        let out = rehearse()
            .arg("run")
            .arg(&scenario)
            .args([
                "--provider",
                &provider,
                "--target",
                &gateway,
                "--no-progress",
                "--out",
            ])
            .arg(&run)
            .env("REHEARSE_PROVIDER_TOKEN", TOKEN)
            .output()
            .unwrap();
        ((out, run.clone()), run)
    });
    ok(&out, "rehearse run --provider URL");
    let report = json(&run.join("report.json"));
    let offset = noted_offset_ms(&report);
    assert!((offset - 250.0).abs() < 5.0, "offset {offset} ms");
    let c = &report["counts"];
    assert_eq!(c["ok"], c["sent"], "{c}");
    assert_eq!(
        report["provider"]["calls"], c["ok"],
        "{}",
        report["provider"]
    );
    // The joins hold on one clock: a call reaches the provider a few ms
    // after its send, not 250 ms later or earlier.
    let wait = report["latency_ms"]["queue_wait"]["p50"].as_f64().unwrap();
    assert!(wait < 20.0, "queue wait p50 {wait} ms");
}

#[test]
fn shards_staged_and_collected_equal_one_run() {
    let _one = one_at_a_time();
    let dir = scratch("staging", "shards");
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let (_p, provider, _g, gateway) = provider_and_gateway(&dir, -250);

    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3.0;
    let start_at = format!("{start:.3}");
    let staged = dir.join("staged");
    let out = rehearse()
        .arg("stage")
        .arg(&scenario)
        .args([
            "--provider",
            &provider,
            "--start-at",
            &start_at,
            "--target",
            &gateway,
            "--out",
        ])
        .arg(&staged)
        .env("REHEARSE_PROVIDER_TOKEN", TOKEN)
        .output()
        .unwrap();
    ok(&out, "stage");
    let shards: Vec<Child> = (0..2)
        .map(|i| {
            rehearse()
                .arg("load")
                .arg(staged.join("scenario.toml"))
                .args(["--target", &gateway, "--no-progress"])
                .args(["--shard", &format!("{i}/2"), "--start-at", &start_at])
                .args(["--provider", &provider, "--out"])
                .arg(dir.join(format!("shard{i}")))
                .env("REHEARSE_PROVIDER_TOKEN", TOKEN)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for s in shards {
        ok(&s.wait_with_output().unwrap(), "load --shard");
    }
    let out = rehearse()
        .arg("collect")
        .arg(&staged)
        .args([dir.join("shard0"), dir.join("shard1")])
        .args(["--provider", &provider])
        .env("REHEARSE_PROVIDER_TOKEN", TOKEN)
        .output()
        .unwrap();
    ok(&out, "collect");
    let out = rehearse().arg("report").arg(&staged).output().unwrap();
    let report = json(&staged.join("report.json"));
    assert_ne!(
        report["verdict"],
        "invalid",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let c = &report["counts"];
    assert_eq!(c["ok"], c["sent"], "{c}");
    assert_eq!(
        report["provider"]["calls"], c["ok"],
        "{}",
        report["provider"]
    );
    let wait = report["latency_ms"]["queue_wait"]["p50"].as_f64().unwrap();
    assert!(
        wait < 20.0,
        "queue wait p50 {wait} ms: the clocks are not one"
    );

    // The same schedule as one unsharded run of the scenario: ids and
    // intended offsets (to the millisecond) from the staged start.
    let meta = json(&staged.join("run.json"));
    let start_us = meta["expectations"]["start_us"].as_u64().unwrap();
    let merged = first_attempts(&staged, start_us);
    let one = dir.join("one");
    let out = rehearse()
        .arg("load")
        .arg(&scenario)
        .args(["--target", &gateway, "--no-progress", "--out"])
        .arg(&one)
        .output()
        .unwrap();
    ok(&out, "unsharded load");
    let summary = json(&one.join("summary.json"));
    let whole = first_attempts(&one, summary["start_us"].as_u64().unwrap());
    common::same_schedule(&merged, &whole);
}

/// `rehearse run --shards 2`: two load processes of the one schedule,
/// merged: the same people and outcomes as the load in one process.
#[test]
fn run_with_two_local_shards_equals_one_process() {
    let _one = one_at_a_time();
    let dir = scratch("staging", "local-shards");
    let scenario = dir.join("scenario.toml");
    std::fs::write(
        &scenario,
        SCENARIO.replace(
            "url = \"http://127.0.0.1:9\"",
            "reference = { mode = \"bounded\" }",
        ),
    )
    .unwrap();
    // Each made again once if its load generator fell behind (on_schedule).
    let run = |name: &str, shards: &str| {
        let (out, out_dir) = on_schedule(|attempt| {
            let out_dir = dir.join(format!("{name}-{attempt}"));
            let out = rehearse()
                .arg("run")
                .arg(&scenario)
                .args(["--shards", shards, "--no-progress", "--out"])
                .arg(&out_dir)
                .output()
                .unwrap();
            ((out, out_dir.clone()), out_dir)
        });
        ok(&out, name);
        let report = json(&out_dir.join("report.json"));
        let meta = json(&out_dir.join("run.json"));
        let people = first_attempts(&out_dir, meta["expectations"]["start_us"].as_u64().unwrap());
        (report, people, out_dir)
    };
    let (one, people_one, _) = run("one", "1");
    let (two, people_two, two_dir) = run("two", "2");
    assert!(two_dir.join("shards/0/client.jsonl").exists());
    assert!(two_dir.join("shards/1/client.jsonl").exists());
    assert_eq!(one["counts"]["sent"], two["counts"]["sent"]);
    assert_eq!(
        two["counts"]["ok"], two["counts"]["sent"],
        "{}",
        two["counts"]
    );
    common::same_schedule(&people_one, &people_two);
    assert!(two["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap_or("").contains("2 processes")));
}
