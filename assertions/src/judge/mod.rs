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
//!    An answer that was not a success is classed then
//!    ([`wire::ClientOutcome::joined`]): no call before it, the gateway's
//!    own refusal; a call before it, by the latest such call, once its
//!    person is done (a gateway's retries of the provider are in by then).
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
//! released (144 bytes, an attempt's or a call's: a 112-byte slot and a
//! 32-byte key in the calendar; 16 of an attempt's bytes say how a
//! streamed answer was received, 16 of a call's how it was sent, for
//! `stream_intact`, and 8 of a call's when its tokens were made, for
//! `cancel_on_hangup`); then, for an attempt, 96 bytes in its
//! person's list until the person is done (the later of their last
//! attempt's settling time and their patience plus M after each of their
//! attempts was due: no attempt or call of theirs can still come), and 24
//! bytes in each of the two queues of unsettled attempts until it settles;
//! per person, 40 bytes in the table (47 to 94 with its control byte and
//! its slack: 7/8 full at most, 7/16 just after growing), 16 in the queue
//! of people by when they are done, and their list's room for four
//! attempts from the first on (384 bytes); and 16 bytes per pending sweep
//! item, about ten per request. That is the request rate times a few
//! windows, whatever the run's length ([`Judge::held`] counts the entries;
//! a unit test checks these sizes).
//!
//! What outlives the window, to the end of the run: the per-second
//! [`crate::Timeline`] (one row per second of the run, 296 bytes),
//! the histograms and counts, the set of distinct Retry-After values, and
//! one compact entry per person whose last attempt ended without an answer
//! (a timeout, a reset, a shed not retried): 32 bytes (a 64-bit hash of the
//! id, the attempt's send and end times, whether a call joined it,
//! whether a late answer to it was counted and whether its caller gave
//! up; 38 to 75 bytes in the hash table), because a naive gateway can reach the provider for them
//! minutes later, a stale dispatch and often an answer to a closed socket.
//! A call for a person who was answered, received after the person is
//! done, joins nobody. Ids are compared by their 64-bit hash (SipHash): two
//! ids of one run share a hash with a probability under 10⁻⁶ up to 4
//! million people.
//!
//! # The judge's parts
//!
//! [`Judge`] is its parts: the window's clocks (`Window`: P, C, G, the
//! latest end fed, the release point); the records waiting to be released
//! (`records::Pending`); the people not yet done, their unsettled attempts
//! and the compact entries (`people::People`); the per-second values
//! waiting for their second's percentiles (`values::Values`); the
//! timeline's rows and the sweep that writes their levels; what outlives
//! the window (`Figures`: counts, histograms, the checks' tally); and how
//! the pass went (`Progress`).

mod people;
mod records;
mod values;

use std::collections::{BTreeMap, HashMap};

use hdrhistogram::Histogram;
use wire::{
    ClientOutcome, ClientRecord, Join, ProviderEnd, ProviderOutcome, ProviderRecord, RefusalClass,
    RssSample,
};

use crate::covered::{covered, Stop};
use crate::delivery::{delivery, Received, Sent};
use crate::expect::{Expectations, Thresholds};
use crate::external::External;
use crate::judgement::{conclude, Distribution, Judgement, Measured, Pass};
use crate::routing::{self, RoutedCall, Routing, TroubleWindow, ALL_COOLING};
use crate::sweep::{Given, Level, Rows, Sweep};
use crate::tally::{self, relayed_retry_after, Previous, Retry, Tally};
use crate::timeline::{
    histogram, percentiles, record, row_us, Counts, Deaths, Drain, GatewayPeaks, Harness,
    Latencies, ProviderCounts, RefusalLine, Second, Summary, Timeline, MAX_SECONDS, US,
};
use people::{id_hash, AttemptAt, Compact, DoneAt, People};
use records::{Attempt, Call, LatestCall, Names, Pending, Record, Release, Side};
use values::{Value, Values};

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
///     gateway_wait_s: 0.0, knee: None, drain_baseline: None,
///     after_trouble: None,
///     memory_ceiling_bytes: None, memory_settle: None,
///     send_lag_bound_ms: 10.0,
///     send_lag_p99_ms: 1.0,
///     stopped_us: None,
/// };
/// // No records: nothing was rehearsed, so the run is invalid.
/// let j = judge(&[], &[], &[], &expect, &Thresholds::default());
/// assert_eq!(j.overall, Status::Invalid);
/// assert_eq!(j.verdicts.len(), 17);
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

/// The Retry-After attempt `a` was given, by its refusal's kind once
/// settled (`counted`; `gateway_shed`: one `retry_after` judges), handed to
/// the sweep for the timeline's per-second medians of each kind: a shed
/// of the gateway's own, or the provider's refusal relayed. Other
/// refusals' (a tenant's entitlement, a gateway timeout) are in neither.
fn retry_after_given(sweep: &mut Sweep, a: &Attempt, counted: ClientOutcome, gateway_shed: bool) {
    let Some(ra) = a.retry_after_ms else {
        return;
    };
    let relayed = counted == ClientOutcome::UpstreamRefused;
    let kind = match (gateway_shed, relayed) {
        (true, _) => Given::Own,
        (false, true) => Given::Relayed,
        (false, false) => return,
    };
    sweep.given(a.done_us, kind, ra);
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

/// A refusal's line in the refusal table: class, status, reason, tenant
/// (the last two as indexes into the judge's names).
type RefusalKey = (RefusalClass, u16, Option<u16>, Option<u16>);

/// A call joined as an attempt's first: when it was received, and when it
/// left the provider's queue (admitted, else finished).
#[derive(Clone, Copy)]
struct Match {
    received_us: u64,
    left_queue_us: Option<u64>,
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

/// The window's clocks (see the module docs): P, C and G as seen so far,
/// the latest end time fed, and how far the release has gone.
struct Window {
    /// P: the longest patience.
    patience_us: u64,
    /// C: the longest provider call.
    longest_call_us: u64,
    /// G: how long an orphan may still wait inside the gateway.
    gateway_wait_us: u64,
    /// The latest end time fed.
    stream_us: u64,
    /// Every record that starts before this instant has been released.
    released_to: u64,
}

impl Window {
    fn new(expect: &Expectations) -> Self {
        let capped = |s: f64| {
            if s.is_finite() && s > 0.0 {
                ((s * US as f64) as u64).min(MAX_WINDOW_US)
            } else {
                0
            }
        };
        Window {
            patience_us: capped(expect.patience_s),
            longest_call_us: 0,
            gateway_wait_us: capped(expect.gateway_wait_s),
            stream_us: 0,
            released_to: 0,
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

    /// An attempt fed: how long it lasted and its patience stretch P.
    fn saw_attempt(&mut self, a: &ClientRecord) {
        self.patience_us = self
            .patience_us
            .max(a.done_us.saturating_sub(a.sent_us))
            .max(a.patience_ms.saturating_mul(1000))
            .min(MAX_WINDOW_US);
        self.stream_us = self.stream_us.max(a.done_us);
    }

    /// A call fed, received at `received_us` and ended at `end_us`: it
    /// stretches C.
    fn saw_call(&mut self, received_us: u64, end_us: u64) {
        self.longest_call_us = self
            .longest_call_us
            .max(end_us - received_us)
            .min(MAX_WINDOW_US);
        self.stream_us = self.stream_us.max(end_us);
    }

    /// Records that start before this instant may be released: a window
    /// behind the latest end fed.
    fn release_bound(&self) -> u64 {
        self.stream_us.saturating_sub(self.window_us())
    }
}

/// What outlives the window, to the end of the run: the run's counts,
/// histograms and the checks' tally.
struct Figures {
    tally: Tally,
    counts: Counts,
    /// Counts per tenant, by the tenant's index into `names`.
    tenants: BTreeMap<u16, Counts>,
    refusals: BTreeMap<RefusalKey, u64>,
    /// The reasons and tenants the records name, each once.
    names: Names,
    provider: ProviderCounts,
    latency: Latency,
    distribution: Distribution,
    /// The gateway's deaths, and the attempts lost to them.
    deaths: Deaths,
    lost: u64,
}

impl Figures {
    fn new() -> Self {
        Figures {
            tally: Tally::new(),
            counts: Counts::default(),
            tenants: BTreeMap::new(),
            refusals: BTreeMap::new(),
            names: Names::default(),
            provider: ProviderCounts::default(),
            latency: Latency {
                served: histogram(),
                queue_wait: histogram(),
                provider: histogram(),
            },
            distribution: Distribution::new(),
            deaths: Deaths::default(),
            lost: 0,
        }
    }

    /// Counts an attempt that ended at `done_us` so: for the run, its
    /// second and its tenant.
    fn ended(
        &mut self,
        rows: &mut Rows,
        done_us: u64,
        tenant: Option<&str>,
        outcome: ClientOutcome,
    ) {
        self.counts.ended(outcome);
        let s = rows.second_of(done_us);
        rows.row(s).ended(outcome);
        if let Some(t) = tenant {
            let t = self.names.index(Some(t)).unwrap_or(u16::MAX);
            self.tenants.entry(t).or_default().ended(outcome);
        }
    }
}

/// How the pass went so far.
#[derive(Default)]
struct Progress {
    /// Records fed from each file: the next one's place in it.
    attempts_fed: u64,
    calls_fed: u64,
    /// The last instant in any record (the run's start without any), and
    /// whether there was any.
    end_us: u64,
    any: bool,
    /// Records, or parts of them, that came after their window.
    out_of_order: u64,
    /// Calls received after their attempt settled without one.
    settled_before_dispatch: u64,
    /// The most entries held at once ([`Held::windowed`]).
    peak_held: usize,
}

impl Progress {
    /// Some record or sample reached `t_us`.
    fn reached(&mut self, t_us: u64) {
        self.any = true;
        self.end_us = self.end_us.max(t_us);
    }
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
///     gateway_wait_s: 0.0, knee: None, drain_baseline: None,
///     after_trouble: None,
///     memory_ceiling_bytes: None, memory_settle: None,
///     send_lag_bound_ms: 10.0, send_lag_p99_ms: 1.0, stopped_us: None,
/// };
/// let mut judge = Judge::new(&expect, &Thresholds::default());
/// judge.attempt(ClientRecord {
///     id: "r1".into(), attempt: 1, intended_us: 0, sent_us: 0, client_wait_us: 0,
///     first_byte_us: None,
///     done_us: 200_000, status: Some(200), outcome: ClientOutcome::Ok,
///     retry_after_ms: None, retry_after_header: None, tokens: 5, stream: false, last: true,
///     patience_ms: 5_000, reason: None, tenant: None, body_reads: None,
///     longest_gap_us: None,
/// });
/// let j = judge.finish();
/// assert_eq!(j.summary.counts.ok, 1);
/// assert_eq!(j.verdict("no_silent_loss").unwrap().status, Status::Pass);
/// ```
pub struct Judge {
    /// What the run predicted over the time it covered (`crate::covered`),
    /// and the checklist (at the run's scale).
    expect: Expectations,
    /// The stop, for a run stopped before its end.
    stop: Option<Stop>,
    thresholds: Thresholds,
    /// A run whose provider the harness did not see: what it is judged by.
    external: Option<External>,
    window: Window,
    /// Records waiting to be released in start order.
    pending: Pending,
    /// People not yet done, and the compact entries of those done
    /// unanswered.
    people: People,
    /// Per-second values waiting for their second's percentiles.
    values: Values,
    /// The timeline's rows, and the sweep that writes their levels.
    rows: Rows,
    sweep: Sweep,
    figures: Figures,
    /// Each provider's calls, windows and seconds (`crate::routing`).
    routing: Routing,
    progress: Progress,
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
        // Cut once, here: everything after reads the cut window.
        let (expect, stop) = covered(expect);
        let expect = &expect;
        let mut judge = Judge {
            expect: expect.clone(),
            stop,
            thresholds: thresholds.clone(),
            external: None,
            window: Window::new(expect),
            pending: Pending::new(),
            people: People::new(),
            values: Values::default(),
            rows: Rows {
                start_us: expect.start_us,
                bin_us: row_us(time_scale),
                rows: Vec::new(),
            },
            sweep: Sweep::new(thresholds.retry_after.tolerance),
            figures: Figures::new(),
            routing: Routing::new(thresholds.retry_after.tolerance),
            progress: Progress::default(),
        };
        judge.recovery_window(&[]);
        judge
    }

    /// Sets `recovery`'s window: after the last trouble (the overload's
    /// end, [`Expectations::after_trouble`], and with several providers
    /// each of `troubles`) and `drain.within`, to the load's end.
    fn recovery_window(&mut self, troubles: &[TroubleWindow]) {
        self.figures.tally.recovery = crate::aftermath::Aftermath::new(
            &self.expect,
            self.thresholds.drain.within,
            self.rows.bin_us,
            troubles.iter().map(|t| t.to_us),
        );
    }

    /// Tells the judge the scenario's providers (`plan.json`'s
    /// `providers`, in the scenario's order, full scale) and the troubles
    /// the plan expects a gateway to route around (its `troubles`), for a
    /// run at `scale`: with several, `failover` and `cooldown_honoured`
    /// are judged, and the timeline has each provider's calls and
    /// refusals per second. Give them before the first record.
    pub fn providers(
        &mut self,
        providers: &[wire::ProviderPlan],
        troubles: &[wire::Trouble],
        scale: wire::Scale,
    ) {
        let names: Vec<String> = providers.iter().map(|p| p.name.clone()).collect();
        self.routing.name_providers(&names);
        let at = |s: f64| -> u64 {
            let us = scale.secs(s) * US as f64;
            self.expect
                .start_us
                .saturating_add(if us.is_finite() && us > 0.0 {
                    us as u64
                } else {
                    0
                })
        };
        let quota = if scale.quota.is_finite() && scale.quota > 0.0 {
            scale.quota
        } else {
            1.0
        };
        let windows: Vec<TroubleWindow> = troubles
            .iter()
            .map(|t| TroubleWindow {
                provider: self.routing.index(&t.provider),
                why: t.why.clone(),
                from_us: at(t.start_s),
                to_us: at(t.start_s + t.duration_s),
                // A scenario second of the rehearsal holds ÷ quota of the
                // full scale's second.
                others_per_s: t.others_per_min.map(|m| m / 60.0 / quota),
            })
            .collect();
        self.recovery_window(&windows);
        self.routing.troubles = windows;
    }

    /// What the judge holds now.
    pub fn held(&self) -> Held {
        Held {
            records: self.pending.len(),
            attempts: self.people.attempts,
            people: self.people.open.len(),
            events: self.sweep.pending(),
            values: self.values.held,
            compact: self.people.compact.len(),
        }
    }

    /// The most it held at once, as [`Held::windowed`].
    pub fn peak_held(&self) -> usize {
        self.progress.peak_held
    }

    /// Feeds one attempt's record (`client.jsonl`'s next line).
    pub fn attempt(&mut self, a: ClientRecord) {
        self.feed_attempt(a, self.progress.attempts_fed);
    }

    /// Feeds one call's record (`provider.jsonl`'s next line).
    pub fn call(&mut self, c: ProviderRecord) {
        self.feed_call(c, self.progress.calls_fed);
    }

    /// Feeds one memory sample (`rss.jsonl`'s next line), at any time.
    pub fn rss(&mut self, s: RssSample) {
        self.progress.reached(s.t_us);
        let second = self.rows.second_of(s.t_us);
        let row = self.rows.row(second);
        row.rss_bytes = Some(row.rss_bytes.unwrap_or(0).max(s.rss_bytes));
        // The last of equal peaks, as the samples come.
        let tally = &mut self.figures.tally;
        if tally.peak_rss.is_none_or(|p| s.rss_bytes >= p.rss_bytes) {
            tally.peak_rss = Some(s);
        }
        tally.memory.sample(s, &self.expect);
    }

    /// Tells the judge the gateway died at `died_us` and served again from
    /// `back_us` (`None`: it stayed down): the run's `crashes`, and its
    /// `lost` attempts (see [`crate::Timeline`]'s module docs). Give every
    /// death before the first record: an attempt is counted as it is fed.
    pub fn gateway_died(&mut self, died_us: u64, back_us: Option<u64>) {
        self.figures.deaths.0.push((died_us, back_us));
    }

    /// Tells the judge one of the gateway's deaths was its memory limit's
    /// kill: `memory_ceiling` fails then, whatever the samples before it
    /// showed.
    pub fn gateway_oom_killed(&mut self) {
        self.figures.tally.oom_kills += 1;
    }

    /// Judges the run as one whose provider the harness did not see
    /// (`--provider external`): from the client's records and the
    /// gateway's gauges `samples` (read every `period_s`), the checks of
    /// [`crate::Check::must_judge`] left unjudged making it invalid unless
    /// `allow_unjudged` names them. See [`crate::external`]'s docs.
    pub fn external(
        &mut self,
        mut samples: Vec<wire::GatewaySample>,
        period_s: f64,
        allow_unjudged: Vec<String>,
    ) {
        samples.sort_by_key(|s| s.t_us);
        let service_s = self.expect.service_s;
        if service_s.is_finite() && service_s > 0.0 {
            self.sweep
                .drain_seen_from_the_client((service_s * US as f64) as u64);
        }
        self.external = Some(External {
            samples,
            period_s,
            allow_unjudged,
        });
    }

    /// Feeds the attempt that is `seq`th in its file.
    pub(crate) fn feed_attempt(&mut self, a: ClientRecord, seq: u64) {
        // Judged from when it left the client for the gateway: a wait in
        // the client for a connection (a busy pool, the connect rate) is
        // the callers', in the latency from the intended send but never in
        // the gateway's queue or depth. (What a record from before
        // `client_wait_us` said as its sent time.)
        let a = ClientRecord {
            sent_us: a.on_the_wire_us(),
            client_wait_us: 0,
            ..a
        };
        self.progress.attempts_fed += 1;
        self.count_attempt(&a);
        self.window.saw_attempt(&a);
        if a.sent_us < self.window.released_to {
            self.progress.out_of_order += 1;
        }
        let names = &mut self.figures.names;
        let attempt = Attempt {
            seq,
            attempt: a.attempt,
            outcome: a.outcome,
            settled: false,
            matched: false,
            late: false,
            retry_after_fine: a.retry_after_granularity_ms() == 1,
            cut_pending: false,
            intended_us: a.intended_us,
            sent_us: a.sent_us,
            done_us: a.done_us,
            retry_after_ms: a.retry_after_ms,
            patience_ms: a.patience_ms,
            status: a.status,
            reason: names.index(a.reason.as_deref()),
            tenant: names.index(a.tenant.as_deref()),
            received: Received::of(&a),
            latest: None,
            counted: None,
        };
        let release = Release {
            start_us: a.sent_us,
            side: Side::Attempt { number: a.attempt },
            seq,
        };
        self.pending
            .push(release, id_hash(&a.id), Record::Attempt(attempt));
        self.fed();
    }

    /// Feeds the call that is `seq`th in its file.
    pub(crate) fn feed_call(&mut self, c: ProviderRecord, seq: u64) {
        self.progress.calls_fed += 1;
        let last = call_end_us(&c);
        // Its end as far as the records go (a first byte is no end).
        let end = [c.admitted_us, c.finished_us, c.hung_up_us]
            .into_iter()
            .flatten()
            .fold(c.received_us, u64::max);
        self.progress.reached(end);
        self.window.saw_call(c.received_us, last);
        if c.received_us < self.window.released_to {
            self.progress.out_of_order += 1;
        }
        let completed = tally::completed(&c);
        let call = Call {
            received_us: c.received_us,
            admitted_us: c.admitted_us,
            finished_us: c.finished_us,
            hung_up_us: c.hung_up_us,
            tokens: u32::try_from(c.tokens()).unwrap_or(u32::MAX),
            outcome: c.outcome,
            status: c.status,
            cut: tally::cut_mid_stream(&c),
            completed,
            provider: u16::try_from(self.routing.index(c.provider_name())).unwrap_or(u16::MAX),
            retry_after_ms: tally::provider_wait_ms(&c)
                .and_then(|ms| std::num::NonZeroU32::new(u32::try_from(ms).unwrap_or(u32::MAX))),
            sent: if completed { Sent::of(&c) } else { None },
            generating_after_us: u32::try_from(
                tally::Generation::of(&c)
                    .from_us
                    .saturating_sub(c.received_us),
            )
            .unwrap_or(u32::MAX),
            completion_tokens: c.completion_tokens,
        };
        let release = Release {
            start_us: c.received_us,
            side: Side::Call,
            seq,
        };
        self.pending
            .push(release, id_hash(&c.id), Record::Call(call));
        self.fed();
    }

    /// The counts an attempt adds wherever it falls: per second (offered,
    /// sent, how it ended) and for the run.
    fn count_attempt(&mut self, a: &ClientRecord) {
        let joins = self.joins(a.outcome);
        self.progress
            .reached(a.done_us.max(a.sent_us).max(a.intended_us));
        let f = &mut self.figures;
        f.tally.attempts += 1;
        f.counts.sent += 1;
        if a.attempt <= 1 {
            f.counts.offered += 1;
            let s = self.rows.second_of(a.intended_us);
            self.rows.row(s).offered += 1;
        }
        let s = self.rows.second_of(a.sent_us);
        self.rows.row(s).sent += 1;
        if a.outcome == ClientOutcome::Ok {
            if let Some((from, to)) = self.expect.overload {
                if from <= a.done_us && a.done_us < to {
                    f.tally.answered_in_overload += 1;
                }
            }
        }
        if let Some(t) = a.tenant.as_deref() {
            let t = f.names.index(Some(t));
            let c = f.tenants.entry(t.unwrap_or(u16::MAX)).or_default();
            c.sent += 1;
            c.offered += u64::from(a.attempt <= 1);
        }
        // An answer that was not a success is counted when its class is
        // known (at its settling, or when its person is done).
        if !joins {
            f.ended(&mut self.rows, a.done_us, a.tenant.as_deref(), a.outcome);
        }
        // One the load generator never sent never reached the gateway: no
        // loss of its (the run's notes say why it was not sent).
        if let Some(k) = Tally::lost_kind(a.outcome).filter(|_| !a.was_not_sent()) {
            f.tally.lost[k] += 1;
        }
        if f.deaths.lost(a) {
            f.lost += 1;
        }
        f.distribution.add(a);
        f.tally.deliveries.count(a);
    }

    /// After each record: release what the window allows, note the peak.
    fn fed(&mut self) {
        let bound = self.window.release_bound();
        if bound > self.window.released_to {
            self.advance(bound);
        }
        self.progress.peak_held = self.progress.peak_held.max(self.held().windowed());
    }

    /// Releases every record that starts before `bound`, in start order,
    /// and sweeps as far as everything is known.
    fn advance(&mut self, bound: u64) {
        while let Some(bucket) = self.pending.next_before(bound) {
            for &(release, slot) in &bucket {
                let Some((person, record)) = self.pending.take(slot) else {
                    continue;
                };
                self.pass_time(release.start_us);
                match record {
                    Record::Attempt(a) => self.release_attempt(person, a),
                    Record::Call(c) => self.release_call(person, &c),
                }
            }
            self.pending.recycle(bucket);
        }
        self.pass_time(self.pending.taken_before());
        while let Some(&front) = self.people.unsettled.front() {
            match self.people.attempt_mut(front.person, front.index) {
                Some(a) if !a.settled => break,
                _ => {
                    self.people.unsettled.pop_front();
                }
            }
        }
        let released_to = self.window.released_to;
        let until = self
            .people
            .unsettled
            .front()
            .map_or(released_to, |u| u.at_us.min(released_to));
        self.sweep.run(until, self.progress.end_us, &mut self.rows);
    }

    /// Everything that starts before `x` is released: attempts past their
    /// settling time settle, people past their time are done, seconds
    /// wholly before `x` take their percentiles.
    fn pass_time(&mut self, x: u64) {
        if x <= self.window.released_to {
            return;
        }
        self.window.released_to = x;
        while let Some(bucket) = self.people.settle_at.next_before(x) {
            for a in &bucket {
                self.settle(a.person, a.index, None);
            }
            self.people.settle_at.recycle(bucket);
        }
        while let Some(bucket) = self.people.done_at.next_before(x) {
            for d in &bucket {
                let due = self
                    .people
                    .open
                    .get(&d.person)
                    .is_some_and(|p| p.done_at == d.at_us);
                if due {
                    self.person_done(d.person);
                }
            }
            self.people.done_at.recycle(bucket);
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
            self.progress.out_of_order += 1;
        }
    }

    /// An attempt, released at its send: it closes its person's previous
    /// attempt's window and opens its own.
    fn release_attempt(&mut self, person: u64, a: Attempt) {
        let settle_at = a.done_us.saturating_add(self.window.settling_us());
        let done_at = settle_at.max(
            a.intended_us
                .saturating_add(a.patience_ms.saturating_mul(1000))
                .saturating_add(MARGIN_US),
        );
        let p = self.people.open.entry(person).or_default();
        let previous = p.attempts.len().checked_sub(1);
        let index = p.attempts.len();
        p.attempts.push(a.clone());
        let later = done_at > p.done_at;
        p.done_at = p.done_at.max(done_at);
        if later {
            self.people.done_at.push(
                done_at,
                DoneAt {
                    at_us: done_at,
                    person,
                },
            );
        }
        if let Some(prev) = previous {
            self.settle(person, prev, None);
        }
        self.people.attempts += 1;
        self.people.unsettled.push_back(AttemptAt {
            at_us: a.sent_us,
            person,
            index,
        });
        self.people.settle_at.push(
            settle_at,
            AttemptAt {
                at_us: settle_at,
                person,
                index,
            },
        );
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
            if a.outcome == ClientOutcome::Shed
                && self.figures.names.get(a.reason) == Some(ALL_COOLING)
            {
                let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                self.routing.cooling_refusal(a.done_us, ra, granularity_ms);
            }
        }
    }

    /// Attempt `i` of `person` left the gateway: when its first call was
    /// received (`m`), else when it ended. Nothing if it was settled.
    fn settle(&mut self, person: u64, i: usize, m: Option<Match>) {
        let Some(a) = self.people.attempt_mut(person, i) else {
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
        if !self.joins(a.outcome) {
            return;
        }
        let reason = self.figures.names.get(a.reason);
        let cooling = reason == Some(ALL_COOLING);
        let join = match a.latest {
            // Classed by the latest call when its person is done
            // (`class_after_dispatch`): a gateway's retries are still to come.
            Some(_) if !reason.is_some_and(ClientOutcome::is_table_reason) => return,
            Some(latest) => Join::Called(latest.end()),
            // Without provider records (an external provider), a refusal
            // is taken for one the provider never saw, as it always was.
            None => Join::NoCall,
        };
        let (counted, class) =
            a.outcome
                .joined(a.status, reason, join, a.done_us.saturating_sub(a.sent_us));
        if let Some(x) = self.people.attempt_mut(person, i) {
            x.counted = Some(counted);
        }
        let f = &mut self.figures;
        let tenant = f.names.get(a.tenant).map(str::to_owned);
        f.ended(&mut self.rows, a.done_us, tenant.as_deref(), counted);
        let Some(class) = class else {
            return;
        };
        *f.refusals
            .entry((class, a.status.unwrap_or(0), a.reason, a.tenant))
            .or_default() += 1;
        let gateway_shed =
            matches!(class, RefusalClass::AtAdmission | RefusalClass::AtDequeue) && !provider_saw;
        retry_after_given(&mut self.sweep, &a, counted, gateway_shed);
        if !gateway_shed {
            return;
        }
        f.tally.sheds += 1;
        match a.retry_after_ms {
            Some(ra) => {
                f.tally.retry_after_values.insert(ra);
                // Every upstream cooling: judged against the time until a
                // provider next accepted (`crate::routing`), not the drain.
                if !cooling {
                    let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                    self.sweep.query(a.done_us, ra, granularity_ms);
                }
            }
            None => f.tally.sheds_without_retry_after += 1,
        }
        if class == RefusalClass::AtDequeue {
            // Dropped after a wait: no onset of shedding.
            f.tally.stale_drops += 1;
            record(
                &mut f.tally.stale_waits,
                a.done_us.saturating_sub(a.sent_us),
            );
            return;
        }
        f.tally.admission_sheds += 1;
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
        self.figures.provider.calls += 1;
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
            record(&mut self.figures.latency.provider, took);
            if let Some((from, to)) = self.expect.overload {
                if from <= f && f < to {
                    self.figures.tally.calls_answered_in_overload += 1;
                }
            }
        }
        self.routing.call(&RoutedCall {
            provider: usize::from(c.provider),
            received_us: c.received_us,
            end_us: [c.admitted_us, c.finished_us, c.hung_up_us]
                .into_iter()
                .flatten()
                .fold(c.received_us, u64::max),
            second: self.rows.second_of(c.received_us),
            status: c.status,
            accepted: c.completed,
            retry_after_ms: c.retry_after_ms.map(|ms| u64::from(ms.get())),
            retry: self.called_before(person),
        });
        self.count_hangup(person, c);
        self.join(person, c);
    }

    /// Counts call `c` for `cancel_on_hangup` if its caller (the latest
    /// attempt of `person`, alive or compact) gave up while it was in
    /// service (`tally::after_hangup`).
    fn count_hangup(&mut self, person: u64, c: &Call) {
        let caller = match self.people.open.get(&person) {
            Some(p) => p
                .attempts
                .last()
                .map(|a| (tally::caller_gave_up(a.outcome), a.done_us)),
            None => self
                .people
                .compact
                .get(&person)
                .map(|e| (e.gave_up, e.done_us)),
        };
        let Some((true, left_us)) = caller else {
            return;
        };
        let span = tally::CallSpan {
            received_us: c.received_us,
            finished_us: c.finished_us,
            hung_up_us: c.hung_up_us,
            generation: c.generation(),
        };
        let within_us =
            u64::try_from(self.thresholds.cancel_on_hangup.within.as_micros()).unwrap_or(u64::MAX);
        if let Some(h) = tally::after_hangup(left_us, &span, within_us) {
            let p = &mut self.figures.provider;
            p.running_at_hangup += u64::from(h.to_cancel);
            p.cancelled_at_hangup += u64::from(h.to_cancel && h.cancelled);
            p.tokens_after_hangup += h.tokens;
        }
    }

    /// Returns true if and only if the attempt a call of `person` joins
    /// (their latest, alive or compact: see [`Judge::join`]) had a call
    /// already: this one is the gateway's own retry or failover.
    fn called_before(&self, person: u64) -> bool {
        match self.people.open.get(&person) {
            Some(p) => p.attempts.last().is_some_and(|a| a.matched),
            None => self.people.compact.get(&person).is_some_and(|e| e.matched),
        }
    }

    /// Marks `person`'s latest attempt (alive at `alive`, else compact) as
    /// answered late; true the first time, so that an attempt counts once
    /// however many calls the gateway made for it.
    fn first_late(&mut self, person: u64, alive: Option<usize>) -> bool {
        let late = match alive {
            Some(i) => self.people.attempt_mut(person, i).map(|a| &mut a.late),
            None => self.people.compact.get_mut(&person).map(|e| &mut e.late),
        };
        late.is_some_and(|late| !std::mem::replace(late, true))
    }

    /// Joins call `c` to its caller: the latest attempt of `person`, alive
    /// or compact.
    fn join(&mut self, person: u64, c: &Call) {
        // (sent, done, first call for it, still unsettled, index if alive)
        let caller = if let Some(p) = self.people.open.get_mut(&person) {
            let i = p.attempts.len() - 1;
            let a = &mut p.attempts[i];
            let first = !std::mem::replace(&mut a.matched, true);
            // The latest of its calls cut or completed decides whether an
            // `ok` answer to it was cut short.
            if c.cut || c.completed {
                a.cut_pending = c.cut;
            }
            // Calls that reached a provider before the answer, from the
            // first on (one joined after the attempt settled without a
            // call came out of its window: it was classed without it).
            if c.received_us <= a.done_us && (a.latest.is_some() || !a.settled) {
                let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                let provider_ms = c.retry_after_ms.map(|ms| u64::from(ms.get()));
                let kept = relayed_retry_after(a.retry_after_ms, granularity_ms, provider_ms);
                let end = ProviderEnd::of(c.status, c.outcome, c.hung_up_us.is_some());
                a.latest = Some(LatestCall::new(end, kept));
            }
            Some((a.sent_us, a.done_us, first, !a.settled, Some(i)))
        } else if let Some(e) = self.people.compact.get_mut(&person) {
            let first = !std::mem::replace(&mut e.matched, true);
            Some((e.sent_us, e.done_us, first, false, None))
        } else {
            None
        };
        let Some((sent, done, first, unsettled, alive)) = caller else {
            return;
        };
        if let Some(i) = alive {
            self.delivered(person, i, c);
        }
        // Calls per attempt: in the row of the attempt's send.
        let row = self.rows.row(self.rows.second_of(sent));
        row.provider_calls += 1;
        row.dispatched += u64::from(first);
        self.figures.tally.cut_calls += u64::from(c.cut);
        if done < c.admitted_us.unwrap_or(c.received_us) {
            self.figures.provider.stale_dispatch += 1;
            self.figures.provider.wasted_tokens += u64::from(c.tokens);
        }
        if c.hung_up_us.is_none()
            && c.status != 0
            && c.finished_us.is_some_and(|f| f > done)
            && self.first_late(person, alive)
        {
            self.figures.counts.late += 1;
        }
        if !first {
            return;
        }
        let wait = c.received_us.saturating_sub(sent);
        self.add_value(c.received_us, Value::Wait, wait);
        record(&mut self.figures.latency.queue_wait, wait);
        match alive {
            Some(i) if unsettled => self.settle(
                person,
                i,
                Some(Match {
                    received_us: c.received_us,
                    left_queue_us: c.admitted_us.or(c.finished_us),
                }),
            ),
            _ => self.progress.settled_before_dispatch += 1,
        }
    }

    /// Call `c` joined attempt `i` of `person`: if it answered and the
    /// attempt is a streamed answer not yet judged, how the answer was
    /// delivered against how the call sent it (`crate::delivery`). The
    /// first call that answered decides.
    fn delivered(&mut self, person: u64, i: usize, c: &Call) {
        let Some(sent) = c.sent else {
            return;
        };
        let Some(received) = self
            .people
            .attempt_mut(person, i)
            .and_then(|a| a.received.take())
        else {
            return;
        };
        self.figures
            .tally
            .deliveries
            .add(&delivery(&received, &sent));
    }

    /// A person is done: no attempt or call of theirs can still be
    /// released. Their latency served and their retries are counted; if
    /// their last attempt went unanswered, a compact entry stays.
    fn person_done(&mut self, person: u64) {
        let len = self
            .people
            .open
            .get(&person)
            .map_or(0, |p| p.attempts.len());
        for i in 0..len {
            self.settle(person, i, None);
        }
        let Some(mut p) = self.people.open.remove(&person) else {
            return;
        };
        self.people.attempts -= p.attempts.len();
        self.class_after_dispatch(&mut p.attempts);
        let f = &mut self.figures;
        f.tally.people += 1;
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
        if let Some(first) = first {
            let tenant_limited = p
                .attempts
                .iter()
                .any(|a| a.outcome == ClientOutcome::TenantLimited);
            f.tally.recovery.person(
                first.intended_us,
                f.names.get(first.tenant),
                answered.is_some(),
                tenant_limited,
            );
        }
        if let (Some(first), Some(done)) = (first, answered) {
            f.tally.served += 1;
            record(
                &mut f.latency.served,
                done.saturating_sub(first.intended_us),
            );
        }
        self.count_honoured(&p.attempts);
        self.figures.tally.silent_truncations += p
            .attempts
            .iter()
            .filter(|a| a.outcome == ClientOutcome::Ok && a.cut_pending)
            .count() as u64;
        if let Some(last) = p.attempts.last() {
            if last.outcome != ClientOutcome::Ok {
                self.people.compact.insert(
                    person,
                    Compact {
                        sent_us: last.sent_us,
                        done_us: last.done_us,
                        matched: last.matched,
                        late: last.late,
                        gave_up: tally::caller_gave_up(last.outcome),
                    },
                );
            }
        }
    }

    /// Returns true if and only if an attempt that ended so is classed by
    /// the join before it is counted: an answer that was not a success
    /// (a refusal, or a `provider_error` when the provider's records are
    /// there to tell whose error it was).
    fn joins(&self, outcome: ClientOutcome) -> bool {
        outcome.is_refusal() || (outcome == ClientOutcome::ProviderError && self.external.is_none())
    }

    /// A person is done, every call of theirs joined: their attempts that
    /// a call reached a provider for before the answer (left unclassed at
    /// their settling) are classed by the latest such call, and counted;
    /// the provider's refusals relayed are counted by what the answer did
    /// with the provider's Retry-After.
    fn class_after_dispatch(&mut self, attempts: &mut [Attempt]) {
        for a in attempts.iter_mut() {
            if a.counted.is_none() && self.joins(a.outcome) {
                let f = &mut self.figures;
                let reason = f.names.get(a.reason);
                let join = a.latest.map_or(Join::NoCall, |l| Join::Called(l.end()));
                let waited = a.done_us.saturating_sub(a.sent_us);
                let (counted, class) = a.outcome.joined(a.status, reason, join, waited);
                a.counted = Some(counted);
                let tenant = f.names.get(a.tenant).map(str::to_owned);
                f.ended(&mut self.rows, a.done_us, tenant.as_deref(), counted);
                if let Some(class) = class {
                    *f.refusals
                        .entry((class, a.status.unwrap_or(0), a.reason, a.tenant))
                        .or_default() += 1;
                }
                // Classed once its person is done, later than the sweep
                // walked its end: the sweep counts it where it stands.
                retry_after_given(&mut self.sweep, a, counted, false);
            }
            if a.counted == Some(ClientOutcome::UpstreamRefused) {
                let kept = match a.latest {
                    Some(LatestCall::Refused(kept)) => Some(kept),
                    _ => None,
                };
                self.figures.tally.relayed(kept);
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
        let tally = &mut self.figures.tally;
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
                tally.honouring += 1;
                tally.honoured_admitted += u64::from(admitted);
            }
        }
    }

    /// Ends the run: releases and settles everything, sweeps to the end,
    /// and judges.
    pub fn finish(mut self) -> Judgement {
        self.advance(u64::MAX);
        for a in self.people.settle_at.drain() {
            self.settle(a.person, a.index, None);
        }
        for d in self.people.done_at.drain() {
            if self.people.open.contains_key(&d.person) {
                self.person_done(d.person);
            }
        }
        self.values.take(MAX_SECONDS as usize, &mut self.rows);
        if !self.progress.any {
            self.progress.end_us = self.rows.start_us;
        }
        let end_us = self.progress.end_us;
        let n = if self.progress.any {
            let bin = self.rows.bin_us;
            ((end_us.saturating_sub(self.rows.start_us) / bin + 1).min(MAX_SECONDS)) as usize
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
            end_us,
            n,
            self.figures.tally.attempts,
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
        let f = self.figures;
        let name = |i: Option<u16>| f.names.get(i).map(str::to_owned);
        let tenants = f
            .tenants
            .iter()
            .map(|(&t, c)| (name(Some(t)).unwrap_or_else(|| "?".into()), *c))
            .collect();
        let mut refusals: Vec<RefusalLine> = f
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
            counts: f.counts,
            tenants,
            refusals,
            provider: f.provider,
            latency_ms: Latencies {
                e2e: percentiles(&f.latency.served),
                queue_wait: percentiles(&f.latency.queue_wait),
                provider: percentiles(&f.latency.provider),
            },
            gateway: GatewayPeaks {
                // The rows hold each second's largest level, so their
                // largest is the run's peak.
                peak_depth: peak(|s| s.gateway_depth),
                peak_backlog: peak(|s| s.backlog),
                peak_in_flight: peak(|s| s.client_outstanding),
                peak_rss_bytes: f.tally.peak_rss.map(|r| r.rss_bytes),
                crashes: f.deaths.count(),
                lost: f.lost,
            },
            drain_s: None,
            harness: Harness::default(),
        };
        let mut tally = f.tally;
        tally.retry_after_errors =
            std::mem::replace(&mut self.sweep.retry_after_errors, histogram());
        tally.retry_after_within = self.sweep.retry_after_within;
        let mut routing = self.routing;
        // The every-upstream-cooling refusals, judged by their own truth.
        let _ = tally.retry_after_errors.add(&routing.cooling_errors);
        tally.retry_after_within += routing.cooling_within;
        routing.round_trip_us = routing::round_trip_us(&f.latency.queue_wait);
        let providers = routing.per_second(seconds.len());
        let pass = Pass {
            window_s: self.window.window_us() as f64 / US as f64,
            out_of_order: self.progress.out_of_order + self.sweep.late,
            settled_before_dispatch: self.progress.settled_before_dispatch,
            peak_held: self.progress.peak_held,
            compact: self.people.compact.len(),
        };
        let measured = Measured {
            timeline: Timeline {
                start_us: self.rows.start_us,
                seconds,
                providers,
            },
            summary,
            drain,
            first_shed: self.sweep.first_shed,
            tally,
            distribution: f.distribution,
            pass,
            routing: Some((routing, self.rows.bin_us)),
            stop: self.stop,
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

    /// A wait in the client for a connection is the callers': an attempt
    /// handed on at its intended time that waited for a connection is
    /// judged as one sent when it got it (as records from before
    /// `client_wait_us` said), never as time in the gateway's queue.
    #[test]
    fn a_wait_in_the_client_is_judged_from_when_the_request_left_it() {
        let sent_late = stories::soak(2_000, 100, 1_500, 3);
        let mut waited = stories::soak(2_000, 100, 1_500, 3);
        for a in &mut waited.attempts {
            let wait = a.sent_us - a.intended_us;
            (a.sent_us, a.client_wait_us) = (a.intended_us, wait);
        }
        assert!(waited.attempts.iter().any(|a| a.client_wait_us > 0));
        assert_eq!(stream(&waited).0, stream(&sent_late).0);
    }

    /// Refusals by kind: a reason decides; without one the join does (the
    /// provider saw it: after dispatch; answered at once: at admission;
    /// later: at dequeue). Counted apart for the run, per second and per
    /// tenant, listed by class, status and reason, equal to the oracle's.
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
        let oracle = crate::oracle::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        assert_eq!(j.summary.counts, oracle.summary.counts);
        assert_eq!(j.summary.tenants, oracle.summary.tenants);
        assert_eq!(j.summary.refusals, oracle.summary.refusals);
    }

    /// Error answers by the join, whatever their status (issue 42, item 9):
    /// one no call reached the provider for is the gateway's own refusal
    /// (a 408 at once: at admission; a 500 after a 2 s hold: after
    /// waiting); one whose call failed at the provider is its error
    /// relayed; one whose call the provider refused is that refusal
    /// relayed, by the latest call when the gateway retried; one whose call
    /// the gateway hung up on is its timeout. Equal to the oracle's.
    #[test]
    fn error_answers_are_classed_by_the_join_whatever_their_status() {
        use wire::RefusalClass as K;
        use wire::RetryAfterHeader::RetryAfterMs;
        let answer = |id: &str, sent: u64, done: u64, status: u16, ra: Option<u64>| {
            let mut a = attempt(id, 1, sent, done, ClientOutcome::refused(status, None), ra);
            a.status = Some(status);
            a.retry_after_header = ra.map(|_| RetryAfterMs);
            a
        };
        let refused = |id: &str, at: u64, ra_ms: u64| {
            let mut c = call(id, at, at, at + 5);
            (c.status, c.outcome, c.completion_tokens) = (429, ProviderOutcome::QuotaExceeded, 0);
            (c.retry_after_ms, c.retry_after_s) = (Some(ra_ms), Some(ra_ms.div_ceil(1000)));
            c
        };
        let mut failed = call("c", 30, 30, 40);
        (failed.status, failed.outcome) = (500, ProviderOutcome::ErrorStatus);
        let mut hung_up = call("g", 600, 600, 1_600);
        hung_up.hung_up_us = Some(at(1_600));
        let s = Story {
            attempts: vec![
                answer("a", 0, 1, 408, None),
                answer("b", 10, 2_010, 500, None),
                answer("c", 20, 50, 502, None),
                answer("d", 300, 320, 429, Some(1_500)),
                answer("e", 400, 420, 429, None),
                answer("f", 500, 720, 429, Some(500)),
                answer("g", 590, 1_610, 502, None),
                answer("h", 800, 900, 500, None),
            ],
            calls: vec![
                failed,
                refused("d", 305, 1_500),
                refused("e", 405, 1_500),
                // Retried: the provider's latest word is what was relayed.
                refused("f", 505, 3_000),
                refused("f", 700, 500),
                hung_up,
                call("h", 805, 805, 850),
            ],
            rss: Vec::new(),
            expect: stories::expect(None, 3_000, 5.0),
        };
        let (j, _) = stream(&s);
        let c = j.summary.counts;
        assert_eq!(
            (
                c.shed,
                c.stale,
                c.upstream_refused,
                c.gateway_timeout,
                c.error
            ),
            (1, 1, 3, 1, 2),
            "{c:?}"
        );
        let lines: Vec<(K, u16, u64)> = j
            .summary
            .refusals
            .iter()
            .map(|l| (l.class, l.status, l.count))
            .collect();
        assert_eq!(
            lines,
            [
                (K::AtAdmission, 408, 1),
                (K::AtDequeue, 500, 1),
                (K::AfterDispatch, 429, 3),
                (K::AfterDispatch, 502, 1)
            ]
        );
        let rows = |f: fn(&Second) -> u64| j.timeline.seconds.iter().map(f).sum::<u64>();
        assert_eq!((rows(|r| r.shed), rows(|r| r.stale)), (1, 1));
        assert_eq!(rows(|r| r.errors), 2);
        // Both the gateway's own refusals are sheds (without a
        // Retry-After); of the three relayed, two kept the provider's.
        let ra = j.verdict("retry_after").unwrap();
        assert!(
            ra.observed.starts_with("2 sheds, 2 without Retry-After"),
            "{}",
            ra.observed
        );
        assert!(
            ra.observed.ends_with("3 provider refusals relayed: 2 kept the provider's Retry-After, 1 stripped it, 0 shortened it, 0 had none of the provider's to keep"),
            "{}",
            ra.observed
        );
        let stale = j.verdict("stale_share").unwrap();
        assert_eq!(
            stale.short,
            "1 of 2 refusals after waiting, 50% (bound 10%)"
        );
        let oracle = crate::oracle::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        assert_eq!(j.summary.counts, oracle.summary.counts);
        assert_eq!(j.summary.refusals, oracle.summary.refusals);
        assert_eq!(ra, oracle.verdict("retry_after").unwrap());
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
        let oracle = crate::oracle::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.summary.counts.late, plain.summary.counts.late + 1);
        assert_eq!(j.summary.counts, oracle.summary.counts);
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
        let oracle = crate::oracle::judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.pass.settled_before_dispatch, 1);
        assert_eq!(j.summary.provider, oracle.summary.provider);
        assert_eq!(j.summary.counts, oracle.summary.counts);
        assert_eq!(
            j.summary.latency_ms.queue_wait,
            oracle.summary.latency_ms.queue_wait
        );
        // Its 300 s in the gateway are not in the depth: the one
        // difference, and the harness notes it.
        let row = |j: &Judgement, ms: u64| j.timeline.seconds[(ms / 1000) as usize].gateway_depth;
        assert_eq!(row(&oracle, 150_000), row(&j, 150_000) + 1);
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
        // Without deaths, nothing is lost; the oracle agrees on the peak.
        let (j, _) = stream(&s);
        let oracle = crate::oracle::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        assert_eq!((j.summary.gateway.crashes, j.summary.gateway.lost), (0, 0));
        assert_eq!(j.summary.gateway, oracle.summary.gateway);
    }

    /// The byte figures of the module docs, as this build lays them out.
    #[test]
    fn what_each_entry_costs_is_what_the_module_docs_say() {
        use std::mem::size_of;
        // A record waiting to be released: its slot and its key.
        assert_eq!(size_of::<Option<(u64, Record)>>(), 112);
        assert_eq!(size_of::<(Release, usize)>(), 32);
        // An attempt in its person's list, which has room for four from
        // the first on; its entries in the two queues of unsettled ones.
        assert_eq!(size_of::<Attempt>(), 96);
        assert_eq!(size_of::<Call>(), 96);
        let first = Attempt {
            seq: 0,
            attempt: 1,
            outcome: ClientOutcome::Ok,
            settled: false,
            matched: false,
            late: false,
            retry_after_fine: false,
            cut_pending: false,
            intended_us: 0,
            sent_us: 0,
            done_us: 0,
            retry_after_ms: None,
            patience_ms: 0,
            status: None,
            reason: None,
            tenant: None,
            received: None,
            latest: None,
            counted: None,
        };
        // As `release_attempt` makes a person and pushes their first.
        let mut person = people::Person::default();
        person.attempts.push(first);
        assert_eq!(person.attempts.capacity(), 4);
        assert_eq!(size_of::<AttemptAt>(), 24);
        // A person in the table with its key, and in the queue of people
        // by when they are done.
        assert_eq!(size_of::<(u64, people::Person)>(), 40);
        assert_eq!(size_of::<DoneAt>(), 16);
        // A compact entry with its key: two times and two flags.
        assert_eq!(size_of::<(u64, Compact)>(), 32);
        // A row of the timeline.
        assert_eq!(size_of::<Second>(), 296);
    }
}
