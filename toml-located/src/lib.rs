//! TOML into typed values, with errors a person can act on.
//!
//! Every configuration file of `rehearse` (a scenario, a provider config, a
//! load section) goes through this crate so that a bad input is reported the
//! same way everywhere: the file, the line and column, the dotted field path
//! and what was expected.
//!
//! Two kinds of error are covered:
//! - syntax and type errors found while deserializing ([`from_str`]), where
//!   the field path comes from `serde_path_to_error` and the position from
//!   the TOML parser's span;
//! - semantic errors found later by a validator ("p99 must be above the
//!   median"), which only know the field path: [`Source::error`] finds that
//!   path's line in the original text.
//!
//! ```
//! #[derive(serde::Deserialize, Debug)]
//! #[serde(deny_unknown_fields)]
//! struct Quota { tokens_per_minute: u64 }
//!
//! let err = toml_located::from_str::<Quota>("tokens_per_mintue = 5\n", "quota.toml").unwrap_err();
//! assert_eq!(err.line, 1);
//! assert!(err.to_string().starts_with("quota.toml:1:1:"));
//! ```

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::fmt;
use std::ops::Range;

use serde::de::DeserializeOwned;

/// A configuration error located in its source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the text came from (a file path, or e.g. `--set`).
    pub origin: String,
    /// 1-based line; 0 when the position is unknown.
    pub line: usize,
    /// 1-based column; 0 when the position is unknown.
    pub column: usize,
    /// Dotted path of the field, e.g. `timeline[1].until`; empty for the whole document.
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.origin, self.line, self.column)?;
        } else {
            write!(f, "{}: ", self.origin)?;
        }
        if !self.field.is_empty() {
            write!(f, "field `{}`: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A TOML text together with where it came from, for locating errors.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl<'a> Source<'a> {
    /// Wraps `text`, read from `origin` (usually a file path).
    pub fn new(text: &'a str, origin: &'a str) -> Self {
        Source { text, origin }
    }

    /// Deserializes the whole text into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let de = toml::Deserializer::parse(self.text).map_err(|e| self.toml_error(&e, ""))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = clean_path(&e.path().to_string());
            let inner = e.into_inner();
            self.toml_error(&inner, &path)
        })
    }

    /// An error about the field at `path` (dotted, with `[i]` for array
    /// elements), placed at that field's line when it is present in the text,
    /// else at its nearest present parent.
    pub fn error(&self, path: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = locate(self.text, path)
            .map(|span| line_col(self.text, span.start))
            .unwrap_or((0, 0));
        ConfigError {
            origin: self.origin.to_string(),
            line,
            column,
            field: path.to_string(),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error, path: &str) -> ConfigError {
        let (line, column) = match e.span() {
            Some(span) => line_col(self.text, span.start),
            None => locate(self.text, path)
                .map(|s| line_col(self.text, s.start))
                .unwrap_or((0, 0)),
        };
        // The parser's message is multi-line (it quotes the source); keep the
        // first meaningful sentence, since we print the position ourselves.
        let message = e.message().trim().replace('\n', " ");
        ConfigError {
            origin: self.origin.to_string(),
            line,
            column,
            field: path.to_string(),
            message,
        }
    }
}

/// Deserializes `text` (read from `origin`) into `T`.
pub fn from_str<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, ConfigError> {
    Source::new(text, origin).parse()
}

/// serde_path_to_error prints `?` for a path it could not follow and `.` for
/// the root; neither helps a person.
fn clean_path(path: &str) -> String {
    if path == "." || path == "?" {
        String::new()
    } else {
        path.trim_end_matches(".?").to_string()
    }
}

/// Returns the 1-based line and column of byte offset `at` in `text`.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

enum Segment<'p> {
    Key(&'p str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(end) = rest.find(']') {
            if let Ok(i) = rest[1..end].parse() {
                out.push(Segment::Index(i));
            }
            rest = &rest[end + 1..];
        }
    }
    out
}

/// Returns the byte span of the deepest part of `path` present in `text`.
pub fn locate(text: &str, path: &str) -> Option<Range<usize>> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut node = Node::Table(doc.as_table());
    let mut best: Option<Range<usize>> = None;
    for seg in segments(path) {
        let (span, next) = match (seg, node) {
            (Segment::Key(k), Node::Table(t)) => match t.get(k) {
                Some(item) => (t.key(k).and_then(|k| k.span()), Node::from_item(item)),
                None => break,
            },
            (Segment::Key(k), Node::Value(toml_edit::Value::InlineTable(t))) => match t.get(k) {
                Some(v) => (t.key(k).and_then(|k| k.span()), Node::Value(v)),
                None => break,
            },
            (Segment::Index(i), Node::Value(toml_edit::Value::Array(a))) => match a.get(i) {
                Some(v) => (v.span(), Node::Value(v)),
                None => break,
            },
            (Segment::Index(i), Node::Tables(a)) => match a.get(i) {
                // A `[[table]]` element: point at its first key, the header
                // itself carries no span of its own.
                Some(t) => (
                    t.iter()
                        .next()
                        .and_then(|(k, _)| t.key(k))
                        .and_then(|k| k.span())
                        .or_else(|| t.span()),
                    Node::Table(t),
                ),
                None => break,
            },
            _ => break,
        };
        if span.is_some() {
            best = span;
        }
        node = next;
    }
    best
}

#[derive(Clone, Copy)]
enum Node<'d> {
    Table(&'d toml_edit::Table),
    Tables(&'d toml_edit::ArrayOfTables),
    Value(&'d toml_edit::Value),
    Other,
}

impl<'d> Node<'d> {
    fn from_item(item: &'d toml_edit::Item) -> Self {
        match item {
            toml_edit::Item::Table(t) => Node::Table(t),
            toml_edit::Item::ArrayOfTables(a) => Node::Tables(a),
            toml_edit::Item::Value(v) => Node::Value(v),
            toml_edit::Item::None => Node::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Phase {
        name: String,
        until: u64,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        seed: u64,
        #[serde(default)]
        latency: Option<Latency>,
        #[serde(default)]
        timeline: Vec<Phase>,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Latency {
        ttft: u64,
    }

    #[test]
    fn unknown_field_names_line_and_path() {
        let text = "seed = 1\n\n[latency]\nttft = 3\nttfb = 4\n";
        let err = from_str::<Doc>(text, "p.toml").unwrap_err();
        assert_eq!(err.line, 5, "{err}");
        assert!(err.message.contains("ttfb"), "{err}");
        assert_eq!(err.field, "latency.ttfb", "{err}");
    }

    #[test]
    fn wrong_type_in_array_of_tables() {
        let text = "seed = 1\n[[timeline]]\nname = \"a\"\nuntil = 3\n[[timeline]]\nname = \"b\"\nuntil = \"x\"\n";
        let err = from_str::<Doc>(text, "p.toml").unwrap_err();
        assert_eq!(err.line, 7, "{err}");
        assert_eq!(err.field, "timeline[1].until", "{err}");
    }

    #[test]
    fn syntax_error_has_position() {
        let err = from_str::<Doc>("seed = = 1\n", "p.toml").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.column > 1);
    }

    #[test]
    fn semantic_error_is_located_by_path() {
        let text = "seed = 1\n[[timeline]]\nname = \"a\"\nuntil = 3\n[[timeline]]\nname = \"b\"\nuntil = 9\n";
        let src = Source::new(text, "p.toml");
        let err = src.error("timeline[1].until", "must be after `from`");
        assert_eq!((err.line, err.column), (7, 1), "{err}");
        let err = src.error("timeline[0].name", "duplicate");
        assert_eq!(err.line, 3, "{err}");
        let inline = Source::new("[latency]\nttft = { fixed = 3, other = 4 }\n", "q.toml");
        assert_eq!(inline.error("latency.ttft.other", "x").line, 2);
        assert_eq!(inline.error("latency.ttft", "x").line, 2);
        assert_eq!(inline.error("latency.missing", "x").line, 1);
        assert_eq!(inline.error("nothing.at.all", "x").line, 0);
    }

    #[test]
    fn missing_field_is_reported() {
        let err = from_str::<Doc>("[latency]\nttft = 3\n", "p.toml").unwrap_err();
        assert!(err.message.contains("seed"), "{err}");
    }
}
