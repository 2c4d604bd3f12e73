//! `rehearse report DIR`: judge a saved run again and rewrite its reports.

use std::path::PathBuf;

use anyhow::Context as _;
use harness::Judged;
use report::{Stream, Style};

use crate::exit::{Classify as _, Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A run directory written by `rehearse run`.
    dir: PathBuf,
    /// Also write the JUnit report to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    quiet_bar: NoProgress,
    #[command(flatten)]
    sets: Sets,
}

/// `--no-progress` where nothing draws a progress bar (`plan`, `report`):
/// accepted, so that a script may give every subcommand the flags it gives
/// `run`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct NoProgress {
    /// No progress bar (none is drawn here: accepted as `run` takes it).
    #[arg(long)]
    no_progress: bool,
}

/// How a judged run is printed, by `run` and `report`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Output {
    /// Print only the verdict line and where the reports are.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print report.json on stdout and nothing else there; the checklist
    /// goes to stderr (with --quiet, nothing does).
    #[arg(long)]
    json: bool,
    /// Print each check's whole line (predicted, observed, explanation).
    #[arg(short, long, conflicts_with = "quiet")]
    verbose: bool,
}

/// Runs `rehearse report`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let judged = harness::judge_dir(&args.dir, &args.sets.sets, args.junit.as_deref())?;
    show(&judged, args.output)
}

/// Prints a judged run (the checklist, then where report.json and
/// report.html are) and returns its outcome; `run` ends the same way.
pub fn show(judged: &Judged, o: Output) -> Result<Ended, Error> {
    let style = Style::detect(
        if o.json {
            Stream::Stderr
        } else {
            Stream::Stdout
        },
        o.verbose,
    );
    let mut text = match o.quiet {
        true => judged.checklist.verdict_line(&style),
        false => judged.checklist.text(&style),
    };
    text += &format!("report: {}\n", judged.report_json.display());
    text += &format!("charts: {}\n", judged.report_html.display());
    if o.json {
        let json = std::fs::read_to_string(&judged.report_json)
            .with_context(|| format!("cannot read {}", judged.report_json.display()))
            .invalid()?;
        println!("{}", json.trim_end());
        if !o.quiet {
            eprint!("{text}");
        }
    } else {
        print!("{text}");
    }
    Ok(judged.status.into())
}
