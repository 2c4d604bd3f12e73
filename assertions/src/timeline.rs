//! Derived measurements: what the two sides' records joined by request id
//! mean, the per-second [`Timeline`] and the run's [`Summary`]. They are
//! measured in one pass over the records by `judge` and `sweep` (which say
//! what that pass holds and when a record is too late for it).
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
//! - **gateway shed**: an attempt answered with an error status (any:
//!   429, 503, but also 408, 500, 502 ...) whose matched call (if any) was
//!   not received while the attempt was open: the provider never saw it,
//!   so the gateway refused it on its own (`wire::ClientOutcome::joined`);
//! - **relayed**: an error answer after a call was received for it, by
//!   how the latest such call ended: the provider's refusal (429, 503,
//!   529) relayed (`upstream_refused`), the provider's error relayed
//!   (`provider_error`), or the gateway's timeout;
//! - **stale dispatch**: a call admitted (or, never admitted, received)
//!   after the attempt it belongs to had ended; its prompt and completion
//!   tokens are wasted;
//! - **late answer**: a call with an answer (a status) that finished after
//!   its caller had left, with no hang-up from the gateway: an answer
//!   written into a closed socket.
//! - **calls per attempt**: the calls joined to the attempts sent in a
//!   second (every call of each, whatever provider received it), over
//!   those of them that reached a provider (one call or more, the
//!   `dispatched`): `timeline.csv`'s `provider_calls` over `dispatched`,
//!   each call counted in its attempt's second, not its own. A call
//!   joined to no attempt (its person answered and done before it came,
//!   or an id no attempt carries) is in no second.
//!
//! And from the client's records alone, with the gateway's deaths (the
//! `died` and `restarted` events the harness noted, given to the judge
//! before the records: [`crate::Judge::gateway_died`]):
//!
//! - **in flight at the gateway** at t: attempts with `sent ≤ t < done`,
//!   the `client_outstanding` column; its peak is the largest of that
//!   column, the most at any instant;
//! - **crashes**: the gateway's deaths;
//! - **lost**: an attempt inside the gateway when it died (sent by then,
//!   not done [`DEATH_MARGIN_US`] before) that ended without an answer (a
//!   timeout, a reset, a connect error, a malformed answer or an error
//!   status), or one sent while it was down (from its death to its
//!   restart, or to the end without one) that met a connect error or a
//!   reset. Each attempt counts once, whatever deaths it meets.
//!
//! Each second's percentiles are exact (its values sorted); the run's are
//! HDR histograms of 3 significant figures.
//!
//! # Seconds are scenario seconds
//!
//! A row of the [`Timeline`] is one second of *scenario* time, however the
//! run was compressed: at a time scale of 10 a row covers 100 ms of the
//! rehearsal (`1 s ÷ time_scale`, to the microsecond). So the noise a check
//! sees in a row (how many arrivals, how many waiting at most) is the same
//! at every time scale, and a row's counts are per scenario second. Values
//! in a row that are durations (latencies, Retry-After, the drain time) are
//! as measured, at the rehearsal's scale, like the thresholds they meet.
//!
//! # The drain rule
//!
//! `drain` reads one series: the backlog column, the most attempts waiting
//! (in the gateway or the provider's queue) at any instant of each scenario
//! second. Its *baseline* is the rows wholly before the overload (without
//! an overload window, before the load ended), their 99th percentile,
//! when there are at least [`BASELINE_SAMPLES`] of them; with fewer, the
//! plan's figure for the waiting the arrivals after the overload leave in
//! a healthy system ([`Expectations::drain_baseline`]: none when arrivals
//! stop, Erlang C's mean queue for Poisson arrivals, 0 for evenly spaced
//! ones). Without either (a run directory older than the plan's figure
//! whose scenario could not be planned again), or when the plan says the
//! arrivals after the overload saturate the servers (no steady state to
//! come back to), the drain is not judged. The *bound* is the baseline
//! plus a margin of max(1, 10% of Q*). The backlog's *rolling mean* at second `t` is the
//! mean of the [`DRAIN_WINDOW`] seconds centred on it (`t − 2` to `t + 2`;
//! seconds past the records' end count as 0 waiting, since no attempt is
//! open after the last record). The backlog is drained at the first second
//! `t`, from the second the overload ends in, such that the rolling mean
//! is within the bound at `t` and the [`DRAIN_CONFIRM`] seconds that
//! follow (30; or at every later second, when the records end sooner);
//! the drain time is from the overload's end to the start of `t` (0 if `t`
//! starts before it). So one noisy second can neither fail nor pass it,
//! and a backlog that drops at once reads 0 to 2 s. If the rolling mean at
//! the records' last second is over the bound the backlog never drained
//! (still waiting when the records end, or the records end before the
//! overload did). If no attempt stayed in the backlog for a scenario
//! second or more, nothing ever waited and there is nothing to drain.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::expect::Expectations;
use wire::{ClientOutcome, ClientRecord, HealthyWaiting, RefusalClass};

pub(crate) const US: u64 = 1_000_000;

/// The longest timeline built, in seconds (about 27 hours): a record with a
/// wild timestamp must not make the timeline exhaust memory.
pub(crate) const MAX_SECONDS: u64 = 100_000;

/// One row of the [`Timeline`]: what happened during one second of
/// scenario time (`1 s ÷ time_scale` of the rehearsal; see the module
/// docs).
///
/// Counts are of events in the second (so they are per scenario second);
/// levels (outstanding, in flight, depth, backlog) are the most seen at any
/// instant of the second; percentiles are of the events in the second,
/// `None` if there were none; durations are as measured in the rehearsal.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Second {
    /// Scenario seconds since the run started: the row covers `[t, t + 1)`.
    pub t: u64,
    /// First attempts due in this second.
    pub offered: u64,
    /// Attempts sent.
    pub sent: u64,
    /// Provider calls made for the attempts sent in this second: every
    /// call joined to one of them (each provider's, failovers and the
    /// gateway's own retries included), counted in the row of its
    /// attempt's send, not of its receipt, so that `provider_calls ÷
    /// dispatched` is what each of this second's attempts the gateway
    /// passed on cost the providers (a backlog dispatched into a quiet
    /// second does not read as retries).
    pub provider_calls: u64,
    /// Of the attempts sent in this second, those that reached a provider:
    /// at least one call joined to them.
    pub dispatched: u64,
    /// Attempts that ended with an answer.
    pub ok: u64,
    /// Attempts refused at admission (queue full, would miss its deadline).
    pub shed: u64,
    /// Attempts dropped at dequeue, after waiting past their budget.
    pub stale: u64,
    /// Attempts refused because their tenant was over its entitlement.
    pub tenant_limited: u64,
    /// The provider's refusals passed through by the gateway.
    pub upstream_refused: u64,
    /// Attempts the gateway gave up on after calling the provider (504).
    pub gateway_timeout: u64,
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
    /// The median Retry-After of the gateway's own sheds (at admission or
    /// after waiting, the provider never saw them) that ended in this
    /// second: the refusals `retry_after` judges.
    pub retry_after_ms: Option<u64>,
    /// The median Retry-After of the provider's refusals the gateway
    /// relayed (`upstream_refused`) that ended in this second.
    pub relayed_retry_after_ms: Option<u64>,
    /// The backlog drain time at the start of this second, in seconds of
    /// the rehearsal (as Retry-After is given).
    pub drain_s: f64,
}

/// The run scenario second by scenario second, from the run's start to its
/// last record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// When second 0 starts, in microseconds since the Unix epoch.
    pub start_us: u64,
    /// One row per scenario second.
    pub seconds: Vec<Second>,
    /// With several providers, each one's calls and refusals per second
    /// (as long as `seconds`); empty with one, whose timeline is as it
    /// always was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderSeconds>,
}

/// One provider's calls and refusals per scenario second (several
/// providers): the timeline's `calls_NAME` and `refusals_NAME` columns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderSeconds {
    /// The provider's name.
    pub name: String,
    /// Calls received in each second.
    pub calls: Vec<u64>,
    /// Of them, refusals (429, 503, 529).
    pub refusals: Vec<u64>,
}

impl Timeline {
    /// The timeline as CSV (`timeline.csv`): a header row and one row per
    /// second; an absent value is an empty field. With several providers,
    /// each one's `calls_NAME,refusals_NAME` follow, in the scenario's
    /// order.
    ///
    /// ```
    /// let mut t = assertions::Timeline { start_us: 0, seconds: Vec::new(), providers: Vec::new() };
    /// assert!(t.to_csv().starts_with("t,offered,sent,provider_calls,dispatched,ok,"));
    /// t.providers.push(assertions::ProviderSeconds { name: "primary".into(), calls: vec![], refusals: vec![] });
    /// assert!(t.to_csv().trim_end().ends_with(",drain_s,calls_primary,refusals_primary"));
    /// ```
    pub fn to_csv(&self) -> String {
        let csv = self.levels_csv();
        if self.providers.is_empty() {
            return csv;
        }
        let mut out = String::with_capacity(csv.len() * 2);
        for (k, line) in csv.lines().enumerate() {
            out.push_str(line);
            for p in &self.providers {
                if k == 0 {
                    out.push_str(&format!(",calls_{},refusals_{}", p.name, p.name));
                } else {
                    let at = |v: &[u64]| v.get(k - 1).copied().unwrap_or(0);
                    out.push_str(&format!(",{},{}", at(&p.calls), at(&p.refusals)));
                }
            }
            out.push('\n');
        }
        out
    }

    /// The timeline's own columns, as CSV.
    fn levels_csv(&self) -> String {
        // A writer given no row writes no header either: without seconds,
        // the header is the first line of an empty second's CSV.
        let empty = [Second::empty(0)];
        let rows = if self.seconds.is_empty() {
            &empty[..]
        } else {
            &self.seconds
        };
        let mut writer = csv::Writer::from_writer(Vec::new());
        for s in rows {
            // Into memory, of strings and integers: nothing can fail.
            writer
                .serialize(CsvRow::from(s))
                .expect("a row of strings and integers serializes");
        }
        let mut bytes = writer.into_inner().expect("a Vec takes every byte");
        if self.seconds.is_empty() {
            let header = bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
            bytes.truncate(header);
        }
        String::from_utf8(bytes).expect("digits, points and column names are ASCII")
    }
}

/// One line of `timeline.csv`: a [`Second`] with each field formatted as
/// the file writes it (milliseconds and the drain time to the microsecond,
/// three decimals; an absent value empty). Its fields, in order, are the
/// file's columns: their one list.
#[derive(Serialize)]
struct CsvRow {
    t: u64,
    offered: u64,
    sent: u64,
    provider_calls: u64,
    dispatched: u64,
    ok: u64,
    shed: u64,
    stale: u64,
    tenant_limited: u64,
    upstream_refused: u64,
    gateway_timeout: u64,
    timeout: u64,
    errors: u64,
    client_outstanding: u64,
    provider_in_flight: u64,
    provider_in_service: u64,
    gateway_depth: u64,
    backlog: u64,
    e2e_p50_ms: String,
    e2e_p99_ms: String,
    queue_wait_p50_ms: String,
    queue_wait_p99_ms: String,
    provider_p50_ms: String,
    provider_p99_ms: String,
    rss_bytes: String,
    retry_after_ms: String,
    relayed_retry_after_ms: String,
    drain_s: String,
}

impl From<&Second> for CsvRow {
    fn from(s: &Second) -> Self {
        let ms = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_default();
        let int = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
        CsvRow {
            t: s.t,
            offered: s.offered,
            sent: s.sent,
            provider_calls: s.provider_calls,
            dispatched: s.dispatched,
            ok: s.ok,
            shed: s.shed,
            stale: s.stale,
            tenant_limited: s.tenant_limited,
            upstream_refused: s.upstream_refused,
            gateway_timeout: s.gateway_timeout,
            timeout: s.timeout,
            errors: s.errors,
            client_outstanding: s.client_outstanding,
            provider_in_flight: s.provider_in_flight,
            provider_in_service: s.provider_in_service,
            gateway_depth: s.gateway_depth,
            backlog: s.backlog,
            e2e_p50_ms: ms(s.e2e_p50_ms),
            e2e_p99_ms: ms(s.e2e_p99_ms),
            queue_wait_p50_ms: ms(s.queue_wait_p50_ms),
            queue_wait_p99_ms: ms(s.queue_wait_p99_ms),
            provider_p50_ms: ms(s.provider_p50_ms),
            provider_p99_ms: ms(s.provider_p99_ms),
            rss_bytes: int(s.rss_bytes),
            retry_after_ms: int(s.retry_after_ms),
            relayed_retry_after_ms: int(s.relayed_retry_after_ms),
            drain_s: format!("{:.3}", s.drain_s),
        }
    }
}

/// The run in the numbers `report.json` shows, in its exact shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Attempts by how they ended.
    pub counts: Counts,
    /// The same for each tenant, in a run of several.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tenants: std::collections::BTreeMap<String, Counts>,
    /// Every refusal by class, status, reason (and tenant): what
    /// `refusals_legible` reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<RefusalLine>,
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
    /// Attempts refused at admission (queue full, would miss its
    /// deadline; without a reason: answered at once, the provider never
    /// saw it).
    pub shed: u64,
    /// Attempts dropped at dequeue (`wait_expired`; without a reason: they
    /// waited first, the provider never saw them).
    pub stale: u64,
    /// Attempts refused for their tenant's entitlement.
    pub tenant_limited: u64,
    /// The provider's refusals passed through (`upstream_refused`; without
    /// a reason: the provider saw it).
    pub upstream_refused: u64,
    /// The gateway gave up on the provider call (`upstream_timeout`, 504).
    pub gateway_timeout: u64,
    /// Attempts whose caller gave up.
    pub timeout: u64,
    /// Attempts that ended in another error.
    pub error: u64,
    /// Late answers: provider answers finished after their caller left,
    /// without the gateway hanging up.
    pub late: u64,
}

impl Counts {
    /// Counts an attempt that ended so (an error answer as the join
    /// classes it: [`ClientOutcome::joined`]).
    pub(crate) fn ended(&mut self, outcome: ClientOutcome) {
        *self.slot(outcome) += 1;
    }

    /// The counter an attempt that ended so adds to.
    fn slot(&mut self, outcome: ClientOutcome) -> &mut u64 {
        match outcome {
            ClientOutcome::Ok => &mut self.ok,
            ClientOutcome::Shed => &mut self.shed,
            ClientOutcome::Stale => &mut self.stale,
            ClientOutcome::TenantLimited => &mut self.tenant_limited,
            ClientOutcome::UpstreamRefused => &mut self.upstream_refused,
            ClientOutcome::GatewayTimeout => &mut self.gateway_timeout,
            ClientOutcome::Timeout => &mut self.timeout,
            _ => &mut self.error,
        }
    }

    /// Refusals of every kind.
    pub fn refused(&self) -> u64 {
        self.shed + self.stale + self.tenant_limited + self.upstream_refused + self.gateway_timeout
    }
}

impl Second {
    /// Second `t`, with nothing in it.
    pub(crate) fn empty(t: u64) -> Second {
        Second {
            t,
            ..Second::default()
        }
    }

    /// Counts an attempt that ended in this second, so.
    pub(crate) fn ended(&mut self, outcome: ClientOutcome) {
        // The same columns as the run's counts (`errors` here is `error`
        // there), counted by the one mapping.
        let mut c = Counts::default();
        c.ended(outcome);
        self.ok += c.ok;
        self.shed += c.shed;
        self.stale += c.stale;
        self.tenant_limited += c.tenant_limited;
        self.upstream_refused += c.upstream_refused;
        self.gateway_timeout += c.gateway_timeout;
        self.timeout += c.timeout;
        self.errors += c.error;
    }
}

/// One line of `refusals` in `report.json`: how many refusals of one class
/// answered with one status and reason (`reason` absent: none given).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RefusalLine {
    /// When it was refused, as the harness classes it from the records.
    pub class: RefusalClass,
    /// The HTTP status.
    pub status: u16,
    /// The gateway's reason, header or body code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tenant, in a run of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// How many.
    pub count: u64,
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
    /// Calls in service when their caller gave up (its patience ran out:
    /// received before it left, not yet ended) that the gateway had to
    /// stop: not ended by themselves within `cancel_on_hangup.within` of
    /// the caller leaving. A call queued at the provider then is one, and
    /// stale too if admitted later.
    pub running_at_hangup: u64,
    /// Those of them the gateway hung up on within
    /// `cancel_on_hangup.within` of the caller leaving.
    pub cancelled_at_hangup: u64,
    /// Completion tokens the calls in service when their caller gave up
    /// made after the caller left: an estimate, each call's tokens times
    /// the share of its generation time (a stream's first byte, else its
    /// admission, to its end) that came after the caller left.
    pub tokens_after_hangup: u64,
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

/// `gateway` in `report.json`: its peaks, and its deaths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct GatewayPeaks {
    /// The most attempts waiting inside the gateway at once.
    pub peak_depth: u64,
    /// The most attempts waiting in the gateway or the provider's queue.
    pub peak_backlog: u64,
    /// The most attempts inside the gateway at once, as the client sees
    /// it: sent and not yet ended (waiting, or at the provider through
    /// it), at any instant.
    pub peak_in_flight: u64,
    /// The largest resident memory sampled; `None` without samples.
    pub peak_rss_bytes: Option<u64>,
    /// How many times the gateway died.
    pub crashes: u64,
    /// Attempts lost to its deaths: inside it when it died and ended
    /// without an answer, or sent while it was down and refused a
    /// connection or reset (see the module docs).
    pub lost: u64,
}

/// How long before a death an attempt may have ended and still count as
/// inside the gateway then: the death is noticed up to 50 ms after it
/// happens (the harness polls), and a reset reaches the client a little
/// before that.
pub(crate) const DEATH_MARGIN_US: u64 = 100_000;

/// Returns true if and only if attempt `a` was inside the gateway when it
/// died at `died_us`: sent by then, and not ended [`DEATH_MARGIN_US`]
/// before. The one rule for `lost` here and for the harness's note about a
/// death.
pub fn inside_at_death(a: &ClientRecord, died_us: u64) -> bool {
    a.sent_us <= died_us && a.done_us >= died_us.saturating_sub(DEATH_MARGIN_US)
}

/// The gateway's deaths during a run: when it died and when it served
/// again (`None`: never), in microseconds since the Unix epoch. A handful
/// per run, whatever its length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Deaths(pub(crate) Vec<(u64, Option<u64>)>);

impl Deaths {
    /// Returns true if and only if `a` was lost to one of the deaths (see
    /// the module docs).
    pub(crate) fn lost(&self, a: &ClientRecord) -> bool {
        self.0.iter().any(|&(died, back)| {
            let inside =
                inside_at_death(a, died) && (a.outcome.is_silent_loss() || a.outcome.is_error());
            let while_down = died <= a.sent_us
                && back.is_none_or(|b| a.sent_us < b)
                && matches!(
                    a.outcome,
                    ClientOutcome::ConnectError | ClientOutcome::Reset
                );
            inside || while_down
        })
    }

    /// How many deaths.
    pub(crate) fn count(&self) -> u64 {
        self.0.len() as u64
    }
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

/// The drain rule's window: the backlog's rolling mean is taken over this
/// many rows, that is scenario seconds.
pub(crate) const DRAIN_WINDOW: usize = 5;

/// The rows (scenario seconds) the rolling mean must stay within the bound
/// for the backlog to count as drained: a later excursion (a cluster of
/// Poisson arrivals minutes after the overload, with as many samples after
/// it as the baseline had before) is the steady state's noise, not the
/// drain.
pub(crate) const DRAIN_CONFIRM: usize = 30;

/// The rows (scenario seconds) of baseline the drain rule needs.
pub(crate) const BASELINE_SAMPLES: usize = 10;

/// How the backlog came back after the overload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DrainOutcome {
    /// No attempts: nothing to measure.
    NoData,
    /// No attempt stayed in the backlog for a scenario second or more: the
    /// longest stayed `longest_s` (seconds of the rehearsal).
    NothingWaited { longest_s: f64 },
    /// The baseline has fewer than [`BASELINE_SAMPLES`] rows, and the
    /// expectations carry no plan figure to stand in for it.
    ShortBaseline { samples: usize },
    /// The baseline has fewer than [`BASELINE_SAMPLES`] rows, and the plan
    /// says the arrivals after the overload are more than its servers
    /// serve: no steady state to come back to.
    Saturated {
        /// The plan's figure.
        plan: HealthyWaiting,
        /// Rows of baseline the run had.
        samples: usize,
    },
    /// The records end `short_s` before the overload (or the load) does,
    /// with the backlog's last rolling mean over the bound.
    EndedEarly { short_s: f64 },
    /// The backlog's last rolling mean, `mean`, is over the bound when the
    /// records end, `after_s` after the overload.
    StillWaiting { mean: f64, after_s: f64 },
    /// Back within the bound `drain_s` after the overload and stayed there.
    Drained { drain_s: f64 },
}

/// What the drain is measured against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Baseline {
    /// The run's own: the 99th percentile `p99` of its `samples` rows
    /// wholly before the overload.
    Measured { samples: usize, p99: u64 },
    /// The plan's: the waiting after the overload in a healthy system,
    /// with the run's `samples` rows before it (too few).
    Planned {
        plan: HealthyWaiting,
        samples: usize,
    },
}

impl Baseline {
    /// Its level, in requests waiting.
    pub(crate) fn level(&self) -> f64 {
        match self {
            Baseline::Measured { p99, .. } => *p99 as f64,
            Baseline::Planned { plan, .. } => plan.waiting().unwrap_or(0.0),
        }
    }
}

/// The drain measurement: its baseline, bound and outcome (the rule is in
/// the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Drain {
    /// What it was measured against; `None` when not judged for want of
    /// one.
    pub(crate) baseline: Option<Baseline>,
    /// max(1, 10% of Q*).
    pub(crate) margin: f64,
    /// The most waiting in the rows from the overload's end on.
    pub(crate) peak_after: u64,
    pub(crate) outcome: DrainOutcome,
}

impl Drain {
    /// The bound the backlog's rolling mean must come back within.
    pub(crate) fn bound(&self) -> f64 {
        self.baseline.map_or(0.0, |b| b.level()) + self.margin
    }

    /// Measures the drain from the timeline's backlog column (`backlog`,
    /// rows of `bin_us` from `expect.start_us`), for a run of `attempts`
    /// attempts whose records end at `end_us` and whose longest stay in
    /// the backlog was `longest_stay_us`.
    pub(crate) fn measure(
        expect: &Expectations,
        backlog: &[u64],
        bin_us: u64,
        end_us: u64,
        attempts: u64,
        longest_stay_us: u64,
    ) -> Drain {
        let (pre_end, from) = drain_window(expect);
        let row_of = |t: u64| (t.saturating_sub(expect.start_us) / bin_us.max(1)) as usize;
        let mut before: Vec<u64> = backlog.iter().take(row_of(pre_end)).copied().collect();
        before.sort_unstable();
        let samples = before.len();
        let q = expect.queue_bound;
        let plan = expect.drain_baseline;
        let baseline = if samples >= BASELINE_SAMPLES {
            Some(Baseline::Measured {
                samples,
                p99: quantile(&before, 0.99).unwrap_or(0),
            })
        } else {
            plan.filter(|p| p.waiting().is_some())
                .map(|plan| Baseline::Planned { plan, samples })
        };
        let mut drain = Drain {
            baseline,
            margin: if q.is_finite() {
                (0.1 * q).max(1.0)
            } else {
                1.0
            },
            peak_after: 0,
            outcome: DrainOutcome::NoData,
        };
        let n = backlog.len();
        let k_from = row_of(from).min(n.saturating_sub(1));
        drain.peak_after = backlog.iter().skip(k_from).copied().max().unwrap_or(0);
        let secs = |us: u64| us as f64 / US as f64;
        drain.outcome = if attempts == 0 || n == 0 {
            DrainOutcome::NoData
        } else if longest_stay_us < bin_us {
            DrainOutcome::NothingWaited {
                longest_s: secs(longest_stay_us),
            }
        } else if drain.baseline.is_none() {
            match plan {
                Some(plan) => DrainOutcome::Saturated { plan, samples },
                None => DrainOutcome::ShortBaseline { samples },
            }
        } else {
            // The rolling mean centred on row c: rows c − h ..= c + h, those
            // past the records' end counting as 0 (no attempt is open after
            // the last record), those before the run's start left out.
            let h = DRAIN_WINDOW / 2;
            let mut sums = vec![0u64; n + 1];
            for (k, &b) in backlog.iter().enumerate() {
                sums[k + 1] = sums[k] + b;
            }
            let mean = |c: usize| {
                let (lo, hi) = (c.saturating_sub(h), (c + h + 1).min(n));
                (sums[hi] - sums[lo]) as f64 / (c + h + 1 - lo) as f64
            };
            let bound = drain.bound();
            let within = |c: usize| mean(c) <= bound;
            let last = n - 1;
            if !within(last) {
                if end_us < from {
                    DrainOutcome::EndedEarly {
                        short_s: secs(from - end_us),
                    }
                } else {
                    DrainOutcome::StillWaiting {
                        mean: mean(last),
                        after_s: secs(end_us - from),
                    }
                }
            } else {
                // From the row the overload ends in (the last row if the
                // records end before it), the first row that starts
                // DRAIN_CONFIRM rows all within the bound (or a run of
                // rows within it to the records' end): the last row is
                // within, so there is one.
                let first = k_from.min(last);
                let mut streak: Option<usize> = None;
                let mut k0 = last;
                for c in first..n {
                    if !within(c) {
                        streak = None;
                        continue;
                    }
                    let s = *streak.get_or_insert(c);
                    if c + 1 - s >= DRAIN_CONFIRM || c == last {
                        k0 = s;
                        break;
                    }
                }
                let at = expect.start_us.saturating_add(k0 as u64 * bin_us);
                DrainOutcome::Drained {
                    drain_s: secs(at.saturating_sub(from)),
                }
            }
        };
        drain
    }
}

/// The end of the drain's baseline and the instant the drain is measured
/// from: the overload's start and end, or without an overload window the
/// load's end for both.
pub(crate) fn drain_window(expect: &Expectations) -> (u64, u64) {
    match expect.overload {
        Some((a, b)) => (a, b),
        None => (expect.load_end_us, expect.load_end_us),
    }
}

/// The length of a timeline row in microseconds of the rehearsal: one
/// scenario second at `time_scale` (1 s for a scale that is not a positive
/// finite number, at least 1 µs).
pub(crate) fn row_us(time_scale: f64) -> u64 {
    if time_scale.is_finite() && time_scale > 0.0 {
        ((US as f64 / time_scale).round() as u64).max(1)
    } else {
        US
    }
}

/// The nearest-rank quantile of a sorted slice.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median and 99th percentile, in milliseconds, of microsecond values
/// (sorted in place: one second's worth).
pub(crate) fn ms_percentiles(values: &mut [u64]) -> (Option<f64>, Option<f64>) {
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
/// The median and 99th percentile, in milliseconds, of a histogram of
/// microsecond values; `None` for an empty one.
pub(crate) fn percentiles(h: &Histogram<u64>) -> Percentiles {
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
    use crate::expect::Thresholds;
    use crate::stories::{self, at, attempt, call, T0};
    use wire::{ClientOutcome, ProviderRecord, RssSample};

    /// A backlog that drops at the overload's end, then a Poisson-like
    /// excursion minutes later: drained at once, not after the excursion;
    /// a dip that does not last is not a drain.
    #[test]
    fn a_drain_must_hold_for_its_confirmation_window_and_no_longer() {
        // Rows of 1 s; baseline rows 0..20 at 1-2, overload 20..40.
        let mut e = stories::expect(Some((20_000, 40_000)), 200_000, 5.0);
        e.queue_bound = 5.0; // margin 1: bound = p99 2 + 1 = 3
        let mut backlog: Vec<u64> = (0..20).map(|k| 1 + k % 2).collect();
        backlog.extend(std::iter::repeat_n(40, 20));
        backlog.extend(std::iter::repeat_n(1, 100));
        // A cluster 60 s after the overload.
        for b in &mut backlog[100..106] {
            *b = 6;
        }
        let d = Drain::measure(&e, &backlog, US, at(160_000), 1_000, 2 * US);
        assert_eq!(d.bound(), 3.0);
        match d.outcome {
            DrainOutcome::Drained { drain_s } => assert!(drain_s <= 2.0, "{drain_s}"),
            o => panic!("{o:?}"),
        }
        // Within for 10 s, back up for 20 s, then down for good: drained
        // at the second fall.
        let mut b2: Vec<u64> = (0..20).map(|k| 1 + k % 2).collect();
        b2.extend(std::iter::repeat_n(40, 20));
        b2.extend(std::iter::repeat_n(1, 10));
        b2.extend(std::iter::repeat_n(30, 20));
        b2.extend(std::iter::repeat_n(1, 60));
        let d = Drain::measure(&e, &b2, US, at(130_000), 1_000, 2 * US);
        match d.outcome {
            DrainOutcome::Drained { drain_s } => {
                assert!((30.0..=34.0).contains(&drain_s), "{drain_s}")
            }
            o => panic!("{o:?}"),
        }
    }

    /// A column of the timeline, row by row.
    fn column(t: &Timeline, f: fn(&Second) -> u64) -> Vec<u64> {
        t.seconds.iter().map(f).collect()
    }

    /// Rows `from..to` (of `1 s ÷ time_scale`) of a column.
    fn rows(t: &Timeline, f: fn(&Second) -> u64, from: usize, to: usize) -> Vec<u64> {
        column(t, f)[from..to].to_vec()
    }

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
            // During a's first attempt: its matched call. The provider saw
            // it, so that shed was the provider's, not the gateway's.
            call("a", 1_100, 1_100, 1_200),
            // Between the attempts: still the first attempt's, and stale.
            call("a", 1_800, 1_800, 1_900),
            // The retry's.
            call("a", 2_100, 2_200, 3_900),
            // Received after b gave up: stale, and a late answer.
            call("b", 1_300, 1_300, 2_300),
            call("nobody", 1_000, 1_000, 2_000),
        ];
        // Rows of 100 ms.
        let j = stories::judged(&attempts, &calls, &[], 10.0);
        let s = &j.summary;
        assert_eq!((s.counts.offered, s.counts.sent), (2, 3));
        // a's first attempt was refused after its call: not a gateway shed.
        assert_eq!((s.counts.shed, s.counts.upstream_refused), (0, 1));
        assert_eq!(j.first_shed, None);
        assert_eq!(s.provider.calls, 6);
        assert_eq!(s.provider.stale_dispatch, 2);
        assert_eq!(s.provider.wasted_tokens, 300);
        // One late answer each to a's first attempt and to b.
        assert_eq!(s.counts.late, 2);
        // Matched: a's first at 1.1 s, b's at 1.3 s, the retry's at 2.1 s.
        let t = &j.timeline;
        assert_eq!(t.seconds[11].queue_wait_p50_ms, Some(100.0));
        assert_eq!(t.seconds[13].queue_wait_p50_ms, Some(300.0));
        assert_eq!(t.seconds[21].queue_wait_p50_ms, Some(100.0));
        // b left the gateway when its call was received, after it gave up
        // at 1.2 s; but the backlog when it gave up. a's first attempt left
        // both at 1.1 s, the retry the gateway at 2.1 s and the provider's
        // queue at 2.2 s.
        assert_eq!(rows(t, |s| s.gateway_depth, 10, 14), [2, 1, 1, 0]);
        assert_eq!(rows(t, |s| s.backlog, 10, 13), [2, 1, 0]);
        assert_eq!(rows(t, |s| s.gateway_depth, 20, 22), [1, 0]);
        assert_eq!(rows(t, |s| s.backlog, 20, 23), [1, 1, 0]);
        assert_eq!(t.seconds[10].drain_s, 0.3);
        // a was served 3 s after its first attempt was due.
        let e2e = s.latency_ms.e2e.p50.unwrap();
        assert!((3_000.0..3_003.0).contains(&e2e), "{e2e}");
    }

    #[test]
    fn a_shed_the_provider_never_saw_is_the_gateways() {
        let attempts = vec![
            attempt("a", 1, 0, 10, ClientOutcome::Ok, None),
            attempt("b", 1, 100, 101, ClientOutcome::Shed, Some(900)),
        ];
        let calls = vec![call("a", 1, 1, 9), call("b", 500, 500, 600)];
        let j = stories::judged(&attempts, &calls, &[], 1.0);
        // b's call came after b was shed: a shed by the gateway (the first,
        // with nobody else waiting then), then a stale dispatch.
        assert_eq!(j.summary.counts.shed, 1);
        assert_eq!(
            j.first_shed,
            Some(FirstShed {
                at_us: at(100),
                depth: 0,
                backlog: 0
            })
        );
        assert_eq!(j.summary.provider.stale_dispatch, 1);
        assert_eq!(j.summary.counts.ok, 1);
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
                rss_anon_bytes: None,
            },
            RssSample {
                t_us: at(900),
                rss_bytes: 30,
                rss_anon_bytes: None,
            },
            RssSample {
                t_us: at(1_500),
                rss_bytes: 20,
                rss_anon_bytes: None,
            },
        ];
        let t = stories::timeline(&attempts, &calls, &rss);
        assert_eq!(t.seconds.len(), 4);
        assert_eq!(column(&t, |s| s.offered), [3, 0, 0, 0]);
        assert_eq!(column(&t, |s| s.ok), [0, 1, 1, 1]);
        assert_eq!(column(&t, |s| s.gateway_depth), [2, 1, 0, 0]);
        assert_eq!(column(&t, |s| s.backlog), [2, 1, 0, 0]);
        assert_eq!(column(&t, |s| s.client_outstanding), [3, 2, 1, 0]);
        assert_eq!(column(&t, |s| s.provider_in_flight), [1, 1, 1, 0]);
        assert_eq!(column(&t, |s| s.provider_in_service), [1, 1, 1, 0]);
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
        // In rows of 50 ms: at 0.15 s b is inside until 1 s; at 0.25 s c
        // is too, until 2 s; at 2.5 s nobody is.
        let fine = stories::judged(&attempts, &calls, &rss, 20.0).timeline;
        assert_eq!(fine.seconds[3].drain_s, 0.85);
        assert_eq!(fine.seconds[5].drain_s, 1.75);
        assert_eq!(fine.seconds[50].drain_s, 0.0);
    }

    /// Each attempt's matched call by the join's definition, brute force:
    /// the first call of its id received no earlier than its send and
    /// before its person's next attempt was sent.
    fn matched<'a>(
        attempts: &[ClientRecord],
        calls: &'a [ProviderRecord],
    ) -> Vec<Option<&'a ProviderRecord>> {
        attempts
            .iter()
            .map(|a| {
                let next = attempts
                    .iter()
                    .filter(|n| n.id == a.id && (n.sent_us, n.attempt) > (a.sent_us, a.attempt))
                    .map(|n| n.sent_us)
                    .min()
                    .unwrap_or(u64::MAX);
                calls
                    .iter()
                    .filter(|c| c.id == a.id && a.sent_us <= c.received_us && c.received_us < next)
                    .min_by_key(|c| c.received_us)
            })
            .collect()
    }

    #[test]
    fn per_second_levels_match_a_brute_force_count() {
        let s = stories::naive();
        let j = crate::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        // Every call came in time to count in the depth.
        assert_eq!(j.pass.settled_before_dispatch, 0);
        let t = &j.timeline;
        let n = t.seconds.len();
        let second_of = |p: u64| (((p - T0) / US) as usize).min(n - 1);
        // The most open intervals at any instant of each second: it is
        // enough to look at each second's start and each interval's start.
        let brute = |iv: &[(u64, u64)]| {
            let mut max = vec![0u64; n];
            let starts = iv
                .iter()
                .map(|&(a, _)| a)
                .chain((0..n as u64).map(|s| T0 + s * US));
            for p in starts {
                let open = iv.iter().filter(|&&(a, b)| a <= p && p < b).count() as u64;
                let s = second_of(p);
                max[s] = max[s].max(open);
            }
            max
        };
        let m = matched(&s.attempts, &s.calls);
        let depth: Vec<_> = s
            .attempts
            .iter()
            .zip(&m)
            .map(|(a, c)| (a.sent_us, c.map_or(a.done_us, |c| c.received_us)))
            .collect();
        let backlog: Vec<_> = s
            .attempts
            .iter()
            .zip(&m)
            .map(|(a, c)| {
                let left = c.and_then(|c| c.admitted_us.or(c.finished_us));
                (a.sent_us, left.unwrap_or(a.done_us).min(a.done_us))
            })
            .collect();
        let service: Vec<_> = s
            .calls
            .iter()
            .map(|c| (c.admitted_us.unwrap(), c.finished_us.unwrap()))
            .collect();
        assert_eq!(brute(&backlog), column(t, |s| s.backlog));
        assert_eq!(brute(&depth), column(t, |s| s.gateway_depth));
        assert_eq!(brute(&service), column(t, |s| s.provider_in_service));
        assert_eq!(column(t, |s| s.backlog).iter().max(), Some(&320));
        // A naive gateway in front of a queueing provider: small depth,
        // huge backlog.
        assert_eq!(column(t, |s| s.gateway_depth).iter().max(), Some(&1));
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_second() {
        let (attempts, calls) = one_slot();
        let csv = stories::timeline(&attempts, &calls, &[]).to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|l| l.split(',').count() == 28));
        assert!(lines[0].starts_with("t,offered,sent,provider_calls,dispatched,ok,"));
        assert!(lines[0].ends_with("rss_bytes,retry_after_ms,relayed_retry_after_ms,drain_s"));
        // The three calls, received at 0, 1 and 2 s, are counted in the
        // second their attempts were sent.
        assert!(
            lines[1].starts_with("0,3,3,3,3,0,0,0,0,0,0,0,0,3,1,1,2,2,,,"),
            "{}",
            lines[1]
        );
        // Three decimals, empty when absent, one line per second.
        assert_eq!(
            lines[2],
            "1,0,0,0,0,1,0,0,0,0,0,0,0,2,1,1,1,1,1000.000,1000.000,900.000,900.000,1000.000,1000.000,,,,1.000"
        );
        // Without a second, the header alone.
        let empty = Timeline {
            start_us: T0,
            seconds: Vec::new(),
            providers: Vec::new(),
        };
        assert_eq!(empty.to_csv(), format!("{}\n", lines[0]));
    }

    #[test]
    fn summary_serializes_in_the_report_shape() {
        let (attempts, calls) = one_slot();
        let j = stories::judged(&attempts, &calls, &[], 1.0);
        let v = serde_json::to_value(&j.summary).unwrap();
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
            [
                "error",
                "gateway_timeout",
                "late",
                "offered",
                "ok",
                "sent",
                "shed",
                "stale",
                "tenant_limited",
                "timeout",
                "upstream_refused"
            ]
        );
        assert_eq!(
            keys(&v["provider"]),
            [
                "calls",
                "cancelled_at_hangup",
                "running_at_hangup",
                "stale_dispatch",
                "tokens_after_hangup",
                "wasted_tokens"
            ]
        );
        assert_eq!(keys(&v["latency_ms"]), ["e2e", "provider", "queue_wait"]);
        assert_eq!(keys(&v["latency_ms"]["e2e"]), ["p50", "p99"]);
        assert_eq!(
            keys(&v["gateway"]),
            [
                "crashes",
                "lost",
                "peak_backlog",
                "peak_depth",
                "peak_in_flight",
                "peak_rss_bytes"
            ]
        );
        assert_eq!(keys(&v["harness"]), ["send_lag_p99_ms", "valid"]);
        assert_eq!(v["gateway"]["peak_depth"], 2);
        assert_eq!(v["gateway"]["peak_in_flight"], 3);
        let p99 = v["latency_ms"]["queue_wait"]["p99"].as_f64().unwrap();
        assert!((1_800.0..1_801.0).contains(&p99), "{p99}");
    }
}
