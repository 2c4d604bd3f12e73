//! The plan's second half as a person reads it: overload from latency and
//! memory, the gateway's knobs, and what the event costs. Every line fits
//! in 100 columns.

use std::fmt::Write as _;

use wire::number::thousands;
use wire::Plan;

/// A duration as exactly as it is: `2.5s`, `250ms`, `1m 30s`, `28days`.
pub(crate) fn exact_duration(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs > 0.0 && secs < 60.0 && (secs * 1000.0).fract().abs() < 1e-6 && secs.fract() != 0.0 {
        if secs < 1.0 {
            return format!("{}ms", (secs * 1000.0).round());
        }
        let text = format!("{secs:.3}");
        return format!("{}s", text.trim_end_matches('0').trim_end_matches('.'));
    }
    humantime::format_duration(std::time::Duration::from_millis(
        (secs * 1000.0).round() as u64
    ))
    .to_string()
}

/// A share as a percentage with one decimal under 10%.
fn percent(v: f64) -> String {
    let p = v * 100.0;
    if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// Writes the sizing section of `p` (full scale).
pub(crate) fn render(out: &mut String, p: &Plan) {
    let f = &p.full;
    let d = p.patience_s;
    let slow: Vec<_> = f
        .phases
        .iter()
        .filter(|g| g.offered_per_min > 0.0 && g.service_s >= d)
        .collect();
    if !slow.is_empty() {
        let _ = writeln!(
            out,
            "\nOverload from latency (calls slower than the patience D):"
        );
        for g in slow {
            let _ = writeln!(
                out,
                "  {}: calls take {}, callers wait {}: none can finish inside the patience.",
                g.name,
                exact_duration(g.service_s),
                exact_duration(d)
            );
        }
        let _ = writeln!(
            out,
            "  The checks expect a refusal as soon as the limit is reached (Q* = 0: nothing should"
        );
        let _ = writeln!(
            out,
            "  wait) and served-in-time goodput near zero (not judged while no call can make it)."
        );
    }
    if let Some(after) = f.memory_full_after_s {
        let peak = f.phases.iter().map(|g| g.in_flight).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "\nMemory: a gateway that never sheds holds up to {} calls at once (L = λ·S), past its",
            thousands(peak)
        );
        let _ = writeln!(
            out,
            "  memory ceiling about {} into the phase that outgrows it: it dies there.",
            exact_duration(after)
        );
    }
    let k = &p.knobs;
    let _ = writeln!(out, "\nThe gateway's knobs:");
    match k.concurrency_limit {
        Some(l) => {
            let _ = writeln!(
                out,
                "  concurrency limit {}: {}",
                thousands(l),
                k.limit_basis
            );
        }
        None => {
            let _ = writeln!(out, "  concurrency limit: {}", k.limit_basis);
        }
    }
    let _ = writeln!(
        out,
        "  wait budget {} ({})",
        exact_duration(k.wait_budget_s),
        k.wait_budget_basis
    );
    if let (Some(h), Some(s)) = (k.queue_healthy, k.queue_slowest) {
        let _ = writeln!(
            out,
            "  queue bound = drain at the limit x wait budget: {} healthy, {} at the slowest phase",
            thousands(h),
            thousands(s)
        );
    }
    if let Some(t) = k.queue_tokens {
        let _ = writeln!(
            out,
            "  in tokens: {} (the token quota's rate x the wait budget)",
            thousands(t)
        );
    }
    if let Some(q) = f.queue_bound_requests {
        let _ = writeln!(
            out,
            "  beside Q* = μ·(D − S) = {}, the most that can wait and still be answered in time",
            thousands(q)
        );
    }
    render_cost(out, p);
    render_spend(out, p);
}

/// What the run sends as written, for a budget on a real account.
fn render_spend(out: &mut String, p: &Plan) {
    let sp = &p.spend;
    let _ = writeln!(
        out,
        "\nWhat `rehearse run` sends as written ({} tokens a request: prompt at 4 characters",
        thousands(sp.tokens_per_request)
    );
    let _ = writeln!(
        out,
        "a token plus max_tokens), for a budget on a real account:"
    );
    for (name, requests, tokens) in &sp.phases {
        let _ = writeln!(
            out,
            "  {name}: {} requests, {} tokens",
            thousands(*requests),
            thousands(*tokens)
        );
    }
    let _ = writeln!(
        out,
        "  in all {} requests, {} tokens; with every retry ({} attempts a person) {} tokens",
        thousands(sp.requests),
        thousands(sp.tokens),
        sp.max_attempts,
        thousands(sp.tokens_with_retries)
    );
}

/// What the event costs when the gateway never sheds.
fn render_cost(out: &mut String, p: &Plan) {
    let f = &p.full;
    let _ = writeln!(out, "\nWhat the event costs a gateway that never sheds:");
    if let Some(r) = f.refused_share {
        let _ = writeln!(
            out,
            "  {} of the overload's arrivals are over capacity: what a shedding gateway refuses",
            percent(r)
        );
    }
    let _ = writeln!(
        out,
        "  {} of all arrivals answered after their caller left: {} tokens nobody reads",
        percent(f.late_share),
        thousands(f.wasted_tokens)
    );
    if let Some(b) = &p.error_budget {
        let _ = writeln!(
            out,
            "  SLO {} within {} over {}: {} misses of {} allowed, {} of the error budget",
            percent(b.objective),
            exact_duration(b.latency_s),
            exact_duration(b.window_s),
            thousands(b.misses),
            thousands(b.allowed),
            percent(b.burned_share)
        );
    }
}
