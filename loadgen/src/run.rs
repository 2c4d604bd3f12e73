//! The run: one dispatcher that keeps the schedule, one task per person,
//! one writer thread for records and aggregates.
//!
//! The dispatcher (a task, woken by a timerfd) sleeps until each
//! arrival's fixed deadline
//! (`start + offset`, never "now + gap", so lateness does not accumulate)
//! and spawns the person; it never waits for a connection, a worker or an
//! answer. Each person task makes its attempts within its patience, hangs up
//! (drops the connection) when patience runs out, and sends one record per
//! attempt to the writer.
//!
//! Its rooms: `target`, where the load goes and the probes that check it;
//! `options`, how a run is asked and why one could not be made;
//! `attempt`, one attempt of a person, from its request to its record;
//! `alarm`, the timerfd the dispatcher sleeps on; `bound`, the
//! callers' and the generator's own bounds on open connections;
//! `gave_out`, what an invalid run ran out of; `writer`, the record
//! writer's thread and the run's aggregates; `line`, a record as a line of
//! `client.jsonl`, written field by field.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, warn, Instrument};
use wire::headers::ANTHROPIC_VERSION;
use wire::{files, ClientOutcome, ClientRecord, Clock, Dialect};

use crate::config::LoadPlan;
use crate::config::RequestShape;
use crate::http1::Connector;
use crate::progress::Live;
use crate::request::head::{Head, DEFAULT_TENANT};
use crate::request::Drawn;
use crate::retry::{retryable, RetryBudget};
use crate::schedule::{Arrivals, Source};
use crate::stats::{RunReport, Stats};

mod alarm;
mod attempt;
mod bound;
mod gave_out;
mod line;
mod options;
mod target;
mod writer;

use alarm::Alarm;
use attempt::{attempt_once, PersonRequest};
use writer::spawn_writer;

use options::output_error;
pub use options::{LoadOptions, LoadRunError, OnStart, StopCondition};
use target::handshake_probe;
pub use target::{probe, probe_tls, Target, TargetError};

/// What every person task shares.
struct Shared {
    plan: Arc<LoadPlan>,
    /// The arrivals this process plays.
    shard: crate::Shard,
    connector: Connector,
    /// The request heads: the plan's own, then one per tenant (their API
    /// keys, paths and headers differ).
    heads: Vec<Head>,
    clock: Clock,
    start: Instant,
    records: mpsc::UnboundedSender<ClientRecord>,
    live: Arc<Live>,
    budget: RetryBudget,
    cancel: CancellationToken,
    /// Cancelled `cancel_grace` after `cancel`: attempts still in flight
    /// then end as `cancelled`.
    hard_stop: CancellationToken,
    /// Whether the first connect error was logged.
    connect_warned: AtomicBool,
    /// The spending guard, when one is set.
    spend: Option<crate::SpendBudget>,
    /// The limit on open connections, phase by phase.
    bounds: Vec<bound::Step>,
    /// Attempts that waited in the client for a connection (at the bound,
    /// a busy pool, the connect rate), and those of them that got no
    /// connection within their patience.
    bound_waits: AtomicU64,
    not_sent: AtomicU64,
    /// Of the waits, those at the load generator's own bound.
    own_bound_waits: AtomicU64,
    /// Attempts not sent because the load generator came to them only
    /// after their person's patience had ended.
    not_sent_late: AtomicU64,
}

impl Shared {
    /// The spending guard: true if `drawn` may be sent; false (and the
    /// load stopped) when it would take the tokens sent past the budget.
    fn affordable(&self, drawn: &Drawn) -> bool {
        match &self.spend {
            Some(b) if !b.take(crate::spend::cost(drawn)) => {
                self.cancel.cancel();
                false
            }
            _ => true,
        }
    }
}

/// Runs `plan` against `target` until the schedule ends, `options.stop`
/// says so or `cancel` is cancelled, then waits for the people still
/// waiting (each at most their patience; no new retries after a cancel).
/// Records go to `client.jsonl` in `options.out_dir`, line by line as
/// attempts end; the report to `summary.json` and `load-seconds.csv`, the
/// histograms to `client.hlog`, each written whole at the end
/// ([`wire::files::write_atomic`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use loadgen::{LoadOptions, LoadPlan, Target};
/// let plan = LoadPlan::from_scenario_str(
///     "[load]\n[[load.phases]]\nduration = \"2s\"\nrate = 50\n",
///     "inline.toml",
///     std::path::Path::new("."),
/// )?;
/// let target = Target::parse("http://127.0.0.1:8080")?;
/// let report = loadgen::run(
///     &plan,
///     &target,
///     &LoadOptions::new("out"),
///     tokio_util::sync::CancellationToken::new(),
/// )
/// .await?;
/// println!("{}", report.table());
/// # Ok(()) }
/// ```
pub async fn run(
    plan: &LoadPlan,
    target: &Target,
    options: &LoadOptions,
    cancel: CancellationToken,
) -> Result<RunReport, LoadRunError> {
    let tls_config = options.tls.client_config()?;
    let addr = probe(target, options.probe_timeout).await?;
    let tls = target.tls_target(tls_config);
    if let Some(t) = &tls {
        handshake_probe(target, t, addr, options.probe_timeout).await?;
    }
    std::fs::create_dir_all(&options.out_dir).map_err(output_error(&options.out_dir))?;
    let records_path = options.out_dir.join(files::CLIENT_RECORDS);
    let file = match options.records {
        true => Some(std::fs::File::create(&records_path).map_err(output_error(&records_path))?),
        false => None,
    };

    let plan = Arc::new(plan.clone());
    let heads = heads(&plan, target, &options.provider_urls)?;

    let bounds = bound::steps(&plan, options.shard.count, bound::open_files(options));
    let connector = Connector::new(addr, bounds[0].limit, bounds[0].own())
        .with_connect_rate(plan.clients.connect_rate_per_s)
        .with_tls(tls);
    connector.prewarm(prewarm_count(&plan, options.shard)).await;

    let clock = Clock::new();
    let cpu_before = gave_out::cpu_time();
    // Start a little after now so the first arrivals are not late because
    // of the setup above; or at the agreed instant.
    let start = match options.start_at {
        None => Instant::now() + Duration::from_millis(20),
        Some(at) => match at.duration_since(clock.system_time(Instant::now())) {
            Ok(wait) => Instant::now() + wait,
            Err(late) => return Err(LoadRunError::StartPassed(late.duration())),
        },
    };
    if let Some(OnStart(told)) = &options.on_start {
        told(start);
    }
    let start_us = clock.us_at(start);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = spawn_writer(rx, file, records_path.clone(), Stats::new(start_us));
    let live = Live::starting(options.live.clone(), start_us);
    let progress = options
        .progress
        .then(|| crate::progress::spawn(live.clone(), start, plan.schedule_length()));

    // The grace after a cancellation: in-flight attempts get this long to
    // finish, then end as `cancelled` (one task for the run, so each person
    // future stays small).
    let hard_stop = CancellationToken::new();
    {
        let (cancel, hard_stop, grace) = (cancel.clone(), hard_stop.clone(), options.cancel_grace);
        tokio::spawn(async move {
            cancel.cancelled().await;
            tokio::time::sleep(grace).await;
            hard_stop.cancel();
        });
    }
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        shard: options.shard,
        connector,
        heads,
        clock,
        start,
        records: tx,
        live: live.clone(),
        budget: RetryBudget::default(),
        cancel: cancel.clone(),
        hard_stop: hard_stop.clone(),
        connect_warned: AtomicBool::new(false),
        spend: options.max_spend_tokens.map(crate::SpendBudget::new),
        bounds,
        bound_waits: AtomicU64::new(0),
        not_sent: AtomicU64::new(0),
        own_bound_waits: AtomicU64::new(0),
        not_sent_late: AtomicU64::new(0),
    });

    let tracker = TaskTracker::new();
    // The dispatcher is a task of the runtime (see `alarm`); it ends with
    // the schedule, the stop condition or the cancellation.
    let dispatcher = tokio::spawn(dispatch(
        shared.clone(),
        tracker.clone(),
        options.stop,
        cancel.clone(),
    ));
    if let Err(e) = dispatcher.await {
        // Only a panic in it, and then there is nothing more to dispatch.
        warn!(cause = %e, "the dispatcher stopped");
    }
    tracker.close();
    tracker.wait().await;
    let elapsed = start.elapsed();
    let spend = shared.spend.as_ref().map(crate::SpendBudget::summary);
    let connections_opened = shared.connector.opened();
    let (connection_bound, bound_notes) = bound_met(&shared);
    let met = gave_out::Met::measured(
        &shared.connector,
        cpu_before,
        elapsed,
        connection_bound.waited_at_own_bound,
    );
    drop(shared);
    if let Some(p) = progress {
        p.finish().await;
    }

    let stats = tokio::task::spawn_blocking(move || writer.join())
        .await
        .expect("the join task does not panic")
        .expect("the writer thread does not panic")?;
    let hlog_path = options.out_dir.join(files::CLIENT_HLOG);
    let mut hlog = Vec::new();
    stats
        .write_histogram_log(&mut hlog, clock.system_time(start), elapsed)
        .and_then(|()| files::write_atomic(&hlog_path, &hlog))
        .map_err(output_error(&hlog_path))?;
    let mut report = stats.into_report(elapsed, plan.send_lag_bound);
    report.spend = spend;
    report.connections_opened = connections_opened;
    // Waits at its own bound: it could not open what the callers would.
    report.valid &= connection_bound.waited_at_own_bound == 0;
    report.connection_bound = connection_bound;
    report.notes.extend(bound_notes);
    report.cpu_share = met.cpu_share;
    if let Some((what, note)) = gave_out::what_gave_out(report.valid, met) {
        report.gave_out = Some(what);
        report.notes.push(note);
    }
    write_summary(&report, &options.out_dir)?;
    Ok(report)
}

/// The request heads, made once: the plan's own, then each tenant's
/// (request line with the path and both query strings, host, content
/// type, the key as its auth says, the scenario's headers).
fn heads(
    plan: &LoadPlan,
    target: &Target,
    provider_urls: &[(String, String)],
) -> Result<Vec<Head>, LoadRunError> {
    let head = |shape: &RequestShape, tenant: &str| {
        let path = crate::request::head::request_target(
            &target.base_path,
            shape.path(),
            target.query.as_deref(),
        );
        let mut prefix = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n",
            target.authority
        );
        prefix.push_str(&shape.auth.line(&shape.api_key));
        if shape.api.dialect() == Dialect::Anthropic {
            prefix.push_str(&format!("{ANTHROPIC_VERSION}: 2023-06-01\r\n"));
        }
        Head::new(prefix.into_bytes(), &shape.headers, tenant, provider_urls)
            .map_err(LoadRunError::Headers)
    };
    std::iter::once(head(&plan.request, DEFAULT_TENANT))
        .chain(plan.tenants.iter().map(|t| head(&t.request, &t.name)))
        .collect()
}

/// `summary.json` and `load-seconds.csv`, each written whole.
fn write_summary(report: &RunReport, out_dir: &Path) -> Result<(), LoadRunError> {
    let summary_path = out_dir.join(files::LOAD_SUMMARY);
    let summary = serde_json::to_vec_pretty(report).expect("a report always serializes");
    files::write_atomic(&summary_path, &summary).map_err(output_error(&summary_path))?;
    let seconds_path = out_dir.join(files::LOAD_SECONDS);
    files::write_atomic(&seconds_path, report.seconds_csv().as_bytes())
        .map_err(output_error(&seconds_path))
}

/// Keeps the schedule: spawns each person at its fixed deadline.
///
/// It sleeps on an [`Alarm`] (a timerfd the runtime's I/O driver waits on)
/// rather than on tokio's timer, whose millisecond wheel rounds every
/// deadline up and would add about a millisecond of send lag to every
/// arrival; without a timerfd (not Linux), on tokio's timer.
async fn dispatch(
    shared: Arc<Shared>,
    tracker: TaskTracker,
    stop: StopCondition,
    cancel: CancellationToken,
) {
    // Wake-ups are at least this far apart; arrivals due in between are
    // spawned together at the next wake-up, at most this late. At 50,000/s
    // that is a wake-up per 10 arrivals instead of one each, for a lag
    // still well under the millisecond.
    const MIN_WAKE_GAP: Duration = Duration::from_micros(200);
    // At most this many people are spawned in a row; then the dispatcher
    // yields, and runs again once the runtime has read what the network
    // brought meanwhile. In step (10 a wake-up at 50,000/s) it never
    // yields. Behind (its core was taken for a while, and thousands are
    // due at once), it hands people out no faster than the runtime gets
    // through them, so each finds the connections freed by the answers
    // read before it, instead of all finding every connection busy and
    // opening thousands (a loopback connect costs this core tens of
    // microseconds: at 50,000/s such a storm made the next stall longer,
    // and grew to 15,000 connections and a collapse).
    const MAX_IN_A_ROW: u32 = 32;
    let mut in_a_row = 0;
    let alarm = Alarm::new()
        .inspect_err(|e| warn!(cause = %e, "no timerfd: the schedule is kept to the millisecond"))
        .ok();
    let after_us = stop.after.map(|d| d.as_micros() as u64);
    let mut last_wake = Instant::now();
    let shard = shared.shard;
    let arrivals = (0u64..)
        .zip(shared.plan.arrivals.iter(shared.plan.seed))
        .filter(|(index, _)| shard.owns(*index));
    // The next phase's bound on open connections, set as its first person
    // is due.
    let mut bounds = shared.bounds.iter().skip(1).peekable();
    for (index, arrival) in arrivals {
        if stop.max_people.is_some_and(|m| index >= m)
            || after_us.is_some_and(|a| arrival.offset_us > a)
        {
            break;
        }
        while let Some(step) = bounds.next_if(|s| s.from_us <= arrival.offset_us) {
            shared.connector.set_limit(step.limit, step.own());
        }
        let due = shared.start + Duration::from_micros(arrival.offset_us);
        let now = Instant::now();
        if now < due {
            let until = due.max(last_wake + MIN_WAKE_GAP);
            let slept = async {
                match &alarm {
                    Some(alarm) => alarm.sleep(until - now).await,
                    None => {
                        tokio::time::sleep_until(until.into()).await;
                        Ok(())
                    }
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                slept = slept => if let Err(e) = slept {
                    warn!(cause = %e, "the schedule's timer failed");
                    return;
                },
            }
            last_wake = Instant::now();
            in_a_row = 0;
        } else if cancel.is_cancelled() {
            return;
        } else if in_a_row >= MAX_IN_A_ROW {
            tokio::task::yield_now().await;
            in_a_row = 0;
        }
        in_a_row += 1;
        shared.live.offered.fetch_add(1, Ordering::Relaxed);
        shared.live.outstanding.fetch_add(1, Ordering::Relaxed);
        // Boxed: a person's state (about 2 KiB, most of it reserved for
        // the attempt it will make) is made once, on the heap, instead of
        // being copied whole into the spawn, into the task's cell and out
        // again as the task ends (callgrind: ~3,000 instructions of memcpy
        // a person).
        let person = Box::pin(person(
            shared.clone(),
            index,
            arrival.offset_us,
            arrival.source,
        ));
        tracker.spawn(person.instrument(info_span!("person", index)));
    }
}

/// How many connections are opened before the schedule starts: one for
/// each person due in its first [`PREWARM_SPAN`] (at most
/// [`PREWARM_MAX`]), the number a cold start needs while the first
/// connections are still being accepted. Started cold at 50,000/s, the
/// first milliseconds' people each opened a connection while the target
/// was still accepting the ones before, and half the runs never caught
/// up. Persons take these as they take any idle connection.
fn prewarm_count(plan: &LoadPlan, shard: crate::Shard) -> usize {
    let span_us = PREWARM_SPAN.as_micros() as u64;
    (0u64..)
        .zip(plan.arrivals.iter(plan.seed))
        .take_while(|(_, a)| a.offset_us < span_us)
        .filter(|(index, _)| shard.owns(*index))
        .take(PREWARM_MAX)
        .count()
}

/// See [`prewarm_count`].
const PREWARM_SPAN: Duration = Duration::from_millis(5);
/// See [`prewarm_count`].
const PREWARM_MAX: usize = 256;

/// A seed per person, so a person's draws do not depend on task order.
fn person_seed(seed: u64, index: u64) -> u64 {
    // splitmix64 of the index, mixed with the run's seed.
    let mut z = index
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(seed.rotate_left(17));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn person(shared: Arc<Shared>, index: u64, offset_us: u64, source: Source) {
    let plan = &shared.plan;
    let mut rng = ChaCha8Rng::seed_from_u64(person_seed(plan.seed, index));
    let row = match (source, &plan.arrivals) {
        (Source::Row(i), Arrivals::Replay { rows, .. }) => rows.get(i),
        _ => None,
    };
    let tenant = plan.draw_tenant(&mut rng, source);
    let drawn = plan.shape(tenant).draw(&mut rng, row);
    let id = format!("{}{:06}", plan.id_prefix, index);
    let patience = plan.draw_patience(&mut rng);
    let first_intended = shared.start + Duration::from_micros(offset_us);
    let give_up = first_intended + patience;
    if !shared.affordable(&drawn) {
        // Never sent, so never counted done by a record: no longer
        // outstanding either (the dispatcher counted it in).
        shared.live.outstanding.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    shared.budget.first_attempt();
    let request = PersonRequest {
        id: &id,
        tenant,
        drawn: &drawn,
    };
    let mut intended = first_intended;
    let mut attempt = 1;
    loop {
        if attempt > 1 {
            tokio::select! {
                _ = tokio::time::sleep_until(intended.into()) => {}
                // Stopped while waiting to retry: no new attempt.
                _ = Box::pin(shared.cancel.cancelled()) => break,
            }
        }
        let mut rec = attempt_once(&shared, request, attempt, intended, give_up).await;
        rec.patience_ms = patience.as_millis() as u64;
        let mut next = None;
        let policy = &plan.retry;
        if attempt < policy.max_attempts
            && retryable(rec.outcome, rec.status)
            && !shared.cancel.is_cancelled()
        {
            let ra = rec.retry_after_ms.map(Duration::from_millis);
            let due = Instant::now() + policy.delay(attempt + 1, ra, &mut rng);
            next = retry_at(due, give_up, plan.send_lag_bound())
                .filter(|_| shared.budget.take(policy.budget))
                .filter(|_| shared.affordable(&drawn));
        }
        rec.last = next.is_none();
        shared.live.count(rec.outcome, attempt, rec.last);
        let bound_us = plan.send_lag_bound().as_micros() as u64;
        shared.live.count_record(&rec, bound_us);
        debug!(attempt, outcome = rec.outcome.as_str(), "attempt done");
        // The writer only goes away when the run is over.
        let _ = shared.records.send(rec);
        match next {
            Some(due) => {
                intended = due;
                attempt += 1;
            }
            None => break,
        }
    }
}

/// When a person retries, if at all: at `due`, unless that leaves less than
/// `margin` (the load generator's send-lag bound) before the person gives
/// up. A retry due closer to the end of the patience can be sent only
/// after it (a timer wakes a little late), and would end as a timeout that
/// no target could have avoided: on a deadline gateway, whose Retry-After
/// lands retries near the end of the patience, a dozen per rehearsal.
fn retry_at(due: Instant, give_up: Instant, margin: Duration) -> Option<Instant> {
    (due + margin < give_up).then_some(due)
}

/// What the run's bound on open connections met: the summary's figures,
/// and notes when it was met (and when attempts came up too late to be
/// sent).
fn bound_met(shared: &Shared) -> (crate::ConnectionBound, Vec<String>) {
    let waited = shared.bound_waits.load(Ordering::Relaxed);
    let not_sent = shared.not_sent.load(Ordering::Relaxed);
    let clients = shared.plan.clients;
    let figures = crate::ConnectionBound {
        largest: shared.bounds.iter().map(|s| s.limit).max().unwrap_or(0) as u64,
        most_open: shared.connector.most_open() as u64,
        waited,
        not_sent,
        waited_at_own_bound: shared.own_bound_waits.load(Ordering::Relaxed),
        model: if clients.pool.is_some() {
            "pool"
        } else {
            "per caller"
        },
        connect_rate_per_s: clients.connect_rate_per_s,
    };
    let mut said: Vec<String> = shared.bounds.iter().map(bound::Step::said).collect();
    said.dedup();
    if let Some(r) = clients.connect_rate_per_s {
        said.push(format!(
            "at most {r} new connections a second (connect_rate)"
        ));
    }
    let late = shared.not_sent_late.load(Ordering::Relaxed);
    let late_note = (late > 0).then(|| {
        format!(
            "the load generator fell behind its schedule by more than the patience: {} attempts \
             came up only after their person had given up and were not sent (connect_error, \
             reason \"{}\")",
            wire::number::count(late),
            crate::NOT_SENT_LATE,
        )
    });
    let whose = match figures.waited_at_own_bound {
        0 => "the callers' own limits on connections were reached".to_owned(),
        n => format!(
            "the load generator's own bound on open connections was reached ({} attempts waited \
             at it: it could not open the connections its callers would have, so the run is \
             invalid)",
            wire::number::count(n)
        ),
    };
    let note = (waited > 0).then(|| {
        format!(
            "{whose}: {} attempts waited in the client for a connection (client_wait_us in \
             their records: in their latency, not in their send lag nor in the gateway's \
             queue), {} got none within their patience and were not sent (connect_error, \
             reason \"not sent: ...\"); the limits: {}; at most {} were open at once",
            wire::number::count(waited),
            wire::number::count(not_sent),
            said.join("; "),
            wire::number::count(figures.most_open),
        )
    });
    (figures, note.into_iter().chain(late_note).collect())
}

impl Live {
    fn count(&self, outcome: ClientOutcome, attempt: u32, last: bool) {
        let c = match outcome {
            ClientOutcome::Ok => &self.ok,
            o if o.is_refusal() => &self.shed,
            ClientOutcome::Timeout => &self.timed_out,
            _ => &self.errors,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if attempt > 1 {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        if last {
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_due_the_send_lag_bound_before_the_person_gives_up() {
        let now = Instant::now();
        let give_up = now + Duration::from_millis(400);
        let margin = Duration::from_millis(5);
        let at = |ms| retry_at(now + Duration::from_millis(ms), give_up, margin);
        assert_eq!(at(100), Some(now + Duration::from_millis(100)));
        assert_eq!(at(394), Some(now + Duration::from_millis(394)));
        assert_eq!(at(395), None, "sent maybe after the person left");
        assert_eq!(at(399), None);
        assert_eq!(at(500), None);
    }

    #[test]
    fn the_first_milliseconds_people_get_connections_before_the_start() {
        let plan = |rate: u32| {
            let text = format!("[load]\n[[load.phases]]\nduration = \"10s\"\nrate = {rate}\n");
            LoadPlan::from_scenario_str(&text, "t.toml", Path::new(".")).unwrap()
        };
        let whole = crate::Shard::default();
        // 50,000/s: 250 people in the first 5 ms.
        assert_eq!(prewarm_count(&plan(50_000), whole), 250);
        assert_eq!(prewarm_count(&plan(1_000_000), whole), PREWARM_MAX);
        // One at offset 0 at any rate.
        assert_eq!(prewarm_count(&plan(10), whole), 1);
        let half: crate::Shard = "0/2".parse().unwrap();
        assert_eq!(prewarm_count(&plan(50_000), half), 125);
    }

    #[test]
    fn person_seeds_differ() {
        let a: std::collections::HashSet<_> = (0..10_000).map(|i| person_seed(1, i)).collect();
        assert_eq!(a.len(), 10_000);
        assert_ne!(person_seed(1, 5), person_seed(2, 5));
    }
}

#[cfg(test)]
mod size_probe {
    fn size_of_return<A, R>(_: impl Fn(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A waiting person is the bulk of what an outstanding request costs
    /// (with its socket): keep the task's state small.
    #[test]
    fn a_person_task_is_small() {
        let n = size_of_return(|s: std::sync::Arc<super::Shared>| {
            super::person(s, 0, 0, crate::schedule::Source::Phase(0))
        });
        // 2,048 before tenants and refusal reasons; they add 32 (the
        // tenant's index and the wider outcome of an exchange). A refusal's
        // body and reason share the answer reader's room.
        assert!(n <= 2_112, "person future: {n} bytes");
        assert_eq!(
            std::mem::size_of::<super::attempt::Sink>(),
            std::mem::size_of::<crate::request::AnswerReader>()
        );
    }
}
