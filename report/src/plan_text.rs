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
    render_providers(&mut out, p);
    crate::plan_sizing::render(&mut out, p);
    fit(&out)
}

/// With several providers: each one's timeline (its quota, its ceiling,
/// its capacity and service time, phase by phase, full scale), their sum
/// (the capacity column above), and each trouble with what the others
/// serve meanwhile: what a failover gateway can serve while it is down.
fn render_providers(out: &mut String, p: &Plan) {
    if p.providers.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nProviders (full scale; the capacity above is theirs summed, one refusing every call counting none)"
    );
    let _ = writeln!(
        out,
        "  {:<32} {:>7} {:>9} {:>11} {:>11} {:>12} {:>9}",
        "provider / phase",
        "from",
        "duration",
        "quota/min",
        "ceiling/min",
        "capacity/min",
        "service"
    );
    for prov in &p.providers {
        for ph in &prov.phases {
            let name = format!("{} / {}", prov.name, ph.phase);
            let _ = writeln!(
                out,
                "  {} {:>7} {:>9} {:>11} {:>11} {:>12} {:>9}",
                crate::terminal::pad(&crate::terminal::fit(&name, 32), 32),
                duration(ph.start_s),
                duration(ph.duration_s),
                per_min(ph.quota_per_min),
                per_min(ph.ceiling_per_min),
                per_min(ph.capacity_per_min),
                exact_duration((ph.service_s * 1000.0).round() / 1000.0),
            );
        }
    }
    for t in &p.troubles {
        let text = format!(
            "{} in trouble from {} for {} ({}): a failover gateway can serve {}/min meanwhile ({} offered, the others' capacity {}).",
            t.provider,
            duration(t.start_s),
            duration(t.duration_s),
            t.why,
            per_min(Some(t.servable_per_min())),
            per_min(Some(t.offered_per_min)),
            per_min(t.others_per_min),
        );
        for line in crate::terminal::wrap(&text, crate::terminal::MAX_WIDTH, "  ", "    ") {
            let _ = writeln!(out, "{line}");
        }
    }
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
    fn several_providers_are_listed_phase_by_phase_with_their_troubles() {
        let mut p = Plan {
            scenario: "f".into(),
            ..Plan::default()
        };
        assert!(!render(&p).contains("Providers"), "one provider: as it was");
        let phase =
            |name: &str, start_s: f64, capacity: f64, trouble: Option<&str>| wire::ProviderPhase {
                phase: name.into(),
                start_s,
                duration_s: 60.0,
                quota_per_min: Some(416.7),
                ceiling_per_min: None,
                capacity_per_min: Some(capacity),
                service_s: 1.15,
                trouble: trouble.map(str::to_string),
            };
        p.providers = vec![
            wire::ProviderPlan {
                name: "primary".into(),
                phases: vec![
                    phase("base", 0.0, 416.7, None),
                    phase("slow", 60.0, 416.7, Some("7.0x slower")),
                ],
            },
            wire::ProviderPlan {
                name: "secondary".into(),
                phases: vec![phase("base", 0.0, 208.3, None)],
            },
        ];
        p.troubles = vec![wire::Trouble {
            provider: "primary".into(),
            why: "7.0x slower".into(),
            start_s: 60.0,
            duration_s: 60.0,
            others_per_min: Some(208.3),
            offered_per_min: 300.0,
        }];
        let text = render(&p);
        assert!(text.contains("primary / slow"), "{text}");
        assert!(text.contains("secondary / base"), "{text}");
        assert!(
            text.contains("primary in trouble from 1m for 1m (7.0x slower): a failover gateway can serve 208/min"),
            "{text}"
        );
        assert!(
            text.lines()
                .all(|l| crate::terminal::columns(l) <= crate::terminal::MAX_WIDTH),
            "{text}"
        );
    }

    #[test]
    fn durations_are_printed_as_they_are() {
        assert_eq!(exact_duration(2.5), "2.5s");
        assert_eq!(exact_duration(0.25), "250ms");
        assert_eq!(exact_duration(3.0), "3s");
        assert_eq!(exact_duration(90.0), "1m 30s");
        assert_eq!(exact_duration(1.2345), "1s 235ms");
    }
}
