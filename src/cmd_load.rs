//! `rehearse load SCENARIO --target URL`: drive a target with the open-loop
//! traffic of a scenario's `[load]` table, write the records and print a
//! summary.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use loadgen::{LoadError, LoadPlan, RunOptions, Target};
use tokio_util::sync::CancellationToken;

/// Flags of this subcommand.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A scenario TOML file; only its `[load]` table is used.
    pub scenario: PathBuf,
    /// Base URL of the target (a gateway, or the provider itself), e.g.
    /// http://127.0.0.1:8080; request paths like /v1/chat/completions are
    /// appended to it.
    #[arg(long)]
    pub target: String,
    /// Folder for client.jsonl, summary.json and timeline.csv.
    #[arg(long, default_value = "rehearse-load")]
    pub out: PathBuf,
    /// Draw no progress bar (none is drawn when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs the subcommand and returns the process exit code.
pub fn main(args: Args) -> u8 {
    // Two steps: validate everything first, then do async work.
    let plan = match LoadPlan::from_scenario_file(&args.scenario) {
        Ok(plan) => plan,
        Err(e @ (LoadError::Config(_) | LoadError::Read { .. })) => {
            eprintln!("error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let target = match Target::parse(&args.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: --target: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    if let Err(e) = loadgen::raise_open_files_limit() {
        eprintln!("warning: cannot raise the open-files limit: {e}");
    }
    let mut options = RunOptions::new(&args.out);
    options.progress = !args.no_progress && std::io::stderr().is_terminal();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return crate::exit::INVALID;
        }
    };
    let outcome = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "stopping: no new arrivals; waiting for people still waiting (Ctrl-C again to quit)"
                );
                on_signal.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        loadgen::run(&plan, &target, &options, cancel)
            .await
            .with_context(|| format!("load run against {}", args.target))
    });
    match outcome {
        Ok(report) => {
            print!("{}", report.table());
            println!("records: {}", args.out.join("client.jsonl").display());
            if report.valid {
                crate::exit::OK
            } else {
                crate::exit::INVALID
            }
        }
        Err(e) => {
            // An unreachable --target or an unwritable --out: bad input.
            eprintln!("error: {e:#}");
            crate::exit::BAD_INPUT
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test (the binary has no tempfile dependency).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rehearse-load-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn args(dir: &std::path::Path, scenario: &str, target: String) -> Args {
        let path = dir.join("scenario.toml");
        std::fs::write(&path, scenario).unwrap();
        Args {
            scenario: path,
            target,
            out: dir.join("out"),
            no_progress: true,
        }
    }

    const SMALL: &str =
        "[load]\nsend_lag_p99_max = \"1s\"\n[[load.phases]]\nduration = \"500ms\"\nrate = 20\n";

    #[test]
    fn bad_load_table_is_bad_input() {
        let dir = scratch("bad");
        let a = args(
            &dir,
            "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = \"fast\"\n",
            "http://127.0.0.1:9".into(),
        );
        assert_eq!(main(a), crate::exit::BAD_INPUT);
    }

    #[test]
    fn unreachable_target_is_bad_input_and_fast() {
        let dir = scratch("unreachable");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let began = std::time::Instant::now();
        let a = args(&dir, SMALL, format!("http://127.0.0.1:{port}"));
        assert_eq!(main(a), crate::exit::BAD_INPUT);
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
        assert!(!dir.join("out").join("client.jsonl").exists());
    }

    #[test]
    fn a_run_against_the_fake_provider_writes_its_records() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let provider = rt
            .block_on(
                fake_provider::FakeProvider::new(fake_provider::ProviderConfig::default())
                    .bind("127.0.0.1:0"),
            )
            .unwrap();
        let dir = scratch("run");
        let a = args(&dir, SMALL, provider.base_url());
        assert_eq!(main(a), crate::exit::OK);
        let out = dir.join("out");
        let lines = std::fs::read_to_string(out.join("client.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 10);
        for f in ["summary.json", "timeline.csv", "client.hlog"] {
            assert!(out.join(f).exists(), "{f}");
        }
        rt.block_on(provider.shutdown());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
