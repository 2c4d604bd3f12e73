//! Chart 6: the distribution of end-to-end latency as an HDR percentile
//! plot, served attempts against all of them, with the SLO.

use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{linear_axis, ms_label, tick, Axis};
use super::draw::{
    font, legend, legend_rows, svg_document, title, DrawResult, Frame, Mark, C_BLUE, C_GREEN,
    C_GREY, C_LIMIT, C_TEXT, MARGIN_LEFT, MARGIN_RIGHT, PLOT, TOP, X_LABELS, Y_LABELS,
};
use super::{count, num};

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

pub(super) fn distribution(fr: &Frame) -> DrawResult<String> {
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

    #[test]
    fn quantiles_read_as_percentages() {
        assert_eq!(quantile_label(2.0), "50%");
        assert_eq!(quantile_label(1000.0), "99.9%");
    }
}
