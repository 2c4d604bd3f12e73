//! `rehearse load SCENARIO --target URL`: drive a target with the open-loop
//! traffic of a scenario's `[load]` table, write the records and print a
//! summary.
//!
//! Ctrl-C or SIGTERM stops it: no new arrivals, the attempts in flight get
//! the load generator's grace (half a second) and then end as `cancelled`,
//! and the files are written as at a normal end (`client.jsonl` ending on a
//! whole line, `summary.json`, `client.hlog`). The run is partial: exit 3.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context as _;
use loadgen::{LoadOptions, LoadPlan, Target};

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse load`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A scenario TOML file; only its `[load]` table is used.
    scenario: PathBuf,
    /// Base URL of the target (a gateway, or the provider itself), e.g.
    /// http://127.0.0.1:8080; request paths like /v1/chat/completions are
    /// appended to it.
    #[arg(long)]
    target: String,
    /// Folder for client.jsonl, client.hlog, summary.json and
    /// load-seconds.csv.
    #[arg(long, default_value = "rehearse-load")]
    out: PathBuf,
    /// Draw no progress bar (none is drawn when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
}

/// Runs `rehearse load`: exit 0 when the run kept its schedule to the end,
/// 3 when it did not or was interrupted, 2 for a bad scenario or target.
pub fn main(args: Args) -> Result<Ended, Error> {
    let plan = LoadPlan::from_scenario_file(&args.scenario).bad_input()?;
    let target = Target::parse(&args.target)
        .context("--target")
        .bad_input()?;
    if let Err(e) = wire::raise_open_files_limit() {
        eprintln!("warning: cannot raise the open-files limit: {e}");
    }
    let mut options = LoadOptions::new(&args.out);
    options.progress = !args.no_progress && std::io::stderr().is_terminal();
    let note = format!(
        "stopping: no new arrivals; requests in flight get {} ms, then end as cancelled \
         (again to quit at once)",
        options.cancel_grace.as_millis()
    );
    let (report, partial) = crate::runtime::block_on(None, Some(note), |cancel| async move {
        let report = loadgen::run(&plan, &target, &options, cancel.clone())
            .await
            // An unreachable --target or an unwritable --out.
            .with_context(|| format!("load run against {}", args.target))
            .bad_input()?;
        Ok((report, cancel.is_cancelled()))
    })?;
    print!("{}", report.table());
    println!(
        "records: {}",
        args.out.join(wire::files::CLIENT_RECORDS).display()
    );
    if partial {
        eprintln!("interrupted: the records are partial");
    }
    Ok(if report.valid && !partial {
        Ended::Pass
    } else {
        Ended::Invalid
    })
}
