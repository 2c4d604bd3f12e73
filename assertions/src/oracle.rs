//! The one pass's test oracle (tests only): the judge as it was before the
//! one pass, every record in memory, joined by request id in one go,
//! every level from sorted events. The one pass ([`crate::Judge`]) must
//! agree with it exactly on the stories (random ones among them), at
//! several time scales, on streams shuffled within the window, and
//! through the same checks; its tests below are those differential tests,
//! and the judge's own tests compare a few figures of edge cases with it.
//! It is no test of the join's meaning: `timeline`'s tests are, on the one
//! pass.

use std::collections::{BTreeSet, HashMap};

use wire::{
    ClientOutcome, ClientRecord, Join, ProviderEnd, ProviderOutcome, ProviderRecord, RefusalClass,
    RssSample,
};

use crate::aftermath::Aftermath;
use crate::delivery::{delivery, Deliveries, Received, Sent};
use crate::expect::{Expectations, Thresholds};
use crate::judgement::{conclude, Distribution, Judgement, Measured, Pass};
use crate::tally::{
    after_hangup, caller_gave_up, completed, cut_mid_stream, provider_wait_ms, relayed_retry_after,
    retry_after_within, CallSpan, Generation, RelayedRetryAfter, Tally,
};
use crate::timeline::{
    histogram, ms_percentiles, quantile, record, row_us, Counts, Drain, FirstShed, GatewayPeaks,
    Harness, Latencies, Percentiles, ProviderCounts, RefusalLine, Second, Summary, Timeline,
    MAX_SECONDS, US,
};

/// Judges a run as today's judge did, all in memory.
pub(crate) fn judge(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    expect: &Expectations,
    thresholds: &Thresholds,
) -> Judgement {
    judge_at(attempts, calls, rss, expect, thresholds, 1.0)
}

/// [`judge`] of a run made at `time_scale`: rows of a scenario second.
pub(crate) fn judge_at(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    expect: &Expectations,
    thresholds: &Thresholds,
    time_scale: f64,
) -> Judgement {
    // Over the time the run covered, as the one pass judges it.
    let (expect, stop) = crate::covered::covered(expect);
    let expect = &expect;
    let joined = Joined::new(attempts, calls, rss, expect.start_us, row_us(time_scale));
    let timeline = joined.timeline();
    let backlog: Vec<u64> = timeline.seconds.iter().map(|s| s.backlog).collect();
    let drain = joined.drain(expect, &backlog);
    let mut summary = joined.summary(&timeline);
    joined.hangups(&mut summary.provider, thresholds.cancel_on_hangup.within);
    let first_shed = joined.first_shed();
    let mut tally = joined.tally(expect, thresholds.retry_after.tolerance);
    tally.recovery = recovery(attempts, expect, thresholds, time_scale);
    let mut distribution = Distribution::new();
    for a in attempts {
        distribution.add(a);
    }
    conclude(
        Measured {
            timeline,
            summary,
            drain,
            first_shed,
            tally,
            distribution,
            pass: Pass::default(),
            routing: None,
            stop,
        },
        expect,
        thresholds,
        None,
    )
}

/// `recovery`'s people, from the attempts grouped by person: each
/// person's first attempt (by number, then send, then file order), whether
/// any was answered, whether any was refused for its tenant's entitlement.
fn recovery(
    attempts: &[ClientRecord],
    expect: &Expectations,
    thresholds: &Thresholds,
    time_scale: f64,
) -> Aftermath {
    let mut r = Aftermath::new(expect, thresholds.drain.within, row_us(time_scale), []);
    let mut people: HashMap<&str, Vec<(usize, &ClientRecord)>> = HashMap::new();
    for (i, a) in attempts.iter().enumerate() {
        people.entry(a.id.as_str()).or_default().push((i, a));
    }
    for list in people.values() {
        let Some(&(_, first)) = list.iter().min_by_key(|(i, a)| (a.attempt, a.sent_us, *i)) else {
            continue;
        };
        let answered = list.iter().any(|(_, a)| a.outcome == ClientOutcome::Ok);
        let limited = list
            .iter()
            .any(|(_, a)| a.outcome == ClientOutcome::TenantLimited);
        r.person(
            first.intended_us,
            first.tenant.as_deref(),
            answered,
            limited,
        );
    }
    r
}

impl Joined<'_> {
    /// The figures the checks read, counted from the joined records.
    fn tally(&self, expect: &Expectations, tolerance: f64) -> Tally {
        let mut t = Tally::new();
        t.attempts = self.attempts.len() as u64;
        t.people = self.people;
        t.served = self.served_us.len() as u64;
        for a in self.attempts {
            if let Some(k) = Tally::lost_kind(a.outcome).filter(|_| !a.was_not_sent()) {
                t.lost[k] += 1;
            }
        }
        if let Some((from, to)) = expect.overload {
            t.answered_in_overload = self
                .attempts
                .iter()
                .filter(|a| a.outcome == ClientOutcome::Ok && from <= a.done_us && a.done_us < to)
                .count() as u64;
            t.calls_answered_in_overload = self
                .answered_calls()
                .filter(|&(f, _)| from <= f && f < to)
                .count() as u64;
        }
        let sheds: Vec<usize> = (0..self.attempts.len())
            .filter(|&i| self.is_gateway_shed(i))
            .collect();
        let given: Vec<(u64, u64, u64)> = sheds
            .iter()
            .filter_map(|&i| {
                let a = &self.attempts[i];
                a.retry_after_ms
                    .map(|ra| (ra, a.retry_after_granularity_ms(), a.done_us))
            })
            .collect();
        for &(ra, granularity, done) in &given {
            let (error_us, within) =
                retry_after_within(ra, granularity, self.drain_at_us(done), tolerance);
            record(&mut t.retry_after_errors, error_us);
            t.retry_after_within += u64::from(within);
        }
        for &i in &sheds {
            let a = &self.attempts[i];
            if self.refusal_class(i) == Some(RefusalClass::AtDequeue) {
                t.stale_drops += 1;
                record(&mut t.stale_waits, a.done_us.saturating_sub(a.sent_us));
            } else {
                t.admission_sheds += 1;
            }
        }
        for i in 0..self.attempts.len() {
            if self.counted_as(i) == ClientOutcome::UpstreamRefused {
                t.relayed(self.relayed_retry_after(i));
            }
        }
        (t.cut_calls, t.silent_truncations) = self.truncations();
        t.sheds = sheds.len() as u64;
        t.sheds_without_retry_after = (sheds.len() - given.len()) as u64;
        t.retry_after_values = given
            .iter()
            .map(|&(ra, _, _)| ra)
            .collect::<BTreeSet<u64>>();
        (t.honouring, t.honoured_admitted) = self.honoured_retries(expect);
        t.peak_rss = self.rss.iter().max_by_key(|r| r.rss_bytes).copied();
        t.deliveries = self.deliveries();
        for r in self.rss {
            t.memory.sample(*r, expect);
        }
        t
    }

    /// Every streamed answer counted, and each judged against the first
    /// call joined to it that answered (in the order the calls were
    /// received, file order at ties).
    fn deliveries(&self) -> Deliveries {
        let mut d = Deliveries::new();
        let mut by_attempt: Vec<Vec<usize>> = vec![Vec::new(); self.attempts.len()];
        for (j, caller) in self.caller.iter().enumerate() {
            if let Some(i) = caller {
                by_attempt[*i].push(j);
            }
        }
        for (a, calls) in self.attempts.iter().zip(by_attempt.iter_mut()) {
            d.count(a);
            let Some(received) = Received::of(a) else {
                continue;
            };
            calls.sort_by_key(|&j| (self.calls[j].received_us, j));
            let answered = calls
                .iter()
                .map(|&j| &self.calls[j])
                .filter(|c| completed(c))
                .find_map(Sent::of);
            if let Some(sent) = answered {
                d.add(&delivery(&received, &sent));
            }
        }
        d
    }

    /// Calls cut mid-stream joined to an attempt, and the attempts answered
    /// `ok` whose latest call that was cut or completed was cut (in the
    /// order the calls were received, file order at ties).
    fn truncations(&self) -> (u64, u64) {
        let mut by_attempt: Vec<Vec<usize>> = vec![Vec::new(); self.attempts.len()];
        for (j, caller) in self.caller.iter().enumerate() {
            if let Some(i) = caller {
                by_attempt[*i].push(j);
            }
        }
        let (mut cut, mut silent) = (0, 0);
        for (i, calls) in by_attempt.iter_mut().enumerate() {
            calls.sort_by_key(|&j| (self.calls[j].received_us, j));
            let mut pending = false;
            for &j in calls.iter() {
                let c = &self.calls[j];
                if cut_mid_stream(c) {
                    cut += 1;
                    pending = true;
                } else if completed(c) {
                    pending = false;
                }
            }
            if pending && self.attempts[i].outcome == ClientOutcome::Ok {
                silent += 1;
            }
        }
        (cut, silent)
    }

    /// Retries that honoured a Retry-After after the overload, and how many
    /// were admitted, as the checks counted them.
    fn honoured_retries(&self, expect: &Expectations) -> (u64, u64) {
        let after = expect.overload.map_or(expect.start_us, |(_, to)| to);
        let by_attempt: HashMap<(&str, u32), usize> = self
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| ((a.id.as_str(), a.attempt), i))
            .collect();
        let (mut honouring, mut admitted) = (0, 0);
        for a in self.attempts {
            if a.attempt <= 1 || a.sent_us < after {
                continue;
            }
            let Some(&p) = by_attempt.get(&(a.id.as_str(), a.attempt - 1)) else {
                continue;
            };
            let prev = &self.attempts[p];
            let Some(ra) = prev.retry_after_ms else {
                continue;
            };
            let first_intended = by_attempt
                .get(&(a.id.as_str(), 1))
                .map_or(a.intended_us, |&f| self.attempts[f].intended_us);
            let used_us = a.sent_us.saturating_sub(first_intended);
            let left_us = a.patience_ms.saturating_mul(1000).saturating_sub(used_us);
            if (left_us as f64) < 2.0 * expect.service_s * 1e6 {
                continue;
            }
            if a.sent_us >= prev.done_us.saturating_add(ra.saturating_mul(1000)) {
                honouring += 1;
                if a.outcome != ClientOutcome::Shed {
                    admitted += 1;
                }
            }
        }
        (honouring, admitted)
    }
}

/// The two sides joined: what every check reads.
struct Joined<'a> {
    attempts: &'a [ClientRecord],
    calls: &'a [ProviderRecord],
    rss: &'a [RssSample],
    start_us: u64,
    /// A row's length: a scenario second, in microseconds of the run.
    bin_us: u64,
    /// The last instant in any record.
    end_us: u64,
    /// Per attempt: its matched call.
    matched: Vec<Option<usize>>,
    /// Per attempt: the latest call joined to it received before its
    /// answer (by receipt, file order at ties).
    latest: Vec<Option<usize>>,
    /// Per call: the attempt whose window it was received in.
    caller: Vec<Option<usize>>,
    /// Per attempt: when it left the gateway.
    gateway_leave: Vec<u64>,
    /// Per attempt: when it left the backlog.
    backlog_leave: Vec<u64>,
    /// Send times, ascending, and the running max of `gateway_leave` in
    /// that order.
    sent_sorted: Vec<u64>,
    leave_prefix_max: Vec<u64>,
    /// Per served person: first intended send to the answer, in µs.
    served_us: Vec<u64>,
    /// People: distinct ids.
    people: u64,
}

impl<'a> Joined<'a> {
    /// The records joined, for a timeline from `start_us` in rows of
    /// `bin_us` (a scenario second).
    fn new(
        attempts: &'a [ClientRecord],
        calls: &'a [ProviderRecord],
        rss: &'a [RssSample],
        start_us: u64,
        bin_us: u64,
    ) -> Self {
        let mut by_id: HashMap<&str, (Vec<usize>, Vec<usize>)> = HashMap::new();
        for (i, a) in attempts.iter().enumerate() {
            by_id.entry(a.id.as_str()).or_default().0.push(i);
        }
        for (j, c) in calls.iter().enumerate() {
            // Calls for ids no attempt carries join nothing.
            if let Some(e) = by_id.get_mut(c.id.as_str()) {
                e.1.push(j);
            }
        }
        let mut matched = vec![None; attempts.len()];
        let mut latest = vec![None; attempts.len()];
        let mut caller = vec![None; calls.len()];
        let mut served_us = Vec::new();
        let mut people = 0;
        for (ats, cls) in by_id.values_mut() {
            if ats.is_empty() {
                continue;
            }
            people += 1;
            ats.sort_by_key(|&i| (attempts[i].sent_us, attempts[i].attempt));
            cls.sort_by_key(|&j| calls[j].received_us);
            let mut j = 0;
            while j < cls.len() && calls[cls[j]].received_us < attempts[ats[0]].sent_us {
                j += 1;
            }
            for (k, &i) in ats.iter().enumerate() {
                let until = ats.get(k + 1).map_or(u64::MAX, |&n| attempts[n].sent_us);
                while j < cls.len() && calls[cls[j]].received_us < until {
                    caller[cls[j]] = Some(i);
                    if matched[i].is_none() {
                        matched[i] = Some(cls[j]);
                    }
                    if calls[cls[j]].received_us <= attempts[i].done_us {
                        latest[i] = Some(cls[j]);
                    }
                    j += 1;
                }
            }
            let first = ats
                .iter()
                .map(|&i| &attempts[i])
                .min_by_key(|a| (a.attempt, a.sent_us));
            let answered = ats
                .iter()
                .map(|&i| &attempts[i])
                .filter(|a| a.outcome == ClientOutcome::Ok)
                .map(|a| a.done_us)
                .min();
            if let (Some(first), Some(done)) = (first, answered) {
                served_us.push(done.saturating_sub(first.intended_us));
            }
        }
        let gateway_leave: Vec<u64> = attempts
            .iter()
            .zip(&matched)
            .map(|(a, m)| m.map_or(a.done_us, |j| calls[j].received_us))
            .collect();
        let backlog_leave = attempts
            .iter()
            .zip(&matched)
            .map(|(a, m)| {
                let left_queue = m.map_or(a.done_us, |j| {
                    let c = &calls[j];
                    c.admitted_us.or(c.finished_us).unwrap_or(a.done_us)
                });
                left_queue.min(a.done_us)
            })
            .collect();
        let mut order: Vec<usize> = (0..attempts.len()).collect();
        order.sort_by_key(|&i| attempts[i].sent_us);
        let sent_sorted = order.iter().map(|&i| attempts[i].sent_us).collect();
        let mut leave_prefix_max = Vec::with_capacity(order.len());
        let mut running = 0;
        for &i in &order {
            running = running.max(gateway_leave[i]);
            leave_prefix_max.push(running);
        }
        let end_us = attempts
            .iter()
            .map(|a| a.done_us.max(a.sent_us).max(a.intended_us))
            .chain(calls.iter().map(|c| {
                c.received_us
                    .max(c.admitted_us.unwrap_or(0))
                    .max(c.finished_us.unwrap_or(0))
                    .max(c.hung_up_us.unwrap_or(0))
            }))
            .chain(rss.iter().map(|r| r.t_us))
            .max()
            .unwrap_or(start_us);
        Joined {
            attempts,
            calls,
            rss,
            start_us,
            bin_us: bin_us.max(1),
            end_us,
            matched,
            latest,
            caller,
            gateway_leave,
            backlog_leave,
            sent_sorted,
            leave_prefix_max,
            served_us,
            people,
        }
    }

    /// The number of seconds the timeline covers.
    fn n_seconds(&self) -> usize {
        if self.attempts.is_empty() && self.calls.is_empty() && self.rss.is_empty() {
            return 0;
        }
        (self.end_us.saturating_sub(self.start_us) / self.bin_us + 1).min(MAX_SECONDS) as usize
    }

    /// The second `t_us` falls in, clamped to the timeline.
    fn second_of(&self, t_us: u64, n: usize) -> usize {
        ((t_us.saturating_sub(self.start_us) / self.bin_us) as usize).min(n.saturating_sub(1))
    }

    /// When second `k` starts.
    fn bin_start(&self, k: usize) -> u64 {
        self.start_us + k as u64 * self.bin_us
    }

    /// The backlog drain time at `t_us`, in microseconds: when the last
    /// attempt inside the gateway at `t_us` left it, minus `t_us`.
    fn drain_at_us(&self, t_us: u64) -> u64 {
        let k = self.sent_sorted.partition_point(|&s| s <= t_us);
        if k == 0 {
            0
        } else {
            self.leave_prefix_max[k - 1].saturating_sub(t_us)
        }
    }

    /// Whether a call for attempt `i` reached the provider while it was
    /// open.
    fn provider_saw(&self, i: usize) -> bool {
        let a = &self.attempts[i];
        self.matched[i].is_some_and(|j| self.calls[j].received_us <= a.done_us)
    }

    /// How attempt `i` is counted, and its refusal's class if it was one
    /// (`ClientOutcome::joined`, by the latest call received before its
    /// answer).
    fn joined(&self, i: usize) -> (ClientOutcome, Option<RefusalClass>) {
        let a = &self.attempts[i];
        let join = self.latest[i].map_or(Join::NoCall, |j| {
            Join::Called(ProviderEnd::of_record(&self.calls[j]))
        });
        a.outcome.joined(
            a.status,
            a.reason.as_deref(),
            join,
            a.done_us.saturating_sub(a.sent_us),
        )
    }

    /// The class of attempt `i`'s refusal, if it was one.
    fn refusal_class(&self, i: usize) -> Option<RefusalClass> {
        self.joined(i).1
    }

    /// How attempt `i` is counted: a refusal by its class.
    fn counted_as(&self, i: usize) -> ClientOutcome {
        self.joined(i).0
    }

    /// What attempt `i`'s answer did with the Retry-After of the latest
    /// provider refusal it relayed (`None`: no refusing call joined it).
    fn relayed_retry_after(&self, i: usize) -> Option<RelayedRetryAfter> {
        let a = &self.attempts[i];
        let c = &self.calls[self.latest[i]?];
        (ProviderEnd::of_record(c) == ProviderEnd::Refused).then(|| {
            relayed_retry_after(
                a.retry_after_ms,
                a.retry_after_granularity_ms(),
                provider_wait_ms(c),
            )
        })
    }

    /// Returns true if and only if attempt `i` was shed by the gateway
    /// itself: refused at admission or at dequeue, and no call for it
    /// reached the provider while it was open.
    fn is_gateway_shed(&self, i: usize) -> bool {
        matches!(
            self.refusal_class(i),
            Some(RefusalClass::AtAdmission | RefusalClass::AtDequeue)
        ) && !self.provider_saw(i)
    }

    /// Returns true if and only if call `j` was admitted (or, never
    /// admitted, received) after its caller had left.
    fn is_stale(&self, j: usize) -> bool {
        let c = &self.calls[j];
        self.caller[j]
            .is_some_and(|i| self.attempts[i].done_us < c.admitted_us.unwrap_or(c.received_us))
    }

    /// `cancel_on_hangup`'s figures: each call joined to an attempt whose
    /// caller gave up, by `tally::after_hangup`.
    fn hangups(&self, provider: &mut ProviderCounts, within: std::time::Duration) {
        let within_us = u64::try_from(within.as_micros()).unwrap_or(u64::MAX);
        for (c, caller) in self.calls.iter().zip(&self.caller) {
            let Some(a) = caller.map(|i| &self.attempts[i]) else {
                continue;
            };
            if !caller_gave_up(a.outcome) {
                continue;
            }
            let span = CallSpan {
                received_us: c.received_us,
                finished_us: c.finished_us,
                hung_up_us: c.hung_up_us,
                generation: Generation::of(c),
            };
            if let Some(h) = after_hangup(a.done_us, &span, within_us) {
                provider.running_at_hangup += u64::from(h.to_cancel);
                provider.cancelled_at_hangup += u64::from(h.to_cancel && h.cancelled);
                provider.tokens_after_hangup += h.tokens;
            }
        }
    }

    /// Returns true if and only if call `j` answered (it has a status) and
    /// finished after its caller had left, without the gateway hanging up.
    fn is_late(&self, j: usize) -> bool {
        let c = &self.calls[j];
        c.hung_up_us.is_none()
            && c.status != 0
            && match (self.caller[j], c.finished_us) {
                (Some(i), Some(f)) => f > self.attempts[i].done_us,
                _ => false,
            }
    }

    /// When call `j` stopped occupying the provider.
    fn call_end(&self, c: &ProviderRecord) -> u64 {
        c.finished_us.or(c.hung_up_us).unwrap_or(self.end_us)
    }

    /// The first gateway shed at admission, by send time, with the depth and backlog
    /// others made at that instant.
    fn first_shed(&self) -> Option<FirstShed> {
        let i = (0..self.attempts.len())
            .filter(|&i| {
                self.is_gateway_shed(i) && self.refusal_class(i) == Some(RefusalClass::AtAdmission)
            })
            .min_by_key(|&i| self.attempts[i].sent_us)?;
        let t = self.attempts[i].sent_us;
        let open = |leave: &[u64]| {
            self.attempts
                .iter()
                .enumerate()
                .filter(|&(k, a)| k != i && a.sent_us <= t && t < leave[k])
                .count() as u64
        };
        Some(FirstShed {
            at_us: t,
            depth: open(&self.gateway_leave),
            backlog: open(&self.backlog_leave),
        })
    }

    /// Per-second maxima of the number of open intervals.
    fn levels(&self, intervals: impl Iterator<Item = (u64, u64)>, n: usize) -> Vec<u64> {
        let mut max = vec![0u64; n];
        if n == 0 {
            return max;
        }
        let mut cur: i64 = 0;
        let mut filled = 0;
        for (t, d) in intervals_to_events(intervals) {
            let s = self.second_of(t, n);
            // The level carried into a second is seen at its start, unless
            // this event happens exactly then.
            while filled < s {
                filled += 1;
                if filled < s || t > self.bin_start(filled) {
                    max[filled] = max[filled].max(cur as u64);
                }
            }
            cur = (cur + d).max(0);
            max[s] = max[s].max(cur as u64);
        }
        max
    }

    /// Calls answered normally: their provider time is the provider's
    /// service, not a hang-up or a refusal.
    fn answered_calls(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.calls
            .iter()
            .filter_map(|c| match (c.outcome, c.finished_us, c.hung_up_us) {
                (ProviderOutcome::Ok, Some(f), None) => Some((f, f.saturating_sub(c.received_us))),
                _ => None,
            })
    }

    /// Queue waits: (matched call received, received − sent).
    fn queue_waits(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.attempts
            .iter()
            .zip(&self.matched)
            .filter_map(|(a, m)| {
                m.map(|j| {
                    let r = self.calls[j].received_us;
                    (r, r.saturating_sub(a.sent_us))
                })
            })
    }

    fn timeline(&self) -> Timeline {
        let n = self.n_seconds();
        let mut rows: Vec<Second> = (0..n).map(|t| Second::empty(t as u64)).collect();
        if n == 0 {
            return Timeline {
                start_us: self.start_us,
                seconds: rows,
                providers: Vec::new(),
            };
        }
        let mut e2e = vec![Vec::new(); n];
        // Each second's Retry-After values by kind: the gateway's own sheds,
        // the provider's refusals relayed.
        let mut retry_after = vec![Vec::new(); n];
        let mut relayed = vec![Vec::new(); n];
        for (i, a) in self.attempts.iter().enumerate() {
            if a.attempt <= 1 {
                rows[self.second_of(a.intended_us, n)].offered += 1;
            }
            rows[self.second_of(a.sent_us, n)].sent += 1;
            let d = self.second_of(a.done_us, n);
            let row = &mut rows[d];
            row.ended(self.counted_as(i));
            if a.outcome == ClientOutcome::Ok {
                e2e[d].push(a.done_us.saturating_sub(a.intended_us));
            }
            if let Some(ra) = a.retry_after_ms {
                if self.is_gateway_shed(i) {
                    retry_after[d].push(ra);
                } else if self.counted_as(i) == ClientOutcome::UpstreamRefused {
                    relayed[d].push(ra);
                }
            }
        }
        // Calls per attempt: each joined call, and each attempt with one,
        // in the attempt's second.
        for i in self.caller.iter().flatten() {
            rows[self.second_of(self.attempts[*i].sent_us, n)].provider_calls += 1;
        }
        for (a, m) in self.attempts.iter().zip(&self.matched) {
            rows[self.second_of(a.sent_us, n)].dispatched += u64::from(m.is_some());
        }
        let mut waits = vec![Vec::new(); n];
        for (r, w) in self.queue_waits() {
            waits[self.second_of(r, n)].push(w);
        }
        let mut provider = vec![Vec::new(); n];
        for (f, p) in self.answered_calls() {
            provider[self.second_of(f, n)].push(p);
        }
        let outstanding = self.levels(self.attempts.iter().map(|a| (a.sent_us, a.done_us)), n);
        let in_flight = self.levels(
            self.calls.iter().map(|c| (c.received_us, self.call_end(c))),
            n,
        );
        let in_service = self.levels(
            self.calls
                .iter()
                .filter_map(|c| c.admitted_us.map(|a| (a, self.call_end(c)))),
            n,
        );
        let depth = self.levels(self.gateway_intervals(), n);
        let backlog = self.levels(self.backlog_intervals(), n);
        for r in self.rss {
            let s = self.second_of(r.t_us, n);
            rows[s].rss_bytes = Some(rows[s].rss_bytes.unwrap_or(0).max(r.rss_bytes));
        }
        for (s, row) in rows.iter_mut().enumerate() {
            row.client_outstanding = outstanding[s];
            row.provider_in_flight = in_flight[s];
            row.provider_in_service = in_service[s];
            row.gateway_depth = depth[s];
            row.backlog = backlog[s];
            (row.e2e_p50_ms, row.e2e_p99_ms) = ms_percentiles(&mut e2e[s]);
            (row.queue_wait_p50_ms, row.queue_wait_p99_ms) = ms_percentiles(&mut waits[s]);
            (row.provider_p50_ms, row.provider_p99_ms) = ms_percentiles(&mut provider[s]);
            retry_after[s].sort_unstable();
            row.retry_after_ms = quantile(&retry_after[s], 0.5);
            relayed[s].sort_unstable();
            row.relayed_retry_after_ms = quantile(&relayed[s], 0.5);
            row.drain_s = self.drain_at_us(self.bin_start(s)) as f64 / US as f64;
        }
        Timeline {
            start_us: self.start_us,
            seconds: rows,
            providers: Vec::new(),
        }
    }

    fn gateway_intervals(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.attempts
            .iter()
            .zip(&self.gateway_leave)
            .map(|(a, &l)| (a.sent_us, l))
    }

    fn backlog_intervals(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.attempts
            .iter()
            .zip(&self.backlog_leave)
            .map(|(a, &l)| (a.sent_us, l))
    }

    /// The run's summary; `drain_s` and `harness` are filled by the judge.
    fn summary(&self, timeline: &Timeline) -> Summary {
        let mut counts = Counts::default();
        let mut tenants: std::collections::BTreeMap<String, Counts> = Default::default();
        let mut refusals: std::collections::BTreeMap<_, u64> = Default::default();
        for (i, a) in self.attempts.iter().enumerate() {
            let by_tenant = a.tenant.clone().map(|t| tenants.entry(t).or_default());
            for c in std::iter::once(&mut counts).chain(by_tenant) {
                c.offered += u64::from(a.attempt <= 1);
                c.sent += 1;
                c.ended(self.counted_as(i));
            }
            if let Some(class) = self.refusal_class(i) {
                let key = (
                    class,
                    a.status.unwrap_or(0),
                    a.reason.clone(),
                    a.tenant.clone(),
                );
                *refusals.entry(key).or_default() += 1;
            }
        }
        let refusals = refusals
            .into_iter()
            .map(|((class, status, reason, tenant), count)| RefusalLine {
                class,
                status,
                reason,
                tenant,
                count,
            })
            .collect();
        let mut provider = ProviderCounts {
            calls: self.calls.len() as u64,
            ..ProviderCounts::default()
        };
        // An attempt answered late counts once, however many calls the
        // gateway made for it (its retries of the provider's refusals).
        let mut answered_late = vec![false; self.attempts.len()];
        for (j, c) in self.calls.iter().enumerate() {
            if self.is_stale(j) {
                provider.stale_dispatch += 1;
                provider.wasted_tokens += c.tokens();
            }
            if self.is_late(j) {
                if let Some(i) = self.caller[j] {
                    if !std::mem::replace(&mut answered_late[i], true) {
                        counts.late += 1;
                    }
                }
            }
        }
        // The per-second rows hold the largest level of each second, so
        // their largest is the run's peak.
        let peak_depth = timeline
            .seconds
            .iter()
            .map(|s| s.gateway_depth)
            .max()
            .unwrap_or(0);
        let peak_backlog = timeline
            .seconds
            .iter()
            .map(|s| s.backlog)
            .max()
            .unwrap_or(0);
        Summary {
            counts,
            tenants,
            refusals,
            provider,
            latency_ms: Latencies {
                e2e: hdr_percentiles(self.served_us.iter().copied()),
                queue_wait: hdr_percentiles(self.queue_waits().map(|(_, w)| w)),
                provider: hdr_percentiles(self.answered_calls().map(|(_, p)| p)),
            },
            gateway: GatewayPeaks {
                peak_depth,
                peak_backlog,
                peak_in_flight: timeline
                    .seconds
                    .iter()
                    .map(|s| s.client_outstanding)
                    .max()
                    .unwrap_or(0),
                peak_rss_bytes: self.rss.iter().map(|r| r.rss_bytes).max(),
                // The oracle knows no deaths.
                crashes: 0,
                lost: 0,
            },
            drain_s: None,
            harness: Harness::default(),
        }
    }

    /// Measures how the backlog came back after the overload (or, without
    /// one, after the load) ended, by the rule in `timeline`'s docs, from
    /// the backlog's rows and the longest any attempt stayed in it.
    fn drain(&self, expect: &Expectations, backlog_per_s: &[u64]) -> Drain {
        let longest_stay = self
            .backlog_intervals()
            .map(|(from, to)| to.saturating_sub(from))
            .max()
            .unwrap_or(0);
        Drain::measure(
            expect,
            backlog_per_s,
            self.bin_us,
            self.end_us,
            self.attempts.len() as u64,
            longest_stay,
        )
    }
}

/// (+1 at the start, −1 at the end) of every non-empty interval, sorted by
/// time with the ends before the starts at the same instant (an interval
/// is `[start, end)`).
fn intervals_to_events(intervals: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, i64)> {
    let mut events = Vec::new();
    for (from, to) in intervals {
        if to > from {
            events.push((from, 1));
            events.push((to, -1));
        }
    }
    events.sort_unstable();
    events
}

/// The median and 99th percentile, in milliseconds, of a whole run's
/// microsecond values, through an HDR histogram (3 significant digits).
fn hdr_percentiles(values: impl Iterator<Item = u64>) -> Percentiles {
    let mut h = histogram();
    for v in values {
        record(&mut h, v);
    }
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |q: f64| Some(h.value_at_quantile(q) as f64 / 1000.0);
    Percentiles {
        p50: ms(0.5),
        p99: ms(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stories::{self, Rng, Story};
    use crate::{call_end_us, Judge};

    /// The story as a run directory holds it: each file in end order, with
    /// neighbours up to `jitter_us` apart swapped (the writers' channels).
    fn files(s: &Story, jitter_us: u64, seed: u64) -> (Vec<ClientRecord>, Vec<ProviderRecord>) {
        let mut rng = Rng::new(seed);
        let mut a: Vec<(u64, usize)> = (0..s.attempts.len())
            .map(|i| (s.attempts[i].done_us + rng.range(0, jitter_us + 1), i))
            .collect();
        a.sort_unstable();
        let mut c: Vec<(u64, usize)> = (0..s.calls.len())
            .map(|i| (call_end_us(&s.calls[i]) + rng.range(0, jitter_us + 1), i))
            .collect();
        c.sort_unstable();
        (
            a.iter().map(|&(_, i)| s.attempts[i].clone()).collect(),
            c.iter().map(|&(_, i)| s.calls[i].clone()).collect(),
        )
    }

    /// Judges the files in one pass, fed as `rehearse report` feeds them:
    /// each file in its order, merged by end time.
    fn one_pass(
        attempts: &[ClientRecord],
        calls: &[ProviderRecord],
        s: &Story,
        t: &Thresholds,
    ) -> Judgement {
        let mut judge = Judge::new(&s.expect, t);
        for r in &s.rss {
            judge.rss(*r);
        }
        let (mut a, mut c) = (attempts.iter().peekable(), calls.iter().peekable());
        loop {
            let call_first = match (a.peek(), c.peek()) {
                (Some(x), Some(y)) => call_end_us(y) < x.done_us,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => break,
            };
            if call_first {
                judge.call(c.next().expect("peeked").clone());
            } else {
                judge.attempt(a.next().expect("peeked").clone());
            }
        }
        judge.finish()
    }

    fn assert_same(one: &Judgement, batch: &Judgement, what: &str) {
        assert_eq!(one.summary, batch.summary, "{what}: summary");
        assert_eq!(one.first_shed, batch.first_shed, "{what}: first shed");
        for (a, b) in one.timeline.seconds.iter().zip(&batch.timeline.seconds) {
            assert_eq!(a, b, "{what}: second {}", b.t);
        }
        assert_eq!(one.timeline, batch.timeline, "{what}: timeline");
        assert_eq!(one.verdicts, batch.verdicts, "{what}: verdicts");
        assert_eq!(one.overall, batch.overall, "{what}");
        assert_eq!(one.distribution, batch.distribution, "{what}: distribution");
    }

    fn thresholds() -> Thresholds {
        let mut t = Thresholds::default();
        t.drain.within = std::time::Duration::from_secs(5);
        t
    }

    #[test]
    fn the_one_pass_agrees_with_the_batch_judge_on_the_stories() {
        let mut short_baseline = stories::naive();
        short_baseline.expect.overload = Some((stories::at(8_000), stories::at(20_000)));
        short_baseline.expect.drain_baseline = Some(wire::HealthyWaiting::NoArrivals);
        let mut retried = stories::streamed(|p| {
            if p == 10 {
                ClientOutcome::Reset
            } else {
                ClientOutcome::Ok
            }
        });
        let mut again = stories::call("s00015", 15_260, 15_260, 15_500);
        again.stream = true;
        retried.calls.push(again);
        for (name, s) in [
            ("bounded", stories::bounded()),
            ("naive", stories::naive()),
            ("soak", stories::soak(3_000, 100, 1_500, 7)),
            ("short baseline", short_baseline),
            (
                "queued",
                stories::queued(40, 24, |d| {
                    (d / 1000 + 300, Some(wire::RetryAfterHeader::RetryAfterMs))
                }),
            ),
            ("queue timeout", stories::queue_timeout()),
            ("streamed", retried),
            (
                "bounded, stopped in its overload",
                stories::stopped(stories::bounded(), 16_000),
            ),
        ] {
            let t = thresholds();
            let want = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
            let got = crate::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
            assert_same(&got, &want, name);
            assert_eq!(got.pass.out_of_order, 0, "{name}");
            assert_eq!(got.pass.settled_before_dispatch, 0, "{name}");
        }
    }

    /// The stories rehearsed 10 and 40 times faster, judged in rows of a
    /// scenario second (100 and 25 ms) by both.
    #[test]
    fn the_one_pass_agrees_with_the_batch_judge_in_scenario_seconds() {
        for (name, s) in [
            ("bounded", stories::bounded()),
            ("naive", stories::naive()),
            ("soak", stories::soak(3_000, 100, 1_500, 7)),
        ] {
            for k in [10, 40] {
                let s = stories::compressed(&s, k);
                let t = thresholds().scaled(wire::Scale {
                    time: k as f64,
                    quota: 1.0,
                });
                let (a, c, r, e) = (&s.attempts, &s.calls, &s.rss, &s.expect);
                let want = judge_at(a, c, r, e, &t, k as f64);
                let got = crate::judge::judge_at(a, c, r, e, &t, k as f64);
                assert_same(&got, &want, &format!("{name} at {k}x"));
                assert_eq!(got.pass.out_of_order, 0, "{name} at {k}x");
            }
        }
    }

    #[test]
    fn writers_reordering_within_the_window_changes_nothing() {
        let t = thresholds();
        for seed in 0..4 {
            let s = stories::soak(2_000, 150, 1_500, seed);
            // Up to 300 ms out of order, each file on its own.
            let (attempts, calls) = files(&s, 300_000, seed);
            let want = judge(&attempts, &calls, &s.rss, &s.expect, &t);
            let got = one_pass(&attempts, &calls, &s, &t);
            assert_same(&got, &want, &format!("seed {seed}"));
            assert_eq!(got.pass.out_of_order, 0);
        }
    }
}
