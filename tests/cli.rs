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

mod plan {
    use super::*;

    fn scenario(name: &str) -> String {
        format!("{}/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// The figures a person computes by hand from SCENARIOS.md: 500,000
    /// tokens/min ÷ 1,200 tokens = 416.7 requests/min; 40 minutes at 2,000
    /// offered serve 16,667 and leave 63,333 waiting; at 200/min after the
    /// promotion that drains in 63,333 ÷ 216.7 = 292.3 minutes.
    #[test]
    fn flash_promotion_json_has_the_hand_figures() {
        let out = rehearse()
            .args(["plan", "--json"])
            .arg(scenario("flash-promotion.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mu = 500_000.0 / 1200.0;
        let promo = &v["phases"][1];
        let close = |got: &serde_json::Value, want: f64, tol: f64| {
            let g = got.as_f64().unwrap_or(f64::NAN);
            assert!((g - want).abs() <= tol, "{g} vs {want}");
        };
        close(&promo["offered_per_min"], 2000.0, 1e-6);
        close(&promo["capacity_per_min"], mu, 1e-6);
        close(&promo["served"], 40.0 * mu, 1.0);
        close(&promo["backlog_at_end"], 40.0 * (2000.0 - mu), 1.0);
        close(
            &v["drain_minutes_unbounded"],
            40.0 * (2000.0 - mu) / (mu - 200.0),
            0.1,
        );
        // Q* = μ·(D − S) with D = 25 s and S = TTFT + 200 × 20 ms ≈ 5 s.
        let q = v["queue_bound_requests"].as_f64().unwrap();
        assert!((130.0..=140.0).contains(&q), "{q}");
        close(&v["queue_bound_tokens"], q * 1200.0, 1e-3);
        // Nearly every promotion arrival, and the 1,000 after it, are late.
        let late = v["late_answers"].as_f64().unwrap();
        assert!((80_000.0..81_000.0).contains(&late), "{late}");
        // The peak backlog held at 6 KB a request: about 380 MB.
        let bytes = v["unbounded_backlog_bytes"].as_f64().unwrap();
        assert!((375e6..385e6).contains(&bytes), "{bytes}");
        // And at rehearsal scale, depths are a tenth.
        close(&v["rehearsal"]["queue_bound_requests"], q / 10.0, 1e-6);
    }

    #[test]
    fn every_shipped_scenario_plans() {
        let dir = format!("{}/scenarios", env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let out = rehearse().arg("plan").arg(&path).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                n += 1;
            }
        }
        assert!(n >= 5, "the five scenarios are shipped");
    }

    #[test]
    fn bad_scenario_exits_2_with_the_line() {
        let path = write_temp("bad-scenario.toml", "[scenario]\nname = \"x\"\n[gateway]\nurl = \"http://127.0.0.1:9\"\n[load]\n[[load.phases]]\nduration = \"10s\"\nrate = -3\n");
        let out = rehearse().arg("plan").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(":8:") && err.contains("load.phases[0].rate"),
            "{err}"
        );
        let out = rehearse()
            .arg("plan")
            .arg(scenario("pool-demo.toml"))
            .args(["--set", "gateway.reference.mode=fancy"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("gateway.reference.mode"));
    }
}
