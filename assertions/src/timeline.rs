//! Derived measurements: the two sides' records joined by request id, the
//! per-second [`Timeline`] and the run's [`Summary`].
//!
//! # The join
//!
//! Each attempt is joined to the provider calls carrying the same id that
//! were received no earlier than it was sent and before the same person's
//! next attempt was sent. The first of them is the attempt's *matched call*.
//! A call may well be received after its attempt ended: that is a stale
//! dispatch.
//!
//! # Depth, backlog and drain
//!
//! DESIGN.md defines the gateway's queue depth as client outstanding minus
//! provider in flight, and the backlog as client outstanding minus provider
//! in service. That subtraction miscounts as soon as provider calls outlive
//! their callers (a naive gateway keeps its upstream calls running after the
//! caller hung up), so this module refines both with the join, still
//! needing no help from the gateway:
//!
//! - **gateway queue depth** at t: attempts with `sent ≤ t <` the matched
//!   call's `received` (or the attempt's `done` if it was never
//!   dispatched): waiting inside the gateway;
//! - **backlog** at t: attempts with `sent ≤ t < min(done, admitted)`, where
//!   `admitted` is the matched call's admission past the provider's own
//!   queue (its `finished` if it was never admitted): waiting in the gateway
//!   or in the provider's queue on the caller's behalf;
//! - **backlog drain time** at t: when the last attempt inside the gateway
//!   at t left the gateway, minus t (0 if none is inside);
//! - **gateway shed**: a shed attempt whose matched call (if any) was not
//!   received while the attempt was open: the provider never saw it;
//! - **stale dispatch**: a call admitted (or, never admitted, received)
//!   after the attempt it belongs to had ended; its prompt and completion
//!   tokens are wasted;
//! - **late answer**: a call with an answer (a status) that finished after
//!   its caller had left, with no hang-up from the gateway: an answer
//!   written into a closed socket.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::expect::Expectations;
use wire::{ClientOutcome, ClientRecord, ProviderOutcome, ProviderRecord, RssSample};

const US: u64 = 1_000_000;

/// The longest timeline built, in seconds (about 27 hours): a record with a
/// wild timestamp must not make the timeline exhaust memory.
const MAX_SECONDS: u64 = 100_000;

/// One row of the [`Timeline`]: what happened during one second of the run.
///
/// Counts are of events in the second; levels (outstanding, in flight,
/// depth, backlog) are the most seen at any instant of the second;
/// percentiles are of the events in the second, `None` if there were none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the run started.
    pub t: u64,
    /// First attempts due in this second.
    pub offered: u64,
    /// Attempts sent.
    pub sent: u64,
    /// Attempts that ended with an answer.
    pub ok: u64,
    /// Attempts that ended shed (by the gateway or the provider).
    pub shed: u64,
    /// Attempts that ended with the caller giving up.
    pub timeout: u64,
    /// Attempts that ended in another error.
    pub errors: u64,
    /// Attempts open at the client.
    pub client_outstanding: u64,
    /// Calls at the provider, received but not finished.
    pub provider_in_flight: u64,
    /// Calls at the provider past its own queue, not finished.
    pub provider_in_service: u64,
    /// Attempts waiting inside the gateway.
    pub gateway_depth: u64,
    /// Attempts waiting in the gateway or in the provider's queue.
    pub backlog: u64,
    /// Median latency, intended send to done, of attempts answered.
    pub e2e_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub e2e_p99_ms: Option<f64>,
    /// Median time from an attempt's send to its matched call's receipt,
    /// of calls received in this second.
    pub queue_wait_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub queue_wait_p99_ms: Option<f64>,
    /// Median provider time (received to finished) of answered calls that
    /// finished in this second.
    pub provider_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub provider_p99_ms: Option<f64>,
    /// The gateway's largest resident memory sampled in this second.
    pub rss_bytes: Option<u64>,
    /// The median Retry-After of attempts that ended in this second.
    pub retry_after_ms: Option<u64>,
    /// The backlog drain time at the start of this second.
    pub drain_s: f64,
}

/// The run second by second, from the run's start to its last record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// When second 0 starts, in microseconds since the Unix epoch.
    pub start_us: u64,
    /// One row per second.
    pub seconds: Vec<Second>,
}

impl Timeline {
    /// Builds the per-second timeline of a run that started at `start_us`.
    ///
    /// ```
    /// let t = assertions::Timeline::build(&[], &[], &[], 0);
    /// assert!(t.seconds.is_empty());
    /// ```
    pub fn build(
        attempts: &[ClientRecord],
        calls: &[ProviderRecord],
        rss: &[RssSample],
        start_us: u64,
    ) -> Self {
        Joined::new(attempts, calls, rss, start_us).timeline()
    }

    /// The timeline as CSV: a header row and one row per second; an absent
    /// value is an empty field.
    ///
    /// ```
    /// let t = assertions::Timeline::build(&[], &[], &[], 0);
    /// assert!(t.to_csv().starts_with("t,offered,sent,ok,"));
    /// ```
    pub fn to_csv(&self) -> String {
        fn ms(x: Option<f64>) -> String {
            x.map(|v| format!("{v:.3}")).unwrap_or_default()
        }
        fn int(x: Option<u64>) -> String {
            x.map(|v| v.to_string()).unwrap_or_default()
        }
        let mut out = String::from(
            "t,offered,sent,ok,shed,timeout,errors,client_outstanding,provider_in_flight,\
             provider_in_service,gateway_depth,backlog,e2e_p50_ms,e2e_p99_ms,\
             queue_wait_p50_ms,queue_wait_p99_ms,provider_p50_ms,provider_p99_ms,\
             rss_bytes,retry_after_ms,drain_s\n",
        );
        for s in &self.seconds {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3}\n",
                s.t,
                s.offered,
                s.sent,
                s.ok,
                s.shed,
                s.timeout,
                s.errors,
                s.client_outstanding,
                s.provider_in_flight,
                s.provider_in_service,
                s.gateway_depth,
                s.backlog,
                ms(s.e2e_p50_ms),
                ms(s.e2e_p99_ms),
                ms(s.queue_wait_p50_ms),
                ms(s.queue_wait_p99_ms),
                ms(s.provider_p50_ms),
                ms(s.provider_p99_ms),
                int(s.rss_bytes),
                int(s.retry_after_ms),
                s.drain_s,
            ));
        }
        out
    }
}

/// The run in the numbers `report.json` shows, in its exact shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Attempts by how they ended.
    pub counts: Counts,
    /// Provider calls, and those made for callers who had left.
    pub provider: ProviderCounts,
    /// Latency percentiles.
    pub latency_ms: Latencies,
    /// The gateway's peaks.
    pub gateway: GatewayPeaks,
    /// Seconds from the overload's end until the backlog was back to
    /// baseline; `None` if it never was, or there was nothing to measure.
    pub drain_s: Option<f64>,
    /// Whether the load generator kept its schedule.
    pub harness: Harness,
}

/// `counts` in `report.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Counts {
    /// People: first attempts.
    pub offered: u64,
    /// Attempts, retries included.
    pub sent: u64,
    /// Attempts answered.
    pub ok: u64,
    /// Attempts shed (by the gateway or the provider).
    pub shed: u64,
    /// Attempts whose caller gave up.
    pub timeout: u64,
    /// Attempts that ended in another error.
    pub error: u64,
    /// Late answers: provider answers finished after their caller left,
    /// without the gateway hanging up.
    pub late: u64,
}

/// `provider` in `report.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ProviderCounts {
    /// Calls the provider received.
    pub calls: u64,
    /// Calls admitted (or received) after their caller had left.
    pub stale_dispatch: u64,
    /// Prompt plus completion tokens of those calls.
    pub wasted_tokens: u64,
}

/// The 50th and 99th percentiles of one latency, in milliseconds; `None`
/// when nothing was measured.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// `latency_ms` in `report.json`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Latencies {
    /// Per person served: first attempt's intended send to the answered
    /// attempt's done.
    pub e2e: Percentiles,
    /// Attempt sent to its matched call received: time in the gateway.
    pub queue_wait: Percentiles,
    /// Provider time (received to finished) of answered calls.
    pub provider: Percentiles,
}

/// `gateway` in `report.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct GatewayPeaks {
    /// The most attempts waiting inside the gateway at once.
    pub peak_depth: u64,
    /// The most attempts waiting in the gateway or the provider's queue.
    pub peak_backlog: u64,
    /// The largest resident memory sampled; `None` without samples.
    pub peak_rss_bytes: Option<u64>,
}

/// `harness` in `report.json`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Harness {
    /// The load generator's 99th-percentile send lag.
    pub send_lag_p99_ms: f64,
    /// True if and only if the run is valid (`harness_valid` did not say
    /// `invalid`).
    pub valid: bool,
}

/// The first shed answered by the gateway itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FirstShed {
    /// When its attempt was sent, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// Other attempts waiting inside the gateway at that instant.
    pub depth: u64,
    /// Other attempts in the backlog at that instant.
    pub backlog: u64,
}

/// How the backlog came back after the overload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DrainOutcome {
    /// No attempts: nothing to measure.
    NoData,
    /// The records end before the overload (or the load) does.
    EndedEarly { short_s: f64 },
    /// Still `waiting` above baseline when the records end, `after_s` after
    /// the overload.
    StillWaiting { waiting: u64, after_s: f64 },
    /// Back to baseline `drain_s` after the overload and stayed there.
    Drained { drain_s: f64 },
}

/// The drain measurement: its baseline and outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Drain {
    pub(crate) baseline: u64,
    pub(crate) from_us: u64,
    pub(crate) peak_after: u64,
    pub(crate) outcome: DrainOutcome,
}

/// The two sides joined: what every check reads.
pub(crate) struct Joined<'a> {
    pub(crate) attempts: &'a [ClientRecord],
    pub(crate) calls: &'a [ProviderRecord],
    pub(crate) rss: &'a [RssSample],
    pub(crate) start_us: u64,
    /// The last instant in any record.
    pub(crate) end_us: u64,
    /// Per attempt: its matched call.
    pub(crate) matched: Vec<Option<usize>>,
    /// Per call: the attempt whose window it was received in.
    pub(crate) caller: Vec<Option<usize>>,
    /// Per attempt: when it left the gateway.
    pub(crate) gateway_leave: Vec<u64>,
    /// Per attempt: when it left the backlog.
    pub(crate) backlog_leave: Vec<u64>,
    /// Send times, ascending, and the running max of `gateway_leave` in
    /// that order.
    sent_sorted: Vec<u64>,
    leave_prefix_max: Vec<u64>,
    /// Per served person: first intended send to the answer, in µs.
    pub(crate) served_us: Vec<u64>,
    /// People: distinct ids.
    pub(crate) people: u64,
}

impl<'a> Joined<'a> {
    pub(crate) fn new(
        attempts: &'a [ClientRecord],
        calls: &'a [ProviderRecord],
        rss: &'a [RssSample],
        start_us: u64,
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
            end_us,
            matched,
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
    pub(crate) fn n_seconds(&self) -> usize {
        if self.attempts.is_empty() && self.calls.is_empty() && self.rss.is_empty() {
            return 0;
        }
        (self.end_us.saturating_sub(self.start_us) / US + 1).min(MAX_SECONDS) as usize
    }

    /// The second `t_us` falls in, clamped to the timeline.
    fn second_of(&self, t_us: u64, n: usize) -> usize {
        ((t_us.saturating_sub(self.start_us) / US) as usize).min(n.saturating_sub(1))
    }

    /// The backlog drain time at `t_us`, in microseconds: when the last
    /// attempt inside the gateway at `t_us` left it, minus `t_us`.
    pub(crate) fn drain_at_us(&self, t_us: u64) -> u64 {
        let k = self.sent_sorted.partition_point(|&s| s <= t_us);
        if k == 0 {
            0
        } else {
            self.leave_prefix_max[k - 1].saturating_sub(t_us)
        }
    }

    /// Returns true if and only if attempt `i` was shed by the gateway
    /// itself: shed, and no call for it reached the provider while it was
    /// open.
    pub(crate) fn is_gateway_shed(&self, i: usize) -> bool {
        let a = &self.attempts[i];
        a.outcome == ClientOutcome::Shed
            && self.matched[i].is_none_or(|j| self.calls[j].received_us > a.done_us)
    }

    /// Returns true if and only if call `j` was admitted (or, never
    /// admitted, received) after its caller had left.
    pub(crate) fn is_stale(&self, j: usize) -> bool {
        let c = &self.calls[j];
        self.caller[j]
            .is_some_and(|i| self.attempts[i].done_us < c.admitted_us.unwrap_or(c.received_us))
    }

    /// Returns true if and only if call `j` answered (it has a status) and
    /// finished after its caller had left, without the gateway hanging up.
    pub(crate) fn is_late(&self, j: usize) -> bool {
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

    /// The first gateway shed, by send time, with the depth and backlog
    /// others made at that instant.
    pub(crate) fn first_shed(&self) -> Option<FirstShed> {
        let i = (0..self.attempts.len())
            .filter(|&i| self.is_gateway_shed(i))
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

    /// The backlog's (+1 at send, −1 on leaving) events, sorted with the
    /// departures at an instant before the arrivals.
    fn backlog_events(&self) -> Vec<(u64, i64)> {
        intervals_to_events(
            self.attempts
                .iter()
                .zip(&self.backlog_leave)
                .map(|(a, &l)| (a.sent_us, l)),
        )
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
                if filled < s || t > self.start_us + filled as u64 * US {
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

    pub(crate) fn timeline(&self) -> Timeline {
        let n = self.n_seconds();
        let mut rows: Vec<Second> = (0..n)
            .map(|t| Second {
                t: t as u64,
                offered: 0,
                sent: 0,
                ok: 0,
                shed: 0,
                timeout: 0,
                errors: 0,
                client_outstanding: 0,
                provider_in_flight: 0,
                provider_in_service: 0,
                gateway_depth: 0,
                backlog: 0,
                e2e_p50_ms: None,
                e2e_p99_ms: None,
                queue_wait_p50_ms: None,
                queue_wait_p99_ms: None,
                provider_p50_ms: None,
                provider_p99_ms: None,
                rss_bytes: None,
                retry_after_ms: None,
                drain_s: 0.0,
            })
            .collect();
        if n == 0 {
            return Timeline {
                start_us: self.start_us,
                seconds: rows,
            };
        }
        let mut e2e = vec![Vec::new(); n];
        let mut retry_after = vec![Vec::new(); n];
        for a in self.attempts {
            if a.attempt <= 1 {
                rows[self.second_of(a.intended_us, n)].offered += 1;
            }
            rows[self.second_of(a.sent_us, n)].sent += 1;
            let d = self.second_of(a.done_us, n);
            let row = &mut rows[d];
            match a.outcome {
                ClientOutcome::Ok => {
                    row.ok += 1;
                    e2e[d].push(a.done_us.saturating_sub(a.intended_us));
                }
                ClientOutcome::Shed => row.shed += 1,
                ClientOutcome::Timeout => row.timeout += 1,
                _ => row.errors += 1,
            }
            if let Some(ra) = a.retry_after_ms {
                retry_after[d].push(ra);
            }
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
            let at = self.start_us + s as u64 * US;
            row.drain_s = self.drain_at_us(at) as f64 / US as f64;
        }
        Timeline {
            start_us: self.start_us,
            seconds: rows,
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
    pub(crate) fn summary(&self, timeline: &Timeline) -> Summary {
        let mut counts = Counts::default();
        for a in self.attempts {
            if a.attempt <= 1 {
                counts.offered += 1;
            }
            counts.sent += 1;
            match a.outcome {
                ClientOutcome::Ok => counts.ok += 1,
                ClientOutcome::Shed => counts.shed += 1,
                ClientOutcome::Timeout => counts.timeout += 1,
                _ => counts.error += 1,
            }
        }
        let mut provider = ProviderCounts {
            calls: self.calls.len() as u64,
            ..ProviderCounts::default()
        };
        for (j, c) in self.calls.iter().enumerate() {
            if self.is_stale(j) {
                provider.stale_dispatch += 1;
                provider.wasted_tokens += c.tokens();
            }
            if self.is_late(j) {
                counts.late += 1;
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
            provider,
            latency_ms: Latencies {
                e2e: hdr_percentiles(self.served_us.iter().copied()),
                queue_wait: hdr_percentiles(self.queue_waits().map(|(_, w)| w)),
                provider: hdr_percentiles(self.answered_calls().map(|(_, p)| p)),
            },
            gateway: GatewayPeaks {
                peak_depth,
                peak_backlog,
                peak_rss_bytes: self.rss.iter().map(|r| r.rss_bytes).max(),
            },
            drain_s: None,
            harness: Harness::default(),
        }
    }

    /// Measures how the backlog came back after the overload (or, without
    /// one, after the load) ended.
    ///
    /// The baseline is 1 + the median of the per-second backlog peaks in the
    /// seconds wholly before the overload started (without an overload
    /// window: before the load ended), or 1 without such a second. Drained
    /// means the backlog went down to the baseline and never rose above it
    /// again. When the backlog only came down because many attempts ended
    /// at the very last instant of the records (a run cut short), it never
    /// drained.
    pub(crate) fn drain(&self, expect: &Expectations, backlog_per_s: &[u64]) -> Drain {
        let (pre_end, from_us) = match expect.overload {
            Some((a, b)) => (a, b),
            None => (expect.load_end_us, expect.load_end_us),
        };
        let whole = (pre_end.saturating_sub(self.start_us) / US) as usize;
        let mut before: Vec<u64> = backlog_per_s.iter().take(whole).copied().collect();
        before.sort_unstable();
        let baseline = 1 + quantile(&before, 0.5).unwrap_or(0);
        let mut drain = Drain {
            baseline,
            from_us,
            peak_after: 0,
            outcome: DrainOutcome::NoData,
        };
        if self.attempts.is_empty() {
            return drain;
        }
        if self.end_us < from_us {
            drain.outcome = DrainOutcome::EndedEarly {
                short_s: (from_us - self.end_us) as f64 / US as f64,
            };
            return drain;
        }
        let events = self.backlog_events();
        let mut cur: i64 = 0;
        // The last instant the backlog came down to the baseline from above,
        // with the level just before it and the size of that step.
        let mut last_down: Option<(u64, i64, i64)> = None;
        let mut k = 0;
        while k < events.len() {
            let t = events[k].0;
            let before = cur;
            while k < events.len() && events[k].0 == t {
                cur += events[k].1;
                k += 1;
            }
            let (b, c) = (before.max(0) as u64, cur.max(0) as u64);
            if t >= from_us {
                drain.peak_after = drain.peak_after.max(c);
            } else if k == events.len() || events[k].0 >= from_us {
                // The level carried into the window's end.
                drain.peak_after = drain.peak_after.max(c);
            }
            if b > baseline && c <= baseline {
                last_down = Some((t, before, before - cur));
            }
        }
        let last_t = events.last().map_or(0, |e| e.0);
        drain.outcome = match last_down {
            Some((t, _, _)) if t <= from_us => DrainOutcome::Drained { drain_s: 0.0 },
            None => DrainOutcome::Drained { drain_s: 0.0 },
            Some((t, level, step)) if t == last_t && step > 1 => DrainOutcome::StillWaiting {
                waiting: level.max(0) as u64,
                after_s: (t - from_us) as f64 / US as f64,
            },
            Some((t, _, _)) => DrainOutcome::Drained {
                drain_s: (t - from_us) as f64 / US as f64,
            },
        };
        drain
    }

    /// Ok provider calls finished inside `[from, to)`, per second: μ as
    /// measured at the provider.
    pub(crate) fn measured_capacity(&self, from: u64, to: u64) -> Option<f64> {
        if to <= from {
            return None;
        }
        let n = self
            .answered_calls()
            .filter(|&(f, _)| from <= f && f < to)
            .count();
        Some(n as f64 / ((to - from) as f64 / US as f64))
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

/// The nearest-rank quantile of a sorted slice.
fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median and 99th percentile, in milliseconds, of microsecond values
/// (sorted in place: one second's worth).
fn ms_percentiles(values: &mut [u64]) -> (Option<f64>, Option<f64>) {
    values.sort_unstable();
    let ms = |v: u64| v as f64 / 1000.0;
    (
        quantile(values, 0.5).map(ms),
        quantile(values, 0.99).map(ms),
    )
}

/// An empty HDR histogram of 3 significant figures that grows to fit.
pub(crate) fn histogram() -> Histogram<u64> {
    // Three significant figures is in the accepted range (0..=5), so this
    // constructor cannot fail.
    Histogram::<u64>::new(3).expect("3 significant figures is valid")
}

/// Records `v`, growing the histogram to fit it. (`saturating_record`
/// alone would clamp to the histogram's current, tiny, range instead of
/// growing it.)
pub(crate) fn record(h: &mut Histogram<u64>, v: u64) {
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// The median and 99th percentile, in milliseconds, of a whole run's
/// microsecond values, through an HDR histogram (3 significant digits).
pub(crate) fn hdr_percentiles(values: impl Iterator<Item = u64>) -> Percentiles {
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
    use crate::stories::{self, at, attempt, call, T0};

    #[test]
    fn calls_join_the_attempt_whose_window_they_arrive_in() {
        let attempts = vec![
            attempt("a", 1, 1_000, 1_500, ClientOutcome::Shed, Some(500)),
            attempt("a", 2, 2_000, 4_000, ClientOutcome::Ok, None),
            attempt("b", 1, 1_000, 1_200, ClientOutcome::Timeout, None),
        ];
        let calls = vec![
            // Before a's first attempt: joins nothing.
            call("a", 500, 500, 600),
            // During a's first attempt: the provider saw it, so that shed
            // was the provider's, not the gateway's.
            call("a", 1_100, 1_100, 1_200),
            // Between the attempts: still the first attempt's, and stale.
            call("a", 1_800, 1_800, 1_900),
            // The retry's.
            call("a", 2_100, 2_200, 3_900),
            // Received after b gave up: stale, and a late answer.
            call("b", 1_300, 1_300, 2_300),
            call("nobody", 1_000, 1_000, 2_000),
        ];
        let j = Joined::new(&attempts, &calls, &[], T0);
        assert_eq!(j.matched, vec![Some(1), Some(3), Some(4)]);
        assert_eq!(
            j.caller,
            vec![None, Some(0), Some(0), Some(1), Some(2), None]
        );
        assert!(!j.is_gateway_shed(0));
        let stale: Vec<usize> = (0..calls.len()).filter(|&c| j.is_stale(c)).collect();
        assert_eq!(stale, vec![2, 4]);
        let late: Vec<usize> = (0..calls.len()).filter(|&c| j.is_late(c)).collect();
        assert_eq!(late, vec![2, 4]);
        // b left the gateway when its call was received (after it gave up),
        // but the backlog when it gave up.
        assert_eq!(j.gateway_leave[2], at(1_300));
        assert_eq!(j.backlog_leave[2], at(1_200));
        assert_eq!(j.backlog_leave[1], at(2_200));
        assert_eq!(j.served_us, vec![3_000_000]);
        assert_eq!(j.people, 2);
        let s = j.summary(&j.timeline());
        assert_eq!(s.provider.stale_dispatch, 2);
        assert_eq!(s.provider.wasted_tokens, 300);
        assert_eq!(s.counts.late, 2);
        assert_eq!(s.counts.offered, 2);
        assert_eq!(s.counts.sent, 3);
    }

    #[test]
    fn a_shed_the_provider_never_saw_is_the_gateways() {
        let attempts = vec![
            attempt("a", 1, 0, 10, ClientOutcome::Ok, None),
            attempt("b", 1, 100, 101, ClientOutcome::Shed, Some(900)),
        ];
        let calls = vec![call("a", 1, 1, 9), call("b", 500, 500, 600)];
        let j = Joined::new(&attempts, &calls, &[], T0);
        // b's call came after b was shed: a shed by the gateway, then a
        // stale dispatch.
        assert!(j.is_gateway_shed(1));
        assert!(j.is_stale(1));
        assert!(!j.is_gateway_shed(0));
    }

    /// Three people in a gateway with one upstream slot and no provider
    /// queue: sent at 0, 0.1 and 0.2 s, dispatched at 0, 1 and 2 s, each
    /// answered 1 s later.
    fn one_slot() -> (Vec<ClientRecord>, Vec<ProviderRecord>) {
        let attempts = vec![
            attempt("a", 1, 0, 1_000, ClientOutcome::Ok, None),
            attempt("b", 1, 100, 2_000, ClientOutcome::Ok, None),
            attempt("c", 1, 200, 3_000, ClientOutcome::Ok, None),
        ];
        let calls = vec![
            call("a", 0, 0, 1_000),
            call("b", 1_000, 1_000, 2_000),
            call("c", 2_000, 2_000, 3_000),
        ];
        (attempts, calls)
    }

    #[test]
    fn depth_backlog_and_drain_second_by_second() {
        let (attempts, calls) = one_slot();
        let rss = [
            RssSample {
                t_us: at(0),
                rss_bytes: 10,
            },
            RssSample {
                t_us: at(900),
                rss_bytes: 30,
            },
            RssSample {
                t_us: at(1_500),
                rss_bytes: 20,
            },
        ];
        let t = Timeline::build(&attempts, &calls, &rss, T0);
        let col = |f: fn(&Second) -> u64| t.seconds.iter().map(f).collect::<Vec<_>>();
        assert_eq!(t.seconds.len(), 4);
        assert_eq!(col(|s| s.offered), vec![3, 0, 0, 0]);
        assert_eq!(col(|s| s.ok), vec![0, 1, 1, 1]);
        assert_eq!(col(|s| s.gateway_depth), vec![2, 1, 0, 0]);
        assert_eq!(col(|s| s.backlog), vec![2, 1, 0, 0]);
        assert_eq!(col(|s| s.client_outstanding), vec![3, 2, 1, 0]);
        assert_eq!(col(|s| s.provider_in_flight), vec![1, 1, 1, 0]);
        assert_eq!(col(|s| s.provider_in_service), vec![1, 1, 1, 0]);
        let peaks: Vec<_> = t.seconds.iter().map(|s| s.rss_bytes).collect();
        assert_eq!(peaks, vec![Some(30), Some(20), None, None]);
        // At 1 s, c (inside since 0.2 s) leaves the gateway at 2 s.
        let drain: Vec<_> = t.seconds.iter().map(|s| s.drain_s).collect();
        assert_eq!(drain, vec![0.0, 1.0, 0.0, 0.0]);
        // Waits of 0.9 s and 1.8 s, received in seconds 1 and 2.
        assert_eq!(t.seconds[1].queue_wait_p50_ms, Some(900.0));
        assert_eq!(t.seconds[2].queue_wait_p99_ms, Some(1_800.0));
        assert_eq!(t.seconds[3].e2e_p50_ms, Some(2_800.0));
        assert_eq!(t.seconds[1].provider_p99_ms, Some(1_000.0));
        let j = Joined::new(&attempts, &calls, &rss, T0);
        // At 0.15 s b is inside until 1 s; at 0.25 s c is too, until 2 s.
        assert_eq!(j.drain_at_us(at(150)), 850_000);
        assert_eq!(j.drain_at_us(at(250)), 1_750_000);
        assert_eq!(j.drain_at_us(at(2_500)), 0);
        assert_eq!(j.drain_at_us(T0 - 1), 0);
    }

    #[test]
    fn per_second_levels_match_a_brute_force_count() {
        let s = stories::naive();
        let j = Joined::new(&s.attempts, &s.calls, &s.rss, T0);
        let t = j.timeline();
        // The most open intervals at any instant of each second: it is
        // enough to look at each second's start and each interval's start.
        let brute = |iv: &[(u64, u64)]| {
            let mut max = vec![0u64; t.seconds.len()];
            let starts = iv
                .iter()
                .map(|&(a, _)| a)
                .chain((0..t.seconds.len() as u64).map(|s| T0 + s * US));
            for p in starts {
                let open = iv.iter().filter(|&&(a, b)| a <= p && p < b).count() as u64;
                let s = j.second_of(p, max.len());
                max[s] = max[s].max(open);
            }
            max
        };
        let backlog: Vec<_> = s
            .attempts
            .iter()
            .zip(&j.backlog_leave)
            .map(|(a, &l)| (a.sent_us, l))
            .collect();
        let depth: Vec<_> = s
            .attempts
            .iter()
            .zip(&j.gateway_leave)
            .map(|(a, &l)| (a.sent_us, l))
            .collect();
        let service: Vec<_> = s
            .calls
            .iter()
            .map(|c| (c.admitted_us.unwrap(), c.finished_us.unwrap()))
            .collect();
        assert_eq!(
            brute(&backlog),
            t.seconds.iter().map(|s| s.backlog).collect::<Vec<_>>()
        );
        assert_eq!(
            brute(&depth),
            t.seconds
                .iter()
                .map(|s| s.gateway_depth)
                .collect::<Vec<_>>()
        );
        assert_eq!(
            brute(&service),
            t.seconds
                .iter()
                .map(|s| s.provider_in_service)
                .collect::<Vec<_>>()
        );
        assert_eq!(t.seconds.iter().map(|s| s.backlog).max(), Some(320));
        // A naive gateway in front of a queueing provider: small depth,
        // huge backlog.
        assert_eq!(t.seconds.iter().map(|s| s.gateway_depth).max(), Some(1));
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_second() {
        let (attempts, calls) = one_slot();
        let csv = Timeline::build(&attempts, &calls, &[], T0).to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|l| l.split(',').count() == 21));
        assert!(lines[0].ends_with("rss_bytes,retry_after_ms,drain_s"));
        assert!(
            lines[1].starts_with("0,3,3,0,0,0,0,3,1,1,2,2,,,"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn summary_serializes_in_the_report_shape() {
        let (attempts, calls) = one_slot();
        let j = Joined::new(&attempts, &calls, &[], T0);
        let v = serde_json::to_value(j.summary(&j.timeline())).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&v),
            [
                "counts",
                "drain_s",
                "gateway",
                "harness",
                "latency_ms",
                "provider"
            ]
        );
        assert_eq!(
            keys(&v["counts"]),
            ["error", "late", "offered", "ok", "sent", "shed", "timeout"]
        );
        assert_eq!(
            keys(&v["provider"]),
            ["calls", "stale_dispatch", "wasted_tokens"]
        );
        assert_eq!(keys(&v["latency_ms"]), ["e2e", "provider", "queue_wait"]);
        assert_eq!(keys(&v["latency_ms"]["e2e"]), ["p50", "p99"]);
        assert_eq!(
            keys(&v["gateway"]),
            ["peak_backlog", "peak_depth", "peak_rss_bytes"]
        );
        assert_eq!(keys(&v["harness"]), ["send_lag_p99_ms", "valid"]);
        assert_eq!(v["gateway"]["peak_depth"], 2);
        let p99 = v["latency_ms"]["queue_wait"]["p99"].as_f64().unwrap();
        assert!((1_800.0..1_801.0).contains(&p99), "{p99}");
    }
}
