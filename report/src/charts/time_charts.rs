//! The time charts, on the shared time axis: traffic, calls and refusals
//! per provider (several providers), where the requests are, latency,
//! gateway memory, and Retry-After against the drain time.

use plotters::prelude::*;

use super::axes::{linear_axis, log_axis, ms_label, tick, Axis};
use super::draw::{
    band_items, dashed_series, hline, legend, legend_rows, no_data, series, svg_document,
    time_chart, with_tips, DrawResult, Frame, Mark, Tip, C_BLUE, C_GREEN, C_GREY, C_LIMIT,
    C_ORANGE, C_PURPLE, C_RED, C_SKY, C_TEXT,
};
use super::timeline::Row;
use super::{count, num};
use assertions::RefusalLine;
use wire::RefusalClass;

fn dots(fr: &Frame) -> bool {
    fr.rows.rows.len() <= 40
}

/// A kind of refusal drawn apart: its label, its column, its colour.
type Kind = (String, fn(&Row) -> f64, RGBColor);

/// A kind of refusal as the legend names it: `what`, with the statuses
/// the run's refusals of `class` were answered with (`shed at admission
/// (429, 503)`), so the legend says what was seen, never a status that
/// was not.
fn named(what: &str, class: RefusalClass, refusals: &[RefusalLine]) -> String {
    let statuses: std::collections::BTreeSet<u16> = refusals
        .iter()
        .filter(|r| r.class == class && r.count > 0)
        .map(|r| r.status)
        .collect();
    if statuses.is_empty() {
        return what.to_string();
    }
    let said: Vec<String> = statuses.iter().map(u16::to_string).collect();
    format!("{what} ({})", said.join(", "))
}

/// Chart 1: offered, served and each kind of refusal per second; each
/// point, pointed at, says its calls per attempt (the provider calls made
/// for the attempts sent then, over them: what `retry_amplification`
/// judges).
pub(super) fn traffic(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let max = rows
        .iter()
        .map(|r| {
            [
                r.ok,
                r.shed,
                r.stale,
                r.tenant_limited,
                r.after_dispatch,
                r.timeout,
                r.errors,
            ]
            .into_iter()
            .fold(r.offered, f64::max)
        })
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    // The kinds of refusal apart (never summed); those that never happened
    // are left out of the legend.
    let any = |f: fn(&Row) -> f64| rows.iter().any(|r| f(r) > 0.0);
    let refusals = fr.d.refusals;
    let mut items = vec![
        ("offered".to_string(), Mark::Line(C_GREY, 2)),
        ("served (answered)".to_string(), Mark::Line(C_GREEN, 2)),
        (
            named("shed at admission", RefusalClass::AtAdmission, refusals),
            Mark::Line(C_ORANGE, 2),
        ),
    ];
    let kinds: [Kind; 3] = [
        (
            named(
                "stale (dropped after waiting)",
                RefusalClass::AtDequeue,
                refusals,
            ),
            |r| r.stale,
            C_SKY,
        ),
        (
            named(
                "tenant over its entitlement",
                RefusalClass::TenantLimited,
                refusals,
            ),
            |r| r.tenant_limited,
            C_BLUE,
        ),
        (
            named(
                "refused after dispatch",
                RefusalClass::AfterDispatch,
                refusals,
            ),
            |r| r.after_dispatch,
            C_TEXT,
        ),
    ];
    for (label, f, c) in &kinds {
        if any(*f) {
            items.push((label.clone(), Mark::Line(*c, 2)));
        }
    }
    items.push(("timed out".to_string(), Mark::Line(C_RED, 2)));
    items.push(("errors".to_string(), Mark::Line(C_PURPLE, 2)));
    items.extend(band_items(fr.d));
    let mut tips = Vec::with_capacity(rows.len());
    let svg = svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(
            root,
            fr,
            Axis::linear(0.0, hi, ticks),
            "requests per second",
            &fmt,
        )?;
        // Each point's seconds, from the axis to the top, say their calls
        // per attempt when pointed at.
        for r in rows {
            let from = r.x - r.seconds / 2.0;
            let (left, top) = chart.backend_coord(&(from, hi));
            let (right, bottom) = chart.backend_coord(&(from + r.seconds, 0.0));
            tips.push(Tip {
                area: (left, top, right, bottom),
                text: fr.rows.calls_per_attempt(r),
            });
        }
        let d = dots(fr);
        let col = |f: fn(&Row) -> f64| rows.iter().map(move |r| (r.x, Some(f(r))));
        series(&mut chart, col(|r| r.offered), C_GREY, 2, d)?;
        series(&mut chart, col(|r| r.errors), C_PURPLE, 2, d)?;
        series(&mut chart, col(|r| r.timeout), C_RED, 2, d)?;
        series(&mut chart, col(|r| r.shed), C_ORANGE, 2, d)?;
        for (_, f, c) in &kinds {
            if any(*f) {
                series(&mut chart, col(*f), *c, 2, d)?;
            }
        }
        series(&mut chart, col(|r| r.ok), C_GREEN, 2, d)?;
        if rows.is_empty() {
            no_data(&chart, root, "no attempts recorded")?;
        }
        legend(root, &items)
    })?;
    Ok(with_tips(svg, &tips))
}

/// Each provider's colour, in the scenario's order (a seventh takes the
/// first's again).
const PROVIDER_COLOURS: [RGBColor; 6] = [C_BLUE, C_ORANGE, C_GREEN, C_PURPLE, C_SKY, C_RED];

/// With several providers: each one's calls per second (solid) and, of
/// them, its refusals (429, 503, 529; dashed, same colour). Where traffic
/// moved when one browned out, and whether the gateway kept calling a
/// provider that was refusing, read off one chart.
pub(super) fn providers(fr: &Frame) -> DrawResult<String> {
    let ps = fr.d.providers;
    // Each provider's calls and refusals, at the rows' points.
    type Points = Vec<(f64, f64)>;
    let points: Vec<(Points, Points)> = ps
        .iter()
        .map(|p| {
            (
                fr.rows.per_second(&p.calls),
                fr.rows.per_second(&p.refusals),
            )
        })
        .collect();
    let max = points
        .iter()
        .flat_map(|(c, r)| c.iter().chain(r))
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    let colour = |i: usize| PROVIDER_COLOURS[i % PROVIDER_COLOURS.len()];
    let mut items = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        items.push((format!("{}: calls", p.name), Mark::Line(colour(i), 2)));
        items.push((
            format!("{}: refused (429, 503, 529)", p.name),
            Mark::Dashed(colour(i)),
        ));
    }
    items.extend(band_items(fr.d));
    svg_document(legend_rows(&items), |root| {
        let fmt = |v: &f64| tick(*v, step);
        let mut chart = time_chart(
            root,
            fr,
            Axis::linear(0.0, hi, ticks),
            "provider calls per second",
            &fmt,
        )?;
        let d = dots(fr);
        for (i, (calls, refusals)) in points.iter().enumerate() {
            let some = |&(x, y): &(f64, f64)| (x, Some(y));
            series(&mut chart, calls.iter().map(some), colour(i), 2, d)?;
            dashed_series(&mut chart, refusals.iter().map(some), colour(i), d)?;
        }
        if points.iter().all(|(c, _)| c.iter().all(|p| p.1 == 0.0)) {
            no_data(&chart, root, "no provider calls recorded")?;
        }
        legend(root, &items)
    })
}

pub(super) fn requests(fr: &Frame) -> DrawResult<String> {
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

pub(super) fn latency(fr: &Frame) -> DrawResult<String> {
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

pub(super) fn memory(fr: &Frame) -> DrawResult<String> {
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

/// Chart 5: the Retry-After given, each kind of refusal apart as the
/// judge classes it (the gateway's own sheds, which `retry_after` judges
/// against the drain time; the provider's refusals it relayed), against
/// the backlog drain time measured.
pub(super) fn retry_after(fr: &Frame) -> DrawResult<String> {
    let rows = &fr.rows.rows;
    let max = rows
        .iter()
        .map(|r| {
            r.drain_s
                .max(r.retry_after_s.unwrap_or(0.0))
                .max(r.relayed_retry_after_s.unwrap_or(0.0))
        })
        .fold(0.0, f64::max);
    let (hi, step, ticks) = linear_axis(max);
    let own = rows.iter().any(|r| r.retry_after_s.is_some());
    let relayed = rows.iter().any(|r| r.relayed_retry_after_s.is_some());
    let mut items = Vec::new();
    if own {
        items.push((
            "Retry-After of the gateway's own sheds (median of those ending in the second)"
                .to_string(),
            Mark::Point(C_ORANGE),
        ));
    } else if relayed {
        items.push((
            "the gateway shed nothing of its own".to_string(),
            Mark::Point(C_GREY),
        ));
    }
    if relayed {
        items.push((
            "Retry-After relayed from the provider's refusals (median of those ending in the second)"
                .to_string(),
            Mark::Point(C_PURPLE),
        ));
    }
    items.push((
        "backlog drain time measured".to_string(),
        Mark::Line(C_BLUE, 2),
    ));
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
            rows.iter().map(|r| (r.x, r.relayed_retry_after_s)),
            C_PURPLE,
            2,
            true,
        )?;
        series(
            &mut chart,
            rows.iter().map(|r| (r.x, r.retry_after_s)),
            C_ORANGE,
            2,
            true,
        )?;
        if !own && !relayed {
            no_data(&chart, root, "no Retry-After given: nothing was shed")?;
        }
        legend(root, &items)
    })
}
