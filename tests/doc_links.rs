//! The docs cannot rot (issue 43): in README.md, CONTRIBUTING.md,
//! CHANGELOG.md, BENCHMARKS.md, bench/NOTES.md and every page of docs/,
//! every relative link resolves (the file exists, and an `#anchor` into a
//! Markdown file names one of its headings); every `rehearse ...` command
//! line of a shell block (```` ```sh ````) parses with the binary's
//! command line (its subcommands, flags and their values, with `--help`
//! appended, so that nothing runs); and every TOML block marked as a
//! scenario loads through the harness's scenario loader: ```` ```toml
//! scenario ```` a whole scenario, ```` ```toml fragment ```` merged into
//! the built-in scenario first (```` ```toml fragment=PATH ```` into the
//! scenario at PATH). Fast: parsing only, no rehearsal. The check tables
//! are tests/docs.rs's.

use std::path::{Path, PathBuf};

use crate::common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents held, as paths from the repository's root.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = [
        "README.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "BENCHMARKS.md",
        "bench/NOTES.md",
    ]
    .map(String::from)
    .to_vec();
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    assert!(
        pages.iter().any(|p| p == "docs/SUMMARY.md"),
        "docs/ is an mdBook source: it needs SUMMARY.md"
    );
    docs.extend(pages);
    docs
}

fn read(file: &str) -> String {
    let path = root().join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced block: its info string, its first line's number and its text.
struct Block {
    info: String,
    line: usize,
    text: String,
}

/// The fenced blocks of `text`, and its lines outside them (number,
/// line).
fn split_fences(text: &str) -> (Vec<Block>, Vec<(usize, &str)>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::new());
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None if trimmed.starts_with("```") => {
                open = Some(Block {
                    info: trimmed.trim_start_matches('`').trim().to_string(),
                    line: i + 2,
                    text: String::new(),
                })
            }
            None => prose.push((i + 1, line)),
            Some(_) if trimmed.trim_end() == "```" => blocks.extend(open.take()),
            Some(b) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    (blocks, prose)
}

/// A heading's anchor as GitHub and mdBook make it: lower case, letters,
/// digits, `-` and `_` kept, spaces made `-`, the rest dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let (_, prose) = split_fences(text);
    prose
        .iter()
        .filter_map(|(_, l)| l.strip_prefix('#'))
        .map(|h| anchor_of(h.trim_start_matches('#')))
        .collect()
}

/// The targets of the inline links `[text](target)` of a line, outside
/// code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_string());
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// What is wrong with the relative links of `file` (its text `text`):
/// one line per link that does not resolve.
fn broken_links(file: &str, text: &str) -> Vec<String> {
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (n, line) in split_fences(text).1 {
        for target in link_targets(line) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let at = if path.is_empty() {
                root().join(file)
            } else {
                root().join(dir).join(path)
            };
            if !at.exists() {
                broken.push(format!("{file}:{n}: {target}: no such file"));
                continue;
            }
            let Some(anchor) = anchor.filter(|_| at.extension().is_some_and(|e| e == "md")) else {
                continue;
            };
            let heads = anchors(&std::fs::read_to_string(&at).unwrap_or_default());
            if !heads.iter().any(|h| h == anchor) {
                broken.push(format!("{file}:{n}: {target}: no heading #{anchor} there"));
            }
        }
    }
    broken
}

/// The words of a shell line as a shell splits them (quotes, `\`, a `#`
/// comment), cut into commands at `|`, `&`, `;` and before a redirection
/// (`>`, `<`): each command's words.
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    let (mut commands, mut words) = (Vec::new(), Vec::new());
    let (mut word, mut started) = (String::new(), false);
    let mut quote: Option<char> = None;
    let mut redirected = false;
    let mut chars = line.chars();
    fn end_word(word: &mut String, started: &mut bool, words: &mut Vec<String>) {
        if *started {
            words.push(std::mem::take(word));
            *started = false;
        }
    }
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => word.extend(chars.next()),
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => (quote, started) = (Some(c), true),
            (None, '\\') => {
                word.extend(chars.next());
                started = true;
            }
            (None, '#') if !started => break,
            (None, c) if c.is_whitespace() => end_word(&mut word, &mut started, &mut words),
            (None, '|' | '&' | ';' | '>' | '<') => {
                // `2>` and the like: the digit was the redirection's.
                if matches!(c, '>' | '<') && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    started = false;
                }
                end_word(&mut word, &mut started, &mut words);
                if !redirected && !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
                words.clear();
                redirected = matches!(c, '>' | '<');
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    end_word(&mut word, &mut started, &mut words);
    if !redirected && !words.is_empty() {
        commands.push(words);
    }
    commands
}

/// The arguments after `rehearse` of a command's words, when it runs
/// rehearse (`rehearse ...`, or `cargo run --release -- ...` from the
/// repository), its leading `NAME=value` assignments aside. A `$VAR`
/// stands for a value: `$T` a start instant (Unix seconds), any other a
/// URL.
fn rehearse_args(words: &[String]) -> Option<Vec<String>> {
    let words: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .collect();
    let args = match words.as_slice() {
        ["rehearse", args @ ..] => args,
        ["cargo", "run", rest @ ..] => {
            let at = rest.iter().position(|w| *w == "--")?;
            (!rest[..at].contains(&"-p")).then_some(&rest[at + 1..])?
        }
        _ => return None,
    };
    Some(
        args.iter()
            .map(|a| match *a {
                "$T" => "2000000000".to_string(),
                a if a.starts_with('$') => "http://127.0.0.1:9".to_string(),
                a => a.to_string(),
            })
            .collect(),
    )
}

/// Every `rehearse` command line of the shell blocks of `text`: (line
/// number, arguments).
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for block in split_fences(text).0 {
        if !matches!(block.info.as_str(), "sh" | "bash" | "shell" | "console") {
            continue;
        }
        let mut joined = String::new();
        let mut first = 0;
        for (i, line) in block.text.lines().enumerate() {
            if joined.is_empty() {
                first = block.line + i;
            }
            let line = line.trim_start().trim_start_matches("$ ");
            match line.strip_suffix('\\') {
                Some(head) => joined.push_str(head),
                None => {
                    joined.push_str(line);
                    for words in shell_commands(&joined) {
                        out.extend(rehearse_args(&words).map(|a| (first, a)));
                    }
                    joined.clear();
                }
            }
        }
    }
    out
}

/// What the binary says of `args` with `--help` after them: `None` when
/// it prints the help (every subcommand and flag before it parsed), else
/// its error.
fn parse_error(args: &[String]) -> Option<String> {
    let out = common::rehearse()
        .args(args)
        .arg("--help")
        .output()
        .expect("run rehearse");
    (!out.status.success() || out.stdout.is_empty()).then(|| common::text(&out))
}

/// A TOML block's scenario text: the block itself (`scenario`), or the
/// block merged over a base scenario (`fragment`: the built-in one;
/// `fragment=PATH`: the file at PATH). `None` for a block of another kind.
fn scenario_text(info: &str, block: &str) -> Option<Result<String, String>> {
    let mut words = info.split_whitespace();
    if words.next() != Some("toml") {
        return None;
    }
    let kind = words.next()?;
    if kind == "scenario" {
        return Some(Ok(block.to_string()));
    }
    let base = match kind.strip_prefix("fragment") {
        Some("") => harness::BUILTIN_SCENARIO.to_string(),
        Some(path) => read(path.strip_prefix('=')?),
        None => return None,
    };
    let merged = (|| {
        let mut base: toml::Table = base.parse().map_err(|e| format!("the base: {e}"))?;
        let over: toml::Table = block.parse().map_err(|e| format!("{e}"))?;
        if over.contains_key("providers") {
            base.remove("provider");
        }
        merge(&mut base, over);
        toml::to_string(&base).map_err(|e| e.to_string())
    })();
    Some(merged)
}

/// `over` laid over `base`: tables merged key by key, anything else
/// replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// What is wrong with the scenario blocks of `file`: one line per block
/// that does not load, and how many loaded.
fn bad_scenarios(file: &str, text: &str) -> (Vec<String>, usize) {
    let (mut bad, mut loaded) = (Vec::new(), 0);
    for block in split_fences(text).0 {
        let mut origin = format!("{file}:{}", block.line);
        if block.info.contains("fragment") {
            // The loader's line numbers are then the merged text's.
            origin.push_str(", merged into its base");
        }
        match scenario_text(&block.info, &block.text) {
            None => {}
            Some(Err(e)) => bad.push(format!("{origin}: not TOML: {e}")),
            Some(Ok(scenario)) => {
                match harness::Scenario::from_str(&scenario, &origin, &root().join(file)) {
                    Ok(_) => loaded += 1,
                    Err(e) => bad.push(format!("{origin}: {e}")),
                }
            }
        }
    }
    (bad, loaded)
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut links = 0;
    for file in documents() {
        let text = read(&file);
        links += split_fences(&text)
            .1
            .iter()
            .map(|(_, l)| link_targets(l).len())
            .sum::<usize>();
        broken.extend(broken_links(&file, &text));
    }
    assert!(links > 50, "only {links} links found: is the parser blind?");
    assert!(
        broken.is_empty(),
        "links that resolve nowhere:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_finds_a_broken_link_and_a_missing_anchor() {
    let text = "[ok](docs/checklist.md#drain), [gone](docs/nowhere.md),\n\
                [no anchor](docs/checklist.md#no-such-rule), `[code](x)`\n\
                ```sh\n[in a block](nowhere)\n```\n";
    let broken = broken_links("README.md", text);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].contains("docs/nowhere.md: no such file"),
        "{broken:?}"
    );
    assert!(broken[1].contains("no heading #no-such-rule"), "{broken:?}");
    assert_eq!(
        anchor_of(" Refusals: one table, three readers"),
        "refusals-one-table-three-readers"
    );
    assert_eq!(
        anchor_of(" The deploy files' tests"),
        "the-deploy-files-tests"
    );
}

#[test]
fn every_documented_command_line_parses() {
    let mut lines = Vec::new();
    for file in documents() {
        lines.extend(
            command_lines(&read(&file))
                .into_iter()
                .map(|(n, a)| (file.clone(), n, a)),
        );
    }
    assert!(lines.len() > 40, "only {} command lines found", lines.len());
    let wrong: Vec<String> = lines
        .iter()
        .filter_map(|(file, n, args)| {
            parse_error(args).map(|e| format!("{file}:{n}: rehearse {}\n{e}", args.join(" ")))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "command lines the CLI refuses:\n{}",
        wrong.join("\n\n")
    );
}

#[test]
fn the_command_check_reads_shell_as_a_shell_does_and_refuses_what_the_cli_does() {
    let text = "```sh\n\
                rehearse run SCENARIO --target $GW \\\n  --set 'a.b=c d'   # a comment\n\
                T=$(date +%s)\n\
                rehearse provider x.toml --listen 127.0.0.1:8080 &\n\
                rehearse completions bash > ~/rehearse.bash\n\
                REHEARSE_FUZZ_TARGET=x cargo run -p rehearse-fuzz --bin afl < FILE\n\
                cargo run --release -- run\n\
                ```\n\
                rehearse run --not-in-a-block\n";
    let lines = command_lines(text);
    let args: Vec<String> = lines.iter().map(|(_, a)| a.join(" ")).collect();
    assert_eq!(
        args,
        [
            "run SCENARIO --target http://127.0.0.1:9 --set a.b=c d",
            "provider x.toml --listen 127.0.0.1:8080",
            "completions bash",
            "run",
        ],
        "{lines:?}"
    );
    assert_eq!(lines[0].0, 2, "the line a command starts on");
    for bad in [
        &["run", "--no-such-flag"][..],
        &["no-such-command"],
        &["run", "--shards", "0"],
    ] {
        let bad: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
        assert!(
            parse_error(&bad).is_some(),
            "rehearse {bad:?} --help parsed"
        );
    }
}

#[test]
fn every_scenario_block_loads() {
    let (mut bad, mut loaded) = (Vec::new(), 0);
    for file in documents() {
        let (b, n) = bad_scenarios(&file, &read(&file));
        bad.extend(b);
        loaded += n;
    }
    assert!(loaded >= 5, "only {loaded} scenario blocks found");
    assert!(
        bad.is_empty(),
        "scenario blocks that do not load:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scenario_check_refuses_a_bad_block_and_ignores_unmarked_ones() {
    let text = "```toml fragment\n[gateway.reference]\nmode = \"no-such-mode\"\n```\n\
                ```toml fragment\n[load]\npatience = { fixed = \"2s\" }\n```\n\
                ```toml\nnot = [toml\n```\n";
    let (bad, loaded) = bad_scenarios("README.md", text);
    assert_eq!(loaded, 1, "{bad:?}");
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("README.md:2, merged into its base: "),
        "{bad:?}"
    );
    assert!(bad[0].contains("gateway.reference.mode"), "{bad:?}");
}
