//! The shape of the workspace, checked: what a review found wrong once and
//! must not come back. Each test reads the source tree; none runs anything.
//!
//! - no two crates export public types of the same name;
//! - no import cycle between the files of a crate, its root included (a
//!   root that calls its modules and is named by them is in a circle);
//! - the binary (`src/`) stays the CLI alone: under 1,200 lines;
//! - ARCHITECTURE.md lists every run-directory file of `wire::files`, with
//!   its one writer and its readers, and names no file that is not one;
//! - every lib.rs and mod.rs names each module it declares, and
//!   ARCHITECTURE.md names every folder of every crate (and no other).

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

type Edges = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// The import graph of the crate whose sources are under `src` (its
/// `src/bin` left out): an edge from a file to each file whose items it
/// names, by `crate::`, `self::` or `super::` paths, in `use` lines and in
/// code alike.
///
/// - A parent's uses of its descendants are the module tree, not imports,
///   except at the crate root: the root's uses of its modules' items are
///   edges, bare paths too (`checks::f(..)`, `use checks::{..}`), since a
///   root with code of its own is a file like any other. Its `mod` lines
///   and its `pub use` re-exports are not edges.
/// - A file naming an item defined at the crate root (`crate::G`) has an
///   edge to the root; one naming an item the root re-exports has an edge
///   to the file that defines it.
fn import_graph(src: &Path) -> Edges {
    let files: Vec<PathBuf> = rust_files(src)
        .into_iter()
        .filter(|f| !f.starts_with(src.join("bin")))
        .collect();
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_path(src, f), f.clone()))
        .collect();
    let root_text = modules
        .get(&Vec::new())
        .map(|f| without_strings(&code(f)))
        .unwrap_or_default();
    let (root_code, reexports) = without_reexports(&root_text);
    // Nor are its `mod` lines.
    let root_code: String = root_code
        .lines()
        .filter(|l| !is_mod_line(l))
        .flat_map(|l| [l, "\n"])
        .collect();
    // The root's own modules, which it names bare.
    let children: BTreeSet<String> = modules
        .keys()
        .filter(|m| m.len() == 1)
        .map(|m| m[0].clone())
        .collect();
    let mut edges = Edges::new();
    // The root naming what it re-exports (`pub use judge::Judge;` and then
    // `Judge::new(..)`) uses that module's item.
    for (name, from) in &reexports {
        if words(&root_code).contains(name.as_str()) {
            let target = file_of(&modules, from);
            if !target.is_empty() {
                edges.entry(Vec::new()).or_default().insert(target);
            }
        }
    }
    for (m, f) in &modules {
        let text = if m.is_empty() {
            root_code.clone()
        } else {
            without_strings(&code(f))
        };
        let bare = if m.is_empty() {
            &children
        } else {
            &BTreeSet::new()
        };
        for Named { path, called, .. } in named_paths(&text, m, bare) {
            // `crate::judge(..)` calls a function at the crate root (a
            // module of the same name may exist): the last segment of a
            // call or a macro is an item, never a module.
            let modules_part = &path[..path.len() - usize::from(called && !path.is_empty())];
            let mut target = file_of(&modules, modules_part);
            if target.is_empty() {
                if let Some(from) = path.first().and_then(|name| reexports.get(name)) {
                    target = file_of(&modules, from);
                }
            }
            let own_descendant = !m.is_empty() && target.starts_with(m);
            if target != *m && !own_descendant {
                edges.entry(m.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// `text` with the insides of its string literals left out (`"a::b"` and
/// `r#"a::b"#` → `""`), so that words in messages name nothing. A `'"'`
/// is a char, not a quote.
fn without_strings(text: &str) -> String {
    split_strings(text).0
}

/// `text` with the insides of its string literals left out, as
/// [`without_strings`] gives it, and those insides, in order (escapes
/// left as written).
fn split_strings(text: &str) -> (String, Vec<String>) {
    let mut literals = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' && chars.get(i + 1) == Some(&'"') && chars.get(i + 2) == Some(&'\'') {
            out.push_str("'\"'");
            i += 3;
            continue;
        }
        if c != '"' {
            out.push(c);
            i += 1;
            continue;
        }
        // A raw string's hashes, if `r#..#` (or `br#..#`) comes before.
        let mut k = i;
        while k > 0 && chars[k - 1] == '#' {
            k -= 1;
        }
        let hashes = i - k;
        let raw = k > 0
            && chars[k - 1] == 'r'
            && (k < 2
                || !is_ident(chars[k - 2])
                || (chars[k - 2] == 'b' && (k < 3 || !is_ident(chars[k - 3]))));
        out.push('"');
        i += 1;
        let mut literal = String::new();
        while i < chars.len() {
            if !raw && chars[i] == '\\' {
                literal.extend(chars.get(i..i + 2).unwrap_or_default());
                i += 2;
                continue;
            }
            if chars[i] == '"'
                && chars[i + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&h| h == '#')
                    .count()
                    == hashes
            {
                i += 1 + hashes;
                break;
            }
            literal.push(chars[i]);
            i += 1;
        }
        literals.push(literal);
        out.push('"');
        out.extend(std::iter::repeat_n('#', if raw { hashes } else { 0 }));
    }
    (out, literals)
}

/// Returns true if and only if `line` declares a module in a file of its
/// own (`mod a;`, `pub(crate) mod a;`).
fn is_mod_line(line: &str) -> bool {
    let mut t = line.trim();
    if let Some(rest) = t.strip_prefix("pub") {
        t = rest.trim_start();
        if t.starts_with('(') {
            t = t.split_once(')').map_or("", |(_, r)| r).trim_start();
        }
    }
    t.strip_prefix("mod ")
        .is_some_and(|rest| rest.trim_end().ends_with(';'))
}

/// The file of the longest module prefix of `path` (the root's if none).
fn file_of(modules: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
        .unwrap_or_default()
}

/// The identifiers of `text` that are not the tail of a path (`a::x`) or
/// a field or method (`.x`).
fn words(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        if !is_ident(c) {
            i += c.len_utf8();
            continue;
        }
        let len: usize = text[i..]
            .chars()
            .take_while(|&c| is_ident(c))
            .map(char::len_utf8)
            .sum();
        let before = text[..i].trim_end();
        if !before.ends_with("::") && !before.ends_with('.') {
            out.insert(&text[i..i + len]);
        }
        i += len;
    }
    out
}

/// A crate root's text without its re-exports (`pub use`, `pub(crate)
/// use` statements), and what they re-export: name → the module path it
/// comes from (a glob re-exports nothing nameable).
fn without_reexports(text: &str) -> (String, BTreeMap<String, Vec<String>>) {
    let mut out = String::new();
    let mut names = BTreeMap::new();
    let mut rest = text;
    while let Some(at) = find_reexport(rest) {
        out.push_str(&rest[..at]);
        let stmt_start = at + rest[at..].find("use").unwrap_or(0) + 3;
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e + 1);
        for named in use_tree(&rest[stmt_start..end], Vec::new()) {
            if let Some((name, from)) = named.path.split_last() {
                if name != "*" {
                    names.insert(named.alias.unwrap_or_else(|| name.clone()), from.to_vec());
                }
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    (out, names)
}

/// Where the next `pub use` / `pub(..) use` statement starts.
fn find_reexport(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("pub") {
        let at = from + i;
        let starts_word = at == 0 || !is_ident(text[..at].chars().next_back().unwrap_or(' '));
        let mut after = text[at + 3..].trim_start();
        if after.starts_with('(') {
            after = after.split_once(')').map_or("", |(_, r)| r).trim_start();
        }
        if starts_word && after.starts_with("use ") {
            return Some(at);
        }
        from = at + 3;
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path `text` (the code of the file of module `m`) names by
/// `crate::`, `self::`, `super::`, or bare from a name of `bare`, as a path
/// from the crate root, each with whether its last segment is called
/// (`f(`, `m!`).
fn named_paths(text: &str, m: &[String], bare: &BTreeSet<String>) -> Vec<Named> {
    let inline = inline_modules(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        let boundary = i == 0 || {
            let p = text[..i].chars().next_back().unwrap_or(' ');
            !is_ident(p) && p != ':'
        };
        if !boundary || !is_ident(c) {
            i += c.len_utf8();
            continue;
        }
        let word: String = text[i..].chars().take_while(|&c| is_ident(c)).collect();
        let after = &text[i + word.len()..];
        if !after.starts_with("::") {
            i += word.len();
            continue;
        }
        // The module this text is in: the file's, or an inline module's.
        let here: Vec<String> = m
            .iter()
            .cloned()
            .chain(
                inline
                    .iter()
                    .filter(|(_, range)| range.contains(&i))
                    .map(|(name, _)| name.clone()),
            )
            .collect();
        let prefix = match word.as_str() {
            "crate" => Some((Vec::new(), after)),
            "self" => Some((here.clone(), after)),
            "super" => {
                let mut at = here.clone();
                let mut rest = after;
                at.pop();
                while let Some(r) = rest.strip_prefix("::super") {
                    at.pop();
                    rest = r;
                }
                Some((at, rest))
            }
            w if bare.contains(w) => Some((vec![w.to_string()], after)),
            _ => None,
        };
        if let Some((prefix, rest)) = prefix {
            let rest = rest.strip_prefix("::").unwrap_or(rest);
            out.extend(use_tree(rest, prefix));
        }
        i += word.len();
    }
    out
}

/// The inline modules of a file's code (`mod shapes { .. }`): name and
/// the byte range of their body.
fn inline_modules(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("mod ") {
        if at > 0 && is_ident(text[..at].chars().next_back().unwrap_or(' ')) {
            continue;
        }
        let rest = &text[at + 4..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        let mut depth = 0;
        for (k, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((name.clone(), open..open + k));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A path as a file names it.
struct Named {
    /// From the crate root (or an external crate's name first).
    path: Vec<String>,
    /// Its last segment is called (`f(`, `m!`, not `!=`): an item.
    called: bool,
    /// What a `use` renames it to (`as x`).
    alias: Option<String>,
}

/// The paths a use tree or an expression path names, each under `prefix`
/// (`a::{b, c::d as e}` → `a::b`, `a::c::d` renamed `e`; `a::{self}` →
/// `a`).
fn use_tree(text: &str, prefix: Vec<String>) -> Vec<Named> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    tree_at(&chars, &mut i, prefix, &mut out);
    out
}

fn tree_at(s: &[char], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Named>) {
    let skip_ws = |i: &mut usize| {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_ws(i);
        if *i < s.len() && s[*i] == '{' {
            *i += 1;
            loop {
                skip_ws(i);
                if *i >= s.len() || s[*i] == '}' {
                    *i += 1;
                    return;
                }
                tree_at(s, i, path.clone(), out);
                // Past a rename (`as x`) to the next item.
                while *i < s.len() && s[*i] != ',' && s[*i] != '}' {
                    *i += 1;
                }
                if *i < s.len() && s[*i] == ',' {
                    *i += 1;
                }
            }
        }
        if *i < s.len() && s[*i] == '*' {
            *i += 1;
            path.push("*".to_string());
            out.push(Named {
                path,
                called: false,
                alias: None,
            });
            return;
        }
        let start = *i;
        while *i < s.len() && is_ident(s[*i]) {
            *i += 1;
        }
        let ident: String = s[start..*i].iter().collect();
        if ident.is_empty() {
            out.push(Named {
                path,
                called: false,
                alias: None,
            });
            return;
        }
        if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
            *i += 2;
            if ident != "self" {
                path.push(ident);
            }
            continue;
        }
        if ident != "self" {
            path.push(ident);
        }
        let mut k = *i;
        while k < s.len() && s[k].is_whitespace() {
            k += 1;
        }
        let called =
            s.get(k) == Some(&'(') || (s.get(k) == Some(&'!') && s.get(k + 1) != Some(&'='));
        // A rename (`a::b as c`): named `c` from here on.
        let rest: String = s[k..].iter().take(64).collect();
        let alias = rest
            .strip_prefix("as")
            .filter(|r| r.starts_with(char::is_whitespace))
            .map(|r| {
                r.trim_start()
                    .chars()
                    .take_while(|&c| is_ident(c))
                    .collect::<String>()
            });
        out.push(Named {
            path,
            called,
            alias,
        });
        return;
    }
}

/// Every import cycle of the crate under `src`, each edge on one as
/// `a <-> b` (the root is `crate`).
fn import_cycles(src: &Path) -> Vec<String> {
    let edges = import_graph(src);
    let name = |m: &[String]| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut cycles = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if reaches(&edges, b, a) {
                cycles.push(format!("{} <-> {}", name(a), name(b)));
            }
        }
    }
    cycles
}

#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    let mut cycles = Vec::new();
    for (name, dir) in crates() {
        for c in import_cycles(&dir.join("src")) {
            cycles.push(format!("{name}: {c}"));
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

/// The detector itself, on small crates written for it: a cycle through
/// the root is seen, whichever way the root names its module, and a
/// crate whose root only declares and re-exports is not one.
#[test]
fn a_cycle_through_a_crate_root_is_seen() {
    let dir = std::env::temp_dir().join(format!("rehearse-architecture-{}", std::process::id()));
    let src = dir.join("src");
    let write = |files: &[(&str, &str)]| {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&src).unwrap();
        for (name, text) in files {
            std::fs::write(src.join(name), text).unwrap();
        }
        import_cycles(&src)
    };
    // The root calls a's function; a reads the root's constant.
    let a = ("a.rs", "pub fn f() -> u32 {\n    crate::G\n}\n");
    for root in [
        "mod a;\npub const G: u32 = 1;\npub fn run() -> u32 {\n    a::f()\n}\n",
        "mod a;\nuse a::{f};\npub const G: u32 = 1;\npub fn run() -> u32 {\n    f()\n}\n",
        "mod a;\nuse self::a::f;\npub const G: u32 = 1;\npub fn run() -> u32 {\n    f()\n}\n",
        "mod a;\npub const G: u32 = 1;\npub fn run() -> u32 {\n    crate::a::f()\n}\n",
    ] {
        assert_eq!(
            write(&[("lib.rs", root), a]),
            ["crate <-> a", "a <-> crate"],
            "{root}"
        );
    }
    // `super::G` from a file under the root is the root's too.
    let a_super = ("a.rs", "pub fn f() -> u32 {\n    super::G\n}\n");
    let root = "mod a;\npub const G: u32 = 1;\npub fn run() -> u32 {\n    a::f()\n}\n";
    assert_eq!(write(&[("lib.rs", root), a_super]).len(), 2);
    // The root calling what it re-exports.
    let root = "mod a;\npub use a::f;\npub const G: u32 = 1;\npub fn run() -> u32 {\n    f()\n}\n";
    assert_eq!(write(&[("lib.rs", root), a]).len(), 2);
    // The root only declares and re-exports: `mod a;` and `pub use` are
    // not edges, so a may read the root's constant.
    let root = "mod a;\npub use a::f;\npub const G: u32 = 1;\n";
    assert_eq!(write(&[("lib.rs", root), a]), Vec::<String>::new());
    // Nor are words in a string, or a renamed re-export's old name.
    let root = "mod a;\npub use a::f as g;\npub const G: u32 = 1;\npub const HOW: &str = \"a::f() or f()\";\nfn f() {}\n";
    assert_eq!(write(&[("lib.rs", root), a]), Vec::<String>::new());
    // The constant in b, re-exported by the root: a's `crate::G` is b's,
    // and the root calling a is no cycle.
    let root = "mod a;\nmod b;\npub use b::G;\npub fn run() -> u32 {\n    a::f()\n}\n";
    let b = ("b.rs", "pub const G: u32 = 1;\n");
    assert_eq!(write(&[("lib.rs", root), a, b]), Vec::<String>::new());
    // A cycle between two files, as before.
    let a_b = (
        "a.rs",
        "pub fn f() -> u32 {\n    crate::b::g()\n}\npub fn h() {}\n",
    );
    let b_a = (
        "b.rs",
        "use crate::a;\npub fn g() -> u32 {\n    a::h();\n    1\n}\n",
    );
    assert_eq!(
        write(&[("lib.rs", "mod a;\nmod b;\n"), a_b, b_a]),
        ["a <-> b", "b <-> a"]
    );
    let _ = std::fs::remove_dir_all(&dir);
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

/// The string literals of `text` (code, as [`code`] gives it), their
/// escapes left as written.
fn string_literals(text: &str) -> Vec<String> {
    split_strings(text).1
}

/// `--` and a lowercase letter: how the binary's flags are spelled.
fn spells_a_flag(literal: &str) -> bool {
    literal
        .match_indices("--")
        .any(|(at, _)| literal[at + 2..].starts_with(|c: char| c.is_ascii_lowercase()))
}

#[test]
fn no_library_module_of_harness_spells_a_cli_flag() {
    // The library names the inputs (`harness::Input`); the binary spells
    // them (src/host.rs), and builds its own children's command lines.
    let mut found = Vec::new();
    for file in rust_files(&root().join("harness/src")) {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        for literal in string_literals(&code(&file)) {
            if spells_a_flag(&literal) {
                found.push(format!("{}: \"{literal}\"", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "harness spells flags of the binary's (name them with harness::Input, spelled in src/host.rs):\n{}",
        found.join("\n")
    );
    // The scanner finds them where they are.
    let code = "let a = \"pass --allow-remote\"; let b = r#\"x --set\"#; let c = '\"'; let d = \"a -- b\";";
    let flagged: Vec<String> = string_literals(code)
        .into_iter()
        .filter(|l| spells_a_flag(l))
        .collect();
    assert_eq!(flagged, ["pass --allow-remote", "x --set"]);
}

#[test]
fn the_binary_is_the_cli_alone() {
    let total: usize = rust_files(&root().join("src"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum();
    // 1,400 since issue 27: the flags of several providers (`--provider
    // NAME=URL`, `rehearse provider` serving each on its own port); 1,450
    // since issue 45, which moved the CLI's own words out of the library
    // (`compare --help`'s exit codes, the external provider's need of
    // `--target` said in flags); 1,500 since issue 46's `calibrate --rig`
    // and `--rig FILE` of plan and run (the sweep, the file and the
    // warning are harness's: `harness::rig`); 1,600 since issue 45's
    // src/host.rs, the flags that spell the library's inputs and the
    // command lines of the binary's own children, moved out of harness.
    assert!(
        total < 1_600,
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

/// The package sets `autotests = false` and its end-to-end tests are the
/// modules of one binary, tests/main.rs: a file of tests/ it does not
/// list would never be compiled, let alone run.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let main = std::fs::read_to_string(root().join("tests/main.rs")).unwrap();
    let listed: BTreeSet<String> = main
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod "))
        .map(|m| m.trim_end_matches(';').trim().to_string())
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("tests")).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let is_module = (path.extension().is_some_and(|x| x == "rs") && name != "main")
            || path.join("mod.rs").is_file();
        if is_module && !listed.contains(&name) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/main.rs does not list these files of tests/ (add `mod NAME;`): {missing:?}"
    );
}

/// The modules a room file declares (`mod NAME;`, public or not; unit
/// tests, inline or in `tests.rs`, are not a room).
fn declared_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            (name != "tests").then(|| name.to_string())
        })
        .collect()
}

/// Each crate's root and each folder's `mod.rs` (or the file beside a
/// folder, `run.rs` for `run/`) says in its `//!` docs what every module it
/// declares holds: a newcomer reads the room list, not the tree. A module
/// is named when its name appears in backticks in those docs (`name`,
/// `name::Item` or `name.rs`).
#[test]
fn every_room_file_names_every_module_it_declares() {
    let mut missing = Vec::new();
    for (name, dir) in crates() {
        let src = dir.join("src");
        for path in rust_files(&src) {
            let file = path.file_name().unwrap().to_string_lossy().to_string();
            let beside_a_folder = path.with_extension("").is_dir();
            let is_room = file == "lib.rs" || file == "mod.rs" || beside_a_folder;
            if !is_room || path.starts_with(src.join("bin")) || dir == root() && file == "main.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let docs: String = text
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("//!"))
                .collect::<Vec<_>>()
                .join("\n");
            for m in declared_modules(&text) {
                let named = [format!("`{m}`"), format!("`{m}::"), format!("`{m}.rs`")];
                if !named.iter().any(|n| docs.contains(n.as_str())) {
                    let rel = path
                        .strip_prefix(root())
                        .unwrap_or(&path)
                        .display()
                        .to_string();
                    missing.push(format!("{name}: {rel} does not name `{m}`"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "rooms not named:\n{}",
        missing.join("\n")
    );
}

/// The detector on a small text: a declared module named in the docs
/// passes, one that is not is found, a test module is not a room.
#[test]
fn declared_modules_are_read_from_the_text() {
    let text = "//! - `a`: the first;\nmod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(declared_modules(text), ["a", "b", "c"]);
}

/// Every folder of a crate's `src/` (a module grown into rooms) is named
/// in ARCHITECTURE.md's "Rooms inside the crates", as `crate/src/folder/`;
/// and every folder named there exists, so the map is the tree.
#[test]
fn architecture_md_names_every_folder_of_every_crate() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = text
        .find("## Rooms inside the crates")
        .expect("ARCHITECTURE.md has a section `## Rooms inside the crates`");
    let section = &text[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut folders = BTreeSet::new();
    for (name, dir) in crates() {
        if name == "rehearse" {
            continue;
        }
        for path in rust_files(&dir.join("src")) {
            let parent = path.parent().unwrap();
            if parent != dir.join("src") {
                let rel = parent.strip_prefix(root()).unwrap().display().to_string();
                folders.insert(format!("{rel}/"));
            }
        }
    }
    let missing: Vec<&String> = folders
        .iter()
        .filter(|f| !section.contains(f.as_str()))
        .collect();
    let named: BTreeSet<String> = section
        .split_whitespace()
        .filter(|w| w.contains("/src/") && w.ends_with('/'))
        .map(str::to_string)
        .collect();
    let gone: Vec<&String> = named.difference(&folders).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "ARCHITECTURE.md's rooms and the tree disagree: not named {missing:?}, not a folder {gone:?}"
    );
}
