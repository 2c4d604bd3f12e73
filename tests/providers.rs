//! Several fake providers in one rehearsal (issue 27): a scenario's
//! `[[providers]]` served by one `rehearse provider` process, one port
//! each, which the official openai SDK speaks to unmodified; and `rehearse
//! run` with a `[gateway] command` in front of two providers, told them by
//! `{provider_url:NAME}` and `REHEARSE_PROVIDER_URL_<NAME>`, its calls'
//! records in one provider.jsonl, each with its provider's name.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::common;

use common::{one_at_a_time, rehearse, scratch, Running};
use wire::ProviderRecord;

/// Two providers: `primary` with a quota of two requests a second (a
/// third call at once is refused with a Retry-After), `backup` without.
const TWO_PROVIDERS: &str = r#"
[[providers]]
name = "primary"
completion_tokens = { fixed = 5 }
[providers.quota]
requests_per_minute = 120
window = "1s"

[[providers]]
name = "backup"
completion_tokens = { fixed = 7 }
"#;

fn records(path: &Path) -> Vec<ProviderRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The openai SDK, as it ships, against each base URL given (NAME=URL):
/// models, a plain and a streamed answer (their sizes are the provider's
/// own: 5 tokens for primary, 7 for backup), and on primary a 429 that
/// the SDK raises as RateLimitError and, with its retries, waits out by
/// the Retry-After.
const SDK_SCRIPT: &str = r#"
import sys, openai

def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)

for arg in sys.argv[1:]:
    name, base = arg.split("=", 1)
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-rehearse", max_retries=0, timeout=20)
    tokens = 5 if name == "primary" else 7
    check(len(oa.models.list().data) > 0, f"{name}: models")
    r = oa.chat.completions.create(model="gpt-4o-mini", max_tokens=50,
        messages=[{"role": "user", "content": f"hello [rehearse:id=sdk-{name}-plain]"}])
    check(r.usage.completion_tokens == tokens, f"{name}: plain, {r.usage.completion_tokens} tokens")
    stream = oa.chat.completions.create(model="gpt-4o-mini", max_tokens=50, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"stream [rehearse:id=sdk-{name}-stream]"}])
    usage = [c.usage for c in stream if c.usage is not None]
    check(usage and usage[0].completion_tokens == tokens, f"{name}: streamed, usage")
    if name == "primary":
        try:
            oa.chat.completions.create(model="gpt-4o-mini", max_tokens=5,
                messages=[{"role": "user", "content": "again [rehearse:id=sdk-primary-429]"}])
            check(False, "primary: over its quota raises RateLimitError")
        except openai.RateLimitError as e:
            check(e.response.headers.get("retry-after-ms") is not None, "primary: 429 with Retry-After")
        patient = oa.with_options(max_retries=3)
        r = patient.chat.completions.create(model="gpt-4o-mini", max_tokens=5,
            messages=[{"role": "user", "content": "retried [rehearse:id=sdk-primary-retried]"}])
        check(r.usage.completion_tokens == 5, "primary: the SDK's retry waited the 429 out")
print("ALL PROVIDERS SDK CHECKS PASSED", flush=True)
"#;

/// Reads the banner of a `rehearse provider` of several providers: each
/// one's name and base URL, up to its `records:` line.
fn banner_urls(stdout: impl std::io::Read, count: usize) -> Vec<(String, String)> {
    let mut urls = Vec::new();
    let mut lines = BufReader::new(stdout).lines();
    while urls.len() < count {
        let line = lines.next().expect("a banner line").unwrap();
        if let Some(rest) = line.strip_prefix("fake provider ") {
            let (name, url) = rest
                .split_once(" listening on ")
                .unwrap_or_else(|| panic!("{line:?}"));
            urls.push((name.to_string(), url.to_string()));
        }
    }
    urls
}

#[test]
fn the_official_openai_sdk_speaks_to_each_provider_of_one_process() {
    let dir = scratch("providers", "sdk");
    let scenario = dir.join("two.toml");
    std::fs::write(&scenario, TWO_PROVIDERS).unwrap();
    let mut child = rehearse()
        .arg("provider")
        .arg(&scenario)
        .args(["--listen", "127.0.0.1:0", "--threads", "1", "--records"])
        .arg(dir.join("provider.jsonl"))
        .env_remove("REHEARSE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut running = Running(child);
    let urls = banner_urls(stdout, 2);
    let names: Vec<&str> = urls.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["primary", "backup"]);
    assert_ne!(urls[0].1, urls[1].1, "one port each");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(SDK_SCRIPT)
        .args(urls.iter().map(|(n, u)| format!("{n}={u}")))
        .env("OPENAI_API_KEY", "sk-rehearse")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("python3 runs (and `pip install openai`, as .ci/run does)");
    let text = common::text(&out);
    assert!(
        out.status.success() && text.contains("ALL PROVIDERS SDK CHECKS PASSED"),
        "{text}"
    );
    // SIGTERM: each provider's records are written whole before it exits.
    let pid = running.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = running.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let primary = records(&dir.join("provider-primary.jsonl"));
    let backup = records(&dir.join("provider-backup.jsonl"));
    assert!(primary.iter().all(|r| r.provider_name() == "primary"));
    assert!(backup.iter().all(|r| r.provider_name() == "backup"));
    let ids = |rs: &[ProviderRecord]| -> Vec<String> { rs.iter().map(|r| r.id.clone()).collect() };
    assert!(
        ids(&backup).contains(&"sdk-backup-stream".to_string()),
        "{backup:?}"
    );
    assert!(!ids(&backup).iter().any(|id| id.starts_with("sdk-primary")));
    // The refusal's record says the Retry-After it answered with; the
    // retried call came after it.
    let refused: Vec<_> = primary.iter().filter(|r| r.status == 429).collect();
    assert!(!refused.is_empty(), "{primary:?}");
    assert!(refused
        .iter()
        .all(|r| r.retry_after_ms.is_some() && r.retry_after_s.is_some()));
    assert!(primary
        .iter()
        .any(|r| r.id == "sdk-primary-retried" && r.status == 200));
}

/// A gateway of a few lines: each call goes to the providers in turn, the
/// first from its environment (`REHEARSE_PROVIDER_URL_PRIMARY`), the
/// second from its command line (`{provider_url:backup}`); what it was
/// told is written to the file its third argument names.
const ROUND_ROBIN_GATEWAY: &str = r#"
import itertools, json, os, sys, threading, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

listen, backup, seen = sys.argv[1], sys.argv[2], sys.argv[3]
primary = os.environ["REHEARSE_PROVIDER_URL_PRIMARY"]
with open(seen, "w") as f:
    json.dump({"arg_backup": backup, "env_first": os.environ["REHEARSE_PROVIDER_URL"],
               "env_primary": primary, "env_backup": os.environ["REHEARSE_PROVIDER_URL_BACKUP"]}, f)
turn, lock = itertools.cycle([primary, backup]), threading.Lock()

class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            upstream = next(turn)
        headers = {"content-type": "application/json"}
        if self.headers.get("x-request-id"):
            headers["x-request-id"] = self.headers["x-request-id"]
        req = urllib.request.Request(upstream + self.path, data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, out, extra = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, out, extra = e.code, e.read(), e.headers
        self.send_response(status)
        for h in ("retry-after", "retry-after-ms"):
            if extra.get(h):
                self.send_header(h, extra[h])
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

host, port = listen.rsplit(":", 1)
ThreadingHTTPServer((host, int(port)), Relay).serve_forever()
"#;

/// A scenario of [`TWO_PROVIDERS`] (the primary's quota out of the way:
/// this is about routing) behind [`ROUND_ROBIN_GATEWAY`], written into
/// `dir`; gives its path and the gateway's `seen.json`.
fn round_robin_scenario(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let gateway = dir.join("round_robin.py");
    std::fs::write(&gateway, ROUND_ROBIN_GATEWAY).unwrap();
    let seen = dir.join("seen.json");
    let scenario = format!(
        r#"
[scenario]
name = "two-providers"

[gateway]
command = ["python3", "{gateway}", "{{listen}}", "{{provider_url:backup}}", "{seen}"]
ready_timeout = "20s"

[load]
patience = {{ fixed = "5s" }}
send_lag_p99_max = "500ms"
[[load.phases]]
name = "steady"
duration = "2s"
rate = 10
[load.request]
prompt_tokens = {{ fixed = 10 }}
max_tokens = {{ fixed = 5 }}
{TWO_PROVIDERS}
"#,
        gateway = gateway.display(),
        seen = seen.display(),
    )
    .replace("requests_per_minute = 120\nwindow = \"1s\"\n", "");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, scenario).unwrap();
    (path, seen)
}

/// What every run of [`round_robin_scenario`] shows: both providers'
/// calls in the one provider.jsonl, each named, no part left beside it.
fn both_in_one_file(out_dir: &Path) {
    let calls = records(&out_dir.join("provider.jsonl"));
    let count = |name: &str| calls.iter().filter(|r| r.provider_name() == name).count();
    assert!(count("primary") >= 5 && count("backup") >= 5, "{calls:?}");
    assert_eq!(count("primary") + count("backup"), calls.len());
    let text = std::fs::read_to_string(out_dir.join("provider.jsonl")).unwrap();
    assert!(text.contains("\"provider\":\"backup\"") && !text.contains("\"provider\":\"default\""));
    let parts: Vec<_> = std::fs::read_dir(out_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("provider-"))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
    // Judged from the one file.
    let report = common::json(&out_dir.join("report.json"));
    assert!(report["checks"].is_array(), "{report}");
}

#[test]
fn a_command_gateway_reaches_two_providers_by_name_and_their_records_are_one_file() {
    let _one = one_at_a_time();
    let dir = scratch("providers", "run");
    let (path, seen) = round_robin_scenario(&dir);
    let out_dir = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args(["--no-progress", "--quiet", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    // The checks' verdicts are not this test's business (exit 0 or 1, or
    // 3 if the load fell behind on a busy machine): the run was made and
    // judged; the mechanism holds on any run.
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        common::text(&out)
    );
    let told = common::json(&seen);
    let run = common::json(&out_dir.join("run.json"));
    let first = run["provider_url"].as_str().unwrap();
    assert!(first.starts_with("http://127.0.0.1:"), "{run}");
    assert_eq!(told["env_first"], first, "{told}");
    assert_eq!(told["env_primary"], first, "{told}");
    assert_eq!(told["arg_backup"], told["env_backup"], "{told}");
    assert_ne!(told["env_backup"], first, "{told}");
    both_in_one_file(&out_dir);
}

/// `rehearse run --provider NAME=URL` for each of two providers served by
/// one `rehearse provider` (started with no scenario: its `--listen` flags
/// name them): each gets its table and a reset, and each one's records
/// are fetched and merged into the one provider.jsonl.
#[test]
fn a_run_against_two_remote_providers_names_each_and_merges_their_records() {
    let _one = one_at_a_time();
    let dir = scratch("providers", "remote");
    let (path, _) = round_robin_scenario(&dir);
    let mut child = rehearse()
        .args(["provider", "--threads", "1"])
        .args([
            "--listen",
            "primary=127.0.0.1:0",
            "--listen",
            "backup=127.0.0.1:0",
        ])
        .arg("--records")
        .arg(dir.join("remote.jsonl"))
        .env_remove("REHEARSE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let urls = banner_urls(stdout, 2);
    let out_dir = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args(["--no-progress", "--quiet", "--out"])
        .arg(&out_dir)
        .args(
            urls.iter()
                .flat_map(|(n, u)| ["--provider".to_string(), format!("{n}={u}")]),
        )
        .env_remove("REHEARSE_PROVIDER_TOKEN")
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        common::text(&out)
    );
    both_in_one_file(&out_dir);
    let run = common::json(&out_dir.join("run.json"));
    assert_eq!(run["provider_url"], urls[0].1.as_str(), "{run}");
    let notes = run["notes"].to_string();
    assert!(notes.contains("fake provider (backup) at"), "{notes}");
    // A URL for a provider the scenario does not have is bad input.
    let out = rehearse()
        .arg("run")
        .arg(&path)
        .args(["--no-progress", "--quiet", "--out"])
        .arg(dir.join("bad"))
        .args(["--provider", &format!("primary={}", urls[0].1)])
        .args(["--provider", &format!("backup={}", urls[1].1)])
        .args(["--provider", &format!("spare={}", urls[1].1)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out));
    assert!(
        common::text(&out).contains("\"spare\": the scenario has no provider"),
        "{}",
        common::text(&out)
    );
}

/// `rehearse stage` and `collect` given two providers by name: each
/// readied at the one start, and each one's records fetched, moved onto
/// the first one's clock and merged into the run directory's one
/// provider.jsonl, which `rehearse report` judges.
#[test]
fn stage_and_collect_take_each_provider_by_name() {
    let _one = one_at_a_time();
    let dir = scratch("providers", "staged");
    let (path, _) = round_robin_scenario(&dir);
    let mut child = rehearse()
        .args(["provider", "--threads", "1"])
        .args([
            "--listen",
            "primary=127.0.0.1:0",
            "--listen",
            "backup=127.0.0.1:0",
        ])
        .arg("--records")
        .arg(dir.join("remote.jsonl"))
        .env_remove("REHEARSE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _provider = Running(child);
    let urls = banner_urls(stdout, 2);
    let (primary, backup) = (urls[0].1.clone(), urls[1].1.clone());
    let flags: Vec<String> = urls
        .iter()
        .flat_map(|(n, u)| ["--provider".to_string(), format!("{n}={u}")])
        .collect();
    // The gateway, started by hand as a staging one would be.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let _gateway = Running(
        std::process::Command::new("python3")
            .arg(dir.join("round_robin.py"))
            .args([&listen, &backup])
            .arg(dir.join("seen.json"))
            .env("REHEARSE_PROVIDER_URL", &primary)
            .env("REHEARSE_PROVIDER_URL_PRIMARY", &primary)
            .env("REHEARSE_PROVIDER_URL_BACKUP", &backup)
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let gateway = format!("http://{listen}");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3.0;
    let start_at = format!("{start:.3}");
    let staged = dir.join("staged");
    let out = rehearse()
        .arg("stage")
        .arg(&path)
        .args(&flags)
        .args(["--start-at", &start_at, "--target", &gateway, "--out"])
        .arg(&staged)
        .output()
        .unwrap();
    common::ok(&out, "stage");
    let out = rehearse()
        .arg("load")
        .arg(staged.join("scenario.toml"))
        .args(["--target", &gateway, "--no-progress"])
        .args(["--shard", "0/1", "--start-at", &start_at])
        .args(["--provider", &primary, "--out"])
        .arg(dir.join("shard0"))
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{}",
        common::text(&out)
    );
    let out = rehearse()
        .arg("collect")
        .arg(&staged)
        .arg(dir.join("shard0"))
        .args(&flags)
        .output()
        .unwrap();
    common::ok(&out, "collect");
    let out = rehearse().arg("report").arg(&staged).output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        common::text(&out)
    );
    both_in_one_file(&staged);
    let notes = common::json(&staged.join("run.json"))["notes"].to_string();
    assert!(notes.contains("from the first provider's"), "{notes}");
}
