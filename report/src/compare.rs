//! A comparison ([`Comparison`], `compare.json`) as a person reads it: the
//! table printed on the terminal, and `compare.html`, one self-contained
//! page with the same table, every check's verdict per variant, and the
//! variants' key charts side by side (their PNGs, embedded).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use assertions::Status;
use base64::Engine as _;
use wire::number::count;

use crate::documents::{ComparedRun, Comparison};
use crate::html::{esc, mib, status_class, STYLE};
use crate::regression::{change_text, value_text};
use crate::terminal::{table, wrap, Style};
use crate::{write_whole, ReportError};

/// The file names of a comparison's directory (beside one run directory
/// per variant).
pub const COMPARE_JSON: &str = "compare.json";
/// See [`COMPARE_JSON`].
pub const COMPARE_HTML: &str = "compare.html";

/// The columns' headers, in order, after the variant's name and verdict.
const HEADERS: [&str; 10] = [
    "ok",
    "late",
    "timed out",
    "shed",
    "stale",
    "gw timeout",
    "lost",
    "crashes",
    "peak in flight",
    "peak RSS",
];

/// Past this many columns a variant's name is numbered in the tables, and
/// said once above them.
const LONG_NAME: usize = 24;

/// The charts shown side by side: each run directory's PNG of that id,
/// with its caption.
const CHARTS: [(&str, &str); 4] = [
    ("traffic", "Traffic per second"),
    (
        "requests",
        "Where the requests are (gateway depth, backlog)",
    ),
    ("latency", "Latency per second"),
    ("memory", "Gateway memory"),
];

/// A run's cells under [`HEADERS`].
fn cells(r: &ComparedRun) -> [String; 10] {
    let c = &r.columns;
    [
        count(c.ok),
        count(c.late),
        count(c.timeout),
        count(c.shed),
        count(c.stale),
        count(c.gateway_timeout),
        count(c.lost),
        count(c.crashes),
        count(c.peak_in_flight),
        c.peak_rss_bytes.map_or("–".into(), |b| mib(b as f64)),
    ]
}

/// A check's cell of a run: its verdict, its figure, and the figure's
/// change from the baseline's (`PASS 5.2 s (+1.1 s, worse)`); `–` when the
/// run has no verdict for it.
fn check_cell(r: &ComparedRun, id: &str) -> String {
    let Some(status) = r.checks.get(id) else {
        return "–".into();
    };
    let mut cell = status.as_str().to_uppercase();
    if let Some(f) = r.figures.get(id) {
        let _ = write!(cell, " {}", value_text(f.value, &f.unit));
        if f.change.is_some() {
            let _ = write!(cell, " ({})", change_text(f));
        }
    }
    cell
}

/// "3 variants" or "2 runs".
fn how_many(c: &Comparison) -> String {
    let what = if c.compared == "runs" {
        "run"
    } else {
        "variant"
    };
    let n = c.variants.len();
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The sentences under a comparison's tables: runs that could not be made,
/// those not run, the scenarios' differences, the regressions and the
/// verdicts not as expected.
fn sentences(c: &Comparison) -> Vec<String> {
    let mut said: Vec<String> = c
        .variants
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{}: could not be run: {}",
                r.name,
                r.error.as_ref()?
            ))
        })
        .collect();
    if !c.skipped.is_empty() {
        said.push(format!("not run (stopped): {}", c.skipped.join(", ")));
    }
    said.extend(c.differences.iter().map(|d| format!("differs: {d}")));
    let regressed = if c.fail_on_regression {
        "regression"
    } else {
        "worse"
    };
    said.extend(c.regressions.iter().map(|r| format!("{regressed}: {r}")));
    said.extend(c.unexpected.iter().map(|u| format!("unexpected: {u}")));
    said
}

/// A run's verdict as the table shows it: upper case, with `(expected
/// …)` when `--expect` asked for another.
fn verdict_cell(r: &ComparedRun) -> String {
    let v = r.verdict.as_str().to_uppercase();
    match r.expected {
        Some(e) if e != r.verdict => format!("{v} (expected {})", e.as_str()),
        _ => v,
    }
}

/// The comparison as printed at its end: a line per variant with its
/// verdict and columns, then each check's verdict per variant, then a line
/// per verdict not as `--expect`ed; laid out for `style` (a table wider
/// than its width is cut into blocks). `quiet`: the variants' verdicts
/// and the unexpected ones alone.
///
/// ```
/// let c = report::Comparison { scenario: "demo".into(), ..Default::default() };
/// let text = report::compare_text(&c, &report::Style::default(), false);
/// assert!(text.contains("peak in flight"));
/// ```
pub fn compare_text(c: &Comparison, style: &Style, quiet: bool) -> String {
    let mut out = format!("\nComparison: {}, {}\n", c.scenario, how_many(c));
    // Long names are numbered, and the tables say the number: every
    // column then fits beside them.
    let long = c
        .variants
        .iter()
        .any(|r| crate::terminal::columns(&r.name) > LONG_NAME);
    let label = |i: usize, r: &ComparedRun| {
        if long {
            format!("#{}", i + 1)
        } else {
            r.name.clone()
        }
    };
    if long {
        for (i, r) in c.variants.iter().enumerate() {
            let first = format!("  {:<4}", label(i, r));
            for l in wrap(&r.name, style.width, &first, "      ") {
                let _ = writeln!(out, "{l}");
            }
        }
        out.push('\n');
    }
    let columns = if quiet { 0 } else { HEADERS.len() };
    let mut rows = vec![["variant", "verdict"]
        .iter()
        .chain(&HEADERS[..columns])
        .map(|h| h.to_string())
        .collect::<Vec<_>>()];
    for (i, r) in c.variants.iter().enumerate() {
        let mut row = vec![label(i, r), verdict_cell(r)];
        row.extend(cells(r).into_iter().take(columns));
        rows.push(row);
    }
    out.push_str(&table(&rows, style.width));
    if !quiet {
        out.push('\n');
        let mut rows = vec![std::iter::once("check".to_string())
            .chain(c.variants.iter().enumerate().map(|(i, r)| label(i, r)))
            .collect::<Vec<_>>()];
        for id in c.check_ids() {
            let mut row = vec![id.to_string()];
            row.extend(c.variants.iter().map(|r| check_cell(r, id)));
            rows.push(row);
        }
        out.push_str(&table(&rows, style.width));
    }
    for line in sentences(c) {
        for l in wrap(&line, style.width, "", "  ") {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

/// The comparison as Markdown (its directory's `summary.md`, for a CI
/// job's summary or a pull-request comment): a row per check with each
/// run's verdict, figure and change from the baseline (the first run),
/// then the sentences (differences, regressions) and the exit code.
///
/// ```
/// let c = report::Comparison { scenario: "demo".into(), ..Default::default() };
/// assert!(report::compare_markdown(&c).contains("| check |"));
/// ```
pub fn compare_markdown(c: &Comparison) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut md = format!(
        "## rehearse compare: {}, {}\n\n| check |",
        cell(&c.scenario),
        how_many(c)
    );
    for (i, r) in c.variants.iter().enumerate() {
        let base = if i == 0 { " (baseline)" } else { "" };
        let _ = write!(
            md,
            " {}{base} ({}) |",
            cell(&r.name),
            r.verdict.as_str().to_uppercase()
        );
    }
    md.push_str("\n|---|");
    md.push_str(&"---|".repeat(c.variants.len()));
    md.push('\n');
    for id in c.check_ids() {
        let _ = write!(md, "| `{id}` |");
        for r in &c.variants {
            let _ = write!(md, " {} |", cell(&check_cell(r, id)));
        }
        md.push('\n');
    }
    md.push('\n');
    for line in sentences(c) {
        let _ = writeln!(md, "- {}", cell(&line));
    }
    let _ = writeln!(md, "\nExit code: {}.", c.exit_code);
    md
}

/// A badge of a verdict.
fn badge(s: Status) -> String {
    format!(
        "<span class=\"badge {}\">{}</span>",
        status_class(s),
        s.as_str().to_uppercase()
    )
}

/// A PNG of `dir` as a `data:` URI, if it is there.
fn png_uri(dir: &Path) -> Option<String> {
    let bytes = std::fs::read(dir).ok()?;
    Some(format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// Writes `compare.html` into the comparison's directory `dir` (the
/// variants' run directories under it) and returns its path.
pub fn write_compare_html(dir: &Path, c: &Comparison) -> Result<PathBuf, ReportError> {
    let path = dir.join(COMPARE_HTML);
    write_whole(&path, render(dir, c).as_bytes())?;
    Ok(path)
}

/// The page.
fn render(dir: &Path, c: &Comparison) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let title = format!("rehearse compare: {}", c.scenario);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{STYLE}.side{{display:flex;gap:8px}}.side figure{{flex:1 1 0;margin:0;min-width:0}}\
         .side img{{width:100%;height:auto;border:1px solid #e4e4e4}}.side figcaption{{font-size:.8em;color:#555}}</style>\n</head>\n<body>\n\
         <header>\n<h1>{t}</h1>\n<p class=\"sub\">{f} · {n} · exit {x}</p>\n",
        t = esc(&title),
        f = esc(&c.file),
        n = esc(&how_many(c)),
        x = c.exit_code,
    );
    let said = sentences(c);
    if !said.is_empty() {
        h.push_str("<div class=\"notes\">");
        for line in said {
            let _ = writeln!(h, "<p>{}</p>", esc(&line));
        }
        h.push_str("</div>\n");
    }
    h.push_str("</header>\n");
    columns_table(&mut h, c);
    checks_table(&mut h, c);
    charts(&mut h, dir, c);
    h.push_str(
        "<footer>Written by <code>rehearse compare</code> from each variant's report.json \
         (also here: compare.json; each variant's run directory holds its report.html).</footer>\n\
         </body>\n</html>\n",
    );
    h
}

fn columns_table(h: &mut String, c: &Comparison) {
    h.push_str("<section id=\"columns\">\n<h2>Variants</h2>\n<table>\n<thead><tr><th>variant</th><th>verdict</th>");
    for head in HEADERS {
        let _ = write!(h, "<th>{}</th>", esc(head));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for r in &c.variants {
        let _ = write!(
            h,
            "<tr><th><a href=\"{d}/report.html\">{n}</a><br><code>{s}</code></th><td>{b}{e}</td>",
            d = esc(&r.dir),
            n = esc(&r.name),
            s = esc(&r.sets.join(" ")),
            b = badge(r.verdict),
            e = r
                .expected
                .map_or(String::new(), |e| format!("<br>expected {}", e.as_str())),
        );
        for cell in cells(r) {
            let _ = write!(h, "<td class=\"n\">{}</td>", esc(&cell));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

fn checks_table(h: &mut String, c: &Comparison) {
    h.push_str("<section id=\"checks\">\n<h2>Checklist</h2>\n<table>\n<thead><tr><th>check</th>");
    for r in &c.variants {
        let _ = write!(h, "<th>{}</th>", esc(&r.name));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for id in c.check_ids() {
        let _ = write!(h, "<tr id=\"check-{id}\"><td><code>{id}</code></td>");
        for r in &c.variants {
            let cell = r.checks.get(id).map_or("–".into(), |s| badge(*s));
            let figure = r.figures.get(id).map_or(String::new(), |f| {
                let change = if f.change.is_some() {
                    format!("<br><small>{}</small>", esc(&change_text(f)))
                } else {
                    String::new()
                };
                format!(" {}{change}", esc(&value_text(f.value, &f.unit)))
            });
            let _ = write!(h, "<td>{cell}{figure}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

fn charts(h: &mut String, dir: &Path, c: &Comparison) {
    h.push_str("<section id=\"charts\">\n<h2>Charts</h2>\n");
    for (id, caption) in CHARTS {
        let _ = writeln!(h, "<h3>{}</h3>\n<div class=\"side\">", esc(caption));
        for r in &c.variants {
            let file = format!("chart-{id}.png");
            let img = png_uri(&dir.join(&r.dir).join(&file)).map_or_else(
                || "<p>no chart</p>".to_string(),
                |uri| {
                    format!(
                        "<img src=\"{uri}\" alt=\"{} of {}\">",
                        esc(caption),
                        esc(&r.name)
                    )
                },
            );
            let _ = writeln!(
                h,
                "<figure>{img}<figcaption>{} ({}/{})</figcaption></figure>",
                esc(&r.name),
                esc(&r.dir),
                esc(&file)
            );
        }
        h.push_str("</div>\n");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::Columns;

    fn run(name: &str, verdict: Status, shed: u64) -> ComparedRun {
        ComparedRun {
            name: name.into(),
            sets: vec![format!("gateway.reference.mode=\"{name}\"")],
            dir: name.into(),
            verdict,
            exit_code: 0,
            expected: None,
            error: None,
            columns: Columns {
                ok: 1_234,
                shed,
                peak_in_flight: 19,
                peak_rss_bytes: Some(12 << 20),
                ..Columns::default()
            },
            checks: assertions::always_judged()
                .map(|id| (id.to_string(), verdict))
                .collect(),
            ..ComparedRun::named(name)
        }
    }

    fn comparison() -> Comparison {
        let mut naive = run("naive <x>", Status::Fail, 0);
        naive.expected = Some(Status::Pass);
        Comparison {
            scenario: "pool-demo".into(),
            file: "scenarios/pool-demo.toml".into(),
            variants: vec![run("bounded", Status::Pass, 88), naive],
            skipped: vec!["aimd".into()],
            exit_code: 1,
            unexpected: vec!["naive <x>: fail, expected pass".into()],
            ..Comparison::default()
        }
    }

    #[test]
    fn the_terminal_table_has_every_column_and_check() {
        // Wide enough for one block: every column on the variant's line.
        let wide = Style {
            width: 200,
            ..Style::default()
        };
        let text = compare_text(&comparison(), &wide, false);
        for head in HEADERS {
            assert!(text.contains(head), "{head}: {text}");
        }
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("bounded"))
            .unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[..4], ["bounded", "PASS", "1,234", "0"], "{line}");
        assert!(line.contains("88") && line.contains("12 MiB"), "{line}");
        assert!(text.contains("FAIL (expected pass)"), "{text}");
        assert!(text.contains("not run (stopped): aimd"), "{text}");
        for id in assertions::always_judged() {
            assert!(text.lines().any(|l| l.trim_start().starts_with(id)), "{id}");
        }
    }

    #[test]
    fn the_page_escapes_names_and_embeds_the_charts_there_are() {
        let dir =
            std::env::temp_dir().join(format!("rehearse-compare-html-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bounded")).unwrap();
        std::fs::write(dir.join("bounded/chart-traffic.png"), b"png").unwrap();
        let page = render(&dir, &comparison());
        assert!(page.contains("naive &lt;x&gt;") && !page.contains("naive <x>"));
        assert!(page.contains(&format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(b"png")
        )));
        assert!(page.contains("<p>no chart</p>"));
        assert!(page.contains("href=\"bounded/report.html\""));
        assert_eq!(
            page.matches("<tr id=\"check-").count(),
            assertions::always_judged().count()
        );
        assert!(page.contains("img-src data:"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_check_shows_its_figure_and_change_in_each_form() {
        let mut c = comparison();
        c.compared = "runs".into();
        let drain = |value| crate::ComparedFigure {
            value,
            unit: "s".into(),
            measures: "drain time".into(),
            worse: assertions::Worse::Higher,
            change: None,
            regressed: false,
        };
        c.variants[0].figures.insert("drain".into(), drain(5.0));
        c.variants[1].figures.insert("drain".into(), drain(50.0));
        c.regressions = crate::mark_regressions(&mut c, &crate::tolerances(&[]).unwrap(), 1.0);
        c.fail_on_regression = true;
        c.differences = vec!["naive <x>: runs of different scenarios".into()];
        let md = compare_markdown(&c);
        assert!(
            md.contains("| `drain` | PASS 5 s | FAIL 50 s (+45 s, worse beyond tolerance) |"),
            "{md}"
        );
        assert!(md.contains("bounded (baseline) (PASS)"), "{md}");
        assert!(
            md.contains("- regression: naive <x>: drain's drain time went from 5 s to 50 s"),
            "{md}"
        );
        assert!(
            md.contains("- differs: naive <x>: runs of different scenarios"),
            "{md}"
        );
        let wide = Style {
            width: 300,
            ..Style::default()
        };
        let text = compare_text(&c, &wide, false);
        assert!(
            text.contains("2 runs") && text.contains("FAIL 50 s (+45 s, worse beyond tolerance)"),
            "{text}"
        );
        let page = render(Path::new("/nonexistent"), &c);
        assert!(
            page.contains("+45 s, worse beyond tolerance")
                && page.contains("regression: naive &lt;x&gt;")
        );
    }

    #[test]
    fn compare_json_reads_back() {
        let c = comparison();
        let text = serde_json::to_string(&c).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["variants"][0]["shed"], 88);
        assert_eq!(v["variants"][0]["checks"]["drain"], "pass");
        assert_eq!(v["variants"][1]["expected"], "pass");
        let back: Comparison = serde_json::from_str(&text).unwrap();
        assert_eq!(back.variants[0].columns, c.variants[0].columns);
        assert_eq!(back.variants[1].checks, c.variants[1].checks);
    }
}
