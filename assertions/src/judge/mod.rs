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
//!
//! Its methods are kept by clock: `release` (records fed, held and
//! released in start order), `settle` (an attempt settled and joined to
//! its call, its delivery and its hang-up judged) and `sweep` (time
//! passed: seconds' percentiles, people done, their attempts classed);
//! what a caller feeds and how the pass finishes stay here.

mod people;
mod records;
mod release;
mod settle;
mod sweep;
mod values;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use wire::{ClientOutcome, ClientRecord, ProviderRecord, RefusalClass, RssSample};

use crate::covered::{covered, Stop};
use crate::expect::{Expectations, Thresholds};
use crate::external::External;
use crate::judgement::{conclude, Distribution, Judgement, Measured, Pass};
use crate::routing::{self, Routing, TroubleWindow};
use crate::sweep::{Given, Rows, Sweep};
use crate::tally::Tally;
use crate::timeline::{
    histogram, percentiles, row_us, Counts, Deaths, Drain, GatewayPeaks, Harness, Latencies,
    ProviderCounts, RefusalLine, Second, Summary, Timeline, MAX_SECONDS, US,
};
use people::People;
use records::{Attempt, Names, Pending};
use values::Values;

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
    use people::{AttemptAt, Compact, DoneAt};
    use records::{Call, Record, Release};
    use std::collections::HashMap;
    use wire::ProviderOutcome;

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
