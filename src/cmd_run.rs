//! `rehearse run`: one rehearsal, from the scenario to the checklist.

use std::io::IsTerminal;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::run::RunOptions;
use crate::scenario::Scenario;

/// The scenario run when none is named: the CI smoke rehearsal, shipped in
/// the binary so a fresh checkout runs it from anywhere.
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/ci-smoke.toml");

/// Flags of `rehearse run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file (default: the built-in CI smoke scenario).
    scenario: Option<PathBuf>,
    /// The run directory (default: runs/NAME-YYYYmmdd-HHMMSS).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Compress every duration by N and multiply every rate by N.
    #[arg(long, value_name = "N")]
    time_scale: Option<f64>,
    /// Drive this gateway (a base URL) instead of the scenario's.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Allow a target outside loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Also write the JUnit report to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Where the fake provider listens (give an address your gateway can
    /// reach when it runs elsewhere).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    provider_listen: String,
    /// Override a scenario field: `dotted.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

fn default_out(name: &str) -> PathBuf {
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]-[hour][minute][second]"
        ))
        .unwrap_or_else(|_| "run".into());
    PathBuf::from("runs").join(format!("{name}-{stamp}"))
}

/// Runs `rehearse run` and returns the exit code.
pub fn main(args: Args) -> u8 {
    let scenario = match &args.scenario {
        Some(path) => Scenario::load(path, &args.sets),
        None => crate::scenario::apply_sets(DEFAULT_SCENARIO, &args.sets).and_then(|text| {
            Scenario::from_str(
                &text,
                "built-in ci-smoke.toml",
                std::path::Path::new("ci-smoke.toml"),
            )
        }),
    };
    let scenario = match scenario {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let opts = RunOptions {
        out: args
            .out
            .clone()
            .unwrap_or_else(|| default_out(&scenario.meta.name)),
        time_scale: args.time_scale,
        target: args.target.clone(),
        allow_remote: args.allow_remote,
        junit: args.junit.clone(),
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        provider_listen: args.provider_listen.clone(),
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return crate::exit::INVALID;
        }
    };
    let result = rt.block_on(async {
        let cancel = CancellationToken::new();
        tokio::spawn(stop_on_signals(cancel.clone()));
        crate::run::run(&scenario, &opts, cancel).await
    });
    // The reports are written: do not wait for stray tasks (a hanging
    // connection, a blocked read) to finish.
    rt.shutdown_background();
    crate::run::exit_code(result)
}

/// The first Ctrl-C or SIGTERM stops the load and lets the run write a
/// partial report; a second one exits at once.
async fn stop_on_signals(cancel: CancellationToken) {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return;
    };
    let mut seen = 0;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => if r.is_err() { return },
            _ = term.recv() => {}
        }
        seen += 1;
        if seen == 1 {
            eprintln!("\nstopping: writing a partial report (again to quit at once)");
            cancel.cancel();
        } else {
            // Exit now, but leave no gateway behind.
            crate::gateway_process::kill_live_group();
            std::process::exit(130);
        }
    }
}
