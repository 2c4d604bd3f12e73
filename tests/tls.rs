//! `https://` targets from the command line: `rehearse load` and `rehearse
//! run` against servers behind a TLS relay whose certificate a private CA
//! made in the test signed (test_support::tls). With `--ca-file` they run;
//! without it they stop at once with exit 2, naming the certificate
//! problem; with `--insecure` they run and say so.

use crate::common;

use common::{on_schedule, one_at_a_time};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use test_support::tls::{relay, Relay, TestCa};

fn rehearse() -> Command {
    Command::new(common::rehearse_bin())
}

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-tls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The attempts of a run directory's `client.jsonl`, as JSON.
fn attempts(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(wire::files::CLIENT_RECORDS))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn all_ok(records: &[serde_json::Value], people: usize) {
    assert_eq!(records.len(), people);
    for r in records {
        assert_eq!(r["outcome"], "ok", "{r}");
    }
}

/// A free port on loopback (bound, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Kills the child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TLS relay (on `rt`) in front of `upstream`.
fn tls_in_front(rt: &tokio::runtime::Runtime, ca: &TestCa, upstream: &str) -> Relay {
    let addr = upstream.trim_start_matches("http://").parse().unwrap();
    rt.block_on(relay(Some(ca), addr)).unwrap()
}

#[test]
fn rehearse_load_trusts_its_ca_file_refuses_without_and_insecure_says_so() {
    let _one = one_at_a_time();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = fake_provider::ProviderConfig::from_toml(
        "[latency]\nttft = { fixed = \"10ms\" }\n",
        "test",
    )
    .unwrap();
    let provider = rt
        .block_on(fake_provider::FakeProvider::new(config).bind("127.0.0.1:0"))
        .unwrap();
    let ca = TestCa::new();
    let front = tls_in_front(&rt, &ca, &provider.base_url());
    let dir = scratch("load");
    let ca_file = ca.write_ca(&dir);
    std::fs::write(
        dir.join("scenario.toml"),
        "[load]\nsend_lag_p99_max = \"1s\"\n[[load.phases]]\nduration = \"500ms\"\nrate = 20\n",
    )
    .unwrap();
    let load = |name: &str, extra: &[&str]| {
        rehearse()
            .arg("load")
            .arg(dir.join("scenario.toml"))
            .args(["--target", &front.https_url(), "--no-progress", "--out"])
            .arg(dir.join(name))
            .args(extra)
            .output()
            .unwrap()
    };

    let out = load("with-ca", &["--ca-file", ca_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    all_ok(&attempts(&dir.join("with-ca")), 10);

    let began = Instant::now();
    let out = load("without", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let said = stderr(&out);
    assert!(said.contains("certificate"), "{said}");
    assert!(said.contains("--ca-file"), "{said}");
    assert!(!dir.join("without").join("client.jsonl").exists());

    let out = load("insecure", &["--insecure"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("--insecure"), "{}", stderr(&out));
    all_ok(&attempts(&dir.join("insecure")), 10);

    let out = load(
        "both",
        &["--insecure", "--ca-file", ca_file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "one or the other");
    rt.block_on(provider.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

const RUN_SCENARIO: &str = r#"
[scenario]
name = "tls"
seed = 3
[provider]
completion_tokens = { fixed = 8 }
[provider.latency]
ttft = { fixed = "20ms" }
[gateway]
# Replaced by --target.
url = "https://localhost:9"
[load]
send_lag_p99_max = "200ms"
patience = { fixed = "2s" }
[[load.phases]]
duration = "2s"
rate = 10
[load.request]
prompt_tokens = { fixed = 20 }
max_tokens = { fixed = 8 }
[checklist]
drain = { within = "1s" }
"#;

/// `rehearse run --target https://…`: the reference gateway (started
/// here, calling the run's provider on a port agreed beforehand) behind
/// the TLS relay.
#[test]
fn rehearse_run_drives_an_https_gateway_with_its_ca_file_and_refuses_without() {
    let _one = one_at_a_time();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider_addr = format!("127.0.0.1:{}", free_port());
    let mut gateway = Running(
        rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream"])
            .arg(format!("http://{provider_addr}"))
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(gateway.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let gateway_url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let ca = TestCa::new();
    let front = tls_in_front(&rt, &ca, &gateway_url);
    let dir = scratch("run");
    let ca_file = ca.write_ca(&dir);
    std::fs::write(dir.join("scenario.toml"), RUN_SCENARIO).unwrap();
    let run = |name: &str, extra: &[&str]| {
        rehearse()
            .arg("run")
            .arg(dir.join("scenario.toml"))
            .args(["--target", &front.https_url(), "--no-progress"])
            .args(["--provider-listen", &provider_addr, "--out"])
            .arg(dir.join(name))
            .args(extra)
            .output()
            .unwrap()
    };

    let began = Instant::now();
    let out = run("without", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let said = stderr(&out);
    assert!(said.contains("certificate"), "{said}");
    assert!(!dir.join("without").join("client.jsonl").exists());

    // Made again once if its load generator fell behind (on_schedule).
    let (out, run_dir) = on_schedule(|attempt| {
        let name = format!("with-ca-{attempt}");
        let out = run(&name, &["--ca-file", ca_file.to_str().unwrap()]);
        ((out, dir.join(&name)), dir.join(&name))
    });
    // The checklist's verdicts are not this test's business (0 or 1); an
    // invalid run (3) or bad input (2) is.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {}",
        out.status,
        stderr(&out)
    );
    all_ok(&attempts(&run_dir), 20);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join(wire::files::RUN)).unwrap())
            .unwrap();
    assert!(
        meta["target_url"]
            .as_str()
            .unwrap()
            .starts_with("https://localhost:"),
        "{meta}"
    );
    // Every call went through the gateway to the run's provider.
    let calls = std::fs::read_to_string(run_dir.join(wire::files::PROVIDER_RECORDS)).unwrap();
    assert_eq!(calls.lines().count(), 20);
    let _ = std::fs::remove_dir_all(&dir);
}
