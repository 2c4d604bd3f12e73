//! The files of a run directory: one name each, one writer each.
//!
//! A run directory (`runs/<scenario>-<time>/`) is what a rehearsal leaves
//! behind, and all `rehearse report DIR` needs to judge it again. Every
//! part that writes or reads one of its files names it from here, and each
//! file has exactly one writer (said in [`ALL`]), so two parts cannot
//! overwrite each other's file of the same name.
//!
//! A file written whole goes through [`write_atomic`], so a reader (or a
//! run killed half-way) never sees half a file. The record streams
//! (`client.jsonl`) are appended to line by line instead, each line in one
//! write, so a killed process leaves whole lines.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The scenario as run (its text, unchanged). Written by the harness.
pub const SCENARIO: &str = "scenario.toml";
/// The plan's predictions for the run, as JSON. Written by the harness.
pub const PLAN: &str = "plan.json";
/// The run's metadata: scale, target, expectations, start and end times.
/// Written by the harness.
pub const RUN: &str = "run.json";
/// The reference gateway's config as run, scaled. Written by the harness
/// when it starts the reference gateway.
pub const GATEWAY_CONFIG: &str = "gateway.toml";
/// The gateway's standard output and error. Written by the harness.
pub const GATEWAY_LOG: &str = "gateway.log";
/// One [`ClientRecord`](crate::ClientRecord) per attempt, as JSON lines.
/// Appended by the load generator.
pub const CLIENT_RECORDS: &str = "client.jsonl";
/// One [`ProviderRecord`](crate::ProviderRecord) per call, as JSON lines,
/// appended by the fake provider as each call ends.
pub const PROVIDER_RECORDS: &str = "provider.jsonl";
/// The gateway's [`RssSample`](crate::RssSample)s, as JSON lines. Written by
/// the harness.
pub const RSS_RECORDS: &str = "rss.jsonl";
/// The gateway's `/metrics` text as the load ended (its `metrics_url`, or
/// the reference gateway's). Written by the harness.
pub const GATEWAY_METRICS: &str = "gateway-metrics.txt";
/// The gateway's named gauges ([`GatewaySample`](crate::GatewaySample)s)
/// as JSON lines, sampled from its `metrics_url`. Written by the harness.
pub const GATEWAY_SAMPLES: &str = "gateway-samples.jsonl";
/// The load generator's HDR histograms (latency and time to first byte by
/// outcome, served people, send lag), as an HDR interval log. Written by the
/// load generator.
pub const CLIENT_HLOG: &str = "client.hlog";
/// The load generator's own report: counts and percentiles by outcome, send
/// lag, validity, per-second counts. Written by the load generator.
pub const LOAD_SUMMARY: &str = "summary.json";
/// The load generator's per-second counts as the client saw them (offered,
/// sent, retries, ok, shed, timed out, errors, outstanding). Written by the
/// load generator.
pub const LOAD_SECONDS: &str = "load-seconds.csv";
/// The judgement: verdicts, summary, per-second timeline. Written by the
/// harness (`run` and `report`).
pub const REPORT_JSON: &str = "report.json";
/// The checklist as a JUnit test suite, for CI. Written by the harness.
pub const JUNIT: &str = "junit.xml";
/// The checklist's per-second timeline of the joined records (client,
/// gateway, provider). Written by the harness.
pub const TIMELINE: &str = "timeline.csv";
/// The checklist as Markdown (a table of the checks, the explanations of
/// those that failed), for a CI job's summary or a pull-request comment.
/// Written by the report.
pub const SUMMARY_MD: &str = "summary.md";
/// The self-contained HTML report. Written by the report.
pub const REPORT_HTML: &str = "report.html";
/// Chart 1, traffic per second, as PNG. Written by the report.
pub const CHART_TRAFFIC: &str = "chart-traffic.png";
/// Chart 2, where the requests are, as PNG. Written by the report.
pub const CHART_REQUESTS: &str = "chart-requests.png";
/// Chart 3, latency per second, as PNG. Written by the report.
pub const CHART_LATENCY: &str = "chart-latency.png";
/// Chart 4, gateway memory, as PNG. Written by the report.
pub const CHART_MEMORY: &str = "chart-memory.png";
/// Chart 5, Retry-After given against the drain time measured, as PNG.
/// Written by the report.
pub const CHART_RETRY_AFTER: &str = "chart-retry-after.png";
/// Chart 6, the HDR percentile plot of end-to-end latency, as PNG. Written
/// by the report.
pub const CHART_DISTRIBUTION: &str = "chart-distribution.png";

/// Every file of a run directory, with what it holds and who writes it, in
/// the order a run writes them. (While [`write_atomic`] writes one, a
/// `<name>.tmp` beside it may exist for a moment.)
///
/// ```
/// assert!(wire::files::ALL.iter().any(|(name, _)| *name == wire::files::CLIENT_RECORDS));
/// ```
pub const ALL: [(&str, &str); 24] = [
    (SCENARIO, "the scenario as run (harness)"),
    (PLAN, "the plan's predictions (harness)"),
    (
        GATEWAY_CONFIG,
        "the reference gateway's config as run (harness)",
    ),
    (GATEWAY_LOG, "the gateway's stdout and stderr (harness)"),
    (
        CLIENT_RECORDS,
        "one record per client attempt (load generator)",
    ),
    (
        CLIENT_HLOG,
        "HDR histogram log of the client's latencies (load generator)",
    ),
    (LOAD_SUMMARY, "the load generator's report (load generator)"),
    (
        LOAD_SECONDS,
        "per-second counts as the client saw them (load generator)",
    ),
    (
        PROVIDER_RECORDS,
        "one record per provider call (fake provider)",
    ),
    (
        RSS_RECORDS,
        "the gateway's resident memory samples (harness)",
    ),
    (
        GATEWAY_METRICS,
        "the gateway's /metrics as the load ended (harness)",
    ),
    (
        GATEWAY_SAMPLES,
        "the gateway's named gauges, sampled (harness)",
    ),
    (RUN, "the run's metadata and expectations (harness)"),
    (REPORT_JSON, "the verdicts, summary and timeline (harness)"),
    (JUNIT, "the checklist as a JUnit suite (harness)"),
    (
        TIMELINE,
        "the checklist's per-second timeline, joined records (harness)",
    ),
    (SUMMARY_MD, "the checklist as Markdown (report)"),
    (REPORT_HTML, "the self-contained HTML report (report)"),
    (CHART_TRAFFIC, "chart 1, traffic per second (report)"),
    (CHART_REQUESTS, "chart 2, where the requests are (report)"),
    (CHART_LATENCY, "chart 3, latency per second (report)"),
    (CHART_MEMORY, "chart 4, gateway memory (report)"),
    (
        CHART_RETRY_AFTER,
        "chart 5, Retry-After against drain time (report)",
    ),
    (
        CHART_DISTRIBUTION,
        "chart 6, end-to-end latency distribution (report)",
    ),
];

/// Writes `bytes` to `path` whole or not at all: into a temporary file in
/// the same directory (`<name>.tmp`), flushed to disk, then renamed over
/// `path`. A reader sees the old file or the new one, never half of one,
/// even if the process is killed or the machine loses power mid-way. On an
/// error the temporary file is removed.
///
/// A `path` that exists and is not a regular file or a directory (a
/// device such as `/dev/null` or `/dev/stdout`, a FIFO) is written to in
/// place: renaming over it would replace the device with a file, and a
/// run as root given `--junit /dev/null` would leave the machine without
/// one.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("wire-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join(wire::files::LOAD_SUMMARY);
/// wire::files::write_atomic(&path, b"{}")?;
/// assert_eq!(std::fs::read(&path)?, b"{}");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::metadata(path) {
        let kind = meta.file_type();
        if !kind.is_file() && !kind.is_dir() {
            return std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut f| f.write_all(bytes));
        }
    }
    let tmp = temporary(path)?;
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename is durable once the directory is flushed too. Where a
    // directory cannot be opened or flushed, the file is whole anyway.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// `dir/name` → `dir/name.tmp`: the same directory, so the rename stays on
/// one file system and is atomic.
fn temporary(path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut tmp = name.to_os_string();
    tmp.push(".tmp");
    Ok(path.with_file_name(tmp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wire-files-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A FIFO stands for any special file (`/dev/null` above all): it is
    /// written to, and stays what it was.
    #[test]
    fn a_special_file_is_written_in_place_not_replaced() {
        use std::os::unix::fs::FileTypeExt as _;
        let d = dir("fifo");
        let p = d.join("fifo");
        let _ = std::fs::remove_file(&p);
        let made = std::process::Command::new("mkfifo").arg(&p).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || std::fs::read(p).unwrap())
        };
        write_atomic(&p, b"<testsuites/>").unwrap();
        assert_eq!(reader.join().unwrap(), b"<testsuites/>");
        let kind = std::fs::metadata(&p).unwrap().file_type();
        assert!(kind.is_fifo(), "the FIFO was replaced by a {kind:?}");
        assert!(!d.join("fifo.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn writes_whole_and_leaves_no_temporary() {
        let d = dir("whole");
        let p = d.join(REPORT_JSON);
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        assert!(!d.join("report.json.tmp").exists());
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [REPORT_JSON]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let d = dir("fail");
        let p = d.join(RUN);
        write_atomic(&p, b"old").unwrap();
        // A directory in the way of the rename: the rename fails.
        let blocked = d.join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        assert!(write_atomic(&blocked, b"new").is_err());
        assert!(!d.join("blocked.tmp").exists());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(write_atomic(Path::new("/"), b"x").is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_name_is_listed_once() {
        let mut names: Vec<_> = ALL.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for (name, what) in ALL {
            assert!(!name.contains('/') && !what.is_empty(), "{name}");
        }
    }
}
