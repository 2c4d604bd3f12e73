//! Several providers behind one gateway: what the judge keeps of each
//! provider as its calls go by ([`Routing`]), and the two checks on them,
//! `cooldown_honoured` and `failover` ([`Family::Routing`](crate::Family)).
//!
//! The judge hands each call over in the order it releases them, by their
//! receipt at the provider (`judge`'s module docs): when a call received
//! at `r` comes, every call received before `r` has come, so every
//! refusal that ended before `r` is known. That is all `cooldown_honoured`
//! needs to hold: the Retry-After windows still open at `r`, a few per
//! provider.
//!
//! - A provider's refusal that announced a Retry-After (its record's
//!   `retry_after_ms`, else `retry_after_s`) opens a window from the
//!   refusal's end to the end of that wait. A later call to the same
//!   provider received inside it, `lead` after the end of the earliest
//!   refusal whose window holds it, is counted by its lead; at the end,
//!   calls whose lead is under the grace (the measured round trip plus
//!   `margin`: calls already on their way when the refusal left) are
//!   not counted.
//! - Each provider's calls and refusals per scenario second, for the
//!   timeline and `failover`.
//! - The gateway's own `all_upstreams_cooling` refusals: each one's
//!   truth is the time from it until a provider next accepted a call
//!   (the shortest cooldown left, as the providers kept it), the first
//!   call answered `ok` received after it; `retry_after` judges their
//!   Retry-After against that instead of the backlog's drain time.

use std::collections::VecDeque;

use hdrhistogram::Histogram;

use crate::expect::{CooldownHonouredThreshold, FailoverThreshold};
use crate::tally::retry_after_within;
use crate::timeline::{histogram, record, ProviderSeconds, Second, MAX_SECONDS};
use crate::verdict::{count, num, percent, plural, Figure, Status, Verdict, Worse};

// The checks of several providers (`Family::Routing`) follow the others
// in a judgement that has them: `cooldown_honoured` when a provider
// announced a Retry-After or the run has several providers, `failover`
// when it has several. A one-provider run that was never told a
// Retry-After has neither: its checklist is as it was.

/// The most providers the judge tells apart (a gateway routes over at
/// most 64; records naming more are damaged, not a scenario's).
pub(crate) const MAX_PROVIDERS: usize = 256;

/// The gateway's reason for a refusal when every upstream is cooling.
pub(crate) const ALL_COOLING: &str = "all_upstreams_cooling";

/// A provider in trouble, on the rehearsal's clock: what `failover` is
/// judged against (see [`crate::Judge::providers`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TroubleWindow {
    /// The provider's index in [`Routing`].
    pub(crate) provider: usize,
    /// Why, in a few words.
    pub(crate) why: String,
    pub(crate) from_us: u64,
    pub(crate) to_us: u64,
    /// What the others can serve meanwhile, per scenario second of the
    /// rehearsal (`None`: unlimited).
    pub(crate) others_per_s: Option<f64>,
}

/// One provider, as the calls go by.
#[derive(Debug, Clone)]
struct Provider {
    name: String,
    calls: u64,
    /// Refusals (429, 503, 529) and those that announced a Retry-After.
    refusals: u64,
    announced: u64,
    /// The windows still open: (the refusal's end, the window's end).
    windows: Vec<(u64, u64)>,
    /// Calls received inside a window: their lead after the earliest
    /// refusal whose window holds them, microseconds.
    leads: Histogram<u64>,
    /// Of them, the gateway's own retries (a second call or later for one
    /// client attempt): what tells a gateway that retried into the window
    /// from one that passed each request straight on.
    retry_leads: Histogram<u64>,
    /// The refusal statuses it gave (429, 503, 529), to name them.
    refused_with: std::collections::BTreeSet<u16>,
    /// Calls and refusals received per scenario second.
    seconds: Vec<[u64; 2]>,
}

impl Provider {
    /// Its calls received inside one of its Retry-After windows, a lead of
    /// `grace` or more after the refusal that opened it.
    fn inside(&self, grace: u64) -> u64 {
        if self.leads.is_empty() {
            0
        } else {
            self.leads.count_between(grace, u64::MAX)
        }
    }

    fn new(name: &str) -> Self {
        Provider {
            name: name.to_string(),
            calls: 0,
            refusals: 0,
            announced: 0,
            windows: Vec::new(),
            leads: histogram(),
            retry_leads: histogram(),
            refused_with: std::collections::BTreeSet::new(),
            seconds: Vec::new(),
        }
    }
}

/// One call, as [`Routing::call`] takes it.
pub(crate) struct RoutedCall {
    pub(crate) provider: usize,
    pub(crate) received_us: u64,
    /// Its end (see [`crate::call_end_us`]).
    pub(crate) end_us: u64,
    /// Its row of the timeline.
    pub(crate) second: usize,
    pub(crate) status: u16,
    /// Answered `ok`, whole.
    pub(crate) accepted: bool,
    /// The Retry-After it announced, milliseconds.
    pub(crate) retry_after_ms: Option<u64>,
    /// The gateway's own retry: a later call for a client attempt that
    /// had one already (the join's).
    pub(crate) retry: bool,
}

/// What the judge keeps of the providers: see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Routing {
    providers: Vec<Provider>,
    /// The scenario has several providers (the plan says so), whatever
    /// the records name.
    several: bool,
    pub(crate) troubles: Vec<TroubleWindow>,
    /// Every-upstream-cooling refusals not yet followed by an accepted
    /// call: (their end, Retry-After ms, its header's granularity ms).
    cooling: VecDeque<(u64, u64, u64)>,
    /// Those judged: their errors against the time until a provider next
    /// accepted (µs), and how many were within their bound.
    pub(crate) cooling_errors: Histogram<u64>,
    pub(crate) cooling_within: u64,
    /// `retry_after`'s tolerance.
    tolerance: f64,
    /// The measured round trip, microseconds (set at the end).
    pub(crate) round_trip_us: u64,
}

impl Routing {
    pub(crate) fn new(tolerance: f64) -> Self {
        Routing {
            providers: Vec::new(),
            several: false,
            troubles: Vec::new(),
            cooling: VecDeque::new(),
            cooling_errors: histogram(),
            cooling_within: 0,
            tolerance,
            round_trip_us: 0,
        }
    }

    /// The scenario's providers, in its order (several: the checks of
    /// several providers are on).
    pub(crate) fn name_providers(&mut self, names: &[String]) {
        for n in names {
            self.index(n);
        }
        self.several = names.len() > 1;
    }

    /// The index of the provider named `name`; past [`MAX_PROVIDERS`]
    /// distinct names, one past the last (a call of it is not counted:
    /// that many names are not providers but a damaged file).
    pub(crate) fn index(&mut self, name: &str) -> usize {
        if let Some(i) = self.providers.iter().position(|p| p.name == name) {
            return i;
        }
        if self.providers.len() >= MAX_PROVIDERS {
            return MAX_PROVIDERS;
        }
        self.providers.push(Provider::new(name));
        self.providers.len() - 1
    }

    /// Returns true if and only if the run has several providers, by the
    /// plan or by the records.
    pub(crate) fn several(&self) -> bool {
        self.several || self.providers.len() > 1
    }

    /// Returns true if and only if a provider announced a Retry-After.
    pub(crate) fn any_announced(&self) -> bool {
        self.providers.iter().any(|p| p.announced > 0)
    }

    /// A gateway refusal because every upstream was cooling, ended at
    /// `done_us` with a Retry-After of `ra_ms` in a header of
    /// `granularity_ms`.
    pub(crate) fn cooling_refusal(&mut self, done_us: u64, ra_ms: u64, granularity_ms: u64) {
        self.cooling.push_back((done_us, ra_ms, granularity_ms));
    }

    /// How many every-upstream-cooling refusals are judged so far.
    pub(crate) fn cooling_judged(&self) -> u64 {
        self.cooling_errors.len()
    }

    /// A call, in release order.
    pub(crate) fn call(&mut self, c: &RoutedCall) {
        if c.accepted {
            self.accepted_at(c.received_us);
        }
        let Some(p) = self.providers.get_mut(c.provider) else {
            return;
        };
        p.calls += 1;
        let refused = matches!(c.status, 429 | 503 | 529);
        let second = c.second.min(MAX_SECONDS as usize - 1);
        if p.seconds.len() <= second {
            p.seconds.resize(second + 1, [0, 0]);
        }
        p.seconds[second][0] += 1;
        p.seconds[second][1] += u64::from(refused);
        let r = c.received_us;
        // Later calls are received at `r` or after: a window over by then
        // holds none of them.
        p.windows.retain(|&(_, end)| end > r);
        let earliest = p
            .windows
            .iter()
            .filter(|&&(from, _)| from <= r)
            .map(|&(from, _)| from)
            .min();
        if let Some(from) = earliest {
            record(&mut p.leads, r - from);
            if c.retry {
                record(&mut p.retry_leads, r - from);
            }
        }
        if refused {
            p.refusals += 1;
            p.refused_with.insert(c.status);
            if let Some(ra) = c.retry_after_ms.filter(|&ra| ra > 0) {
                p.announced += 1;
                let end = c.end_us.max(r);
                p.windows
                    .push((end, end.saturating_add(ra.saturating_mul(1000))));
            }
        }
    }

    /// A provider accepted a call received at `t`: every cooling refusal
    /// before it is judged against the time until then.
    fn accepted_at(&mut self, t: u64) {
        let tolerance = self.tolerance;
        let mut kept = VecDeque::new();
        while let Some((done, ra, granularity)) = self.cooling.pop_front() {
            if done < t {
                let (error_us, within) = retry_after_within(ra, granularity, t - done, tolerance);
                record(&mut self.cooling_errors, error_us);
                self.cooling_within += u64::from(within);
            } else {
                kept.push_back((done, ra, granularity));
            }
        }
        self.cooling = kept;
    }

    /// Each provider's calls and refusals per second, named, for the
    /// timeline: empty with one provider.
    pub(crate) fn per_second(&self, n: usize) -> Vec<ProviderSeconds> {
        if !self.several() {
            return Vec::new();
        }
        self.providers
            .iter()
            .map(|p| {
                let mut calls = vec![0; n];
                let mut refusals = vec![0; n];
                for (k, [c, r]) in p.seconds.iter().enumerate().take(n) {
                    calls[k] = *c;
                    refusals[k] = *r;
                }
                ProviderSeconds {
                    name: p.name.clone(),
                    calls,
                    refusals,
                }
            })
            .collect()
    }

    /// The grace under which a call inside a window is not counted: the
    /// measured round trip plus `margin`.
    fn grace_us(&self, th: &CooldownHonouredThreshold) -> u64 {
        self.round_trip_us
            .saturating_add(th.margin.as_micros().min(u128::from(u64::MAX)) as u64)
    }

    /// The calls that reached a provider inside a Retry-After window it
    /// had announced, as `cooldown_honoured` counts them (after its
    /// grace), and all the providers' calls; `None` when no provider
    /// announced one. `retry_amplification` says it beside its ratio.
    pub(crate) fn inside_windows(&self, th: &CooldownHonouredThreshold) -> Option<(u64, u64)> {
        if !self.any_announced() {
            return None;
        }
        let grace = self.grace_us(th);
        let inside = self.providers.iter().map(|p| p.inside(grace)).sum();
        let calls = self.providers.iter().map(|p| p.calls).sum();
        Some((inside, calls))
    }

    /// A provider as the verdicts name it: by its name with several, as
    /// "the provider" with one (whose records call it `default`).
    fn said_name(&self, p: &Provider) -> String {
        if self.several() {
            p.name.clone()
        } else {
            "the provider".to_string()
        }
    }

    /// What a gateway that called into `w`'s windows should do instead,
    /// by what it did: retried into them itself, or passed each request
    /// straight on (and the provider's refusals back); sending a request
    /// on to another provider only when there is one.
    fn cooldown_advice(&self, w: &Windowed) -> String {
        let several = self.several();
        if w.retried > 0 {
            let whose = if w.retried == w.inside {
                "all of them".to_string()
            } else {
                format!("{} of them", count(w.retried))
            };
            let instead = if several {
                "cool it down for the Retry-After it gave, and send the request on to another"
            } else {
                "hold the request for the Retry-After it gave, or shed it with that Retry-After"
            };
            return format!(
                "{whose} the gateway's own retries into a cooling provider, instead of waiting the Retry-After out ({instead})"
            );
        }
        let whose = if several {
            format!("{}'s", w.name)
        } else {
            "the provider's".to_string()
        };
        let statuses = w
            .refused_with
            .iter()
            .map(|s| format!("{s}s"))
            .collect::<Vec<_>>();
        let refusals = match statuses.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => "refusals".to_string(),
        };
        let another = if several {
            ", or send them to another provider"
        } else {
            ""
        };
        format!(
            "none was a retry of the gateway's own: the gateway passed {whose} {refusals} through without waiting; hold requests or shed with the provider's Retry-After{another}"
        )
    }

    /// `cooldown_honoured`, when the run has it (see the module's docs).
    pub(crate) fn cooldown_honoured(&self, th: &CooldownHonouredThreshold) -> Option<Verdict> {
        const ID: &str = crate::Check::CooldownHonoured.id();
        if !self.several() && !self.any_announced() {
            return None;
        }
        if !th.enabled {
            return Some(Verdict::off(ID));
        }
        if !self.any_announced() {
            return Some(Verdict::skipped(
                ID,
                "no Retry-After announced",
                "no provider refused with a Retry-After, so there was no window to honour",
            ));
        }
        let grace = self.grace_us(th);
        let predicted = format!(
            "at most {} of each provider's calls reach it inside a Retry-After window it announced (from its refusal's end; a call received within {} ms of that end, the measured round trip {} ms plus a margin of {} ms, was already on its way and is not counted)",
            percent(th.max_share),
            num(grace as f64 / 1000.0, 1),
            num(self.round_trip_us as f64 / 1000.0, 1),
            num(th.margin.as_secs_f64() * 1000.0, 1),
        );
        let rows: Vec<Windowed> = self
            .providers
            .iter()
            .filter(|p| p.announced > 0)
            .map(|p| {
                let after_grace = |h: &Histogram<u64>| {
                    if h.is_empty() {
                        0
                    } else {
                        h.count_between(grace, u64::MAX)
                    }
                };
                let inside = p.inside(grace);
                Windowed {
                    name: self.said_name(p),
                    inside,
                    retried: after_grace(&p.retry_leads).min(inside),
                    calls: p.calls,
                    share: inside as f64 / p.calls.max(1) as f64,
                    refused_with: p.refused_with.iter().copied().collect(),
                }
            })
            .collect();
        let observed = rows
            .iter()
            .map(|w| {
                let retries = if w.inside > 0 {
                    format!("; {} of them the gateway's own retries", count(w.retried))
                } else {
                    String::new()
                };
                format!(
                    "{}: {} of {} calls inside its windows ({}{retries})",
                    w.name,
                    count(w.inside),
                    count(w.calls),
                    percent(w.share)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        // Some provider announced one (above), so there is a worst.
        let worst = rows.iter().max_by(|a, b| a.share.total_cmp(&b.share))?;
        let announced: u64 = self.providers.iter().map(|p| p.announced).sum();
        let (status, short, detail) = if worst.share <= th.max_share {
            (
                Status::Pass,
                format!("{} of calls inside a window at most", percent(worst.share)),
                format!(
                    "the gateway kept out of the {} Retry-After windows its providers announced: at most {} of a provider's calls came inside one ({}, {} of {})",
                    count(announced),
                    percent(worst.share),
                    worst.name,
                    count(worst.inside),
                    count(worst.calls),
                ),
            )
        } else {
            (
                Status::Fail,
                format!(
                    "{}: {} of its calls in Retry-After windows (bound {})",
                    worst.name,
                    percent(worst.share),
                    percent(th.max_share)
                ),
                format!(
                    "{} reached {} inside a Retry-After window it had just announced, {} of its {} calls: {}",
                    plural(worst.inside, "call", "calls"),
                    worst.name,
                    percent(worst.share),
                    count(worst.calls),
                    self.cooldown_advice(worst),
                ),
            )
        };
        Some(
            Verdict::new(ID, status, short, predicted, observed, detail).with(Figure {
                value: worst.share,
                unit: "share",
                measures: "calls inside a Retry-After window",
                worse: Worse::Higher,
            }),
        )
    }

    /// `failover`, when the run has several providers: `rows` are the
    /// timeline's, from `start_us`, `bin_us` each.
    pub(crate) fn failover(
        &self,
        th: &FailoverThreshold,
        rows: &[Second],
        start_us: u64,
        bin_us: u64,
    ) -> Option<Verdict> {
        const ID: &str = crate::Check::Failover.id();
        if !self.several() {
            return None;
        }
        if !th.enabled {
            return Some(Verdict::off(ID));
        }
        let within_us = th.within.as_micros().min(u128::from(u64::MAX)) as u64;
        let judged: Vec<Span> = self
            .troubles
            .iter()
            .filter(|t| t.others_per_s != Some(0.0))
            .filter_map(|t| self.span(t, rows, start_us, bin_us, within_us))
            .collect();
        if judged.is_empty() {
            let why = if self.troubles.is_empty() {
                "no provider's timeline puts it in trouble (slower 2x or more, refusing or failing half its calls, half its quota or ceiling), so no failover was needed"
            } else {
                "each provider's trouble was shorter than `within`, or came while no other provider had room"
            };
            return Some(Verdict::skipped(ID, "no trouble to route around", why));
        }
        let predicted = format!(
            "from {} after a provider's trouble starts to its end, it has at most {} of the calls, and the answers are at least {} of what the other providers can serve (at most the offered load)",
            crate::verdict::secs(th.within.as_secs_f64()),
            percent(th.max_share),
            percent(th.min_share),
        );
        let observed = judged
            .iter()
            .map(|s| {
                format!(
                    "{} ({}): {} of {} calls ({}); {} answers of {} servable ({})",
                    s.name,
                    s.why,
                    count(s.calls),
                    count(s.all_calls),
                    percent(s.share()),
                    count(s.served),
                    num(s.servable, 0),
                    percent(s.served_share()),
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let late = judged.iter().find(|s| s.share() > th.max_share);
        let short_of = judged.iter().find(|s| s.served_share() < th.min_share);
        let worst_share = judged.iter().map(Span::share).fold(0.0, f64::max);
        let (status, short, detail) = match (late, short_of) {
            (Some(s), _) => (
                Status::Fail,
                format!(
                    "{} kept {} of the calls in its trouble (bound {})",
                    s.name,
                    percent(s.share()),
                    percent(th.max_share)
                ),
                format!(
                    "traffic did not leave {} in trouble ({}): {} of the {} calls from {} after it started went to it; a gateway should take a slow or refusing upstream out (a timeout, a cooldown) and send its calls to the others",
                    s.name,
                    s.why,
                    count(s.calls),
                    count(s.all_calls),
                    crate::verdict::secs(th.within.as_secs_f64()),
                ),
            ),
            (None, Some(s)) => (
                Status::Fail,
                format!(
                    "{} while {} was in trouble, {} of what the others can serve (bound {})",
                    plural(s.served, "answer", "answers"),
                    s.name,
                    percent(s.served_share()),
                    percent(th.min_share)
                ),
                format!(
                    "traffic left {} in trouble, but the others served only {} of the {} they can ({}): the gateway refused or lost what they had room for",
                    s.name,
                    plural(s.served, "answer", "answers"),
                    num(s.servable, 0),
                    percent(s.served_share()),
                ),
            ),
            (None, None) => (
                Status::Pass,
                format!("calls left the troubled provider: {} at most", percent(worst_share)),
                format!(
                    "in each provider's trouble the gateway moved its calls to the others within {} (at most {} stayed) and served at least {} of what they can serve",
                    crate::verdict::secs(th.within.as_secs_f64()),
                    percent(worst_share),
                    percent(judged.iter().map(Span::served_share).fold(f64::INFINITY, f64::min)),
                ),
            ),
        };
        Some(
            Verdict::new(ID, status, short, predicted, observed, detail).with(Figure {
                value: worst_share,
                unit: "share",
                measures: "troubled provider's share of the calls",
                worse: Worse::Higher,
            }),
        )
    }

    /// What the records show of trouble `t`, from `within_us` after its
    /// start to its end, in whole rows; `None` when no whole row is left.
    fn span(
        &self,
        t: &TroubleWindow,
        rows: &[Second],
        start_us: u64,
        bin_us: u64,
        within_us: u64,
    ) -> Option<Span> {
        let bin = bin_us.max(1);
        let from = t.from_us.saturating_add(within_us).saturating_sub(start_us);
        let first = from.div_ceil(bin) as usize;
        let last = (t.to_us.saturating_sub(start_us) / bin) as usize;
        let last = last.min(rows.len());
        if first >= last {
            return None;
        }
        let sum = |p: &Provider| -> u64 {
            p.seconds
                .iter()
                .skip(first)
                .take(last - first)
                .map(|s| s[0])
                .sum()
        };
        let calls = self.providers.get(t.provider).map_or(0, sum);
        let all_calls = self.providers.iter().map(sum).sum();
        let served = rows[first..last].iter().map(|r| r.ok).sum();
        let offered: u64 = rows[first..last].iter().map(|r| r.offered).sum();
        let n = (last - first) as f64;
        let servable = t
            .others_per_s
            .map_or(offered as f64, |o| (o * n).min(offered as f64));
        Some(Span {
            name: self
                .providers
                .get(t.provider)
                .map_or("?", |p| &p.name)
                .to_string(),
            why: t.why.clone(),
            calls,
            all_calls,
            served,
            servable,
        })
    }
}

/// A provider that announced a Retry-After, as `cooldown_honoured` reads
/// it.
struct Windowed {
    /// As the verdict names it ([`Routing::said_name`]).
    name: String,
    /// Its calls received inside its windows (past the grace), and of
    /// them the gateway's own retries.
    inside: u64,
    retried: u64,
    calls: u64,
    /// `inside` / `calls`.
    share: f64,
    /// The refusal statuses it gave, in order.
    refused_with: Vec<u16>,
}

/// A trouble as the records show it.
struct Span {
    name: String,
    why: String,
    calls: u64,
    all_calls: u64,
    served: u64,
    servable: f64,
}

impl Span {
    fn share(&self) -> f64 {
        if self.all_calls == 0 {
            0.0
        } else {
            self.calls as f64 / self.all_calls as f64
        }
    }

    fn served_share(&self) -> f64 {
        if self.servable <= 0.0 {
            1.0
        } else {
            (self.served as f64 / self.servable).min(1.0)
        }
    }
}

/// The measured round trip: twice the 1st percentile of the calls' queue
/// wait (an attempt's send to its first call's receipt, the quickest way
/// through the gateway), in microseconds; 0 without any.
pub(crate) fn round_trip_us(queue_wait: &Histogram<u64>) -> u64 {
    if queue_wait.is_empty() {
        return 0;
    }
    queue_wait.value_at_quantile(0.01).saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use wire::{ClientOutcome, ClientRecord, ProviderRecord};

    use crate::expect::Thresholds;
    use crate::stories::{at, attempt, call, expect};
    use crate::{call_end_us, Judge, Judgement, Status};

    /// A call to `provider` received at `ms`, answered 10 ms later.
    fn to(provider: &str, id: &str, ms: u64) -> ProviderRecord {
        let mut c = call(id, ms, ms, ms + 10);
        c.provider = (provider != wire::DEFAULT_PROVIDER).then(|| provider.to_string());
        c
    }

    /// A refusal by `provider` at `ms` that announced `ra_ms`.
    fn refusal(provider: &str, id: &str, ms: u64, ra_ms: u64) -> ProviderRecord {
        let mut c = to(provider, id, ms);
        c.finished_us = Some(at(ms + 1));
        c.outcome = wire::ProviderOutcome::QuotaExceeded;
        c.status = 429;
        c.completion_tokens = 0;
        c.retry_after_s = Some(ra_ms.div_ceil(1000));
        c.retry_after_ms = Some(ra_ms);
        c
    }

    /// The records judged in one pass, fed in end order, with the plan's
    /// providers and troubles (full scale = the run's).
    fn judged(
        attempts: &[ClientRecord],
        calls: &[ProviderRecord],
        plan: Option<(&[wire::ProviderPlan], &[wire::Trouble])>,
    ) -> Judgement {
        let expect = expect(None, 40_000, 30.0);
        let mut j = Judge::new(&expect, &Thresholds::default());
        if let Some((providers, troubles)) = plan {
            j.providers(
                providers,
                troubles,
                wire::Scale {
                    time: 1.0,
                    quota: 1.0,
                },
            );
        }
        let mut attempts: Vec<_> = attempts.to_vec();
        attempts.sort_by_key(|a| a.done_us);
        let mut calls: Vec<_> = calls.to_vec();
        calls.sort_by_key(call_end_us);
        let (mut a, mut c) = (
            attempts.into_iter().peekable(),
            calls.into_iter().peekable(),
        );
        loop {
            match (a.peek(), c.peek()) {
                (Some(x), Some(y)) if x.done_us <= call_end_us(y) => j.attempt(a.next().unwrap()),
                (_, Some(_)) => j.call(c.next().unwrap()),
                (Some(_), None) => j.attempt(a.next().unwrap()),
                (None, None) => break,
            }
        }
        j.finish()
    }

    fn two() -> Vec<wire::ProviderPlan> {
        ["primary", "secondary"]
            .map(|name| wire::ProviderPlan {
                name: name.into(),
                phases: Vec::new(),
            })
            .to_vec()
    }

    #[test]
    fn calls_inside_an_announced_window_count_but_those_on_their_way_do_not() {
        // Refused at 1 s with 2 s to wait; 100 calls after the window.
        let mut calls = vec![refusal("primary", "r", 1_000, 2_000)];
        calls.push(to("primary", "on-its-way", 1_010));
        calls.extend((0..100).map(|i| to("primary", &format!("p{i}"), 3_100 + i * 10)));
        calls.extend((0..50).map(|i| to("secondary", &format!("s{i}"), 1_100 + i * 10)));
        let j = judged(&[], &calls, Some((&two(), &[])));
        let v = j.verdict("cooldown_honoured").unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.observed.contains("primary: 0 of 102 calls"), "{v:?}");
        // Two calls into the window, 1.5 s in: 2 of 104, over 1%.
        calls.push(to("primary", "eager-1", 1_500));
        calls.push(to("primary", "eager-2", 1_600));
        let j = judged(&[], &calls, Some((&two(), &[])));
        let v = j.verdict("cooldown_honoured").unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.short.starts_with("primary: 1.9%"), "{v:?}");
        assert_eq!(v.figure.unwrap().value, 2.0 / 104.0);
        // The verdicts of several providers come after the others.
        let ids: Vec<_> = j.verdicts.iter().map(|v| v.id).collect();
        let always = crate::always_judged().count();
        let routing: Vec<&str> = crate::Check::ALL[always..].iter().map(|c| c.id()).collect();
        assert_eq!(&ids[always..], routing);
        // Each provider's calls and refusals per second, in the timeline.
        let csv = j.timeline.to_csv();
        let header = csv.lines().next().unwrap();
        assert!(
            header.ends_with(
                ",drain_s,calls_primary,refusals_primary,calls_secondary,refusals_secondary"
            ),
            "{header}"
        );
        assert!(csv.lines().nth(2).unwrap().ends_with(",4,1,50,0"), "{csv}");
    }

    /// People who each send one attempt at `ms`, 100 ms apart, answered
    /// 20 ms later through the gateway; the provider named `provider`
    /// refused the first with a Retry-After of 5 s. `retry`: the gateway
    /// retried that first refusal itself, inside the window, twice.
    fn into_the_window(provider: &str, retry: bool) -> (Vec<ClientRecord>, Vec<ProviderRecord>) {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for i in 0..10u64 {
            let (id, ms) = (format!("p{i}"), 1_000 + i * 100);
            let mut a = attempt(&id, 1, ms, ms + 20, ClientOutcome::Ok, None);
            if i == 0 {
                a.done_us = at(ms + 700);
                if !retry {
                    // Passed through: the client saw the provider's 429.
                    a.outcome = ClientOutcome::Shed;
                    a.status = Some(429);
                }
                calls.push(refusal(provider, &id, ms + 5, 5_000));
                if retry {
                    calls.push(refusal(provider, &id, ms + 300, 5_000));
                    calls.push(to(provider, &id, ms + 600));
                }
            } else {
                calls.push(to(provider, &id, ms + 5));
            }
            attempts.push(a);
        }
        (attempts, calls)
    }

    /// What `cooldown_honoured` advises depends on what the gateway did:
    /// retried into the window itself, or passed each request straight on
    /// (and the provider's 429 back); another provider is named only when
    /// there is one, and one provider is "the provider", not `default`.
    #[test]
    fn cooldown_advice_follows_what_the_gateway_did() {
        let one = |retry| {
            let (attempts, calls) = into_the_window(wire::DEFAULT_PROVIDER, retry);
            judged(&attempts, &calls, None)
                .verdict("cooldown_honoured")
                .cloned()
                .unwrap()
        };
        let passed = one(false);
        assert_eq!(passed.status, Status::Fail, "{passed:?}");
        assert_eq!(
            passed.detail,
            "9 calls reached the provider inside a Retry-After window it had just announced, 90% of its 10 calls: none was a retry of the gateway's own: the gateway passed the provider's 429s through without waiting; hold requests or shed with the provider's Retry-After"
        );
        assert_eq!(
            passed.short,
            "the provider: 90% of its calls in Retry-After windows (bound 1%)"
        );
        assert!(
            passed.observed.starts_with("the provider: 9 of 10 calls inside its windows (90%; 0 of them the gateway's own retries)"),
            "{passed:?}"
        );
        let retried = one(true);
        assert_eq!(retried.status, Status::Fail, "{retried:?}");
        assert!(
            retried.detail.ends_with(": 2 of them the gateway's own retries into a cooling provider, instead of waiting the Retry-After out (hold the request for the Retry-After it gave, or shed it with that Retry-After)"),
            "{retried:?}"
        );
        for v in [&passed, &retried] {
            assert!(!v.detail.contains("another"), "{v:?}");
            assert!(!format!("{v:?}").contains("default"), "{v:?}");
        }
        // With several, the provider by its name, and another to go to.
        let several = |retry| {
            let (attempts, calls) = into_the_window("primary", retry);
            judged(&attempts, &calls, Some((&two(), &[])))
                .verdict("cooldown_honoured")
                .cloned()
                .unwrap()
        };
        let v = several(true);
        assert!(
            v.detail.starts_with("11 calls reached primary inside a Retry-After window")
                && v.detail.ends_with("(cool it down for the Retry-After it gave, and send the request on to another)"),
            "{v:?}"
        );
        let v = several(false);
        assert!(
            v.detail.ends_with("the gateway passed primary's 429s through without waiting; hold requests or shed with the provider's Retry-After, or send them to another provider"),
            "{v:?}"
        );
    }

    #[test]
    fn records_naming_thousands_of_providers_hold_no_more_than_the_cap() {
        let calls: Vec<_> = (0..1_000)
            .map(|i| to(&format!("p{i}"), &format!("c{i}"), i))
            .collect();
        let j = judged(&[], &calls, None);
        assert_eq!(j.timeline.providers.len(), super::MAX_PROVIDERS);
        assert_eq!(j.summary.provider.calls, 1_000, "each still a call");
    }

    #[test]
    fn one_provider_is_judged_only_once_it_announced_a_retry_after() {
        let calls: Vec<_> = (0..10)
            .map(|i| to("default", &format!("c{i}"), i * 100))
            .collect();
        let j = judged(&[], &calls, None);
        assert_eq!(
            j.verdicts.len(),
            crate::always_judged().count(),
            "as it always was"
        );
        assert!(j.timeline.providers.is_empty());
        assert!(!j.timeline.to_csv().contains("calls_"));
        // A gateway in front of one provider calling into its window.
        let mut calls = calls;
        calls.push(refusal("default", "r", 1_000, 5_000));
        calls.extend((0..9).map(|i| to("default", &format!("d{i}"), 1_200 + i * 100)));
        let j = judged(&[], &calls, None);
        assert_eq!(j.verdicts.len(), crate::always_judged().count() + 1);
        let v = j.verdict("cooldown_honoured").unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(j.verdict("failover").is_none());
        // Several providers that never announced one: said why.
        let calls: Vec<_> = (0..10)
            .map(|i| to("primary", &format!("c{i}"), i * 100))
            .collect();
        let j = judged(&[], &calls, Some((&two(), &[])));
        let v = j.verdict("cooldown_honoured").unwrap();
        assert_eq!(
            (v.status, v.short.as_str()),
            (Status::Skipped, "no Retry-After announced")
        );
        let v = j.verdict("failover").unwrap();
        assert_eq!(v.status, Status::Skipped, "no trouble in the plan: {v:?}");
    }

    /// Four people a second for 40 s, each answered at once by the
    /// primary until `moved_ms` and by the secondary after it (every
    /// `keep`th still by the primary).
    fn routed(moved_ms: u64, keep: u64) -> (Vec<ClientRecord>, Vec<ProviderRecord>) {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for i in 0..160 {
            let ms = i * 250;
            let id = format!("p{i}");
            attempts.push(attempt(&id, 1, ms, ms + 20, ClientOutcome::Ok, None));
            let provider = if ms < moved_ms || i % keep == 0 {
                "primary"
            } else {
                "secondary"
            };
            calls.push(to(provider, &id, ms + 5));
        }
        (attempts, calls)
    }

    fn trouble(others_per_min: Option<f64>) -> Vec<wire::Trouble> {
        vec![wire::Trouble {
            provider: "primary".into(),
            why: "7x slower".into(),
            start_s: 10.0,
            duration_s: 20.0,
            others_per_min,
            offered_per_min: 240.0,
        }]
    }

    #[test]
    fn failover_passes_when_calls_leave_in_time_and_the_others_serve() {
        let (attempts, calls) = routed(13_000, u64::MAX);
        let j = judged(&attempts, &calls, Some((&two(), &trouble(Some(600.0)))));
        let v = j.verdict("failover").unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.observed
                .contains("primary (7x slower): 0 of 60 calls (0%)"),
            "{v:?}"
        );
        // Still there after `within`: 15 s in, past 10 s + 5 s.
        let (attempts, calls) = routed(19_000, u64::MAX);
        let v = judged(&attempts, &calls, Some((&two(), &trouble(Some(600.0)))))
            .verdict("failover")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.short.starts_with("primary kept 26.7% of the calls"),
            "{v:?}"
        );
        // Every third call kept at the primary: over 10%.
        let (attempts, calls) = routed(13_000, 3);
        let v = judged(&attempts, &calls, Some((&two(), &trouble(Some(600.0)))))
            .verdict("failover")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.short.starts_with("primary kept 3"), "{v:?}");
    }

    #[test]
    fn failover_wants_the_answers_the_others_can_serve_and_skips_without_room() {
        // The others could serve 240/min, the offered load: 4 a second.
        let (mut attempts, calls) = routed(13_000, u64::MAX);
        // Half the answers in the trouble refused instead.
        for (_, a) in attempts
            .iter_mut()
            .enumerate()
            .filter(|(i, a)| a.sent_us > at(15_000) && i % 2 == 0)
        {
            a.outcome = ClientOutcome::Shed;
            a.status = Some(503);
        }
        let v = judged(&attempts, &calls, Some((&two(), &trouble(Some(600.0)))))
            .verdict("failover")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.short.contains("of what the others can serve"), "{v:?}");
        // The others can serve only 120/min: half the offered load is all.
        let v = judged(&attempts, &calls, Some((&two(), &trouble(Some(120.0)))))
            .verdict("failover")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        // No other provider has room: nothing to judge.
        let v = judged(&attempts, &calls, Some((&two(), &trouble(Some(0.0)))))
            .verdict("failover")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Skipped, "{v:?}");
    }

    #[test]
    fn every_upstream_cooling_is_judged_against_the_next_acceptance() {
        let cooling = |ra_ms: u64| {
            let mut a = attempt("c", 1, 1_000, 1_001, ClientOutcome::Shed, Some(ra_ms));
            a.status = Some(503);
            a.reason = Some("all_upstreams_cooling".into());
            a.retry_after_header = Some(wire::RetryAfterHeader::RetryAfterMs);
            a
        };
        // A provider accepts again 2 s after the refusal.
        let mut calls = vec![refusal("primary", "r", 900, 2_100)];
        calls.push(to("primary", "next", 3_001));
        for (ra, within) in [(2_000, "1 within"), (9_000, "0 within")] {
            let j = judged(&[cooling(ra)], &calls, Some((&two(), &[])));
            let v = j.verdict("retry_after").unwrap();
            assert!(
                v.detail
                    .contains("1 of the sheds were every upstream cooling")
                    && v.detail.contains(within),
                "{v:?}"
            );
        }
        // A 503 with no Retry-After fails retry_after as any shed does.
        let mut bare = cooling(0);
        bare.retry_after_ms = None;
        let v = judged(&[bare], &calls, Some((&two(), &[])))
            .verdict("retry_after")
            .cloned()
            .unwrap();
        assert_eq!(v.status, Status::Fail, "{v:?}");
    }
}
