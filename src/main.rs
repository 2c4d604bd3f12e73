//! `rehearse`: a load-rehearsal harness for LLM gateways.
//!
//! This binary only parses flags, wires the library crates together and maps
//! the outcome to an exit code. Each subcommand lives in its own module:
//! - [`cmd_provider`]: `rehearse provider`, the chaos fake LLM provider;
//! - [`cmd_load`]: `rehearse load`, the open-loop load generator;
//! - [`cmd_gateway`]: `rehearse gateway`, the reference gateway.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc: thousands of held connections each own two 8 KiB buffers of
/// which a request touches a few hundred bytes; jemalloc's page-aligned size
/// classes keep the untouched pages out of resident memory, where the
/// system allocator's headers straddle pages (see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod charts;
mod cmd_gateway;
mod cmd_load;
mod cmd_plan;
mod cmd_provider;
mod cmd_report;
mod cmd_run;
mod gateway_process;
mod html;
mod plan;
mod report;
mod run;
mod scenario;

/// Exit codes, as DESIGN.md lays them out.
pub mod exit {
    /// Every check passed (or a server ended cleanly).
    pub const OK: u8 = 0;
    /// A check failed.
    pub const CHECK_FAILED: u8 = 1;
    /// Bad input: a scenario, a config file or a flag.
    pub const BAD_INPUT: u8 = 2;
    /// The run was invalid: the harness could not keep its schedule, or the
    /// gateway could not be started.
    pub const INVALID: u8 = 3;
}

#[derive(Parser, Debug)]
#[command(
    name = "rehearse",
    version,
    about = "A load-rehearsal harness for LLM gateways"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Rehearse a scenario end to end and judge the checklist.
    Run(cmd_run::Args),
    /// Judge a saved run again (with changed thresholds) and rewrite its reports.
    Report(cmd_report::Args),
    /// Print the arithmetic of a scenario (capacity, backlog, drain, Q*), no traffic.
    Plan(cmd_plan::Args),
    /// Serve the chaos fake LLM provider (OpenAI and Anthropic APIs).
    Provider(cmd_provider::Args),
    /// Drive a target with open-loop traffic from a scenario's [load] section.
    Load(cmd_load::Args),
    /// Run the reference gateway in front of an upstream provider.
    Gateway(cmd_gateway::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // The subcommands that hold thousands of sockets size the descriptor
    // table before any thread starts: grown later, with connections open,
    // it stalls every thread for an RCU grace period at each doubling (see
    // fake_provider::presize_fd_table). `plan` and `report` open few files.
    if matches!(
        cli.command,
        Command::Run(_) | Command::Provider(_) | Command::Load(_) | Command::Gateway(_)
    ) {
        match fake_provider::presize_fd_table() {
            Some(size) => tracing::debug!(size, "descriptor table sized at start"),
            None => tracing::debug!("descriptor table not sized at start"),
        }
    }
    let code = match cli.command {
        Command::Run(args) => cmd_run::main(args),
        Command::Report(args) => cmd_report::main(args),
        Command::Plan(args) => cmd_plan::main(args),
        Command::Provider(args) => cmd_provider::main(args),
        Command::Load(args) => cmd_load::main(args),
        Command::Gateway(args) => cmd_gateway::main(args),
    };
    ExitCode::from(code)
}
