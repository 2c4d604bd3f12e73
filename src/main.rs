//! `rehearse`: a load-rehearsal harness for LLM gateways.
//!
//! This binary only parses flags, wires the library crates together
//! (`harness`, `report`, `loadgen`, `fake-provider`, `reference-gateway`)
//! and maps the outcome to an exit code. The rooms:
//! - [`cmd_init`], [`cmd_run`], [`cmd_report`], [`cmd_plan`],
//!   [`cmd_compare`]: a scenario to start from, a rehearsal, a saved run
//!   judged again, a scenario's arithmetic, its variants side by side;
//!   completions and the man page come from the one clap definition;
//! - [`cmd_provider`], [`cmd_load`], [`cmd_gateway`]: the three parts of a
//!   rehearsal on their own (the fake provider, the load generator, the
//!   reference gateway);
//! - [`scenario`]: the scenario named on the command line and `--set`;
//! - [`runtime`]: the async runtime and the Ctrl-C/SIGTERM handling;
//! - [`exit`]: the one error type and the exit codes;
//! - [`host`]: the flags that spell the library's inputs, and the command
//!   lines of the binary's own child processes.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

/// jemalloc: of the two 8 KiB buffers each held connection owns, its page-aligned size classes keep
/// the untouched pages out of resident memory (the system allocator's headers straddle them).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod cmd_calibrate;
mod cmd_compare;
mod cmd_gateway;
mod cmd_init;
mod cmd_load;
mod cmd_plan;
mod cmd_provider;
mod cmd_report;
mod cmd_run;
mod cmd_stage;
mod exit;
mod host;
mod runtime;
mod scenario;

#[derive(Parser, Debug)]
#[command(
    name = "rehearse",
    version,
    about = "A load-rehearsal harness for LLM gateways",
    after_help = "Exit codes: 0 all checks pass (or a server ended cleanly); 1 a check failed; \
                  2 bad input (scenario, config, flags); 3 the run was invalid, partial or \
                  could not be made; 130 a second Ctrl-C or SIGTERM."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a commented scenario from a few figures, and print its plan.
    Init(cmd_init::Args),
    /// Rehearse a scenario end to end and judge the checklist.
    Run(cmd_run::Args),
    /// Judge a saved run again (with changed thresholds) and rewrite its reports.
    Report(cmd_report::Args),
    /// Rehearse a scenario once per variant, one after another, and compare them.
    Compare(cmd_compare::Args),
    /// Print the arithmetic of a scenario (capacity, backlog, drain, Q*), no traffic.
    Plan(cmd_plan::Args),
    /// Find where a target's latency curve bends: closed loop at rising concurrency.
    Calibrate(cmd_calibrate::Args),
    /// Serve the chaos fake LLM provider (OpenAI and Anthropic APIs).
    Provider(cmd_provider::Args),
    /// Drive a target with open-loop traffic from a scenario's [load] section.
    Load(cmd_load::Args),
    /// Run the reference gateway in front of an upstream provider.
    #[command(long_about = reference_gateway::CLI_ABOUT)]
    Gateway(cmd_gateway::Args),
    /// Ready a multi-machine rehearsal: upload the provider table, schedule its reset, write the run directory.
    Stage(cmd_stage::StageArgs),
    /// Merge the shards' records onto the provider's clock and fetch its records into a staged run directory.
    Collect(cmd_stage::CollectArgs),
    /// Print a shell completion script: bash, zsh or fish.
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff: `rehearse man | man -l -`).
    Man,
}

/// RUST_LOG as `target=level` directives (tracing-subscriber's `Targets`,
/// no regular expressions: its `env-filter` feature cost the first build
/// 13 CPU-seconds of regex compilation for span filters nobody writes);
/// unset or unreadable, warnings only.
fn log_filter(rust_log: Option<&str>) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    rust_log
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::WARN))
}

fn main() -> ExitCode {
    harness::install(host::HOST);
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .init();
    let cli = Cli::parse();
    // The subcommands that hold thousands of sockets raise the open-files
    // limit and size the descriptor table before any thread starts: grown
    // later, with connections open, the table stalls every thread for an
    // RCU grace period at each doubling (see wire::presize_fd_table).
    // `plan` and `report` open few files.
    if matches!(
        cli.command,
        Command::Run(_)
            | Command::Compare(_)
            | Command::Provider(_)
            | Command::Load(_)
            | Command::Gateway(_)
    ) {
        match wire::presize_fd_table() {
            Some(size) => tracing::debug!(size, "descriptor table sized at start"),
            None => tracing::debug!("descriptor table not sized at start"),
        }
    }
    exit::exit_code(match cli.command {
        Command::Init(args) => cmd_init::main(args),
        Command::Run(args) => cmd_run::main(args),
        Command::Report(args) => cmd_report::main(args),
        Command::Compare(args) => cmd_compare::main(args),
        Command::Plan(args) => cmd_plan::main(args),
        Command::Calibrate(args) => cmd_calibrate::main(args),
        Command::Provider(args) => cmd_provider::main(args),
        Command::Load(args) => cmd_load::main(args),
        Command::Gateway(args) => cmd_gateway::main(args),
        Command::Stage(args) => cmd_stage::stage(args),
        Command::Collect(args) => cmd_stage::collect(args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "rehearse",
                &mut std::io::stdout(),
            );
            Ok(exit::Ended::Pass)
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|()| exit::Ended::Pass)
            .map_err(exit::Error::invalid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short flags, conflicts and names of the one definition do not
    /// collide (each subcommand's flags are parsed end to end in
    /// tests/frontdoor.rs).
    #[test]
    fn the_one_definition_holds_together() {
        Cli::command().debug_assert();
    }

    /// RUST_LOG's level and `target=level` forms are read; anything else
    /// leaves warnings only, never a panic or silence.
    #[test]
    fn rust_log_sets_levels_by_target() {
        use tracing::Level;
        let f = log_filter(Some("debug"));
        assert!(f.would_enable("harness::run", &Level::DEBUG));
        let f = log_filter(Some("harness=info,warn"));
        assert!(f.would_enable("harness::run", &Level::INFO));
        assert!(!f.would_enable("loadgen", &Level::INFO));
        assert!(f.would_enable("loadgen", &Level::WARN));
        for unset in [None, Some("harness=[{x}]=debug")] {
            let f = log_filter(unset);
            assert!(f.would_enable("loadgen", &Level::WARN), "{unset:?}");
            assert!(!f.would_enable("loadgen", &Level::INFO), "{unset:?}");
        }
    }
}
