//! `rehearse compare`: a scenario run once per variant, side by side.

use std::io::IsTerminal;
use std::path::PathBuf;

use harness::{CompareOptions, Lineup};

use crate::exit::{Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse compare`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "--set applies after each variant's own overrides. Exit codes: the worst of the \
    runs' (0 pass, 1 a check failed, 3 invalid); with --expect, 0 when every variant got its \
    verdict (a variant it does not name is meant to pass), else 1 (3 if a run was invalid or the comparison was stopped)."
)]
pub struct Args {
    /// The scenario file; its [[variants]] tables (a `name` and a `set`
    /// table of "dotted.key" = value) are the variants.
    scenario: PathBuf,
    /// One variant per value of one field instead, each named KEY=V, e.g.
    /// `gateway.reference.mode=naive,bounded,aimd`. A value containing a
    /// comma is written as a [[variants]] table instead.
    #[arg(long, value_name = "KEY=V1,V2,...")]
    each: Option<String>,
    /// The comparison's directory: one run directory per variant, then
    /// compare.json and compare.html (default: runs/compare-NAME-YYYYmmdd-HHMMSS).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Compress every duration by N and multiply every rate by N.
    #[arg(long, value_name = "N")]
    time_scale: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print only the verdicts' table and where the comparison is.
    #[arg(long)]
    quiet: bool,
    /// The verdict a variant is meant to have (repeatable; a variant not
    /// named is meant to pass): the exit is 0 when each gets its verdict, 1
    /// when one does not.
    #[arg(long, value_name = "NAME=pass|fail")]
    expect: Vec<String>,
    #[command(flatten)]
    sets: Sets,
}

/// Runs `rehearse compare`: every variant is validated, then run in turn
/// until the last or the first signal (that run partial, the rest skipped).
pub fn main(args: Args) -> Result<Ended, Error> {
    let lineup = Lineup::prepare(
        &args.scenario,
        args.each.as_deref(),
        &args.sets.sets,
        &args.expect,
    )?;
    let opts = CompareOptions {
        out: args
            .out
            .unwrap_or_else(|| harness::default_run_dir(&format!("compare-{}", lineup.scenario))),
        time_scale: args.time_scale,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        quiet: args.quiet,
    };
    let note =
        "stopping: a partial report for this variant, the rest skipped (again to quit at once)";
    let compared = crate::runtime::block_on(None, Some(note.into()), |cancel| async move {
        Ok(harness::compare(&lineup, &opts, cancel).await?)
    })?;
    let style = report::Style::detect(report::Stream::Stdout, false);
    print!(
        "{}",
        report::compare_text(&compared.comparison, &style, args.quiet)
    );
    println!("comparison: {}", compared.json.display());
    println!("page: {}", compared.html.display());
    Ok(compared.status.into())
}
