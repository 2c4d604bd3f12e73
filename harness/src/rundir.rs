//! The run directory: every file a run leaves, written whole through a
//! temporary name, or read back record by record.

use std::io::Write as _;
use std::path::Path;

use crate::error::RunError;

/// The names of the run directory's files.
pub(crate) mod names {
    pub(crate) const GATEWAY_LOG: &str = "gateway.log";
    pub(crate) const GATEWAY_CONFIG: &str = "gateway.toml";
    pub(crate) const SCENARIO: &str = "scenario.toml";
    pub(crate) const PLAN: &str = "plan.json";
    pub(crate) const RUN: &str = "run.json";
    pub(crate) const CLIENT_RECORDS: &str = "client.jsonl";
    pub(crate) const PROVIDER_RECORDS: &str = "provider.jsonl";
    pub(crate) const RSS_RECORDS: &str = "rss.jsonl";
    pub(crate) const REPORT_JSON: &str = "report.json";
    pub(crate) const JUNIT: &str = "junit.xml";
    pub(crate) const TIMELINE: &str = "timeline.csv";
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let res = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    res.map_err(|e| RunError::Invalid(format!("cannot write {}: {e}", path.display())))
}

/// Reads a file of JSON lines; a missing file is empty. A line that does not
/// parse is bad input, named with its file and line.
pub(crate) fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, RunError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(RunError::BadInput(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(e) => {
                return Err(RunError::BadInput(format!(
                    "{}:{}: not a record: {e}",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(out)
}


/// Writes `records` as JSON lines, whole (see [`write_atomic`]).
pub(crate) fn write_jsonl<T: serde::Serialize>(path: &Path, records: &[T]) -> Result<(), RunError> {
    let mut out = Vec::new();
    for r in records {
        let _ = serde_json::to_writer(&mut out, r);
        out.push(b'\n');
    }
    write_atomic(path, &out)
}
