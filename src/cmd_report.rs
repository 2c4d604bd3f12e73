//! `rehearse report DIR`: judge a saved run again and rewrite its reports.

use std::path::PathBuf;

use harness::Judged;

use crate::exit::{Ended, Error};
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
    sets: Sets,
}

/// Runs `rehearse report`.
pub fn main(args: Args) -> Result<Ended, Error> {
    let judged = harness::judge_dir(&args.dir, &args.sets.sets, args.junit.as_deref())?;
    Ok(show(&judged))
}

/// Prints a judged run (the checklist, then where report.json and
/// report.html are) and returns its outcome; `run` ends the same way.
pub fn show(judged: &Judged) -> Ended {
    print!("{}", judged.checklist);
    println!("report: {}", judged.report_json.display());
    println!("charts: {}", judged.report_html.display());
    judged.status.into()
}
