//! Reading a recorded traffic log (CSV with a header row, or JSON lines) into
//! rows to replay: a timestamp, and optionally `prompt_tokens`, `max_tokens`,
//! `stream` and `model`. A bad row is an error naming the file, line and
//! column.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toml_located::ConfigError;

/// The format of a replay log.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReplayFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl ReplayFormat {
    /// Returns the format named by the file's extension, if it names one.
    pub fn from_path(path: &Path) -> Option<ReplayFormat> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(ReplayFormat::Csv),
            "jsonl" | "ndjson" => Some(ReplayFormat::Jsonl),
            _ => None,
        }
    }
}

/// The unit of numeric timestamps.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TimestampUnit {
    /// Seconds (fractions allowed).
    #[default]
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
}

/// One request of the log, its time made relative to the log's first.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ReplayRow {
    pub(crate) offset_us: u64,
    pub(crate) prompt_tokens: Option<u32>,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) stream: Option<bool>,
    pub(crate) model: Option<Arc<str>>,
}

/// A field of a row, before typing.
enum Cell<'a> {
    Text(&'a str),
    Json(&'a serde_json::Value),
}

struct RowError {
    field: String,
    message: String,
}

fn row_err(field: &str, message: impl Into<String>) -> RowError {
    RowError {
        field: field.into(),
        message: message.into(),
    }
}

/// Microseconds since the Unix epoch (or since any origin, for numbers).
fn timestamp_us(cell: Cell<'_>, unit: TimestampUnit, field: &str) -> Result<f64, RowError> {
    let scale = match unit {
        TimestampUnit::S => 1e6,
        TimestampUnit::Ms => 1e3,
        TimestampUnit::Us => 1.0,
    };
    let text = match cell {
        Cell::Json(serde_json::Value::Number(n)) => {
            return n
                .as_f64()
                .map(|v| v * scale)
                .ok_or_else(|| row_err(field, "is not a number"))
        }
        Cell::Json(serde_json::Value::String(s)) => s.as_str(),
        Cell::Json(_) => return Err(row_err(field, "must be a number or an RFC 3339 time")),
        Cell::Text(s) => s,
    };
    let text = text.trim();
    if let Ok(v) = text.parse::<f64>() {
        if v.is_finite() {
            return Ok(v * scale);
        }
    }
    OffsetDateTime::parse(text, &Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1000) as f64)
        .map_err(|_| {
            row_err(
                field,
                format!("`{text}` is neither a number nor an RFC 3339 time"),
            )
        })
}

fn count(cell: Cell<'_>, field: &str) -> Result<Option<u32>, RowError> {
    let bad = || row_err(field, "must be a whole number >= 0");
    match cell {
        Cell::Json(serde_json::Value::Null) => Ok(None),
        Cell::Json(serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(Some)
            .ok_or_else(bad),
        Cell::Json(_) => Err(bad()),
        Cell::Text(s) if s.trim().is_empty() => Ok(None),
        Cell::Text(s) => s.trim().parse::<u32>().map(Some).map_err(|_| bad()),
    }
}

fn flag(cell: Cell<'_>, field: &str) -> Result<Option<bool>, RowError> {
    let bad = || row_err(field, "must be true or false");
    match cell {
        Cell::Json(serde_json::Value::Null) => Ok(None),
        Cell::Json(serde_json::Value::Bool(b)) => Ok(Some(*b)),
        Cell::Json(_) => Err(bad()),
        Cell::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "true" | "1" | "yes" => Ok(Some(true)),
            "false" | "0" | "no" => Ok(Some(false)),
            _ => Err(bad()),
        },
    }
}

struct RowBuilder<'a> {
    timestamp: &'a str,
    unit: TimestampUnit,
    models: HashMap<String, Arc<str>>,
}

impl RowBuilder<'_> {
    /// Builds a row (with an absolute time in `offset_us` for now) from a
    /// lookup of its cells by column name.
    fn build<'c>(
        &mut self,
        get: impl Fn(&str) -> Option<Cell<'c>>,
    ) -> Result<(f64, ReplayRow), RowError> {
        let ts = get(self.timestamp)
            .ok_or_else(|| row_err(self.timestamp, "the timestamp column is missing"))?;
        let t = timestamp_us(ts, self.unit, self.timestamp)?;
        let mut row = ReplayRow::default();
        if let Some(c) = get("prompt_tokens") {
            row.prompt_tokens = count(c, "prompt_tokens")?;
        }
        if let Some(c) = get("max_tokens") {
            row.max_tokens = count(c, "max_tokens")?;
        }
        if let Some(c) = get("stream") {
            row.stream = flag(c, "stream")?;
        }
        let model = match get("model") {
            Some(Cell::Text(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(Cell::Json(serde_json::Value::String(s))) if !s.is_empty() => Some(s.clone()),
            Some(Cell::Json(serde_json::Value::Null)) | Some(Cell::Text(_)) | None => None,
            Some(Cell::Json(_)) => return Err(row_err("model", "must be a string")),
        };
        // Models repeat; keep one allocation per distinct name.
        row.model = model.map(|m| {
            self.models
                .entry(m.clone())
                .or_insert_with(|| Arc::from(m.as_str()))
                .clone()
        });
        Ok((t, row))
    }
}

/// Parses a replay log read from `origin` as a replay run would, and
/// returns each row's offset from the earliest, in time order. The same
/// parser as `[load.replay]`, public for tools and fuzzing.
pub fn parse_replay_log(
    text: &str,
    origin: &str,
    format: ReplayFormat,
    timestamp: &str,
    unit: TimestampUnit,
) -> Result<Vec<std::time::Duration>, ConfigError> {
    Ok(parse(text, origin, format, timestamp, unit)?
        .iter()
        .map(|r| std::time::Duration::from_micros(r.offset_us))
        .collect())
}

/// Parses a log read from `origin`; rows come back in time order with
/// offsets from the earliest.
pub(crate) fn parse(
    text: &str,
    origin: &str,
    format: ReplayFormat,
    timestamp: &str,
    unit: TimestampUnit,
) -> Result<Vec<ReplayRow>, ConfigError> {
    let located = |line: usize, field: &str, message: String| ConfigError {
        origin: origin.to_string(),
        line,
        column: usize::from(line > 0),
        field: field.to_string(),
        message,
    };
    let mut builder = RowBuilder {
        timestamp,
        unit,
        models: HashMap::new(),
    };
    let mut timed: Vec<(f64, ReplayRow)> = Vec::new();
    match format {
        ReplayFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .trim(csv::Trim::All)
                .from_reader(text.as_bytes());
            let headers = reader
                .headers()
                .map_err(|e| located(1, "", format!("bad CSV header: {e}")))?
                .clone();
            if !headers.iter().any(|h| h == timestamp) {
                return Err(located(
                    1,
                    timestamp,
                    format!("no `{timestamp}` column in the header row"),
                ));
            }
            for rec in reader.records() {
                let rec = rec.map_err(|e| {
                    let line = e.position().map_or(0, |p| p.line() as usize);
                    located(line, "", format!("bad CSV row: {e}"))
                })?;
                let line = rec.position().map_or(0, |p| p.line() as usize);
                let get = |name: &str| {
                    headers
                        .iter()
                        .position(|h| h == name)
                        .and_then(|i| rec.get(i))
                        .map(Cell::Text)
                };
                let row = builder
                    .build(get)
                    .map_err(|e| located(line, &e.field, e.message))?;
                timed.push(row);
            }
        }
        ReplayFormat::Jsonl => {
            for (i, line) in text.lines().enumerate() {
                let n = i + 1;
                if line.trim().is_empty() {
                    continue;
                }
                let value: serde_json::Value = serde_json::from_str(line)
                    .map_err(|e| located(n, "", format!("not a JSON object: {e}")))?;
                let obj = value
                    .as_object()
                    .ok_or_else(|| located(n, "", "not a JSON object".into()))?;
                let row = builder
                    .build(|name| obj.get(name).map(Cell::Json))
                    .map_err(|e| located(n, &e.field, e.message))?;
                timed.push(row);
            }
        }
    }
    if timed.is_empty() {
        return Err(located(0, "", "the log has no rows".into()));
    }
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = timed[0].0;
    Ok(timed
        .into_iter()
        .map(|(t, mut row)| {
            row.offset_us = (t - t0).round() as u64;
            row
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_optional_columns() {
        let text = "timestamp,prompt_tokens,max_tokens,stream,model\n\
                    100.5,10,20,true,a\n\
                    100.0,,,,\n\
                    101,5,6,false,a\n";
        let rows = parse(
            text,
            "t.csv",
            ReplayFormat::Csv,
            "timestamp",
            TimestampUnit::S,
        )
        .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].offset_us, 0);
        assert_eq!(rows[0].prompt_tokens, None);
        assert_eq!(rows[1].offset_us, 500_000);
        assert_eq!(rows[1].stream, Some(true));
        assert_eq!(rows[2].offset_us, 1_000_000);
        assert!(Arc::ptr_eq(
            rows[1].model.as_ref().unwrap(),
            rows[2].model.as_ref().unwrap()
        ));
    }

    #[test]
    fn jsonl_with_rfc3339_and_ms() {
        let text = "{\"ts\": \"2026-01-01T00:00:00Z\"}\n\n{\"ts\": \"2026-01-01T00:00:01.5Z\", \"stream\": true}\n";
        let rows = parse(text, "t.jsonl", ReplayFormat::Jsonl, "ts", TimestampUnit::S).unwrap();
        assert_eq!(rows[1].offset_us, 1_500_000);
        let text = "{\"t\": 1000}\n{\"t\": 1250}\n";
        let rows = parse(text, "t.jsonl", ReplayFormat::Jsonl, "t", TimestampUnit::Ms).unwrap();
        assert_eq!(rows[1].offset_us, 250_000);
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        let text = "timestamp,max_tokens\n1,2\n2,lots\n";
        let e = parse(
            text,
            "t.csv",
            ReplayFormat::Csv,
            "timestamp",
            TimestampUnit::S,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "max_tokens"), "{e}");
        assert!(e.to_string().starts_with("t.csv:3:"), "{e}");
        let e = parse(
            "when\n1\n",
            "t.csv",
            ReplayFormat::Csv,
            "timestamp",
            TimestampUnit::S,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "timestamp"), "{e}");
        let e = parse(
            "{\"timestamp\": 1}\n{\"timestamp\": \"yesterday\"}\n",
            "t.jsonl",
            ReplayFormat::Jsonl,
            "timestamp",
            TimestampUnit::S,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "timestamp"), "{e}");
        let e = parse(
            "{\"timestamp\": 1}\n{oops\n",
            "t.jsonl",
            ReplayFormat::Jsonl,
            "timestamp",
            TimestampUnit::S,
        )
        .unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }
}
