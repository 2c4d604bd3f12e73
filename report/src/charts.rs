//! The charts of `report.html`: the run on one shared time axis (traffic,
//! where the requests are, latency, memory, Retry-After against the drain
//! time), with the scenario's phases as shaded bands, and the distribution
//! of end-to-end latency as an HDR percentile plot.
//!
//! Charts are drawn with plotters into SVG strings (inlined in the HTML) and
//! rasterised with resvg into PNG copies for pasting into a ticket. Every
//! time chart has the same width, margins and x range, so their time axes
//! line up one above the other; legends sit below the plot area, band labels
//! above it, so neither covers data.

use std::error::Error;
use std::sync::{Arc, OnceLock};

use assertions::Second;
use hdrhistogram::Histogram;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Width of every chart, in pixels.
pub const WIDTH: u32 = 1000;
/// Height of a chart's title and band-label strip, above the plot area.
const TOP: u32 = 50;
/// Height of one legend row, below the plot area.
const LEGEND_ROW: u32 = 24;
/// Height of the plot area including its axis labels.
const PLOT: u32 = 270;
/// Width of the y axis labels and description.
const Y_LABELS: u32 = 84;
/// Space for the x tick labels and description.
const X_LABELS: u32 = 44;
const MARGIN_LEFT: u32 = 8;
const MARGIN_RIGHT: u32 = 28;
/// A chart draws at most this many points per series: a longer run is
/// drawn in buckets of several seconds.
const MAX_POINTS: usize = 1200;

type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

// Okabe-Ito: colours told apart by colour-blind readers too.
const C_BLUE: RGBColor = RGBColor(0, 114, 178);
const C_ORANGE: RGBColor = RGBColor(230, 159, 0);
const C_GREEN: RGBColor = RGBColor(0, 158, 115);
const C_RED: RGBColor = RGBColor(213, 94, 0);
const C_PURPLE: RGBColor = RGBColor(204, 121, 167);
const C_SKY: RGBColor = RGBColor(86, 180, 233);
const C_GREY: RGBColor = RGBColor(110, 110, 110);
const C_TEXT: RGBColor = RGBColor(34, 34, 34);
const C_LIMIT: RGBColor = RGBColor(190, 30, 45);

/// A stretch of the run drawn as a shaded band: a load phase, with the
/// provider's phase when one is active.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Start, seconds since the run started.
    pub from_s: f64,
    /// End, seconds since the run started.
    pub to_s: f64,
    /// What the band is called (the plan's segment name).
    pub label: String,
    /// True if and only if the plan predicts overload during the band.
    pub overloaded: bool,
}

/// Everything the charts draw.
pub struct ChartData<'a> {
    /// The run second by second.
    pub seconds: &'a [Second],
    /// Length of the time axis in seconds: at least the timeline's and the
    /// load schedule's (so a run that ended early shows where it stopped).
    pub span_s: f64,
    /// The phases.
    pub bands: Vec<Band>,
    /// Q*, the predicted queue bound, if the scenario overloads.
    pub queue_bound: Option<f64>,
    /// The gateway's first shed: seconds since start and depth then.
    pub first_shed: Option<(f64, u64)>,
    /// The served-latency SLO (p99), in milliseconds, if the check is on.
    pub slo_ms: Option<f64>,
    /// The gateway's memory ceiling, if any.
    pub memory_ceiling_bytes: Option<u64>,
    /// What happened to the gateway process (`died`, `restarted`), seconds
    /// since start: drawn as vertical lines across every time chart.
    pub events: Vec<(f64, String)>,
    /// End-to-end latency of answered attempts, in microseconds.
    pub served: &'a Histogram<u64>,
    /// End-to-end latency of every attempt, in microseconds.
    pub all: &'a Histogram<u64>,
}

/// One rendered chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Short id: the HTML element id is `chart-{id}`, the PNG `chart-{id}.png`.
    pub id: &'static str,
    /// The chart's title.
    pub title: String,
    /// The chart as an SVG document, or why it could not be drawn.
    pub svg: Result<String, String>,
}

/// Draws all six charts.
pub fn render_all(d: &ChartData) -> Vec<Chart> {
    let rows = Rows::of(d.seconds);
    let x = TimeAxis::new(d.span_s.max(rows.end()));
    let mk = |id, title: &str, f: &dyn Fn(&Frame) -> DrawResult<String>| {
        let frame = Frame {
            d,
            rows: &rows,
            x: &x,
            title,
        };
        // A chart that cannot be drawn must not cost the run its verdict
        // and other reports: it becomes a sentence in the page instead.
        let svg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&frame)))
            .unwrap_or_else(|_| Err("the chart library panicked".into()))
            .map_err(|e| e.to_string());
        Chart {
            id,
            title: title.to_string(),
            svg,
        }
    };
    vec![
        mk("traffic", "1. Traffic per second", &traffic),
        mk("requests", "2. Where the requests are", &requests),
        mk("latency", "3. Latency per second, p50 and p99", &latency),
        mk("memory", "4. Gateway memory (RSS)", &memory),
        mk(
            "retry-after",
            "5. Retry-After given vs backlog drain time measured",
            &retry_after,
        ),
        mk(
            "distribution",
            "6. End-to-end latency distribution (HDR percentile plot)",
            &distribution,
        ),
    ]
}

/// The fonts the PNGs are drawn with: DejaVu Sans where it is installed
/// (Debian's fonts-dejavu-core), else whatever the system has.
fn font_db() -> Arc<resvg::usvg::fontdb::Database> {
    static DB: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        let dejavu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
        if db.load_font_file(dejavu).is_err() {
            db.load_system_fonts();
        }
        let family = db
            .faces()
            .find_map(|f| f.families.first().map(|(name, _)| name.clone()));
        if let Some(family) = family {
            db.set_sans_serif_family(family);
        }
        Arc::new(db)
    })
    .clone()
}

/// Rasterises an SVG chart into a PNG, 1.5 times its size for a sharp
/// picture in a ticket.
pub fn png(svg: &str) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let opt = usvg::Options {
        fontdb: font_db(),
        font_family: "sans-serif".into(),
        ..Default::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let scale = 1.5;
    let size = tree.size().to_int_size().scale_by(scale).ok_or("empty")?;
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("cannot allocate")?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------
// Number and time formatting shared with the HTML.

/// An integer with thousands separators: `9360` → `"9,360"`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number with at most `decimals` decimals, trailing zeros dropped, and
/// thousands separators: `1234.56` → `"1,234.6"` with 1 decimal.
pub fn num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f.trim_end_matches('0')),
        None => (s.as_str(), ""),
    };
    let int: u64 = int.parse().unwrap_or(0);
    let sign = if x < 0.0 && (int > 0 || !frac.is_empty()) {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{}", count(int))
    } else {
        format!("{sign}{}.{frac}", count(int))
    }
}

/// A tick label for a linear axis: as many decimals as the step needs
/// (0.25 → 2, 0.5 → 1, 5 → 0).
fn tick(v: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|d| {
            let scaled = step * 10f64.powi(*d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    num(v, decimals)
}

/// A latency in milliseconds as a tick label: `0.5 ms`, `20 ms`, `1.5 s`.
fn ms_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{} s", num(v / 1000.0, 2))
    } else {
        format!("{} ms", num(v, 3))
    }
}

/// Returns a "nice" step (1, 2, 2.5 or 5 times a power of ten) that cuts
/// `span` into at most `max_ticks` pieces.
fn nice_step(span: f64, max_ticks: usize) -> f64 {
    let raw = span / max_ticks.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * 0.999_999)
        .unwrap_or(10.0 * mag)
}

/// A linear axis from 0 that holds `max` with a little headroom: its top
/// and its ticks.
fn linear_axis(max: f64) -> (f64, f64, Vec<f64>) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max * 1.05, 6);
    let hi = ((max * 1.05) / step).ceil() * step;
    let n = (hi / step).round() as usize;
    (hi, step, (0..=n).map(|i| i as f64 * step).collect())
}

/// A logarithmic latency axis (milliseconds) that holds `lo..hi`: whole
/// decades, with 2 and 5 between them when there are few decades.
fn log_axis(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    let lo = 10f64.powf(lo.log10().floor()).max(0.001);
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    let decades = (hi / lo).log10().round() as i32;
    let mut ticks = Vec::new();
    let mut d = lo;
    while d <= hi * 1.000_001 {
        ticks.push(d);
        if decades <= 3 {
            for m in [2.0, 5.0] {
                if d * m < hi {
                    ticks.push(d * m);
                }
            }
        }
        d *= 10.0;
    }
    (lo, hi, ticks)
}

/// The shared time axis: its length, ticks and labels.
struct TimeAxis {
    span: f64,
    step: f64,
    ticks: Vec<f64>,
    minutes: bool,
}

impl TimeAxis {
    fn new(span: f64) -> TimeAxis {
        // At most about eleven days (a wild timestamp in a record must not
        // ask for millions of ticks); the timeline itself stops sooner.
        let span = if span.is_finite() && span >= 1.0 {
            span.min(1e6)
        } else {
            1.0
        };
        let minutes = span > 300.0;
        let steps = [
            0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
            1200.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0,
        ];
        let step = steps
            .into_iter()
            .find(|s| span / s <= 12.0)
            .unwrap_or(86400.0);
        let n = (span / step).floor() as usize;
        let ticks = (0..=n).map(|i| i as f64 * step).collect();
        TimeAxis {
            span,
            step,
            ticks,
            minutes,
        }
    }

    fn label(&self, v: f64) -> String {
        if !self.minutes {
            return tick(v, self.step);
        }
        let total = v.round() as u64;
        if self.step >= 60.0 {
            count(total / 60)
        } else {
            format!("{}:{:02}", total / 60, total % 60)
        }
    }

    /// An instant for a sentence: `2.3 s`, or `3:10` (min:s) on a long run.
    fn instant(&self, t: f64) -> String {
        if self.minutes {
            let total = t.max(0.0).round() as u64;
            format!("{}:{:02}", total / 60, total % 60)
        } else {
            format!("{} s", num(t, 1))
        }
    }

    fn desc(&self) -> &'static str {
        match (self.minutes, self.step >= 60.0) {
            (false, _) => "time since start (s)",
            (true, true) => "time since start (min)",
            (true, false) => "time since start (min:s)",
        }
    }
}

/// A numeric axis with the ticks chosen here (plotters' own choice for f64
/// ranges knows nothing of minutes or decades): linear or logarithmic.
#[derive(Debug, Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl Axis {
    fn linear(lo: f64, hi: f64, ticks: Vec<f64>) -> Axis {
        Axis {
            lo,
            hi,
            log: false,
            ticks,
        }
    }

    fn log(lo: f64, hi: f64, ticks: Vec<f64>) -> Axis {
        Axis {
            lo,
            hi,
            log: true,
            ticks,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (a, b, v) = if self.log {
            let floor = self.lo / 1e3;
            (self.lo.ln(), self.hi.ln(), value.max(floor).ln())
        } else {
            (self.lo, self.hi, *value)
        };
        let f = if b > a { (v - a) / (b - a) } else { 0.0 };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

// ---------------------------------------------------------------------------
// The timeline, in buckets of a few seconds for a long run.

/// One point of the time charts: a second, or the bucket of seconds it
/// stands for. Counts are per-second means over the bucket; levels and
/// latencies are the bucket's highest.
#[derive(Debug, Clone, Default)]
struct Row {
    /// The middle of the bucket, seconds since start.
    x: f64,
    offered: f64,
    ok: f64,
    shed: f64,
    timeout: f64,
    errors: f64,
    outstanding: f64,
    in_flight: f64,
    depth: f64,
    e2e: [Option<f64>; 2],
    queue_wait: [Option<f64>; 2],
    provider: [Option<f64>; 2],
    rss_mib: Option<f64>,
    retry_after_s: Option<f64>,
    drain_s: f64,
}

struct Rows {
    rows: Vec<Row>,
    /// Seconds per point.
    bucket: usize,
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Rows {
    fn of(seconds: &[Second]) -> Rows {
        let bucket = seconds.len().div_ceil(MAX_POINTS).max(1);
        let mut rows = Vec::with_capacity(seconds.len() / bucket + 1);
        for chunk in seconds.chunks(bucket) {
            let n = chunk.len() as f64;
            let first = chunk[0].t as f64;
            let mut r = Row {
                x: first + n / 2.0,
                ..Row::default()
            };
            let mut retry = (0.0, 0u32);
            for s in chunk {
                r.offered += s.offered as f64 / n;
                r.ok += s.ok as f64 / n;
                r.shed += s.shed as f64 / n;
                r.timeout += s.timeout as f64 / n;
                r.errors += s.errors as f64 / n;
                r.outstanding = r.outstanding.max(s.client_outstanding as f64);
                r.in_flight = r.in_flight.max(s.provider_in_flight as f64);
                r.depth = r.depth.max(s.gateway_depth as f64);
                r.e2e = [
                    max_opt(r.e2e[0], s.e2e_p50_ms),
                    max_opt(r.e2e[1], s.e2e_p99_ms),
                ];
                r.queue_wait = [
                    max_opt(r.queue_wait[0], s.queue_wait_p50_ms),
                    max_opt(r.queue_wait[1], s.queue_wait_p99_ms),
                ];
                r.provider = [
                    max_opt(r.provider[0], s.provider_p50_ms),
                    max_opt(r.provider[1], s.provider_p99_ms),
                ];
                r.rss_mib = max_opt(r.rss_mib, s.rss_bytes.map(|b| b as f64 / (1024.0 * 1024.0)));
                if let Some(ms) = s.retry_after_ms {
                    retry = (retry.0 + ms as f64 / 1000.0, retry.1 + 1);
                }
                r.drain_s = r.drain_s.max(s.drain_s);
            }
            if retry.1 > 0 {
                r.retry_after_s = Some(retry.0 / f64::from(retry.1));
            }
            rows.push(r);
        }
        Rows { rows, bucket }
    }

    /// The end of the last second, seconds since start.
    fn end(&self) -> f64 {
        self.rows
            .last()
            .map_or(0.0, |r| r.x + self.bucket as f64 / 2.0)
    }

    fn note(&self) -> Option<String> {
        (self.bucket > 1).then(|| {
            format!(
                "each point is {} s: counts are the mean per second, levels and latencies the highest",
                self.bucket
            )
        })
    }
}

// ---------------------------------------------------------------------------
// Drawing.

fn font(px: f64) -> FontDesc<'static> {
    // plotters' SVG backend writes font-size = size / 1.24.
    ("sans-serif", px * 1.24).into_font()
}

/// How a series shows in the legend.
#[derive(Clone, Copy)]
enum Mark {
    Line(RGBColor, u32),
    Dashed(RGBColor),
    Point(RGBColor),
    Band(RGBColor),
}

struct Frame<'a> {
    d: &'a ChartData<'a>,
    rows: &'a Rows,
    x: &'a TimeAxis,
    title: &'a str,
}

type TimeCtx<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Axis, Axis>>;

/// Draws a whole chart into an SVG string: `legend_rows` rows of legend
/// below the plot.
fn svg_document(
    legend_rows: u32,
    f: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> DrawResult<String> {
    let height = TOP + PLOT + legend_rows.max(1) * LEGEND_ROW + 8;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        f(&root)?;
        root.present()?;
    }
    Ok(svg)
}

fn title(root: &DrawingArea<SVGBackend, Shift>, text: &str, note: Option<&str>) -> DrawResult {
    root.draw(&Text::new(
        text.to_string(),
        (MARGIN_LEFT as i32 + 4, 6),
        font(16.0).style(FontStyle::Bold).color(&C_TEXT),
    ))?;
    if let Some(note) = note {
        root.draw(&Text::new(
            note.to_string(),
            ((WIDTH - MARGIN_RIGHT) as i32, 8),
            font(11.0)
                .color(&C_GREY)
                .pos(Pos::new(HPos::Right, VPos::Top)),
        ))?;
    }
    Ok(())
}

/// Legend items laid out left to right below the plot area, wrapping.
fn legend(root: &DrawingArea<SVGBackend, Shift>, items: &[(String, Mark)]) -> DrawResult {
    let left = (MARGIN_LEFT + Y_LABELS) as i32;
    let right = (WIDTH - MARGIN_RIGHT) as i32;
    let mut x = left;
    let mut y = (TOP + PLOT) as i32 + 10;
    for (label, mark) in items {
        // DejaVu Sans at 12 px: about 6.5 px a character.
        let w = legend_width(label);
        if x + w > right && x > left {
            x = left;
            y += LEGEND_ROW as i32;
        }
        let (x0, x1, ym) = (x, x + 24, y + 7);
        match *mark {
            Mark::Line(c, width) => root.draw(&PathElement::new(
                vec![(x0, ym), (x1, ym)],
                c.stroke_width(width + 1),
            ))?,
            Mark::Dashed(c) => {
                for i in 0..3 {
                    let a = x0 + i * 9;
                    root.draw(&PathElement::new(
                        vec![(a, ym), (a + 6, ym)],
                        c.stroke_width(2),
                    ))?;
                }
            }
            Mark::Point(c) => root.draw(&Circle::new((x0 + 12, ym), 4, c.filled()))?,
            Mark::Band(c) => root.draw(&Rectangle::new(
                [(x0, ym - 6), (x1, ym + 6)],
                c.mix(0.35).filled(),
            ))?,
        }
        root.draw(&Text::new(
            label.clone(),
            (x1 + 6, ym),
            font(12.0)
                .color(&C_TEXT)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        x += w;
    }
    Ok(())
}

/// The width of one legend item: its mark, its label and a gap.
fn legend_width(label: &str) -> i32 {
    30 + (label.chars().count() as i32 * 13 + 1) / 2 + 18
}

/// How many legend rows `items` take.
fn legend_rows(items: &[(String, Mark)]) -> u32 {
    let width = (WIDTH - MARGIN_LEFT - Y_LABELS - MARGIN_RIGHT) as i32;
    let (mut rows, mut x) = (1, 0);
    for (label, _) in items {
        let w = legend_width(label);
        if x + w > width && x > 0 {
            rows += 1;
            x = 0;
        }
        x += w;
    }
    rows
}

const BAND_OVERLOAD: RGBColor = RGBColor(230, 159, 0);
const BAND_PLAIN: RGBColor = RGBColor(120, 120, 120);

/// Legend items every time chart shares: the overloaded band, and the
/// gateway's deaths and restarts.
fn band_items(d: &ChartData) -> Vec<(String, Mark)> {
    let mut out = Vec::new();
    if d.bands.iter().any(|b| b.overloaded) {
        out.push((
            "phase overloaded (plan)".to_string(),
            Mark::Band(BAND_OVERLOAD),
        ));
    }
    let x = TimeAxis::new(d.span_s);
    for (t, kind) in d.events.iter().take(4) {
        out.push((
            format!("gateway {kind} at {}", x.instant(*t)),
            Mark::Line(C_TEXT, 1),
        ));
    }
    if d.events.len() > 4 {
        out.push((
            format!("… {} more gateway events", d.events.len() - 4),
            Mark::Line(C_TEXT, 1),
        ));
    }
    out
}

/// Builds a time chart: title, bands, mesh and axes; the caller draws its
/// series on the returned context.
fn time_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    fr: &Frame,
    y: Axis,
    y_desc: &str,
    y_fmt: &dyn Fn(&f64) -> String,
) -> DrawResult<TimeCtx<'a, 'b>> {
    let note = fr.rows.note();
    title(root, fr.title, note.as_deref())?;
    let ticks = fr.x.ticks.clone();
    let legend_h = root.dim_in_pixel().1 - TOP - PLOT;
    let mut chart = ChartBuilder::on(root)
        .margin_top(TOP)
        .margin_bottom(legend_h)
        .margin_left(MARGIN_LEFT)
        .margin_right(MARGIN_RIGHT)
        .x_label_area_size(X_LABELS)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(Axis::linear(0.0, fr.x.span, ticks), y.clone())?;
    // Bands first, so grid lines and data are drawn over them.
    let (ylo, yhi) = (y.lo, y.hi);
    let mut plain = 0;
    for b in &fr.d.bands {
        let (from, to) = (b.from_s.max(0.0), b.to_s.min(fr.x.span));
        if to <= from {
            continue;
        }
        let fill = if b.overloaded {
            BAND_OVERLOAD.mix(0.16)
        } else {
            plain += 1;
            BAND_PLAIN.mix(if plain % 2 == 1 { 0.07 } else { 0.13 })
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(from, ylo), (to, yhi)],
            fill.filled(),
        )))?;
        if from > 0.0 {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(from, ylo), (from, yhi)],
                C_GREY.mix(0.5).stroke_width(1),
            )))?;
        }
        // The label, centred above its band, cut to the band's width.
        let (px0, _) = chart.backend_coord(&(from, yhi));
        let (px1, _) = chart.backend_coord(&(to, yhi));
        let fits = ((px1 - px0 - 6).max(0) / 6) as usize;
        if fits >= 3 {
            let label = shorten(&b.label, fits);
            root.draw(&Text::new(
                label,
                ((px0 + px1) / 2, TOP as i32 - 6),
                font(11.0)
                    .color(&C_TEXT)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            ))?;
        }
    }
    // The gateway's deaths and restarts, across the whole plot.
    for (t, _) in &fr.d.events {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*t, ylo), (*t, yhi)],
            C_TEXT.stroke_width(1),
        )))?;
    }
    let x_fmt = |v: &f64| fr.x.label(*v);
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(C_GREY.mix(0.18))
        .axis_style(C_GREY)
        .label_style(font(12.0).color(&C_TEXT))
        .axis_desc_style(font(12.0).color(&C_TEXT))
        .x_desc(fr.x.desc())
        .y_desc(y_desc)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(y_fmt)
        .draw()?;
    Ok(chart)
}

/// `label`, cut to `max` characters with an ellipsis.
fn shorten(label: &str, max: usize) -> String {
    if label.chars().count() <= max {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// Splits a series with gaps into its unbroken runs.
fn runs(points: impl Iterator<Item = (f64, Option<f64>)>) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur = Vec::new();
    for (x, y) in points {
        match y.filter(|v| v.is_finite()) {
            Some(y) => cur.push((x, y)),
            None => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Draws one series: lines through its unbroken runs, and a dot on every
/// point when there are few (a single-second run still shows).
fn series(
    chart: &mut TimeCtx<'_, '_>,
    points: impl Iterator<Item = (f64, Option<f64>)>,
    color: RGBColor,
    width: u32,
    dots: bool,
) -> DrawResult {
    for run in runs(points) {
        if run.len() == 1 || dots {
            chart.draw_series(
                run.iter()
                    .map(|p| Circle::new(*p, width + 1, color.filled())),
            )?;
        }
        if run.len() > 1 {
            chart.draw_series(LineSeries::new(run, color.stroke_width(width)))?;
        }
    }
    Ok(())
}

/// A dashed horizontal line across the whole time axis.
fn hline(chart: &mut TimeCtx<'_, '_>, span: f64, y: f64, color: RGBColor) -> DrawResult {
    chart.draw_series(DashedLineSeries::new(
        vec![(0.0, y), (span, y)],
        8,
        5,
        color.stroke_width(2),
    ))?;
    Ok(())
}

fn no_data(
    chart: &TimeCtx<'_, '_>,
    root: &DrawingArea<SVGBackend, Shift>,
    what: &str,
) -> DrawResult {
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    root.draw(&Text::new(
        what.to_string(),
        ((xr.start + xr.end) / 2, (yr.start + yr.end) / 2),
        font(14.0)
            .color(&C_GREY)
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    Ok(())
}

fn dots(fr: &Frame) -> bool {
    fr.rows.rows.len() <= 40
}

fn traffic(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let max = rows
        .iter()
        .map(|r| r.offered.max(r.ok).max(r.shed).max(r.timeout).max(r.errors))
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    let mut items = vec![
        ("offered".to_string(), Mark::Line(C_GREY, 2)),
        ("served (answered)".to_string(), Mark::Line(C_GREEN, 2)),
        ("shed (429/503)".to_string(), Mark::Line(C_ORANGE, 2)),
        ("timed out".to_string(), Mark::Line(C_RED, 2)),
        ("errors".to_string(), Mark::Line(C_PURPLE, 2)),
    ];
    items.extend(band_items(fr.d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(
            root,
            fr,
            Axis::linear(0.0, hi, ticks),
            "requests per second",
            &fmt,
        )?;
        let d = dots(fr);
        let col = |f: fn(&Row) -> f64| rows.iter().map(move |r| (r.x, Some(f(r))));
        series(&mut chart, col(|r| r.offered), C_GREY, 2, d)?;
        series(&mut chart, col(|r| r.errors), C_PURPLE, 2, d)?;
        series(&mut chart, col(|r| r.timeout), C_RED, 2, d)?;
        series(&mut chart, col(|r| r.shed), C_ORANGE, 2, d)?;
        series(&mut chart, col(|r| r.ok), C_GREEN, 2, d)?;
        if rows.is_empty() {
            no_data(&chart, root, "no attempts recorded")?;
        }
        legend(root, &items)
    })
}

fn requests(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let d = fr.d;
    let max = rows
        .iter()
        .map(|r| r.outstanding.max(r.in_flight).max(r.depth))
        .fold(0.0, f64::max)
        .max(d.queue_bound.unwrap_or(0.0))
        .max(d.first_shed.map_or(0.0, |f| f.1 as f64));
    let (hi, step, ticks) = linear_axis(max);
    let mut items = vec![
        ("client outstanding".to_string(), Mark::Line(C_BLUE, 2)),
        (
            "provider in flight (service + its queue)".to_string(),
            Mark::Line(C_GREEN, 2),
        ),
        ("gateway queue depth".to_string(), Mark::Line(C_ORANGE, 3)),
    ];
    if let Some(q) = d.queue_bound {
        items.push((
            format!("Q* = {} (predicted bound)", num(q, 0)),
            Mark::Dashed(C_LIMIT),
        ));
    }
    match d.first_shed {
        Some((t, depth)) => items.push((
            format!(
                "first shed: {} waiting, {} in",
                count(depth),
                fr.x.instant(t)
            ),
            Mark::Point(C_LIMIT),
        )),
        None => items.push(("the gateway never shed".to_string(), Mark::Point(C_GREY))),
    }
    items.extend(band_items(d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(root, fr, Axis::linear(0.0, hi, ticks), "requests", &fmt)?;
        let dt = dots(fr);
        let col = |f: fn(&Row) -> f64| rows.iter().map(move |r| (r.x, Some(f(r))));
        series(&mut chart, col(|r| r.outstanding), C_BLUE, 2, dt)?;
        series(&mut chart, col(|r| r.in_flight), C_GREEN, 2, dt)?;
        series(&mut chart, col(|r| r.depth), C_ORANGE, 3, dt)?;
        if let Some(q) = d.queue_bound {
            hline(&mut chart, fr.x.span, q, C_LIMIT)?;
        }
        if let Some((t, depth)) = d.first_shed {
            chart.draw_series(DashedLineSeries::new(
                vec![(t, 0.0), (t, hi)],
                3,
                4,
                C_LIMIT.mix(0.7).stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(Circle::new(
                (t, depth as f64),
                5,
                C_LIMIT.filled(),
            )))?;
        }
        if rows.is_empty() {
            no_data(&chart, root, "no attempts recorded")?;
        }
        legend(root, &items)
    })
}

fn latency(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let d = fr.d;
    let values = rows
        .iter()
        .flat_map(|r| r.e2e.iter().chain(&r.queue_wait).chain(&r.provider))
        .filter_map(|v| *v)
        .chain(d.slo_ms);
    let (lo, hi) = values.fold((f64::INFINITY, 0f64), |(lo, hi), v| {
        (if v > 0.0 { lo.min(v) } else { lo }, hi.max(v))
    });
    // A queue wait of a few microseconds would stretch the axis over
    // decades nobody reads: start at most five decades below the top.
    let lo = lo.max(hi / 1e5);
    let (lo, hi, ticks) = log_axis(lo, hi);
    let mut items = vec![
        ("end-to-end p99".to_string(), Mark::Line(C_BLUE, 2)),
        ("end-to-end p50".to_string(), Mark::Line(C_SKY, 1)),
        (
            "queue wait (gateway) p99".to_string(),
            Mark::Line(C_ORANGE, 2),
        ),
        (
            "queue wait p50".to_string(),
            Mark::Line(RGBColor(240, 200, 110), 1),
        ),
        ("provider time p99".to_string(), Mark::Line(C_GREEN, 2)),
        (
            "provider time p50".to_string(),
            Mark::Line(RGBColor(120, 205, 170), 1),
        ),
    ];
    if let Some(slo) = d.slo_ms {
        items.push((
            format!("SLO: p99 ≤ {}", ms_label(slo)),
            Mark::Dashed(C_LIMIT),
        ));
    }
    items.extend(band_items(d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| ms_label(*v);
        let mut chart = time_chart(
            root,
            fr,
            Axis::log(lo, hi, ticks),
            "latency (log scale)",
            &fmt,
        )?;
        let dt = dots(fr);
        let clamp = move |v: Option<f64>| v.map(|v| v.clamp(lo, hi));
        let col = |f: fn(&Row) -> Option<f64>| rows.iter().map(move |r| (r.x, clamp(f(r))));
        series(
            &mut chart,
            col(|r| r.provider[0]),
            RGBColor(120, 205, 170),
            1,
            dt,
        )?;
        series(
            &mut chart,
            col(|r| r.queue_wait[0]),
            RGBColor(240, 200, 110),
            1,
            dt,
        )?;
        series(&mut chart, col(|r| r.e2e[0]), C_SKY, 1, dt)?;
        series(&mut chart, col(|r| r.provider[1]), C_GREEN, 2, dt)?;
        series(&mut chart, col(|r| r.queue_wait[1]), C_ORANGE, 2, dt)?;
        series(&mut chart, col(|r| r.e2e[1]), C_BLUE, 2, dt)?;
        if let Some(slo) = d.slo_ms {
            hline(&mut chart, fr.x.span, slo.clamp(lo, hi), C_LIMIT)?;
        }
        if hi <= 0.0
            || !rows
                .iter()
                .any(|r| r.e2e[1].is_some() || r.queue_wait[1].is_some())
        {
            no_data(&chart, root, "no latency measured")?;
        }
        legend(root, &items)
    })
}

fn memory(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let d = fr.d;
    let ceiling = d.memory_ceiling_bytes.map(|b| b as f64 / (1024.0 * 1024.0));
    let max = rows
        .iter()
        .filter_map(|r| r.rss_mib)
        .fold(0.0, f64::max)
        .max(ceiling.unwrap_or(0.0));
    let (hi, step, ticks) = linear_axis(max);
    let mut items = vec![("gateway resident memory".to_string(), Mark::Line(C_BLUE, 2))];
    if let Some(c) = ceiling {
        items.push((format!("ceiling {} MiB", num(c, 1)), Mark::Dashed(C_LIMIT)));
    }
    items.extend(band_items(d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(
            root,
            fr,
            Axis::linear(0.0, hi, ticks),
            "resident memory (MiB)",
            &fmt,
        )?;
        series(
            &mut chart,
            rows.iter().map(|r| (r.x, r.rss_mib)),
            C_BLUE,
            2,
            dots(fr),
        )?;
        if let Some(c) = ceiling {
            hline(&mut chart, fr.x.span, c, C_LIMIT)?;
        }
        if !rows.iter().any(|r| r.rss_mib.is_some()) {
            no_data(
                &chart,
                root,
                "no memory samples (the gateway was not spawned and has no RSS metric)",
            )?;
        }
        legend(root, &items)
    })
}

fn retry_after(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let max = rows
        .iter()
        .map(|r| r.drain_s.max(r.retry_after_s.unwrap_or(0.0)))
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    let mut items = vec![
        (
            "Retry-After given (median of the sheds ending in the second)".to_string(),
            Mark::Point(C_ORANGE),
        ),
        (
            "backlog drain time measured".to_string(),
            Mark::Line(C_BLUE, 2),
        ),
    ];
    items.extend(band_items(fr.d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(root, fr, Axis::linear(0.0, hi, ticks), "seconds", &fmt)?;
        series(
            &mut chart,
            rows.iter().map(|r| (r.x, Some(r.drain_s))),
            C_BLUE,
            2,
            dots(fr),
        )?;
        series(
            &mut chart,
            rows.iter().map(|r| (r.x, r.retry_after_s)),
            C_ORANGE,
            2,
            true,
        )?;
        if !rows.iter().any(|r| r.retry_after_s.is_some()) {
            no_data(&chart, root, "no Retry-After given: nothing was shed")?;
        }
        legend(root, &items)
    })
}

/// Points of an HDR percentile plot: x = 1/(1−q) on a log scale up to
/// `x_max`, y = latency in milliseconds at quantile q.
fn percentile_points(h: &Histogram<u64>, x_max: f64) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    const N: usize = 240;
    (0..=N)
        .map(|i| {
            let x = x_max.powf(i as f64 / N as f64);
            let q = 1.0 - 1.0 / x;
            (x, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .collect()
}

/// A quantile's label on the HDR plot's x axis: 1 → "0%", 10 → "90%",
/// 1000 → "99.9%".
fn quantile_label(x: f64) -> String {
    let q = (1.0 - 1.0 / x) * 100.0;
    let decimals = (x.log10().round() as i64 - 2).max(0) as usize;
    format!("{}%", num(q, decimals))
}

fn distribution(fr: &Frame) -> DrawResult<String> {
    let d = fr.d;
    let n = d.all.len().max(d.served.len()).max(10);
    // Out to where the samples end: the 1/n-th tail, rounded up to a decade.
    let x_max = 10f64.powf((n as f64).log10().ceil()).clamp(10.0, 1e6);
    let served = percentile_points(d.served, x_max);
    let all = percentile_points(d.all, x_max);
    let max = served
        .iter()
        .chain(&all)
        .map(|p| p.1)
        .chain(d.slo_ms)
        .fold(0.0, f64::max);
    let (hi, step, yticks) = linear_axis(max);
    let mut xticks = vec![1.0, 2.0];
    let mut x = 10.0;
    while x <= x_max * 1.000_001 {
        xticks.push(x);
        x *= 10.0;
    }
    let mut items = vec![
        (
            format!("served (answered attempts: {})", count(d.served.len())),
            Mark::Line(C_GREEN, 2),
        ),
        (
            format!(
                "all attempts ({}): sheds, timeouts, errors too",
                count(d.all.len())
            ),
            Mark::Line(C_BLUE, 2),
        ),
    ];
    if let Some(slo) = d.slo_ms {
        items.push((
            format!("SLO: p99 ≤ {}", ms_label(slo)),
            Mark::Dashed(C_LIMIT),
        ));
    }
    svg_document(legend_rows(&items), |root| {
        title(root, fr.title, Some("intended send to done, per attempt"))?;
        let legend_h = root.dim_in_pixel().1 - TOP - PLOT;
        let mut chart = ChartBuilder::on(root)
            .margin_top(TOP)
            .margin_bottom(legend_h)
            .margin_left(MARGIN_LEFT)
            .margin_right(MARGIN_RIGHT)
            .x_label_area_size(X_LABELS)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(Axis::log(1.0, x_max, xticks), Axis::linear(0.0, hi, yticks))?;
        let xf = |v: &f64| quantile_label(*v);
        let yf = |v: &f64| tick(*v, step);
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(C_GREY.mix(0.18))
            .axis_style(C_GREY)
            .label_style(font(12.0).color(&C_TEXT))
            .axis_desc_style(font(12.0).color(&C_TEXT))
            .x_desc("percentile (log scale of 1/(1 − q))")
            .y_desc("end-to-end latency (ms)")
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .draw()?;
        if let Some(slo) = d.slo_ms {
            chart.draw_series(DashedLineSeries::new(
                vec![(1.0, slo), (x_max, slo)],
                8,
                5,
                C_LIMIT.stroke_width(2),
            ))?;
        }
        chart.draw_series(LineSeries::new(all, C_BLUE.stroke_width(2)))?;
        chart.draw_series(LineSeries::new(served, C_GREEN.stroke_width(2)))?;
        if d.all.is_empty() {
            let (xr, yr) = chart.plotting_area().get_pixel_range();
            root.draw(&Text::new(
                "no attempts recorded",
                ((xr.start + xr.end) / 2, (yr.start + yr.end) / 2),
                font(14.0)
                    .color(&C_GREY)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
        legend(root, &items)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64) -> Second {
        Second {
            t,
            offered: 40,
            sent: 40,
            ok: 30,
            shed: 10,
            timeout: 0,
            errors: 0,
            client_outstanding: 20,
            provider_in_flight: 12,
            provider_in_service: 12,
            gateway_depth: 8,
            backlog: 8,
            e2e_p50_ms: Some(210.0),
            e2e_p99_ms: Some(1900.0),
            queue_wait_p50_ms: Some(3.0),
            queue_wait_p99_ms: Some(1700.0),
            provider_p50_ms: Some(200.0),
            provider_p99_ms: Some(1400.0),
            rss_bytes: Some(19 << 20),
            retry_after_ms: Some(1500),
            drain_s: 1.2,
        }
    }

    fn hist(values_ms: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new(3).unwrap();
        for v in values_ms {
            h.record(v * 1000).unwrap();
        }
        h
    }

    fn bands() -> Vec<Band> {
        vec![
            Band {
                from_s: 0.0,
                to_s: 2.0,
                label: "40 requests/s".into(),
                overloaded: false,
            },
            Band {
                from_s: 2.0,
                to_s: 10.0,
                label: "40 requests/s / provider 7x slower".into(),
                overloaded: true,
            },
        ]
    }

    fn render(seconds: &[Second], span_s: f64, first_shed: Option<(f64, u64)>) -> Vec<Chart> {
        let served = hist(&[200, 210, 220, 900, 1900]);
        let all = hist(&[1, 2, 200, 210, 220, 900, 1900]);
        render_all(&ChartData {
            seconds,
            span_s,
            bands: bands(),
            queue_bound: Some(245.0),
            first_shed,
            slo_ms: Some(5000.0),
            memory_ceiling_bytes: Some(256 << 20),
            events: vec![(6.2, "died".into()), (7.0, "restarted".into())],
            served: &served,
            all: &all,
        })
    }

    /// Every chart drew, and is a well-formed SVG document resvg can read.
    fn assert_drawn(charts: &[Chart]) {
        assert_eq!(charts.len(), 6);
        let ids: Vec<_> = charts.iter().map(|c| c.id).collect();
        assert_eq!(
            ids,
            [
                "traffic",
                "requests",
                "latency",
                "memory",
                "retry-after",
                "distribution"
            ]
        );
        for c in charts {
            let svg = c.svg.as_ref().unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert!(svg.starts_with("<svg"), "{}", c.id);
            assert!(svg.contains(&c.title), "{}: no title", c.id);
            let png = png(svg).unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert_eq!(&png[1..4], b"PNG");
        }
    }

    #[test]
    fn a_ten_second_run_with_sheds() {
        let seconds: Vec<_> = (0..12).map(second).collect();
        let charts = render(&seconds, 10.0, Some((2.3, 8)));
        assert_drawn(&charts);
        let requests = charts[1].svg.as_ref().unwrap();
        assert!(requests.contains("Q* = 245 (predicted bound)"));
        assert!(requests.contains("first shed: 8 waiting, 2.3 s in"));
        // Band labels above the plot, the overloaded one cut to its width
        // only if it has to be.
        assert!(requests.contains("40 requests/s / provider 7x slower"));
        // Seconds on the time axis.
        assert!(requests.contains("time since start (s)"));
        let latency = charts[2].svg.as_ref().unwrap();
        assert!(latency.contains("SLO: p99 ≤ 5 s"));
        assert!(charts[3].svg.as_ref().unwrap().contains("ceiling 256 MiB"));
        // The gateway's death and restart, on every time chart.
        for c in &charts[..5] {
            let svg = c.svg.as_ref().unwrap();
            assert!(svg.contains("gateway died at 6.2 s"), "{}", c.id);
            assert!(svg.contains("gateway restarted at 7 s"), "{}", c.id);
        }
    }

    #[test]
    fn no_sheds_at_all() {
        let seconds: Vec<_> = (0..10)
            .map(|t| Second {
                shed: 0,
                retry_after_ms: None,
                drain_s: 0.0,
                ..second(t)
            })
            .collect();
        let charts = render(&seconds, 10.0, None);
        assert_drawn(&charts);
        assert!(charts[1]
            .svg
            .as_ref()
            .unwrap()
            .contains("the gateway never shed"));
        assert!(charts[4]
            .svg
            .as_ref()
            .unwrap()
            .contains("no Retry-After given"));
    }

    #[test]
    fn a_run_that_ended_early_keeps_the_planned_axis() {
        // Records for 4 s of a 10 s schedule: the axis still runs to 10 s.
        let seconds: Vec<_> = (0..4).map(second).collect();
        let charts = render(&seconds, 10.0, Some((2.3, 8)));
        assert_drawn(&charts);
        assert!(charts[0].svg.as_ref().unwrap().contains(">\n10\n</text>"));
    }

    #[test]
    fn a_single_second_run() {
        let charts = render(&[second(0)], 0.0, None);
        assert_drawn(&charts);
        // One point per series still shows, as a dot.
        assert!(charts[0].svg.as_ref().unwrap().contains("<circle"));
    }

    #[test]
    fn an_empty_run() {
        let empty = Histogram::new(3).unwrap();
        let charts = render_all(&ChartData {
            seconds: &[],
            span_s: 0.0,
            bands: Vec::new(),
            queue_bound: None,
            first_shed: None,
            slo_ms: None,
            memory_ceiling_bytes: None,
            events: Vec::new(),
            served: &empty,
            all: &empty,
        });
        assert_drawn(&charts);
        assert!(charts[0]
            .svg
            .as_ref()
            .unwrap()
            .contains("no attempts recorded"));
        assert!(charts[3]
            .svg
            .as_ref()
            .unwrap()
            .contains("no memory samples"));
    }

    #[test]
    fn a_forty_minute_run_reads_in_minutes_and_is_bucketed() {
        let seconds: Vec<_> = (0..2400).map(second).collect();
        let charts = render(&seconds, 2400.0, Some((200.0, 245)));
        assert_drawn(&charts);
        let traffic = charts[0].svg.as_ref().unwrap();
        assert!(traffic.contains("time since start (min)"));
        assert!(traffic.contains("each point is 2 s"));
        let axis = TimeAxis::new(2400.0);
        assert_eq!(axis.step, 300.0);
        assert_eq!(axis.label(600.0), "10");
        assert!(charts[1]
            .svg
            .as_ref()
            .unwrap()
            .contains("first shed: 245 waiting, 3:20 in"));
    }

    #[test]
    fn phase_names_are_escaped_in_the_svg() {
        let served = hist(&[200]);
        let charts = render_all(&ChartData {
            seconds: &[second(0), second(1)],
            span_s: 2.0,
            bands: vec![Band {
                from_s: 0.0,
                to_s: 2.0,
                label: "<script>x</script> & co".into(),
                overloaded: false,
            }],
            queue_bound: None,
            first_shed: None,
            slo_ms: None,
            memory_ceiling_bytes: None,
            events: Vec::new(),
            served: &served,
            all: &served,
        });
        for c in &charts {
            assert!(!c.svg.as_ref().unwrap().contains("<script"), "{}", c.id);
        }
    }

    #[test]
    fn axes_tick_sensibly() {
        assert_eq!(TimeAxis::new(10.0).step, 1.0);
        assert!(TimeAxis::new(1e15).ticks.len() <= 13);
        assert_eq!(TimeAxis::new(f64::NAN).span, 1.0);
        let short = TimeAxis::new(2.0);
        assert_eq!((short.step, short.label(1.6).as_str()), (0.2, "1.6"));
        assert_eq!(TimeAxis::new(66.0).step, 10.0);
        assert_eq!(TimeAxis::new(180.0).step, 15.0);
        let a = TimeAxis::new(400.0);
        assert_eq!((a.step, a.label(90.0).as_str()), (60.0, "1"));
        let (hi, step, ticks) = linear_axis(245.0);
        assert_eq!((hi, step), (300.0, 50.0));
        assert_eq!(ticks.len(), 7);
        assert!(linear_axis(0.0).0 >= 1.0);
        let (lo, hi, ticks) = log_axis(3.0, 1900.0);
        assert_eq!((lo, hi), (1.0, 10_000.0));
        assert_eq!(ticks, [1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        let (lo, hi, ticks) = log_axis(30.0, 1900.0);
        assert_eq!((lo, hi), (10.0, 10_000.0));
        assert!(ticks.contains(&200.0));
        assert_eq!(tick(0.75, 0.25), "0.75");
        assert_eq!(tick(1.0, 0.25), "1");
        assert_eq!(tick(1.5, 0.5), "1.5");
        assert_eq!(tick(2500.0, 500.0), "2,500");
        assert_eq!(ms_label(1500.0), "1.5 s");
        assert_eq!(ms_label(0.5), "0.5 ms");
        assert_eq!(quantile_label(2.0), "50%");
        assert_eq!(quantile_label(1000.0), "99.9%");
        assert_eq!(shorten("provider 7x slower", 9), "provider…");
    }
}
