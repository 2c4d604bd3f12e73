//! The run directory: every file a run leaves, written whole through a
//! temporary name, or read back record by record.

use std::path::Path;

use crate::error::RunError;

/// Writes a whole file through a temporary name and a rename
/// ([`wire::files::write_atomic`]), so a reader never sees half of it.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    wire::files::write_atomic(path, bytes)
        .map_err(|e| RunError::Invalid(format!("cannot write {}: {e}", path.display())))
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
