//! The sweep: the run's instants in time order, once.
//!
//! The judge ([`crate::Judge`]) hands the sweep what it has settled: the
//! intervals each level counts (attempts outstanding, calls in flight and in
//! service, attempts in the gateway and in the backlog), each attempt's
//! departure from the gateway (for the backlog drain time), the gateway's
//! sheds (for the first shed, and for the drain time their Retry-After is
//! compared with), and the Retry-After of each refusal by its kind, the
//! gateway's own or relayed from the provider (each row's median of each,
//! the same refusals `retry_after` counts). The sweep files them in a [`Calendar`] and walks them in
//! time order, as far as the judge says everything is known ([`Sweep::run`]),
//! writing each row's largest levels and its drain time into the
//! timeline's rows (a row is a scenario second: `Rows::bin_us` of the
//! rehearsal), and at the end measures the drain after the overload from
//! the backlog's rows (`Drain::measure`). What it holds is what lies ahead
//! of that instant: 16 bytes per pending item.
//!
//! At one instant the order is: departures, arrivals, departures from the
//! gateway folded into the drain time, the first-shed probe, the drain
//! time read for a shed, then the Retry-After given; so an interval is `[start, end)`, and an attempt
//! sent at t counts in the drain time at t.

use hdrhistogram::Histogram;

use crate::calendar::Calendar;
use crate::expect::Expectations;
use crate::tally::retry_after_within;
use crate::timeline::{histogram, quantile, record, Drain, FirstShed, Second, MAX_SECONDS, US};

/// A level of the timeline: what an interval counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Attempts open at the client.
    Outstanding = 0,
    /// Calls at the provider, received but not finished.
    InFlight = 1,
    /// Calls past the provider's own queue, not finished.
    InService = 2,
    /// Attempts waiting inside the gateway.
    Depth = 3,
    /// Attempts in the gateway or the provider's queue.
    Backlog = 4,
}

const LEVELS: usize = 5;

/// The order of items at one instant (the top bits of an item's key).
const END: u64 = 0;
const START: u64 = 1;
const FOLD: u64 = 2;
const PROBE: u64 = 3;
const QUERY: u64 = 4;
const GIVEN: u64 = 5;

/// An item's key: rank (3 bits), level (3 bits), payload (58 bits).
const PAYLOAD: u64 = (1 << 58) - 1;
/// The level bits of a start that ends with the records (a call that
/// never finished): [`OPEN_ENDED`] + its level.
const OPEN_ENDED: u64 = 5;

fn key(rank: u64, level: u64, payload: u64) -> u64 {
    rank << 61 | level << 58 | payload.min(PAYLOAD)
}

/// The per-second rows the sweep writes into, grown as it goes: row `k`
/// is scenario second `k`, `[start + k·bin, start + (k + 1)·bin)`.
pub(crate) struct Rows {
    pub(crate) start_us: u64,
    /// A row's length in microseconds of the rehearsal (`timeline::row_us`).
    pub(crate) bin_us: u64,
    pub(crate) rows: Vec<Second>,
}

impl Rows {
    /// The row `t_us` falls in (clamped into the longest timeline).
    pub(crate) fn second_of(&self, t_us: u64) -> usize {
        ((t_us.saturating_sub(self.start_us) / self.bin_us).min(MAX_SECONDS - 1)) as usize
    }

    /// When row `k` starts.
    pub(crate) fn bin_start(&self, k: u64) -> u64 {
        self.start_us.saturating_add(k.saturating_mul(self.bin_us))
    }

    /// Row `s`, made (empty) if the timeline did not reach it yet.
    pub(crate) fn row(&mut self, s: usize) -> &mut Second {
        if self.rows.len() <= s {
            let from = self.rows.len();
            self.rows
                .extend((from..=s).map(|t| Second::empty(t as u64)));
        }
        &mut self.rows[s]
    }
}

fn level_mut(row: &mut Second, level: usize) -> &mut u64 {
    match level {
        0 => &mut row.client_outstanding,
        1 => &mut row.provider_in_flight,
        2 => &mut row.provider_in_service,
        3 => &mut row.gateway_depth,
        _ => &mut row.backlog,
    }
}

/// The sweep; see the module docs.
pub(crate) struct Sweep {
    /// Items as `t << 64 | key`, in time order as integers.
    queue: Calendar<u128>,
    /// Items handed over for instants already walked (records that came
    /// more than a window out of order): walked at the first instant not
    /// yet walked instead.
    pub(crate) late: u64,
    level: [i64; LEVELS],
    filled: [usize; LEVELS],
    /// Calls that never finished, open until the records end, by level.
    open_ended: [u64; LEVELS],
    /// The latest departure from the gateway of attempts sent so far.
    leave_max: u64,
    /// The next second whose drain time is due.
    next_second: u64,
    /// The longest an attempt stayed in the backlog.
    longest_stay_us: u64,
    pub(crate) first_shed: Option<FirstShed>,
    /// Errors of Retry-After against the drain time, microseconds, and
    /// how many were within their bound (see `tally::retry_after_within`).
    pub(crate) retry_after_errors: Histogram<u64>,
    pub(crate) retry_after_within: u64,
    /// `retry_after`'s tolerance: a share of the drain time.
    tolerance: f64,
    /// Taken off the drain time a Retry-After is compared with: the last
    /// request's own call, when the drain is seen from the client alone
    /// (see [`Sweep::drain_seen_from_the_client`]).
    own_call_us: u64,
    /// The Retry-After values given in the row being walked, milliseconds:
    /// the row, and the values of each [`Given`] kind.
    given: (usize, [Vec<u64>; 2]),
}

/// Whose refusal a Retry-After came with, as the judge classes it: the
/// gateway's own shed (at admission or after waiting, the provider never
/// saw it: the refusals `retry_after` judges) or the provider's refusal
/// relayed (`upstream_refused`). The timeline keeps each kind's median a
/// row apart, and the report's Retry-After chart draws them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Given {
    Own = 0,
    Relayed = 1,
}

impl Sweep {
    /// A sweep of a run, from its start, comparing Retry-After with the
    /// drain time by `retry_after`'s `tolerance`.
    pub(crate) fn new(tolerance: f64) -> Self {
        Sweep {
            queue: Calendar::new(),
            late: 0,
            level: [0; LEVELS],
            filled: [0; LEVELS],
            open_ended: [0; LEVELS],
            leave_max: 0,
            next_second: 0,
            longest_stay_us: 0,
            first_shed: None,
            retry_after_errors: histogram(),
            retry_after_within: 0,
            tolerance,
            own_call_us: 0,
            given: (0, [Vec::new(), Vec::new()]),
        }
    }

    /// The run's attempts leave the gateway only when they end (no provider
    /// records: `crate::external`), so the drain time at a refusal runs to
    /// the end of the last one's call: its Retry-After is compared with
    /// that less `service_us`, the plan's service time, when it left the
    /// queue.
    pub(crate) fn drain_seen_from_the_client(&mut self, service_us: u64) {
        self.own_call_us = service_us;
    }

    /// Items waiting to be walked.
    pub(crate) fn pending(&self) -> usize {
        self.queue.len()
    }

    fn push(&mut self, t: u64, key: u64) {
        let before = self.queue.taken_before();
        let t = if t < before {
            self.late += 1;
            before
        } else {
            t
        };
        self.queue.push(t, u128::from(t) << 64 | u128::from(key));
    }

    /// `[from, to)` counts in `level` (nothing if empty).
    pub(crate) fn interval(&mut self, level: Level, from: u64, to: u64) {
        if to <= from {
            return;
        }
        if level == Level::Backlog {
            self.longest_stay_us = self.longest_stay_us.max(to - from);
        }
        if to <= self.queue.taken_before() {
            // Wholly in instants already walked.
            self.late += 1;
            return;
        }
        self.push(from, key(START, level as u64, 0));
        self.push(to, key(END, level as u64, 0));
    }

    /// `[from, end of the records)` counts in `level`.
    pub(crate) fn open_ended(&mut self, level: Level, from: u64) {
        self.push(from, key(START, OPEN_ENDED + level as u64, 0));
    }

    /// An attempt sent at `sent` left the gateway at `leave`.
    pub(crate) fn fold(&mut self, sent: u64, leave: u64) {
        self.push(sent, key(FOLD, 0, leave));
    }

    /// A gateway shed sent at `sent` (the `seq`th attempt fed); `in_depth`
    /// and `in_backlog` say whether it counts itself in those levels at
    /// that instant. The first walked is the first shed.
    pub(crate) fn probe(&mut self, sent: u64, seq: u64, in_depth: bool, in_backlog: bool) {
        let payload = seq << 2 | u64::from(in_depth) | u64::from(in_backlog) << 1;
        self.push(sent, key(PROBE, 0, payload));
    }

    /// Returns true if and only if the first shed has been found.
    pub(crate) fn found_first_shed(&self) -> bool {
        self.first_shed.is_some()
    }

    /// A gateway shed done at `done` said Retry-After `ra_ms` in a header
    /// of `granularity_ms` (1 or 1,000): compared with the drain time at
    /// `done`.
    pub(crate) fn query(&mut self, done: u64, ra_ms: u64, granularity_ms: u64) {
        let coarse = u64::from(granularity_ms > 1);
        self.push(done, key(QUERY, 0, ra_ms.min(PAYLOAD >> 1) << 1 | coarse));
    }

    /// A refusal of kind `kind` done at `done` said Retry-After `ra_ms`:
    /// counted in its row's median of that kind.
    pub(crate) fn given(&mut self, done: u64, kind: Given, ra_ms: u64) {
        self.push(done, key(GIVEN, kind as u64, ra_ms));
    }

    /// Writes the medians of the Retry-After values given in the row being
    /// walked into it, and empties them.
    fn flush_given(&mut self, rows: &mut Rows) {
        let (s, values) = &mut self.given;
        if values.iter().all(Vec::is_empty) {
            return;
        }
        let row = rows.row(*s);
        let median = |v: &mut Vec<u64>| {
            v.sort_unstable();
            let m = quantile(v, 0.5);
            v.clear();
            m
        };
        row.retry_after_ms = median(&mut values[Given::Own as usize]);
        row.relayed_retry_after_ms = median(&mut values[Given::Relayed as usize]);
    }

    /// Walks the items before `until` (all but those of its last 10 ms,
    /// which may wait); `end_us` is the last instant of the records so far.
    pub(crate) fn run(&mut self, until: u64, end_us: u64, rows: &mut Rows) {
        while let Some(bucket) = self.queue.next_before(until) {
            for &item in &bucket {
                self.take(item, end_us, rows);
            }
            self.queue.recycle(bucket);
        }
    }

    /// Walks one item.
    fn take(&mut self, item: u128, end_us: u64, rows: &mut Rows) {
        let (t, k) = ((item >> 64) as u64, item as u64);
        self.drain_times_before(t, rows);
        self.walk(t, k, end_us, rows);
    }

    /// Writes the drain time of every second that starts before `t`.
    fn drain_times_before(&mut self, t: u64, rows: &mut Rows) {
        while self.next_second < MAX_SECONDS {
            let at = rows.bin_start(self.next_second);
            if at >= t {
                break;
            }
            rows.row(self.next_second as usize).drain_s =
                self.leave_max.saturating_sub(at) as f64 / US as f64;
            self.next_second += 1;
        }
    }

    fn walk(&mut self, t: u64, k: u64, end_us: u64, rows: &mut Rows) {
        let (rank, lvl, payload) = (k >> 61, (k >> 58 & 7) as usize, k & PAYLOAD);
        match rank {
            END => self.step(lvl, t, -1, rows),
            START if lvl >= OPEN_ENDED as usize => {
                // Empty if it starts at the records' very end.
                if t < end_us {
                    let lvl = lvl - OPEN_ENDED as usize;
                    self.open_ended[lvl] += 1;
                    self.step(lvl, t, 1, rows);
                }
            }
            START => self.step(lvl, t, 1, rows),
            FOLD => self.leave_max = self.leave_max.max(payload),
            GIVEN => {
                let s = rows.second_of(t);
                if s != self.given.0 {
                    self.flush_given(rows);
                    self.given.0 = s;
                }
                self.given.1[lvl.min(1)].push(payload);
            }
            PROBE => {
                if self.first_shed.is_none() {
                    let depth = self.level[Level::Depth as usize] - (payload & 1) as i64;
                    let backlog = self.level[Level::Backlog as usize] - (payload >> 1 & 1) as i64;
                    self.first_shed = Some(FirstShed {
                        at_us: t,
                        depth: depth.max(0) as u64,
                        backlog: backlog.max(0) as u64,
                    });
                }
            }
            _ => {
                let drain_us = self
                    .leave_max
                    .saturating_sub(t)
                    .saturating_sub(self.own_call_us);
                let granularity_ms = if payload & 1 == 1 { 1000 } else { 1 };
                let (error_us, within) =
                    retry_after_within(payload >> 1, granularity_ms, drain_us, self.tolerance);
                record(&mut self.retry_after_errors, error_us);
                self.retry_after_within += u64::from(within);
            }
        }
    }

    /// One event of `lvl` at `t`: the level carried into the seconds
    /// skipped is seen in them (at a second's start only if this event is
    /// not exactly then), and each level reached is seen in `t`'s second.
    fn step(&mut self, lvl: usize, t: u64, d: i64, rows: &mut Rows) {
        let s = rows.second_of(t);
        rows.row(s);
        let cur = self.level[lvl];
        while self.filled[lvl] < s {
            self.filled[lvl] += 1;
            let f = self.filled[lvl];
            if f < s || t > rows.bin_start(f as u64) {
                let v = level_mut(&mut rows.rows[f], lvl);
                *v = (*v).max(cur as u64);
            }
        }
        self.level[lvl] = (cur + d).max(0);
        let v = level_mut(&mut rows.rows[s], lvl);
        *v = (*v).max(self.level[lvl] as u64);
    }

    /// Walks the rest: calls that never finished end with the records at
    /// `end_us`; the timeline has `n` seconds. Returns the drain, measured
    /// for a run of `attempts` attempts with these expectations.
    pub(crate) fn finish(
        &mut self,
        expect: &Expectations,
        end_us: u64,
        n: usize,
        attempts: u64,
        rows: &mut Rows,
        adjust: impl FnOnce(&mut Rows),
    ) -> Drain {
        let all = self.queue.drain();
        let split = all.partition_point(|&item| ((item >> 64) as u64) < end_us);
        for &item in &all[..split] {
            self.take(item, end_us, rows);
        }
        // Calls that never finished end with the records: departures, so
        // before anything else at that instant.
        for lvl in 0..LEVELS {
            for _ in 0..std::mem::take(&mut self.open_ended[lvl]) {
                let item = u128::from(end_us) << 64 | u128::from(key(END, lvl as u64, 0));
                self.take(item, end_us, rows);
            }
        }
        for &item in &all[split..] {
            self.take(item, end_us, rows);
        }
        self.flush_given(rows);
        self.drain_times_before(rows.bin_start(n as u64), rows);
        // An external run's depth and backlog come from the gateway's
        // gauges (`crate::external`), before the drain is measured on them.
        adjust(rows);
        let backlog: Vec<u64> = rows.rows.iter().map(|r| r.backlog).collect();
        Drain::measure(
            expect,
            &backlog,
            rows.bin_us,
            end_us,
            attempts,
            self.longest_stay_us,
        )
    }
}
