//! A rehearsal whose load comes from several processes or machines, in
//! commands (README, "Load from several machines"):
//!
//! 1. `rehearse stage SCENARIO --provider URL --start-at T --out DIR`: the
//!    scenario's scaled provider table uploaded to the fake provider beside
//!    the gateway, its reset scheduled at T (its timeline starts then), and
//!    `scenario.toml`, `plan.json` and `run.json` written into DIR;
//! 2. on each machine, `rehearse load DIR/scenario.toml --target GATEWAY
//!    --shard I/N --start-at T --provider URL --out SHARD_DIR`: its part of
//!    the one schedule, and its clock against the provider's;
//! 3. `rehearse collect DIR SHARD_DIR... --provider URL`: the shards' client
//!    records moved onto the provider's clock and merged in end order, their
//!    HDR logs added up, the provider's records fetched;
//! 4. `rehearse report DIR` judges it.
//!
//! Every time in DIR is on the provider's clock: the one clock every shard
//! measured itself against.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wire::{files, ClientRecord, RunMeta};

use crate::error::RunError;
use crate::plan::expectations::LoadResult;
use crate::provider::remote::{ClockOffset, RemoteProvider, Reset};
use crate::run::rundir::{write_atomic, RunDir};

/// A shard's clock against the provider's, written by `rehearse load
/// --provider URL` into its folder.
pub(crate) const SHARD_OFFSET: &str = "provider-offset.json";

/// Round trips per offset measurement.
const ROUNDS: usize = 8;

fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What `rehearse stage` needs beyond the scenario. With the `clap`
/// feature these are its flags themselves: each field's doc is its
/// `--help` line.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct StageOptions {
    /// The run directory to prepare.
    #[cfg_attr(feature = "clap", arg(short, long))]
    pub out: PathBuf,
    /// The fake provider beside the gateway (admin token from
    /// REHEARSE_PROVIDER_TOKEN); a scenario of several [[providers]]:
    /// NAME=URL for each (repeatable). Every time in the run directory is
    /// on the first provider's clock.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "URL|NAME=URL", required = true)
    )]
    pub provider: Vec<String>,
    /// When the provider's timeline and the shards' schedules start (RFC
    /// 3339 or Unix seconds): give every shard the same value.
    #[cfg_attr(feature = "clap", arg(long, value_name = "TIME", value_parser = loadgen::parse_start_at))]
    pub start_at: SystemTime,
    /// Compress every duration by N and multiply every rate by N.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = crate::scale_factor))]
    pub time_scale: Option<f64>,
    /// The gateway the shards drive (for the report).
    #[cfg_attr(feature = "clap", arg(long, value_name = "URL"))]
    pub target: Option<String>,
    /// Reset the provider even if another run holds its lease.
    #[cfg_attr(feature = "clap", arg(long))]
    pub force: bool,
}

/// `rehearse stage`: readies the provider and the run directory.
pub async fn stage(s: &crate::Scenario, opts: &StageOptions) -> Result<(), RunError> {
    let mut scenario = s.clone();
    scenario.at_time_scale(opts.time_scale)?;
    let rehearsal = scenario.rehearsal();
    let names: Vec<&str> = rehearsal
        .providers
        .iter()
        .map(fake_provider::ProviderConfig::name_or_default)
        .collect();
    let urls = named_urls(&opts.provider, &names)?;
    let dir = RunDir::create(&opts.out)?;
    let run_id = crate::provider::remote::run_id_of(&opts.out);
    let lease = rehearsal.load.schedule_length() + Duration::from_secs(600);
    let mut first = None;
    let mut others = Vec::new();
    for ((name, url), config) in urls.iter().zip(&rehearsal.providers) {
        let remote = RemoteProvider::new(url);
        let offset = remote.clock_offset(ROUNDS).await?;
        let version = remote.upload_config(config).await?;
        let start_us = unix_us(opts.start_at).saturating_add_signed(offset.offset_us);
        remote
            .reset(&Reset {
                run_id: run_id.clone(),
                start_at_unix_ms: Some(start_us / 1000),
                lease_s: lease.as_secs(),
                force: opts.force,
                config_version: version,
            })
            .await?;
        match first {
            None => first = Some((offset, start_us)),
            Some(_) => others.push(format!(
                "provider {name} at {url}: its timeline starts then too (its clock {:+.1} ms from the stager's, ± {:.1} ms); its records are moved onto the first provider's clock when collected",
                offset.offset_us as f64 / 1000.0,
                offset.uncertainty_us as f64 / 1000.0
            )),
        }
    }
    let Some((offset, start_provider_us)) = first else {
        unreachable!("a scenario has at least one provider");
    };
    // Every shard's `rehearse load` plays this scenario's [load], and
    // `rehearse report` judges from it.
    dir.write_inputs(&rehearsal)?;
    let mut expect =
        crate::plan::expectations::expectations_of(&rehearsal, start_provider_us, None);
    // No shard has run yet: the largest lag JSON holds (infinity is not a
    // JSON number), so a run judged before `collect` is invalid.
    expect.send_lag_p99_ms = f64::MAX;
    let meta = RunMeta {
        scenario: rehearsal.meta.name.clone(),
        gateway: opts.target.clone().unwrap_or_else(|| "a gateway driven by shards".into()),
        time_scale: rehearsal.scale.time,
        quota_scale: rehearsal.scale.quota,
        expectations: expect,
        partial: false,
        provider_url: urls[0].1.clone(),
        target_url: opts.target.clone().unwrap_or_default(),
        notes: std::iter::once(format!(
            "staged: the provider's timeline and the shards' schedules start at {} (Unix {:.3} s on the provider's clock, which was {:+.1} ms from the stager's, ± {:.1} ms); every time in this directory is on the provider's clock",
            humantime::format_rfc3339_millis(opts.start_at),
            start_provider_us as f64 / 1e6,
            offset.offset_us as f64 / 1000.0,
            offset.uncertainty_us as f64 / 1000.0
        ))
        .chain(others)
        .collect(),
        gateway_events: Vec::new(),
        untrusted: Vec::new(),
        provider_external: false,
        allow_unjudged: Vec::new(),
        gauge_period_s: 0.0,
        rig: None,
    };
    dir.write_meta(&meta)
}

/// The `--provider` flags of `stage` (`URL`, or `NAME=URL` each) matched
/// to the scenario's providers `names`: (name, URL) in its order.
fn named_urls(flags: &[String], names: &[&str]) -> Result<Vec<(String, String)>, RunError> {
    let urls = parse_urls(flags)?;
    crate::ProviderChoice::match_names(&urls, names)
        .map_err(|m| RunError::flag(crate::host::Input::Provider, m))
}

/// `stage`'s and `collect`'s `--provider` flags, as remote providers.
fn parse_urls(flags: &[String]) -> Result<Vec<crate::ProviderAt>, RunError> {
    let bad = |m: String| RunError::flag(crate::host::Input::Provider, m);
    let choices = flags
        .iter()
        .map(|f| f.parse::<crate::ProviderChoice>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    crate::ProviderChoice::urls_of(choices).map_err(bad)
}

/// `rehearse load --provider URL`: measures this machine's clock against
/// the provider's and writes it into the shard's folder.
pub async fn write_shard_offset(provider: &str, out: &Path) -> Result<ClockOffset, RunError> {
    let offset = RemoteProvider::new(provider).clock_offset(ROUNDS).await?;
    write_atomic(
        &out.join(SHARD_OFFSET),
        serde_json::to_string_pretty(&offset)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    Ok(offset)
}

/// One shard's records on the provider's clock, in file order.
struct Shard {
    dir: PathBuf,
    offset: ClockOffset,
    lines: std::io::Lines<std::io::BufReader<std::fs::File>>,
    next: Option<ClientRecord>,
}

impl Shard {
    /// A shard's folder; `same_clock`: its records are on our clock already
    /// (a local shard), else its `provider-offset.json` moves them.
    fn open(dir: &Path, same_clock: bool) -> Result<Shard, RunError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::File::open(&path).map_err(|source| RunError::ReadShard { path, source })
        };
        let offset = match read(SHARD_OFFSET) {
            _ if same_clock => ClockOffset {
                offset_us: 0,
                uncertainty_us: 0,
            },
            Ok(f) => serde_json::from_reader(f).map_err(|source| RunError::ShardOffset {
                path: dir.join(SHARD_OFFSET),
                source,
            })?,
            Err(_) => {
                return Err(RunError::NoShardOffset {
                    dir: dir.to_path_buf(),
                    file: SHARD_OFFSET,
                })
            }
        };
        let lines = std::io::BufReader::new(read(files::CLIENT_RECORDS)?).lines();
        let mut s = Shard {
            dir: dir.to_path_buf(),
            offset,
            lines,
            next: None,
        };
        s.advance()?;
        Ok(s)
    }

    fn advance(&mut self) -> Result<(), RunError> {
        self.next = None;
        for line in self.lines.by_ref() {
            let line = line.map_err(|source| RunError::ReadShard {
                path: self.dir.join(files::CLIENT_RECORDS),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            // A cut-off last line (a killed shard) is left out here; the
            // shard's own file keeps it.
            if let Ok(mut r) = serde_json::from_str::<ClientRecord>(&line) {
                let shift = |t: u64| t.saturating_add_signed(self.offset.offset_us);
                r.intended_us = shift(r.intended_us);
                r.sent_us = shift(r.sent_us);
                r.done_us = shift(r.done_us);
                r.first_byte_us = r.first_byte_us.map(shift);
                self.next = Some(r);
                return Ok(());
            }
        }
        Ok(())
    }
}

/// `rehearse collect`: merges the shards into `dir` and fetches the
/// providers' records (`providers`: `URL`, or `NAME=URL` each; several
/// merged into one file in end order, each moved onto the clock of the
/// one `stage` put first, whose URL `run.json` keeps); `rehearse report
/// DIR` judges the result.
pub async fn collect(dir: &Path, shards: &[PathBuf], providers: &[String]) -> Result<(), RunError> {
    let meta_path = dir.join(files::RUN);
    let meta_text = std::fs::read_to_string(&meta_path).map_err(|source| RunError::NotStaged {
        path: meta_path.clone(),
        source,
    })?;
    let mut meta: RunMeta =
        serde_json::from_str(&meta_text).map_err(|source| RunError::StagedRunJson {
            path: meta_path.clone(),
            source,
        })?;
    let open = merge_records(dir, shards, false)?;
    merge_hlogs(dir, shards)?;
    let mut lag_p99_ms: f64 = 0.0;
    for (s, d) in open.iter().zip(shards) {
        let summary: Option<serde_json::Value> =
            std::fs::read_to_string(d.join(files::LOAD_SUMMARY))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok());
        let lag = summary
            .as_ref()
            .and_then(|v| v["send_lag"]["p99_us"].as_f64())
            .map_or(f64::INFINITY, |us| us / 1000.0);
        lag_p99_ms = lag_p99_ms.max(lag);
        meta.notes.push(format!(
            "shard {}: clock {:+.1} ms from the provider's (± {:.1} ms), send lag p99 {:.1} ms",
            d.display(),
            s.offset.offset_us as f64 / 1000.0,
            s.offset.uncertainty_us as f64 / 1000.0,
            lag
        ));
    }
    // The run keeps its schedule only if every shard kept its own.
    meta.expectations.send_lag_p99_ms = lag_p99_ms;
    fetch_providers(dir, providers, &mut meta).await?;
    write_atomic(
        &meta_path,
        serde_json::to_string_pretty(&meta)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    Ok(())
}

/// Fetches each provider's records into `dir`: one straight into
/// `provider.jsonl` (already on the clock every time in `dir` is on);
/// several each into a part, moved from its clock onto the first's
/// (`meta.provider_url`'s; both measured now), then merged.
async fn fetch_providers(
    dir: &Path,
    providers: &[String],
    meta: &mut RunMeta,
) -> Result<(), RunError> {
    let bad = |m: String| RunError::flag(crate::host::Input::Provider, m);
    let urls = parse_urls(providers)?;
    let zero = ClockOffset {
        offset_us: 0,
        uncertainty_us: 0,
    };
    if let [one] = urls.as_slice() {
        let n = RemoteProvider::new(&one.url)
            .fetch_records(&dir.join(files::PROVIDER_RECORDS), zero)
            .await?;
        meta.notes.push(format!(
            "{n} provider call records fetched from {}",
            one.url
        ));
        return Ok(());
    }
    let Some(first) = urls.iter().find(|u| u.url == meta.provider_url) else {
        return Err(bad(format!(
            "none is {}, the first provider `rehearse stage` was given (run.json's provider_url)",
            meta.provider_url
        )));
    };
    let first_offset = RemoteProvider::new(&first.url).clock_offset(ROUNDS).await?;
    let mut parts = Vec::new();
    for (i, at) in urls.iter().enumerate() {
        let remote = RemoteProvider::new(&at.url);
        let offset = match at.url == first.url {
            true => zero,
            false => {
                let theirs = remote.clock_offset(ROUNDS).await?;
                ClockOffset {
                    offset_us: theirs.offset_us - first_offset.offset_us,
                    uncertainty_us: theirs.uncertainty_us + first_offset.uncertainty_us,
                }
            }
        };
        let part = dir.join(format!("provider-{i}.jsonl"));
        let n = remote.fetch_records(&part, offset).await?;
        meta.notes.push(format!(
            "{n} provider call records fetched from {} (its clock {:+.1} ms from the first provider's, ± {:.1} ms)",
            at.url,
            offset.offset_us as f64 / 1000.0,
            offset.uncertainty_us as f64 / 1000.0
        ));
        parts.push(part);
    }
    let into = dir.join(files::PROVIDER_RECORDS);
    crate::run::rundir::merge_by_end(&parts, &into).map_err(RunError::write(&into))?;
    for p in &parts {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// Merges the shards' client records into `dir`'s `client.jsonl`, in
/// end order, each moved onto one clock (see [`Shard::open`]).
fn merge_records(dir: &Path, shards: &[PathBuf], same_clock: bool) -> Result<Vec<Shard>, RunError> {
    let mut open: Vec<Shard> = shards
        .iter()
        .map(|d| Shard::open(d, same_clock))
        .collect::<Result<_, _>>()?;
    let out_path = dir.join(files::CLIENT_RECORDS);
    let werr = |e: std::io::Error| RunError::write(&out_path)(e);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&out_path).map_err(werr)?);
    // Merged in end order, as one load generator writes them.
    while let Some(i) = (0..open.len())
        .filter(|&i| open[i].next.is_some())
        .min_by_key(|&i| open[i].next.as_ref().map_or(u64::MAX, |r| r.done_us))
    {
        if let Some(r) = open[i].next.take() {
            serde_json::to_writer(&mut out, &r).map_err(|e| werr(e.into()))?;
            out.write_all(b"\n").map_err(werr)?;
        }
        open[i].advance()?;
    }
    out.flush().map_err(werr)?;
    Ok(open)
}

/// What `rehearse run --shards N` hands its load processes.
pub(crate) struct LocalShards<'a> {
    pub(crate) count: u32,
    pub(crate) target: &'a str,
    pub(crate) time_scale: f64,
    pub(crate) start_at: SystemTime,
    pub(crate) tls: &'a loadgen::TlsOptions,
    /// Each shard's share of the spending guard's tokens.
    pub(crate) spend_share: Option<u64>,
    /// The fake providers' URLs, for a header's `{provider_url}` and
    /// `{provider_url:NAME}`.
    pub(crate) provider_urls: &'a crate::ProviderUrls,
}

/// `rehearse run --shards N`: N `rehearse load --shard I/N` processes of
/// this binary on the run directory's scenario, started at one instant,
/// their folders under `dir/shards/`, merged into `dir` as `collect`
/// merges (one clock: this machine's). A cancel stops them (SIGTERM: each
/// writes its partial records).
pub(crate) async fn run_local_shards(
    dir: &Path,
    s: &LocalShards<'_>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<LoadResult, RunError> {
    let exe = std::env::current_exe().map_err(RunError::NoBinary)?;
    let host = crate::host::host().ok_or(RunError::no_host("the load's shards"))?;
    let at = s
        .start_at
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let dirs: Vec<PathBuf> = (0..s.count)
        .map(|i| dir.join("shards").join(i.to_string()))
        .collect();
    let scenario = dir.join(files::SCENARIO);
    let mut children = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let call = crate::host::ShardCall {
            scenario: &scenario,
            target: s.target,
            time_scale: s.time_scale,
            shard: i as u32,
            count: s.count,
            start_at_s: at,
            out: d,
            ca_file: s.tls.ca_file.as_deref(),
            insecure: s.tls.insecure,
            spend_share: s.spend_share,
            provider_urls: s.provider_urls.iter().collect(),
        };
        let mut c = tokio::process::Command::new(&exe);
        c.args((host.load_shard)(&call))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        children.push(
            c.spawn()
                .map_err(|source| RunError::ShardStart { shard: i, source })?,
        );
    }
    let pids: Vec<u32> = children.iter().filter_map(|c| c.id()).collect();
    let waits = futures_util::future::join_all(children.into_iter().map(|c| c.wait_with_output()));
    let outputs = tokio::select! {
        o = waits => o,
        () = cancel.cancelled() => {
            for pid in &pids {
                // SIGTERM: the shard stops its arrivals and writes what it has.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            return Err(RunError::ShardsStopped);
        }
    };
    for (i, o) in outputs.into_iter().enumerate() {
        let o = o.map_err(|source| RunError::ShardWait { shard: i, source })?;
        if !o.status.success() && o.status.code() != Some(3) {
            return Err(RunError::ShardFailed {
                shard: i,
                status: o.status,
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
    }
    merge_records(dir, &dirs, true)?;
    merge_hlogs(dir, &dirs)?;
    let mut result = LoadResult {
        start_us: u64::MAX,
        send_lag_p99_us: 0,
    };
    for d in &dirs {
        let v: serde_json::Value = std::fs::read_to_string(d.join(files::LOAD_SUMMARY))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| RunError::ShardSummary { dir: d.clone() })?;
        result.start_us = result
            .start_us
            .min(v["start_us"].as_u64().unwrap_or(u64::MAX));
        result.send_lag_p99_us = result
            .send_lag_p99_us
            .max(v["send_lag"]["p99_us"].as_u64().unwrap_or(u64::MAX));
    }
    Ok(result)
}

/// Adds up the shards' HDR histograms, tag by tag, into `dir`'s
/// `client.hlog`.
fn merge_hlogs(dir: &Path, shards: &[PathBuf]) -> Result<(), RunError> {
    use hdrhistogram::serialization::interval_log::{
        IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
    };
    use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
    let mut merged: BTreeMap<String, hdrhistogram::Histogram<u64>> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    for d in shards {
        let Ok(bytes) = std::fs::read(d.join(files::CLIENT_HLOG)) else {
            continue;
        };
        for entry in IntervalLogIterator::new(&bytes) {
            let Ok(LogEntry::Interval(h)) = entry else {
                continue;
            };
            let Some(tag) = h.tag().map(|t| t.as_str().to_string()) else {
                continue;
            };
            longest = longest.max(h.duration());
            let Some(decoded) = base64_decode(h.encoded_histogram()).and_then(|raw| {
                Deserializer::new()
                    .deserialize::<u64, _>(&mut &raw[..])
                    .ok()
            }) else {
                continue;
            };
            match merged.get_mut(&tag) {
                Some(m) => {
                    let _ = m.add(&decoded);
                }
                None => {
                    merged.insert(tag, decoded);
                }
            }
        }
    }
    let path = dir.join(files::CLIENT_HLOG);
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let now = SystemTime::now();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment(
                "rehearse collect: the shards' whole-run histograms added up, microseconds",
            )
            .with_base_time(now)
            .with_start_time(now)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(RunError::write(&path))?;
        for (tag, h) in &merged {
            if let Some(tag) = Tag::new(tag) {
                log.write_histogram(h, Duration::ZERO, longest, Some(tag))
                    .map_err(|source| RunError::Hlog {
                        path: path.clone(),
                        source,
                    })?;
            }
        }
    }
    write_atomic(&path, &out)?;
    Ok(())
}

/// Decodes the interval log's base64 text.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_reads_what_the_log_writes() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("AAEC").unwrap(), [0, 1, 2]);
        assert_eq!(base64_decode("a*"), None);
    }
}
