//! Placeholder until this subcommand lands.

/// Flags of this subcommand.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the subcommand and returns the process exit code.
pub fn main(_args: Args) -> u8 {
    eprintln!("error: not built yet");
    crate::exit::BAD_INPUT
}
