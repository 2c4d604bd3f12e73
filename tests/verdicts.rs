//! End-to-end tests of verdicts that must hold for the right reasons:
//! refusals that say which policy fired (tenants against shedding, an
//! off-the-shelf nginx that refuses everything alike), and a run whose
//! gateway talks to another provider is invalid, not green.
//! Real processes and sockets on 127.0.0.1 only.

use crate::common;

use common::{on_schedule, one_at_a_time};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn rehearse() -> Command {
    Command::new(common::rehearse_bin())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-verdicts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Kills the child when dropped, so a failing test leaves no server behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn report(dir: &Path, out: &Output) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap_or_else(|e| {
        panic!(
            "no report.json ({e})\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
}

fn records(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("client.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One HTTP/1.1 POST on a new connection: the status and the head's
/// lines, lower-cased names.
fn post(addr: &str, key: &str) -> (u16, Vec<(String, String)>) {
    let body = r#"{"model":"gpt-4o-mini","max_tokens":200,"messages":[{"role":"user","content":"probe"}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

/// scenarios/tenants.toml at --time-scale 30 (20 s): the batch tenant is
/// over its entitlement from the quiet phase on, and the promotion makes
/// the whole account short. Every 429 is the batch tenant's, with the
/// tenant reason and its x-ratelimit-remaining-* headers (probed on the
/// gateway during the quiet phase); the shop tenant never gets a tenant
/// refusal; every 503 carries a Retry-After.
#[test]
fn a_tenant_over_its_entitlement_is_told_apart_from_shedding() {
    let _one = one_at_a_time();
    let dir = scratch("tenants");
    let mut child = rehearse()
        .arg("run")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/tenants.toml"
        ))
        .args(["--time-scale", "30", "--no-progress", "--out"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut running = Running(child);
    // The gateway's address, from the line the run prints when it starts.
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no gateway line in:\n{seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(url) = line.split(" at http://").nth(1) {
            break url.trim().to_string();
        }
    };
    // Keep reading stderr so the run never blocks on a full pipe.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    // The quiet phase lasts 6 s here: probe it at once, past the batch
    // tenant's burst of one scenario minute.
    let started = Instant::now();
    let mut probes = Vec::new();
    for _ in 0..8 {
        probes.push(("key-batch", post(&addr, "key-batch")));
    }
    probes.push(("key-shop", post(&addr, "key-shop")));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "probes too slow"
    );
    let out = {
        let child = &mut running.0;
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let status = child.wait().unwrap();
        (status, stdout)
    };
    let _ = rest.join();
    let limited: Vec<_> = probes
        .iter()
        .filter(|(_, (status, _))| *status == 429)
        .collect();
    assert!(
        !limited.is_empty(),
        "no probe of the batch tenant was refused in the quiet phase: {probes:?}"
    );
    for (key, (_, h)) in &limited {
        assert_eq!(*key, "key-batch", "{probes:?}");
        let has = |name: &str| h.iter().any(|(k, _)| k == name);
        assert!(
            h.iter()
                .any(|(k, v)| k == "x-gateway-reason" && v == "tenant_limited"),
            "{h:?}"
        );
        assert!(
            has("x-ratelimit-remaining-requests") || has("x-ratelimit-remaining-tokens"),
            "{h:?}"
        );
        assert!(has("retry-after"), "{h:?}");
    }
    assert_ne!(probes.last().unwrap().1 .0, 429, "{probes:?}");

    let recs = records(&dir);
    let quiet_end_us = {
        let first = recs
            .iter()
            .map(|r| r["intended_us"].as_u64().unwrap())
            .min()
            .unwrap();
        first + 6_000_000
    };
    let mut in_quiet = 0;
    for r in &recs {
        match r["status"].as_u64() {
            Some(429) => {
                assert_eq!(r["tenant"], "batch", "{r}");
                assert_eq!(r["reason"], "tenant_limited", "{r}");
                assert_eq!(r["outcome"], "tenant_limited", "{r}");
                in_quiet += usize::from(r["intended_us"].as_u64().unwrap() < quiet_end_us);
            }
            Some(503) => assert!(
                r["retry_after_ms"].is_u64(),
                "a 503 without Retry-After: {r}"
            ),
            _ => {}
        }
        if r["tenant"] == "shop" {
            assert_ne!(r["outcome"], "tenant_limited", "{r}");
        }
    }
    assert!(
        in_quiet > 0,
        "no tenant refusal recorded in the quiet phase"
    );
    let sheds = recs.iter().filter(|r| r["status"] == 503).count();
    assert!(
        sheds > 0,
        "the promotion shed nothing: the account was never short"
    );

    let out = Output {
        status: out.0,
        stdout: out.1.into_bytes(),
        stderr: Vec::new(),
    };
    let rep = report(&dir, &out);
    let c = &rep["counts"];
    assert!(c["tenant_limited"].as_u64().unwrap() > 0, "{c}");
    assert!(c["shed"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(
        rep["tenants"]["shop"]["tenant_limited"], 0,
        "{}",
        rep["tenants"]
    );
    assert_eq!(check(&rep, "refusals_legible")["status"], "pass");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tenant batch: offered"), "{text}");
}

/// nginx in front of the fake provider, as a `[gateway] command`: its
/// limit_conn and limit_req refusals are bare 503s, and so are the
/// provider's own 503s it passes through. Two kinds of refusal share one
/// answer: `refusals_legible` fails and names it.
#[test]
fn nginx_refusing_everything_alike_fails_refusals_legible() {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect(
            "this test needs Debian's nginx: apt-get install nginx-light (.ci/run installs it)",
        );
    let _one = one_at_a_time();
    let dir = scratch("nginx");
    let conf = dir.join("nginx.conf.in");
    std::fs::write(
        &conf,
        format!(
            r#"daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  limit_conn_zone $binary_remote_addr zone=conns:1m;
  limit_req_zone $binary_remote_addr zone=rate:1m rate=20r/s;
  server {{
    listen @LISTEN@;
    location / {{
      limit_conn conns 8;
      limit_req zone=rate burst=5 nodelay;
      proxy_pass @UPSTREAM@;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"#,
            d = dir.display()
        ),
    )
    .unwrap();
    let script = format!(
        "sed -e 's#@UPSTREAM@#{{provider_url}}#' -e 's#@LISTEN@#{{listen}}#' {conf} > {d}/nginx.conf && exec {nginx} -p {d} -e {d}/error.log -c {d}/nginx.conf",
        conf = conf.display(),
        d = dir.display()
    );
    let scenario = dir.join("nginx.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"[scenario]
name = "nginx-limits"
description = "nginx limit_conn and limit_req in front of a provider that fails 1 call in 5 with 503"
seed = 3

[provider]
completion_tokens = {{ fixed = 5 }}

[provider.latency]
ttft = {{ fixed = "40ms" }}
per_token = {{ fixed = "0ms" }}

[provider.faults]
errors = {{ "503" = 0.2 }}

[gateway]
command = ["sh", "-c", {script:?}]

[load]
patience = {{ fixed = "3s" }}
send_lag_p99_max = "50ms"

[[load.phases]]
name = "steady"
duration = "4s"
rate = 60

[load.request]
prompt_tokens = {{ fixed = 20 }}
max_tokens = {{ fixed = 5 }}
"#
        ),
    )
    .unwrap();
    // Made again once if its load generator fell behind (on_schedule).
    let (out, out_dir) = on_schedule(|attempt| {
        let out_dir = dir.join(format!("run-{attempt}"));
        let out = rehearse()
            .arg("run")
            .arg(&scenario)
            .args(["--no-progress", "--out"])
            .arg(&out_dir)
            .output()
            .unwrap();
        ((out, out_dir.clone()), out_dir)
    });
    let rep = report(&out_dir, &out);
    let legible = check(&rep, "refusals_legible");
    assert_eq!(
        legible["status"],
        "fail",
        "{legible}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let detail = legible["detail"].as_str().unwrap();
    assert!(
        detail.contains("503 without a reason:")
            && detail.contains("refused at once")
            && detail.contains("refused after the provider was called"),
        "{detail}"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let c = &rep["counts"];
    assert!(c["shed"].as_u64().unwrap() > 0, "{c}");
    assert!(c["upstream_refused"].as_u64().unwrap() > 0, "{c}");
}

/// Reads the first line of a child's stdout that starts with `prefix`.
fn address_line(child: &mut Child, prefix: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string()
}

/// A bounded reference gateway whose upstream is another fake provider,
/// driven with --target: the harness's provider sees no call while the
/// gateway answers. The run is invalid (exit 3) and says why; the checks
/// that read the provider's side are skipped, none passes.
#[test]
fn a_gateway_whose_upstream_is_another_provider_is_invalid() {
    let _one = one_at_a_time();
    let dir = scratch("elsewhere");
    let config = dir.join("provider.toml");
    std::fs::write(&config, "completion_tokens = { fixed = 20 }\n").unwrap();
    let mut provider = Running(
        rehearse()
            .args(["provider", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let upstream = address_line(&mut provider.0, "fake provider listening on ");
    let mut gateway = Running(
        rehearse()
            .args(["gateway", "--mode", "bounded", "--upstream", &upstream])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let target = address_line(&mut gateway.0, "listening on ");
    let out_dir = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/ci-smoke.toml"
        ))
        .args([
            "--target",
            &target,
            "--time-scale",
            "4",
            "--allow-time-scale",
            "--no-progress",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rep = report(&out_dir, &out);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let h = check(&rep, "harness_valid");
    assert_eq!(h["status"], "invalid", "{h}");
    assert!(
        h["detail"]
            .as_str()
            .unwrap()
            .contains("the gateway's upstream is not the fake provider"),
        "{h}"
    );
    // The run stops early once the gateway has answered 20 requests the
    // fake provider never saw: a check is skipped for want of the
    // provider's side, or of the part of the run that never came.
    for id in ["shed_onset", "drain", "stale_dispatch", "goodput"] {
        let v = check(&rep, id);
        assert_eq!(v["status"], "skipped", "{id}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("no data") || detail.contains("the run stopped"),
            "{v}"
        );
    }
    assert!(
        rep["counts"]["ok"].as_u64().unwrap() > 10,
        "{}",
        rep["counts"]
    );
}
