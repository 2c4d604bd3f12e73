//! `rehearse run --provider external`: a gateway whose upstream the harness
//! did not start, judged from the client's records and the gateway's
//! gauges; and the same run judged again as usual, from the same client
//! records plus the provider's own, check by check.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::{first_line, json, on_schedule, one_at_a_time, rehearse, scratch, text, Running};

/// A provider of 4 slots at 100 ms (40/s); 5/s for 10 s, 60/s for 5 s,
/// 5/s for 8 s; callers wait 2 s. The gateway's gauges are named.
fn scenario(gateway: &str) -> String {
    format!(
        r#"[scenario]
name = "external"
seed = 5

[provider]
completion_tokens = {{ fixed = 4 }}
[provider.latency]
ttft = {{ fixed = "100ms" }}
per_token = {{ fixed = "0ms" }}
[provider.concurrency]
ceiling = 4
overflow = "queue"

[gateway]
url = "{gateway}"
memory_ceiling = "256MiB"
metrics_url = "{gateway}/metrics"
rss_metric = "process_resident_memory_bytes"
queue_depth_metric = "gateway_queue_depth"
in_flight_metric = "gateway_in_flight"
stale_drops_metric = "gateway_stale_drops_total"
metrics_period = "200ms"

[load]
patience = {{ fixed = "2s" }}
send_patience = true
send_lag_p99_max = "20ms"
[[load.phases]]
name = "baseline"
duration = "10s"
rate = 5
[[load.phases]]
name = "overload"
duration = "5s"
rate = 60
[[load.phases]]
name = "after"
duration = "8s"
rate = 5
[load.request]
prompt_tokens = {{ fixed = 40 }}
max_tokens = {{ fixed = 4 }}
"#
    )
}

fn statuses(report: &serde_json::Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
                c["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn an_external_run_is_judged_from_the_client_and_the_gateways_gauges_as_the_joins_judge_it() {
    let _one = one_at_a_time();
    let dir = scratch("external", "judged-twice");
    let config = dir.join("provider.toml");
    std::fs::write(
        &config,
        "[latency]\nttft = { fixed = \"100ms\" }\nper_token = { fixed = \"0ms\" }\n[completion_tokens]\nfixed = 4\n[concurrency]\nceiling = 4\noverflow = \"queue\"\n",
    )
    .unwrap();
    let records = dir.join("provider-records.jsonl");
    let mut p = Running(
        rehearse()
            .args(["provider", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--records"])
            .arg(&records)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let provider = first_line(&mut p.0, "fake provider listening on ");
    let mut g = Running(
        rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream", &provider])
            .args(["--concurrency", "4", "--queue", "6", "--wait-budget", "1s"])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let gateway = first_line(&mut g.0, "listening on ");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, scenario(&gateway)).unwrap();

    // A check that need not be judged cannot be allowed unjudged: bad input.
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args([
            "--provider",
            "external",
            "--target",
            &gateway,
            "--allow-unjudged",
            "goodput",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--allow-unjudged goodput");

    // Made again once if its load generator fell behind (on_schedule);
    // the provider's records of this run are those written after its start.
    let (out, external, records_from) = on_schedule(|attempt| {
        let external = dir.join(format!("external-{attempt}"));
        let records_from = std::fs::metadata(&records).map_or(0, |m| m.len() as usize);
        let out = rehearse()
            .arg("run")
            .arg(&path)
            .args([
                "--provider",
                "external",
                "--target",
                &gateway,
                "--no-progress",
            ])
            .arg("--out")
            .arg(&external)
            .output()
            .unwrap();
        ((out, external.clone(), records_from), external)
    });
    let said = format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "{said}");
    let ext = json(&external.join("report.json"));
    assert!(
        ext["notes"].to_string().contains("provider: external"),
        "{said}"
    );
    let samples = std::fs::read_to_string(external.join("gateway-samples.jsonl")).unwrap();
    assert!(
        samples.lines().count() >= 50,
        "{} samples",
        samples.lines().count()
    );

    // The same client records, plus the provider's own, judged as usual.
    let joined = dir.join("joined");
    copy_dir(&external, &joined);
    let provider_records = std::fs::read(&records).unwrap();
    std::fs::write(
        joined.join("provider.jsonl"),
        &provider_records[records_from..],
    )
    .unwrap();
    let mut run: serde_json::Value = json(&joined.join("run.json"));
    run["provider_external"] = serde_json::Value::Bool(false);
    std::fs::write(joined.join("run.json"), run.to_string()).unwrap();
    let out = rehearse().arg("report").arg(&joined).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{:?}", out);
    let usual = json(&joined.join("report.json"));

    let (e, u) = (statuses(&ext), statuses(&usual));
    for ((id, es, ed), (uid, us, _)) in e.iter().zip(&u) {
        assert_eq!(id, uid);
        assert!(
            ed.contains("judged from the client's records and the gateway's gauges"),
            "{id} says its source: {ed}"
        );
        let must = [
            "shed_onset",
            "retry_after",
            "memory_ceiling",
            "drain",
            "served_latency",
            "no_silent_loss",
            "harness_valid",
        ];
        if must.contains(&id.as_str()) {
            assert_ne!(es, "skipped", "{id} must be judged: {ed}");
        }
        assert!(
            es == us || es == "skipped",
            "{id}: external {es}, joined {us}: {ed}"
        );
    }
    // The gateway shed and the gauges saw its queue.
    assert!(
        ext["counts"]["shed"].as_u64().unwrap() > 0,
        "{}",
        ext["counts"]
    );
    if std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn external_needs_a_target() {
    let dir = scratch("external", "no-target");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, scenario("http://127.0.0.1:9")).unwrap();
    // The scenario's url counts as the target; without one it is refused.
    let toml = scenario("http://127.0.0.1:9").replace("url = \"http://127.0.0.1:9\"\n", "");
    let toml = toml.replace(
        "[gateway]\n",
        "[gateway]\nreference = { mode = \"naive\" }\n",
    );
    std::fs::write(&path, toml).unwrap();
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args(["--provider", "external"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--provider external: needs --target"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--max-spend-tokens`: the load stops as a partial run (exit 3, noted)
/// before the tokens sent would pass the budget: 44 tokens a request (40
/// of prompt, 4 of max_tokens) against 2,220, so 50 requests and no more;
/// `rehearse calibrate` stops its sweep the same way.
#[test]
fn the_spending_guard_stops_the_load_within_one_request_of_its_budget() {
    let _one = one_at_a_time();
    let dir = scratch("external", "spend");
    let written = scenario("http://127.0.0.1:9")
        .replace(
            "url = \"http://127.0.0.1:9\"\n",
            "reference = { mode = \"naive\" }\n",
        )
        .replace("metrics_url = \"http://127.0.0.1:9/metrics\"\n", "")
        .replace("rss_metric = \"process_resident_memory_bytes\"\n", "")
        .replace("queue_depth_metric = \"gateway_queue_depth\"\n", "")
        .replace("in_flight_metric = \"gateway_in_flight\"\n", "")
        .replace("stale_drops_metric = \"gateway_stale_drops_total\"\n", "")
        .replace("metrics_period = \"200ms\"\n", "");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, written).unwrap();
    let out_dir = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args(["--max-spend-tokens", "2220", "--no-progress", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let attempts = std::fs::read_to_string(out_dir.join("client.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(attempts, 50, "{}", text(&out));
    let summary = json(&out_dir.join("summary.json"));
    let spend = &summary["spend"];
    assert_eq!(spend["sent_tokens"], 2_200, "{summary}");
    assert_eq!(spend["stopped"], true);
    let notes = json(&out_dir.join("report.json"))["notes"].to_string();
    assert!(notes.contains("stopped by the spending guard"), "{notes}");

    // calibrate: a budget of 30 calls' tokens stops the sweep there.
    let config = dir.join("provider.toml");
    std::fs::write(&config, "[latency]\nttft = { fixed = \"20ms\" }\n").unwrap();
    let mut p = Running(
        rehearse()
            .args(["provider", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let provider = first_line(&mut p.0, "fake provider listening on ");
    let cal = dir.join("calibrate");
    // The default request: 100 prompt tokens and 16 max_tokens, 116 a call.
    let out = rehearse()
        .args([
            "calibrate",
            "--target",
            &provider,
            "--step-duration",
            "300ms",
        ])
        .args(["--max-spend-tokens", "3480", "--out"])
        .arg(&cal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let c = json(&cal.join("calibrate.json"));
    let stopped = c["stopped"].as_str().unwrap_or_default();
    assert!(stopped.contains("spending guard of 3480 tokens"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}
