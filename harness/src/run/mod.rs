//! `rehearse run`: one rehearsal from start to checklist, as named steps.
//!
//! 1. [`prepare`]: the scenario at rehearsal scale, its plan, where the load
//!    goes (and whether it may), the open files it needs;
//! 2. [`write_inputs`]: `scenario.toml` and `plan.json` into the run directory;
//! 3. the fake providers start in this process (each of the scenario's
//!    on its own port), or remote ones are readied;
//! 4. the gateway starts (spawned and supervised, or one already serving);
//! 5. its memory is sampled every 100 ms (a few samples of it idle first,
//!    `memory_ceiling`'s baseline) while the load generator drives it;
//! 6. [`settle`]: the backlog gets the drain allowance to empty; then
//!    [`memory_settle`]: with `memory_ceiling` on and the memory sampled,
//!    the gateway idles for its `settle` while its memory is sampled, so
//!    the check reads what it keeps once the load is gone;
//! 7. the gateway's process group ends; both sides' records are collected;
//! 8. `run.json`, then the checklist is judged from the directory alone,
//!    exactly as `rehearse report DIR` does later.
//!
//! The rooms beside this one:
//! - `rundir`: the run directory's files, written whole or read by line;
//! - `fds`: predicting and securing the open files a run needs;
//! - `clock`: wall-clock microseconds, as the records' times are written;
//! - `live_metrics`: the live series at `GET /metrics` (`--metrics-listen`);
//! - `judge`: a run directory judged from its files alone (`rehearse report` too);
//! - `multi`: a rehearsal whose load comes from several processes or machines (`stage`, `collect`).

pub(crate) mod clock;
pub(crate) mod fds;
pub(crate) mod judge;
pub(crate) mod live_metrics;
pub(crate) mod multi;
pub(crate) mod rundir;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::expectations::LoadResult;
use crate::provider::urls::ProviderUrls;
use crate::provider::{ProviderChoice, ProviderListen, ProviderSide};
use tokio_util::sync::CancellationToken;
use wire::{ClientRecord, Expectations, GatewayEvent, RunMeta};

use wire::files;

use crate::error::RunError;
use crate::gateway::memory::{RssSampler, RssSource};
use crate::gateway::supervise::{event_note, Inside};
use crate::gateway::Running;
use crate::host::Input;
use crate::run::clock::now_us;
use crate::run::fds::{check_fds, expected_fds, predicted_fds, FdCheck};
use crate::run::judge::{judge_dir, Judged};
use crate::run::rundir::{Records, RunDir};
use crate::scenario::{GatewayKind, Scenario};
use crate::Rehearsal;

/// What the run needs beyond the scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The run directory.
    pub out: PathBuf,
    /// Overrides the scenario's time scale.
    pub time_scale: Option<f64>,
    /// Drive this gateway instead of the scenario's.
    pub target: Option<String>,
    /// Allow a target outside loopback.
    pub allow_remote: bool,
    /// Also write the JUnit report here.
    pub junit: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
    /// Where the fake providers are: in this process (listening where),
    /// at URLs, or none.
    pub provider: ProviderChoice,
    /// The target gateway was configured for the run's time scale (a
    /// gateway the harness did not spawn is not compressed by it).
    pub allow_time_scale: bool,
    /// How an `https://` gateway's certificate is checked, by the load
    /// generator and the harness's own calls alike.
    pub tls: loadgen::TlsOptions,
    /// Load processes sharing the schedule (`--shards N`, when one core
    /// cannot keep it); 1: the load generator runs in this process.
    pub shards: u32,
    /// Say nothing on stderr while the run goes on (the fake provider's
    /// address, the gateway, the scenario): `--quiet`.
    pub quiet: bool,
    /// With `--provider external`: the checks that [`assertions::Check::must_judge`]
    /// that may go unjudged without making the run invalid
    /// (`--allow-unjudged`; the binary refuses any other check where it
    /// parses the flag).
    pub allow_unjudged: Vec<assertions::Check>,
    /// A spending guard for a real account (`--max-spend-tokens`): the load
    /// stops as a partial run before the tokens of the requests sent,
    /// retries included, would pass it; shards each get their share.
    pub max_spend_tokens: Option<u64>,
    /// Serve the rehearsal's live series in Prometheus text here while it
    /// runs (`--metrics-listen`; a bare port is loopback's).
    pub metrics_listen: Option<String>,
    /// This machine's load-generator ceiling (`--rig`): a peak past 80%
    /// of it is warned of, and the ceiling kept in `run.json`.
    pub rig: crate::RigFile,
}

/// Says `text` on stderr, wrapped at its width (a terminal's, at most 100
/// columns, else 80), unless `quiet`.
pub(crate) fn tell(quiet: bool, text: &str) {
    if quiet {
        return;
    }
    let width = report::Style::detect(report::Stream::Stderr, false).width;
    for line in report::wrap(text, width, "", "  ") {
        eprintln!("{line}");
    }
}

/// A run made ready: the scenario as it will be rehearsed.
struct Prepared {
    /// The scenario at the run's scale, with the gateway it drives.
    r: Rehearsal,
    /// Said before the run and kept in its notes: the open files it may
    /// need in the worst case do not fit the limit; the peak past this
    /// machine's ceiling (or a ceiling of another machine ignored).
    warnings: Vec<String>,
    /// This machine's ceiling as read, for `run.json`.
    rig: Option<wire::RigSeen>,
}

/// How the load went (steps 5 and 6), for `run.json`.
struct Driven {
    /// The load generator's report, when it ran to its end.
    load: Option<LoadResult>,
    /// What to say about the run in its notes.
    notes: Vec<String>,
    /// Why the run stopped before its end, when the harness stopped it.
    stopped: Option<String>,
    /// When it was stopped (a signal, the spending guard, the harness), on
    /// the records' clock.
    stopped_us: Option<u64>,
    /// The wait after the load for the gateway's memory to settle.
    memory_settled: Option<(u64, u64)>,
    /// When the load was let go, on the records' clock (time zero when no
    /// record says better).
    started_us: u64,
}

/// Makes one rehearsal, writes its run directory and judges it.
pub async fn run(
    s: &Scenario,
    opts: &RunOptions,
    cancel: CancellationToken,
) -> Result<Judged, RunError> {
    let p = prepare(s, opts)?;
    let metrics_listener = opts
        .metrics_listen
        .as_deref()
        .map(crate::run::live_metrics::bind)
        .transpose()?;
    let dir = RunDir::create(&opts.out)?;
    dir.write_inputs(&p.r)?;
    let rss_path = opts.out.join(files::RSS_RECORDS);
    let rss_file = std::fs::File::create(&rss_path).map_err(RunError::write(&rss_path))?;
    // The in-process provider writes each call's record into the run
    // directory as the call ends: nothing is collected at the end, nothing
    // is held. A remote one is readied (config, reset) and read at the end.
    let run_id = crate::provider::remote::run_id_of(&opts.out);
    let provider = start_providers(&p, opts, &run_id).await?;
    let (provider, gateway) = start_gateway(&p.r, opts, provider).await?;
    announce(&p, &gateway, opts.quiet, opts.max_spend_tokens);
    let (sampler, arc) = sample_memory(&p, &gateway, &opts.tls, rss_file).await;
    let gauges =
        crate::gateway::gauges::GaugeSampler::for_gateway(&p.r.gateway, &opts.tls, &opts.out)?;
    let watched = (&provider, &gateway, &sampler);
    let listening = (metrics_listener, run_id.as_str());
    let mut driven = drive_and_settle(&p, opts, watched, listening, arc, &cancel).await?;
    let notes = &mut driven.notes;
    if let Some(url) = &gateway.metrics_url {
        notes.extend(crate::gateway::metrics::save(url, &opts.tls, &opts.out).await);
    }
    if let Err(e) = sampler.stop().await {
        notes.push(format!("the gateway's memory samples are incomplete: {e}"));
    }
    crate::gateway::gauges::GaugeSampler::stop_noting(gauges, &p.r.gateway, notes).await;
    let ended = stop_and_collect(gateway, provider, driven.stopped_us.is_some(), opts, notes).await;
    let meta = run_meta(&p, opts, ended, &mut driven)?;
    dir.write_meta(&meta)?;
    let mut judged = judge_dir(&opts.out, &[], opts.junit.as_deref())?;
    judged.stopped = driven.stopped;
    Ok(judged)
}

/// Step 4: the rehearsal's gateway started (or waited for), in front of
/// the providers; when it cannot be, the providers are finished first.
async fn start_gateway(
    r: &Rehearsal,
    opts: &RunOptions,
    provider: ProviderSide,
) -> Result<(ProviderSide, Running), RunError> {
    match Running::start(r, &opts.tls, &provider.urls(), &opts.out).await {
        Ok(g) => Ok((provider, g)),
        Err(e) => {
            provider.finish(&opts.out, &mut Vec::new()).await;
            Err(e)
        }
    }
}

/// Steps 5 and 6: the load driven (and watched: a gateway that does not
/// call the provider stops it), the live series served meanwhile, then
/// the backlog's drain and, for `memory_ceiling`, the gateway's idle wait
/// (`settle_memory`: the check on, memory read, the run not stopped).
async fn drive_and_settle(
    p: &Prepared,
    opts: &RunOptions,
    (provider, gateway, sampler): (&ProviderSide, &Running, &RssSampler),
    (metrics_listener, run_id): (Option<std::net::TcpListener>, &str),
    settle_memory: bool,
    cancel: &CancellationToken,
) -> Result<Driven, RunError> {
    let started_us = now_us();
    let watched = (provider, gateway, sampler.now());
    let (live, _stop_metrics) = live_series(metrics_listener, p, run_id, watched)?;
    let load_cancel = cancel.child_token();
    let stop_watch = watch_for_the_stop(&load_cancel);
    let ((load, mut notes), stopped) =
        drive_watched(p, (&gateway.url, provider), opts, live, load_cancel.clone()).await;
    if opts.target.is_none() {
        // What the scenario left to the harness, or set aside, for its
        // own gateway (not a --target's).
        notes.splice(0..0, p.r.gateway.notes.iter().cloned());
    }
    notes.extend(p.warnings.iter().cloned());
    let stopped_us = stopped_at(stop_watch, &load_cancel).await;
    let partial = stopped_us.is_some();
    match &stopped {
        Some(why) => notes.push(format!("{why}: this report is partial")),
        None if partial => {
            notes.push("stopped before its end (interrupted): this report is partial".into())
        }
        None => {}
    }
    settle(provider, p, partial, &mut notes).await;
    let wait = settle_memory && !partial;
    let memory_settled = memory_settle(p, gateway, wait, opts.quiet, cancel, &mut notes).await;
    Ok(Driven {
        load,
        notes,
        stopped,
        stopped_us,
        memory_settled,
        started_us,
    })
}

/// Step 7: the gateway's process group ended (what happened to it
/// returned), and both sides' records collected into the run directory.
async fn stop_and_collect(
    gateway: Running,
    provider: ProviderSide,
    partial: bool,
    opts: &RunOptions,
    notes: &mut Vec<String>,
) -> Ended {
    let (target_url, gateway_name) = (gateway.url.clone(), gateway.name.clone());
    let events = gateway.stop(partial).await;
    // Hung-up calls are recorded when their connections close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let provider_url = provider.urls().first().to_string();
    // No size cap is set here, so every call's record is in the file.
    provider.finish(&opts.out, notes).await;
    Ended {
        events,
        target_url,
        gateway_name,
        provider_url,
    }
}

/// The gateway and providers of a run once they have ended.
struct Ended {
    /// What happened to the gateway's process while the harness watched.
    events: Vec<GatewayEvent>,
    /// The gateway's base URL.
    target_url: String,
    /// As a person would name it.
    gateway_name: String,
    /// The first provider's base URL.
    provider_url: String,
}

/// Step 8: `run.json`, from the run's records (time zero: the schedule's
/// start, where the plan's phases begin, since a Poisson schedule's first
/// arrival comes some time after it; without the load generator's report,
/// the first arrival) and how the load went.
fn run_meta(
    p: &Prepared,
    opts: &RunOptions,
    ended: Ended,
    driven: &mut Driven,
) -> Result<RunMeta, RunError> {
    let (first_arrival_us, inside) = first_arrival_and_deaths(&opts.out, &ended.events)?;
    let start_us = driven
        .load
        .as_ref()
        .map(|r| r.start_us)
        .or(first_arrival_us)
        .unwrap_or(driven.started_us);
    let mut notes = std::mem::take(&mut driven.notes);
    notes.extend(
        ended
            .events
            .iter()
            .zip(inside)
            .map(|(e, inside)| event_note(e, start_us, inside)),
    );
    let g = &p.r.gateway;
    Ok(RunMeta {
        scenario: p.r.meta.name.clone(),
        gateway: ended.gateway_name,
        time_scale: p.r.scale.time,
        quota_scale: p.r.scale.quota,
        expectations: Expectations {
            stopped_us: driven.stopped_us,
            memory_settle: driven.memory_settled,
            ..crate::plan::expectations::expectations_of(&p.r, start_us, driven.load.as_ref())
        },
        partial: driven.stopped_us.is_some(),
        provider_url: ended.provider_url,
        target_url: ended.target_url,
        notes,
        gateway_events: ended.events,
        untrusted: Vec::new(),
        provider_external: opts.provider == ProviderChoice::External,
        allow_unjudged: opts
            .allow_unjudged
            .iter()
            .map(|c| c.id().to_string())
            .collect(),
        gauge_period_s: g.gauges.period.as_secs_f64(),
        rig: p.rig.clone(),
    })
}
/// Step 3: the providers started in this process (where the choice's
/// address says; with a gateway already running, 127.0.0.1:8080 or the
/// next free port) or readied, and said before any load: with a gateway already
/// running, the base URL it must call.
async fn start_providers(
    p: &Prepared,
    opts: &RunOptions,
    run_id: &str,
) -> Result<ProviderSide, RunError> {
    let listen = opts.provider.listen(p.r.target.is_some());
    let lease = p.r.load.schedule_length() + Duration::from_secs(600);
    let provider = ProviderSide::start(
        &opts.provider,
        &opts.tls,
        &p.r.providers,
        p.r.target.is_some(),
        &opts.out,
        run_id,
        lease,
    )
    .await?;
    let urls = provider.urls();
    tell(opts.quiet, &providers_said(&urls));
    if let (Some(target), Some(listen)) = (&p.r.target, &listen) {
        tell(opts.quiet, &upstream_said(target, &urls, listen));
    }
    Ok(provider)
}

/// When the run is stopped (a signal, the spending guard: `cancel`), on
/// the records' clock: the instant a partial run's checks are cut at
/// (`wire::Expectations::stopped_us`). Aborted when the run goes its
/// course.
fn watch_for_the_stop(cancel: &CancellationToken) -> tokio::task::JoinHandle<u64> {
    let cancel = cancel.clone();
    tokio::spawn(async move {
        cancel.cancelled().await;
        now_us()
    })
}

/// When the run was stopped, if it was (`cancel` is cancelled): what
/// [`watch_for_the_stop`] saw, or now if it could not say.
async fn stopped_at(
    watch: tokio::task::JoinHandle<u64>,
    cancel: &CancellationToken,
) -> Option<u64> {
    if !cancel.is_cancelled() {
        watch.abort();
        return None;
    }
    Some(watch.await.unwrap_or_else(|_| now_us()))
}

/// The line said when the providers are ready: `fake provider: URL` for
/// one, each by name for several.
fn providers_said(urls: &crate::ProviderUrls) -> String {
    if urls.len() == 1 {
        return format!("fake provider: {}", urls.first());
    }
    let each: Vec<String> = urls.iter().map(|(n, u)| format!("{n} {u}")).collect();
    format!("fake providers: {}", each.join(", "))
}

/// For a gateway already running (`target`): the base URL it must call,
/// exactly, and what happens when it calls elsewhere.
fn upstream_said(target: &str, urls: &crate::ProviderUrls, listen: &ProviderListen) -> String {
    let at = match urls.len() {
        1 => urls.first().to_string(),
        _ => urls
            .iter()
            .map(|(n, u)| format!("{u} (provider {n})"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let chosen = match listen {
        ProviderListen::FirstFree(from) => format!(
            " (the first free port from {}; {} ADDR to choose)",
            from.port(),
            Input::ProviderListen
        ),
        ProviderListen::At(_) => String::new(),
    };
    format!(
        "the gateway at {target} must call the fake provider: set its upstream base URL to \
         {at}{chosen}, with /v1 after it where a client wants it (the load's paths, \
         /v1/chat/completions or /v1/messages, are served below it). A gateway that answers \
         {BYPASS_ANSWERS} requests without calling it stops the run."
    )
}

/// Answers with success the gateway may give while the fake provider has
/// received no call, before the run stops (the end-of-run check,
/// `upstream_seen`, calls a run invalid from 10).
const BYPASS_ANSWERS: u64 = 20;

/// Step 5 watched: the load ([`drive`]), and meanwhile, with providers in
/// this process and one load process, the gateway's answers against the
/// provider's calls: a gateway that has answered [`BYPASS_ANSWERS`]
/// requests with success while the provider received none calls
/// something else, and the load stops at once (`stop`) rather than
/// rehearsing to an invalid end. Returns the load's end and, when it
/// stopped so, why.
async fn drive_watched(
    p: &Prepared,
    (target_url, provider): (&str, &ProviderSide),
    opts: &RunOptions,
    live: Arc<loadgen::Live>,
    stop: CancellationToken,
) -> ((Option<LoadResult>, Vec<String>), Option<String>) {
    let urls = provider.urls();
    let done = CancellationToken::new();
    let load = async {
        let driven = drive(
            p,
            (target_url, &urls),
            opts,
            (
                provider.start_at(),
                provider.timelines_start(),
                live.clone(),
            ),
            stop.clone(),
        )
        .await;
        done.cancel();
        driven
    };
    let watch = async {
        if opts.shards > 1 || provider.received().is_none() {
            return None;
        }
        loop {
            tokio::select! {
                () = done.cancelled() => return None,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if provider.received() != Some(0) {
                return None;
            }
            let ok = live.ok.load(std::sync::atomic::Ordering::Relaxed);
            if ok >= BYPASS_ANSWERS {
                let why = format!(
                    "stopped early: the gateway at {target_url} answered {ok} requests with success while the fake provider received no call: it is not calling the fake provider. Set its upstream base URL to {} (as the run said at its start) and run again",
                    urls.first()
                );
                tell(
                    false,
                    "stopping: the gateway is not calling the fake provider (writing a partial report)",
                );
                stop.cancel();
                return Some(why);
            }
        }
    };
    tokio::join!(load, watch)
}

/// Step 1: the scenario at the run's scale, its plan, the target (checked
/// against `--allow-remote`) and the open files it needs.
fn prepare(s: &Scenario, opts: &RunOptions) -> Result<Prepared, RunError> {
    let mut scenario = s.clone();
    scenario.at_time_scale(opts.time_scale)?;
    let r = scenario.rehearsal().with_target(opts.target.clone());
    if opts.provider == ProviderChoice::External && r.target.is_none() {
        return Err(RunError::ExternalNeedsTarget);
    }
    if let ProviderChoice::Urls(urls) = &opts.provider {
        let names: Vec<&str> = r
            .providers
            .iter()
            .map(fake_provider::ProviderConfig::name_or_default)
            .collect();
        ProviderChoice::match_names(urls, &names)
            .map_err(|m| RunError::flag(Input::Provider, m))?;
    }
    if let Some(t) = &r.target {
        loadgen::Target::parse(t)?;
        let time = r.scale.time;
        if (time - 1.0).abs() > f64::EPSILON && !opts.allow_time_scale {
            return Err(RunError::UnscaledTarget {
                target: t.clone(),
                time_scale: time,
            });
        }
        if !is_loopback_url(t) && !opts.allow_remote {
            return Err(RunError::RemoteTarget { target: t.clone() });
        }
    }
    // A CA file that cannot be read is refused before anything starts.
    opts.tls.client_config()?;
    let plan = &r.plan;
    let patience_s = r.scale.secs(plan.patience_s);
    let mut warnings: Vec<String> = match check_fds(
        expected_fds(plan, patience_s),
        predicted_fds(r.peak_per_s(), patience_s),
    )? {
        FdCheck::Fits { .. } => None,
        FdCheck::WorstCaseOver { warning, .. } => Some(warning),
    }
    .into_iter()
    .collect();
    let rig = opts.rig.check(&r)?;
    warnings.extend(rig.said);
    warnings.extend(rig.warning.map(|w| w.to_string()));
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    Ok(Prepared {
        r,
        warnings,
        rig: rig.seen,
    })
}

/// Tells the person at the terminal what is being rehearsed, and where.
fn announce(p: &Prepared, gateway: &Running, quiet: bool, max_spend: Option<u64>) {
    if !is_loopback_url(&gateway.url) {
        // Said even with --quiet: load is going to another machine.
        tell(
            false,
            &format!(
                "sending load to REMOTE host {}: up to {:.1} requests/s ({}), {}",
                gateway.url,
                p.r.peak_per_s(),
                Input::AllowRemote,
                match max_spend {
                    Some(n) => format!("at most {n} tokens ({})", Input::MaxSpendTokens),
                    None => format!(
                        "{:.0} tokens as planned, no spending guard ({})",
                        p.r.plan.spend.tokens_with_retries,
                        Input::MaxSpendTokens
                    ),
                }
            ),
        );
    }
    // Said once: a gateway already running is named by its URL.
    let who = if gateway.name.contains(&gateway.url) {
        gateway.name.clone()
    } else {
        format!("{} at {}", gateway.name, gateway.url)
    };
    tell(quiet, &format!("gateway: {who}"));
    // A url or command's notes: the [gateway.reference] it set aside (a
    // reference gateway's are what the harness filled in for it, in the
    // report's notes).
    if !matches!(p.r.gateway.kind, GatewayKind::Reference(_)) {
        for note in &p.r.gateway.notes {
            tell(quiet, &format!("note: {note}"));
        }
    }
    let meta = &p.r.meta;
    if !meta.description.is_empty() {
        tell(
            quiet,
            &format!("rehearsing {}: {}", meta.name, meta.description),
        );
    }
    tell(quiet, &phases_said(&p.r.load, p.r.scale));
    // A replayed log as read, before any of it is sent (as `plan` says it).
    if let Some(r) = &p.r.plan.replay {
        for line in report::replay_text(r).lines() {
            tell(quiet, line);
        }
    }
    if let Some(l) = &gateway.limit {
        tell(quiet, &format!("gateway memory limit: {}", l.describe()));
    }
}

/// The phases as they are played (after `--set` and `--time-scale`, at
/// the run's scale): `phases: before 200/min for 12s, peak 2,000/min for
/// 4m (time ÷ 10, quota ÷ 10)`; a replayed log by its arrivals and length.
fn phases_said(load: &loadgen::LoadPlan, scale: wire::Scale) -> String {
    let lasting = |d: Duration| {
        humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
    };
    let per_min = |per_s: f64| {
        let m = per_s * 60.0;
        if m < 100.0 && m.fract() != 0.0 {
            format!("{m:.1}")
        } else {
            wire::number::thousands(m)
        }
    };
    let phases = load.phases();
    let mut said = if phases.is_empty() {
        format!(
            "load: a replayed log, {} arrivals over {}",
            wire::number::thousands(load.expected_arrivals()),
            lasting(load.schedule_length())
        )
    } else {
        let each: Vec<String> = phases
            .iter()
            .map(|ph| {
                let rate = if (ph.from_per_sec - ph.to_per_sec).abs() < 1e-9 {
                    per_min(ph.from_per_sec)
                } else {
                    format!("{} to {}", per_min(ph.from_per_sec), per_min(ph.to_per_sec))
                };
                format!("{} {rate}/min for {}", ph.name, lasting(ph.duration))
            })
            .collect();
        format!("phases as played: {}", each.join(", "))
    };
    if !scale.is_one() {
        said.push_str(&format!(
            " (time ÷ {}, quota ÷ {})",
            loadgen::Rate::bare(scale.time),
            loadgen::Rate::bare(scale.quota)
        ));
    }
    said
}

/// Where the gateway's memory is read: the scenario's metric when it names
/// one, else the spawned process group.
fn rss_source(g: &crate::GatewaySpec, gateway: &Running, tls: &loadgen::TlsOptions) -> RssSource {
    match (&gateway.supervised, &g.metrics_url, &g.rss_metric) {
        (_, Some(url), Some(metric)) => RssSource::Metric {
            url: url.clone(),
            metric: metric.clone(),
            tls: tls.clone(),
        },
        (Some(sup), _, _) => RssSource::Group(sup.state.clone()),
        _ => RssSource::None,
    }
}

/// Serves the live series on `listener` (`--metrics-listen`), when one
/// was bound, until the guard returned is dropped: the load generator's
/// counters (returned, for it to count into), the gateway's memory as
/// `sampler` reads it, the in-process provider's and the reference
/// gateway's own `/metrics` passed through.
fn live_series(
    listener: Option<std::net::TcpListener>,
    p: &Prepared,
    run_id: &str,
    (provider, gateway, memory): (
        &ProviderSide,
        &Running,
        Arc<crate::gateway::memory::MemoryNow>,
    ),
) -> Result<(Arc<loadgen::Live>, tokio_util::sync::DropGuard), RunError> {
    let live = Arc::new(loadgen::Live::default());
    let stop = CancellationToken::new();
    if let Some(listener) = listener {
        let source = crate::run::live_metrics::MetricsSource {
            live: live.clone(),
            plan: p.r.load.clone(),
            labels: crate::run::live_metrics::MetricsSource::labels(&p.r.meta.name, run_id),
            time_scale: p.r.scale.time,
            provider_metrics: provider
                .is_local()
                .then(|| format!("{}/metrics", provider.base_url())),
            gateway_metrics: gateway.metrics_url.clone(),
            gateway_memory: Some(memory),
        };
        crate::run::live_metrics::serve(listener, Arc::new(source), stop.clone())?;
    }
    Ok((live, stop.drop_guard()))
}

/// Step 5: the load, from the load generator, into `client.jsonl`. Returns
/// its report (none when it stopped early) and what to note about it.
async fn drive(
    p: &Prepared,
    (target_url, urls): (&str, &ProviderUrls),
    opts: &RunOptions,
    (start_at, timelines, live): (
        Option<std::time::SystemTime>,
        Option<loadgen::OnStart>,
        Arc<loadgen::Live>,
    ),
    cancel: CancellationToken,
) -> (Option<LoadResult>, Vec<String>) {
    let mut notes = Vec::new();
    let target = match loadgen::Target::parse(target_url) {
        Ok(t) => t,
        Err(e) => {
            notes.push(format!("the load generator could not start: {e}"));
            return (None, notes);
        }
    };
    if opts.shards > 1 {
        let shards = crate::run::multi::LocalShards {
            count: opts.shards,
            target: target_url,
            time_scale: p.r.scale.time,
            start_at: start_at.unwrap_or_else(|| {
                let lead = Duration::from_secs(2);
                if let Some(loadgen::OnStart(start)) = &timelines {
                    start(std::time::Instant::now() + lead);
                }
                std::time::SystemTime::now() + lead
            }),
            tls: &opts.tls,
            spend_share: opts.max_spend_tokens.map(|n| n / u64::from(opts.shards)),
            provider_urls: urls,
        };
        notes.push(format!(
            "the load came from {} processes (shards), merged; each one's files are under shards/",
            opts.shards
        ));
        if let Some(n) = opts.max_spend_tokens {
            notes.push(format!(
                "the spending guard of {n} tokens was shared: {} for each of the {} shards",
                n / u64::from(opts.shards),
                opts.shards
            ));
        }
        return match crate::run::multi::run_local_shards(&opts.out, &shards, cancel).await {
            Ok(r) => (Some(r), notes),
            Err(e) => {
                notes.push(format!("the load generator stopped: {e}"));
                (None, notes)
            }
        };
    }
    let mut lo = loadgen::LoadOptions::new(&opts.out);
    lo.progress = opts.progress;
    lo.start_at = start_at;
    // The in-process providers' timelines run from the load's start, not
    // from theirs, nor from when it was asked for: a gateway that takes
    // seconds to become ready (a router checking its workers' health
    // first), or a load generator slow to set up on a busy machine, would
    // otherwise meet every phase that much early.
    lo.on_start = timelines;
    lo.tls = opts.tls.clone();
    lo.max_spend_tokens = opts.max_spend_tokens;
    lo.live = Some(live);
    lo.provider_urls = urls
        .iter()
        .map(|(n, u)| (n.to_string(), u.to_string()))
        .collect();
    lo.open_files_shared = matches!(opts.provider, crate::ProviderChoice::InProcess { .. });
    match loadgen::run(&p.r.load, &target, &lo, cancel).await {
        Ok(r) => {
            notes.extend(r.spend.map(spend_note));
            notes.extend(r.notes.iter().cloned());
            (
                Some(LoadResult {
                    start_us: r.start_us,
                    send_lag_p99_us: r.send_lag.p99_us,
                }),
                notes,
            )
        }
        Err(e) => {
            notes.push(format!("the load generator stopped: {e}"));
            (None, notes)
        }
    }
}

/// What the spending guard let through, for the notes.
fn spend_note(s: loadgen::Spent) -> String {
    if s.stopped {
        format!(
            "stopped by the spending guard: the next request would have taken the tokens sent past the budget of {} ({}); {} were sent, retries included",
            s.limit_tokens,
            Input::MaxSpendTokens,
            s.sent_tokens
        )
    } else {
        format!(
            "the spending guard of {} tokens held: {} were sent, retries included",
            s.limit_tokens, s.sent_tokens
        )
    }
}

/// Step 6: lets the backlog drain, within the drain allowance (not when the
/// run was interrupted), and notes the provider calls still running then.
async fn settle(provider: &ProviderSide, p: &Prepared, partial: bool, notes: &mut Vec<String>) {
    let allowance = p.r.thresholds.drain.within + Duration::from_secs(1);
    let deadline = Instant::now() + allowance;
    while !partial && Instant::now() < deadline && provider.in_flight().await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = provider.in_flight().await;
    if left > 0 {
        notes.push(format!(
            "{left} provider calls were still in flight when the gateway was stopped"
        ));
    }
}

/// The memory samples taken before the load is let go, for
/// `memory_ceiling`'s idle baseline: one, which the sampler takes at once.
/// (Before the in-process providers' timelines were started with the load,
/// waiting for more moved their phases: three samples (200 ms) at
/// `--time-scale 5` moved the pool demo's slowdown a second of scenario
/// time earlier.)
const BASELINE_SAMPLES: u64 = 1;

/// Step 5's start: the sampler of the gateway's memory into `file`, and
/// whether `memory_ceiling` reads the arc of it (the check on, and memory
/// to read). Then the idle baseline is read from the samples before the
/// load: a few of them are taken now (the gateway is ready), before the
/// load is let go.
async fn sample_memory(
    p: &Prepared,
    gateway: &Running,
    tls: &loadgen::TlsOptions,
    file: std::fs::File,
) -> (RssSampler, bool) {
    let source = rss_source(&p.r.gateway, gateway, tls);
    let arc = p.r.thresholds.memory_ceiling.enabled && !matches!(source, RssSource::None);
    let mut sampler = RssSampler::start(source, file);
    if arc {
        sampler
            .samples(BASELINE_SAMPLES, Duration::from_secs(1))
            .await;
    }
    (sampler, arc)
}

/// Step 6, for `memory_ceiling`: the load has ended and the backlog has
/// drained; the gateway idles for the check's `settle` (at the run's
/// scale; at least three sampling periods, so that what it keeps is read
/// from several samples) while its memory is sampled, and says so. Returns
/// the wait, `(from_us, to_us)`, on the run's clock; `None` when `wait` is
/// false (the check off, no memory sampled, or the run interrupted), when
/// it was interrupted, or when the gateway is not running (what it keeps
/// is then not judged, and a note says why).
async fn memory_settle(
    p: &Prepared,
    gateway: &Running,
    wait: bool,
    quiet: bool,
    cancel: &CancellationToken,
    notes: &mut Vec<String>,
) -> Option<(u64, u64)> {
    if !wait {
        return None;
    }
    if !gateway.running() {
        notes.push("the gateway was not running when the load had drained, so the harness did not wait for its memory to settle: what it keeps after the load was not measured".into());
        return None;
    }
    let idle =
        p.r.thresholds
            .memory_ceiling
            .settle
            .max(3 * crate::gateway::memory::PERIOD);
    // The settle as written: the scaled one at full scale, to the millisecond.
    let settle = p.r.thresholds.memory_ceiling.settle.as_secs_f64() * p.r.scale.time;
    let written = Duration::from_millis((settle * 1000.0).round() as u64);
    tell(
        quiet,
        &format!(
            "the load has ended and drained: the gateway idles {} s for its memory to settle (memory_ceiling's settle, {} of scenario time at time scale {})",
            wire::number::num(idle.as_secs_f64(), 1),
            humantime::format_duration(written),
            wire::number::num(p.r.scale.time, 2)
        ),
    );
    let from_us = now_us();
    tokio::select! {
        _ = tokio::time::sleep(idle) => Some((from_us, now_us())),
        _ = cancel.cancelled() => {
            notes.push("interrupted while the gateway's memory settled after the load: what it keeps was not measured".into());
            None
        }
    }
}

/// One pass over `client.jsonl`: the first arrival's intended time (the
/// run's time zero), and for each gateway event the attempts inside it then.
fn first_arrival_and_deaths(
    dir: &Path,
    events: &[GatewayEvent],
) -> Result<(Option<u64>, Vec<Inside>), RunError> {
    let mut start: Option<u64> = None;
    let mut inside = vec![Inside::default(); events.len()];
    for a in Records::<ClientRecord>::open(dir, files::CLIENT_RECORDS)? {
        if a.attempt == 1 {
            start = Some(start.map_or(a.intended_us, |s| s.min(a.intended_us)));
        }
        for (e, n) in events.iter().zip(inside.iter_mut()) {
            if e.kind == "died" {
                n.count(e.at_us, &a);
            }
        }
    }
    Ok((start, inside))
}

/// Returns true if and only if `url`'s host is a loopback address or
/// `localhost`.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phases_are_said_as_played() {
        // A phase edited after the description was written: the phases
        // are said as they are, whatever the description says.
        let text = crate::BUILTIN_SCENARIO.replace(
            "duration = \"10s\"\nrate = 5\n",
            "duration = \"5s\"\nrate = 5\n",
        );
        let s = crate::Scenario::from_str(&text, "s.toml", Path::new("s.toml")).unwrap();
        assert!(
            s.meta.description.contains("for 10 s"),
            "{}",
            s.meta.description
        );
        let r = s.rehearsal();
        let said = phases_said(&r.load, r.scale);
        assert_eq!(
            said,
            "phases as played: baseline 300/min for 5s, overload 3x 1,800/min for 10s, after 120/min for 9s"
        );
        let mut scaled = s.clone();
        scaled.at_time_scale(Some(5.0)).unwrap();
        let r = scaled.rehearsal();
        let said = phases_said(&r.load, r.scale);
        assert!(
            said.starts_with("phases as played: baseline 1,500/min for 1s,")
                && said.contains("after 600/min for 1s 800ms")
                && said.ends_with("(time ÷ 5, quota ÷ 1)"),
            "{said}"
        );
    }

    #[test]
    fn loopback_is_recognised() {
        assert!(is_loopback_url("http://127.0.0.1:8080"));
        assert!(is_loopback_url("http://127.3.2.1:80/v1"));
        assert!(is_loopback_url("http://localhost:1"));
        assert!(is_loopback_url("http://[::1]:1"));
        assert!(!is_loopback_url("http://10.0.0.1:80"));
        assert!(!is_loopback_url("https://staging.example.com"));
        assert!(!is_loopback_url("not a url"));
    }
}
