//! `rehearse init FILE`: a commented scenario from a few figures (the
//! flags are `harness::InitOptions`'s), and its plan.

use std::path::PathBuf;

use crate::exit::{Ended, Error};

/// Flags of `rehearse init`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A figure not given takes the flash-promotion shape's, marked \
    `placeholder` in the file; every other field is written at its default."
)]
pub struct Args {
    /// The scenario file to write.
    file: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    figures: harness::InitOptions,
}

/// Runs `rehearse init`: writes FILE, then prints its plan.
pub fn main(args: Args) -> Result<Ended, Error> {
    let scenario = harness::write_init(&args.file, &args.figures, args.force)?;
    print!("{}", report::plan_text(&harness::plan(&scenario)));
    println!("written: {}", args.file.display());
    Ok(Ended::Pass)
}
