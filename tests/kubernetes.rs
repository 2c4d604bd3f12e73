//! The Kubernetes manifests for a scenario of several providers
//! (`deploy/kubernetes/several-providers/` in place of their namesakes),
//! run on loopback as their pods would run them: the provider
//! Deployment's own command line (its `--listen NAME=ADDR` flags moved
//! onto loopback ports), then each Job's with its `$(VAR)`s from the run
//! ConfigMap (its one `provider` key: NAME=URL for each provider), the
//! load Job's N shards at once. What a cluster adds (scheduling, the
//! Service's DNS, the volume) is not here; every flag the manifests pass
//! and every value the ConfigMap holds is.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::common::{self, one_at_a_time, rehearse, scratch, Running};
use crate::deploy::{
    args, by_name, containers, pod_argv, pod_spec, several_provider_manifests, yaml_docs,
};

/// A short scenario of the two providers the manifests name (`primary`,
/// `secondary`, as scenarios/failover.toml's), each with its own answer
/// size so their records tell them apart, and a header naming both.
const SCENARIO: &str = r#"
[scenario]
name = "k8s-two-providers"

# The staging gateway, given with --target.
[gateway]
url = "http://127.0.0.1:9"

[load]
patience = { fixed = "5s" }
send_lag_p99_max = "500ms"
[[load.phases]]
name = "steady"
duration = "2s"
rate = 20
[load.request]
prompt_tokens = { fixed = 10 }
max_tokens = { fixed = 9 }
# As a gateway told its upstreams per request would be: a shard not given
# them (the load Job's --provider-url) does not start.
headers = { "x-upstreams" = "{provider_url:primary},{provider_url:secondary}" }

[[providers]]
name = "primary"
completion_tokens = { fixed = 5 }

[[providers]]
name = "secondary"
completion_tokens = { fixed = 7 }
"#;

/// Reads `count` lines of `prefix NAME listening on URL` from a child's
/// stdout: (name, URL) each.
fn listening(child: &mut Child, prefix: &str, count: usize) -> Vec<(String, String)> {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut found = Vec::new();
    while found.len() < count {
        let line = lines.next().expect("a banner line").unwrap();
        if let Some(rest) = line.strip_prefix(prefix) {
            let (name, url) = rest
                .split_once("listening on ")
                .unwrap_or_else(|| panic!("{line:?}"));
            found.push((name.trim().to_string(), url.trim().to_string()));
        }
    }
    found
}

/// A pod's paths moved under `dir` (`/results`, `/scenario`, `/records`).
fn local_paths(argv: Vec<String>, dir: &Path) -> Vec<String> {
    argv.into_iter()
        .map(|a| {
            ["/results", "/scenario", "/records"]
                .iter()
                .fold(a, |a, root| match a.strip_prefix(root) {
                    Some(rest) => format!("{}{root}{rest}", dir.display()),
                    None => a,
                })
        })
        .collect()
}

#[test]
fn several_provider_manifests_stage_load_and_collect_on_loopback() {
    let _one = one_at_a_time();
    let dir = scratch("kubernetes", "several");
    for sub in ["results", "scenario", "records"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("scenario/scenario.toml"), SCENARIO).unwrap();
    let docs = yaml_docs(&several_provider_manifests());
    let mut run_config = by_name(&docs, "ConfigMap", "rehearse-run").clone();
    let token = "k8s-test-token";

    // The provider Deployment's command line, its ports on loopback.
    let provider = containers(pod_spec(by_name(&docs, "Deployment", "rehearse-provider")))[0];
    let argv: Vec<String> = local_paths(pod_argv(provider, &run_config, 0), &dir)
        .into_iter()
        .map(|a| match a.split_once("=0.0.0.0:") {
            Some((name, _)) => format!("{name}=127.0.0.1:0"),
            None => a,
        })
        .collect();
    let names: Vec<&str> = args(provider)
        .windows(2)
        .filter(|w| w[0] == "--listen")
        .map(|w| w[1].split_once('=').unwrap().0)
        .collect();
    assert_eq!(names, ["primary", "secondary"], "{argv:?}");
    let mut child = rehearse()
        .args(&argv)
        .env("REHEARSE_ADMIN_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let urls = listening(&mut child, "fake provider ", 2);
    let _provider = Running(child);

    // The ConfigMap's provider list, each Service URL replaced by the
    // loopback URL of the provider of that name.
    let list = run_config["data"]["provider"].as_str().unwrap().to_string();
    let local_list: Vec<String> = list
        .split(',')
        .map(|item| {
            let (name, _) = item.split_once('=').unwrap();
            let (_, url) = urls.iter().find(|(n, _)| n == name).unwrap_or_else(|| {
                panic!("{name}: in the ConfigMap, not served by the Deployment {urls:?}")
            });
            format!("{name}={url}")
        })
        .collect();
    assert_eq!(local_list.len(), 2, "{list}");

    // The staging gateway: the reference gateway, weighted over both.
    let mut gateway = rehearse()
        .args(["gateway", "--mode", "naive", "--routing", "weighted"])
        .args(["--listen", "127.0.0.1:0"])
        .args(
            urls.iter()
                .flat_map(|(n, u)| ["--upstream".to_string(), format!("{n}={u}")]),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let target = listening(&mut gateway, "", 1).remove(0).1;
    let _gateway = Running(gateway);

    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 6.0;
    let data = &mut run_config["data"];
    data["provider"] = Value::String(local_list.join(","));
    data["target"] = Value::String(target);
    data["start-at"] = Value::String(format!("{start:.3}"));
    let job = |name: &str| -> Vec<&Value> { containers(pod_spec(by_name(&docs, "Job", name))) };
    let command = |c: &Value, index: u32| {
        let mut cmd = rehearse();
        cmd.args(local_paths(pod_argv(c, &run_config, index), &dir))
            .env("REHEARSE_PROVIDER_TOKEN", token);
        cmd
    };

    let out = command(job("rehearse-stage")[0], 0).output().unwrap();
    common::ok(&out, "the stage Job");
    let load = by_name(&docs, "Job", "rehearse-load");
    let shards = load["spec"]["completions"].as_u64().unwrap() as u32;
    let loads: Vec<Running> = (0..shards)
        .map(|i| {
            let child = command(job("rehearse-load")[0], i)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            Running(child)
        })
        .collect();
    for mut shard in loads {
        let status = shard.0.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(shard.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        // 3: behind its schedule on a busy machine; the records are made.
        assert!(
            matches!(status.code(), Some(0 | 3)),
            "a load shard: {status}\n{err}"
        );
    }
    let [collect, report] = job("rehearse-collect")[..] else {
        panic!("collect, then report")
    };
    let out = command(collect, 0).output().unwrap();
    common::ok(&out, "the collect Job's collect");
    let out = command(report, 0).output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        common::text(&out)
    );

    // One run directory: every shard's requests, both providers' calls in
    // one provider.jsonl on the first one's clock, the run judged.
    let run_id = run_config["data"]["run-id"].as_str().unwrap();
    let run_dir = dir.join("results").join(run_id).join("run");
    let meta = common::json(&run_dir.join("run.json"));
    assert_eq!(meta["provider_url"], urls[0].1.as_str(), "{meta}");
    let client = std::fs::read_to_string(run_dir.join("client.jsonl")).unwrap();
    let sent = client.lines().count();
    assert!(sent >= 30, "{sent} client records from {shards} shards");
    let calls: Vec<wire::ProviderRecord> = std::fs::read_to_string(run_dir.join("provider.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let count = |name: &str| calls.iter().filter(|r| r.provider_name() == name).count();
    assert!(
        count("primary") >= 5 && count("secondary") >= 5,
        "{} and {}",
        count("primary"),
        count("secondary")
    );
    assert_eq!(count("primary") + count("secondary"), calls.len());
    let report = common::json(&run_dir.join("report.json"));
    assert!(
        report["checks"].as_array().is_some_and(|c| !c.is_empty()),
        "{report}"
    );
}
