//! Drawing primitives every chart shares: layout, colours and fonts, the
//! SVG document, title and legend, and the time chart's frame (bands,
//! gateway events, mesh) with its series, dashed lines and "no data" note.

use std::error::Error;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{Axis, TimeAxis};
use super::timeline::Rows;
use super::ChartData;

/// Width of every chart, in pixels.
const WIDTH: u32 = 1000;
/// Height of a chart's title and band-label strip, above the plot area.
pub(super) const TOP: u32 = 50;
/// Height of one legend row, below the plot area.
const LEGEND_ROW: u32 = 24;
/// Height of the plot area including its axis labels.
pub(super) const PLOT: u32 = 270;
/// Width of the y axis labels and description.
pub(super) const Y_LABELS: u32 = 84;
/// Space for the x tick labels and description.
pub(super) const X_LABELS: u32 = 44;
pub(super) const MARGIN_LEFT: u32 = 8;
pub(super) const MARGIN_RIGHT: u32 = 28;

pub(super) type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

// Okabe-Ito: colours told apart by colour-blind readers too.
pub(super) const C_BLUE: RGBColor = RGBColor(0, 114, 178);
pub(super) const C_ORANGE: RGBColor = RGBColor(230, 159, 0);
pub(super) const C_GREEN: RGBColor = RGBColor(0, 158, 115);
pub(super) const C_RED: RGBColor = RGBColor(213, 94, 0);
pub(super) const C_PURPLE: RGBColor = RGBColor(204, 121, 167);
pub(super) const C_SKY: RGBColor = RGBColor(86, 180, 233);
pub(super) const C_GREY: RGBColor = RGBColor(110, 110, 110);
pub(super) const C_TEXT: RGBColor = RGBColor(34, 34, 34);
pub(super) const C_LIMIT: RGBColor = RGBColor(190, 30, 45);

pub(super) fn font(px: f64) -> FontDesc<'static> {
    // plotters' SVG backend writes font-size = size / 1.24.
    ("sans-serif", px * 1.24).into_font()
}

/// How a series shows in the legend.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    Line(RGBColor, u32),
    Dashed(RGBColor),
    Point(RGBColor),
    Band(RGBColor),
}

pub(super) struct Frame<'a> {
    pub(super) d: &'a ChartData<'a>,
    pub(super) rows: &'a Rows,
    pub(super) x: &'a TimeAxis,
    pub(super) title: &'a str,
}

pub(super) type TimeCtx<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Axis, Axis>>;

/// A stretch of a chart's plot area that says `text` when pointed at:
/// left, top, right and bottom in pixels.
pub(super) struct Tip {
    pub(super) area: (i32, i32, i32, i32),
    pub(super) text: String,
}

/// `svg` with `tips` laid over its plot: an unpainted rectangle each,
/// holding its text as an SVG `<title>`, which a browser shows as a
/// tooltip (plotters draws no such element, and the PNG copy, painting
/// nothing for them, is unchanged).
pub(super) fn with_tips(svg: String, tips: &[Tip]) -> String {
    let Some(end) = svg.rfind("</svg>") else {
        return svg;
    };
    let mut out = String::with_capacity(svg.len() + tips.len() * 160);
    out.push_str(&svg[..end]);
    out.push_str("<g class=\"tips\">\n");
    for t in tips {
        let (l, top, r, bottom) = t.area;
        let (w, h) = ((r - l).max(1), (bottom - top).max(1));
        out.push_str(&format!(
            "<rect x=\"{l}\" y=\"{top}\" width=\"{w}\" height=\"{h}\" fill=\"none\" pointer-events=\"all\"><title>{}</title></rect>\n",
            escape_xml(&t.text)
        ));
    }
    out.push_str("</g>\n");
    out.push_str(&svg[end..]);
    out
}

/// Text made safe inside an XML element.
fn escape_xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws a whole chart into an SVG string: `legend_rows` rows of legend
/// below the plot.
pub(super) fn svg_document(
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

pub(super) fn title(
    root: &DrawingArea<SVGBackend, Shift>,
    text: &str,
    note: Option<&str>,
) -> DrawResult {
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
pub(super) fn legend(
    root: &DrawingArea<SVGBackend, Shift>,
    items: &[(String, Mark)],
) -> DrawResult {
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
pub(super) fn legend_rows(items: &[(String, Mark)]) -> u32 {
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
pub(super) fn band_items(d: &ChartData) -> Vec<(String, Mark)> {
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
pub(super) fn time_chart<'a, 'b>(
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
pub(super) fn series(
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

/// Draws one series dashed (its unbroken points joined), a dot on every
/// point when there are few.
pub(super) fn dashed_series(
    chart: &mut TimeCtx<'_, '_>,
    points: impl Iterator<Item = (f64, Option<f64>)>,
    color: RGBColor,
    dots: bool,
) -> DrawResult {
    for run in runs(points) {
        if run.len() == 1 || dots {
            chart.draw_series(run.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
        if run.len() > 1 {
            chart.draw_series(DashedLineSeries::new(run, 6, 4, color.stroke_width(2)))?;
        }
    }
    Ok(())
}

/// A dashed horizontal line across the whole time axis.
pub(super) fn hline(chart: &mut TimeCtx<'_, '_>, span: f64, y: f64, color: RGBColor) -> DrawResult {
    chart.draw_series(DashedLineSeries::new(
        vec![(0.0, y), (span, y)],
        8,
        5,
        color.stroke_width(2),
    ))?;
    Ok(())
}

pub(super) fn no_data(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_are_cut_with_an_ellipsis() {
        assert_eq!(shorten("provider 7x slower", 9), "provider…");
    }
}
