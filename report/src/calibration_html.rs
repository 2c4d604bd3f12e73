//! A calibration sweep ([`Calibration`]) as files: `calibrate.json`,
//! `calibrate.html` (one self-contained page, in report.html's style: the
//! knee and the gateway's knobs it suggests, the levels, the two curves
//! inline) and the curves' PNG copies beside it. Every string that comes
//! from the sweep (the target, the request, the reasons) is HTML-escaped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::calibration::{Calibration, CalibrationLevel, CALIBRATE_HTML, CALIBRATE_JSON};
use crate::charts::{self, count, num, Chart};
use crate::html::{chart_figure, esc, ms, page_head, row, write_pngs};
use crate::{write_whole, ReportError};

/// The page's own style, after report.html's.
const MORE_STYLE: &str = "
.stopped{background:#fdecea;border:1px solid #e0a3a3;padding:6px 10px;margin:.6em 0}
p.summary{font-size:1.1em;font-weight:bold;margin:.6em 0}
tr.past td{background:#fff8e1}
";

/// Writes a sweep's documents into `dir` (made if missing): `calibrate.json`
/// (pretty JSON), `chart-latency-curve.png`, `chart-throughput-curve.png`
/// and `calibrate.html`, and returns the page's path. A chart that cannot
/// be drawn or rasterised is a sentence on the page; only a file that
/// cannot be written is an error.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("rehearse-doc-calibrate-{}", std::process::id()));
/// let sweep = report::Calibration {
///     target: "http://127.0.0.1:8080".into(),
///     ..Default::default()
/// };
/// let page = report::write_calibration(&dir, &sweep).unwrap();
/// assert!(page.ends_with(report::CALIBRATE_HTML));
/// assert!(dir.join(report::CALIBRATE_JSON).exists());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_calibration(dir: &Path, c: &Calibration) -> Result<PathBuf, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError {
        path: dir.to_path_buf(),
        source,
    })?;
    let json_path = dir.join(CALIBRATE_JSON);
    let mut json = serde_json::to_vec_pretty(c).map_err(|e| ReportError {
        path: json_path.clone(),
        source: std::io::Error::other(e),
    })?;
    json.push(b'\n');
    write_whole(&json_path, &json)?;
    let charts = charts::render_curves(c);
    write_pngs(dir, &charts)?;
    let path = dir.join(CALIBRATE_HTML);
    write_whole(&path, render(c, &charts).as_bytes())?;
    Ok(path)
}

/// A count of calls: `32`, `31.5`.
fn calls(n: f64) -> String {
    num(n, 1)
}

/// The page.
fn render(c: &Calibration, charts: &[Chart]) -> String {
    let mut h = String::with_capacity(64 * 1024);
    page_head(
        &mut h,
        &format!("rehearse calibrate: {}", c.target),
        MORE_STYLE,
    );
    header(&mut h, c);
    knobs(&mut h, c);
    levels(&mut h, c);
    h.push_str(
        "<section id=\"charts\">\n<h2>The curves</h2>\n\
         <p class=\"sub\">One point per level, by concurrency; the dashed red line is the knee, \
         the green one the recommended limit.</p>\n",
    );
    for chart in charts {
        chart_figure(&mut h, chart, "beside this page");
    }
    h.push_str(
        "</section>\n<footer>Written by <code>rehearse calibrate</code>; \
         the same sweep is in calibrate.json beside this page.</footer>\n</body>\n</html>\n",
    );
    h
}

/// The title with the knee as a badge, the request, why the sweep
/// stopped (when it did) and the summary.
fn header(h: &mut String, c: &Calibration) {
    let (class, badge) = match c.knee.filter(|k| k.is_finite()) {
        Some(k) => ("pass", format!("KNEE ≈ {}", calls(k))),
        None => ("skipped", "NO KNEE FOUND".to_string()),
    };
    let _ = writeln!(
        h,
        "<header>\n<h1>Calibration of {} <span class=\"badge {class}\">{}</span></h1>",
        esc(&c.target),
        esc(&badge)
    );
    let _ = writeln!(
        h,
        "<p class=\"sub\">{} · {} level{} of {} s each, closed loop</p>",
        esc(&c.request),
        c.levels.len(),
        if c.levels.len() == 1 { "" } else { "s" },
        num(c.step_s, 2)
    );
    if let Some(why) = &c.stopped {
        let _ = writeln!(
            h,
            "<div class=\"stopped\" id=\"stopped\"><p><strong>The sweep stopped early:</strong> {}</p></div>",
            esc(why)
        );
    }
    if !c.summary.is_empty() {
        let _ = writeln!(h, "<p class=\"summary\">{}</p>", esc(&c.summary));
    }
    h.push_str("</header>\n");
}

/// The knee, how it was found, and the gateway's knobs it suggests.
fn knobs(h: &mut String, c: &Calibration) {
    h.push_str(
        "<section id=\"knee\">\n<h2>The knee and the gateway's knobs</h2>\n<table id=\"knobs\">\n",
    );
    let none = |what: &str| format!("none ({what})");
    row(
        h,
        "knee",
        &c.knee
            .filter(|k| k.is_finite())
            .map_or(none("no knee found within the sweep"), |k| {
                format!("≈ {} calls in flight", calls(k))
            }),
    );
    row(
        h,
        "how it was found",
        if c.method.is_empty() {
            "–"
        } else {
            &c.method
        },
    );
    row(
        h,
        "flat part's latency (the lowest median below the knee)",
        &ms(c.flat_latency_ms),
    );
    row(
        h,
        "throughput plateau (the highest measured)",
        &c.plateau_per_s
            .map_or("–".into(), |p| format!("{} answers/s", num(p, 1))),
    );
    row(
        h,
        "recommended concurrency limit",
        &c.recommended_limit
            .map_or(none("no knee"), |n| format!("{} calls in flight", count(n))),
    );
    row(h, "wait budget", &format!("{} s", num(c.wait_budget_s, 2)));
    let bound = |b: Option<u64>| b.map_or("–".into(), |b| format!("{} requests", count(b)));
    row(
        h,
        "queue bound, healthy (drain rate at the limit × wait budget)",
        &bound(c.queue_bound_healthy),
    );
    row(
        h,
        &format!(
            "queue bound, degraded (every call {}× slower)",
            num(c.degraded_factor, 2)
        ),
        &bound(c.queue_bound_degraded),
    );
    h.push_str("</table>\n</section>\n");
}

/// The levels by concurrency, each with its place in the order run;
/// those past the knee shaded.
fn levels(h: &mut String, c: &Calibration) {
    h.push_str(
        "<section id=\"levels\">\n<h2>Levels</h2>\n<table>\n\
         <caption>By concurrency (# is the order run; shaded: past the knee)</caption>\n\
         <thead><tr><th>#</th><th>concurrency</th><th>throughput</th><th>p50</th><th>p90</th>\
         <th>p99</th><th>ok</th><th>refused</th><th>errors</th><th>timeouts</th>\
         <th>failed share</th></tr></thead>\n<tbody>\n",
    );
    if c.levels.is_empty() {
        h.push_str("<tr><td colspan=\"11\">no level measured</td></tr>\n");
    }
    // By concurrency, each with its place in the order run (a stable
    // sort: levels of one concurrency stay in that order).
    let mut rows: Vec<(usize, &CalibrationLevel)> = c
        .levels
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .collect();
    rows.sort_by_key(|(_, l)| l.concurrency);
    for (i, l) in rows {
        let past = c.knee.is_some_and(|k| l.concurrency as f64 > k);
        let _ = writeln!(
            h,
            "<tr id=\"level-{i}\"{class}><td class=\"n\">{i}</td><td class=\"n\">{n}</td>\
             <td class=\"n\">{x}/s</td><td class=\"n\">{p50}</td><td class=\"n\">{p90}</td>\
             <td class=\"n\">{p99}</td><td class=\"n\">{ok}</td><td class=\"n\">{refused}</td>\
             <td class=\"n\">{errors}</td><td class=\"n\">{timeouts}</td><td class=\"n\">{failed}%</td></tr>",
            class = if past { " class=\"past\"" } else { "" },
            n = count(l.concurrency),
            x = num(l.throughput_per_s, 1),
            p50 = ms(l.p50_ms),
            p90 = ms(l.p90_ms),
            p99 = ms(l.p99_ms),
            ok = count(l.ok),
            refused = count(l.refused),
            errors = count(l.errors),
            timeouts = count(l.timeouts),
            failed = num(l.failed_share() * 100.0, 1),
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::tests::knee_at_32;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rehearse-calibrate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_documents_are_written_and_the_page_escapes_the_target() {
        let dir = temp_dir("page");
        let mut c = knee_at_32();
        c.target = "http://x/<script>alert(1)</script>".into();
        let page_path = write_calibration(&dir, &c).unwrap();
        assert_eq!(page_path, dir.join(CALIBRATE_HTML));
        for png in ["chart-latency-curve.png", "chart-throughput-curve.png"] {
            let bytes = std::fs::read(dir.join(png)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{png}");
        }
        let json = std::fs::read_to_string(dir.join(CALIBRATE_JSON)).unwrap();
        assert!(json.contains("\n  \"knee\": 32.0"), "{json}");
        let back: Calibration = serde_json::from_str(&json).unwrap();
        // (serde_json's float parsing is not exact to the last bit.)
        assert_eq!((back.knee, back.recommended_limit), (Some(32.0), Some(24)));
        assert_eq!(back.levels.len(), c.levels.len());
        assert_eq!(back.target, c.target);

        let page = std::fs::read_to_string(&page_path).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(!page.contains("<script"), "unescaped target");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        // Every level a row, by concurrency, numbered in the order run.
        assert_eq!(page.matches("<tr id=\"level-").count(), c.levels.len());
        let at = |s: &str| page.find(s).unwrap_or_else(|| panic!("{s}"));
        // 24 calls was run 8th, after 64 (7th), and sorts before 32 (6th).
        assert!(at("<tr id=\"level-8\"") < at("<tr id=\"level-6\""));
        assert!(at("<tr id=\"level-6\"") < at("<tr id=\"level-7\" class=\"past\""));
        assert!(page.contains(
            "<td class=\"n\">32</td><td class=\"n\">640/s</td><td class=\"n\">50 ms</td>\
             <td class=\"n\">55 ms</td><td class=\"n\">65 ms</td>"
        ));
        assert!(page.contains("KNEE ≈ 32"));
        assert!(page.contains(&esc(&c.method)));
        assert!(page.contains(&esc(&c.summary)));
        assert!(page.contains("24 calls in flight"));
        assert!(page.contains("960 requests") && page.contains("137 requests"));
        assert!(page.contains("every call 7× slower"));
        assert!(!page.contains("id=\"stopped\""));
        // Both curves inline, each with its PNG's name.
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("chart-latency-curve.png"));
        assert!(page.contains("chart-throughput-curve.png"));
        assert!(page.contains("knee ≈ 32"));
        // The knee and the knobs above the levels, the curves below them.
        assert!(at("id=\"knobs\"") < at("id=\"levels\""));
        assert!(at("id=\"levels\"") < at("id=\"charts\""));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sweep_that_stopped_says_so_at_the_top() {
        let mut c = knee_at_32();
        c.levels.truncate(5);
        c.knee = None;
        c.recommended_limit = None;
        c.queue_bound_healthy = None;
        c.queue_bound_degraded = None;
        c.stopped = Some("level 24: 7% of calls failed (over 5%) & <refused>".into());
        let page = render(&c, &charts::render_curves(&c));
        let stopped = page.find("id=\"stopped\"").unwrap();
        assert!(stopped < page.find("id=\"knobs\"").unwrap());
        assert!(page.contains("7% of calls failed (over 5%) &amp; &lt;refused&gt;"));
        assert!(page.contains("NO KNEE FOUND"));
        assert!(page.contains("none (no knee found within the sweep)"));
        assert!(!page.contains("class=\"past\""));
        assert!(page.contains("no knee found within the sweep"));
    }

    #[test]
    fn an_empty_sweep_still_writes_a_whole_page() {
        let dir = temp_dir("empty");
        let c = Calibration {
            target: "http://127.0.0.1:9".into(),
            stopped: Some("the target refused every call".into()),
            ..Calibration::default()
        };
        let page = std::fs::read_to_string(write_calibration(&dir, &c).unwrap()).unwrap();
        assert!(page.contains("no level measured"));
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.ends_with("</html>\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
