//! Reading a recorded traffic log into rows to replay: a timestamp, and
//! optionally a prompt size, a completion bound, `stream` and `model`. The
//! log is CSV with a header row or JSON lines, its columns either ours
//! (`timestamp`, `prompt_tokens`, `max_tokens`, `stream`, `model`), mapped
//! by `columns`, or those of a public trace read as it is published
//! (Mooncake, BurstGPT, Azure's LLM inference traces, Alibaba's Bailian).
//! A bad row is an error naming the file, line and column; a log out of
//! time order, or whose numeric timestamps span more than two days in the
//! unit given (a ms log read as seconds), is an error too.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::format_description::BorrowedFormatItem;
use time::{OffsetDateTime, PrimitiveDateTime};
use toml_located::ConfigError;

/// The format of a replay log: ours (`csv`, `jsonl`, columns by name) or
/// a public trace's, each with its own columns and timestamp unit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReplayFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// The Mooncake trace: JSONL, `timestamp` in ms since the first
    /// request, `input_length`, `output_length` (`hash_ids` unread).
    Mooncake,
    /// BurstGPT: CSV, `Timestamp` in s, `Model`, `Request tokens`,
    /// `Response tokens` (0: a failed request), `Total tokens`, `Log Type`.
    Burstgpt,
    /// Azure's LLM inference traces: CSV, `TIMESTAMP` a UTC datetime such
    /// as `2023-11-16 18:15:46.6805900`, `ContextTokens`, `GeneratedTokens`.
    Azure,
    /// Alibaba's Bailian traces: JSONL, `timestamp` in s, `input_length`,
    /// `output_length` (`chat_id`, `parent_chat_id`, `turn` unread).
    Bailian,
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

    /// The name written in a scenario.
    pub fn name(self) -> &'static str {
        match self {
            ReplayFormat::Csv => "csv",
            ReplayFormat::Jsonl => "jsonl",
            ReplayFormat::Mooncake => "mooncake",
            ReplayFormat::Burstgpt => "burstgpt",
            ReplayFormat::Azure => "azure",
            ReplayFormat::Bailian => "bailian",
        }
    }

    /// Whether the log is CSV (else JSON lines).
    fn is_csv(self) -> bool {
        matches!(
            self,
            ReplayFormat::Csv | ReplayFormat::Burstgpt | ReplayFormat::Azure
        )
    }

    /// A public trace's own columns (timestamp, prompt, completion,
    /// model) and unit; `None` for ours.
    fn trace_columns(self) -> Option<([&'static str; 3], Option<&'static str>, TimestampUnit)> {
        use ReplayFormat::*;
        match self {
            Csv | Jsonl => None,
            Mooncake => Some((
                ["timestamp", "input_length", "output_length"],
                None,
                TimestampUnit::Ms,
            )),
            Burstgpt => Some((
                ["Timestamp", "Request tokens", "Response tokens"],
                Some("Model"),
                TimestampUnit::S,
            )),
            // Datetimes: the unit only reads a bare number.
            Azure => Some((
                ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
                None,
                TimestampUnit::S,
            )),
            Bailian => Some((
                ["timestamp", "input_length", "output_length"],
                None,
                TimestampUnit::S,
            )),
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

impl TimestampUnit {
    fn micros(self) -> f64 {
        match self {
            TimestampUnit::S => 1e6,
            TimestampUnit::Ms => 1e3,
            TimestampUnit::Us => 1.0,
        }
    }

    /// The name written in a scenario.
    pub fn name(self) -> &'static str {
        match self {
            TimestampUnit::S => "s",
            TimestampUnit::Ms => "ms",
            TimestampUnit::Us => "us",
        }
    }

    fn finer(self) -> Option<TimestampUnit> {
        match self {
            TimestampUnit::S => Some(TimestampUnit::Ms),
            TimestampUnit::Ms => Some(TimestampUnit::Us),
            TimestampUnit::Us => None,
        }
    }
}

/// The columns of a `csv` or `jsonl` log, when not ours: each names the
/// log's column read as that field (none: the field's own name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayColumns {
    /// The timestamp column.
    pub timestamp: Option<String>,
    /// The prompt size in tokens.
    pub prompt_tokens: Option<String>,
    /// The completion bound (or the completion's length) in tokens.
    pub max_tokens: Option<String>,
    /// Whether the request streamed.
    pub stream: Option<String>,
    /// The model asked for.
    pub model: Option<String>,
}

/// What becomes of a trace's failed requests (BurstGPT's rows with 0
/// response tokens).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum FailedRows {
    /// Replayed as requests: the provider decides what they get.
    #[default]
    Keep,
    /// Left out of the replay.
    Drop,
}

/// How a log is read: which column is which field, the unit of its
/// numbers, and what to do with failed rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    format: ReplayFormat,
    timestamp: String,
    prompt_tokens: Option<String>,
    max_tokens: Option<String>,
    stream: Option<String>,
    model: Option<String>,
    unit: TimestampUnit,
    /// Columns each row must have; a named format's, or those mapped.
    expected: Vec<String>,
    /// BurstGPT marks failed requests with 0 response tokens.
    marks_failures: bool,
    failed: FailedRows,
}

/// A setting of `[load.replay]` that does not fit: the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LayoutError {
    pub(crate) field: &'static str,
    pub(crate) message: String,
}

impl Layout {
    /// The layout of a log in `format`; for `csv` and `jsonl`, its
    /// timestamp column (`timestamp` unless given here or in `columns`),
    /// other columns mapped by `columns`, and the unit (seconds unless
    /// given). A public trace's format has its own columns and unit, so
    /// giving them is an error, as is dropping failed rows of a format
    /// that marks none.
    pub(crate) fn new(
        format: ReplayFormat,
        timestamp: Option<&str>,
        unit: Option<TimestampUnit>,
        columns: Option<&ReplayColumns>,
        failed: FailedRows,
    ) -> Result<Layout, LayoutError> {
        let err = |field, message: String| LayoutError { field, message };
        if let Some(([ts, prompt, completion], model, own_unit)) = format.trace_columns() {
            let name = format.name();
            let given = [
                ("timestamp", timestamp.is_some()),
                ("unit", unit.is_some()),
                ("columns", columns.is_some()),
            ];
            if let Some((field, _)) = given.iter().find(|(_, g)| *g) {
                return Err(err(
                    field,
                    format!(
                        "format = \"{name}\" has its own columns and unit: leave `{field}` out"
                    ),
                ));
            }
            let mut expected = vec![ts.to_string(), prompt.to_string(), completion.to_string()];
            expected.extend(model.map(String::from));
            let marks_failures = format == ReplayFormat::Burstgpt;
            if failed == FailedRows::Drop && !marks_failures {
                return Err(err(
                    "failed",
                    format!("format = \"{name}\" marks no failed requests; only \"burstgpt\" does"),
                ));
            }
            return Ok(Layout {
                format,
                timestamp: ts.into(),
                prompt_tokens: Some(prompt.into()),
                max_tokens: Some(completion.into()),
                stream: None,
                model: model.map(String::from),
                unit: own_unit,
                expected,
                marks_failures,
                failed,
            });
        }
        if failed == FailedRows::Drop {
            return Err(err(
                "failed",
                format!(
                    "format = \"{}\" marks no failed requests; only \"burstgpt\" does",
                    format.name()
                ),
            ));
        }
        let columns = columns.cloned().unwrap_or_default();
        let timestamp = match (timestamp, columns.timestamp.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "columns",
                    "the timestamp column is named twice (`timestamp` and `columns.timestamp`): keep one".into(),
                ))
            }
            (Some(t), None) | (None, Some(t)) => t.to_string(),
            (None, None) => "timestamp".into(),
        };
        let mut expected = vec![timestamp.clone()];
        let mut column = |mapped: &Option<String>, own: &str| {
            expected.extend(mapped.clone());
            Some(mapped.clone().unwrap_or_else(|| own.to_string()))
        };
        let prompt_tokens = column(&columns.prompt_tokens, "prompt_tokens");
        let max_tokens = column(&columns.max_tokens, "max_tokens");
        let stream = column(&columns.stream, "stream");
        let model = column(&columns.model, "model");
        Ok(Layout {
            format,
            timestamp,
            prompt_tokens,
            max_tokens,
            stream,
            model,
            unit: unit.unwrap_or_default(),
            expected,
            marks_failures: false,
            failed,
        })
    }

    /// What the log was read as, for the plan: the format and, for
    /// numeric timestamps, the unit.
    pub(crate) fn described(&self) -> (&'static str, &'static str) {
        (self.format.name(), self.unit.name())
    }

    /// Whether failed rows were dropped.
    pub(crate) fn drops_failed(&self) -> bool {
        self.failed == FailedRows::Drop
    }

    /// Why a row or header lacking `column` is wrong.
    fn missing(&self, column: &str) -> String {
        match self.format {
            ReplayFormat::Csv | ReplayFormat::Jsonl => format!("no `{column}` column"),
            f => format!(
                "no `{column}` column: format = \"{}\" expects the columns {}",
                f.name(),
                self.expected
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
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

/// A log as read: its rows in time order, and how many of the trace's
/// failed requests were kept among them or dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ReplayLog {
    pub(crate) rows: Vec<ReplayRow>,
    pub(crate) failed: usize,
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

/// A datetime without a zone, as Azure's traces write them (UTC, up to
/// 100 ns digits): `2023-11-16 18:15:46.6805900`, or without a fraction.
/// (Runtime descriptions have no optional part: two of them.)
fn plain_datetime(fraction: bool) -> &'static [BorrowedFormatItem<'static>] {
    type Items = std::sync::OnceLock<Vec<BorrowedFormatItem<'static>>>;
    static WITH: Items = Items::new();
    static WITHOUT: Items = Items::new();
    let whole = "[year]-[month]-[day] [hour]:[minute]:[second]";
    let (cell, text) = if fraction {
        (
            &WITH,
            "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond]",
        )
    } else {
        (&WITHOUT, whole)
    };
    // The descriptions are constants, tested to parse.
    cell.get_or_init(|| time::format_description::parse_borrowed::<1>(text).unwrap_or_default())
}

/// Microseconds since the Unix epoch (or since any origin, for numbers),
/// and whether the cell was a number (read in `unit`).
fn timestamp_us(cell: Cell<'_>, unit: TimestampUnit, field: &str) -> Result<(f64, bool), RowError> {
    let scale = unit.micros();
    let text = match cell {
        Cell::Json(serde_json::Value::Number(n)) => {
            return n
                .as_f64()
                .map(|v| (v * scale, true))
                .ok_or_else(|| row_err(field, "is not a number"))
        }
        Cell::Json(serde_json::Value::String(s)) => s.as_str(),
        Cell::Json(_) => return Err(row_err(field, "must be a number or a time")),
        Cell::Text(s) => s,
    };
    let text = text.trim();
    if let Ok(v) = text.parse::<f64>() {
        if v.is_finite() {
            return Ok((v * scale, true));
        }
    }
    let micros = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1000) as f64;
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok((micros(t), false));
    }
    PrimitiveDateTime::parse(text, plain_datetime(text.contains('.')))
        .map(|t| (micros(t.assume_utc()), false))
        .map_err(|_| {
            row_err(
                field,
                format!(
                    "`{text}` is neither a number, an RFC 3339 time nor a UTC datetime like `2023-11-16 18:15:46.6805900`"
                ),
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

/// A row as built: its time (µs), whether that was a number, the row
/// (its offset still 0), and whether the trace marks it failed.
struct Built {
    t: f64,
    numeric: bool,
    row: ReplayRow,
    failed: bool,
}

struct RowBuilder<'a> {
    layout: &'a Layout,
    models: HashMap<String, Arc<str>>,
}

impl<'a> RowBuilder<'a> {
    /// Builds a row from a lookup of its cells by column name.
    fn build<'c>(&mut self, get: impl Fn(&str) -> Option<Cell<'c>>) -> Result<Built, RowError> {
        let layout: &'a Layout = self.layout;
        if let Some(col) = layout.expected.iter().find(|c| get(c).is_none()) {
            return Err(row_err(col, layout.missing(col)));
        }
        let cell = |name: &'a Option<String>| name.as_deref().and_then(|n| get(n).map(|c| (n, c)));
        let ts = &layout.timestamp;
        let (t, numeric) = timestamp_us(
            get(ts).ok_or_else(|| row_err(ts, layout.missing(ts)))?,
            layout.unit,
            ts,
        )?;
        let mut row = ReplayRow::default();
        if let Some((n, c)) = cell(&layout.prompt_tokens) {
            row.prompt_tokens = count(c, n)?;
        }
        if let Some((n, c)) = cell(&layout.max_tokens) {
            row.max_tokens = count(c, n)?;
        }
        if let Some((n, c)) = cell(&layout.stream) {
            row.stream = flag(c, n)?;
        }
        let model = match cell(&layout.model) {
            Some((_, Cell::Text(s))) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some((_, Cell::Json(serde_json::Value::String(s)))) if !s.is_empty() => Some(s.clone()),
            Some((_, Cell::Json(serde_json::Value::Null))) | Some((_, Cell::Text(_))) | None => {
                None
            }
            Some((n, Cell::Json(_))) => return Err(row_err(n, "must be a string")),
        };
        // Models repeat; keep one allocation per distinct name.
        row.model = model.map(|m| {
            self.models
                .entry(m.clone())
                .or_insert_with(|| Arc::from(m.as_str()))
                .clone()
        });
        let failed = layout.marks_failures && row.max_tokens == Some(0);
        Ok(Built {
            t,
            numeric,
            row,
            failed,
        })
    }
}

/// Parses a replay log read from `origin` as a replay run would, and
/// returns each row's offset from the first. The same parser as
/// `[load.replay]`, public for tools and fuzzing; `timestamp` and `unit`
/// are read for `csv` and `jsonl` only (a trace's format has its own).
pub fn parse_replay_log(
    text: &str,
    origin: &str,
    format: ReplayFormat,
    timestamp: &str,
    unit: TimestampUnit,
) -> Result<Vec<std::time::Duration>, ConfigError> {
    let ours = matches!(format, ReplayFormat::Csv | ReplayFormat::Jsonl);
    let layout = Layout::new(
        format,
        ours.then_some(timestamp),
        ours.then_some(unit),
        None,
        FailedRows::Keep,
    )
    .map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: 0,
        column: 0,
        field: e.field.to_string(),
        message: e.message,
    })?;
    Ok(parse(text, origin, &layout)?
        .rows
        .iter()
        .map(|r| std::time::Duration::from_micros(r.offset_us))
        .collect())
}

/// A span of numeric timestamps longer than this is taken for a unit
/// mistake (a log in ms read as seconds spans a thousand times its length).
const ABSURD_SPAN_US: f64 = 2.0 * 86_400e6;

/// Parses a log read from `origin` as `layout` says; rows come back in
/// the log's order (which must be time order) with offsets from the
/// first row kept.
pub(crate) fn parse(text: &str, origin: &str, layout: &Layout) -> Result<ReplayLog, ConfigError> {
    let located = |line: usize, field: &str, message: String| ConfigError {
        origin: origin.to_string(),
        line,
        column: usize::from(line > 0),
        field: field.to_string(),
        message,
    };
    let mut builder = RowBuilder {
        layout,
        models: HashMap::new(),
    };
    // Each row with its line.
    let mut read: Vec<(usize, Built)> = Vec::new();
    if layout.format.is_csv() {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = reader
            .headers()
            .map_err(|e| located(1, "", format!("bad CSV header: {e}")))?
            .clone();
        if let Some(col) = layout
            .expected
            .iter()
            .find(|c| !headers.iter().any(|h| h == *c))
        {
            return Err(located(
                1,
                col,
                format!("{} in the header row", layout.missing(col)),
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
            let built = builder
                .build(get)
                .map_err(|e| located(line, &e.field, e.message))?;
            read.push((line, built));
        }
    } else {
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
            let built = builder
                .build(|name| obj.get(name).map(Cell::Json))
                .map_err(|e| located(n, &e.field, e.message))?;
            read.push((n, built));
        }
    }
    check_times(&read, layout)
        .map_err(|(line, message)| located(line, &layout.timestamp, message))?;
    let failed = read.iter().filter(|(_, b)| b.failed).count();
    let kept: Vec<Built> = read
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| !(b.failed && layout.failed == FailedRows::Drop))
        .collect();
    let Some(t0) = kept.first().map(|b| b.t) else {
        let why = if failed > 0 {
            format!("the log has no rows left: its {failed} failed rows were dropped")
        } else {
            "the log has no rows".into()
        };
        return Err(located(0, "", why));
    };
    let rows = kept
        .into_iter()
        .map(|b| ReplayRow {
            offset_us: (b.t - t0).round() as u64,
            ..b.row
        })
        .collect();
    Ok(ReplayLog { rows, failed })
}

/// The log must be in time order, and numeric timestamps must not span
/// more than two days: past that, the unit is likely wrong, and the error
/// names the finer unit that gives a span under two days.
fn check_times(read: &[(usize, Built)], layout: &Layout) -> Result<(), (usize, String)> {
    for w in read.windows(2) {
        let ((before, a), (line, b)) = (&w[0], &w[1]);
        if b.t < a.t {
            return Err((
                *line,
                format!(
                    "earlier than line {before}'s: the log must be in time order (sort it by `{}`)",
                    layout.timestamp
                ),
            ));
        }
    }
    let (Some((_, first)), Some((last_line, last))) = (read.first(), read.last()) else {
        return Ok(());
    };
    let span = last.t - first.t;
    // A trace's format has its unit (BurstGPT's spans months in seconds).
    let ours = layout.format.trace_columns().is_none();
    if !ours || span <= ABSURD_SPAN_US || !read.iter().all(|(_, b)| b.numeric) {
        return Ok(());
    }
    let unit = layout.unit;
    let days = |us: f64| us / 86_400e6;
    let mut likely = unit.finer();
    while let Some(u) = likely {
        if span * u.micros() / unit.micros() <= ABSURD_SPAN_US {
            break;
        }
        likely = u.finer();
    }
    let read_as = format!(
        "read in {}, the timestamps span {:.1} days",
        unit.name(),
        days(span)
    );
    Err((
        *last_line,
        match likely {
            Some(u) => format!(
                "{read_as}: likely {} (set unit = \"{}\"; a log truly this long can give RFC 3339 times)",
                u.name(),
                u.name()
            ),
            None => format!("{read_as}, even as microseconds: is `{}` a time?", layout.timestamp),
        },
    ))
}

/// What a replay log held as read (log time, before `speedup` and
/// `multiply`), for `rehearse plan`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRead {
    /// The format read (`csv`, `mooncake`, ...).
    pub format: &'static str,
    /// The unit numeric timestamps were read in (a datetime needs none).
    pub unit: &'static str,
    /// Rows replayed.
    pub rows: usize,
    /// The trace's failed requests (BurstGPT's 0 response tokens).
    pub failed: usize,
    /// Whether those were dropped (else they are among `rows`).
    pub failed_dropped: bool,
    /// From the first row to the last.
    pub span: std::time::Duration,
    /// Rows in each minute of the log, from its first row.
    pub per_minute: Vec<u32>,
    /// The prompt sizes the log gives: p50 and p99, tokens.
    pub prompt_tokens: Option<(u32, u32)>,
    /// The completion bounds the log gives: p50 and p99, tokens.
    pub max_tokens: Option<(u32, u32)>,
    /// The `speedup` set.
    pub speedup: f64,
    /// The `multiply` set.
    pub multiply: f64,
    offsets_us: Arc<[u64]>,
}

impl ReplayRead {
    /// The most requests in one minute of the run, were the log played
    /// `times` over by `multiply` (copies at the log's own pace: a minute
    /// is a minute) or by `speedup` (a minute of the run holds `times`
    /// minutes of the log).
    pub fn peak_per_minute(&self, times: f64, by_speedup: bool) -> f64 {
        if !(times.is_finite() && times > 0.0) {
            return 0.0;
        }
        // Minutes of the run from the first row, in log time.
        let (window_us, copies) = if by_speedup {
            (60e6 * times, 1.0)
        } else {
            (60e6, times)
        };
        let mut counts: Vec<u32> = Vec::new();
        for &t in self.offsets_us.iter() {
            let k = (t as f64 / window_us) as usize;
            if counts.len() <= k {
                counts.resize(k + 1, 0);
            }
            counts[k] += 1;
        }
        counts.iter().copied().max().unwrap_or(0) as f64 * copies
    }
}

/// The p50 and p99 of the values given, if any.
fn p50_p99(mut values: Vec<u32>) -> Option<(u32, u32)> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.99)))
}

/// What `rows` hold, read by `layout` with `failed` failed requests.
pub(crate) fn summary(
    rows: &[ReplayRow],
    layout: &Layout,
    failed: usize,
    speedup: f64,
    multiply: f64,
) -> ReplayRead {
    let last = rows.iter().map(|r| r.offset_us).max().unwrap_or(0);
    let mut per_minute = vec![0u32; (last / 60_000_000) as usize + 1];
    for r in rows {
        per_minute[(r.offset_us / 60_000_000) as usize] += 1;
    }
    let (format, unit) = layout.described();
    ReplayRead {
        format,
        unit,
        rows: rows.len(),
        failed,
        failed_dropped: layout.drops_failed(),
        span: std::time::Duration::from_micros(last),
        per_minute,
        prompt_tokens: p50_p99(rows.iter().filter_map(|r| r.prompt_tokens).collect()),
        max_tokens: p50_p99(rows.iter().filter_map(|r| r.max_tokens).collect()),
        speedup,
        multiply,
        offsets_us: rows.iter().map(|r| r.offset_us).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(format: ReplayFormat, timestamp: &str, unit: TimestampUnit) -> Layout {
        Layout::new(format, Some(timestamp), Some(unit), None, FailedRows::Keep).unwrap()
    }

    fn trace(format: ReplayFormat, failed: FailedRows) -> Layout {
        Layout::new(format, None, None, None, failed).unwrap()
    }

    fn csv_s() -> Layout {
        ours(ReplayFormat::Csv, "timestamp", TimestampUnit::S)
    }

    #[test]
    fn csv_with_optional_columns() {
        let text = "timestamp,prompt_tokens,max_tokens,stream,model\n\
                    100.0,,,,\n\
                    100.5,10,20,true,a\n\
                    101,5,6,false,a\n";
        let rows = parse(text, "t.csv", &csv_s()).unwrap().rows;
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
        let layout = ours(ReplayFormat::Jsonl, "ts", TimestampUnit::S);
        let rows = parse(text, "t.jsonl", &layout).unwrap().rows;
        assert_eq!(rows[1].offset_us, 1_500_000);
        let text = "{\"t\": 1000}\n{\"t\": 1250}\n";
        let layout = ours(ReplayFormat::Jsonl, "t", TimestampUnit::Ms);
        let rows = parse(text, "t.jsonl", &layout).unwrap().rows;
        assert_eq!(rows[1].offset_us, 250_000);
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        let text = "timestamp,max_tokens\n1,2\n2,lots\n";
        let e = parse(text, "t.csv", &csv_s()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "max_tokens"), "{e}");
        assert!(e.to_string().starts_with("t.csv:3:"), "{e}");
        let e = parse("when\n1\n", "t.csv", &csv_s()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "timestamp"), "{e}");
        let jsonl = ours(ReplayFormat::Jsonl, "timestamp", TimestampUnit::S);
        let e = parse(
            "{\"timestamp\": 1}\n{\"timestamp\": \"yesterday\"}\n",
            "t.jsonl",
            &jsonl,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "timestamp"), "{e}");
        let e = parse("{\"timestamp\": 1}\n{oops\n", "t.jsonl", &jsonl).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn mooncake_reads_ms_since_the_first_and_ignores_hash_ids() {
        let text = "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [0, 1, 2]}\n\
                    {\"timestamp\": 1500, \"input_length\": 700, \"output_length\": 9, \"hash_ids\": []}\n";
        let log = parse(
            text,
            "m.jsonl",
            &trace(ReplayFormat::Mooncake, FailedRows::Keep),
        )
        .unwrap();
        let r = &log.rows[1];
        assert_eq!(
            (r.offset_us, r.prompt_tokens, r.max_tokens),
            (1_500_000, Some(700), Some(9))
        );
        assert_eq!(log.rows[0].prompt_tokens, Some(6955));
        // A row without its prompt size names the format and its columns.
        let e = parse(
            "{\"timestamp\": 0, \"output_length\": 52}\n",
            "m.jsonl",
            &trace(ReplayFormat::Mooncake, FailedRows::Keep),
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "input_length"), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("format = \"mooncake\"") && text.contains("`output_length`"),
            "{e}"
        );
    }

    #[test]
    fn burstgpt_keeps_or_drops_failed_requests() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    5,ChatGPT,472,18,490,Conversation log\n\
                    45,GPT-4,1087,0,1087,Conversation log\n\
                    47.5,ChatGPT,300,120,420,API log\n";
        let log = parse(
            text,
            "b.csv",
            &trace(ReplayFormat::Burstgpt, FailedRows::Keep),
        )
        .unwrap();
        assert_eq!((log.rows.len(), log.failed), (3, 1));
        let r = &log.rows[1];
        assert_eq!(
            (
                r.offset_us,
                r.prompt_tokens,
                r.max_tokens,
                r.model.as_deref()
            ),
            (40_000_000, Some(1087), Some(0), Some("GPT-4"))
        );
        let log = parse(
            text,
            "b.csv",
            &trace(ReplayFormat::Burstgpt, FailedRows::Drop),
        )
        .unwrap();
        assert_eq!((log.rows.len(), log.failed), (2, 1));
        assert_eq!(log.rows[1].offset_us, 42_500_000);
        // A header without a column the format reads names them all.
        let e = parse(
            "Timestamp,Model,Request tokens,Total tokens\n1,a,2,3\n",
            "b.csv",
            &trace(ReplayFormat::Burstgpt, FailedRows::Keep),
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "Response tokens"), "{e}");
        assert!(e.to_string().contains("format = \"burstgpt\" expects the columns `Timestamp`, `Request tokens`, `Response tokens`, `Model`"), "{e}");
        // A log of failed rows only, all dropped, is empty.
        let e = parse(
            "Timestamp,Model,Request tokens,Response tokens\n1,a,2,0\n",
            "b.csv",
            &trace(ReplayFormat::Burstgpt, FailedRows::Drop),
        )
        .unwrap_err();
        assert!(e.message.contains("1 failed rows were dropped"), "{e}");
    }

    #[test]
    fn azure_reads_datetimes_to_the_microsecond() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:15:46.6805900,374,44\n\
                    2023-11-16 18:15:50.9951690,396,109\n\
                    2023-11-16 18:16:00,879,7\n";
        let log = parse(text, "a.csv", &trace(ReplayFormat::Azure, FailedRows::Keep)).unwrap();
        let offsets: Vec<u64> = log.rows.iter().map(|r| r.offset_us).collect();
        assert_eq!(offsets, [0, 4_314_579, 13_319_410]);
        assert_eq!(
            (log.rows[2].prompt_tokens, log.rows[2].max_tokens),
            (Some(879), Some(7))
        );
        let e = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,2\n16/11/2023 18:15,1,2\n",
            "a.csv",
            &trace(ReplayFormat::Azure, FailedRows::Keep),
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "TIMESTAMP"), "{e}");
    }

    #[test]
    fn bailian_reads_seconds_and_ignores_the_conversation() {
        let text = "{\"chat_id\": 7, \"parent_chat_id\": -1, \"timestamp\": 61.25, \"input_length\": 1200, \"output_length\": 300, \"turn\": 1}\n\
                    {\"chat_id\": 8, \"parent_chat_id\": 7, \"timestamp\": 70.5, \"input_length\": 1600, \"output_length\": 80, \"turn\": 2}\n";
        let log = parse(
            text,
            "b.jsonl",
            &trace(ReplayFormat::Bailian, FailedRows::Keep),
        )
        .unwrap();
        let r = &log.rows[1];
        assert_eq!(
            (r.offset_us, r.prompt_tokens, r.max_tokens, r.model.clone()),
            (9_250_000, Some(1600), Some(80), None)
        );
    }

    #[test]
    fn columns_map_any_log() {
        let columns = ReplayColumns {
            timestamp: Some("arrived".into()),
            prompt_tokens: Some("in".into()),
            max_tokens: Some("out".into()),
            stream: Some("sse".into()),
            model: Some("deployment".into()),
        };
        let layout = Layout::new(
            ReplayFormat::Csv,
            None,
            Some(TimestampUnit::Ms),
            Some(&columns),
            FailedRows::Keep,
        )
        .unwrap();
        let text = "arrived,in,out,sse,deployment,prompt_tokens\n10,5,6,true,gpt-4o,999\n30,7,8,false,,999\n";
        let rows = parse(text, "x.csv", &layout).unwrap().rows;
        let r = &rows[0];
        assert_eq!(
            (r.prompt_tokens, r.max_tokens, r.stream, r.model.as_deref()),
            (Some(5), Some(6), Some(true), Some("gpt-4o"))
        );
        assert_eq!((rows[1].offset_us, rows[1].model.clone()), (20_000, None));
        // A mapped column the log lacks is an error at the header.
        let e = parse("arrived,in\n1,2\n", "x.csv", &layout).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "out"), "{e}");
        // In JSON lines too, only the timestamp mapped.
        let only_time = ReplayColumns {
            timestamp: Some("t".into()),
            ..ReplayColumns::default()
        };
        let layout = Layout::new(
            ReplayFormat::Jsonl,
            None,
            None,
            Some(&only_time),
            FailedRows::Keep,
        )
        .unwrap();
        let rows = parse(
            "{\"t\": 1, \"max_tokens\": 3}\n{\"t\": 2}\n",
            "x.jsonl",
            &layout,
        )
        .unwrap()
        .rows;
        assert_eq!(
            (rows[1].offset_us, rows[0].max_tokens),
            (1_000_000, Some(3))
        );
    }

    #[test]
    fn settings_that_do_not_fit_the_format_are_errors() {
        let err = |format, ts: Option<&str>, unit, columns: Option<&ReplayColumns>, failed| {
            Layout::new(format, ts, unit, columns, failed).unwrap_err()
        };
        let e = err(
            ReplayFormat::Mooncake,
            None,
            Some(TimestampUnit::S),
            None,
            FailedRows::Keep,
        );
        assert_eq!(e.field, "unit");
        assert!(e.message.contains("format = \"mooncake\""), "{e:?}");
        let e = err(
            ReplayFormat::Azure,
            Some("ts"),
            None,
            None,
            FailedRows::Keep,
        );
        assert_eq!(e.field, "timestamp");
        let e = err(ReplayFormat::Bailian, None, None, None, FailedRows::Drop);
        assert_eq!(e.field, "failed");
        let e = err(ReplayFormat::Csv, None, None, None, FailedRows::Drop);
        assert_eq!(e.field, "failed");
        let twice = ReplayColumns {
            timestamp: Some("t".into()),
            ..ReplayColumns::default()
        };
        let e = err(
            ReplayFormat::Csv,
            Some("ts"),
            None,
            Some(&twice),
            FailedRows::Keep,
        );
        assert_eq!(e.field, "columns");
    }

    #[test]
    fn a_log_out_of_time_order_names_the_line() {
        let text = "timestamp\n100.5\n100.0\n101\n";
        let e = parse(text, "t.csv", &csv_s()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "timestamp"), "{e}");
        assert!(e.message.contains("earlier than line 2's"), "{e}");
        let text = "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n\n{\"timestamp\": 1000, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 999, \"input_length\": 1, \"output_length\": 1}\n";
        let e = parse(
            text,
            "m.jsonl",
            &trace(ReplayFormat::Mooncake, FailedRows::Keep),
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
    }

    #[test]
    fn an_absurd_span_names_the_likely_unit() {
        // Ten minutes of epoch milliseconds read as seconds: 6.9 days.
        let text = "timestamp\n1700000000000\n1700000600000\n";
        let e = parse(text, "t.csv", &csv_s()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "timestamp"), "{e}");
        assert!(e.message.contains("likely ms (set unit = \"ms\""), "{e}");
        let ms = ours(ReplayFormat::Csv, "timestamp", TimestampUnit::Ms);
        assert_eq!(
            parse(text, "t.csv", &ms).unwrap().rows[1].offset_us,
            600_000_000
        );
        // Microseconds read as seconds: only us gives a sane span.
        let text = "timestamp\n0\n600000000\n";
        let e = parse(text, "t.csv", &csv_s()).unwrap_err();
        assert!(e.message.contains("likely us"), "{e}");
        // Times carry their own scale; a trace's format its own unit.
        let text = "timestamp\n2026-01-01T00:00:00Z\n2026-01-09T00:00:00Z\n";
        assert_eq!(parse(text, "t.csv", &csv_s()).unwrap().rows.len(), 2);
        let text = "Timestamp,Model,Request tokens,Response tokens\n0,a,1,1\n5000000,a,1,1\n";
        let burst = trace(ReplayFormat::Burstgpt, FailedRows::Keep);
        assert_eq!(parse(text, "b.csv", &burst).unwrap().rows.len(), 2);
    }

    #[test]
    fn what_was_read_and_what_each_scaling_does_to_a_minute() {
        let text = "timestamp,prompt_tokens,max_tokens\n0,10,1\n10,20,2\n50,30,3\n70,40,4\n\
                    120,50,5\n121,60,6\n125,70,7\n130,80,8\n170,1000,9\n";
        let layout = csv_s();
        let log = parse(text, "t.csv", &layout).unwrap();
        let read = summary(&log.rows, &layout, log.failed, 1.0, 10.0);
        assert_eq!((read.format, read.unit, read.rows), ("csv", "s", 9));
        assert_eq!(read.span, std::time::Duration::from_secs(170));
        assert_eq!(read.per_minute, [3, 1, 5]);
        assert_eq!(read.prompt_tokens, Some((50, 1000)));
        assert_eq!(read.max_tokens, Some((5, 9)));
        // Ten copies at the log's pace: its busiest minute ten times over.
        assert_eq!(read.peak_per_minute(10.0, false), 50.0);
        // Twice as fast: a minute of the run holds two of the log.
        assert_eq!(read.peak_per_minute(2.0, true), 5.0);
        // Ten times as fast: the whole log inside one minute.
        assert_eq!(read.peak_per_minute(10.0, true), 9.0);
    }
}
