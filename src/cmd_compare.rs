//! `rehearse compare`: a scenario run once per variant, or run directories
//! already made, side by side.

use std::io::IsTerminal;
use std::path::PathBuf;

use harness::{CompareInputs, CompareOptions, Lineup};

use crate::exit::{Ended, Error};
use crate::scenario::Sets;

/// What `rehearse compare --help` says after the flags: the exit codes.
const AFTER_HELP: &str = "--set applies after each variant's own overrides. Exit \
    codes: the worst of the runs' (0 pass, 1 a check failed, 3 invalid; of run directories, of \
    those after the baseline); with --expect, 0 when every variant got its verdict (a variant it \
    does not name is meant to pass), else 1 (3 if a run was invalid or the comparison was \
    stopped); with --fail-on-regression, 1 instead of 0 when a figure got worse than the first \
    run's beyond its tolerance.";

/// Flags of `rehearse compare`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The scenario file, whose [[variants]] tables (a `name` and a `set`
    /// table of "dotted.key" = value) are the variants; or run directories
    /// (each holding run.json), the first the baseline.
    #[arg(required = true, value_name = "SCENARIO|DIR")]
    inputs: Vec<PathBuf>,
    /// One variant per value of one field instead, each named KEY=V, e.g.
    /// `gateway.reference.mode=naive,bounded,aimd`. A value containing a
    /// comma is written as a [[variants]] table instead.
    #[arg(long, value_name = "KEY=V1,V2,...")]
    each: Option<String>,
    /// The comparison's directory: one run directory per variant, then
    /// compare.json and compare.html (default: runs/compare-NAME-YYYYmmdd-HHMMSS).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// Compress every duration by N and multiply every rate by N.
    #[arg(long, value_name = "N", value_parser = harness::scale_factor)]
    time_scale: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print only the verdicts' table and where the comparison is.
    #[arg(short, long)]
    quiet: bool,
    /// The verdict a variant is meant to have (repeatable; a variant not
    /// named is meant to pass): the exit is 0 when each gets its verdict, 1
    /// when one does not.
    #[arg(long, value_name = "NAME=pass|fail")]
    expect: Vec<String>,
    #[command(flatten)]
    gate: harness::RegressionGate,
    #[command(flatten)]
    sets: Sets,
}

/// Runs `rehearse compare`: run directories are judged side by side; a
/// scenario's variants are validated, then run in turn until the last or
/// the first signal (that run partial, the rest skipped).
pub fn main(args: Args) -> Result<Ended, Error> {
    let out = |name: &str| {
        args.out
            .clone()
            .unwrap_or_else(|| harness::default_run_dir(name))
    };
    let compared = match CompareInputs::of(&args.inputs)? {
        CompareInputs::Runs(dirs) => {
            refuse_variant_flags(&args)?;
            harness::compare_runs(&dirs, &out("compare-runs"), &args.gate)?
        }
        CompareInputs::Scenario(scenario) => {
            let each = args.each.as_deref();
            let lineup = Lineup::prepare(&scenario, each, &args.sets.sets, &args.expect)?;
            let opts = CompareOptions {
                out: out(&format!("compare-{}", lineup.scenario)),
                time_scale: args.time_scale,
                progress: !args.no_progress && std::io::stderr().is_terminal(),
                quiet: args.quiet,
                gate: args.gate.clone(),
            };
            let note = "stopping: a partial report for this variant, the rest skipped (again to quit at once)";
            crate::runtime::block_on(None, Some(note.into()), |cancel| async move {
                Ok(harness::compare(&lineup, &opts, cancel).await?)
            })?
        }
    };
    let style = report::Style::detect(report::Stream::Stdout, false);
    print!(
        "{}",
        report::compare_text(&compared.comparison, &style, args.quiet)
    );
    println!("comparison: {}", compared.json.display());
    println!("page: {}", compared.html.display());
    Ok(compared.status.into())
}

/// Run directories are judged as they were run: a flag that makes or
/// changes variants would have no effect on them, so it is refused rather
/// than ignored (`rehearse report DIR --set ...` judges one again with
/// other thresholds).
fn refuse_variant_flags(args: &Args) -> Result<(), Error> {
    let given = [
        ("--each", args.each.is_some()),
        ("--time-scale", args.time_scale.is_some()),
        ("--expect", !args.expect.is_empty()),
        ("--set", !args.sets.sets.is_empty()),
    ];
    match given.iter().find(|(_, on)| *on) {
        Some((flag, _)) => Err(Error::bad_input(anyhow::anyhow!(
            "{flag}: has no effect on a comparison of run directories (they are judged as \
             they were run; `rehearse report DIR --set KEY=VALUE` judges one again with other \
             thresholds)"
        ))),
        None => Ok(()),
    }
}
