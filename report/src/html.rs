//! `report.html`: one self-contained page per run (inline CSS and SVG, no
//! script, nothing fetched), and PNG copies of its charts.
//!
//! Above the charts: the checklist, the scenario's key figures and the
//! plan's predictions; the charts (see [`crate::charts`]); below them, the
//! counts. Every string that comes from a record or a scenario is
//! HTML-escaped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use assertions::{Judgement, Status, Thresholds};
use hdrhistogram::Histogram;

use crate::charts::{self, count, num, Band, Chart, ChartData};
use crate::{write_whole, ReportError};
use wire::{Plan, RunMeta};

/// Everything the page is made from.
pub struct Inputs<'a> {
    /// run.json.
    pub meta: &'a RunMeta,
    /// The judged run.
    pub judgement: &'a Judgement,
    /// The checklist's thresholds, at the run's scale.
    pub thresholds: &'a Thresholds,
    /// plan.json, if there is one.
    pub plan: Option<&'a Plan>,
    /// The scenario's `[scenario] description`, if any.
    pub description: Option<&'a str>,
    /// End-to-end latency of answered attempts, µs.
    pub served: &'a Histogram<u64>,
    /// End-to-end latency of all attempts, µs.
    pub all: &'a Histogram<u64>,
}

/// Writes `report.html` and the charts' PNGs into `dir` and returns the
/// path of `report.html`; `description` is the scenario's `[scenario]
/// description`, if it has one. A chart that cannot be drawn or rasterised is
/// shown as a sentence saying so; only a file that cannot be written is an
/// error.
pub fn write(
    dir: &Path,
    meta: &RunMeta,
    judgement: &Judgement,
    thresholds: &Thresholds,
    description: Option<&str>,
) -> Result<PathBuf, ReportError> {
    let plan: Option<Plan> = std::fs::read_to_string(dir.join(wire::files::PLAN))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let (served, all) = latency_histograms(judgement);
    let inputs = Inputs {
        meta,
        judgement,
        thresholds,
        plan: plan.as_ref(),
        description,
        served,
        all,
    };
    let charts = charts::render_all(&chart_data(&inputs));
    write_pngs(dir, &charts)?;
    let path = dir.join(wire::files::REPORT_HTML);
    write_whole(&path, render(&inputs, &charts).as_bytes())?;
    Ok(path)
}

/// Writes each drawn chart's PNG copy into `dir` as `chart-{id}.png`. A
/// chart that cannot be rasterised is skipped with a warning; only a file
/// that cannot be written is an error.
pub(crate) fn write_pngs(dir: &Path, charts: &[Chart]) -> Result<(), ReportError> {
    for c in charts {
        if let Ok(svg) = &c.svg {
            match charts::png(svg) {
                Ok(png) => write_whole(&dir.join(format!("chart-{}.png", c.id)), &png)?,
                Err(e) => eprintln!("warning: chart {} has no PNG: {e}", c.id),
            }
        }
    }
    Ok(())
}

/// End-to-end latency per attempt (intended send to done), in µs: of the
/// answered attempts, and of all, as the judge counted them in its pass
/// (the page never reads the records).
pub fn latency_histograms(j: &Judgement) -> (&Histogram<u64>, &Histogram<u64>) {
    (&j.distribution.served, &j.distribution.all)
}

/// The charts' input: the timeline, the plan's phases as bands, the
/// predictions and limits. The time axis is in scenario seconds, as the
/// timeline's rows are (one per scenario second, however compressed): an
/// instant of the rehearsal is placed at its seconds × the time scale.
pub fn chart_data<'a>(i: &Inputs<'a>) -> ChartData<'a> {
    let e = &i.meta.expectations;
    let ts = time_scale(i.meta);
    let secs = |us: u64| us.saturating_sub(e.start_us) as f64 / 1e6 * ts;
    let overload = e.overload.map(|(a, b)| (secs(a), secs(b)));
    let bands = i
        .plan
        .map(|p| {
            p.rehearsal
                .phases
                .iter()
                .filter(|s| s.duration_s > 0.0)
                .map(|s| {
                    let (from, to) = (s.start_s * ts, (s.start_s + s.duration_s) * ts);
                    Band {
                        from_s: from,
                        to_s: to,
                        label: s.name.clone(),
                        overloaded: overload.is_some_and(|(a, b)| from < b && to > a),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let j = i.judgement;
    ChartData {
        seconds: &j.timeline.seconds,
        providers: &j.timeline.providers,
        span_s: secs(e.load_end_us),
        bands,
        queue_bound: e.overload.map(|_| e.queue_bound),
        first_shed: j.first_shed.map(|f| (secs(f.at_us), f.depth)),
        slo_ms: i
            .thresholds
            .served_latency
            .enabled
            .then_some(i.thresholds.served_latency.p99_ms),
        memory_ceiling_bytes: e.memory_ceiling_bytes,
        events: i
            .meta
            .gateway_events
            .iter()
            .map(|ev| (secs(ev.at_us), ev.kind.clone()))
            .collect(),
        refusals: &j.summary.refusals,
        served: i.served,
        all: i.all,
    }
}

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn status_class(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Fail => "fail",
        Status::Invalid => "invalid",
        Status::Skipped => "skipped",
        Status::Off => "off",
    }
}

pub(crate) fn ms(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{} ms", num(v, 1)))
}

pub(crate) fn mib(bytes: f64) -> String {
    format!("{} MiB", num(bytes / (1024.0 * 1024.0), 1))
}

pub(crate) const STYLE: &str = "
body{font-family:'DejaVu Sans',Verdana,sans-serif;color:#222;margin:0 auto;max-width:1040px;padding:16px 20px 40px;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555;margin:.2em 0}
table{border-collapse:collapse;width:100%;font-size:.88em;margin:.4em 0}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
.badge{display:inline-block;padding:1px 7px;border-radius:3px;font-weight:bold;font-size:.85em;color:#fff}
.pass{background:#1a7f37}.fail{background:#c62828}.invalid{background:#8250df}.skipped{background:#888}.off{background:#bbb;color:#222}
.notes{background:#fff8e1;border:1px solid #f0d58c;padding:6px 10px}
.cols{display:flex;gap:20px;flex-wrap:wrap}.cols>div{flex:1 1 440px}
figure.chart{margin:18px 0;border:1px solid #e4e4e4;padding:4px}
figure.chart svg{display:block;width:100%;height:auto}
figure.chart p.err{color:#c62828}
footer{margin-top:2em;color:#666;font-size:.85em}
";

/// The page.
pub fn render(i: &Inputs, charts: &[Chart]) -> String {
    let mut h = String::with_capacity(64 * 1024);
    header(&mut h, i);
    checklist(&mut h, i.judgement);
    // Key figures and predictions.
    h.push_str(
        "<section id=\"figures\">\n<h2>Scenario and plan</h2>\n<div class=\"cols\">\n<div>\n",
    );
    key_figures(&mut h, i);
    h.push_str("</div>\n<div>\n");
    predictions(&mut h, i);
    h.push_str("</div>\n</div>\n");
    phases_table(&mut h, i);
    h.push_str("</section>\n");

    chart_figures(&mut h, charts, i.meta);
    counts(&mut h, i);
    h.push_str(
        "<footer>Written by <code>rehearse</code> from this run directory's records \
         (client.jsonl, provider.jsonl, rss.jsonl, plan.json, run.json); \
         <code>rehearse report DIR</code> writes it again. Also here: report.json, junit.xml, timeline.csv.</footer>\n\
         </body>\n</html>\n",
    );
    h
}

/// A self-contained page's start, up to and with `<body>`: nothing may be
/// fetched (inline CSS and SVG only), [`STYLE`] and `more_style` after it.
pub(crate) fn page_head(h: &mut String, title: &str, more_style: &str) {
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}{more_style}</style>\n</head>\n<body>\n",
        esc(title)
    );
}

/// The page's head and its header: title, verdict, when, scales, notes.
fn header(h: &mut String, i: &Inputs) {
    let m = i.meta;
    let j = i.judgement;
    let overall = crate::checklist::verdict(m, j);
    let title = format!(
        "rehearse: {} against {} — {}",
        m.scenario,
        m.gateway,
        overall.as_str().to_uppercase()
    );
    page_head(h, &title, "");
    let _ = write!(
        h,
        "<header>\n<h1>{} <span class=\"badge {}\">{}</span></h1>\n",
        esc(&m.scenario),
        status_class(overall),
        overall.as_str().to_uppercase()
    );
    if let Some(d) = i.description {
        let _ = writeln!(h, "<p class=\"sub\">{}</p>", esc(d));
    }
    let started =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(m.expectations.start_us) * 1000)
            .ok()
            .and_then(|t| {
                t.format(time::macros::format_description!(
                    "[year]-[month]-[day] [hour]:[minute]:[second] UTC"
                ))
                .ok()
            })
            .unwrap_or_default();
    let _ = writeln!(
        h,
        "<p class=\"sub\">against {} · started {} · time scale ×{} · quota scale ÷{}{}</p>",
        esc(&m.gateway),
        esc(&started),
        num(m.time_scale, 2),
        num(m.quota_scale, 2),
        if m.partial {
            " · <strong>partial run (stopped before its end)</strong>"
        } else {
            ""
        }
    );
    if !m.notes.is_empty() {
        h.push_str("<div class=\"notes\">");
        for n in &m.notes {
            let _ = writeln!(h, "<p>Note: {}</p>", esc(n));
        }
        h.push_str("</div>\n");
    }
    h.push_str("</header>\n");
}

/// The checklist table: one row per check.
fn checklist(h: &mut String, j: &Judgement) {
    h.push_str(
        "<section id=\"checklist\">\n<h2>Checklist</h2>\n<table>\n<thead><tr><th>verdict</th><th>check</th>\
         <th>predicted</th><th>observed</th><th>explanation</th></tr></thead>\n<tbody>\n",
    );
    for v in &j.verdicts {
        let _ = writeln!(
            h,
            "<tr id=\"check-{id}\"><td><span class=\"badge {c}\">{s}</span></td><td><code>{id}</code></td>\
             <td>{p}</td><td>{o}</td><td>{d}</td></tr>",
            id = esc(v.id),
            c = status_class(v.status),
            s = v.status.as_str().to_uppercase(),
            p = esc(&v.predicted),
            o = esc(&v.observed),
            d = esc(&v.detail),
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

/// The run's time scale, 1 if run.json's is not a positive finite number.
fn time_scale(m: &RunMeta) -> f64 {
    if m.time_scale.is_finite() && m.time_scale > 0.0 {
        m.time_scale
    } else {
        1.0
    }
}

/// The charts, inline, each with the name of its PNG copy.
fn chart_figures(h: &mut String, charts: &[Chart], m: &RunMeta) {
    // Every chart but the last (the latency distribution) is on time.
    let time_charts = charts.len().saturating_sub(1);
    let ts = time_scale(m);
    let scale = if ts == 1.0 {
        String::new()
    } else {
        format!(
            " (at time scale {}, one is {} ms of this rehearsal)",
            num(ts, 2),
            num(1000.0 / ts, 1)
        )
    };
    let _ = write!(
        h,
        "<section id=\"charts\">\n<h2>The run, second by second</h2>\n\
         <p class=\"sub\">One time axis for charts 1–{time_charts}, scenario seconds since the load started{scale}; \
         counts are per scenario second; latencies, Retry-After and drain times are as measured in the rehearsal; \
         shaded bands are the scenario's phases (orange: overloaded in the plan).</p>\n",
    );
    for c in charts {
        chart_figure(h, c, "in the run directory");
    }
    h.push_str("</section>\n");
}

/// One chart inline in a `<figure>`, or the sentence saying why it could
/// not be drawn, captioned with the name of its PNG copy (`place`: where
/// that copy is, "in the run directory").
pub(crate) fn chart_figure(h: &mut String, c: &Chart, place: &str) {
    let _ = writeln!(
        h,
        "<figure class=\"chart\" id=\"chart-{}\" aria-label=\"{}\">",
        esc(c.id),
        esc(&c.title)
    );
    match &c.svg {
        Ok(svg) => {
            // Skip an XML declaration if the backend wrote one, and the
            // namespace, which inline SVG in HTML does without: the page
            // names no URL at all.
            let svg = svg.find("<svg").map_or(svg.as_str(), |at| &svg[at..]);
            h.push_str(&svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1));
        }
        Err(e) => {
            let _ = write!(
                h,
                "<p class=\"err\">{}: could not be drawn: {}</p>",
                esc(&c.title),
                esc(e)
            );
        }
    }
    let _ = writeln!(
        h,
        "\n<figcaption>PNG copy {}: chart-{}.png</figcaption>\n</figure>",
        esc(place),
        esc(c.id)
    );
}

pub(crate) fn row(h: &mut String, label: &str, value: &str) {
    let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(label), esc(value));
}

fn key_figures(h: &mut String, i: &Inputs) {
    let e = &i.meta.expectations;
    h.push_str("<table id=\"key-figures\">\n<caption>Key figures (at the run's scale)</caption>\n");
    row(h, "scenario", &i.meta.scenario);
    row(h, "gateway", &i.meta.gateway);
    row(
        h,
        "load",
        &format!(
            "{} s of scheduled arrivals",
            num(e.load_end_us.saturating_sub(e.start_us) as f64 / 1e6, 1)
        ),
    );
    row(
        h,
        "callers' patience D",
        &format!("{} s", num(e.patience_s, 2)),
    );
    if let Some(p) = i.plan {
        row(h, "tokens per request", &num(p.tokens_per_request, 0));
    }
    row(
        h,
        "memory ceiling",
        &e.memory_ceiling_bytes
            .map_or("none given".into(), |b| mib(b as f64)),
    );
    row(
        h,
        "latency SLO (served p99)",
        &if i.thresholds.served_latency.enabled {
            format!("{} ms", num(i.thresholds.served_latency.p99_ms, 1))
        } else {
            "not checked".into()
        },
    );
    row(
        h,
        "drain allowance",
        &format!("{} s", num(i.thresholds.drain.within.as_secs_f64(), 2)),
    );
    row(
        h,
        "send lag bound (p99)",
        &format!("{} ms", num(e.send_lag_bound_ms, 1)),
    );
    h.push_str("</table>\n");
}

fn predictions(h: &mut String, i: &Inputs) {
    let e = &i.meta.expectations;
    let ts = if i.meta.time_scale > 0.0 {
        i.meta.time_scale
    } else {
        1.0
    };
    let qs = if i.meta.quota_scale > 0.0 {
        i.meta.quota_scale
    } else {
        1.0
    };
    h.push_str(
        "<table id=\"predictions\">\n<caption>The plan's predictions</caption>\n\
         <tr><th></th><th>full scale</th><th>this rehearsal</th></tr>\n",
    );
    let both = |h: &mut String, label: &str, full: String, reh: String| {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(label),
            esc(&full),
            esc(&reh)
        );
    };
    if e.overload.is_some() {
        both(
            h,
            "capacity μ in the overload",
            format!("{}/s", num(e.capacity_per_s * qs / ts, 2)),
            format!("{}/s", num(e.capacity_per_s, 2)),
        );
        both(
            h,
            "provider time S",
            format!("{} s", num(e.service_s * ts, 2)),
            format!("{} s", num(e.service_s, 2)),
        );
        both(
            h,
            "queue bound Q* = μ·(D − S)",
            format!("{} requests", num(e.queue_bound * qs, 0)),
            format!("{} requests", num(e.queue_bound, 0)),
        );
    } else {
        both(
            h,
            "overload",
            "none predicted".into(),
            "none predicted".into(),
        );
    }
    both(
        h,
        "patience D",
        format!("{} s", num(e.patience_s * ts, 2)),
        format!("{} s", num(e.patience_s, 2)),
    );
    if let Some(p) = i.plan {
        let (f, r) = (&p.full, &p.rehearsal);
        both(
            h,
            "peak backlog, unbounded gateway",
            format!("{} requests", num(f.peak_backlog, 0)),
            format!("{} requests", num(r.peak_backlog, 0)),
        );
        let drain = |m: Option<f64>| {
            m.map_or("never (load stays above μ)".into(), |m| {
                format!("{} min", num(m, 2))
            })
        };
        both(
            h,
            "drain time of that backlog",
            drain(f.drain_minutes_unbounded),
            drain(r.drain_minutes_unbounded),
        );
        both(
            h,
            "late answers (FIFO, unbounded)",
            num(f.late_answers, 0),
            num(r.late_answers, 0),
        );
        both(
            h,
            "memory held by that backlog",
            mib(f.unbounded_backlog_bytes),
            mib(r.unbounded_backlog_bytes),
        );
    }
    h.push_str("</table>\n");
}

fn phases_table(h: &mut String, i: &Inputs) {
    let Some(p) = i.plan else {
        h.push_str("<p class=\"sub\">No plan.json in this run directory: no phases to show.</p>\n");
        return;
    };
    h.push_str(
        "<table id=\"phases\">\n<caption>Phases at the run's scale (the bands on the charts)</caption>\n\
         <tr><th>phase</th><th>from</th><th>for</th><th>offered</th><th>capacity μ</th>\
         <th>provider time S</th><th>Q*</th><th>backlog at its end (unbounded)</th></tr>\n",
    );
    for s in &p.rehearsal.phases {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{} s</td><td class=\"n\">{} s</td><td class=\"n\">{}/s</td>\
             <td class=\"n\">{}</td><td class=\"n\">{} s</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&s.name),
            num(s.start_s, 1),
            num(s.duration_s, 1),
            num(s.offered_per_min / 60.0, 2),
            s.capacity_per_min
                .map_or("unlimited".into(), |c| format!("{}/s", num(c / 60.0, 2))),
            num(s.service_s, 2),
            s.queue_bound_requests.map_or("–".into(), |q| num(q, 0)),
            num(s.backlog_at_end, 0),
        );
    }
    h.push_str("</table>\n");
}

/// Every refusal by kind and the answer that carried it (status, reason),
/// per tenant in a run of several: what `refusals_legible` judges.
fn refusal_table(h: &mut String, s: &assertions::Summary) {
    if s.refusals.is_empty() {
        return;
    }
    let tenants = s.refusals.iter().any(|r| r.tenant.is_some());
    h.push_str("<table>\n<caption>Refusals: which policy fired, and the answer it gave</caption>\n<tr><th>kind</th><th>status</th><th>reason</th>");
    if tenants {
        h.push_str("<th>tenant</th>");
    }
    h.push_str("<th>count</th></tr>\n");
    for r in &s.refusals {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td>",
            esc(r.class.as_str()),
            r.status,
            esc(r.reason.as_deref().unwrap_or("(none)"))
        );
        if tenants {
            let _ = write!(h, "<td>{}</td>", esc(r.tenant.as_deref().unwrap_or("")));
        }
        let _ = writeln!(h, "<td class=\"n\">{}</td></tr>", count(r.count));
    }
    h.push_str("</table>\n");
}

fn counts(h: &mut String, i: &Inputs) {
    let s = &i.judgement.summary;
    let c = &s.counts;
    h.push_str("<section id=\"counts\">\n<h2>Counts</h2>\n<div class=\"cols\">\n<div>\n");
    h.push_str("<table>\n<caption>Attempts</caption>\n");
    for (label, n) in [
        ("offered (people)", c.offered),
        ("sent (retries included)", c.sent),
        ("answered", c.ok),
        (
            "shed at admission (queue full, would miss its deadline)",
            c.shed,
        ),
        ("stale (dropped after waiting past its budget)", c.stale),
        ("tenant over its entitlement", c.tenant_limited),
        ("gateway timeouts (504 after dispatch)", c.gateway_timeout),
        ("provider refusals passed through", c.upstream_refused),
        ("timed out", c.timeout),
        ("errors", c.error),
        ("late answers (written after the caller left)", c.late),
    ] {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"n\">{}</td></tr>",
            esc(label),
            count(n)
        );
    }
    h.push_str("</table>\n");
    refusal_table(h, s);
    h.push_str("<table>\n<caption>Provider and gateway</caption>\n");
    for (label, v) in [
        ("provider calls", count(s.provider.calls)),
        (
            "stale dispatches (caller had left)",
            count(s.provider.stale_dispatch),
        ),
        ("tokens wasted on them", count(s.provider.wasted_tokens)),
        (
            "calls still running when their caller gave up",
            count(s.provider.running_at_hangup),
        ),
        (
            "of them hung up on in time (cancel_on_hangup)",
            count(s.provider.cancelled_at_hangup),
        ),
        (
            "tokens made after callers left (estimated)",
            count(s.provider.tokens_after_hangup),
        ),
        ("peak gateway queue depth", count(s.gateway.peak_depth)),
        ("peak backlog", count(s.gateway.peak_backlog)),
        (
            "peak in flight at the gateway (sent, not yet ended)",
            count(s.gateway.peak_in_flight),
        ),
        ("gateway crashes", count(s.gateway.crashes)),
        (
            "lost to its crashes (inside, or refused while down)",
            count(s.gateway.lost),
        ),
        (
            "peak gateway RSS",
            s.gateway
                .peak_rss_bytes
                .map_or("not sampled".into(), |b| mib(b as f64)),
        ),
        (
            "backlog drained after the overload",
            s.drain_s
                .map_or("not measured".into(), |d| format!("{} s", num(d, 1))),
        ),
        (
            "send lag p99 (harness)",
            format!("{} ms", num(s.harness.send_lag_p99_ms, 2)),
        ),
    ] {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"n\">{}</td></tr>",
            esc(label),
            esc(&v)
        );
    }
    h.push_str("</table>\n</div>\n<div>\n<table>\n<caption>Latency</caption>\n<tr><th></th><th>p50</th><th>p99</th></tr>\n");
    for (label, p) in [
        ("end to end, per person served", s.latency_ms.e2e),
        ("queue wait (in the gateway)", s.latency_ms.queue_wait),
        ("provider time", s.latency_ms.provider),
    ] {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(label),
            ms(p.p50),
            ms(p.p99)
        );
    }
    h.push_str("</table>\n</div>\n</div>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use assertions::judge;
    use wire::{ClientOutcome, ClientRecord, Expectations};

    /// run.json as `rehearse run` writes it (built from JSON, so fields
    /// added to `RunMeta` later with a default need no change here).
    fn meta(scenario: &str, notes: Vec<String>) -> RunMeta {
        let expectations = Expectations {
            start_us: 1_000_000_000,
            load_end_us: 1_010_000_000,
            overload: Some((1_002_000_000, 1_010_000_000)),
            capacity_per_s: 8.6,
            patience_s: 3.0,
            service_s: 0.14,
            queue_bound: 24.5,
            in_flight_at_provider: 12.0,
            gateway_wait_s: 0.0,
            knee: None,
            drain_baseline: None,
            after_trouble: None,
            memory_ceiling_bytes: Some(256 << 20),
            memory_settle: None,
            send_lag_bound_ms: 5.0,
            send_lag_p99_ms: 1.0,
            stopped_us: None,
        };
        serde_json::from_value(serde_json::json!({
            "scenario": scenario,
            "gateway": "reference gateway (bounded)",
            "time_scale": 10.0,
            "quota_scale": 1.0,
            "expectations": expectations,
            "partial": false,
            "provider_url": "",
            "target_url": "",
            "notes": notes,
        }))
        .unwrap()
    }

    fn attempt(id: &str, at_s: f64, took_ms: u64, outcome: ClientOutcome) -> ClientRecord {
        let at = 1_000_000_000 + (at_s * 1e6) as u64;
        ClientRecord {
            id: id.into(),
            attempt: 1,
            intended_us: at,
            sent_us: at,
            client_wait_us: 0,
            first_byte_us: None,
            done_us: at + took_ms * 1000,
            status: Some(if outcome == ClientOutcome::Ok {
                200
            } else {
                429
            }),
            outcome,
            retry_after_ms: (outcome == ClientOutcome::Shed).then_some(500),
            retry_after_header: None,
            tokens: 0,
            stream: false,
            last: true,
            patience_ms: 3000,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        }
    }

    /// A check turned off in the thresholds reads OFF wherever the
    /// checklist is shown (never PASS, never SKIPPED), and report.json's
    /// status tells it from a skip.
    #[test]
    fn a_check_turned_off_says_off_everywhere() {
        let m = meta("off", vec![]);
        let attempts = vec![
            attempt("a", 0.1, 200, ClientOutcome::Ok),
            attempt("b", 0.5, 1, ClientOutcome::Shed),
        ];
        let mut t = Thresholds::default();
        t.retry_after.enabled = false;
        let j = judge(&attempts, &[], &[], &m.expectations, &t);
        let v = j.verdict("retry_after").unwrap();
        assert_eq!(v.status, Status::Off);
        let list = crate::Checklist::new(&m, &j);
        let text = list.text(&crate::terminal::Style::default());
        let line = text.lines().find(|l| l.contains("retry_after")).unwrap();
        assert!(line.trim_start().starts_with("OFF "), "{line}");
        assert!(
            !line.contains("PASS") && !line.contains("SKIPPED"),
            "{line}"
        );
        let md = list.markdown();
        let row = md.lines().find(|l| l.contains("retry_after")).unwrap();
        assert!(row.contains("⏸️ OFF") && !row.contains("SKIPPED"), "{row}");
        let mut h = String::new();
        checklist(&mut h, &j);
        let row = h.lines().find(|l| l.contains("check-retry_after")).unwrap();
        assert!(row.contains("class=\"badge off\">OFF<"), "{row}");
        let json = serde_json::to_value(crate::report_json(&m, &j)).unwrap();
        let check = json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "retry_after")
            .unwrap();
        assert_eq!(check["status"], "off", "{check}");
    }

    #[test]
    fn the_page_is_self_contained_and_escapes_what_it_shows() {
        let m = meta("<script>alert(1)</script>", vec!["a & b".into()]);
        let attempts = vec![
            attempt("a", 0.1, 200, ClientOutcome::Ok),
            attempt("b", 0.5, 1, ClientOutcome::Shed),
            attempt("c", 3.2, 900, ClientOutcome::Ok),
        ];
        let t = Thresholds::default();
        let j = judge(&attempts, &[], &[], &m.expectations, &t);
        let plan: Plan = serde_json::from_str(
            r#"{"tokens_per_request":110,"patience_s":30,"time_scale":10,"quota_scale":1,
            "phases":[],"late_answers":0,"peak_backlog":251,"unbounded_backlog_bytes":1e5,
            "rehearsal":{"phases":[{"name":"40/s </td>","start_s":0,"duration_s":10,
            "offered_per_min":24000,"capacity_per_min":null,"service_s":0.02,"served":1,
            "backlog_at_end":0,"queue_bound_requests":null}],"late_answers":0,
            "peak_backlog":251,"unbounded_backlog_bytes":1e5,"drain_minutes_unbounded":null},
            "overload":null}"#,
        )
        .unwrap();
        let (served, all) = latency_histograms(&j);
        assert_eq!((served.len(), all.len()), (2, 3));
        let inputs = Inputs {
            meta: &m,
            judgement: &j,
            thresholds: &t,
            plan: Some(&plan),
            description: Some("it's \"quoted\""),
            served,
            all,
        };
        let charts = charts::render_all(&chart_data(&inputs));
        let page = render(&inputs, &charts);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(!page.contains("<script"), "unescaped scenario name");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("Note: a &amp; b"));
        assert!(page.contains("40/s &lt;/td&gt;"));
        assert!(page.contains("it&#39;s &quot;quoted&quot;"));
        // Nothing from elsewhere: no URL at all, no script.
        for needle in [
            "http:", "https:", "//", "src=", "href=", "<link", "@import", "url(",
        ] {
            assert!(!page.contains(needle), "found {needle}");
        }
        // Every check, every chart.
        for id in assertions::always_judged() {
            assert!(page.contains(&format!("id=\"check-{id}\"")), "{id}");
        }
        assert_eq!(page.matches("<figure class=\"chart\"").count(), 6);
        assert_eq!(page.matches("<svg").count(), 6);
        assert!(page.contains("id=\"counts\""));
        // Checklist above the charts, counts below.
        let at = |s: &str| page.find(s).unwrap();
        assert!(at("id=\"checklist\"") < at("id=\"charts\""));
        assert!(at("id=\"predictions\"") < at("id=\"charts\""));
        assert!(at("id=\"charts\"") < at("id=\"counts\""));
    }

    #[test]
    fn every_chart_has_its_file_name_in_the_run_directory_list() {
        let names: Vec<&str> = wire::files::ALL.iter().map(|(n, _)| *n).collect();
        for id in [
            "traffic",
            "requests",
            "latency",
            "memory",
            "retry-after",
            "distribution",
        ] {
            let file = format!("chart-{id}.png");
            assert!(
                names.contains(&file.as_str()),
                "{file} is not in wire::files::ALL"
            );
        }
    }

    #[test]
    fn bands_come_from_the_plan_and_overload_is_marked() {
        let m = meta("pool-demo", vec![]);
        let plan: Plan = serde_json::from_str(
            r#"{"rehearsal":{"phases":[
              {"name":"40 requests/s","start_s":0,"duration_s":0.2},
              {"name":"40 requests/s / provider 7x slower","start_s":0.2,"duration_s":0.8}]}}"#,
        )
        .unwrap();
        let mut m2 = m.clone();
        m2.expectations.overload = Some((1_000_200_000, 1_001_000_000));
        let t = Thresholds::default();
        let j = judge(&[], &[], &[], &m2.expectations, &t);
        let (served, all) = latency_histograms(&j);
        let inputs = Inputs {
            meta: &m2,
            judgement: &j,
            thresholds: &t,
            plan: Some(&plan),
            description: None,
            served,
            all,
        };
        let d = chart_data(&inputs);
        assert_eq!(d.bands.len(), 2);
        assert!(!d.bands[0].overloaded);
        assert!(d.bands[1].overloaded);
        // The time axis is in scenario seconds: at time scale 10 the
        // rehearsal's 0.2 s is 2 s, its 10 s of load 100 s.
        assert_eq!((d.bands[1].from_s, d.bands[1].to_s), (2.0, 10.0));
        assert_eq!(d.span_s, 100.0);
        assert_eq!(d.slo_ms, Some(10_000.0));
        // An empty run still renders a whole page.
        let page = render(&inputs, &charts::render_all(&d));
        assert_eq!(page.matches("<svg").count(), 6);
    }
}
