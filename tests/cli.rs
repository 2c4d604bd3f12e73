//! End-to-end tests of the `rehearse` binary: real processes, real sockets.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn rehearse() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rehearse"))
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-cli-{}", std::process::id()));
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

mod provider {
    use super::*;

    #[test]
    fn bad_config_exits_2_naming_file_line_and_field() {
        let path = write_temp("bad.toml", "seed = 1\n\n[latency]\nmultiplier = 2.0\nttft = { fixed = \"10ms\" }\nper_tokn = { fixed = \"1ms\" }\n");
        let out = rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{}:6:", path.display())), "{err}");
        assert!(err.contains("per_tokn"), "{err}");
    }

    #[test]
    fn bad_value_in_a_scenario_section_names_its_line() {
        let path = write_temp(
            "scenario.toml",
            "[scenario]\nname = \"x\"\n\n[provider]\nseed = 2\n[provider.concurrency]\nceiling = 0\n",
        );
        let out = rehearse()
            .arg("provider")
            .arg(&path)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(":7:"), "{err}");
        assert!(err.contains("provider.concurrency.ceiling"), "{err}");
    }

    #[test]
    fn missing_file_is_bad_input() {
        let out = rehearse()
            .args(["provider", "--config", "/nonexistent/provider.toml"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/provider.toml"));
    }

    #[test]
    fn serves_on_the_address_it_prints_and_stops_on_sigterm() {
        let path = write_temp("ok.toml", "completion_tokens = { fixed = 3 }\n");
        let mut child = rehearse()
            .args(["provider", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut running = Running(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("fake provider listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let body: serde_json::Value = rt.block_on(async {
            reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        assert_eq!(body["usage"]["completion_tokens"], 3);
        // SIGTERM: the server stops by itself, exit 0.
        let pid = running.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = running.0.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "provider did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
