//! The shape of the workspace, checked: what a review found wrong once and
//! must not come back. Each test reads the source tree; none runs anything.
//!
//! - no two crates export public types of the same name;
//! - no import cycle between the files of a crate;
//! - the binary (`src/`) stays the CLI alone: under 1,200 lines;
//! - ARCHITECTURE.md lists every run-directory file of `wire::files`, with
//!   its one writer and its readers, and names no file that is not one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crates: (name, folder), the binary included.
fn crates() -> Vec<(String, PathBuf)> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let doc: toml::Table = toml::from_str(&manifest).unwrap();
    let members = doc["workspace"]["members"].as_array().unwrap();
    let mut out = vec![("rehearse".to_string(), root())];
    for m in members {
        let m = m.as_str().unwrap();
        out.push((m.to_string(), root().join(m)));
    }
    out
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A file's text without its unit tests (`#[cfg(test)]` to the end of the
/// item) and without comments: what the crate itself is made of.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut skipping_from: Option<usize> = None;
    let mut depth = 0i64;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(start_depth) = skipping_from {
            depth += brace_delta(line);
            if depth <= start_depth as i64 {
                skipping_from = None;
            }
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test {
            pending_cfg_test = false;
            if t.starts_with("mod ") || t.starts_with("pub mod ") || t.starts_with("use ") {
                if t.ends_with(';') {
                    continue;
                }
                let start = depth;
                depth += brace_delta(line);
                if depth > start {
                    skipping_from = Some(start as usize);
                }
                continue;
            }
        }
        if t.starts_with("//") {
            continue;
        }
        depth += brace_delta(line);
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn brace_delta(line: &str) -> i64 {
    // Braces inside string literals are rare in these files' item lines and
    // balanced where they occur; a comment's braces are ignored.
    let line = line.split("//").next().unwrap_or("");
    line.matches('{').count() as i64 - line.matches('}').count() as i64
}

#[test]
fn no_two_crates_export_public_types_of_the_same_name() {
    let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, dir) in crates() {
        for file in rust_files(&dir.join("src")) {
            // The binary's folder holds the other crates' folders: only
            // its own src/ counts for it.
            if name == "rehearse" && !file.starts_with(root().join("src")) {
                continue;
            }
            for line in code(&file).lines() {
                let t = line.trim_start();
                if let Some(rest) = public_type(t) {
                    let ident: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    owners.entry(ident).or_default().insert(name.clone());
                }
            }
        }
    }
    let clashes: Vec<String> = owners
        .iter()
        .filter(|(_, crates)| crates.len() > 1)
        .map(|(ty, crates)| format!("{ty}: {crates:?}"))
        .collect();
    assert!(
        clashes.is_empty(),
        "public types of one name in several crates (rename one): {clashes:#?}"
    );
}

/// The rest of a line that declares a public type (`pub struct Name…` →
/// `Name…`), if it is one.
fn public_type(line: &str) -> Option<&str> {
    ["struct", "enum", "trait", "type", "union"]
        .iter()
        .find_map(|kind| line.strip_prefix(&format!("pub {kind} ")))
}

/// The module path of a file inside its crate's src/ (`run/steps.rs` →
/// `["run", "steps"]`; lib.rs, main.rs → `[]`; `x/mod.rs` → `["x"]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        parts.pop();
    }
    parts
}

#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    let mut cycles = Vec::new();
    for (name, dir) in crates() {
        let src = dir.join("src");
        let files: Vec<PathBuf> = rust_files(&src)
            .into_iter()
            .filter(|f| !f.starts_with(src.join("bin")))
            .collect();
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .map(|f| (module_path(&src, f), f.clone()))
            .collect();
        // Edges: file → the file of each `crate::a::b` it names (the longest
        // module prefix that is a file), except its own descendants: a
        // parent using its children is the module tree, not an import.
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (m, f) in &modules {
            let text = code(f);
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + 7..];
                let name = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("");
                let mut path: Vec<String> = name
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                // `crate::judge(..)` calls a function at the crate root
                // (a module of the same name may exist): the last segment
                // of a call or a macro is an item, never a module.
                if rest[name.len()..].starts_with(['(', '!']) {
                    path.pop();
                }
                let target = (0..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains_key(p));
                if let Some(t) = target {
                    if t != *m && !t.starts_with(m) {
                        edges.entry(m.clone()).or_default().insert(t);
                    }
                }
            }
        }
        for (a, targets) in &edges {
            for b in targets {
                if reaches(&edges, b, a) {
                    cycles.push(format!("{name}: {} <-> {}", a.join("::"), b.join("::")));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

fn reaches(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    from: &[String],
    to: &[String],
) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_vec()];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n.clone()) {
            if let Some(next) = edges.get(&n) {
                stack.extend(next.iter().cloned());
            }
        }
    }
    false
}

#[test]
fn the_binary_is_the_cli_alone() {
    let total: usize = rust_files(&root().join("src"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum();
    assert!(
        total < 1_200,
        "src/ holds {total} lines: the engine belongs in harness/ and report/"
    );
}

#[test]
fn architecture_md_lists_every_run_directory_file_with_its_writer() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("## The run directory")
        .nth(1)
        .expect("ARCHITECTURE.md has a section `## The run directory`");
    let section = section.split("\n## ").next().unwrap_or(section);
    // Rows of the table: | `name` | writer | readers | what |
    let mut listed = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert!(
            cells.len() >= 3,
            "a row names file, writer, readers: {line}"
        );
        let name = cells[0].trim_matches('`').to_string();
        assert!(!cells[1].is_empty(), "{name} has no writer");
        assert!(
            !cells[1].contains(','),
            "{name} has more than one writer: {}",
            cells[1]
        );
        assert!(!cells[2].is_empty(), "{name}: say who reads it (or `none`)");
        listed.insert(name, cells[1].to_string());
    }
    let constants: BTreeSet<String> = wire::files::ALL
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    let listed_names: BTreeSet<String> = listed.keys().cloned().collect();
    let missing: Vec<_> = constants.difference(&listed_names).collect();
    let extra: Vec<_> = listed_names.difference(&constants).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ARCHITECTURE.md and wire::files disagree: not listed {missing:?}, not a constant {extra:?}"
    );
}
