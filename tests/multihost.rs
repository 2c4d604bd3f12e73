//! A multi-machine rehearsal on one machine: the fake provider, the
//! reference gateway and two load shards, each in a network namespace of
//! its own, joined by veth pairs to a bridge on a private test subnet that
//! this test makes and removes (10.213.N.0/24; no traffic leaves it). The
//! harness's steps run in the test's own namespace: `stage`, two `load
//! --shard` (one per shard namespace), `collect`, `report`. The provider's
//! clock is 250 ms ahead (a test-only setting) and must come back
//! corrected. Needs root (CI has it); without root the test fails and says
//! so.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::common;
use common::{first_attempts, first_line, json, ok, Running};

const TOKEN: &str = "multihost-secret";

const SCENARIO: &str = r#"[scenario]
name = "multihost"
seed = 43

[provider]
completion_tokens = { fixed = 8 }

[provider.latency]
ttft = { fixed = "50ms" }
per_token = { fixed = "0ms" }

[gateway]
url = "http://10.213.0.11:9"

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

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's hosts: a bridge in this namespace and one namespace per
/// host, removed when dropped.
struct Net {
    bridge: String,
    hosts: Vec<String>,
    subnet: u8,
}

impl Net {
    fn new(names: &[&str]) -> Net {
        let id = std::process::id() % 10_000;
        let subnet = (std::process::id() % 200) as u8 + 20;
        let bridge = format!("rhbr{id}");
        let net = Net {
            bridge: bridge.clone(),
            hosts: names.iter().map(|n| format!("rh{id}{n}")).collect(),
            subnet,
        };
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("10.213.{subnet}.1/24"),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for (i, ns) in net.hosts.iter().enumerate() {
            let (outer, inner) = (format!("{ns}o"), format!("{ns}i"));
            ip(&["netns", "add", ns]);
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ]);
            ip(&["link", "set", &outer, "master", &bridge]);
            ip(&["link", "set", &outer, "up"]);
            ip(&["link", "set", &inner, "netns", ns]);
            let addr = format!("{}/24", net.addr(i));
            ip(&["-n", ns, "addr", "add", &addr, "dev", &inner]);
            ip(&["-n", ns, "link", "set", &inner, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        net
    }

    /// Host `i`'s address.
    fn addr(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.subnet, 10 + i)
    }

    /// `rehearse ARGS` inside host `i`.
    fn rehearse(&self, i: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.hosts[i]]);
        c.arg(common::rehearse_bin());
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}

#[test]
fn provider_gateway_and_two_shards_on_four_hosts() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(
        root,
        "this test makes network namespaces and veth pairs, which needs root (CI runs as root): run it as root"
    );
    let dir = std::env::temp_dir().join(format!("rehearse-multihost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let empty = dir.join("provider.toml");
    std::fs::write(&empty, "").unwrap();
    let net = Net::new(&["p", "g", "a", "b"]);

    let mut p = Running(
        net.rehearse(0)
            .args(["provider", "--config"])
            .arg(&empty)
            .args(["--listen", &format!("{}:0", net.addr(0))])
            .env("REHEARSE_ADMIN_TOKEN", TOKEN)
            .env("REHEARSE_TEST_CLOCK_OFFSET_MS", "250")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let provider = first_line(&mut p.0, "fake provider listening on ");
    let mut g = Running(
        net.rehearse(1)
            .args(["gateway", "--mode", "bounded", "--upstream", &provider])
            .args(["--listen", &format!("{}:0", net.addr(1))])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let gateway = first_line(&mut g.0, "listening on ");
    assert!(gateway.contains(&net.addr(1)), "{gateway}");

    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3.0;
    let start_at = format!("{start:.3}");
    let staged: PathBuf = dir.join("staged");
    let here = || {
        let mut c = Command::new(common::rehearse_bin());
        c.env("REHEARSE_PROVIDER_TOKEN", TOKEN);
        c
    };
    let out = here()
        .arg("stage")
        .arg(&scenario)
        .args(["--provider", &provider, "--start-at", &start_at])
        .args(["--target", &gateway, "--out"])
        .arg(&staged)
        .output()
        .unwrap();
    ok(&out, "stage");
    let shards: Vec<Child> = (0..2)
        .map(|i| {
            net.rehearse(2 + i)
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
    let out = here()
        .arg("collect")
        .arg(&staged)
        .args([dir.join("shard0"), dir.join("shard1")])
        .args(["--provider", &provider])
        .output()
        .unwrap();
    ok(&out, "collect");
    let out = here().arg("report").arg(&staged).output().unwrap();
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
    // One clock: a call reaches the provider a few ms after its send.
    let wait = report["latency_ms"]["queue_wait"]["p50"].as_f64().unwrap();
    assert!(wait < 20.0, "queue wait p50 {wait} ms");
    // Each shard measured the provider 250 ms ahead of it.
    for i in 0..2 {
        let o = json(&dir.join(format!("shard{i}/provider-offset.json")));
        let ms = o["offset_us"].as_f64().unwrap() / 1000.0;
        assert!((ms - 250.0).abs() < 5.0, "shard {i}: {ms} ms");
    }

    // The same schedule as one unsharded load from one host.
    let meta = json(&staged.join("run.json"));
    let merged = first_attempts(&staged, meta["expectations"]["start_us"].as_u64().unwrap());
    let one = dir.join("one");
    let out = net
        .rehearse(2)
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
    let _ = std::fs::remove_dir_all(&dir);
}
