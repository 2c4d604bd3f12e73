//! `rehearse run`: one rehearsal, from the scenario to the checklist.

use std::io::IsTerminal;

use clap::builder::TypedValueParser as _;
use std::path::PathBuf;

use harness::RunOptions;

use crate::exit::{Classify as _, Ended, Error};
use crate::scenario::Sets;

/// Flags of `rehearse run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file (default: the built-in CI smoke scenario).
    scenario: Option<PathBuf>,
    /// The run directory (default: runs/NAME-YYYYmmdd-HHMMSS).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// Compress every duration by N and multiply every rate by N.
    #[arg(long, value_name = "N", value_parser = harness::scale_factor)]
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
    /// Where the in-process fake provider listens (give an address your
    /// gateway can reach when it runs elsewhere). Default: a free port;
    /// with --target, 127.0.0.1:8080 or the next free port, printed with
    /// the base URL the gateway must call.
    #[arg(long, value_name = "ADDR")]
    provider_listen: Option<String>,
    /// Where the fake provider is: in-process (the default), or the URL of
    /// a `rehearse provider` deployed beside the gateway (its admin token
    /// from REHEARSE_PROVIDER_TOKEN): the scenario's provider table is
    /// uploaded, it is reset as the load starts, and its records are
    /// fetched and moved onto this machine's clock at the end; or external:
    /// none, the --target gateway calls a real provider, and the run is
    /// judged from the client side and the gateway's gauges in [gateway].
    /// A scenario of several [[providers]]: NAME=URL for each (repeatable).
    #[arg(
        long,
        value_name = "in-process|external|URL|NAME=URL",
        conflicts_with = "provider_listen"
    )]
    provider: Vec<harness::ProviderChoice>,
    /// The --target gateway was configured for the run's time scale (its
    /// timeouts and budgets divided by it); without this, --target with a
    /// time scale other than 1 is refused.
    #[arg(long)]
    allow_time_scale: bool,
    /// With --provider external: let this check go unjudged without
    /// making the run invalid (repeatable).
    #[arg(
        long,
        value_name = "ID",
        value_parser = clap::builder::PossibleValuesParser::new(assertions::Check::must_judge_ids())
            .try_map(|id: String| assertions::Check::from_id(&id).ok_or("not a check"))
    )]
    allow_unjudged: Vec<assertions::Check>,
    /// Stop the load (a partial run, exit 3) before the tokens of the
    /// requests sent, retries included, would pass N (prompt at 4
    /// characters a token plus max_tokens): a budget on a real account.
    #[arg(long, value_name = "N")]
    max_spend_tokens: Option<u64>,
    /// Split the load between N processes of this program (shards of the
    /// one schedule, started together), when one core cannot keep it.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    shards: u32,
    /// Serve the live series (Prometheus text, GET /metrics) here; a bare port is loopback's.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    rig: harness::RigFile,
    #[command(flatten)]
    tls: crate::cmd_load::TlsArgs,
    #[command(flatten)]
    output: crate::cmd_report::Output,
    #[command(flatten)]
    sets: Sets,
}

/// Runs `rehearse run`: the scenario is read and validated, then rehearsed
/// until its end or the first signal (a partial report, exit 3).
pub fn main(args: Args) -> Result<Ended, Error> {
    if args.shards > 1 && args.metrics_listen.is_some() {
        // The shards' clients count in processes of their own: served from
        // here, their series would read zero all along.
        return Err(Error::bad_input(anyhow::anyhow!(
            "--metrics-listen: not with --shards {}: each shard is a process of its own and \
             their live series are not merged; leave --shards out, or stage the rehearsal \
             (`rehearse stage`) and give each `rehearse load --shard I/N` its own --metrics-listen",
            args.shards
        )));
    }
    let scenario = crate::scenario::load(args.scenario.as_deref(), &args.sets)?;
    let provider = match args.provider_listen {
        // clap keeps --provider out when --provider-listen is given.
        Some(listen) => harness::ProviderChoice::InProcess {
            listen: Some(listen),
        },
        None => harness::ProviderChoice::combine(args.provider)
            .map_err(anyhow::Error::msg)
            .bad_input()?,
    };
    let opts = RunOptions {
        out: args
            .out
            .unwrap_or_else(|| harness::default_run_dir(&scenario.meta.name)),
        time_scale: args.time_scale,
        target: args.target,
        allow_remote: args.allow_remote,
        junit: args.junit,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        provider,
        allow_time_scale: args.allow_time_scale,
        shards: args.shards,
        tls: args.tls.options(),
        quiet: args.output.quiet,
        allow_unjudged: args.allow_unjudged,
        max_spend_tokens: args.max_spend_tokens,
        metrics_listen: args.metrics_listen,
        rig: args.rig,
    };
    let note = "stopping: writing a partial report (again to quit at once)";
    let judged = crate::runtime::block_on(None, Some(note.into()), |cancel| async move {
        match harness::run(&scenario, &opts, cancel).await {
            // Said in this command's flags (the scenario's [gateway] may
            // be a url instead, so clap cannot check it alone).
            Err(harness::RunError::ExternalNeedsTarget) => Err(Error::bad_input(anyhow::anyhow!(
                "--provider external: needs --target (or a scenario whose [gateway] is a url): \
                 the gateway that calls the real provider; the harness starts no provider for \
                 a gateway of its own to call"
            ))),
            r => Ok(r?),
        }
    })?;
    let ended = crate::cmd_report::show(&judged, args.output)?;
    // Stopped by the harness (the gateway calls elsewhere): why, last.
    match judged.stopped {
        Some(why) => Err(Error::invalid(anyhow::anyhow!(why))),
        None => Ok(ended),
    }
}
