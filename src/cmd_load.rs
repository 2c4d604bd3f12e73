//! `rehearse load SCENARIO --target URL`: drive a target with the open-loop
//! traffic of a scenario's `[load]` table, at the scenario's scale (its
//! `[scenario]` time_scale and quota_scale, as `rehearse run` plays it),
//! write the records and print a summary. `--shard I/N` and `--start-at`
//! split one schedule between processes or machines.
//!
//! Ctrl-C or SIGTERM stops it: no new arrivals, the attempts in flight get
//! the load generator's grace (half a second) and then end as `cancelled`,
//! and the files are written as at a normal end (`client.jsonl` ending on a
//! whole line, `summary.json`, `client.hlog`). The run is partial: exit 3.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context as _;
use loadgen::{LoadOptions, Target};

use crate::exit::{Classify as _, Ended, Error};

/// Flags of `rehearse load`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A scenario TOML file; its `[load]` table is played at the scale of
    /// its `[scenario]` table (time_scale, quota_scale), the rest unused.
    scenario: PathBuf,
    /// Compress every duration by N and multiply every rate by N (instead
    /// of the scenario's time_scale).
    #[arg(long, value_name = "N", value_parser = harness::scale_factor)]
    time_scale: Option<f64>,
    /// Base URL of the target (a gateway, or the provider itself), e.g.
    /// http://127.0.0.1:8080 or https://gw.staging; request paths like
    /// /v1/chat/completions are appended to it.
    #[arg(long)]
    target: String,
    /// Folder for client.jsonl, client.hlog, summary.json and
    /// load-seconds.csv.
    #[arg(short, long, default_value = "rehearse-load")]
    out: PathBuf,
    /// Draw no progress bar (none is drawn when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Write no client.jsonl: every attempt's record is still made and
    /// counted into summary.json, client.hlog and load-seconds.csv, but no
    /// line is made of it and nothing is written (to measure what the
    /// records cost; a run judged later needs them).
    #[arg(long)]
    no_records: bool,
    /// Stop (partial, exit 3) before the tokens sent would pass N.
    #[arg(long, value_name = "N")]
    max_spend_tokens: Option<u64>,
    /// What `{provider_url}` in a `[load.request]` header is (a rehearsal's shards get its own);
    /// NAME=URL for `{provider_url:NAME}` (repeatable or comma-separated; the first is `{provider_url}`).
    #[arg(long, value_name = "[NAME=]URL")]
    provider_url: Vec<harness::ProviderChoice>,
    /// Play only shard I of N of the scenario's one seeded schedule (the
    /// people whose index is I mod N): N processes, on one machine or
    /// several, together play the whole, with the same request ids.
    #[arg(long, value_name = "I/N")]
    shard: Option<loadgen::Shard>,
    /// Put the schedule's start at this instant (RFC 3339, e.g.
    /// 2026-12-01T10:00:00Z, or Unix seconds), agreed between shards; a
    /// start that has passed when the run is ready is refused.
    #[arg(long, value_name = "TIME", value_parser = loadgen::parse_start_at)]
    start_at: Option<std::time::SystemTime>,
    /// The fake provider of a staged run: this machine's clock is measured
    /// against it and written to provider-offset.json for `rehearse collect`.
    /// Several (NAME=URL,NAME=URL, as stage is given them): the first's.
    #[arg(long, value_name = "URL")]
    provider: Option<harness::ProviderChoice>,
    /// Serve the live series (Prometheus text, GET /metrics) here; a bare port is loopback's.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// How an https:// target's certificate is checked (`load` and `run`).
#[derive(clap::Args, Debug)]
pub struct TlsArgs {
    /// Trust the CA certificates in this PEM file for an https:// target,
    /// besides the public roots (a private CA, or a self-signed certificate).
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// Accept any certificate of an https:// target (self-signed staging):
    /// encrypted, but the server is not authenticated.
    #[arg(long, conflicts_with = "ca_file")]
    insecure: bool,
}

impl TlsArgs {
    /// The options; says so on stderr when certificates go unchecked.
    pub fn options(self) -> loadgen::TlsOptions {
        if self.insecure {
            eprintln!("{}", loadgen::INSECURE_WARNING);
        }
        loadgen::TlsOptions {
            ca_file: self.ca_file,
            insecure: self.insecure,
        }
    }
}

/// Runs `rehearse load`: exit 0 when the run kept its schedule to the end,
/// 3 when it did not or was interrupted, 2 for a bad scenario or target.
pub fn main(args: Args) -> Result<Ended, Error> {
    let plan = harness::load_in_file(&args.scenario, args.time_scale)?;
    let target = Target::parse(&args.target)
        .context("--target")
        .bad_input()?;
    if let Err(e) = wire::raise_open_files_limit() {
        eprintln!("warning: cannot raise the open-files limit: {e}");
    }
    let mut options = LoadOptions::new(&args.out);
    options.shard = args.shard.unwrap_or_default();
    options.start_at = args.start_at;
    options.tls = args.tls.options();
    options.progress = !args.no_progress && std::io::stderr().is_terminal();
    options.records = !args.no_records;
    options.max_spend_tokens = args.max_spend_tokens;
    let urls_of = |flag: &str, given: Vec<harness::ProviderChoice>| {
        harness::ProviderChoice::urls_of(given)
            .map_err(|m| Error::bad_input(anyhow::anyhow!("{flag}: {m}")))
    };
    options.provider_urls = urls_of("--provider-url", args.provider_url.clone())?
        .into_iter()
        .map(|u| {
            (
                u.name.unwrap_or_else(|| wire::DEFAULT_PROVIDER.into()),
                u.url,
            )
        })
        .collect();
    let note = format!(
        "stopping: no new arrivals; requests in flight get {} ms, then end as cancelled \
         (again to quit at once)",
        options.cancel_grace.as_millis()
    );
    // Of several, the first: the one stage put first, whose clock the run keeps.
    let provider = urls_of("--provider", args.provider.clone().into_iter().collect())?
        .into_iter()
        .next()
        .map(|u| u.url);
    let out = args.out.clone();
    let (report, partial) = crate::runtime::block_on(None, Some(note), |cancel| async move {
        let listen = args.metrics_listen.as_deref();
        let scenario = (args.scenario.as_path(), args.time_scale, listen);
        options.live = harness::serve_load_metrics(&plan, scenario, &out, cancel.child_token())?;
        if let Some(url) = &provider {
            std::fs::create_dir_all(&out)
                .with_context(|| format!("cannot create {}", out.display()))
                .bad_input()?;
            harness::write_shard_offset(url, &out).await?;
        }
        let report = loadgen::run(&plan, &target, &options, cancel.clone())
            .await
            // An unreachable --target, a refused certificate, an unwritable --out.
            .with_context(|| format!("load run against {}", args.target))
            .bad_input()?;
        Ok((report, cancel.is_cancelled()))
    })?;
    print!("{}", report.table());
    if args.no_records {
        println!("records: none written (--no-records)");
    } else {
        println!(
            "records: {}",
            args.out.join(wire::files::CLIENT_RECORDS).display()
        );
    }
    if partial {
        eprintln!("interrupted: the records are partial");
    }
    Ok(if report.valid && !partial {
        Ended::Pass
    } else {
        Ended::Invalid
    })
}
