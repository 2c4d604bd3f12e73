//! `--set dotted.key=value`: edits of a scenario's document before it is
//! read, so an override is validated, and located, like the rest of the
//! file; the comments and lines around a value replaced are kept.

use toml_located::ConfigError;

use super::ScenarioError;

/// Applies `dotted.key=value` edits to a TOML text. The value is read as a
/// TOML value when it parses as one (`8`, `true`, `"x"`, `{ a = 1 }`), else
/// as a bare string (`naive`).
pub fn apply_sets(text: &str, sets: &[String]) -> Result<String, ScenarioError> {
    if sets.is_empty() {
        return Ok(text.to_string());
    }
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = e
            .span()
            .map(|s| toml_located::line_col(text, s.start))
            .unwrap_or((0, 0));
        ScenarioError::Config(ConfigError {
            origin: "scenario".into(),
            line,
            column,
            field: String::new(),
            message: e.message().to_string(),
        })
    })?;
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .ok_or_else(|| ScenarioError::BadSet(set.clone()))?;
        let parts: Vec<&str> = key.trim().split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(ScenarioError::BadSet(set.clone()));
        }
        let value: toml_edit::Value = value
            .trim()
            .parse()
            .unwrap_or_else(|_| toml_edit::Value::from(value.trim()));
        let several = doc.get("providers").is_some_and(|p| p.is_array_of_tables());
        if parts[0] == "providers" && !several {
            let rest = parts.get(2..).unwrap_or_default().join(".");
            return Err(ScenarioError::BadSet(format!(
                "{set} (the scenario has no [[providers]]: its one provider is [provider], provider.{rest})"
            )));
        }
        let last = parts[parts.len() - 1];
        let table = table_of_set(doc.as_table_mut(), &parts[..parts.len() - 1], set)?;
        match table.get_mut(last) {
            // A value already written is replaced in place: the comments
            // around its key stay, so errors keep the file's line numbers.
            Some(toml_edit::Item::Value(old)) => {
                let decor = old.decor().clone();
                *old = value;
                *old.decor_mut() = decor;
            }
            _ => {
                table.insert(last, toml_edit::Item::Value(value));
            }
        }
    }
    Ok(doc.to_string())
}

/// The table `path` names in `root`, made when missing, for `--set`
/// `set`. An array of tables is entered by its elements' `name`: in
/// `providers.east.quota.tokens_per_minute`, `east` is the
/// `[[providers]]` element whose `name = "east"`.
fn table_of_set<'d>(
    root: &'d mut dyn toml_edit::TableLike,
    path: &[&str],
    set: &str,
) -> Result<&'d mut dyn toml_edit::TableLike, ScenarioError> {
    let mut table = root;
    let mut i = 0;
    while let Some(part) = path.get(i) {
        if table.get(part).is_none() {
            table.insert(part, toml_edit::Item::Table(toml_edit::Table::new()));
        }
        let item = table
            .get_mut(part)
            .ok_or_else(|| ScenarioError::BadSet(set.to_string()))?;
        if item.is_array_of_tables() {
            let Some(array) = item.as_array_of_tables_mut() else {
                unreachable!("just asked");
            };
            let name = path.get(i + 1).ok_or_else(|| {
                ScenarioError::BadSet(format!(
                    "{set} ({part}: name one of its elements, {part}.NAME.field)"
                ))
            })?;
            let named = |t: &toml_edit::Table| t.get("name").and_then(|v| v.as_str()) == Some(name);
            let names: Vec<String> = array
                .iter()
                .filter_map(|t| t.get("name").and_then(|v| v.as_str()).map(str::to_string))
                .collect();
            table = array.iter_mut().find(|t| named(t)).ok_or_else(|| {
                ScenarioError::BadSet(format!(
                    "{set} (no element of {part} is named {name:?}: {})",
                    names.join(", ")
                ))
            })?;
            i += 2;
        } else {
            table = item
                .as_table_like_mut()
                .ok_or_else(|| ScenarioError::BadSet(format!("{set} ({part} is not a table)")))?;
            i += 1;
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{GatewayKind, TEST_SCENARIO as MINIMAL};

    fn parse(text: &str) -> Result<crate::Scenario, ScenarioError> {
        crate::Scenario::from_str(text, "s.toml", std::path::Path::new("s.toml"))
    }

    #[test]
    fn sets_edit_the_document() {
        let out = apply_sets(
            MINIMAL,
            &[
                "gateway.reference.mode=naive".into(),
                "scenario.time_scale=10".into(),
                "checklist.drain.within=\"5s\"".into(),
            ],
        )
        .unwrap();
        let s = parse(&out).unwrap();
        match &s.gateway.kind {
            GatewayKind::Reference(c) => assert_eq!(c.mode, reference_gateway::Mode::Naive),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.meta.time_scale, 10.0);
        let doc: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(doc["checklist"]["drain"]["within"].as_str(), Some("5s"));
        assert!(matches!(
            apply_sets(MINIMAL, &["nonsense".into()]),
            Err(ScenarioError::BadSet(_))
        ));
    }

    #[test]
    fn a_set_keeps_the_comments_and_lines_around_the_value_it_replaces() {
        let text = MINIMAL.replace(
            "mode = \"bounded\"",
            "# the policy\n# in two lines\nmode = \"bounded\" # as shipped",
        );
        let out = apply_sets(&text, &["gateway.reference.mode=naive".into()]).unwrap();
        assert_eq!(
            out,
            text.replace("mode = \"bounded\"", "mode = \"naive\""),
            "only the value changes"
        );
        let out = apply_sets(
            &text,
            &[
                "gateway.reference.bounded.queue=4".into(),
                "load.seed=3".into(),
            ],
        )
        .unwrap();
        assert!(out.contains("# the policy\n# in two lines\nmode = \"bounded\" # as shipped"));
        assert!(out.contains("queue = 4"), "{out}");
    }
}
