//! Real AI gateways rehearsed: the Portkey gateway (npm
//! `@portkey-ai/gateway` 1.15.2, installed by `.ci/run` under
//! `target/portkey`, or where `PORTKEY_DIR` says) in front of the fake
//! provider, as `gateways/portkey/` ships it. Loopback only: its run.sh
//! makes Portkey listen on 127.0.0.1.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Fails, saying how to install it, when Portkey is not where
/// [`portkey_dir`] says.
fn require_portkey() {
    let server = portkey_dir().join("node_modules/@portkey-ai/gateway/build/start-server.js");
    assert!(
        server.exists(),
        "this test needs Portkey: npm install --prefix {} @portkey-ai/gateway@1.15.2 (.ci/run installs it)",
        portkey_dir().display()
    );
}

/// `rehearse run SCENARIO` (a Portkey setup, from the repository) with
/// `extra` flags into `dir/run-N`, made again if its load generator fell
/// behind: its output and run directory.
fn rehearse_portkey(
    dir: &Path,
    scenario: &str,
    extra: &[String],
) -> (std::process::Output, PathBuf) {
    on_schedule(|attempt| {
        let out_dir = dir.join(format!("run-{attempt}"));
        let out = rehearse()
            .current_dir(repo())
            .env("PORTKEY_DIR", portkey_dir())
            .args(["run", scenario, "--no-progress", "--out"])
            .arg(&out_dir)
            .args(extra)
            .output()
            .unwrap();
        ((out, out_dir.clone()), out_dir)
    })
}

/// Where Portkey is installed: `PORTKEY_DIR`, else `target/portkey`.
fn portkey_dir() -> PathBuf {
    match std::env::var_os("PORTKEY_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("target/portkey"),
    }
}

/// A relay between Portkey and the fake provider at `upstream`, keeping
/// the bytes Portkey sends (the first 1 MiB): what reached the provider,
/// headers included. Its threads end with the test process.
fn keeping_relay(upstream: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = kept.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut down) = conn else { return };
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut down_r, mut up_w) = (down.try_clone().unwrap(), up.try_clone().unwrap());
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n) = down_r.read(&mut buf) {
                    if n == 0 || up_w.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    let mut kept = sink.lock().unwrap();
                    if kept.len() < 1 << 20 {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                let _ = up_w.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up, &mut down);
                let _ = down.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, kept)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Portkey routes by our headers, passes the provider's 429s on as they
/// were (status, Retry-After and retry-after-ms, the error code in the
/// body), and refuses nothing itself: the checklist names them the
/// provider's refusals passed through, and finds no shedding of its own.
#[test]
fn portkey_passes_the_providers_429s_through_and_the_verdicts_say_so() {
    require_portkey();
    let _one = one_at_a_time();
    let dir = scratch("gateways", "portkey");
    let provider_port = free_port();
    let (relay, kept) = keeping_relay(provider_port);
    let (out, out_dir) = rehearse_portkey(
        &dir,
        "gateways/portkey/scenario.toml",
        &[
            "--provider-listen".into(),
            format!("127.0.0.1:{provider_port}"),
            // Portkey's upstream is the relay in front of the provider.
            "--set".into(),
            format!("load.request.headers.x-portkey-custom-host=\"http://127.0.0.1:{relay}/v1\""),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rep = json(&out_dir.join("report.json"));
    let check = |id: &str| {
        rep["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}: {rep}"))
            .clone()
    };

    // Through Portkey to the provider, with our headers.
    let sent = String::from_utf8_lossy(&kept.lock().unwrap()).to_lowercase();
    assert!(sent.contains("post /v1/chat/completions"), "{sent:.2000}");
    assert!(sent.contains("x-app: default"), "{sent:.2000}");
    assert!(sent.contains("x-request-id: r0000"), "{sent:.2000}");
    let client: Vec<serde_json::Value> = std::fs::read_to_string(out_dir.join("client.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let provider = std::fs::read_to_string(out_dir.join("provider.jsonl")).unwrap();
    assert!(client.iter().any(|c| c["status"] == 200), "{stdout}");

    // The provider's 429s come back as they left it: the status, its
    // retry-after-ms (read before retry-after), its error code.
    let refused: Vec<_> = client.iter().filter(|c| c["status"] == 429).collect();
    assert!(refused.len() >= 10, "{} refusals\n{stdout}", refused.len());
    for c in &refused {
        assert_eq!(c["retry_after_header"], "retry_after_ms", "{c}");
        assert!(c["retry_after_ms"].as_u64().unwrap() <= 1000, "{c}");
        assert_eq!(c["reason"], "rate_limit_exceeded", "{c}");
        let id = c["id"].as_str().unwrap();
        assert!(provider.contains(&format!("\"id\":\"{id}\"")), "{id}");
    }
    assert!(provider.contains("\"outcome\":\"quota_exceeded\""));

    // The verdicts: the provider's refusals passed through, none of the
    // gateway's own, so no shedding to judge.
    let counts = &rep["counts"];
    assert_eq!(
        counts["upstream_refused"].as_u64().unwrap(),
        refused.len() as u64,
        "{counts}"
    );
    assert_eq!(counts["shed"], 0, "{counts}");
    assert_eq!(check("refusals_legible")["status"], "pass", "{stdout}");
    let shed = check("shed_onset");
    assert_eq!(shed["status"], "fail", "{shed}");
    assert!(
        shed["short"].as_str().unwrap().contains("never shed"),
        "{shed}"
    );
    assert_eq!(check("no_silent_loss")["status"], "pass", "{stdout}");
}

/// Portkey's fallback config in one header, its two targets' hosts
/// filled by `{provider_url:NAME}`: the throttled primary's 429s go on to
/// the secondary and every request is answered, but Portkey keeps no
/// cooldown, so each request tries the primary again inside the
/// Retry-After it was just given: `cooldown_honoured` and `failover` fail,
/// `no_silent_loss` passes.
#[test]
fn portkey_fallback_reaches_both_providers_and_keeps_calling_the_throttled_one() {
    require_portkey();
    let _one = one_at_a_time();
    let dir = scratch("gateways", "portkey-fallback");
    let (out, out_dir) = rehearse_portkey(&dir, "gateways/portkey-fallback/scenario.toml", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let rep = json(&out_dir.join("report.json"));
    let status = |id: &str| {
        rep["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}: {rep}"))["status"]
            .clone()
    };
    // Both hosts of the config header were filled: both providers called,
    // the primary's refusals answered by the secondary.
    let calls: Vec<wire::ProviderRecord> = std::fs::read_to_string(out_dir.join("provider.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |name: &str, status: u16| {
        calls
            .iter()
            .filter(|r| r.provider_name() == name && r.status == status)
            .count()
    };
    assert!(of("primary", 429) >= 20, "{stdout}");
    assert!(of("secondary", 200) >= of("primary", 429) / 2, "{stdout}");
    assert_eq!(rep["counts"]["ok"], rep["counts"]["offered"], "{stdout}");
    assert_eq!(status("no_silent_loss"), "pass", "{stdout}");
    assert_eq!(status("cooldown_honoured"), "fail", "{stdout}");
    assert_eq!(status("failover"), "fail", "{stdout}");
}
