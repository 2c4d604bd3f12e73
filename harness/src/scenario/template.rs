//! A config's template: its fields, their defaults and what they mean,
//! written once, as commented TOML kept beside the config's type
//! ([`fake_provider::ProviderConfig::TEMPLATE`],
//! [`loadgen::LoadConfig::TEMPLATE`],
//! [`reference_gateway::GatewayConfig::TEMPLATE`],
//! [`assertions::Thresholds::TEMPLATE`], and the scenario's own
//! `[scenario]` and `[gateway]` tables in `scenario.toml`). Each type's
//! documentation shows its template; `rehearse init` writes its scenario
//! from them.
//!
//! A template's lines, below the config's root (`[latency]` is
//! `[provider.latency]` in a scenario):
//! - `[table]  # what it is`, or `[[table]]`; commented out (`# [table]`)
//!   when there is none by default, and then every line below it is too;
//! - `key = value  # what it is`: a field at its default;
//! - `# key = value  # what it is`: a field with no default (none, or a
//!   value to give), with an example;
//! - blank lines between tables.
//!
//! A field with a default is written at it, even under a commented table;
//! the tests read every template back and hold each line to its type.

/// A template read into its tables.
#[derive(Debug)]
pub(crate) struct Template<'a> {
    /// The tables in order; the first is the root (no header), maybe with
    /// no keys.
    pub(crate) blocks: Vec<Block<'a>>,
}

/// One table of a template.
#[derive(Debug)]
pub(crate) struct Block<'a> {
    /// Its header; `None` for the config's root.
    pub(crate) header: Option<Header<'a>>,
    /// Its fields, in order.
    pub(crate) keys: Vec<Key<'a>>,
}

/// A table's header line.
#[derive(Debug)]
pub(crate) struct Header<'a> {
    /// The table's dotted path below the config's root.
    pub(crate) path: &'a str,
    /// `[[path]]`: an array of tables.
    pub(crate) array: bool,
    /// What the table is.
    pub(crate) says: &'a str,
    /// There is none of it by default.
    pub(crate) commented: bool,
}

/// A field's line.
#[derive(Debug)]
pub(crate) struct Key<'a> {
    /// The key as written (a quoted key keeps its quotes).
    pub(crate) name: &'a str,
    /// Its default, or an example when commented out.
    pub(crate) value: &'a str,
    /// What it is.
    pub(crate) says: &'a str,
    /// Commented out.
    pub(crate) commented: bool,
}

impl<'a> Template<'a> {
    /// Reads a template; a line that is neither a header nor a field is
    /// an error naming it.
    pub(crate) fn parse(text: &'a str) -> Result<Template<'a>, String> {
        let mut blocks = vec![Block {
            header: None,
            keys: Vec::new(),
        }];
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            let (commented, body) = match line.strip_prefix("# ") {
                Some(body) => (true, body),
                None => (false, line),
            };
            let (content, says) = body.split_once("  # ").unwrap_or((body, ""));
            if let Some(path) = content.strip_prefix('[') {
                let array = path.starts_with('[');
                let path = path
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .trim_end_matches(']');
                blocks.push(Block {
                    header: Some(Header {
                        path,
                        array,
                        says,
                        commented,
                    }),
                    keys: Vec::new(),
                });
            } else if let Some((name, value)) = content.split_once(" = ") {
                let block = blocks
                    .last_mut()
                    .expect("the root block is there from the start");
                block.keys.push(Key {
                    name,
                    value,
                    says,
                    commented,
                });
            } else {
                return Err(format!(
                    "line {}: `{line}` is neither `[table]` nor `key = value`",
                    n + 1
                ));
            }
        }
        Ok(Template { blocks })
    }

    /// The table at `path` (`""`: the root).
    pub(crate) fn block(&self, path: &str) -> Option<&Block<'a>> {
        self.blocks
            .iter()
            .find(|b| b.header.as_ref().map_or("", |h| h.path) == path)
    }
}

impl Block<'_> {
    /// The table's path below the config's root (`""`: the root).
    pub(crate) fn path(&self) -> &str {
        self.header.as_ref().map_or("", |h| h.path)
    }

    /// There is none of this table by default.
    pub(crate) fn commented(&self) -> bool {
        self.header.as_ref().is_some_and(|h| h.commented)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde::Serialize;

    /// Holds a template to its type `T` (the config it describes):
    /// written with every line uncommented, it reads as a `T`; and each
    /// line, taken out, shows what it is. A line whose removal changes
    /// nothing is a default (written so, unless its table is commented
    /// out); one whose removal leaves a field with no value (serialised as
    /// nothing or null) is no default (commented out, with an example);
    /// one whose removal fails to read is a value to give (commented out).
    /// Anything else is a default the template has wrong. Tables with no
    /// keys (the scenario template's places for the other configs) are
    /// left out, and so are the keys in `skip`.
    pub(crate) fn check<T>(name: &str, text: &str, skip: &[&str])
    where
        T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
    {
        let template = Template::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines: Vec<(&Block, Option<&Key>)> = template
            .blocks
            .iter()
            .filter(|b| !b.keys.is_empty())
            .flat_map(|b| {
                std::iter::once((b, None)).chain(
                    b.keys
                        .iter()
                        .filter(|k| !skip.contains(&k.name))
                        .map(move |k| (b, Some(k))),
                )
            })
            .collect();
        let write = |without: Option<usize>| {
            let mut out = String::new();
            for (i, (b, k)) in lines.iter().enumerate() {
                match (k, &b.header) {
                    (None, None) => {}
                    (None, Some(h)) if h.array => out.push_str(&format!("[[{}]]\n", h.path)),
                    (None, Some(h)) => out.push_str(&format!("[{}]\n", h.path)),
                    (Some(_), _) if Some(i) == without => {}
                    (Some(k), _) => out.push_str(&format!("{} = {}\n", k.name, k.value)),
                }
            }
            out
        };
        let full: T = toml::from_str(&write(None))
            .unwrap_or_else(|e| panic!("{name}, every line uncommented: {e}\n{}", write(None)));
        for (i, (b, k)) in lines.iter().enumerate() {
            let Some(k) = k else { continue };
            let at = format!("{name}: [{}] {}", b.path(), k.name);
            let may_be_written = !k.commented || b.commented();
            match toml::from_str::<T>(&write(Some(i))) {
                Err(_) => assert!(k.commented, "{at} must be given: comment it out"),
                Ok(t) if t == full => {
                    assert!(may_be_written, "{at} is the default: write it uncommented")
                }
                Ok(t) => {
                    let value = serde_json::to_value(&t).unwrap();
                    let key: toml::Table = toml::from_str(&format!("{} = 0", k.name)).unwrap();
                    let key = key.keys().next().unwrap();
                    let mut table = &value;
                    for part in b.path().split('.').filter(|p| !p.is_empty()) {
                        table = &table[part];
                        if table.is_array() {
                            table = &table[0];
                        }
                    }
                    assert!(
                        table[key.as_str()].is_null(),
                        "{at} = {} is not its default, {}",
                        k.value,
                        table[key.as_str()]
                    );
                    assert!(k.commented, "{at} has no default: comment it out");
                }
            }
        }
    }

    #[test]
    fn a_template_reads_into_tables_and_keys() {
        let t = Template::parse(
            "a = 1  # one\n# b = \"x  y\"  # two\n\n# [[c]]  # cs\n# d = { e = 1 }  # dee\n",
        )
        .unwrap();
        assert_eq!(t.blocks.len(), 2);
        let root = t.block("").unwrap();
        assert_eq!((root.keys[0].name, root.keys[0].value), ("a", "1"));
        assert!(root.keys[1].commented && root.keys[1].value == "\"x  y\"");
        let c = t.block("c").unwrap();
        assert!(c.commented() && c.header.as_ref().unwrap().array);
        assert_eq!((c.keys[0].value, c.keys[0].says), ("{ e = 1 }", "dee"));
        assert!(Template::parse("a\n").unwrap_err().contains("line 1"));
    }

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default = "three")]
        a: u32,
        b: Option<u32>,
        c: u32,
    }

    fn three() -> u32 {
        3
    }

    #[test]
    fn a_wrong_default_or_a_misplaced_comment_fails_the_check() {
        let good = "a = 3  # a\n# b = 1  # b\n# c = 2  # c\n";
        check::<Config>("good", good, &[]);
        for bad in [
            "a = 4  # a\n# b = 1  # b\n# c = 2  # c\n",
            "# a = 3  # a\n# b = 1  # b\n# c = 2  # c\n",
            "a = 3  # a\nb = 1  # b\n# c = 2  # c\n",
            "a = 3  # a\n# b = 1  # b\nc = 2  # c\n",
        ] {
            let failed = std::panic::catch_unwind(|| check::<Config>("bad", bad, &[]));
            assert!(failed.is_err(), "{bad}");
        }
    }
}
