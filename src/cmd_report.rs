//! `rehearse report DIR`: judge a saved run again and rewrite its reports.

use std::path::PathBuf;

use assertions::Status;

use crate::run::RunError;

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
    match crate::run::judge_dir(&args.dir, &args.sets, args.junit.as_deref()) {
        Ok(Status::Pass) => crate::exit::OK,
        Ok(Status::Fail) => crate::exit::CHECK_FAILED,
        Ok(_) => crate::exit::INVALID,
        Err(RunError::BadInput(e)) => {
            eprintln!("error: {e}");
            crate::exit::BAD_INPUT
        }
        Err(RunError::Invalid(e)) => {
            eprintln!("error: {e}");
            crate::exit::INVALID
        }
    }
}
