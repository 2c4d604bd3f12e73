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
