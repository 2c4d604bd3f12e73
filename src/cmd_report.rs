//! `rehearse report DIR`: judge a saved run again and rewrite its reports.

use std::path::PathBuf;

/// Flags of `rehearse report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A run directory written by `rehearse run`.
    dir: PathBuf,
    /// Override a checklist field: `checklist.drain.within=5s` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Also write the JUnit report to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// Runs `rehearse report` and returns the exit code.
pub fn main(args: Args) -> u8 {
    crate::run::exit_code(crate::run::judge_dir(
        &args.dir,
        &args.sets,
        args.junit.as_deref(),
    ))
}
