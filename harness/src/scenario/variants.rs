//! A scenario's variants, for `rehearse compare`: named sets of overrides,
//! each applied to the scenario as `--set` applies one.
//!
//! ```toml
//! [[variants]]
//! name = "unbounded"
//! set = { "gateway.reference.mode" = "naive" }
//!
//! [[variants]]
//! name = "limit 50 + timeout"
//! [variants.set]
//! "gateway.reference.mode" = "bounded"
//! "gateway.reference.upstream_timeout" = "15s"
//! ```
//!
//! `rehearse run`, `plan` and `report` ignore the `[[variants]]` tables.
//! Each variant is validated whole (the scenario with its overrides) before
//! any run starts; an error names the file, the line of the override that
//! caused it, the variant and the field. `--each KEY=V1,V2` makes one
//! variant per value instead, named `KEY=V`.

use std::path::Path;

use toml_located::ConfigError;

use crate::host::Input;
use crate::scenario::{apply_sets, Scenario, ScenarioError};

/// One variant of a scenario: a name, and the overrides that make it from
/// the scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Its name, as written (or `KEY=V` for `--each`).
    pub name: String,
    /// Its overrides as `dotted.key=value`, the form `--set` takes, in the
    /// order written.
    pub sets: Vec<String>,
    /// Where it was written: the line and column of its name and of each
    /// override in the scenario file; `None` for `--each`.
    written: Option<Written>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    name: (usize, usize),
    sets: Vec<(usize, usize)>,
}

/// A bad-input error at `span` of the scenario `text` read from `origin`.
fn located(
    origin: &str,
    text: &str,
    span: Option<std::ops::Range<usize>>,
    field: String,
    message: impl Into<String>,
) -> ScenarioError {
    let (line, column) = span
        .map(|s| toml_located::line_col(text, s.start))
        .unwrap_or((0, 0));
    ScenarioError::Config(ConfigError {
        origin: origin.to_string(),
        line,
        column,
        field,
        message: message.into(),
    })
}

/// How a person adds variants, for the error that finds none.
pub fn how_to_add_variants() -> String {
    format!(
        "add [[variants]] tables, each a `name` and the fields it \
         sets, e.g.\n\n[[variants]]\nname = \"naive\"\nset = {{ \"gateway.reference.mode\" = \"naive\" }}\n\n\
         or give {} KEY=V1,V2,... for one field over plain values",
        Input::Each
    )
}

impl Variant {
    /// The `[[variants]]` of a scenario text read from `origin`, in the
    /// order written (none when it has none). Each needs a `name`, not
    /// empty and not used twice, and may have a `set` table of
    /// `"dotted.key" = value`; nothing else.
    ///
    /// ```
    /// let text = "[[variants]]\nname = \"naive\"\nset = { \"gateway.reference.mode\" = \"naive\" }\n";
    /// let v = harness::Variant::in_text(text, "s.toml").unwrap();
    /// assert_eq!(v[0].sets, ["gateway.reference.mode=\"naive\""]);
    /// ```
    pub fn in_text(text: &str, origin: &str) -> Result<Vec<Variant>, ScenarioError> {
        let doc = toml_edit::Document::parse(text)
            .map_err(|e| located(origin, text, e.span(), String::new(), e.message().trim()))?;
        let Some(item) = doc.as_table().get("variants") else {
            return Ok(Vec::new());
        };
        let key_span = doc.as_table().key("variants").and_then(|k| k.span());
        let Some(tables) = item.as_array_of_tables() else {
            return Err(located(
                origin,
                text,
                key_span,
                "variants".into(),
                "write each variant as a [[variants]] table with a `name` and a `set` table",
            ));
        };
        let mut out: Vec<Variant> = Vec::new();
        for (i, t) in tables.iter().enumerate() {
            let v = Variant::of_table(t, i, text, origin)?;
            if let Some(first) = out.iter().find(|o| o.name == v.name) {
                let line = first.written.as_ref().map_or(0, |w| w.name.0);
                return Err(located(
                    origin,
                    text,
                    t.key("name").and_then(|k| k.span()),
                    format!("variants[{i}].name"),
                    format!("the name \"{}\" is used twice (first on line {line}): names must be distinct", v.name),
                ));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// Element `i` of `[[variants]]`.
    fn of_table(
        t: &toml_edit::Table,
        i: usize,
        text: &str,
        origin: &str,
    ) -> Result<Variant, ScenarioError> {
        let at = |key: &str| t.key(key).and_then(|k| k.span()).or_else(|| t.span());
        let err = |key: &str, field: String, message: String| {
            Err(located(origin, text, at(key), field, message))
        };
        for (key, _) in t.iter() {
            if key != "name" && key != "set" {
                return err(
                    key,
                    format!("variants[{i}].{key}"),
                    format!("unknown field `{key}`, expected `name` or `set` (a variant's overrides go in its `set` table)"),
                );
            }
        }
        let name = match t.get("name").and_then(|n| n.as_str()) {
            Some(n) if !n.trim().is_empty() => n.to_string(),
            Some(_) => return err("name", format!("variants[{i}].name"), "must not be empty".into()),
            None => {
                return err(
                    "name",
                    format!("variants[{i}].name"),
                    "every variant needs a `name` (a string): it names its run directory and its column".into(),
                )
            }
        };
        let name_at = toml_located::line_col(text, at("name").map_or(0, |s| s.start));
        let values = match t.get("set") {
            None => Vec::new(),
            Some(toml_edit::Item::Table(s)) => s.get_values(),
            Some(toml_edit::Item::Value(toml_edit::Value::InlineTable(s))) => s.get_values(),
            Some(_) => {
                return err(
                    "set",
                    format!("variants[{i}].set"),
                    format!("variant \"{name}\": `set` must be a table of \"dotted.key\" = value"),
                )
            }
        };
        let (mut sets, mut places) = (Vec::new(), Vec::new());
        for (keys, value) in values {
            let key: Vec<&str> = keys.iter().map(|k| k.get()).collect();
            let key = key.join(".");
            let span = keys.first().and_then(|k| k.span());
            if key.contains('=') || key.split('.').any(|p| p.trim().is_empty()) {
                return Err(located(
                    origin,
                    text,
                    span,
                    format!("variants[{i}].set"),
                    format!("variant \"{name}\": `{key}` is not a dotted key of the scenario"),
                ));
            }
            let written = value
                .span()
                .and_then(|s| text.get(s))
                .map(str::trim)
                .unwrap_or_default();
            sets.push(format!("{key}={written}"));
            places.push(toml_located::line_col(text, span.map_or(0, |s| s.start)));
        }
        Ok(Variant {
            name,
            sets,
            written: Some(Written {
                name: name_at,
                sets: places,
            }),
        })
    }

    /// The variants of `--each KEY=V1,V2,...`: one per value, named
    /// `KEY=V`, setting KEY to V.
    ///
    /// ```
    /// let v = harness::Variant::each("gateway.reference.mode=naive,bounded").unwrap();
    /// assert_eq!(v[1].name, "gateway.reference.mode=bounded");
    /// assert_eq!(v[1].sets, ["gateway.reference.mode=bounded"]);
    /// ```
    pub fn each(arg: &str) -> Result<Vec<Variant>, ScenarioError> {
        let bad = |message: &str| {
            ScenarioError::Config(ConfigError {
                origin: format!("{} {arg}", Input::Each),
                line: 0,
                column: 0,
                field: String::new(),
                message: message.to_string(),
            })
        };
        let (key, values) = arg
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=V1,V2,..."))?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(|p| p.trim().is_empty()) {
            return Err(bad("expected a dotted key before `=`"));
        }
        let mut out: Vec<Variant> = Vec::new();
        for value in values.split(',').map(str::trim) {
            if value.is_empty() {
                return Err(bad(
                    "a value is empty (a value containing a comma is written as a [[variants]] table instead)",
                ));
            }
            let name = format!("{key}={value}");
            if out.iter().any(|v| v.name == name) {
                return Err(bad(&format!("{value} is given twice")));
            }
            out.push(Variant {
                sets: vec![name.clone()],
                name,
                written: None,
            });
        }
        Ok(out)
    }

    /// This variant's scenario: the text of the file at `path` with the
    /// variant's overrides, then `sets` (the command line's), applied and
    /// validated. An error names the file, the variant and the field, at
    /// the line of the override that caused it.
    pub fn scenario(
        &self,
        text: &str,
        path: &Path,
        sets: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let all: Vec<String> = self.sets.iter().chain(sets).cloned().collect();
        let origin = match &self.written {
            Some(_) => format!("{} (variant \"{}\")", path.display(), self.name),
            None => format!("{} (with {} {})", path.display(), Input::Each, self.name),
        };
        apply_sets(text, &all)
            .and_then(|edited| Scenario::from_str(&edited, &origin, path))
            .map_err(|e| self.locate(e, text, path))
    }

    /// An error in this variant's scenario, placed in the file: at the
    /// override whose key shares the most of the field's path, else at
    /// the field's own line, else at the variant's name; its message
    /// names the variant. An error of `--each` keeps its place.
    fn locate(&self, e: ScenarioError, text: &str, path: &Path) -> ScenarioError {
        let Some(written) = &self.written else {
            return e;
        };
        // A key that cannot be set is in no table of the file: it has no
        // line of its own to fall back on.
        let (field, message, in_file) = match e {
            ScenarioError::Config(c) => (c.field, c.message, true),
            ScenarioError::BadSet(set) => {
                let key = set.split_once('=').map_or(set.as_str(), |(k, _)| k);
                let message =
                    format!("`{key}` cannot be set: it does not lead into a table of the scenario");
                (key.to_string(), message, false)
            }
            other => return other,
        };
        let segments = |s: &str| -> Vec<String> {
            s.split('.')
                .map(|p| p.split('[').next().unwrap_or(p).trim().to_string())
                .collect()
        };
        let target = segments(&field);
        let best = self
            .sets
            .iter()
            .zip(&written.sets)
            .map(|(set, at)| {
                let key = segments(set.split_once('=').map_or(set.as_str(), |(k, _)| k));
                let common = key.iter().zip(&target).take_while(|(a, b)| a == b).count();
                (common, *at)
            })
            .filter(|&(common, _)| common > 0)
            .max_by_key(|&(common, _)| common)
            .map(|(_, at)| at);
        let own_line = || {
            toml_located::locate(text, &field)
                .filter(|_| in_file)
                .map(|s| toml_located::line_col(text, s.start))
        };
        let (line, column) = best.or_else(own_line).unwrap_or(written.name);
        ScenarioError::Config(ConfigError {
            origin: path.display().to_string(),
            line,
            column,
            field,
            message: format!("in variant \"{}\": {message}", self.name),
        })
    }
}

/// A directory name for each variant: its name with every character but
/// letters, digits, `.`, `_` and `-` made `-` (runs of them one), no `.` or
/// `-` at either end, at most 60 characters, `variant` if nothing is left;
/// a name already taken gets `-2`, `-3`, ...
pub fn dir_names(variants: &[Variant]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in variants {
        let mut name = String::new();
        for c in v.name.chars() {
            let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            };
            if !(c == '-' && name.ends_with('-')) {
                name.push(c);
            }
        }
        let mut name: String = name
            .trim_matches(|c| c == '-' || c == '.')
            .chars()
            .take(60)
            .collect();
        if name.is_empty() {
            name = "variant".into();
        }
        let mut unique = name.clone();
        let mut n = 2;
        while out.iter().any(|o| o.eq_ignore_ascii_case(&unique)) {
            unique = format!("{name}-{n}");
            n += 1;
        }
        out.push(unique);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::scenario::TEST_SCENARIO as BASE;

    fn with(variants: &str) -> String {
        format!("{BASE}\n{variants}")
    }

    fn err(text: &str) -> String {
        Variant::in_text(text, "s.toml").unwrap_err().to_string()
    }

    /// The line `needle` is on in `text`.
    fn line_of(text: &str, needle: &str) -> usize {
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn variants_are_read_in_both_forms_and_ignored_by_a_run() {
        let text = with(
            r#"[[variants]]
name = "unbounded"
set = { "gateway.reference.mode" = "naive" }

[[variants]]
name = "limit 4 + budget"
[variants.set]
"gateway.reference.bounded" = { concurrency = 4, queue = 2, wait_budget = "1s" }
"load.seed" = 7
gateway.memory_ceiling = "32MiB"
"#,
        );
        let v = Variant::in_text(&text, "s.toml").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "unbounded");
        assert_eq!(v[0].sets, ["gateway.reference.mode=\"naive\""]);
        assert_eq!(
            v[1].sets,
            [
                "gateway.reference.bounded={ concurrency = 4, queue = 2, wait_budget = \"1s\" }",
                "load.seed=7",
                "gateway.memory_ceiling=\"32MiB\""
            ]
        );
        // The file as written still runs, its variants ignored.
        let path = Path::new("s.toml");
        let s = Scenario::from_str(&text, "s.toml", path).unwrap();
        assert_eq!(s.gateway.memory_ceiling, Some(64 << 20));
        let naive = v[0].scenario(&text, path, &[]).unwrap();
        match &naive.gateway.kind {
            crate::GatewayKind::Reference(c) => {
                assert_eq!(c.mode, reference_gateway::Mode::Naive)
            }
            other => panic!("{other:?}"),
        }
        let limited = v[1].scenario(&text, path, &[]).unwrap();
        assert_eq!(limited.gateway.memory_ceiling, Some(32 << 20));
        // The command line's --set comes after the variant's.
        let s = v[1]
            .scenario(&text, path, &["gateway.memory_ceiling=\"16MiB\"".into()])
            .unwrap();
        assert_eq!(s.gateway.memory_ceiling, Some(16 << 20));
        assert!(Variant::in_text(BASE, "s.toml").unwrap().is_empty());
    }

    #[test]
    fn a_bad_value_names_the_file_the_variant_line_the_variant_and_the_field() {
        let text = with(
            r#"[[variants]]
name = "fine"

[[variants]]
name = "fancy"
set = { "gateway.reference.mode" = "fancy" }
"#,
        );
        let v = Variant::in_text(&text, "s.toml").unwrap();
        assert!(v[0].scenario(&text, Path::new("s.toml"), &[]).is_ok());
        let e = v[1]
            .scenario(&text, Path::new("s.toml"), &[])
            .unwrap_err()
            .to_string();
        let line = line_of(&text, "\"fancy\" }");
        assert!(e.starts_with(&format!("s.toml:{line}:")), "{e}");
        assert!(e.contains("field `gateway.reference.mode`"), "{e}");
        assert!(e.contains("in variant \"fancy\""), "{e}");
        assert!(e.contains("fancy"), "{e}");
    }

    #[test]
    fn a_bad_key_is_placed_at_its_override() {
        let text = with(
            r#"[[variants]]
name = "typo"
[variants.set]
"gateway.reference.mode" = "bounded"
"gateway.reference.concurency" = 8
"#,
        );
        let v = Variant::in_text(&text, "s.toml").unwrap();
        let e = v[0]
            .scenario(&text, Path::new("s.toml"), &[])
            .unwrap_err()
            .to_string();
        let line = line_of(&text, "concurency");
        assert!(e.starts_with(&format!("s.toml:{line}:")), "{e}");
        assert!(
            e.contains("concurency") && e.contains("variant \"typo\""),
            "{e}"
        );
        // A key that leads through a value.
        let text = with("[[variants]]\nname = \"x\"\nset = { \"scenario.name.x\" = 1 }\n");
        let v = Variant::in_text(&text, "s.toml").unwrap();
        let e = v[0]
            .scenario(&text, Path::new("s.toml"), &[])
            .unwrap_err()
            .to_string();
        let line = line_of(&text, "scenario.name.x");
        assert!(e.starts_with(&format!("s.toml:{line}:")), "{e}");
        assert!(
            e.contains("cannot be set") && e.contains("variant \"x\""),
            "{e}"
        );
    }

    #[test]
    fn names_must_be_given_distinct_and_not_empty() {
        let e = err(&with("[[variants]]\nset = { \"load.seed\" = 1 }\n"));
        assert!(
            e.contains("variants[0].name") && e.contains("needs a `name`"),
            "{e}"
        );
        let text = with("[[variants]]\nname = \"  \"\n");
        let e = err(&text);
        assert!(
            e.starts_with(&format!("s.toml:{}:", line_of(&text, "\"  \""))),
            "{e}"
        );
        assert!(e.contains("must not be empty"), "{e}");
        let text = with(
            "[[variants]]\nname = \"a\"\n[[variants]]\nname = \"b\"\n[[variants]]\nname = \"a\"\n",
        );
        let e = err(&text);
        let first = line_of(&text, "name = \"a\"");
        assert!(
            e.contains(&format!("used twice (first on line {first})")),
            "{e}"
        );
        assert!(e.contains("variants[2].name"), "{e}");
        let e = err(&with("[[variants]]\nname = \"a\"\nsets = { x = 1 }\n"));
        assert!(e.contains("unknown field `sets`"), "{e}");
        let e = err(&with("[[variants]]\nname = \"a\"\nset = 3\n"));
        assert!(e.contains("must be a table"), "{e}");
        let e = err(&format!("variants = 3\n{BASE}"));
        assert!(e.contains("[[variants]] table"), "{e}");
    }

    #[test]
    fn each_makes_one_variant_per_value() {
        let v = Variant::each("gateway.reference.mode=naive, bounded,aimd").unwrap();
        let names: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gateway.reference.mode=naive",
                "gateway.reference.mode=bounded",
                "gateway.reference.mode=aimd"
            ]
        );
        assert_eq!(v[1].sets, ["gateway.reference.mode=bounded"]);
        let s = v[0].scenario(BASE, Path::new("s.toml"), &[]).unwrap();
        assert!(
            matches!(&s.gateway.kind, crate::GatewayKind::Reference(c) if c.mode == reference_gateway::Mode::Naive)
        );
        for bad in ["nokey", "=a,b", "k=a,,b", "k=a,a", "k.=a"] {
            let e = Variant::each(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("each {bad}: ")), "{e}");
        }
        assert!(Variant::each("k=a,,b")
            .unwrap_err()
            .to_string()
            .contains("[[variants]]"));
        // An error of --each is the edited scenario's, as --set's.
        let v = Variant::each("gateway.reference.mode=fancy").unwrap();
        let e = v[0]
            .scenario(BASE, Path::new("s.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml (with each gateway.reference.mode=fancy):8:"),
            "{e}"
        );
    }

    #[test]
    fn directory_names_are_safe_and_distinct() {
        let v = |name: &str| Variant {
            name: name.into(),
            sets: Vec::new(),
            written: None,
        };
        let names = dir_names(&[
            v("limit 50 + timeout"),
            v("gateway.reference.mode=naive"),
            v("../../etc"),
            v("Limit 50 + timeout"),
            v("///"),
            v("..."),
            v(&"x".repeat(100)),
        ]);
        assert_eq!(
            names,
            [
                "limit-50-timeout",
                "gateway.reference.mode-naive",
                "etc",
                "Limit-50-timeout-2",
                "variant",
                "variant-2",
                "x".repeat(60).as_str()
            ]
        );
    }
}
