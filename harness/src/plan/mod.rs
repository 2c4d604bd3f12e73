//! `rehearse plan`: the arithmetic a person would otherwise do by hand,
//! before any traffic.
//!
//! The model is a fluid queue in front of the provider, with a gateway that
//! never sheds (the unbounded case a rehearsal is meant to rule out):
//! - the provider serves at most μ requests per second, the least of its
//!   token quota ÷ mean tokens per request, its request quota, and its
//!   concurrency ceiling ÷ mean service time S (and a reference gateway's
//!   connection pool, `pool_max_connections`, is a ceiling too: the calls
//!   beyond it wait inside the gateway; so is a load curve's knee, whose
//!   throughput past it stays at knee ÷ S);
//! - while arrivals λ exceed μ the backlog grows by (λ − μ) per second; it
//!   drains at (μ − λ) once they fall below;
//! - in FIFO order an arrival waits backlog ÷ μ and then S; it is a late
//!   answer when that passes the callers' patience D;
//! - the queue bound that keeps every admitted request inside D is
//!   Q* = μ·(D − S): a request completes only if its wait plus its service
//!   fit in its caller's deadline.
//!
//! The time line is cut into segments wherever the load's phases or the
//! provider's timeline change, and each is integrated in steps of at most
//! one second (ramps change λ within a segment).
//!
//! The rooms beside this one:
//! - `clients`: the callers' connection model and the connections the
//!   target sees at the peak;
//! - `sizing`: the plan's arithmetic turned into the gateway's knobs and the event's cost;
//! - `healthy`: the waiting a healthy system holds after the overload (Erlang C);
//! - `expectations`: what the checks compare against: the plan's figures at the run's scale, on the run's clock.

pub(crate) mod clients;
pub(crate) mod expectations;
pub(crate) mod healthy;
pub(crate) mod sizing;

use wire::{Figures, Overload, Plan, Scale, Segment};

use crate::plan::healthy::{healthy_waiting, After};
use crate::scenario::Scenario;

/// A load phase as rates per second.
struct LoadPhase {
    name: String,
    start: f64,
    end: f64,
    from_per_s: f64,
    to_per_s: f64,
    /// Poisson arrivals (and a replayed log's), not evenly spaced ones.
    poisson: bool,
}

/// The load's phases as validated, back to back; a replayed log is one
/// segment at its mean rate (the log was read when the scenario was
/// validated).
fn load_phases(load: &loadgen::LoadPlan) -> Vec<LoadPhase> {
    let mut out = Vec::new();
    let mut t = 0.0;
    for p in load.phases() {
        let d = p.duration.as_secs_f64();
        out.push(LoadPhase {
            name: p.name.to_string(),
            start: t,
            end: t + d,
            from_per_s: p.from_per_sec,
            to_per_s: p.to_per_sec,
            poisson: p.arrivals == loadgen::PhaseArrivals::Poisson,
        });
        t += d;
    }
    if out.is_empty() {
        let len = load.schedule_length().as_secs_f64();
        let rate = if len > 0.0 {
            load.expected_arrivals() / len
        } else {
            0.0
        };
        out.push(LoadPhase {
            name: "replay".into(),
            start: 0.0,
            end: len,
            from_per_s: rate,
            to_per_s: rate,
            poisson: true,
        });
    }
    out
}

/// Provider settings in force at time `t` (seconds from the start).
struct Provider {
    capacity_per_s: Option<f64>,
    service_s: f64,
    phase: Option<String>,
    /// Its concurrency ceiling, full scale.
    ceiling: Option<u32>,
    /// What its quota alone serves, and its ceiling alone (÷ S), per
    /// second.
    quota_per_s: Option<f64>,
    ceiling_per_s: Option<f64>,
    /// The share of its calls its faults refuse or fail (errors, resets,
    /// hangs), 0 to 1; 1 while a phase takes it down.
    failing: f64,
    /// A phase has taken it down (`down = "refuse"` or `"hang"`): it
    /// serves nothing.
    down: Option<fake_provider::config::Down>,
    /// What it takes per second by itself, whatever the gateway (its
    /// quota, its ceiling, its knee; no gateway's pool): what a
    /// pass-through gateway gets.
    own_per_s: Option<f64>,
    /// Past `own_per_s` it refuses at once (its quota; a ceiling that
    /// rejects) rather than holding the calls (a ceiling's queue, a knee).
    refuses_over: bool,
}

/// The provider side at `t`, as the plan's segments take it: the first
/// provider's settings; with several providers, their capacities summed
/// (each by its own timeline, one refusing every call counting none: what
/// a gateway routing over all of them can serve), the ceilings of those
/// serving summed (the drain baseline's servers), and the phases of each
/// named.
fn provider_at(s: &Scenario, t: f64, req: &PerRequest) -> Provider {
    let mut first = provider_of(s, s.provider(), t, req);
    if s.providers.len() < 2 {
        return first;
    }
    let all: Vec<Provider> = s
        .providers
        .iter()
        .map(|cfg| provider_of(s, cfg, t, req))
        .collect();
    first.capacity_per_s = all
        .iter()
        .map(|p| {
            if p.failing < 1.0 {
                p.capacity_per_s
            } else {
                Some(0.0)
            }
        })
        .try_fold(0.0, |sum, c| c.map(|c| sum + c));
    // The drain baseline's servers: the ceilings of the providers serving
    // (none refusing every call), summed; none when one has no ceiling.
    first.ceiling = all
        .iter()
        .filter(|p| p.failing < 1.0)
        .map(|p| p.ceiling)
        .try_fold(0u32, |sum, c| c.map(|c| sum.saturating_add(c)));
    first.own_per_s = all
        .iter()
        .map(|p| {
            if p.failing < 1.0 {
                p.own_per_s
            } else {
                Some(0.0)
            }
        })
        .try_fold(0.0, |sum, c| c.map(|c| sum + c));
    first.refuses_over = all.iter().all(|p| p.refuses_over);
    let phases: Vec<&str> = all.iter().filter_map(|p| p.phase.as_deref()).collect();
    first.phase = (!phases.is_empty()).then(|| phases.join("+"));
    first
}

/// Provider `cfg`'s settings at `t`.
fn provider_of(
    s: &Scenario,
    cfg: &fake_provider::ProviderConfig,
    t: f64,
    req: &PerRequest,
) -> Provider {
    let (tokens_per_request, max_tokens_mean) = (req.tokens, req.max_tokens);
    let active: Vec<_> = cfg
        .timeline
        .iter()
        .filter(|p| p.from.0.as_secs_f64() <= t && p.until.is_none_or(|u| t < u.0.as_secs_f64()))
        .collect();
    let overrides: Vec<_> = active.iter().map(|p| p.overrides()).collect();
    let eff = cfg.effective(overrides.iter(), None);
    let completion = eff.completion_tokens.mean().min(max_tokens_mean);
    let prefill_s = req.prompt_tokens * eff.latency.prefill_per_token.0.as_secs_f64();
    let service_s =
        (eff.latency.ttft.mean() + prefill_s + completion * eff.latency.per_token.mean())
            * eff.latency.multiplier;
    let mut quota = Vec::new();
    if let Some(tpm) = eff.quota.tokens_per_minute {
        if tokens_per_request > 0.0 {
            quota.push(tpm as f64 / 60.0 / tokens_per_request);
        }
    }
    if let Some(rpm) = eff.quota.requests_per_minute {
        quota.push(rpm as f64 / 60.0);
    }
    let quota_per_s = quota.iter().copied().reduce(f64::min);
    let pool = match &s.gateway.kind {
        crate::scenario::GatewayKind::Reference(g) => g.pool_max_connections,
        _ => None,
    };
    // A load curve's knee caps throughput at knee ÷ S when the latency
    // grows at least in proportion past it (exponent ≥ 1).
    let knee = eff
        .latency
        .knee
        .filter(|_| eff.latency.knee_exponent >= 1.0)
        .map(f64::from);
    let mut caps = quota;
    let per_s = |c: f64| (service_s > 0.0).then(|| c / service_s);
    let ceiling_per_s = eff.concurrency.ceiling.and_then(|c| per_s(f64::from(c)));
    let own_per_s = [quota_per_s, ceiling_per_s, knee.and_then(per_s)]
        .into_iter()
        .flatten()
        .reduce(f64::min);
    let refuses_over = match own_per_s {
        Some(c) if quota_per_s == Some(c) => true,
        Some(c) if ceiling_per_s == Some(c) => {
            eff.concurrency.overflow == fake_provider::config::Overflow::Reject
        }
        _ => false,
    };
    caps.extend(
        [
            ceiling_per_s,
            pool.and_then(|p| per_s(p as f64)),
            knee.and_then(per_s),
        ]
        .into_iter()
        .flatten(),
    );
    let capacity_per_s = caps.into_iter().reduce(f64::min);
    let phase = (!active.is_empty()).then(|| {
        active
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join("+")
    });
    let f = &eff.faults;
    let mut failing = (f.errors.values().sum::<f64>() + f.reset + f.hang).clamp(0.0, 1.0);
    let down = active.iter().find_map(|p| p.down);
    let (capacity_per_s, own_per_s) = if down.is_some() {
        failing = 1.0;
        (Some(0.0), Some(0.0))
    } else {
        (capacity_per_s, own_per_s)
    };
    Provider {
        capacity_per_s,
        down,
        service_s,
        phase,
        ceiling: eff.concurrency.ceiling,
        quota_per_s,
        ceiling_per_s,
        failing,
        own_per_s,
        refuses_over,
    }
}

/// The calls a reference gateway makes at once, full scale, when its
/// config says: bounded's `concurrency`, aimd's `ceiling` (the most its
/// limit grows to in a healthy system), and its connection pool, the
/// lowest of them; `None` for any other gateway.
fn gateway_limit(s: &Scenario) -> Option<u64> {
    use reference_gateway::Mode;
    let crate::scenario::GatewayKind::Reference(g) = &s.gateway.kind else {
        return None;
    };
    let mode = match g.mode {
        Mode::Bounded => Some(g.bounded.concurrency),
        Mode::Aimd => Some(g.aimd.ceiling),
        _ => None,
    };
    mode.into_iter()
        .chain(g.pool_max_connections)
        .min()
        .map(|n| n as u64)
}

/// What the healthy waiting after the overload is computed from, for
/// segment `seg` (cut from load phase `lp`, served by `prov`), at the
/// rehearsal's scale.
fn after(
    seg: &Segment,
    lp: &LoadPhase,
    prov: &Provider,
    gateway: Option<u64>,
    scale: Scale,
) -> After {
    let servers = gateway
        .into_iter()
        .chain(prov.ceiling.map(u64::from))
        .min()
        .map(|c| scale.count(c));
    After {
        arrivals_per_s: scale.rate(seg.offered_per_min / 60.0),
        service_s: scale.secs(seg.service_s),
        poisson: lp.poisson,
        servers,
    }
}

/// What one request costs and holds, from the scenario's request shape.
struct PerRequest {
    /// Prompt + completion tokens settled, on average.
    tokens: f64,
    /// Prompt tokens as the provider estimates them (padding included),
    /// on average: its prefill time.
    prompt_tokens: f64,
    /// `max_tokens`, on average.
    max_tokens: f64,
    /// Callers' mean patience D, seconds.
    patience_s: f64,
    /// Bytes a gateway holds for it while it waits.
    bytes: f64,
    /// Tokens it is sent with: the prompt (padding included) plus
    /// `max_tokens`.
    sent_tokens: f64,
}

fn per_request(s: &Scenario) -> PerRequest {
    let load = &s.load_shape;
    let prompt_tokens = load.prompt_tokens.mean();
    let padding_bytes = load.padding_kb.mean() * 1024.0;
    let max_tokens = load.max_tokens.mean();
    let completion = s.provider().completion_tokens.mean().min(max_tokens);
    // The provider estimates prompt tokens at 4 characters each, padding included.
    let chars_per_token = wire::CHARS_PER_TOKEN as f64;
    PerRequest {
        tokens: prompt_tokens + padding_bytes / chars_per_token + completion,
        prompt_tokens: prompt_tokens + padding_bytes / chars_per_token,
        sent_tokens: prompt_tokens + padding_bytes / chars_per_token + max_tokens,
        max_tokens,
        patience_s: load.patience.mean(),
        bytes: s
            .meta
            .prompt_bytes
            .map(|b| b.as_u64() as f64)
            .unwrap_or(prompt_tokens * chars_per_token + padding_bytes),
    }
}

/// Where the time line is cut: the load phases' edges and the provider
/// timeline's, in order, within the load.
fn cut_points(s: &Scenario, phases: &[LoadPhase]) -> Vec<f64> {
    let end = phases.last().map_or(0.0, |p| p.end);
    let mut cuts: Vec<f64> = phases.iter().flat_map(|p| [p.start, p.end]).collect();
    for p in s.providers.iter().flat_map(|p| &p.timeline) {
        cuts.push(p.from.0.as_secs_f64());
        if let Some(u) = p.until {
            cuts.push(u.0.as_secs_f64());
        }
    }
    cuts.retain(|c| *c >= 0.0 && *c <= end);
    cuts.sort_by(f64::total_cmp);
    cuts.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    cuts
}

/// The fluid queue's state, carried from segment to segment.
#[derive(Default)]
struct Fluid {
    /// Requests waiting.
    backlog: f64,
    /// Answers that come after their caller left.
    late: f64,
    /// The most requests held at once (waiting and in flight).
    peak_held: f64,
    /// The largest backlog.
    peak_backlog: f64,
    /// Answers later than the SLO's latency, when there is one.
    slo_misses: f64,
    /// The SLO's latency, seconds (`INFINITY`: none).
    slo_s: f64,
    /// A pass-through gateway's: the calls waiting at the provider, the
    /// most of them, and the arrivals the provider refused.
    pass_waiting: f64,
    pass_peak_waiting: f64,
    pass_refused: f64,
}

impl Fluid {
    /// Integrates the stretch `[a, b)` of load phase `lp` against the
    /// provider `prov`, in steps of at most one second, and returns it as a
    /// segment of the plan.
    fn segment(
        &mut self,
        lp: &LoadPhase,
        prov: &Provider,
        (a, b): (f64, f64),
        patience_s: f64,
    ) -> Segment {
        let rate_at = |t: f64| {
            let span = lp.end - lp.start;
            let f = if span > 0.0 {
                (t - lp.start) / span
            } else {
                0.0
            };
            lp.from_per_s + (lp.to_per_s - lp.from_per_s) * f
        };
        let steps = ((b - a).ceil() as usize).clamp(1, 1_000_000);
        let dt = (b - a) / steps as f64;
        let mut arrivals = 0.0;
        let mut served = 0.0;
        for i in 0..steps {
            let t = a + (i as f64 + 0.5) * dt;
            let lambda = rate_at(t);
            let came = lambda * dt;
            arrivals += came;
            let wait = match prov.capacity_per_s {
                Some(mu) if mu > 0.0 => self.backlog / mu + prov.service_s,
                Some(_) => f64::INFINITY,
                None => prov.service_s,
            };
            if wait > patience_s {
                self.late += came;
            }
            if wait > self.slo_s {
                self.slo_misses += came;
            }
            let can = prov.capacity_per_s.map_or(f64::INFINITY, |mu| mu * dt);
            let out = can.min(self.backlog + came);
            served += out;
            self.backlog = self.backlog + came - out;
            let in_flight =
                prov.capacity_per_s.map_or(lambda, |mu| mu.min(lambda)) * prov.service_s;
            self.peak_held = self.peak_held.max(self.backlog + in_flight);
            self.peak_backlog = self.peak_backlog.max(self.backlog);
            self.pass_through(prov, came, dt);
        }
        Segment {
            name: match &prov.phase {
                Some(p) => format!("{} / {p}", lp.name),
                None => lp.name.clone(),
            },
            start_s: a,
            duration_s: b - a,
            offered_per_min: arrivals / (b - a) * 60.0,
            capacity_per_min: prov.capacity_per_s.map(|c| c * 60.0),
            service_s: prov.service_s,
            served,
            backlog_at_end: self.backlog,
            // Calls slower than the patience: nothing should wait, whatever μ.
            queue_bound_requests: if prov.service_s >= patience_s {
                Some(0.0)
            } else {
                prov.capacity_per_s
                    .map(|mu| (mu * (patience_s - prov.service_s)).max(0.0))
            },
            in_flight: arrivals / (b - a) * prov.service_s,
        }
    }
}

impl Fluid {
    /// One step of a pass-through gateway's: what the provider takes by
    /// itself is served (what waits at it first); past that, it refuses
    /// at once, or holds the calls waiting.
    fn pass_through(&mut self, prov: &Provider, came: f64, dt: f64) {
        let takes = prov.own_per_s.map_or(f64::INFINITY, |mu| mu * dt);
        let from_waiting = self.pass_waiting.min(takes);
        self.pass_waiting -= from_waiting;
        let over = (came - (takes - from_waiting)).max(0.0);
        if prov.refuses_over {
            self.pass_refused += over;
        } else {
            self.pass_waiting += over;
        }
        self.pass_peak_waiting = self.pass_peak_waiting.max(self.pass_waiting);
    }
}

/// Minutes to drain the peak backlog (at a segment's end) at the rate
/// after it, if the queue were unbounded; `None` when it never drains.
fn drain_minutes(segments: &[Segment]) -> Option<f64> {
    segments
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.backlog_at_end.total_cmp(&y.1.backlog_at_end))
        .filter(|(_, seg)| seg.backlog_at_end > 0.5)
        .map(|(i, seg)| {
            let (lambda, mu) = match segments.get(i + 1) {
                Some(next) => (next.offered_per_min, next.capacity_per_min),
                // The load stopped: nothing more arrives.
                None => (0.0, seg.capacity_per_min),
            };
            match mu {
                Some(mu) if mu > lambda => Some(seg.backlog_at_end / (mu - lambda)),
                Some(_) => None,
                None => Some(0.0),
            }
        })
        .unwrap_or(Some(0.0))
}

/// The overload window at rehearsal scale: from the first overloaded
/// segment to the end of the last, with μ, S and Q* of the tightest one.
fn overload(overloaded: &[&Segment], tight: Option<&Segment>, scale: Scale) -> Option<Overload> {
    let (first, last, t) = (overloaded.first()?, overloaded.last()?, tight?);
    Some(Overload {
        from_s: scale.secs(first.start_s),
        until_s: scale.secs(last.start_s + last.duration_s),
        capacity_per_s: scale.rate(t.capacity_per_min.unwrap_or(0.0) / 60.0),
        service_s: scale.secs(t.service_s),
        queue_bound: scale.depth(t.queue_bound_requests.unwrap_or(0.0)),
    })
}

/// The plan of a scenario: its figures at full scale and at its own scale.
pub fn plan(s: &Scenario) -> Plan {
    let req = per_request(s);
    let phases = load_phases(&s.load_plan);
    let mut fluid = Fluid {
        slo_s: s
            .meta
            .slo
            .as_ref()
            .map_or(f64::INFINITY, |o| o.latency.as_secs_f64()),
        ..Fluid::default()
    };
    let scale = s.scale();
    let gateway = gateway_limit(s);
    let mut segments = Vec::new();
    // Per segment: what a healthy system's waiting is computed from.
    let mut healthy = Vec::new();
    for w in cut_points(s, &phases).windows(2) {
        let (a, b) = (w[0], w[1]);
        if b - a < 1e-9 {
            continue;
        }
        let Some(lp) = phases.iter().find(|p| p.start <= a && a < p.end) else {
            continue;
        };
        let prov = provider_at(s, a, &req);
        let seg = fluid.segment(lp, &prov, (a, b), req.patience_s);
        healthy.push(after(&seg, lp, &prov, gateway, scale));
        segments.push(seg);
    }
    // Overloaded: more arrivals than capacity, or calls slower than the
    // callers' patience (none can finish in time), or more calls in flight
    // than the gateway's memory holds. The tightest sets Q*.
    let memory = crate::plan::sizing::memory_requests(s, req.bytes);
    let overloaded: Vec<&Segment> = segments
        .iter()
        .filter(|g| crate::plan::sizing::overloaded(g, req.patience_s, memory))
        .collect();
    let tight = overloaded.iter().copied().min_by(|x, y| {
        x.capacity_per_min
            .unwrap_or(0.0)
            .total_cmp(&y.capacity_per_min.unwrap_or(0.0))
    });
    let queue_bound_requests = tight.and_then(|g| g.queue_bound_requests).or_else(|| {
        segments
            .iter()
            .filter_map(|g| g.queue_bound_requests)
            .reduce(f64::min)
    });
    let overload = overload(&overloaded, tight, scale);
    // After the overload (without one, after the load: nothing arrives).
    let overload_end = overloaded
        .last()
        .map_or(f64::INFINITY, |g| g.start_s + g.duration_s);
    let after_overload: Vec<After> = segments
        .iter()
        .zip(&healthy)
        .filter(|(g, _)| g.start_s >= overload_end - 1e-9)
        .map(|(_, h)| *h)
        .collect();
    let drain_baseline = Some(healthy_waiting(&after_overload));
    let (providers, troubles) = several_providers(s, &phases, &req);
    let full = Figures {
        drain_minutes_unbounded: drain_minutes(&segments),
        refused_share: crate::plan::sizing::refused_share(&overloaded, req.patience_s),
        late_share: crate::plan::sizing::share(fluid.late, &segments),
        wasted_tokens: fluid.late * req.tokens,
        memory_full_after_s: crate::plan::sizing::memory_full_after(&segments, memory),
        slo_misses: s.meta.slo.as_ref().map(|_| fluid.slo_misses),
        late_answers: fluid.late,
        queue_bound_requests,
        queue_bound_tokens: queue_bound_requests.map(|q| q * req.tokens),
        unbounded_backlog_bytes: fluid.peak_held * req.bytes,
        peak_backlog: fluid.peak_backlog,
        passthrough_refused: fluid.pass_refused,
        passthrough_peak_waiting: fluid.pass_peak_waiting,
        phases: segments,
    };
    Plan {
        scenario: s.meta.name.clone(),
        tokens_per_request: req.tokens,
        patience_s: req.patience_s,
        prompt_bytes: req.bytes,
        quota_scale: scale.quota,
        time_scale: scale.time,
        knobs: crate::plan::sizing::knobs(s, &full.phases, req.patience_s),
        error_budget: crate::plan::sizing::error_budget(s, &full.phases, fluid.slo_misses),
        spend: crate::plan::sizing::spend(s, &full.scaled(scale).phases, req.sent_tokens),
        clients: crate::plan::clients::clients(
            &s.load_plan,
            scale,
            &full.scaled(scale),
            req.patience_s,
        ),
        rehearsal: full.scaled(scale),
        full,
        overload,
        drain_baseline,
        providers,
        troubles,
        replay: replay_plan(s),
    }
}

/// With a replayed log: what was read, and its busiest minute played
/// `speedup` × `multiply` times over either way, beside the provider's
/// requests-per-minute quota at the start of the load (full scale).
fn replay_plan(s: &Scenario) -> Option<wire::ReplayPlan> {
    let read = s.load_plan.replay_read()?;
    let times = read.speedup * read.multiply;
    let span_s = read.span.as_secs_f64();
    let peak_minute = read.per_minute.iter().copied().max().unwrap_or(0);
    Some(wire::ReplayPlan {
        format: read.format.to_string(),
        unit: read.unit.to_string(),
        rows: read.rows,
        failed: read.failed,
        failed_dropped: read.failed_dropped,
        span_s,
        mean_per_s: read.rows as f64 / span_s.max(1.0),
        peak_minute_per_s: f64::from(peak_minute) / 60.0,
        prompt_tokens: read.prompt_tokens,
        max_tokens: read.max_tokens,
        speedup: read.speedup,
        multiply: read.multiply,
        times,
        peak_per_min_multiplied: read.peak_per_minute(times, false),
        peak_per_min_sped_up: read.peak_per_minute(times, true),
        quota_per_min: s.provider().quota.requests_per_minute.map(|q| q as f64),
    })
}

/// With several providers: each one's phases (capacity, quota and
/// ceiling, service time, trouble), cut where its timeline changes within
/// the load, and each trouble with what the others serve meanwhile;
/// empty with one.
fn several_providers(
    s: &Scenario,
    phases: &[LoadPhase],
    req: &PerRequest,
) -> (Vec<wire::ProviderPlan>, Vec<wire::Trouble>) {
    if s.providers.len() < 2 {
        return (Vec::new(), Vec::new());
    }
    let plans: Vec<wire::ProviderPlan> = s
        .providers
        .iter()
        .map(|cfg| provider_phases(s, cfg, phases, req))
        .collect();
    let mut troubles = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        for ph in &p.phases {
            let Some(why) = &ph.trouble else { continue };
            let mid = ph.start_s + ph.duration_s / 2.0;
            // The others not in trouble themselves at its middle.
            let others: Vec<Option<f64>> = plans
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, q)| {
                    q.phases
                        .iter()
                        .find(|x| x.start_s <= mid && mid < x.start_s + x.duration_s)
                })
                .map(|x| {
                    if x.trouble.is_some() {
                        Some(0.0)
                    } else {
                        x.capacity_per_min
                    }
                })
                .collect();
            let others_per_min = others.iter().try_fold(0.0, |sum, c| c.map(|c| sum + c));
            troubles.push(wire::Trouble {
                provider: p.name.clone(),
                why: why.clone(),
                start_s: ph.start_s,
                duration_s: ph.duration_s,
                others_per_min,
                offered_per_min: offered_mean(phases, ph.start_s, ph.start_s + ph.duration_s)
                    * 60.0,
            });
        }
    }
    (plans, troubles)
}

/// The end of the last trouble of the scenario at its own scale (seconds
/// from the load's start): the overload's end, or the end of the last
/// stretch of any provider's timeline the plan calls trouble (see
/// [`trouble`]; with one provider as with several), whichever is later;
/// and the plan's capacity μ from then to the load's end (the lowest of
/// its segments there, requests per second at the scenario's scale;
/// `None`: unlimited). `None` without a trouble. What `recovery` judges
/// the rest of the load against (`Expectations::after_trouble`).
pub(crate) fn after_trouble(s: &Scenario, plan: &Plan) -> Option<(f64, Option<f64>)> {
    let scale = s.scale();
    let req = per_request(s);
    let phases = load_phases(&s.load_plan);
    let troubled = s
        .providers
        .iter()
        .flat_map(|cfg| provider_phases(s, cfg, &phases, &req).phases)
        .filter(|p| p.trouble.is_some())
        .map(|p| scale.secs(p.start_s + p.duration_s));
    let overload = plan.overload.as_ref().map(|o| o.until_s);
    let end_s = troubled.chain(overload).reduce(f64::max)?;
    let mut after = plan
        .rehearsal
        .phases
        .iter()
        .filter(|g| g.start_s + g.duration_s > end_s + 1e-9)
        .map(|g| g.capacity_per_min.map(|c| c / 60.0));
    // The lowest capacity; unlimited only when every segment is.
    let capacity = after.try_fold(None, |low: Option<f64>, c| {
        Some(match (low, c) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        })
    });
    Some((end_s, capacity.flatten()))
}

/// One provider's timeline over the load's `phases`.
fn provider_phases(
    s: &Scenario,
    cfg: &fake_provider::ProviderConfig,
    load: &[LoadPhase],
    req: &PerRequest,
) -> wire::ProviderPlan {
    let end = load.last().map_or(0.0, |p| p.end);
    let mut cuts = vec![0.0, end];
    for p in &cfg.timeline {
        cuts.push(p.from.0.as_secs_f64());
        cuts.extend(p.until.map(|u| u.0.as_secs_f64()));
    }
    cuts.retain(|c| *c >= 0.0 && *c <= end);
    cuts.sort_by(f64::total_cmp);
    cuts.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    // Its base: as it is with no phase of its timeline on.
    let mut bare = cfg.clone();
    bare.timeline.clear();
    let base = provider_of(s, &bare, 0.0, req);
    let per_min = |x: Option<f64>| x.map(|v| v * 60.0);
    let phases = cuts
        .windows(2)
        .filter(|w| w[1] - w[0] > 1e-9)
        .map(|w| {
            let at = provider_of(s, cfg, w[0], req);
            let mut capacity = per_min(at.capacity_per_s);
            if at.failing >= 1.0 {
                capacity = Some(0.0);
            }
            wire::ProviderPhase {
                phase: at.phase.clone().unwrap_or_else(|| "base".into()),
                start_s: w[0],
                duration_s: w[1] - w[0],
                quota_per_min: per_min(at.quota_per_s),
                ceiling_per_min: per_min(at.ceiling_per_s),
                capacity_per_min: capacity,
                service_s: at.service_s,
                trouble: trouble(&base, &at, offered_mean(load, w[0], w[1])),
            }
        })
        .collect();
    wire::ProviderPlan {
        name: cfg.name_or_default().to_string(),
        phases,
    }
}

/// Why a provider at `at` is in trouble against its `base`: it slows at
/// least 2x, its faults refuse or fail at least half its calls, or what
/// its quota or ceiling serves falls to half or less: of its base's, or,
/// when its base has no limit, of the `offered` load (per second) then.
fn trouble(base: &Provider, at: &Provider, offered: f64) -> Option<String> {
    match at.down {
        Some(fake_provider::config::Down::Refuse) => {
            return Some("down: refuses connections".into())
        }
        Some(fake_provider::config::Down::Hang) => return Some("down: answers nothing".into()),
        None => {}
    }
    if at.failing >= 0.5 {
        return Some(format!("fails {:.0}% of its calls", at.failing * 100.0));
    }
    if base.service_s > 0.0 && at.service_s >= 2.0 * base.service_s {
        return Some(format!("{:.1}x slower", at.service_s / base.service_s));
    }
    match (base.capacity_per_s, at.capacity_per_s) {
        (Some(b), Some(a)) if b > 0.0 && a <= 0.5 * b => {
            Some(format!("capacity down to {:.0}%", a / b * 100.0))
        }
        (None, Some(a)) if a <= 0.0 => Some("no capacity".into()),
        (None, Some(a)) if a <= 0.5 * offered => Some(format!(
            "capacity down to {:.0}/min, under half the {:.0}/min offered",
            a * 60.0,
            offered * 60.0
        )),
        _ => None,
    }
}

/// The mean offered rate over `[from, to)`, per second.
fn offered_mean(phases: &[LoadPhase], from: f64, to: f64) -> f64 {
    if to <= from {
        return 0.0;
    }
    let mut arrivals = 0.0;
    for p in phases {
        let (a, b) = (from.max(p.start), to.min(p.end));
        if b <= a || p.end <= p.start {
            continue;
        }
        // Linear within a phase (a ramp): the mean of its two ends.
        let rate_at =
            |t: f64| p.from_per_s + (p.to_per_s - p.from_per_s) * (t - p.start) / (p.end - p.start);
        arrivals += (rate_at(a) + rate_at(b)) / 2.0 * (b - a);
    }
    arrivals / (to - from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn scenario(text: &str) -> Scenario {
        Scenario::from_str(text, "t.toml", Path::new("t.toml")).unwrap()
    }

    const FLASH: &str = r#"
[scenario]
name = "flash"
quota_scale = 10
time_scale = 10
prompt_bytes = "6KiB"
[provider]
completion_tokens = { fixed = 200 }
[provider.latency]
ttft = { fixed = "1s" }
per_token = { fixed = "20ms" }
[provider.quota]
tokens_per_minute = 500000
[gateway]
url = "http://127.0.0.1:9"
[load]
patience = { fixed = "25s" }
[[load.phases]]
name = "before"
duration = "5m"
rate = 200
per = "minute"
[[load.phases]]
name = "promotion"
duration = "40m"
rate = 2000
per = "minute"
[[load.phases]]
name = "after"
duration = "10m"
rate = 200
per = "minute"
[load.request]
prompt_tokens = { fixed = 1000 }
max_tokens = { fixed = 400 }
"#;

    /// A shipped scenario, with `from` replaced by `to` in its text.
    fn shipped(name: &str, from: &str, to: &str) -> Scenario {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios")
            .join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from}");
        scenario(&text.replacen(from, to, 1))
    }

    /// `recovery`'s start: the brownout's end (the overload's too), and
    /// the provider's 12 slots of 0.2 s after it; a trouble that overloads
    /// nothing still ends there; at time scale 10, a tenth of the time and
    /// ten times the rate; a provider that stays slow is in trouble to the
    /// load's end.
    #[test]
    fn the_last_trouble_ends_with_the_brownout_and_the_provider_serves_60_a_second_after() {
        let s = shipped("recovery.toml", "", "");
        let p = plan(&s);
        let (end, mu) = after_trouble(&s, &p).unwrap();
        assert!((end - 12.0).abs() < 1e-9, "{end}");
        assert!((mu.unwrap() - 60.0).abs() < 1e-9, "{mu:?}");
        assert!(p.overload.is_some_and(|o| (o.until_s - 12.0).abs() < 1e-9));
        // 5 requests/s: nothing overloads, and the brownout is trouble still.
        let calm = shipped("recovery.toml", "rate = 20", "rate = 5");
        let p = plan(&calm);
        assert!(p.overload.is_none());
        assert_eq!(after_trouble(&calm, &p), Some((12.0, Some(60.0))));
        let fast = shipped("recovery.toml", "seed = 8", "seed = 8\ntime_scale = 10");
        let (end, mu) = after_trouble(&fast, &plan(&fast)).unwrap();
        assert!((end - 1.2).abs() < 1e-9 && (mu.unwrap() - 600.0).abs() < 1e-6);
        let pool = shipped("pool-demo.toml", "", "");
        let (end, _) = after_trouble(&pool, &plan(&pool)).unwrap();
        assert!((end - 10.0).abs() < 1e-9, "{end}");
        // No trouble at all: none.
        let healthy = shipped("recovery.toml", "multiplier = 7.0", "multiplier = 1.0");
        assert_eq!(after_trouble(&healthy, &plan(&healthy)), None);
    }

    #[test]
    fn several_providers_sum_their_capacity_and_name_each_trouble() {
        let text = FLASH.replace(
            "[provider]\ncompletion_tokens = { fixed = 200 }",
            "[[providers]]\nname = \"a\"\ncompletion_tokens = { fixed = 200 }",
        )
        .replace("[provider.latency]", "[providers.latency]")
        .replace(
            "[provider.quota]\ntokens_per_minute = 500000\n",
            "[providers.quota]\ntokens_per_minute = 500000\n[providers.concurrency]\nceiling = 10\n[[providers.timeline]]\nname = \"slow\"\nfrom = \"5m\"\nuntil = \"10m\"\nlatency = { multiplier = 7.0 }\n[[providers]]\nname = \"b\"\ncompletion_tokens = { fixed = 200 }\n[providers.quota]\ntokens_per_minute = 250000\n[providers.concurrency]\nceiling = 6\n",
        );
        let s = scenario(&text);
        let p = plan(&s);
        let names: Vec<_> = p.providers.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        // a: base, slow, base; b: base.
        let a: Vec<_> = p.providers[0]
            .phases
            .iter()
            .map(|x| x.phase.as_str())
            .collect();
        assert_eq!(a, ["base", "slow", "base"]);
        assert_eq!(p.troubles.len(), 1);
        let t = &p.troubles[0];
        assert_eq!(
            (t.provider.as_str(), t.start_s, t.duration_s),
            ("a", 300.0, 300.0)
        );
        assert!(t.why.contains("slower"), "{}", t.why);
        // What b serves: its quota (208/min), under its ceiling's 6 ÷ 1 s.
        let b = 250_000.0 / 1200.0;
        assert!((t.others_per_min.unwrap() - b).abs() < 1e-6, "{t:?}");
        assert!((t.servable_per_min() - b).abs() < 1e-6);
        // The segments' capacity is both, summed.
        let first = &p.full.phases[0];
        let a_cap = (500_000.0f64 / 1200.0).min(10.0 * 60.0 / 5.0);
        assert!(
            (first.capacity_per_min.unwrap() - (a_cap + b)).abs() < 1e-6,
            "{first:?}"
        );
        // One provider: none of it.
        let one = plan(&scenario(FLASH));
        assert!(one.providers.is_empty() && one.troubles.is_empty());
    }

    /// A provider a phase takes down serves nothing then: its capacity is
    /// zero, the phase is trouble named for its mode, `recovery` is judged
    /// after it, and with a second provider the plan counts only that one.
    #[test]
    fn a_down_phase_is_trouble_with_no_capacity() {
        for (mode, why) in [
            ("refuse", "refuses connections"),
            ("hang", "answers nothing"),
        ] {
            let one = FLASH.replace(
                "[provider.quota]",
                &format!("[[provider.timeline]]\nname = \"restart\"\nfrom = \"10m\"\nuntil = \"12m\"\ndown = \"{mode}\"\n[provider.quota]"),
            );
            let s = scenario(&one);
            let p = plan(&s);
            let seg = p
                .full
                .phases
                .iter()
                .find(|g| (g.start_s - 600.0).abs() < 1e-9)
                .unwrap_or_else(|| panic!("no segment at 10m: {:?}", p.full.phases));
            assert_eq!(seg.capacity_per_min, Some(0.0), "{seg:?}");
            // With no overload (20/min), `recovery` is judged from the
            // restart's end: 12 minutes at time scale 10.
            let calm = scenario(&one.replace("rate = 2000", "rate = 20"));
            let (end, _) = after_trouble(&calm, &plan(&calm)).unwrap();
            assert!((end - 72.0).abs() < 1e-9, "{end}");
            let two = one
                .replace("[provider]", "[[providers]]\nname = \"a\"")
                .replace("[provider.", "[providers.")
                .replace("[[provider.", "[[providers.")
                + "[[providers]]\nname = \"b\"\ncompletion_tokens = { fixed = 200 }\n[providers.quota]\ntokens_per_minute = 250000\n";
            let p = plan(&scenario(&two));
            assert_eq!(p.troubles.len(), 1, "{:?}", p.troubles);
            assert!(p.troubles[0].why.contains(why), "{}", p.troubles[0].why);
            assert!((p.troubles[0].others_per_min.unwrap() - 250_000.0 / 1200.0).abs() < 1e-6);
        }
    }

    /// A provider with no limit of its own that a timeline phase puts on
    /// a quota below half the offered load is in trouble then (a gateway
    /// must route around it); one whose quota still serves the load is not.
    #[test]
    fn a_quota_phase_on_an_unlimited_provider_is_trouble_below_half_the_load() {
        let text = |tpm: u32| {
            format!(
                r#"
[scenario]
name = "t"
[[providers]]
name = "primary"
completion_tokens = {{ fixed = 8 }}
[[providers.timeline]]
name = "throttled"
from = "2s"
until = "6s"
quota = {{ tokens_per_minute = {tpm} }}
[[providers]]
name = "secondary"
completion_tokens = {{ fixed = 8 }}
[gateway]
url = "http://127.0.0.1:9"
[load]
[[load.phases]]
duration = "8s"
rate = 20
[load.request]
prompt_tokens = {{ fixed = 20 }}
max_tokens = {{ fixed = 8 }}
"#
            )
        };
        // 28 tokens a request: 600 a minute serve 21 of the 1,200 offered.
        let p = plan(&scenario(&text(600)));
        assert_eq!(p.troubles.len(), 1, "{:?}", p.troubles);
        let t = &p.troubles[0];
        assert_eq!(
            (t.provider.as_str(), t.start_s, t.duration_s),
            ("primary", 2.0, 4.0)
        );
        assert!(
            t.why.contains("under half the 1200/min offered"),
            "{}",
            t.why
        );
        assert_eq!(t.others_per_min, None, "the secondary has no limit");
        // 28,000 a minute serve all 1,200: no trouble.
        assert!(plan(&scenario(&text(28_000))).troubles.is_empty());
    }

    #[test]
    fn flash_promotion_by_hand() {
        let p = plan(&scenario(FLASH));
        let mu = 500_000.0 / 1200.0; // 416.7 per minute
        assert!((p.tokens_per_request - 1200.0).abs() < 1e-9);
        let promo = &p.full.phases[1];
        assert!((promo.capacity_per_min.unwrap() - mu).abs() < 1e-6);
        assert!((promo.offered_per_min - 2000.0).abs() < 1e-6);
        assert!((promo.served - 40.0 * mu).abs() < 1.0, "{}", promo.served);
        let backlog = 40.0 * (2000.0 - mu);
        assert!(
            (promo.backlog_at_end - backlog).abs() < 1.0,
            "{}",
            promo.backlog_at_end
        );
        let drain = backlog / (mu - 200.0);
        assert!((p.full.drain_minutes_unbounded.unwrap() - drain).abs() < 0.1);
        // S = 1 s + 200 × 20 ms = 5 s; Q* = μ/60 × (25 − 5).
        let q = mu / 60.0 * 20.0;
        assert!((p.full.queue_bound_requests.unwrap() - q).abs() < 1e-6);
        assert!((p.full.queue_bound_tokens.unwrap() - q * 1200.0).abs() < 1e-3);
        // Late: promotion arrivals after the backlog passes Q*, plus "after"
        // arrivals while it is still above Q* (all 10 minutes here).
        let t_cross = q / ((2000.0 - mu) / 60.0);
        let late = 2000.0 / 60.0 * (40.0 * 60.0 - t_cross) + 200.0 * 10.0;
        assert!(
            (p.full.late_answers - late).abs() / late < 0.01,
            "{} vs {late}",
            p.full.late_answers
        );
        // Memory: peak backlog + calls in flight (μ × S), at 6 KiB each.
        let held = backlog + mu / 60.0 * 5.0;
        assert!((p.full.unbounded_backlog_bytes - held * 6144.0).abs() / (held * 6144.0) < 0.001);
        // A pass-through gateway: the quota's refusals relayed, the same
        // 63,333 over capacity, and nothing waits.
        assert!((p.full.passthrough_refused - backlog).abs() < 1.0);
        assert_eq!(p.full.passthrough_peak_waiting, 0.0);
        assert!((p.rehearsal.passthrough_refused - backlog / 10.0).abs() < 0.1);
        // Rehearsal: depths ÷ 10 (quota), durations ÷ 10, rates × 10 ÷ 10.
        let r = &p.rehearsal;
        assert!((r.phases[1].offered_per_min - 2000.0).abs() < 1e-6);
        assert!((r.phases[1].duration_s - 240.0).abs() < 1e-9);
        assert!((r.queue_bound_requests.unwrap() - q / 10.0).abs() < 1e-6);
        assert!((r.drain_minutes_unbounded.unwrap() - drain / 10.0).abs() < 0.01);
        let o = p.overload.unwrap();
        assert!((o.from_s - 30.0).abs() < 1e-9 && (o.until_s - 270.0).abs() < 1e-9);
        assert!((o.capacity_per_s - mu / 60.0).abs() < 1e-6);
        assert!((o.service_s - 0.5).abs() < 1e-9);
    }

    /// The prefill time is the scenario's mean prompt (padding included,
    /// at 4 characters a token) times `prefill_per_token`, in the service
    /// time and so in the capacity a ceiling gives.
    #[test]
    fn the_service_time_reads_the_prompt() {
        const PREFILL: &str = r#"
[scenario]
name = "long prompts"
[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "100ms" }
prefill_per_token = "100us"
[provider.concurrency]
ceiling = 10
[gateway.reference]
mode = "naive"
[load]
[[load.phases]]
name = "flood"
duration = "10s"
rate = 100
[load.request]
prompt_tokens = { fixed = 1000 }
padding_kb = { fixed = 4 }
max_tokens = { fixed = 10 }
"#;
        let p = plan(&scenario(PREFILL));
        let o = p.overload.expect("100/s is past 10 calls of 0.3 s");
        // 1000 tokens + 4 KiB at 4 characters a token = 2024 tokens.
        let service = 0.1 + 2024.0 * 100e-6;
        assert!((o.service_s - service).abs() < 1e-9, "{}", o.service_s);
        assert!((o.capacity_per_s - 10.0 / service).abs() < 1e-6);
        let without = plan(&scenario(
            &PREFILL.replace("prefill_per_token = \"100us\"\n", ""),
        ));
        assert!(without.overload.is_none(), "10 calls of 0.1 s serve 100/s");
    }

    /// The waiting a healthy system holds after the overload, at the
    /// rehearsal's scale: none when the load stops with it, none for
    /// evenly spaced arrivals, Erlang C for Poisson ones with the lower of
    /// the gateway's limit and the provider's ceiling as servers.
    #[test]
    fn the_drain_baseline_is_the_waiting_after_the_overload() {
        const SLOW: &str = r#"
[scenario]
name = "slow"
quota_scale = 2
time_scale = 10
[provider]
completion_tokens = { fixed = 10 }
[provider.latency]
ttft = { fixed = "1s" }
per_token = { fixed = "0ms" }
[provider.concurrency]
ceiling = 16
[gateway.reference]
mode = "bounded"
bounded = { concurrency = 12, queue = 20, wait_budget = "2s" }
[load]
patience = { fixed = "10s" }
[[load.phases]]
name = "overload"
duration = "5s"
rate = 40
[[load.phases]]
name = "after"
duration = "30s"
rate = 8
arrivals = "poisson"
[load.request]
prompt_tokens = { fixed = 10 }
max_tokens = { fixed = 10 }
"#;
        let p = plan(&scenario(SLOW));
        assert!(p.overload.is_some());
        // At rehearsal scale: 12 ÷ 2 = 6 servers, λ = 8 × 10 ÷ 2 = 40/s,
        // S = 0.1 s: 4 erlangs on 6 servers, C ≈ 0.285, Lq ≈ 0.570.
        match p.drain_baseline {
            Some(wire::HealthyWaiting::ErlangC {
                servers,
                arrivals_per_s,
                service_s,
                waiting,
            }) => {
                assert_eq!(servers, 6);
                assert!((arrivals_per_s - 40.0).abs() < 1e-9, "{arrivals_per_s}");
                assert!((service_s - 0.1).abs() < 1e-9, "{service_s}");
                let lq = crate::plan::healthy::erlang_c_waiting(6, 4.0).unwrap();
                assert!(
                    (waiting - lq).abs() < 1e-9 && (0.56..0.58).contains(&lq),
                    "{lq}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Evenly spaced: none wait; past the gateway's limit: saturated.
        let even = SLOW.replace("arrivals = \"poisson\"\n", "");
        assert!(matches!(
            plan(&scenario(&even)).drain_baseline,
            Some(wire::HealthyWaiting::Constant { .. })
        ));
        let busy = SLOW.replace("rate = 8\n", "rate = 13\n");
        assert!(matches!(
            plan(&scenario(&busy)).drain_baseline,
            Some(wire::HealthyWaiting::Saturated { servers: 6, .. })
        ));
        // The load stops with the overload (the pool demo): nothing waits.
        let stops = &SLOW[..SLOW.find("[[load.phases]]\nname = \"after\"").unwrap()];
        let stops = format!("{stops}[load.request]\nprompt_tokens = {{ fixed = 10 }}\nmax_tokens = {{ fixed = 10 }}\n");
        assert_eq!(
            plan(&scenario(&stops)).drain_baseline,
            Some(wire::HealthyWaiting::NoArrivals)
        );
    }

    #[test]
    fn a_replayed_log_is_one_segment_at_its_mean_rate() {
        // 41 rows over 20 s of log time, played twice as fast: 41 arrivals
        // in 10 s. The log is read once, when the scenario is validated.
        let dir = std::env::temp_dir().join(format!("rehearse-plan-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows: String = (0..=40)
            .map(|i| format!("{}\n", f64::from(i) / 2.0))
            .collect();
        std::fs::write(dir.join("log.csv"), format!("timestamp\n{rows}")).unwrap();
        let text = r#"
[scenario]
name = "replayed"
[gateway]
url = "http://127.0.0.1:9"
[load]
patience = { fixed = "30s" }
[load.replay]
file = "log.csv"
speedup = 2.0
"#;
        let path = dir.join("s.toml");
        let s = Scenario::from_str(text, "s.toml", &path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let p = plan(&s);
        assert_eq!(p.full.phases.len(), 1, "{:?}", p.full.phases);
        let replay = &p.full.phases[0];
        assert_eq!(replay.name, "replay");
        assert!(
            (replay.duration_s - 10.0).abs() < 1e-9,
            "{}",
            replay.duration_s
        );
        assert!((replay.offered_per_min - 41.0 / 10.0 * 60.0).abs() < 1e-6);
    }

    #[test]
    fn provider_timeline_cuts_segments_and_ceiling_limits_capacity() {
        let text = r#"
[scenario]
name = "brownout"
[provider]
completion_tokens = { fixed = 0 }
[provider.latency]
ttft = { fixed = "600ms" }
[provider.concurrency]
ceiling = 120
[[provider.timeline]]
name = "slow"
from = "2m"
until = "14m"
latency = { multiplier = 7.0 }
[gateway]
url = "http://127.0.0.1:9"
[load]
patience = { fixed = "30s" }
[[load.phases]]
duration = "20m"
rate = 40
"#;
        let p = plan(&scenario(text));
        assert_eq!(p.full.phases.len(), 3);
        let slow = &p.full.phases[1];
        assert!(slow.name.contains("slow"));
        let mu = 120.0 / 4.2;
        assert!((slow.capacity_per_min.unwrap() / 60.0 - mu).abs() < 1e-6);
        assert!((slow.backlog_at_end - (40.0 - mu) * 720.0).abs() < 1.0);
        let after = &p.full.phases[2];
        // Drains at 200 − 40 per second after the slowdown.
        let drain_s = slow.backlog_at_end / (120.0 / 0.6 - 40.0);
        assert!((p.full.drain_minutes_unbounded.unwrap() - drain_s / 60.0).abs() < 0.01);
        assert!(after.backlog_at_end < 1.0);
        // A ceiling with a queue: a pass-through gateway holds the same
        // backlog, waiting at the provider; refused, none.
        assert!((p.full.passthrough_peak_waiting - slow.backlog_at_end).abs() < 1.0);
        assert_eq!(p.full.passthrough_refused, 0.0);
        // A ceiling that rejects: the same excess refused at once, nothing waits.
        let rejecting = plan(&scenario(
            &text.replace("ceiling = 120", "ceiling = 120\noverflow = \"reject\""),
        ));
        assert!((rejecting.full.passthrough_refused - slow.backlog_at_end).abs() < 1.0);
        assert_eq!(rejecting.full.passthrough_peak_waiting, 0.0);
        // The gateway's backlog is the same either way: it holds requests.
        assert!((rejecting.full.peak_backlog - p.full.peak_backlog).abs() < 1e-6);
    }

    #[test]
    fn no_limit_means_no_backlog_but_slow_calls_are_late() {
        let text = r#"
[scenario]
name = "slow-upstream"
prompt_bytes = "1MiB"
[provider]
completion_tokens = { fixed = 0 }
[provider.latency]
ttft = { fixed = "1s" }
[[provider.timeline]]
name = "stuck"
from = "30s"
until = "90s"
latency = { ttft = { fixed = "30s" } }
[gateway]
url = "http://127.0.0.1:9"
[load]
patience = { fixed = "15s" }
[[load.phases]]
duration = "3m"
rate = 20
"#;
        let p = plan(&scenario(text));
        assert_eq!(p.full.queue_bound_requests, Some(0.0));
        assert!(
            (p.full.late_answers - 60.0 * 20.0).abs() < 1.0,
            "{}",
            p.full.late_answers
        );
        // 20/s × 30 s in flight, 1 MiB each.
        assert!((p.full.unbounded_backlog_bytes - 600.0 * 1048576.0).abs() < 1.0);
        // Overloaded by latency: 30 s calls for 15 s callers. Nothing
        // should wait (Q* = 0), and a shedding gateway refuses them all.
        let o = p.overload.clone().expect("an overload from latency");
        assert_eq!((o.from_s, o.until_s, o.queue_bound), (30.0, 90.0, 0.0));
        assert_eq!(p.full.refused_share, Some(1.0));
        let slow = &p.full.phases[1];
        assert!((slow.in_flight - 600.0).abs() < 1e-6, "{}", slow.in_flight);
        let text = report::plan_text(&p);
        assert!(
            text.contains("none can finish inside the patience"),
            "{text}"
        );
    }

    #[test]
    fn a_memory_ceiling_says_when_an_unbounded_gateway_dies() {
        let text = r#"
[scenario]
name = "slow-upstream"
prompt_bytes = "1MB"
[provider.latency]
ttft = { fixed = "1s" }
[[provider.timeline]]
name = "stuck"
from = "30s"
until = "90s"
latency = { ttft = { fixed = "30s" } }
[gateway]
memory_ceiling = "400MB"
[gateway.reference]
mode = "naive"
[load]
patience = { fixed = "15s" }
[[load.phases]]
duration = "3m"
rate = 20
"#;
        let p = plan(&scenario(text));
        let after = p.full.memory_full_after_s.unwrap();
        assert!((after - 20.0).abs() < 1e-6, "{after}");
        assert!(
            report::plan_text(&p).contains("about 20s into"),
            "{}",
            report::plan_text(&p)
        );
    }
}
