//! `rehearse plan` as a person reads it: the arithmetic, by phase, at full
//! and at rehearsal scale.

use std::fmt::Write as _;

use crate::plan_sizing::exact_duration;
use wire::number::thousands;
use wire::{Figures, Plan};

/// A rate per minute, with one decimal below 100.
fn per_min(v: Option<f64>) -> String {
    match v {
        None => "unlimited".into(),
        Some(v) if v < 100.0 => format!("{v:.1}"),
        Some(v) => thousands(v),
    }
}

fn bytes(v: f64) -> String {
    bytesize::ByteSize(v.max(0.0) as u64).to_string()
}

fn duration(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
        .to_string()
}

fn render_figures(out: &mut String, f: &Figures, p: &Plan, label: &str) {
    let _ = writeln!(out, "{label}");
    let _ = writeln!(
        out,
        "  {:<32} {:>9} {:>12} {:>13} {:>11} {:>15}",
        "phase", "duration", "offered/min", "capacity/min", "served", "backlog at end"
    );
    for g in &f.phases {
        // A name longer than its column is cut: the row fits 100 columns.
        let _ = writeln!(
            out,
            "  {} {:>9} {:>12} {:>13} {:>11} {:>15}",
            crate::terminal::pad(&crate::terminal::fit(&g.name, 32), 32),
            duration(g.duration_s),
            per_min(Some(g.offered_per_min)),
            per_min(g.capacity_per_min),
            thousands(g.served),
            thousands(g.backlog_at_end),
        );
    }
    match f.drain_minutes_unbounded {
        Some(m) if f.peak_backlog >= 0.5 => {
            let text = format!(
                "The peak backlog of {} requests drains in {:.1} min at the rate that follows it, if the queue is unbounded.",
                thousands(f.peak_backlog),
                m
            );
            for line in crate::terminal::wrap(&text, crate::terminal::MAX_WIDTH, "  ", "  ") {
                let _ = writeln!(out, "{line}");
            }
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "  No backlog builds: offered load stays within capacity."
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  The backlog of {} requests never drains: the load after it stays above capacity.",
                thousands(f.peak_backlog)
            );
        }
    }
    let _ = writeln!(
        out,
        "  Answers arriving after their caller left (patience {}): {}",
        exact_duration(
            p.patience_s
                / if label.starts_with("Rehearsal") {
                    p.time_scale
                } else {
                    1.0
                }
        ),
        thousands(f.late_answers)
    );
    match (f.queue_bound_requests, f.queue_bound_tokens) {
        (Some(q), Some(t)) => {
            let _ = writeln!(
                out,
                "  Queue bound Q* = μ·(D − S): {} requests, {} tokens.",
                thousands(q),
                thousands(t)
            );
        }
        _ => {
            let _ = writeln!(out, "  Queue bound Q*: none (the provider has no limit).");
        }
    }
    let _ = writeln!(
        out,
        "  Memory an unbounded gateway would hold at the peak: {} ({} bytes per request).",
        bytes(f.unbounded_backlog_bytes),
        thousands(p.prompt_bytes)
    );
}

/// The plan as a person reads it.
pub fn render(p: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Plan for {}", p.scenario);
    let _ = writeln!(
        out,
        "  {} tokens per request; patience D {}; {} held per waiting request.",
        thousands(p.tokens_per_request),
        exact_duration(p.patience_s),
        bytes(p.prompt_bytes)
    );
    out.push('\n');
    render_figures(&mut out, &p.full, p, "Full scale");
    if p.time_scale != 1.0 || p.quota_scale != 1.0 {
        out.push('\n');
        let label = format!(
            "Rehearsal scale (quota ÷ {}, time ÷ {})",
            p.quota_scale, p.time_scale
        );
        render_figures(&mut out, &p.rehearsal, p, &label);
    }
    crate::plan_sizing::render(&mut out, p);
    fit(&out)
}

/// Every line over 100 columns wrapped at a word, its continuation
/// indented two more than it (a table's rows are cut to fit already).
fn fit(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if crate::terminal::columns(line) <= crate::terminal::MAX_WIDTH {
            let _ = writeln!(out, "{line}");
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let more = format!("{indent}  ");
        for l in crate::terminal::wrap(line.trim_start(), crate::terminal::MAX_WIDTH, indent, &more)
        {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_printed_as_they_are() {
        assert_eq!(exact_duration(2.5), "2.5s");
        assert_eq!(exact_duration(0.25), "250ms");
        assert_eq!(exact_duration(3.0), "3s");
        assert_eq!(exact_duration(90.0), "1m 30s");
        assert_eq!(exact_duration(1.2345), "1s 235ms");
    }
}
