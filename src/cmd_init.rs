//! `rehearse init FILE`: a commented scenario from a few figures (the
//! flags are `harness::InitOptions`'s), its plan, and what was written.

use std::path::PathBuf;

use crate::exit::{Ended, Error};

/// Flags of `rehearse init`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A figure not given takes the flash-promotion shape's, marked \
    `placeholder` in the file; every other field is written at its default. The scales \
    are 10 and 10 unless --time-scale or --quota-scale says otherwise, whatever the figures \
    and the gateway."
)]
pub struct Args {
    /// The scenario file to write.
    file: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Print only what was written (the rehearsal and its scales), not
    /// the plan.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    figures: harness::InitOptions,
}

/// Runs `rehearse init`: writes FILE, then prints its plan and the
/// rehearsal written at its scales (why each, and what 1 would give).
pub fn main(args: Args) -> Result<Ended, Error> {
    let scenario = harness::write_init(&args.file, &args.figures, args.force)?;
    if !args.quiet {
        print!("{}", report::plan_text(&harness::plan(&scenario)));
        println!();
    }
    println!("written: {}", args.file.display());
    let width = report::Style::detect(report::Stream::Stdout, false).width;
    for said in args.figures.said(&scenario, &args.file)? {
        for line in report::wrap(&said, width, "  ", "    ") {
            println!("{line}");
        }
    }
    Ok(Ended::Pass)
}
