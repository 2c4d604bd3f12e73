//! `rehearse provider` as a service driven from afar: its admin token from
//! a file or the environment (never the command line), and the test-only
//! clock offset. The admin API itself is tested in
//! fake-provider/tests/e2e/admin.rs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common;

fn rehearse() -> Command {
    Command::new(common::rehearse_bin())
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-provider-admin-{}", std::process::id()));
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

/// Starts `rehearse provider` on 127.0.0.1:0 with these extra flags and
/// environment; gives it, its base URL and its banner.
fn provider(flags: &[&str], env: &[(&str, &str)]) -> (Running, String, String) {
    let mut cmd = rehearse();
    cmd.args(["provider", "--listen", "127.0.0.1:0", "--threads", "1"])
        .args(flags)
        .env_remove("REHEARSE_ADMIN_TOKEN")
        .env_remove("REHEARSE_TEST_CLOCK_OFFSET_MS")
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first
        .strip_prefix("fake provider listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    let mut banner = first.clone();
    for line in lines.by_ref() {
        let line = line.unwrap();
        banner.push('\n');
        banner.push_str(&line);
        if line.trim_start().starts_with("records:") {
            break;
        }
    }
    (running, base, banner)
}

/// `GET {base}{path}` with this bearer token: status and JSON body.
fn get(base: &str, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new().get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or_default())
    })
}

fn local_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

#[test]
fn the_token_file_comes_before_the_environment_and_every_admin_call_needs_it() {
    let file = write_temp("token", "from-the-file\n");
    let (_running, base, banner) = provider(
        &["--admin-token-file", file.to_str().unwrap()],
        &[
            ("REHEARSE_ADMIN_TOKEN", "from-the-environment"),
            ("REHEARSE_TEST_CLOCK_OFFSET_MS", "250"),
        ],
    );
    assert!(
        banner.contains("token:     from --admin-token-file"),
        "{banner}"
    );
    assert!(banner.contains("shifted by 250 ms"), "{banner}");
    assert!(
        !banner.contains("from-the-file"),
        "the banner shows no token"
    );

    for token in [None, Some("from-the-environment")] {
        let (status, v) = get(&base, "/_fake/time", token);
        assert_eq!(status, 401, "{token:?}: {v}");
    }
    let before = local_us();
    let (status, v) = get(&base, "/_fake/time", Some("from-the-file"));
    let after = local_us();
    assert_eq!(status, 200, "{v}");
    let unix_us = v["unix_us"].as_i64().unwrap();
    assert!(
        before + 245_000 <= unix_us && unix_us <= after + 255_000,
        "{before} {unix_us} {after}: 250 ms ahead"
    );
    let (status, run) = get(&base, "/_fake/run", Some("from-the-file"));
    assert_eq!(
        (status, run["run_number"].as_u64()),
        (200, Some(0)),
        "{run}"
    );
}

#[test]
fn the_environment_token_serves_without_a_file_and_a_bad_one_is_refused() {
    let (_running, base, banner) = provider(&[], &[("REHEARSE_ADMIN_TOKEN", "env-token")]);
    assert!(
        banner.contains("token:     from REHEARSE_ADMIN_TOKEN"),
        "{banner}"
    );
    assert_eq!(get(&base, "/_fake/stats", None).0, 401);
    assert_eq!(get(&base, "/_fake/stats", Some("env-token")).0, 200);

    let (_open, base, banner) = provider(&[], &[]);
    assert!(banner.contains("loopback callers only"), "{banner}");
    assert_eq!(get(&base, "/_fake/stats", None).0, 200);

    let empty = write_temp("empty-token", "\n");
    let out = rehearse()
        .args(["provider", "--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&empty.display().to_string()), "{err}");
    assert!(err.contains("empty"), "{err}");
}
