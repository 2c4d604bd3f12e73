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
    // With a backlog, its lines are a gateway's that holds requests, and
    // a pass-through gateway's are said beside them.
    let holds = f.peak_backlog >= 0.5;
    let at = if holds {
        let _ = writeln!(
            out,
            "  For a gateway that holds requests (queues what the provider cannot take yet):"
        );
        "    "
    } else {
        "  "
    };
    let drain = match f.drain_minutes_unbounded {
        Some(m) if holds => format!(
            "The peak backlog of {} requests drains in {:.1} min at the rate that follows it, if the queue is unbounded.",
            thousands(f.peak_backlog),
            m
        ),
        Some(_) => "No backlog builds: offered load stays within capacity.".into(),
        None => format!(
            "The backlog of {} requests never drains: the load after it stays above capacity.",
            thousands(f.peak_backlog)
        ),
    };
    let patience = p.patience_s
        / if label.starts_with("Rehearsal") {
            p.time_scale
        } else {
            1.0
        };
    for text in [
        drain,
        format!(
            "Answers arriving after their caller left (patience {}): {}",
            exact_duration(patience),
            thousands(f.late_answers)
        ),
        format!(
            "Memory an unbounded gateway would hold at the peak: {} ({} bytes per request).",
            bytes(f.unbounded_backlog_bytes),
            thousands(p.prompt_bytes)
        ),
    ] {
        let more = format!("{at}  ");
        for line in crate::terminal::wrap(&text, crate::terminal::MAX_WIDTH, at, &more) {
            let _ = writeln!(out, "{line}");
        }
    }
    if holds {
        render_passthrough(out, f);
    }
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
}

/// Beside the backlog a gateway that holds requests builds: what a
/// pass-through gateway (each request sent on at once) gets instead, the
/// provider's refusals relayed and nothing waiting; or, past a ceiling
/// with a queue or a knee, the calls waiting at the provider it holds open.
fn render_passthrough(out: &mut String, f: &Figures) {
    let arrivals: f64 = f
        .phases
        .iter()
        .map(|g| g.offered_per_min * g.duration_s / 60.0)
        .sum();
    let refused = if f.passthrough_refused >= 0.5 {
        format!(
            "the provider refuses {} of the {} arrivals at once ({:.0}%), relayed to the callers",
            thousands(f.passthrough_refused),
            thousands(arrivals),
            100.0 * f.passthrough_refused / arrivals.max(1.0)
        )
    } else {
        String::new()
    };
    let text = if f.passthrough_peak_waiting >= 0.5 {
        format!(
            "the provider queues what it cannot take: up to {} calls wait there, each held open by the gateway{}{refused}.",
            thousands(f.passthrough_peak_waiting),
            if refused.is_empty() { "" } else { "; " },
        )
    } else {
        format!(
            "nothing waits (no backlog, no drain, no memory but the calls in service){}{refused}.",
            if refused.is_empty() { "" } else { ": " },
        )
    };
    let _ = writeln!(
        out,
        "  For a pass-through gateway (each request sent on at once, the provider's refusals relayed):"
    );
    for line in crate::terminal::wrap(&text, crate::terminal::MAX_WIDTH, "    ", "      ") {
        let _ = writeln!(out, "{line}");
    }
}

/// [`render_replay`] alone: what `rehearse run` says of a replayed log
/// before its load starts, as `rehearse plan` says it.
pub fn replay_text(r: &wire::ReplayPlan) -> String {
    let mut out = String::new();
    render_replay(&mut out, r);
    out
}

/// A replayed log as read, and what playing it N times over by
/// `multiply` or by `speedup` does to the provider's per-minute quota.
fn render_replay(out: &mut String, r: &wire::ReplayPlan) {
    let clock = match r.format.as_str() {
        "azure" => "datetimes".to_string(),
        _ => format!("numeric timestamps in {}", r.unit),
    };
    let failed = match (r.failed, r.failed_dropped) {
        (0, _) => String::new(),
        (n, true) => format!("; {} failed requests dropped", thousands(n as f64)),
        (n, false) => format!("; {} failed requests among them", thousands(n as f64)),
    };
    let _ = writeln!(
        out,
        "Replayed log ({}, {clock}): {} rows over {}{failed}",
        r.format,
        thousands(r.rows as f64),
        exact_duration(r.span_s.round())
    );
    let _ = writeln!(
        out,
        "  {:.2} requests/s on average, {:.2}/s in its busiest minute",
        r.mean_per_s, r.peak_minute_per_s
    );
    let sizes = |name: &str, p: Option<(u32, u32)>| {
        p.map(|(a, b)| {
            format!(
                "{name} p50 {}, p99 {}",
                thousands(f64::from(a)),
                thousands(f64::from(b))
            )
        })
    };
    let given: Vec<String> = [
        sizes("prompt tokens", r.prompt_tokens),
        sizes("max_tokens", r.max_tokens),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !given.is_empty() {
        let _ = writeln!(out, "  {}", given.join("; "));
    }
    let quota = r
        .quota_per_min
        .map_or("no requests-per-minute quota".to_string(), |q| {
            format!("a quota of {} requests a minute", thousands(q))
        });
    let _ = writeln!(
        out,
        "  Played {}x (speedup {} x multiply {}), against {quota}:",
        r.times, r.speedup, r.multiply
    );
    let against = |peak: f64| {
        r.quota_per_min
            .filter(|q| *q > 0.0)
            .map_or(String::new(), |q| format!(", {:.2}x the quota", peak / q))
    };
    let _ = writeln!(
        out,
        "    by multiply (copies at the log's pace): {} in the busiest minute{}",
        thousands(r.peak_per_min_multiplied.round()),
        against(r.peak_per_min_multiplied)
    );
    let _ = writeln!(
        out,
        "    by speedup (a run minute holds {} log minutes): {} in the busiest minute{}",
        r.times,
        thousands(r.peak_per_min_sped_up.round()),
        against(r.peak_per_min_sped_up)
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
    if let Some(r) = &p.replay {
        render_replay(&mut out, r);
        out.push('\n');
    }
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
    render_clients(&mut out, p);
    crate::plan_sizing::render(&mut out, p);
    fit(&out)
}

/// The callers' connection model (`[load.clients]`) and what the target
/// sees of it at the peak, at rehearsal scale; nothing for a plan written
/// before it.
fn render_clients(out: &mut String, p: &Plan) {
    let c = &p.clients;
    if c.model.is_empty() {
        return;
    }
    let callers = format!(
        "at the peak about {} callers wait for an answer at once",
        thousands(c.peak_callers)
    );
    let mut text = if c.model == "pool" {
        let past = c.peak_callers - c.limit as f64;
        let wait = if past >= 0.5 {
            format!(
                "the target sees the {} connections, and about {} callers wait in the client for one (their client_wait_us, in their latency)",
                thousands(c.limit as f64),
                thousands(past)
            )
        } else {
            format!(
                "the target sees about {} of the connections",
                thousands(c.peak_connections)
            )
        };
        format!(
            "pool: the callers share {} keep-alive connections; {callers}: {wait}.",
            thousands(c.limit as f64)
        )
    } else {
        let why = match c.time_in_system_s {
            Some(t) => format!(
                "the peak's rate × {} ms expected at the target, with room: past it a caller waits in the client",
                if t < 0.01 {
                    format!("{:.2}", t * 1e3)
                } else {
                    format!("{:.0}", t * 1e3)
                }
            ),
            None => "the peak's rate × the callers' mean patience, with room".to_owned(),
        };
        format!(
            "per caller: one with no idle connection opens one, up to {} open ({why}); {callers}: the target sees about {} connections.",
            thousands(c.limit as f64),
            thousands(c.peak_connections)
        )
    };
    if let Some(r) = c.connect_rate_per_s {
        text.push_str(&format!(
            " At most {} new connections a second: past it a caller waits in the client.",
            thousands(r)
        ));
    }
    let _ = writeln!(out, "\nClients (rehearsal scale)");
    for line in crate::terminal::wrap(&text, crate::terminal::MAX_WIDTH, "  ", "    ") {
        let _ = writeln!(out, "{line}");
    }
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
    fn the_clients_model_is_said_with_what_the_target_sees_at_the_peak() {
        let mut p = Plan {
            scenario: "f".into(),
            ..Plan::default()
        };
        assert!(!render(&p).contains("Clients"), "a plan from before");
        p.clients = wire::ClientsPlan {
            model: "per caller".into(),
            limit: 1_506,
            connect_rate_per_s: None,
            time_in_system_s: None,
            peak_callers: 50.0,
            peak_connections: 50.0,
        };
        let text = render(&p);
        assert!(text.contains("per caller"), "{text}");
        assert!(text.contains("up to 1,506 open"), "{text}");
        assert!(text.contains("mean patience"), "{text}");
        assert!(text.contains("sees about 50 connections"), "{text}");
        p.clients.time_in_system_s = Some(0.5);
        let text = render(&p);
        assert!(text.contains("× 500 ms"), "{text}");
        assert!(text.contains("waits in the client"), "{text}");
        p.clients = wire::ClientsPlan {
            model: "pool".into(),
            limit: 20,
            connect_rate_per_s: Some(5.0),
            time_in_system_s: None,
            peak_callers: 50.0,
            peak_connections: 20.0,
        };
        let text = render(&p);
        assert!(text.contains("share 20 keep-alive connections"), "{text}");
        assert!(
            text.contains("about 30 callers wait in the client"),
            "{text}"
        );
        assert!(
            text.contains("At most 5 new connections a second"),
            "{text}"
        );
    }

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

    /// The backlog, drain and memory lines say they are a holding
    /// gateway's; beside them, a pass-through gateway's: the refusals
    /// relayed and nothing waiting, or the calls waiting at a provider
    /// that queues. Without a backlog, neither.
    #[test]
    fn the_backlog_is_said_to_be_a_holding_gateways_beside_a_pass_through() {
        let segment = |offered: f64, backlog: f64| wire::Segment {
            name: "peak".into(),
            duration_s: 600.0,
            offered_per_min: offered,
            capacity_per_min: Some(400.0),
            backlog_at_end: backlog,
            ..wire::Segment::default()
        };
        let mut p = Plan {
            scenario: "f".into(),
            time_scale: 1.0,
            quota_scale: 1.0,
            ..Plan::default()
        };
        p.full.phases = vec![segment(1000.0, 6000.0)];
        p.full.peak_backlog = 6000.0;
        p.full.drain_minutes_unbounded = Some(30.0);
        p.full.passthrough_refused = 6000.0;
        let text = render(&p);
        let holding = text.find("For a gateway that holds requests").expect(&text);
        let backlog = text.find("The peak backlog of 6,000").expect(&text);
        let memory = text.find("Memory an unbounded gateway").expect(&text);
        let pass = text.find("For a pass-through gateway").expect(&text);
        assert!(
            holding < backlog && backlog < memory && memory < pass,
            "{text}"
        );
        // A wrapped line read as one.
        let flat = text.replace("\n      ", " ");
        assert!(
            flat.contains("nothing waits (no backlog, no drain, no memory but the calls in service): the provider refuses 6,000 of the 10,000 arrivals at once (60%)"),
            "{text}"
        );
        p.full.passthrough_refused = 0.0;
        p.full.passthrough_peak_waiting = 6000.0;
        let text = render(&p);
        assert!(text.contains("up to 6,000 calls wait there"), "{text}");
        p.full.phases = vec![segment(300.0, 0.0)];
        p.full.peak_backlog = 0.0;
        let text = render(&p);
        assert!(text.contains("No backlog builds"), "{text}");
        assert!(
            !text.contains("pass-through") && !text.contains("holds requests"),
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

    #[test]
    fn a_replayed_log_is_shown_with_both_scalings_against_the_quota() {
        let mut p = Plan {
            scenario: "t".into(),
            ..Plan::default()
        };
        assert!(!render(&p).contains("Replayed log"), "no replay: as it was");
        p.replay = Some(wire::ReplayPlan {
            format: "burstgpt".into(),
            unit: "s".into(),
            rows: 445,
            failed: 34,
            failed_dropped: true,
            span_s: 598.0,
            mean_per_s: 0.74,
            peak_minute_per_s: 2.1,
            prompt_tokens: Some((600, 5000)),
            max_tokens: Some((220, 1300)),
            speedup: 1.0,
            multiply: 10.0,
            times: 10.0,
            peak_per_min_multiplied: 1260.0,
            peak_per_min_sped_up: 445.0,
            quota_per_min: Some(600.0),
        });
        let text = render(&p);
        for want in [
            "Replayed log (burstgpt, numeric timestamps in s): 445 rows over 9m 58s; 34 failed requests dropped",
            "prompt tokens p50 600, p99 5,000; max_tokens p50 220, p99 1,300",
            "Played 10x (speedup 1 x multiply 10), against a quota of 600 requests a minute:",
            "by multiply (copies at the log's pace): 1,260 in the busiest minute, 2.10x the quota",
            "by speedup (a run minute holds 10 log minutes): 445 in the busiest minute, 0.74x the quota",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    }
}
