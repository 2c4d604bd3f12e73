//! `calibrate.html`'s charts: latency and throughput against concurrency,
//! one point per level of the sweep, with the knee (a dashed vertical line,
//! "knee ≈ N") and the recommended limit (a solid one) marked on both.
//!
//! The x axis is linear from zero, so the throughput chart's no-queueing
//! line (X = n ÷ the flat part's latency) is a straight line from the
//! origin, and the knee reads as where it meets the plateau.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{linear_axis, ms_label, tick, Axis};
use super::draw::{
    font, hline, legend, legend_rows, no_data, series, svg_document, title, DrawResult, Mark,
    TimeCtx, C_BLUE, C_GREEN, C_GREY, C_LIMIT, C_ORANGE, C_PURPLE, C_SKY, C_TEXT, MARGIN_LEFT,
    MARGIN_RIGHT, PLOT, TOP, X_LABELS, Y_LABELS,
};
use super::num;
use crate::calibration::{Calibration, CalibrationLevel};

/// A count of calls as the charts print it: `32`, `31.5`.
fn calls(n: f64) -> String {
    num(n, 1)
}

/// The x axis: concurrency from zero to the highest level, knee or limit.
fn x_axis(c: &Calibration, levels: &[&CalibrationLevel]) -> (Axis, f64) {
    let max = levels
        .iter()
        .map(|l| l.concurrency as f64)
        .chain(c.knee)
        .chain(c.recommended_limit.map(|n| n as f64))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    (Axis::linear(0.0, hi, ticks), step)
}

/// The knee's and the recommended limit's legend items.
fn marker_items(c: &Calibration) -> Vec<(String, Mark)> {
    let mut items = Vec::new();
    if let Some(k) = c.knee.filter(|k| k.is_finite()) {
        items.push((
            format!("knee ≈ {} calls in flight", calls(k)),
            Mark::Dashed(C_LIMIT),
        ));
    }
    if let Some(n) = c.recommended_limit {
        items.push((
            format!("recommended limit: {n} calls in flight"),
            Mark::Line(C_GREEN, 2),
        ));
    }
    items
}

/// The plot area on `root`, below the title and above the legend, with
/// its mesh and axes drawn.
fn plot<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    (x, x_step): (Axis, f64),
    y: Axis,
    y_desc: &str,
    y_fmt: &dyn Fn(&f64) -> String,
) -> DrawResult<TimeCtx<'a, 'b>> {
    let legend_h = root.dim_in_pixel().1 - TOP - PLOT;
    let mut chart = ChartBuilder::on(root)
        .margin_top(TOP)
        .margin_bottom(legend_h)
        .margin_left(MARGIN_LEFT)
        .margin_right(MARGIN_RIGHT)
        .x_label_area_size(X_LABELS)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(x, y)?;
    let x_fmt = |v: &f64| tick(*v, x_step);
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(C_GREY.mix(0.18))
        .axis_style(C_GREY)
        .label_style(font(12.0).color(&C_TEXT))
        .axis_desc_style(font(12.0).color(&C_TEXT))
        .x_desc("concurrency (calls in flight, closed loop)")
        .y_desc(y_desc)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(y_fmt)
        .draw()?;
    Ok(chart)
}

/// Which side of its line a vertical line's label sits on.
#[derive(Clone, Copy)]
enum Side {
    Left,
    Right,
}

/// A vertical line across the plot at `x`, labelled at its top.
fn vline(
    chart: &mut TimeCtx<'_, '_>,
    root: &DrawingArea<SVGBackend, Shift>,
    x: f64,
    (color, dashed): (RGBColor, bool),
    label: &str,
    side: Side,
) -> DrawResult {
    let (ylo, yhi) = {
        let r = chart.y_range();
        (r.start, r.end)
    };
    let line = vec![(x, ylo), (x, yhi)];
    if dashed {
        chart.draw_series(DashedLineSeries::new(line, 8, 5, color.stroke_width(2)))?;
    } else {
        chart.draw_series(LineSeries::new(line, color.stroke_width(2)))?;
    }
    let (px, py) = chart.backend_coord(&(x, yhi));
    let (dx, h) = match side {
        Side::Left => (-5, HPos::Right),
        Side::Right => (5, HPos::Left),
    };
    root.draw(&Text::new(
        label.to_string(),
        (px + dx, py + 4),
        font(12.0).color(&color).pos(Pos::new(h, VPos::Top)),
    ))?;
    Ok(())
}

/// The knee and the recommended limit as vertical lines, or a sentence
/// at the top of the plot when the sweep found no knee.
fn markers(
    chart: &mut TimeCtx<'_, '_>,
    root: &DrawingArea<SVGBackend, Shift>,
    c: &Calibration,
) -> DrawResult {
    if let Some(n) = c.recommended_limit {
        vline(
            chart,
            root,
            n as f64,
            (C_GREEN, false),
            &format!("limit {n}"),
            Side::Left,
        )?;
    }
    match c.knee.filter(|k| k.is_finite()) {
        Some(k) => vline(
            chart,
            root,
            k,
            (C_LIMIT, true),
            &format!("knee ≈ {}", calls(k)),
            Side::Right,
        ),
        None => {
            let (xr, yr) = chart.plotting_area().get_pixel_range();
            root.draw(&Text::new(
                "no knee found within the sweep",
                ((xr.start + xr.end) / 2, yr.start + 8),
                font(13.0)
                    .color(&C_GREY)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))?;
            Ok(())
        }
    }
}

/// A percentile drawn on the latency chart: its name, its value per level,
/// its colour.
type Percentile = (&'static str, fn(&CalibrationLevel) -> Option<f64>, RGBColor);

/// The latency chart: p50, p90 and p99 per level, the flat part's latency.
pub(super) fn latency_curve(c: &Calibration, title_text: &str) -> DrawResult<String> {
    let levels = c.levels_by_concurrency();
    let percentiles: [Percentile; 3] = [
        ("p99", |l| l.p99_ms, C_BLUE),
        ("p90", |l| l.p90_ms, C_PURPLE),
        ("p50", |l| l.p50_ms, C_SKY),
    ];
    let flat = c.flat_latency_ms.filter(|v| v.is_finite() && *v > 0.0);
    let max = levels
        .iter()
        .flat_map(|l| [l.p50_ms, l.p90_ms, l.p99_ms])
        .flatten()
        .chain(flat)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (hi, _, ticks) = linear_axis(max);
    let mut items: Vec<(String, Mark)> = percentiles
        .iter()
        .map(|(name, _, color)| (format!("{name} per level"), Mark::Line(*color, 2)))
        .collect();
    if let Some(f) = flat {
        items.push((format!("flat part: {}", ms_label(f)), Mark::Dashed(C_GREY)));
    }
    items.extend(marker_items(c));
    svg_document(legend_rows(&items), |root| {
        title(root, title_text, Some("latency of the answers, per level"))?;
        let fmt = |v: &f64| ms_label(*v);
        let x = x_axis(c, &levels);
        let x_hi = x.0.hi;
        let mut chart = plot(root, x, Axis::linear(0.0, hi, ticks), "latency (ms)", &fmt)?;
        if let Some(f) = flat {
            hline(&mut chart, x_hi, f, C_GREY)?;
        }
        for (_, value, color) in percentiles.iter().rev() {
            let points = levels.iter().map(|l| (l.concurrency as f64, value(l)));
            series(&mut chart, points, *color, 2, true)?;
        }
        if levels.is_empty() {
            no_data(&chart, root, "no level measured")?;
        } else if max <= 0.0 {
            no_data(&chart, root, "no answer at any level")?;
        } else {
            markers(&mut chart, root, c)?;
        }
        legend(root, &items)
    })
}

/// The throughput chart: answers per second per level, the plateau, and
/// the no-queueing line from the origin (n ÷ the flat part's latency).
pub(super) fn throughput_curve(c: &Calibration, title_text: &str) -> DrawResult<String> {
    let levels = c.levels_by_concurrency();
    let plateau = c.plateau_per_s.filter(|v| v.is_finite() && *v > 0.0);
    let flat_s = c
        .flat_latency_ms
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|ms| ms / 1000.0);
    let max = levels
        .iter()
        .map(|l| l.throughput_per_s)
        .chain(plateau)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    let mut items = vec![(
        "answers per second, per level".to_string(),
        Mark::Line(C_BLUE, 2),
    )];
    if let Some(p) = plateau {
        items.push((format!("plateau ≈ {}/s", num(p, 1)), Mark::Dashed(C_ORANGE)));
    }
    if let Some(f) = flat_s {
        items.push((
            format!("no queueing: n ÷ flat latency ({})", ms_label(f * 1000.0)),
            Mark::Dashed(C_PURPLE),
        ));
    }
    items.extend(marker_items(c));
    let note = if plateau.is_some() && flat_s.is_some() {
        "where the no-queueing line meets the plateau, queueing begins"
    } else {
        "answers per second, per level"
    };
    svg_document(legend_rows(&items), |root| {
        title(root, title_text, Some(note))?;
        let fmt = |v: &f64| tick(*v, step);
        let x = x_axis(c, &levels);
        let x_hi = x.0.hi;
        let mut chart = plot(
            root,
            x,
            Axis::linear(0.0, hi, ticks),
            "answers per second",
            &fmt,
        )?;
        if let Some(p) = plateau {
            hline(&mut chart, x_hi, p, C_ORANGE)?;
        }
        if let Some(f) = flat_s {
            // X = n / f, clipped where it leaves the plot.
            let end = x_hi.min(hi * f);
            chart.draw_series(DashedLineSeries::new(
                vec![(0.0, 0.0), (end, end / f)],
                8,
                5,
                C_PURPLE.stroke_width(2),
            ))?;
        }
        let points = levels
            .iter()
            .map(|l| (l.concurrency as f64, Some(l.throughput_per_s)));
        series(&mut chart, points, C_BLUE, 2, true)?;
        if levels.is_empty() {
            no_data(&chart, root, "no level measured")?;
        } else {
            markers(&mut chart, root, c)?;
        }
        legend(root, &items)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::tests::knee_at_32;
    use crate::charts::{png, render_curves, Chart};

    /// Both curves drew, are SVG documents resvg reads, and have their
    /// titles.
    fn assert_drawn(charts: &[Chart]) -> (&str, &str) {
        let ids: Vec<_> = charts.iter().map(|c| c.id).collect();
        assert_eq!(ids, ["latency-curve", "throughput-curve"]);
        for c in charts {
            let svg = c.svg.as_ref().unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert!(svg.starts_with("<svg"), "{}", c.id);
            assert!(svg.contains(&c.title), "{}: no title", c.id);
            let png = png(svg).unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert_eq!(&png[1..4], b"PNG");
        }
        (
            charts[0].svg.as_deref().unwrap(),
            charts[1].svg.as_deref().unwrap(),
        )
    }

    #[test]
    fn a_sweep_with_its_knee_at_32() {
        let c = knee_at_32();
        let charts = render_curves(&c);
        let (latency, throughput) = assert_drawn(&charts);
        for svg in [latency, throughput] {
            assert!(svg.contains("knee ≈ 32"));
            assert!(svg.contains("limit 24"));
            assert!(svg.contains("concurrency (calls in flight, closed loop)"));
            // A marker on every level.
            assert!(svg.matches("<circle").count() >= c.levels.len());
        }
        assert!(latency.contains("Latency against concurrency"));
        assert!(latency.contains("p99 per level") && latency.contains("flat part: 50 ms"));
        assert!(throughput.contains("Throughput against concurrency"));
        assert!(throughput.contains("plateau ≈ 640/s"));
        assert!(throughput.contains("no queueing: n ÷ flat latency (50 ms)"));
        assert!(!throughput.contains("no knee found"));
    }

    #[test]
    fn the_no_queueing_line_meets_the_plateau_at_the_knee() {
        // X = n ÷ 50 ms reaches 640/s at n = 32: the figures the chart
        // draws its two dashed lines from.
        let c = knee_at_32();
        let flat_s = c.flat_latency_ms.unwrap() / 1000.0;
        assert_eq!(c.plateau_per_s.unwrap() * flat_s, c.knee.unwrap());
    }

    #[test]
    fn a_sweep_without_a_knee_or_levels_still_draws() {
        let mut c = knee_at_32();
        c.levels.truncate(5);
        c.knee = None;
        c.recommended_limit = None;
        let charts = render_curves(&c);
        let (latency, throughput) = assert_drawn(&charts);
        for svg in [latency, throughput] {
            assert!(svg.contains("no knee found within the sweep"));
            assert!(!svg.contains("knee ≈"));
        }
        let empty = Calibration::default();
        let charts = render_curves(&empty);
        let (latency, throughput) = assert_drawn(&charts);
        for svg in [latency, throughput] {
            assert!(svg.contains("no level measured"));
        }
        // Levels with no answer at all: no latency to draw.
        let mut refused = knee_at_32();
        for l in &mut refused.levels {
            (l.p50_ms, l.p90_ms, l.p99_ms) = (None, None, None);
            l.throughput_per_s = 0.0;
        }
        refused.flat_latency_ms = None;
        refused.plateau_per_s = None;
        let charts = render_curves(&refused);
        let (latency, _) = assert_drawn(&charts);
        assert!(latency.contains("no answer at any level"));
    }

    #[test]
    fn counts_of_calls_read_plainly() {
        assert_eq!(calls(32.0), "32");
        assert_eq!(calls(31.54), "31.5");
    }
}
