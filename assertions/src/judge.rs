//! The one pass: [`Judge`] takes a run's records one at a time and returns
//! the [`Judgement`] the whole run gives (the join's meaning is in
//! `timeline`'s docs), holding what a window of the run needs, not the run.
//!
//! # The order records come in
//!
//! Both record files are written in end order, roughly: an attempt's
//! record when the attempt ends (`done_us`), a call's when the call ends
//! (its latest time field), reordered a little by the writers' channels.
//! Feed each file in its own order and merge the two by those end times
//! (as `rehearse report` does); the memory samples may come at any time.
//!
//! # The window
//!
//! `window = P + C + M`, where P is the longest patience (the scenario's,
//! or the longest an attempt lasted or a record's patience said, if
//! longer), C the longest provider call seen (received to its latest time
//! field) and M = 5 s of margin for the writers' reordering, capped at 10
//! minutes. The pass runs three clocks behind the latest end time fed:
//!
//! 1. *Release.* Records wait (filed by time in a calendar queue) and are
//!    released in start order (attempts by `sent_us`, calls by
//!    `received_us`) once their start is a window behind (give or take the
//!    queue's 10 ms buckets): a record ends at most max(P, C) after it
//!    starts and arrives M after it ends, so nothing that starts earlier is
//!    still to come. Released in that order, each call joins the latest
//!    attempt of its person: the attempt whose window it was received in.
//! 2. *Settling.* An attempt's departure from the gateway (for the depth
//!    and drain time) is settled when its first call is received, when the
//!    person's next attempt is sent, or, with neither, `P + G + M` after
//!    it ended (G: the longest the plan says a request may wait inside a
//!    gateway that never sheds, [`Expectations::gateway_wait_s`], so that
//!    a naive gateway's orphans count in its depth while they wait) (its
//!    *settling time*: a call received for it later still
//!    counts as stale, as a late answer and in the queue wait, but not in
//!    the depth; [`crate::Pass::settled_before_dispatch`] counts those).
//! 3. *The sweep* ([`crate::sweep`]) walks the instants up to the first
//!    unsettled attempt's send: levels per second, drain times, the first
//!    shed, the drain after the overload. Each second's exact percentiles
//!    are taken when the release passes its end, from the values of that
//!    second alone.
//!
//! A record that comes later than its window (its start already released)
//! is still counted, joined and judged, from the instant the pass reached;
//! [`crate::Pass::out_of_order`] counts them, and the harness says so.
//!
//! # What is held
//!
//! Per request, within the window: its record while it waits to be
//! released (about 110 bytes, a call's the same); then, for an attempt,
//! 64 bytes in its person's entry (about 80 bytes more per person) until
//! the person is done (the later of their last attempt's settling time and
//! their patience plus M after each of their attempts was due: no attempt
//! or call of theirs can still come); and 16 bytes per pending sweep item, about ten
//! per request. That is the request rate times a few windows, whatever the
//! run's length ([`Judge::held`] counts the entries).
//!
//! What outlives the window, to the end of the run: the per-second
//! [`crate::Timeline`] (one row per second of the run, 232 bytes),
//! the histograms and counts, the set of distinct Retry-After values, and
//! one compact entry per person whose last attempt ended without an answer
//! (a timeout, a reset, a shed not retried): 24 bytes (a 64-bit hash of the
//! id, the attempt's send and end times; 28 to 57 bytes in the hash
//! table), because a naive gateway can reach the provider for them
//! minutes later, a stale dispatch and often an answer to a closed socket.
//! A call for a person who was answered, received after the person is
//! done, joins nobody. Ids are compared by their 64-bit hash (SipHash): two
//! ids of one run share a hash with a probability under 10⁻⁶ up to 4
//! million people.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash as _, Hasher};

use hdrhistogram::Histogram;
use wire::{ClientOutcome, ClientRecord, ProviderOutcome, ProviderRecord, RefusalClass, RssSample};

use crate::calendar::Calendar;
use crate::expect::{Expectations, Thresholds};
use crate::external::External;
use crate::judgement::{conclude, Distribution, Judgement, Measured, Pass};
use crate::sweep::{Level, Rows, Sweep};
use crate::tally::{self, Previous, Retry, Tally};
use crate::timeline::{
    histogram, ms_percentiles, percentiles, quantile, record, row_us, Counts, Deaths, Drain,
    GatewayPeaks, Harness, Latencies, ProviderCounts, RefusalLine, Second, Summary, Timeline,
    MAX_SECONDS, US,
};

/// Judges a run held in memory: feeds a [`Judge`] the records in the
/// order a run directory holds them (each side by its end time, the two
/// merged) and finishes it. For a run on disk, feed a [`Judge`] line by
/// line instead.
///
/// ```
/// use assertions::{judge, Expectations, Status, Thresholds};
///
/// let expect = Expectations {
///     start_us: 0,
///     load_end_us: 10_000_000,
///     overload: None,
///     capacity_per_s: 10.0,
///     patience_s: 25.0,
///     service_s: 1.0,
///     queue_bound: 240.0,
///     in_flight_at_provider: 10.0,
///     gateway_wait_s: 0.0, knee: None,
///     memory_ceiling_bytes: None,
///     send_lag_bound_ms: 10.0,
///     send_lag_p99_ms: 1.0,
/// };
/// // No records: nothing was rehearsed, so the run is invalid.
/// let j = judge(&[], &[], &[], &expect, &Thresholds::default());
/// assert_eq!(j.overall, Status::Invalid);
/// assert_eq!(j.verdicts.len(), 11);
/// ```
pub fn judge(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    expect: &Expectations,
    thresholds: &Thresholds,
) -> Judgement {
    judge_at(attempts, calls, rss, expect, thresholds, 1.0)
}

/// [`judge()`] of a run made at `time_scale` (see
/// [`Judge::with_time_scale`]).
pub(crate) fn judge_at(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    expect: &Expectations,
    thresholds: &Thresholds,
    time_scale: f64,
) -> Judgement {
    let mut judge = Judge::with_time_scale(expect, thresholds, time_scale);
    for sample in rss {
        judge.rss(*sample);
    }
    // (end, index), each side in end order (stable: file order at ties).
    let mut a: Vec<(u64, usize)> = (0..attempts.len())
        .map(|i| (attempts[i].done_us, i))
        .collect();
    a.sort_unstable();
    let mut c: Vec<(u64, usize)> = (0..calls.len())
        .map(|i| (call_end_us(&calls[i]), i))
        .collect();
    c.sort_unstable();
    let (mut a, mut c) = (a.into_iter().peekable(), c.into_iter().peekable());
    loop {
        let call_first = match (a.peek(), c.peek()) {
            (Some(&(done, _)), Some(&(end, _))) => end < done,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (None, None) => break,
        };
        if call_first {
            let (_, k) = c.next().unwrap_or_default();
            judge.feed_call(calls[k].clone(), k as u64);
        } else {
            let (_, i) = a.next().unwrap_or_default();
            judge.feed_attempt(attempts[i].clone(), i as u64);
        }
    }
    judge.finish()
}

/// M: the margin for writers' reordering (and a little more).
const MARGIN_US: u64 = 5 * US;
/// The longest window: a call hung for an hour must not make the judge
/// hold an hour of records.
const MAX_WINDOW_US: u64 = 600 * US;

/// The end of a call: its latest time field. Calls are merged with
/// attempts by this.
pub fn call_end_us(c: &ProviderRecord) -> u64 {
    [c.admitted_us, c.first_byte_us, c.finished_us, c.hung_up_us]
        .into_iter()
        .flatten()
        .fold(c.received_us, u64::max)
}

/// What the judge holds at one moment, in entries (see the module docs for
/// their sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Records waiting to be released in start order.
    pub records: usize,
    /// Attempts of people not yet done.
    pub attempts: usize,
    /// People not yet done.
    pub people: usize,
    /// Items waiting in the sweep.
    pub events: usize,
    /// Per-second values waiting for their second's percentiles.
    pub values: usize,
    /// Compact entries of unanswered attempts (these stay to the end).
    pub compact: usize,
}

impl Held {
    /// Everything but the compact entries: what the window holds.
    pub fn windowed(&self) -> usize {
        self.records + self.attempts + self.people + self.events + self.values
    }
}

/// A hasher for keys that are already hashes or counters: one multiply,
/// so the table's control bytes still see mixed bits.
#[derive(Default)]
struct Mixed(u64);

impl Hasher for Mixed {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<Mixed>>;

/// A person's id as the judge knows it.
fn id_hash(id: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// What the judge keeps of an attempt.
#[derive(Debug, Clone)]
struct Attempt {
    /// Its place in `client.jsonl` (ties are broken by it, as in the file).
    seq: u64,
    attempt: u32,
    outcome: ClientOutcome,
    /// Its departure from the gateway is known and handed to the sweep.
    settled: bool,
    /// A call joined it as its first.
    matched: bool,
    /// An answer to it came after it had ended, and was counted late: a
    /// gateway's retries of the provider's refusals give it several.
    late: bool,
    intended_us: u64,
    sent_us: u64,
    done_us: u64,
    retry_after_ms: Option<u64>,
    patience_ms: u64,
    status: Option<u16>,
    /// The gateway's reason and the tenant, as indexes into the judge's
    /// names.
    reason: Option<u16>,
    tenant: Option<u16>,
}

/// The few distinct strings records repeat (reasons, tenants), each kept
/// once; an attempt holds its index.
#[derive(Default)]
struct Names(Vec<String>);

impl Names {
    /// The index of `name`; past 65,535 distinct names, `None` (a reason
    /// or tenant that many is not a label but noise).
    fn index(&mut self, name: Option<&str>) -> Option<u16> {
        let name = name?;
        if let Some(i) = self.0.iter().position(|n| n == name) {
            return u16::try_from(i).ok();
        }
        let i = u16::try_from(self.0.len()).ok()?;
        self.0.push(name.to_owned());
        Some(i)
    }

    fn get(&self, i: Option<u16>) -> Option<&str> {
        i.and_then(|i| self.0.get(usize::from(i)))
            .map(String::as_str)
    }
}

/// A refusal's line in the refusal table: class, status, reason, tenant.
type RefusalKey = (RefusalClass, u16, Option<u16>, Option<u16>);

/// What the judge keeps of a call.
#[derive(Debug, Clone)]
struct Call {
    received_us: u64,
    admitted_us: Option<u64>,
    finished_us: Option<u64>,
    hung_up_us: Option<u64>,
    tokens: u64,
    outcome: ProviderOutcome,
    status: u16,
}

/// A record waiting to be released, in a slab slot.
enum Record {
    Attempt(Attempt),
    Call(Call),
}

/// Records waiting to be released, in start order: small keys in a
/// calendar (the records themselves stay put in a slab).
struct Pending {
    /// `start << 64 | order at that instant` (attempts before calls, then
    /// by attempt number, then file order), with the slot.
    queue: Calendar<(u128, usize)>,
    slots: Vec<Option<(u64, Record)>>,
    free: Vec<usize>,
}

impl Pending {
    fn new() -> Self {
        Pending {
            queue: Calendar::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn push(&mut self, start: u64, order: u64, person: u64, record: Record) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some((person, record));
                i
            }
            None => {
                self.slots.push(Some((person, record)));
                self.slots.len() - 1
            }
        };
        let key = u128::from(start) << 64 | u128::from(order);
        self.queue.push(start, (key, slot));
    }

    /// Takes the record in `slot`.
    fn take(&mut self, slot: usize) -> Option<(u64, Record)> {
        let taken = self.slots[slot].take();
        self.free.push(slot);
        taken
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// The order of an attempt among records starting at one instant: before
/// calls, by attempt number, then by its place in the file.
fn attempt_order(attempt: u32, seq: u64) -> u64 {
    u64::from(attempt.min((1 << 23) - 1)) << 40 | seq.min((1 << 40) - 1)
}

/// The order of a call among records starting at one instant: after
/// attempts, by its place in the file.
fn call_order(seq: u64) -> u64 {
    1 << 63 | seq.min((1 << 40) - 1)
}

/// A person whose attempts may still come or still be joined.
#[derive(Debug, Default)]
struct Person {
    /// Released attempts, in send order; the last one's window is open.
    attempts: Vec<Attempt>,
    /// When the person is done: no attempt and no call for them can still
    /// be released.
    done_at: u64,
}

/// A person done, whose last attempt ended without an answer: kept to the
/// end of the run for a call a gateway may still make for them. 24 bytes
/// with its key (the id's hash): 16 here, 8 in the key; in the hash table,
/// with its control byte and its slack (7/8 full at most, 7/16 just after
/// growing), 28 to 57 bytes per unanswered person.
#[derive(Debug, Clone, Copy)]
struct Compact {
    /// The top bit: a call joined it already.
    sent_us: u64,
    /// The top bit: a late answer to it was counted already.
    done_us: u64,
}

const MATCHED_BIT: u64 = 1 << 63;
const LATE_BIT: u64 = 1 << 63;

/// A call joined as an attempt's first: when it was received, and when it
/// left the provider's queue (admitted, else finished).
#[derive(Clone, Copy)]
struct Match {
    received_us: u64,
    left_queue_us: Option<u64>,
}

/// Per-second values whose second is not over yet: each second's exact
/// percentiles come from its own values, sorted once.
#[derive(Default)]
struct Values {
    /// The first second not yet taken.
    first: usize,
    seconds: VecDeque<SecondValues>,
    held: usize,
}

#[derive(Default)]
struct SecondValues {
    e2e: Vec<u64>,
    waits: Vec<u64>,
    provider: Vec<u64>,
    retry_after: Vec<u64>,
}

#[derive(Clone, Copy)]
enum Value {
    E2e,
    Wait,
    Provider,
    RetryAfter,
}

impl Values {
    /// Adds `v` to second `s`; false if that second was taken already.
    fn add(&mut self, s: usize, what: Value, v: u64) -> bool {
        if s < self.first {
            return false;
        }
        let i = s - self.first;
        if self.seconds.len() <= i {
            self.seconds.resize_with(i + 1, SecondValues::default);
        }
        let sv = &mut self.seconds[i];
        match what {
            Value::E2e => sv.e2e.push(v),
            Value::Wait => sv.waits.push(v),
            Value::Provider => sv.provider.push(v),
            Value::RetryAfter => sv.retry_after.push(v),
        }
        self.held += 1;
        true
    }

    /// Takes every second before `upto` into its row.
    fn take(&mut self, upto: usize, rows: &mut Rows) {
        while self.first < upto {
            let Some(mut sv) = self.seconds.pop_front() else {
                self.first = upto;
                return;
            };
            self.held -= sv.e2e.len() + sv.waits.len() + sv.provider.len() + sv.retry_after.len();
            if sv.e2e.len() + sv.waits.len() + sv.provider.len() + sv.retry_after.len() > 0 {
                let row = rows.row(self.first);
                (row.e2e_p50_ms, row.e2e_p99_ms) = ms_percentiles(&mut sv.e2e);
                (row.queue_wait_p50_ms, row.queue_wait_p99_ms) = ms_percentiles(&mut sv.waits);
                (row.provider_p50_ms, row.provider_p99_ms) = ms_percentiles(&mut sv.provider);
                sv.retry_after.sort_unstable();
                row.retry_after_ms = quantile(&sv.retry_after, 0.5);
            }
            self.first += 1;
        }
    }
}

/// The latencies kept whole-run, as HDR histograms.
struct Latency {
    /// Per person served: first intended send to the answer.
    served: Histogram<u64>,
    /// Attempt sent to its first call received.
    queue_wait: Histogram<u64>,
    /// Received to finished, of calls answered.
    provider: Histogram<u64>,
}

/// The streaming judge: feed it a run's records ([`Judge::attempt`],
/// [`Judge::call`], [`Judge::rss`]) and [`Judge::finish`] it. See the
/// module docs for the order records should come in, the window and what
/// it holds.
///
/// ```
/// use assertions::{Expectations, Judge, Status, Thresholds};
/// use wire::{ClientOutcome, ClientRecord};
///
/// let expect = Expectations {
///     start_us: 0, load_end_us: 1_000_000, overload: None, capacity_per_s: 10.0,
///     patience_s: 5.0, service_s: 0.1, queue_bound: 49.0, in_flight_at_provider: 1.0,
///     gateway_wait_s: 0.0, knee: None, memory_ceiling_bytes: None, send_lag_bound_ms: 10.0, send_lag_p99_ms: 1.0,
/// };
/// let mut judge = Judge::new(&expect, &Thresholds::default());
/// judge.attempt(ClientRecord {
///     id: "r1".into(), attempt: 1, intended_us: 0, sent_us: 0, first_byte_us: None,
///     done_us: 200_000, status: Some(200), outcome: ClientOutcome::Ok,
///     retry_after_ms: None, tokens: 5, stream: false, last: true, patience_ms: 5_000, reason: None, tenant: None,
/// });
/// let j = judge.finish();
/// assert_eq!(j.summary.counts.ok, 1);
/// assert_eq!(j.verdict("no_silent_loss").unwrap().status, Status::Pass);
/// ```
pub struct Judge {
    expect: Expectations,
    thresholds: Thresholds,
    /// P, C and the latest end time fed.
    patience_us: u64,
    longest_call_us: u64,
    /// G: how long an orphan may still wait inside the gateway.
    gateway_wait_us: u64,
    stream_us: u64,
    /// Every record that starts before this instant has been released.
    released_to: u64,
    pending: Pending,
    fed_attempts: u64,
    fed_calls: u64,
    people: Map<Person>,
    live_attempts: usize,
    /// Unsettled attempts as (sent, person, index), in send order (some
    /// settled ones not yet dropped from the front).
    unsettled: VecDeque<(u64, u64, usize)>,
    /// When unsettled attempts settle without a call, and people are done.
    settle_at: Calendar<(u64, u64, usize)>,
    done_at: Calendar<(u64, u64)>,
    compact: Map<Compact>,
    values: Values,
    rows: Rows,
    sweep: Sweep,
    tally: Tally,
    counts: Counts,
    tenant_counts: BTreeMap<u16, Counts>,
    refusals: BTreeMap<RefusalKey, u64>,
    names: Names,
    provider: ProviderCounts,
    latency: Latency,
    distribution: Distribution,
    /// The last instant in any record (the run's start without any), and
    /// whether there was any.
    end_us: u64,
    any: bool,
    out_of_order: u64,
    settled_before_dispatch: u64,
    peak_held: usize,
    /// The gateway's deaths, and the attempts lost to them.
    deaths: Deaths,
    /// A run whose provider the harness did not see: what it is judged by.
    external: Option<External>,
    lost: u64,
}

impl Judge {
    /// A judge of a run made at time scale 1 with these predictions and
    /// thresholds: [`Judge::with_time_scale`] with 1.
    pub fn new(expect: &Expectations, thresholds: &Thresholds) -> Judge {
        Judge::with_time_scale(expect, thresholds, 1.0)
    }

    /// A judge of a run made at `time_scale` with these predictions and
    /// thresholds (at the run's scale): the timeline's rows are seconds of
    /// scenario time, `1 s ÷ time_scale` of the rehearsal each (a scale
    /// that is not a positive finite number counts as 1).
    pub fn with_time_scale(
        expect: &Expectations,
        thresholds: &Thresholds,
        time_scale: f64,
    ) -> Judge {
        let patience_us = if expect.patience_s.is_finite() && expect.patience_s > 0.0 {
            ((expect.patience_s * US as f64) as u64).min(MAX_WINDOW_US)
        } else {
            0
        };
        Judge {
            expect: expect.clone(),
            thresholds: thresholds.clone(),
            patience_us,
            longest_call_us: 0,
            gateway_wait_us: if expect.gateway_wait_s.is_finite() && expect.gateway_wait_s > 0.0 {
                ((expect.gateway_wait_s * US as f64) as u64).min(MAX_WINDOW_US)
            } else {
                0
            },
            stream_us: 0,
            released_to: 0,
            pending: Pending::new(),
            fed_attempts: 0,
            fed_calls: 0,
            people: Map::default(),
            live_attempts: 0,
            unsettled: VecDeque::new(),
            settle_at: Calendar::new(),
            done_at: Calendar::new(),
            compact: Map::default(),
            values: Values::default(),
            rows: Rows {
                start_us: expect.start_us,
                bin_us: row_us(time_scale),
                rows: Vec::new(),
            },
            sweep: Sweep::new(),
            tally: Tally::new(),
            counts: Counts::default(),
            tenant_counts: BTreeMap::new(),
            refusals: BTreeMap::new(),
            names: Names::default(),
            provider: ProviderCounts::default(),
            latency: Latency {
                served: histogram(),
                queue_wait: histogram(),
                provider: histogram(),
            },
            distribution: Distribution::new(),
            end_us: 0,
            any: false,
            out_of_order: 0,
            settled_before_dispatch: 0,
            peak_held: 0,
            deaths: Deaths::default(),
            external: None,
            lost: 0,
        }
    }

    /// The window now, in microseconds: P + C + M, capped.
    fn window_us(&self) -> u64 {
        (self.patience_us + self.longest_call_us + MARGIN_US).min(MAX_WINDOW_US)
    }

    /// How long after it ended an attempt without a call settles: P + G
    /// + M (G: [`Expectations::gateway_wait_s`], capped with the window).
    fn settling_us(&self) -> u64 {
        self.patience_us + self.gateway_wait_us + MARGIN_US
    }

    /// What the judge holds now.
    pub fn held(&self) -> Held {
        Held {
            records: self.pending.len(),
            attempts: self.live_attempts,
            people: self.people.len(),
            events: self.sweep.pending(),
            values: self.values.held,
            compact: self.compact.len(),
        }
    }

    /// The most it held at once, as [`Held::windowed`].
    pub fn peak_held(&self) -> usize {
        self.peak_held
    }

    /// Feeds one attempt's record (`client.jsonl`'s next line).
    pub fn attempt(&mut self, a: ClientRecord) {
        self.feed_attempt(a, self.fed_attempts);
    }

    /// Feeds one call's record (`provider.jsonl`'s next line).
    pub fn call(&mut self, c: ProviderRecord) {
        self.feed_call(c, self.fed_calls);
    }

    /// Feeds one memory sample (`rss.jsonl`'s next line), at any time.
    pub fn rss(&mut self, s: RssSample) {
        self.any = true;
        self.end_us = self.end_us.max(s.t_us);
        let second = self.rows.second_of(s.t_us);
        let row = self.rows.row(second);
        row.rss_bytes = Some(row.rss_bytes.unwrap_or(0).max(s.rss_bytes));
        // The last of equal peaks, as the samples come.
        if self
            .tally
            .peak_rss
            .is_none_or(|p| s.rss_bytes >= p.rss_bytes)
        {
            self.tally.peak_rss = Some(s);
        }
    }

    /// Tells the judge the gateway died at `died_us` and served again from
    /// `back_us` (`None`: it stayed down): the run's `crashes`, and its
    /// `lost` attempts (see [`crate::Timeline`]'s module docs). Give every
    /// death before the first record: an attempt is counted as it is fed.
    pub fn gateway_died(&mut self, died_us: u64, back_us: Option<u64>) {
        self.deaths.0.push((died_us, back_us));
    }

    /// Tells the judge one of the gateway's deaths was its memory limit's
    /// kill: `memory_ceiling` fails then, whatever the samples before it
    /// showed.
    pub fn gateway_oom_killed(&mut self) {
        self.tally.oom_kills += 1;
    }

    /// Judges the run as one whose provider the harness did not see
    /// (`--provider external`): from the client's records and the
    /// gateway's gauges `samples` (read every `period_s`), the checks of
    /// [`crate::MUST_JUDGE`] left unjudged making it invalid unless
    /// `allow_unjudged` names them. See [`crate::external`]'s docs.
    pub fn external(
        &mut self,
        mut samples: Vec<wire::GatewaySample>,
        period_s: f64,
        allow_unjudged: Vec<String>,
    ) {
        samples.sort_by_key(|s| s.t_us);
        self.external = Some(External {
            samples,
            period_s,
            allow_unjudged,
        });
    }

    /// Feeds the attempt that is `seq`th in its file.
    pub(crate) fn feed_attempt(&mut self, a: ClientRecord, seq: u64) {
        self.fed_attempts += 1;
        self.count_attempt(&a);
        self.patience_us = self
            .patience_us
            .max(a.done_us.saturating_sub(a.sent_us))
            .max(a.patience_ms.saturating_mul(1000))
            .min(MAX_WINDOW_US);
        self.stream_us = self.stream_us.max(a.done_us);
        if a.sent_us < self.released_to {
            self.out_of_order += 1;
        }
        let attempt = Attempt {
            seq,
            attempt: a.attempt,
            outcome: a.outcome,
            settled: false,
            matched: false,
            late: false,
            intended_us: a.intended_us,
            sent_us: a.sent_us,
            done_us: a.done_us,
            retry_after_ms: a.retry_after_ms,
            patience_ms: a.patience_ms,
            status: a.status,
            reason: self.names.index(a.reason.as_deref()),
            tenant: self.names.index(a.tenant.as_deref()),
        };
        self.pending.push(
            a.sent_us,
            attempt_order(a.attempt, seq),
            id_hash(&a.id),
            Record::Attempt(attempt),
        );
        self.fed();
    }

    /// Feeds the call that is `seq`th in its file.
    pub(crate) fn feed_call(&mut self, c: ProviderRecord, seq: u64) {
        self.fed_calls += 1;
        self.any = true;
        let last = call_end_us(&c);
        self.end_us = [c.admitted_us, c.finished_us, c.hung_up_us]
            .into_iter()
            .flatten()
            .fold(self.end_us.max(c.received_us), u64::max);
        self.longest_call_us = self
            .longest_call_us
            .max(last - c.received_us)
            .min(MAX_WINDOW_US);
        self.stream_us = self.stream_us.max(last);
        if c.received_us < self.released_to {
            self.out_of_order += 1;
        }
        let call = Call {
            received_us: c.received_us,
            admitted_us: c.admitted_us,
            finished_us: c.finished_us,
            hung_up_us: c.hung_up_us,
            tokens: c.tokens(),
            outcome: c.outcome,
            status: c.status,
        };
        self.pending.push(
            c.received_us,
            call_order(seq),
            id_hash(&c.id),
            Record::Call(call),
        );
        self.fed();
    }

    /// The counts an attempt adds wherever it falls: per second (offered,
    /// sent, how it ended) and for the run.
    fn count_attempt(&mut self, a: &ClientRecord) {
        self.any = true;
        self.end_us = self.end_us.max(a.done_us).max(a.sent_us).max(a.intended_us);
        self.tally.attempts += 1;
        self.counts.sent += 1;
        if a.attempt <= 1 {
            self.counts.offered += 1;
            let s = self.rows.second_of(a.intended_us);
            self.rows.row(s).offered += 1;
        }
        let s = self.rows.second_of(a.sent_us);
        self.rows.row(s).sent += 1;
        if a.outcome == ClientOutcome::Ok {
            if let Some((from, to)) = self.expect.overload {
                if from <= a.done_us && a.done_us < to {
                    self.tally.answered_in_overload += 1;
                }
            }
        }
        if let Some(t) = a.tenant.as_deref() {
            let t = self.names.index(Some(t));
            let c = self.tenant_counts.entry(t.unwrap_or(u16::MAX)).or_default();
            c.sent += 1;
            c.offered += u64::from(a.attempt <= 1);
        }
        // A refusal is counted when its class is known (at its settling).
        if !a.outcome.is_refusal() {
            self.ended(a.done_us, a.tenant.as_deref(), a.outcome);
        }
        if let Some(k) = Tally::lost_kind(a.outcome) {
            self.tally.lost[k] += 1;
        }
        if self.deaths.lost(a) {
            self.lost += 1;
        }
        self.distribution.add(a);
    }

    /// Counts an attempt that ended at `done_us` so: for the run, its
    /// second and its tenant.
    fn ended(&mut self, done_us: u64, tenant: Option<&str>, outcome: ClientOutcome) {
        self.counts.ended(outcome);
        let s = self.rows.second_of(done_us);
        self.rows.row(s).ended(outcome);
        if let Some(t) = tenant {
            let t = self.names.index(Some(t)).unwrap_or(u16::MAX);
            self.tenant_counts.entry(t).or_default().ended(outcome);
        }
    }

    /// After each record: release what the window allows, note the peak.
    fn fed(&mut self) {
        let bound = self.stream_us.saturating_sub(self.window_us());
        if bound > self.released_to {
            self.advance(bound);
        }
        self.peak_held = self.peak_held.max(self.held().windowed());
    }

    /// Releases every record that starts before `bound`, in start order,
    /// and sweeps as far as everything is known.
    fn advance(&mut self, bound: u64) {
        while let Some(bucket) = self.pending.queue.next_before(bound) {
            for &(key, slot) in &bucket {
                let Some((person, record)) = self.pending.take(slot) else {
                    continue;
                };
                self.pass_time((key >> 64) as u64);
                match record {
                    Record::Attempt(a) => self.release_attempt(person, a),
                    Record::Call(c) => self.release_call(person, &c),
                }
            }
            self.pending.queue.recycle(bucket);
        }
        self.pass_time(self.pending.queue.taken_before());
        while let Some(&(_, person, i)) = self.unsettled.front() {
            match self.people.get(&person) {
                Some(p) if !p.attempts[i].settled => break,
                _ => {
                    self.unsettled.pop_front();
                }
            }
        }
        let until = self
            .unsettled
            .front()
            .map_or(self.released_to, |&(sent, _, _)| sent.min(self.released_to));
        self.sweep.run(until, self.end_us, &mut self.rows);
    }

    /// Everything that starts before `x` is released: attempts past their
    /// settling time settle, people past their time are done, seconds
    /// wholly before `x` take their percentiles.
    fn pass_time(&mut self, x: u64) {
        if x <= self.released_to {
            return;
        }
        self.released_to = x;
        while let Some(bucket) = self.settle_at.next_before(x) {
            for &(_, person, i) in &bucket {
                self.settle(person, i, None);
            }
            self.settle_at.recycle(bucket);
        }
        while let Some(bucket) = self.done_at.next_before(x) {
            for &(at, person) in &bucket {
                if self.people.get(&person).is_some_and(|p| p.done_at == at) {
                    self.person_done(person);
                }
            }
            self.done_at.recycle(bucket);
        }
        let upto = if x < self.rows.start_us {
            0
        } else {
            ((x - self.rows.start_us) / self.rows.bin_us).min(MAX_SECONDS - 1) as usize
        };
        self.values.take(upto, &mut self.rows);
    }

    fn add_value(&mut self, t_us: u64, what: Value, v: u64) {
        let s = self.rows.second_of(t_us);
        if !self.values.add(s, what, v) {
            self.out_of_order += 1;
        }
    }

    /// An attempt, released at its send: it closes its person's previous
    /// attempt's window and opens its own.
    fn release_attempt(&mut self, person: u64, a: Attempt) {
        let settle_at = a.done_us.saturating_add(self.settling_us());
        let done_at = settle_at.max(
            a.intended_us
                .saturating_add(a.patience_ms.saturating_mul(1000))
                .saturating_add(MARGIN_US),
        );
        let p = self.people.entry(person).or_default();
        let previous = p.attempts.len().checked_sub(1);
        let i = p.attempts.len();
        p.attempts.push(a.clone());
        let later = done_at > p.done_at;
        p.done_at = p.done_at.max(done_at);
        if later {
            self.done_at.push(done_at, (done_at, person));
        }
        if let Some(prev) = previous {
            self.settle(person, prev, None);
        }
        self.live_attempts += 1;
        self.unsettled.push_back((a.sent_us, person, i));
        self.settle_at.push(settle_at, (settle_at, person, i));
        self.sweep
            .interval(Level::Outstanding, a.sent_us, a.done_us);
        if a.outcome == ClientOutcome::Ok {
            self.add_value(
                a.done_us,
                Value::E2e,
                a.done_us.saturating_sub(a.intended_us),
            );
        }
        if let Some(ra) = a.retry_after_ms {
            self.add_value(a.done_us, Value::RetryAfter, ra);
        }
    }

    /// Attempt `i` of `person` left the gateway: when its first call was
    /// received (`m`), else when it ended. Nothing if it was settled.
    fn settle(&mut self, person: u64, i: usize, m: Option<Match>) {
        let Some(a) = self
            .people
            .get_mut(&person)
            .and_then(|p| p.attempts.get_mut(i))
        else {
            return;
        };
        if a.settled {
            return;
        }
        a.settled = true;
        let a = a.clone();
        let leave = m.map_or(a.done_us, |m| m.received_us);
        let backlog_leave = m
            .and_then(|m| m.left_queue_us)
            .unwrap_or(a.done_us)
            .min(a.done_us);
        self.sweep.interval(Level::Depth, a.sent_us, leave);
        self.sweep
            .interval(Level::Backlog, a.sent_us, backlog_leave);
        self.sweep.fold(a.sent_us, leave);
        let provider_saw = m.is_some_and(|m| m.received_us <= a.done_us);
        let reason = self.names.get(a.reason);
        let Some(class) = RefusalClass::of(
            a.outcome,
            reason,
            Some(provider_saw),
            a.done_us.saturating_sub(a.sent_us),
        ) else {
            return;
        };
        let tenant = self.names.get(a.tenant).map(str::to_owned);
        self.ended(
            a.done_us,
            tenant.as_deref(),
            ClientOutcome::of_class(class, a.status),
        );
        *self
            .refusals
            .entry((class, a.status.unwrap_or(0), a.reason, a.tenant))
            .or_default() += 1;
        let gateway_shed =
            matches!(class, RefusalClass::AtAdmission | RefusalClass::AtDequeue) && !provider_saw;
        if !gateway_shed {
            return;
        }
        self.tally.sheds += 1;
        match a.retry_after_ms {
            Some(ra) => {
                self.tally.retry_after_values.insert(ra);
                self.sweep.query(a.done_us, ra);
            }
            None => self.tally.sheds_without_retry_after += 1,
        }
        if !self.sweep.found_first_shed() {
            self.sweep.probe(
                a.sent_us,
                a.seq,
                leave > a.sent_us,
                backlog_leave > a.sent_us,
            );
        }
    }

    /// A call, released at its receipt: its levels, its provider time, and
    /// its join to the latest attempt of its person.
    fn release_call(&mut self, person: u64, c: &Call) {
        self.provider.calls += 1;
        match c.finished_us.or(c.hung_up_us) {
            Some(end) => {
                self.sweep.interval(Level::InFlight, c.received_us, end);
                if let Some(a) = c.admitted_us {
                    self.sweep.interval(Level::InService, a, end);
                }
            }
            None => {
                self.sweep.open_ended(Level::InFlight, c.received_us);
                if let Some(a) = c.admitted_us {
                    self.sweep.open_ended(Level::InService, a);
                }
            }
        }
        if let (ProviderOutcome::Ok, Some(f), None) = (c.outcome, c.finished_us, c.hung_up_us) {
            let took = f.saturating_sub(c.received_us);
            self.add_value(f, Value::Provider, took);
            record(&mut self.latency.provider, took);
            if let Some((from, to)) = self.expect.overload {
                if from <= f && f < to {
                    self.tally.calls_answered_in_overload += 1;
                }
            }
        }
        self.join(person, c);
    }

    /// Marks `person`'s latest attempt (alive at `alive`, else compact) as
    /// answered late; true the first time, so that an attempt counts once
    /// however many calls the gateway made for it.
    fn first_late(&mut self, person: u64, alive: Option<usize>) -> bool {
        match alive {
            Some(i) => self
                .people
                .get_mut(&person)
                .and_then(|p| p.attempts.get_mut(i))
                .is_some_and(|a| !std::mem::replace(&mut a.late, true)),
            None => self.compact.get_mut(&person).is_some_and(|e| {
                let first = e.done_us & LATE_BIT == 0;
                e.done_us |= LATE_BIT;
                first
            }),
        }
    }

    /// Joins call `c` to its caller: the latest attempt of `person`, alive
    /// or compact.
    fn join(&mut self, person: u64, c: &Call) {
        // (sent, done, first call for it, still unsettled, index if alive)
        let caller = if let Some(p) = self.people.get_mut(&person) {
            let i = p.attempts.len() - 1;
            let a = &mut p.attempts[i];
            let first = !a.matched;
            a.matched = true;
            Some((a.sent_us, a.done_us, first, !a.settled, Some(i)))
        } else if let Some(e) = self.compact.get_mut(&person) {
            let first = e.sent_us & MATCHED_BIT == 0;
            e.sent_us |= MATCHED_BIT;
            Some((
                e.sent_us & !MATCHED_BIT,
                e.done_us & !LATE_BIT,
                first,
                false,
                None,
            ))
        } else {
            None
        };
        let Some((sent, done, first, unsettled, alive)) = caller else {
            return;
        };
        if done < c.admitted_us.unwrap_or(c.received_us) {
            self.provider.stale_dispatch += 1;
            self.provider.wasted_tokens += c.tokens;
        }
        if c.hung_up_us.is_none()
            && c.status != 0
            && c.finished_us.is_some_and(|f| f > done)
            && self.first_late(person, alive)
        {
            self.counts.late += 1;
        }
        if !first {
            return;
        }
        let wait = c.received_us.saturating_sub(sent);
        self.add_value(c.received_us, Value::Wait, wait);
        record(&mut self.latency.queue_wait, wait);
        match alive {
            Some(i) if unsettled => self.settle(
                person,
                i,
                Some(Match {
                    received_us: c.received_us,
                    left_queue_us: c.admitted_us.or(c.finished_us),
                }),
            ),
            _ => self.settled_before_dispatch += 1,
        }
    }

    /// A person is done: no attempt or call of theirs can still be
    /// released. Their latency served and their retries are counted; if
    /// their last attempt went unanswered, a compact entry stays.
    fn person_done(&mut self, person: u64) {
        let len = self.people.get(&person).map_or(0, |p| p.attempts.len());
        for i in 0..len {
            self.settle(person, i, None);
        }
        let Some(p) = self.people.remove(&person) else {
            return;
        };
        self.live_attempts -= p.attempts.len();
        self.tally.people += 1;
        let first = p
            .attempts
            .iter()
            .min_by_key(|a| (a.attempt, a.sent_us, a.seq));
        let answered = p
            .attempts
            .iter()
            .filter(|a| a.outcome == ClientOutcome::Ok)
            .map(|a| a.done_us)
            .min();
        if let (Some(first), Some(done)) = (first, answered) {
            self.tally.served += 1;
            record(
                &mut self.latency.served,
                done.saturating_sub(first.intended_us),
            );
        }
        self.count_honoured(&p.attempts);
        if let Some(last) = p.attempts.last() {
            if last.outcome != ClientOutcome::Ok {
                let matched = if last.matched { MATCHED_BIT } else { 0 };
                let late = if last.late { LATE_BIT } else { 0 };
                self.compact.insert(
                    person,
                    Compact {
                        sent_us: last.sent_us | matched,
                        done_us: last.done_us | late,
                    },
                );
            }
        }
    }

    /// Counts a person's retries that honoured a Retry-After (see
    /// [`tally::honoured`]); of duplicate attempt numbers, the last in
    /// the file counts, as in a map built from the file.
    fn count_honoured(&mut self, attempts: &[Attempt]) {
        if attempts.len() < 2 {
            return;
        }
        let mut by_number: HashMap<u32, &Attempt> = HashMap::new();
        for a in attempts {
            by_number
                .entry(a.attempt)
                .and_modify(|b| {
                    if a.seq > b.seq {
                        *b = a;
                    }
                })
                .or_insert(a);
        }
        for a in attempts {
            let prev = a
                .attempt
                .checked_sub(1)
                .and_then(|n| by_number.get(&n))
                .map(|p| Previous {
                    done_us: p.done_us,
                    retry_after_ms: p.retry_after_ms,
                });
            let retry = Retry {
                attempt: a.attempt,
                intended_us: a.intended_us,
                sent_us: a.sent_us,
                patience_ms: a.patience_ms,
                outcome: a.outcome,
            };
            let first_intended = by_number.get(&1).map(|f| f.intended_us);
            if let Some(admitted) =
                tally::honoured(&self.expect, &retry, prev.as_ref(), first_intended)
            {
                self.tally.honouring += 1;
                self.tally.honoured_admitted += u64::from(admitted);
            }
        }
    }

    /// Ends the run: releases and settles everything, sweeps to the end,
    /// and judges.
    pub fn finish(mut self) -> Judgement {
        self.advance(u64::MAX);
        for (_, person, i) in self.settle_at.drain() {
            self.settle(person, i, None);
        }
        for (_, person) in self.done_at.drain() {
            if self.people.contains_key(&person) {
                self.person_done(person);
            }
        }
        self.values.take(MAX_SECONDS as usize, &mut self.rows);
        if !self.any {
            self.end_us = self.rows.start_us;
        }
        let n = if self.any {
            let bin = self.rows.bin_us;
            ((self.end_us.saturating_sub(self.rows.start_us) / bin + 1).min(MAX_SECONDS)) as usize
        } else {
            0
        };
        let from = self.rows.rows.len();
        self.rows
            .rows
            .extend((from..n).map(|t| Second::empty(t as u64)));
        self.rows.rows.truncate(n);
        let external = self.external.clone();
        let drain = self.sweep.finish(
            &self.expect,
            self.end_us,
            n,
            self.tally.attempts,
            &mut self.rows,
            |rows| {
                if let Some(e) = &external {
                    e.adjust(rows);
                }
            },
        );
        if let Some(e) = &external {
            self.sweep.first_shed = e.first_shed(self.sweep.first_shed, &self.rows);
        }
        self.measured(drain)
    }

    fn measured(mut self, drain: Drain) -> Judgement {
        let seconds = std::mem::take(&mut self.rows.rows);
        let peak = |f: fn(&Second) -> u64| seconds.iter().map(f).max().unwrap_or(0);
        let name = |i: Option<u16>| self.names.get(i).map(str::to_owned);
        let tenants = self
            .tenant_counts
            .iter()
            .map(|(&t, c)| (name(Some(t)).unwrap_or_else(|| "?".into()), *c))
            .collect();
        let mut refusals: Vec<RefusalLine> = self
            .refusals
            .iter()
            .map(|(&(class, status, reason, tenant), &count)| RefusalLine {
                class,
                status,
                reason: name(reason),
                tenant: name(tenant),
                count,
            })
            .collect();
        // In the order of the names, not of their first appearance.
        refusals.sort();
        let summary = Summary {
            counts: self.counts,
            tenants,
            refusals,
            provider: self.provider,
            latency_ms: Latencies {
                e2e: percentiles(&self.latency.served),
                queue_wait: percentiles(&self.latency.queue_wait),
                provider: percentiles(&self.latency.provider),
            },
            gateway: GatewayPeaks {
                // The rows hold each second's largest level, so their
                // largest is the run's peak.
                peak_depth: peak(|s| s.gateway_depth),
                peak_backlog: peak(|s| s.backlog),
                peak_in_flight: peak(|s| s.client_outstanding),
                peak_rss_bytes: self.tally.peak_rss.map(|r| r.rss_bytes),
                crashes: self.deaths.count(),
                lost: self.lost,
            },
            drain_s: None,
            harness: Harness::default(),
        };
        self.tally.retry_after_errors =
            std::mem::replace(&mut self.sweep.retry_after_errors, histogram());
        let pass = Pass {
            window_s: self.window_us() as f64 / US as f64,
            out_of_order: self.out_of_order + self.sweep.late,
            settled_before_dispatch: self.settled_before_dispatch,
            peak_held: self.peak_held,
            compact: self.compact.len(),
        };
        let measured = Measured {
            timeline: Timeline {
                start_us: self.rows.start_us,
                seconds,
            },
            summary,
            drain,
            first_shed: self.sweep.first_shed,
            tally: self.tally,
            distribution: self.distribution,
            pass,
        };
        conclude(
            measured,
            &self.expect,
            &self.thresholds,
            self.external.as_ref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stories::{self, at, attempt, call, Story};

    /// Feeds `s` to a judge as a run directory holds it (each side in end
    /// order, merged by end time), checking what it holds after every
    /// record; returns the judgement and the most it held.
    fn stream(s: &Story) -> (Judgement, usize) {
        let mut judge = Judge::new(&s.expect, &Thresholds::default());
        let mut a: Vec<&ClientRecord> = s.attempts.iter().collect();
        a.sort_by_key(|r| r.done_us);
        let mut c: Vec<&ProviderRecord> = s.calls.iter().collect();
        c.sort_by_cached_key(|r| call_end_us(r));
        let (mut a, mut c) = (a.into_iter().peekable(), c.into_iter().peekable());
        let mut peak = 0;
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
            peak = peak.max(judge.held().windowed());
        }
        assert_eq!(peak, judge.peak_held());
        (judge.finish(), peak)
    }

    /// People whose last attempt went unanswered: one compact entry each.
    fn unanswered(s: &Story) -> usize {
        let mut last: HashMap<&str, &ClientRecord> = HashMap::new();
        for a in &s.attempts {
            let e = last.entry(a.id.as_str()).or_insert(a);
            if (a.sent_us, a.attempt) > (e.sent_us, e.attempt) {
                *e = a;
            }
        }
        last.values()
            .filter(|a| a.outcome != ClientOutcome::Ok)
            .count()
    }

    /// Judging 100,000 people holds no more than judging 20,000 at the same
    /// rate: what is held is the rate times the window, plus 24 bytes per
    /// unanswered person.
    #[test]
    fn what_the_judge_holds_does_not_grow_with_the_run() {
        const PER_S: u64 = 200;
        let short = stories::soak(20_000, PER_S, 1_500, 1);
        let long = stories::soak(100_000, PER_S, 1_500, 1);
        let (js, peak_short) = stream(&short);
        let (jl, peak_long) = stream(&long);
        assert_eq!(jl.summary.counts.offered, 100_000);
        // The window: 2 s of patience + the longest call (about 4 s) + 5 s.
        let window_s = jl.pass.window_s;
        assert!((8.0..13.0).contains(&window_s), "{window_s}");
        // Per request in the window: its records, its person and attempts,
        // its sweep items (about ten) and values: under 20 entries for each
        // second of a few windows (records wait one window to be released,
        // attempts up to a patience and a settling time more).
        let bound = (PER_S as f64 * 3.0 * window_s * 20.0) as usize;
        assert!(peak_long <= bound, "{peak_long} > {bound}");
        // Five times the run, the same peak give or take the noise.
        assert!(
            peak_long * 10 <= peak_short * 11,
            "20,000 people: {peak_short}; 100,000: {peak_long}"
        );
        assert_eq!(js.pass.compact, unanswered(&short));
        assert_eq!(jl.pass.compact, unanswered(&long));
        assert_eq!(jl.pass.out_of_order, 0);
        assert_eq!(jl.pass.settled_before_dispatch, 0);
    }

    /// Refusals by kind: a reason decides; without one the join does (the
    /// provider saw it: after dispatch; answered at once: at admission;
    /// later: at dequeue). Counted apart for the run, per second and per
    /// tenant, listed by class, status and reason, equal to the batch
    /// judge's.
    #[test]
    fn refusals_are_classed_by_reason_then_by_the_join() {
        use wire::RefusalClass as K;
        let refusal = |id: &str, sent: u64, done: u64, status: u16, reason: Option<&str>| {
            let mut a = attempt(
                id,
                1,
                sent,
                done,
                ClientOutcome::refused(status, reason),
                None,
            );
            a.status = Some(status);
            a.reason = reason.map(str::to_owned);
            a.tenant = Some(if id == "e" { "batch" } else { "shop" }.to_owned());
            a
        };
        let s = Story {
            attempts: vec![
                refusal("a", 0, 1, 503, None),
                refusal("b", 10, 400, 503, None),
                refusal("c", 20, 300, 503, None),
                refusal("d", 30, 900, 503, Some("wait_expired")),
                refusal("e", 40, 41, 429, Some("tenant_limited")),
                refusal("f", 50, 2_050, 504, None),
                refusal("g", 60, 61, 429, Some("queue_full")),
            ],
            calls: vec![call("c", 100, 100, 290), call("f", 60, 60, 2_040)],
            rss: Vec::new(),
            expect: stories::expect(None, 3_000, 5.0),
        };
        let (j, _) = stream(&s);
        let c = j.summary.counts;
        assert_eq!(
            (
                c.shed,
                c.stale,
                c.tenant_limited,
                c.upstream_refused,
                c.gateway_timeout
            ),
            (2, 2, 1, 1, 1),
            "{c:?}"
        );
        assert_eq!(c.refused(), 7);
        let t = &j.summary.tenants;
        assert_eq!(t["batch"].tenant_limited, 1);
        assert_eq!(t["batch"].offered, 1);
        assert_eq!(t["shop"].tenant_limited, 0);
        assert_eq!(t["shop"].refused(), 6);
        let lines: Vec<(K, u16, Option<&str>, u64)> = j
            .summary
            .refusals
            .iter()
            .map(|l| (l.class, l.status, l.reason.as_deref(), l.count))
            .collect();
        assert!(lines.contains(&(K::AtAdmission, 503, None, 1)), "{lines:?}");
        assert!(lines.contains(&(K::AtDequeue, 503, None, 1)), "{lines:?}");
        assert!(
            lines.contains(&(K::AfterDispatch, 503, None, 1)),
            "{lines:?}"
        );
        assert!(
            lines.contains(&(K::AfterDispatch, 504, None, 1)),
            "{lines:?}"
        );
        assert!(
            lines.contains(&(K::AtDequeue, 503, Some("wait_expired"), 1)),
            "{lines:?}"
        );
        let row_stale: u64 = j.timeline.seconds.iter().map(|r| r.stale).sum();
        assert_eq!(row_stale, 2);
        // Three kinds share "503 without a reason": not legible.
        assert_eq!(
            j.verdict("refusals_legible").unwrap().status,
            crate::verdict::Status::Fail
        );
        let batch = crate::batch::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        assert_eq!(j.summary.counts, batch.summary.counts);
        assert_eq!(j.summary.tenants, batch.summary.tenants);
        assert_eq!(j.summary.refusals, batch.summary.refusals);
    }

    /// A caller who gave up, and their call dispatched five minutes later,
    /// with traffic in between that moves the window on.
    #[test]
    fn an_attempt_answered_late_counts_once_however_often_the_gateway_retried() {
        let mut s = stories::soak(2_000, 4, 1_500, 5);
        let mut gone = attempt("gone", 1, 1_000, 3_000, ClientOutcome::Timeout, None);
        gone.patience_ms = 2_000;
        s.attempts.push(gone);
        // The gateway's client retried two 429s, then was answered: all
        // after the caller left, one answer to a closed socket.
        for (k, at) in [4_000u64, 5_000, 6_000].into_iter().enumerate() {
            let mut c = call("gone", at, at, at + 100);
            c.status = if k < 2 { 429 } else { 200 };
            c.seq = 1_000_000 + k as u64;
            s.calls.push(c);
        }
        let t = Thresholds::default();
        let (plain, _) = stream(&stories::soak(2_000, 4, 1_500, 5));
        let (j, _) = stream(&s);
        let batch = crate::batch::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.summary.counts.late, plain.summary.counts.late + 1);
        assert_eq!(j.summary.counts, batch.summary.counts);
    }

    #[test]
    fn a_dispatch_minutes_after_the_caller_left_is_still_stale() {
        let mut s = stories::soak(2_000, 4, 1_500, 3);
        let mut late = attempt("late", 1, 1_000, 3_000, ClientOutcome::Timeout, None);
        late.patience_ms = 2_000;
        s.attempts.push(late);
        s.calls.push(call("late", 301_000, 301_000, 301_500));
        let t = Thresholds::default();
        let (j, _) = stream(&s);
        let batch = crate::batch::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.pass.settled_before_dispatch, 1);
        assert_eq!(j.summary.provider, batch.summary.provider);
        assert_eq!(j.summary.counts, batch.summary.counts);
        assert_eq!(
            j.summary.latency_ms.queue_wait,
            batch.summary.latency_ms.queue_wait
        );
        // Its 300 s in the gateway are not in the depth: the one
        // difference, and the harness notes it.
        let row = |j: &Judgement, ms: u64| j.timeline.seconds[(ms / 1000) as usize].gateway_depth;
        assert_eq!(row(&batch, 150_000), row(&j, 150_000) + 1);
        assert_eq!(at(0), s.expect.start_us);
    }

    /// A gateway that died at 5 s and came back at 7 s, then died for good
    /// at 12 s: the attempts inside it then that ended unanswered, and the
    /// ones refused while it was down, are lost; answers, timeouts of
    /// callers who never reached it, and the rest are not. The peak in
    /// flight is the most attempts open at once.
    #[test]
    fn deaths_and_the_attempts_they_lost_and_the_peak_in_flight() {
        use ClientOutcome as O;
        let attempts = vec![
            // Answered before the first death.
            attempt("a", 1, 0, 1_000, O::Ok, None),
            // Inside at 5 s, reset by the death.
            attempt("b", 1, 4_000, 5_010, O::Reset, None),
            // Inside at 5 s, the caller's patience ran out later.
            attempt("c", 1, 4_500, 6_000, O::Timeout, None),
            // Ended 50 ms before the death, unanswered: still inside.
            attempt("d", 1, 4_600, 4_950, O::Reset, None),
            // Ended 200 ms before: not inside.
            attempt("e", 1, 4_600, 4_800, O::Reset, None),
            // Sent while it was down: refused a connection.
            attempt("f", 1, 6_000, 6_001, O::ConnectError, None),
            // Sent while it was down, and yet answered (a retry's luck).
            attempt("g", 1, 6_500, 7_500, O::Ok, None),
            // After the restart: a connect error is not a death's.
            attempt("h", 1, 8_000, 8_001, O::ConnectError, None),
            // Inside at 5 s and answered anyway.
            attempt("i", 1, 4_900, 5_050, O::Ok, None),
            // Down for good from 12 s: refused.
            attempt("j", 1, 13_000, 13_001, O::ConnectError, None),
            // Inside at 12 s, reset.
            attempt("k", 1, 11_000, 12_020, O::Reset, None),
        ];
        let s = Story {
            attempts,
            calls: Vec::new(),
            rss: Vec::new(),
            expect: stories::expect(None, 14_000, 30.0),
        };
        let mut judge = Judge::new(&s.expect, &Thresholds::default());
        judge.gateway_died(at(5_000), Some(at(7_000)));
        judge.gateway_died(at(12_000), None);
        let mut sorted = s.attempts.clone();
        sorted.sort_by_key(|a| a.done_us);
        for a in sorted {
            judge.attempt(a);
        }
        let g = judge.finish().summary.gateway;
        assert_eq!(g.crashes, 2);
        // b, c, d, f, j, k.
        assert_eq!(g.lost, 6);
        // b, c, d and e open from 4.6 s (and b, c, d and i at 4.9 s).
        assert_eq!(g.peak_in_flight, 4);
        // Without deaths, nothing is lost; the batch judge agrees on the
        // peak.
        let (j, _) = stream(&s);
        let batch = crate::batch::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        assert_eq!((j.summary.gateway.crashes, j.summary.gateway.lost), (0, 0));
        assert_eq!(j.summary.gateway, batch.summary.gateway);
    }
}
