//! Admission: who may call the provider now, who waits, who is shed.
//!
//! Three shapes cover the five modes:
//! - `naive` and `timeout` admit everything at once and keep no state;
//! - [`Slots`] (`bounded`, `aimd`) is a concurrency limit with a bounded
//!   queue in front and a wait budget checked at dequeue; in `aimd` the
//!   limit moves;
//! - [`Pacer`] (`deadline`) dispatches at the quota's token rate and admits
//!   a job only if the tokens ahead of it, plus its own, drain in time for
//!   the caller's deadline; the same test runs again at dequeue.
//!
//! Each works on the capacity of the upstreams not cooling. At a share
//! `s` of the upstreams' weight open ([`Router::share`]; 1 with a lone
//! upstream or no cooldowns), a limit of N calls is `ceil(N·s)`, never
//! below one, and a queue of Q places `ceil(Q·s)`; the pacer's token rate
//! is `rate·s`. Read at each admission and dispatch, so the capacity comes
//! back as soon as a cooldown ends (a queued job waits for the next call
//! to end to see it).
//!
//! A job that is admitted gets a [`Permit`]; dropping the permit gives the
//! slot back. A caller that hangs up while queued drops its `admit` future,
//! whose guard takes the job out of the queue at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::aimd::AimdLimit;
use crate::config::{GatewayConfig, Mode, Order};
use crate::drain::{self, DrainMeter, ServiceMeter};
use crate::metrics::{Gauges, Metrics, ShedReason};
use crate::queue::WaitQueue;
use crate::router::Router;

/// A count (a concurrency limit, queue places) at `share` of the
/// upstreams' capacity: `ceil(n·share)`, at least `least`, at most `n`.
pub(crate) fn at_share(n: usize, share: f64, least: usize) -> usize {
    if share >= 1.0 {
        return n;
    }
    ((n as f64 * share).ceil() as usize).clamp(least.min(n), n)
}

/// What admission needs to know about a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job {
    /// When the request arrived at the gateway.
    pub(crate) arrived: Instant,
    /// Prompt tokens + max_tokens (estimated).
    pub(crate) cost: f64,
    /// The caller's patience, relative to `arrived` (deadline mode).
    pub(crate) patience: Duration,
}

/// A request answered without calling the provider.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) reason: ShedReason,
    /// Time for the live backlog to drain: until the queue's last job
    /// leaves it.
    pub(crate) retry_after: Duration,
}

/// How an upstream call ended, for the AIMD limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallOutcome {
    /// The provider answered (2xx) and the answer was delivered.
    Success,
    /// The provider said it is overloaded (429, 503, 529).
    Overloaded,
    /// Anything else: a client error, a broken connection, a hang-up.
    Other,
}

/// The admission policy of a running gateway.
pub(crate) enum Admission {
    Unbounded,
    Slots(Arc<Slots>),
    Pacer(Arc<Pacer>),
}

impl Admission {
    /// Builds the policy for `config`; a pacer's dispatcher task runs until
    /// `shutdown` is cancelled.
    pub(crate) fn new(
        config: &GatewayConfig,
        metrics: Arc<Metrics>,
        router: Arc<Router>,
        shutdown: &CancellationToken,
    ) -> Admission {
        // Without cooldowns the share is always 1: no need to ask.
        let router = router.cools().then_some(router);
        let now = Instant::now();
        match config.mode {
            Mode::Naive | Mode::Timeout => Admission::Unbounded,
            Mode::Bounded => Admission::Slots(Arc::new(Slots::new(
                Limit::Fixed(config.bounded.concurrency),
                config.bounded.queue,
                config.bounded.wait_budget,
                DrainMeter::new(config.drain_window, now),
                metrics,
                router,
            ))),
            Mode::Aimd => {
                let a = &config.aimd;
                Admission::Slots(Arc::new(Slots::new(
                    Limit::Aimd {
                        limit: AimdLimit::new(a.initial, a.floor, a.ceiling),
                        latency_target: a.latency_target,
                    },
                    a.queue,
                    a.wait_budget,
                    DrainMeter::new(config.drain_window, now),
                    metrics,
                    router,
                )))
            }
            Mode::Deadline => {
                let d = &config.deadline;
                let pacer = Arc::new(Pacer::new(
                    d.tokens_per_minute / 60.0,
                    d.expected_service,
                    d.order,
                    metrics,
                    router,
                ));
                tokio::spawn(pacer.clone().dispatch(shutdown.clone()));
                Admission::Pacer(pacer)
            }
        }
    }

    /// Waits for a permit, or says why the job is shed.
    pub(crate) async fn admit(&self, job: Job) -> Result<Permit, Refusal> {
        match self {
            Admission::Unbounded => Ok(Permit::unbounded()),
            Admission::Slots(s) => s.admit(job).await,
            Admission::Pacer(p) => p.admit(job).await,
        }
    }

    pub(crate) fn gauges(&self) -> Gauges {
        match self {
            Admission::Unbounded => Gauges::default(),
            Admission::Slots(s) => {
                let share = s.share(Instant::now());
                let st = s.lock();
                Gauges {
                    queue_depth: st.queue.len(),
                    queued_tokens: None,
                    limit: Some(at_share(st.limit.current(), share, 1)),
                    pool: None,
                }
            }
            Admission::Pacer(p) => {
                let now = Instant::now();
                let rate = p.rate(now);
                let st = p.lock();
                Gauges {
                    queue_depth: st.queue.len(),
                    queued_tokens: Some(st.tokens_ahead(now, rate)),
                    limit: None,
                    pool: None,
                }
            }
        }
    }
}

/// Gives back what a permit holds when the call ends.
enum Release {
    None,
    Slots(Arc<Slots>),
    Pacer(Arc<Pacer>),
}

/// The right to call the provider once. Dropping it ends the call's claim.
pub(crate) struct Permit {
    release: Release,
    dispatched: Instant,
    outcome: CallOutcome,
    /// Set by the AIMD watchdog when the call passed the latency target.
    slow: Arc<AtomicBool>,
    watchdog: Option<tokio::task::AbortHandle>,
    /// False while a granted permit travels to a queued job: if it is
    /// dropped unclaimed, that job's caller left in the meantime.
    claimed: bool,
}

impl Permit {
    fn unbounded() -> Permit {
        Permit::new(Release::None, Instant::now())
    }

    fn new(release: Release, dispatched: Instant) -> Permit {
        Permit {
            release,
            dispatched,
            outcome: CallOutcome::Other,
            slow: Arc::new(AtomicBool::new(false)),
            watchdog: None,
            claimed: true,
        }
    }

    /// When the job left the queue.
    pub(crate) fn dispatched(&self) -> Instant {
        self.dispatched
    }

    /// Records how the call ended; takes effect when the permit is dropped.
    pub(crate) fn finish(&mut self, outcome: CallOutcome) {
        self.outcome = outcome;
    }

    /// Never gives the slot back (the `leak-slots` fault): the limit counts
    /// this call in flight for as long as the gateway runs.
    pub(crate) fn leak(mut self) {
        self.claimed = true;
        self.release = Release::None;
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
    }

    /// Forgets the permit without releasing it: for a grant whose receiver
    /// was already gone, undone by hand under the lock.
    fn defuse(mut self) {
        self.count_if_unclaimed();
        self.release = Release::None;
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
    }
}

impl Permit {
    fn count_if_unclaimed(&mut self) {
        if self.claimed {
            return;
        }
        self.claimed = true;
        let metrics = match &self.release {
            Release::None => return,
            Release::Slots(s) => &s.metrics,
            Release::Pacer(p) => &p.metrics,
        };
        metrics.cancelled_queued.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.count_if_unclaimed();
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        match std::mem::replace(&mut self.release, Release::None) {
            Release::None => {}
            Release::Slots(s) => {
                let elapsed = self.dispatched.elapsed();
                s.release(
                    self.outcome,
                    self.dispatched,
                    elapsed,
                    self.slow.load(Ordering::Acquire),
                );
            }
            Release::Pacer(p) => p.lock().in_flight -= 1,
        }
    }
}

/// What a queued job is told when it leaves the queue.
enum Grant {
    Go(Permit),
    Expired { retry_after: Duration },
}

// ---------------------------------------------------------------------------
// Slots: bounded and aimd

/// The concurrency limit of `bounded` (fixed) or `aimd` (moving).
pub(crate) enum Limit {
    Fixed(usize),
    Aimd {
        limit: AimdLimit,
        latency_target: Duration,
    },
}

impl Limit {
    fn current(&self) -> usize {
        match self {
            Limit::Fixed(n) => *n,
            Limit::Aimd { limit, .. } => limit.current(),
        }
    }
}

struct SlotWaiter {
    arrived: Instant,
    tx: oneshot::Sender<Grant>,
}

pub(crate) struct SlotsState {
    in_flight: usize,
    limit: Limit,
    queue: WaitQueue<SlotWaiter>,
    drain: DrainMeter,
    /// When each call in flight was dispatched (its entry goes as its
    /// permit is released): when the slots free, for Retry-After.
    started: Vec<Instant>,
    /// How long a call takes, as observed.
    service: ServiceMeter,
}

impl SlotsState {
    /// A call dispatched at `at` has ended.
    fn ended(&mut self, at: Instant) {
        self.in_flight -= 1;
        if let Some(i) = self.started.iter().position(|&s| s == at) {
            self.started.swap_remove(i);
        }
    }
}

/// A concurrency limit with a bounded FIFO queue and a wait budget.
pub(crate) struct Slots {
    state: Mutex<SlotsState>,
    capacity: usize,
    wait_budget: Duration,
    metrics: Arc<Metrics>,
    /// The upstreams, when some may be cooling.
    router: Option<Arc<Router>>,
}

impl Slots {
    fn new(
        limit: Limit,
        capacity: usize,
        wait_budget: Duration,
        drain: DrainMeter,
        metrics: Arc<Metrics>,
        router: Option<Arc<Router>>,
    ) -> Slots {
        Slots {
            state: Mutex::new(SlotsState {
                in_flight: 0,
                limit,
                queue: WaitQueue::new(Order::Fifo),
                drain,
                started: Vec::new(),
                service: ServiceMeter::default(),
            }),
            capacity,
            wait_budget,
            metrics,
            router,
        }
    }

    /// The share of the upstreams' capacity not cooling at `now`.
    fn share(&self, now: Instant) -> f64 {
        self.router.as_ref().map_or(1.0, |r| r.share(now))
    }

    fn lock(&self) -> MutexGuard<'_, SlotsState> {
        // A panic while holding this lock would be a bug in this module's
        // arithmetic; the state is still consistent enough to keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long until the queue drains: until its last job leaves it,
    /// served or dropped stale (with nobody waiting, until a slot frees: a
    /// retry is admitted then), from when the calls in flight will end at
    /// the call time observed ([`drain::queue_drain`]). Before any call
    /// has completed, the backlog ahead of one more job (itself included)
    /// at the rate jobs were observed leaving the queue.
    fn retry_after(&self, st: &mut SlotsState, now: Instant, limit: usize) -> Duration {
        let oldest = st
            .started
            .iter()
            .map(|&s| now.saturating_duration_since(s))
            .max()
            .unwrap_or_default();
        if let Some(service_s) = st.service.estimate(oldest) {
            let ends: Vec<f64> = st
                .started
                .iter()
                .map(|&s| service_s - now.saturating_duration_since(s).as_secs_f64())
                .collect();
            let waited = st
                .queue
                .in_order()
                .map(|w| now.saturating_duration_since(w.arrived).as_secs_f64());
            // At least the header's least: 0 reads as "retry at once".
            return drain::queue_drain(
                &ends,
                limit,
                waited,
                self.wait_budget.as_secs_f64(),
                service_s,
            )
            .max(Duration::from_millis(1));
        }
        let work = st.queue.len() as f64 + 1.0;
        let rate = st
            .drain
            .rate(now)
            .unwrap_or_else(|| st.drain.pessimistic_rate(1.0));
        drain::retry_after(work, rate)
    }

    async fn admit(self: &Arc<Self>, job: Job) -> Result<Permit, Refusal> {
        let (seq, rx) = {
            let now = Instant::now();
            let share = self.share(now);
            let mut st = self.lock();
            let limit = at_share(st.limit.current(), share, 1);
            if st.queue.is_empty() && st.in_flight < limit {
                return Ok(self.grant(&mut st, now));
            }
            if st.queue.len() >= at_share(self.capacity, share, 0) {
                self.metrics.refused(ShedReason::QueueFull);
                return Err(Refusal {
                    reason: ShedReason::QueueFull,
                    retry_after: self.retry_after(&mut st, now, limit),
                });
            }
            let (tx, rx) = oneshot::channel();
            let seq = st.queue.push(SlotWaiter {
                arrived: job.arrived,
                tx,
            });
            (seq, rx)
        };
        let guard = QueuedGuard {
            on_drop: Some(|| {
                if self.lock().queue.remove(seq).is_some() {
                    self.metrics
                        .cancelled_queued
                        .fetch_add(1, Ordering::Relaxed);
                }
            }),
        };
        let grant = rx.await;
        guard.disarm();
        match grant {
            Ok(Grant::Go(mut permit)) => {
                permit.claimed = true;
                Ok(permit)
            }
            Ok(Grant::Expired { retry_after }) => Err(Refusal {
                reason: ShedReason::WaitExpired,
                retry_after,
            }),
            // The sender is only dropped unsent when the gateway itself is
            // going away with the job still queued.
            Err(_) => Err(Refusal {
                reason: ShedReason::WaitExpired,
                retry_after: Duration::from_secs(1),
            }),
        }
    }

    /// Takes a slot for a job leaving the queue now.
    fn grant(self: &Arc<Self>, st: &mut SlotsState, now: Instant) -> Permit {
        st.in_flight += 1;
        st.started.push(now);
        st.drain.record(now, 1.0);
        let mut permit = Permit::new(Release::Slots(self.clone()), now);
        if let Limit::Aimd { latency_target, .. } = st.limit {
            // Cut the limit the moment the call passes the target, not when
            // it finally returns: a provider that stalls would otherwise
            // keep its limit until the first slow answer comes back.
            let slow = permit.slow.clone();
            let slots = Arc::downgrade(self);
            let task = tokio::spawn(async move {
                tokio::time::sleep(latency_target).await;
                if let Some(slots) = slots.upgrade() {
                    slow.store(true, Ordering::Release);
                    let mut st = slots.lock();
                    if let Limit::Aimd { limit, .. } = &mut st.limit {
                        limit.on_slow();
                    }
                }
            });
            permit.watchdog = Some(task.abort_handle());
        }
        permit
    }

    fn release(
        self: &Arc<Self>,
        outcome: CallOutcome,
        dispatched: Instant,
        elapsed: Duration,
        marked_slow: bool,
    ) {
        let mut st = self.lock();
        let in_use = st.in_flight;
        st.ended(dispatched);
        if outcome == CallOutcome::Success {
            st.service.record(elapsed);
        }
        if let Limit::Aimd {
            limit,
            latency_target,
        } = &mut st.limit
        {
            let slow = marked_slow || elapsed > *latency_target;
            match outcome {
                CallOutcome::Success if !slow => {
                    limit.on_fast_success(in_use);
                }
                // Already cut by the watchdog: one cut per call.
                _ if marked_slow => {}
                CallOutcome::Success | CallOutcome::Overloaded => limit.on_slow(),
                CallOutcome::Other => {}
            }
        }
        self.dispatch_waiting(&mut st);
    }

    /// Hands free slots to waiting jobs, dropping those that waited too long.
    fn dispatch_waiting(self: &Arc<Self>, st: &mut SlotsState) {
        let now = Instant::now();
        let share = self.share(now);
        loop {
            let limit = at_share(st.limit.current(), share, 1);
            if st.in_flight >= limit {
                break;
            }
            let Some(waiter) = st.queue.pop() else { break };
            let waited = now.saturating_duration_since(waiter.arrived);
            if waited > self.wait_budget {
                // Never call the provider for it: its caller has likely left
                // or will get an answer too late to use.
                self.metrics.refused(ShedReason::WaitExpired);
                let retry_after = self.retry_after(st, now, limit);
                let _ = waiter.tx.send(Grant::Expired { retry_after });
                continue;
            }
            let mut permit = self.grant(st, now);
            permit.claimed = false;
            if let Err(Grant::Go(permit)) = waiter.tx.send(Grant::Go(permit)) {
                // The caller left between our pop and our send.
                let dispatched = permit.dispatched();
                permit.defuse();
                st.ended(dispatched);
            }
        }
    }
}

/// Runs a closure when dropped, unless disarmed: takes a queued job out of
/// the queue when its caller hangs up (its future is dropped).
struct QueuedGuard<F: FnOnce()> {
    on_drop: Option<F>,
}

impl<F: FnOnce()> QueuedGuard<F> {
    fn disarm(mut self) {
        self.on_drop = None;
    }
}

impl<F: FnOnce()> Drop for QueuedGuard<F> {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

// ---------------------------------------------------------------------------
// Pacer: deadline

struct PacedWaiter {
    deadline: Instant,
    cost: f64,
    tx: oneshot::Sender<Grant>,
}

pub(crate) struct PacerState {
    queue: WaitQueue<PacedWaiter>,
    queued_tokens: f64,
    /// When the pacer may dispatch again; each dispatch moves it cost/rate on.
    next_free: Instant,
    in_flight: usize,
}

impl PacerState {
    /// Tokens that must drain before a new job could be dispatched: those
    /// queued, plus what the last dispatch still owes the rate.
    fn tokens_ahead(&self, now: Instant, rate: f64) -> f64 {
        self.queued_tokens + self.next_free.saturating_duration_since(now).as_secs_f64() * rate
    }

    /// How long until the queue has drained: until its last job (the last
    /// to be served, in its order) is dispatched, at the pacer's own rate
    /// (it dispatches at nothing else); with nobody queued, until the
    /// pacer may dispatch again. At least 1 ms: 0 reads as "retry at once".
    fn drain_time(&self, now: Instant, rate: f64) -> Duration {
        let last = self.queue.in_order().last().map_or(0.0, |w| w.cost);
        let tokens = (self.tokens_ahead(now, rate) - last).max(0.0);
        drain::retry_after(tokens, rate).max(Duration::from_millis(1))
    }
}

/// Dispatches at a token rate; admits only what can make its deadline.
pub(crate) struct Pacer {
    state: Mutex<PacerState>,
    wake: Notify,
    /// Tokens per second, with every upstream open.
    rate: f64,
    expected_service: Duration,
    metrics: Arc<Metrics>,
    /// The upstreams, when some may be cooling.
    router: Option<Arc<Router>>,
}

/// The deadline arithmetic: returns true if and only if a job of `cost`
/// tokens, behind `ahead` tokens draining at `rate` per second, then served
/// in `service`, finishes within `patience`.
pub(crate) fn makes_deadline(
    ahead: f64,
    cost: f64,
    rate: f64,
    service: Duration,
    patience: Duration,
) -> bool {
    (ahead + cost) / rate + service.as_secs_f64() <= patience.as_secs_f64()
}

/// Timer lateness tolerated before the pacer stops counting from its own
/// schedule: keeps the achieved rate at the configured one despite each
/// sleep waking a little late, without letting an idle spell bank tokens.
const PACER_SLACK: Duration = Duration::from_millis(20);

impl Pacer {
    fn new(
        rate: f64,
        expected_service: Duration,
        order: Order,
        metrics: Arc<Metrics>,
        router: Option<Arc<Router>>,
    ) -> Pacer {
        Pacer {
            state: Mutex::new(PacerState {
                queue: WaitQueue::new(order),
                queued_tokens: 0.0,
                next_free: Instant::now(),
                in_flight: 0,
            }),
            wake: Notify::new(),
            rate,
            expected_service,
            metrics,
            router,
        }
    }

    /// Tokens per second at `now`: the rate at the share of the upstreams'
    /// capacity not cooling.
    fn rate(&self, now: Instant) -> f64 {
        self.rate * self.router.as_ref().map_or(1.0, |r| r.share(now))
    }

    fn lock(&self) -> MutexGuard<'_, PacerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn admit(self: &Arc<Self>, job: Job) -> Result<Permit, Refusal> {
        let (seq, rx) = {
            let now = Instant::now();
            let rate = self.rate(now);
            let mut st = self.lock();
            let patience = job
                .patience
                .saturating_sub(now.saturating_duration_since(job.arrived));
            let ahead = st.tokens_ahead(now, rate);
            if !makes_deadline(ahead, job.cost, rate, self.expected_service, patience) {
                self.metrics.refused(ShedReason::WouldMissDeadline);
                return Err(Refusal {
                    reason: ShedReason::WouldMissDeadline,
                    retry_after: st.drain_time(now, rate),
                });
            }
            if st.queue.is_empty() && st.next_free <= now {
                return Ok(self.grant(&mut st, now, now, job.cost, rate));
            }
            let (tx, rx) = oneshot::channel();
            let seq = st.queue.push(PacedWaiter {
                deadline: job.arrived + job.patience,
                cost: job.cost,
                tx,
            });
            st.queued_tokens += job.cost;
            (seq, rx)
        };
        self.wake.notify_one();
        let guard = QueuedGuard {
            on_drop: Some(|| {
                let mut st = self.lock();
                if let Some(w) = st.queue.remove(seq) {
                    st.queued_tokens = (st.queued_tokens - w.cost).max(0.0);
                    self.metrics
                        .cancelled_queued
                        .fetch_add(1, Ordering::Relaxed);
                }
            }),
        };
        let grant = rx.await;
        guard.disarm();
        match grant {
            Ok(Grant::Go(mut permit)) => {
                permit.claimed = true;
                Ok(permit)
            }
            Ok(Grant::Expired { retry_after }) => Err(Refusal {
                reason: ShedReason::WaitExpired,
                retry_after,
            }),
            Err(_) => Err(Refusal {
                reason: ShedReason::WaitExpired,
                retry_after: Duration::from_secs(1),
            }),
        }
    }

    /// Dispatches a job of `cost` tokens, scheduled from `base`.
    fn grant(
        self: &Arc<Self>,
        st: &mut PacerState,
        now: Instant,
        base: Instant,
        cost: f64,
        rate: f64,
    ) -> Permit {
        st.next_free = base + Duration::from_secs_f64(cost / rate);
        st.in_flight += 1;
        Permit::new(Release::Pacer(self.clone()), now)
    }

    /// The dispatcher: pops the next job when the rate allows, re-checks its
    /// deadline, and hands it a permit.
    async fn dispatch(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let wake_at = {
                let now = Instant::now();
                let rate = self.rate(now);
                let mut st = self.lock();
                if st.queue.is_empty() {
                    None
                } else if st.next_free > now {
                    Some(st.next_free)
                } else if let Some(waiter) = st.queue.pop() {
                    st.queued_tokens = (st.queued_tokens - waiter.cost).max(0.0);
                    if now + self.expected_service > waiter.deadline {
                        // The same test as at admission, with nothing left
                        // ahead of it: too late even if dispatched now.
                        self.metrics.refused(ShedReason::WaitExpired);
                        let retry_after = st.drain_time(now, rate);
                        let _ = waiter.tx.send(Grant::Expired { retry_after });
                        continue;
                    }
                    let previous = st.next_free;
                    let base = previous.max(now.checked_sub(PACER_SLACK).unwrap_or(now));
                    let mut permit = self.grant(&mut st, now, base, waiter.cost, rate);
                    permit.claimed = false;
                    if let Err(Grant::Go(permit)) = waiter.tx.send(Grant::Go(permit)) {
                        permit.defuse();
                        st.in_flight -= 1;
                        st.next_free = previous;
                    }
                    continue;
                } else {
                    None
                }
            };
            match wake_at {
                None => tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = shutdown.cancelled() => return,
                },
                Some(at) => tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = shutdown.cancelled() => return,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    fn job(cost: f64, patience: Duration) -> Job {
        Job {
            arrived: Instant::now(),
            cost,
            patience,
        }
    }

    #[test]
    fn deadline_arithmetic_is_tokens_over_rate_plus_service() {
        let s = Duration::from_secs(1);
        // 100 tokens/s, 400 ahead + 100 own = 5 s, + 1 s service = 6 s.
        assert!(makes_deadline(
            400.0,
            100.0,
            100.0,
            s,
            Duration::from_secs(6)
        ));
        assert!(!makes_deadline(
            400.0,
            100.0,
            100.0,
            s,
            Duration::from_millis(5999)
        ));
        assert!(makes_deadline(0.0, 100.0, 100.0, s, Duration::from_secs(2)));
    }

    fn slots(limit: Limit, queue: usize, budget: Duration) -> Arc<Slots> {
        Arc::new(Slots::new(
            limit,
            queue,
            budget,
            DrainMeter::new(Duration::from_secs(5), Instant::now()),
            metrics(),
            None,
        ))
    }

    #[tokio::test]
    async fn bounded_queue_full_is_shed_at_once_and_grants_in_order() {
        let s = slots(Limit::Fixed(1), 2, Duration::from_secs(10));
        let held = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        let s1 = s.clone();
        let first =
            tokio::spawn(async move { s1.admit(job(1.0, Duration::ZERO)).await.map(|_| 1) });
        tokio::task::yield_now().await;
        let s2 = s.clone();
        let second =
            tokio::spawn(async move { s2.admit(job(1.0, Duration::ZERO)).await.map(|_| 2) });
        while s.lock().queue.len() < 2 {
            tokio::task::yield_now().await;
        }
        let refusal = s.admit(job(1.0, Duration::ZERO)).await.err().unwrap();
        assert_eq!(refusal.reason, ShedReason::QueueFull);
        assert!(refusal.retry_after > Duration::ZERO);
        drop(held);
        assert_eq!(first.await.unwrap(), Ok(1));
        assert_eq!(second.await.unwrap(), Ok(2));
        assert_eq!(s.lock().in_flight, 0);
    }

    #[tokio::test]
    async fn a_job_past_its_wait_budget_is_dropped_at_dequeue() {
        let s = slots(Limit::Fixed(1), 4, Duration::from_millis(20));
        let held = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        let s1 = s.clone();
        let waiting = tokio::spawn(async move { s1.admit(job(1.0, Duration::ZERO)).await.err() });
        tokio::time::sleep(Duration::from_millis(40)).await;
        drop(held);
        let refusal = waiting.await.unwrap().expect("expired");
        assert_eq!(refusal.reason, ShedReason::WaitExpired);
        assert_eq!(s.lock().in_flight, 0, "no slot was taken for it");
        assert_eq!(s.metrics.stale_drops.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_caller_hanging_up_frees_its_queue_place() {
        let s = slots(Limit::Fixed(1), 1, Duration::from_secs(10));
        let held = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        let s1 = s.clone();
        let waiting = tokio::spawn(async move { s1.admit(job(1.0, Duration::ZERO)).await.is_ok() });
        while s.lock().queue.is_empty() {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(s.lock().queue.len(), 0);
        assert_eq!(s.metrics.cancelled_queued.load(Ordering::Relaxed), 1);
        drop(held);
        assert!(s.admit(job(1.0, Duration::ZERO)).await.is_ok());
    }

    #[tokio::test]
    async fn aimd_grows_on_fast_success_and_is_cut_by_the_watchdog() {
        let s = slots(
            Limit::Aimd {
                limit: AimdLimit::new(2, 1, 10),
                latency_target: Duration::from_millis(30),
            },
            0,
            Duration::from_secs(1),
        );
        let limit = |s: &Arc<Slots>| s.lock().limit.current();
        let mut a = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        a.finish(CallOutcome::Success);
        drop(a);
        assert_eq!(limit(&s), 3, "1 of 2 in use is half: +1");
        let slow = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(
            limit(&s),
            2,
            "cut while the call is still running: 3 x 0.9 = 2.7"
        );
        drop(slow);
        assert_eq!(limit(&s), 2, "one cut per slow call");
    }

    #[test]
    fn counts_follow_the_share_not_cooling_rounded_up() {
        assert_eq!(at_share(8, 1.0, 1), 8);
        assert_eq!(at_share(8, 0.5, 1), 4);
        assert_eq!(at_share(8, 0.25, 1), 2);
        assert_eq!(at_share(5, 0.5, 1), 3, "rounded up");
        assert_eq!(at_share(1, 0.1, 1), 1, "never below one call");
        assert_eq!(at_share(16, 0.1, 0), 2);
        assert_eq!(at_share(0, 0.5, 0), 0, "no queue stays no queue");
    }

    /// Two upstreams of weights 3 and 1, the first cooling: a quarter of
    /// the capacity.
    fn quarter_open() -> Arc<Router> {
        let mut c = GatewayConfig::new(Mode::Bounded, "");
        for (name, weight) in [("big", 3), ("small", 1)] {
            c.upstreams.push(crate::config::UpstreamConfig {
                name: name.into(),
                url: Some("http://127.0.0.1:9".into()),
                provider: None,
                weight,
                priority: 0,
            });
        }
        let router = Arc::new(Router::new(&c));
        router.cool(0, Duration::from_secs(60), Instant::now());
        router
    }

    #[tokio::test]
    async fn slots_work_on_the_capacity_of_the_upstreams_not_cooling() {
        let s = Arc::new(Slots::new(
            Limit::Fixed(8),
            8,
            Duration::from_secs(10),
            DrainMeter::new(Duration::from_secs(5), Instant::now()),
            metrics(),
            Some(quarter_open()),
        ));
        let admission = Admission::Slots(s.clone());
        assert_eq!(admission.gauges().limit, Some(2), "8 x 1/4");
        let _a = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        let _b = s.admit(job(1.0, Duration::ZERO)).await.unwrap();
        // The third waits; the queue holds 8 x 1/4 = 2.
        let (s1, s2) = (s.clone(), s.clone());
        let w1 = tokio::spawn(async move { s1.admit(job(1.0, Duration::ZERO)).await.is_ok() });
        let w2 = tokio::spawn(async move { s2.admit(job(1.0, Duration::ZERO)).await.is_ok() });
        while s.lock().queue.len() < 2 {
            tokio::task::yield_now().await;
        }
        let refused = s.admit(job(1.0, Duration::ZERO)).await.err().unwrap();
        assert_eq!(refused.reason, ShedReason::QueueFull);
        w1.abort();
        w2.abort();
    }

    #[tokio::test]
    async fn the_pacer_paces_to_the_share_of_its_rate_not_cooling() {
        // 400 tokens/s at a quarter: 100/s. Patience 2.5 s, service 0:
        // behind 100 tokens owed, a 100-token job is done at 2 s (fits); a
        // third, behind 200, at 3 s (does not).
        let p = Arc::new(Pacer::new(
            400.0,
            Duration::ZERO,
            Order::Fifo,
            metrics(),
            Some(quarter_open()),
        ));
        let token = CancellationToken::new();
        tokio::spawn(p.clone().dispatch(token.clone()));
        let patience = Duration::from_millis(2500);
        let _first = p.admit(job(100.0, patience)).await.unwrap();
        let p2 = p.clone();
        let second = tokio::spawn(async move { p2.admit(job(100.0, patience)).await.is_ok() });
        while p.lock().queue.is_empty() {
            tokio::task::yield_now().await;
        }
        let shed = p.admit(job(100.0, patience)).await.err().unwrap();
        assert_eq!(shed.reason, ShedReason::WouldMissDeadline);
        second.abort();
        token.cancel();
    }

    fn pacer(tokens_per_s: f64, service: Duration, order: Order) -> Arc<Pacer> {
        Arc::new(Pacer::new(tokens_per_s, service, order, metrics(), None))
    }

    #[tokio::test]
    async fn pacer_admits_exactly_what_its_arithmetic_allows() {
        // 100 tokens/s, 100 tokens per job: one job per second. Patience
        // 6.5 s, service 1 s: (k x 100)/100 + 1 <= 6.5 admits k <= 5.
        let p = pacer(100.0, Duration::from_secs(1), Order::Fifo);
        let token = CancellationToken::new();
        tokio::spawn(p.clone().dispatch(token.clone()));
        let patience = Duration::from_millis(6500);
        let first = p.admit(job(100.0, patience)).await;
        assert!(first.is_ok(), "an idle pacer dispatches at once");
        let mut queued = Vec::new();
        for _ in 0..4 {
            let p = p.clone();
            queued.push(tokio::spawn(async move {
                p.admit(job(100.0, patience)).await.is_ok()
            }));
        }
        while p.lock().queue.len() < 4 {
            tokio::task::yield_now().await;
        }
        let shed = p.admit(job(100.0, patience)).await.err().unwrap();
        assert_eq!(shed.reason, ShedReason::WouldMissDeadline);
        // The queue's last job is dispatched once the 400 tokens ahead of
        // it have drained at 100/s (the first job's 100 owed and three
        // queued): about 4 s, not a constant.
        assert!(
            (Duration::from_millis(3_800)..=Duration::from_secs(4)).contains(&shed.retry_after),
            "{:?}",
            shed.retry_after
        );
        // A caller with more patience still gets in.
        let p2 = p.clone();
        let patient =
            tokio::spawn(
                async move { p2.admit(job(100.0, Duration::from_secs(60))).await.is_ok() },
            );
        while p.lock().queue.len() < 5 {
            tokio::task::yield_now().await;
        }
        patient.abort();
        token.cancel();
    }

    #[tokio::test]
    async fn pacer_drops_at_dequeue_what_can_no_longer_make_it() {
        // 1000 tokens/s, LIFO. The first job (500 tokens) holds the pacer
        // 0.5 s. A (10 tokens, patience 0.75 s) is admitted:
        // (500 + 10)/1000 + 0.1 = 0.61 s. B (300 tokens) arrives after it and,
        // LIFO, is dispatched first at 0.5 s, holding the pacer until 0.8 s:
        // by then A would finish at 0.9 s, past its 0.75 s: dropped, unsent.
        let p = pacer(1000.0, Duration::from_millis(100), Order::Lifo);
        let token = CancellationToken::new();
        let _first = p.admit(job(500.0, Duration::from_secs(5))).await.unwrap();
        let pa = p.clone();
        let a = tokio::spawn(
            async move { pa.admit(job(10.0, Duration::from_millis(750))).await.err() },
        );
        while p.lock().queue.is_empty() {
            tokio::task::yield_now().await;
        }
        let pb = p.clone();
        let b =
            tokio::spawn(async move { pb.admit(job(300.0, Duration::from_secs(5))).await.is_ok() });
        while p.lock().queue.len() < 2 {
            tokio::task::yield_now().await;
        }
        tokio::spawn(p.clone().dispatch(token.clone()));
        assert!(b.await.unwrap());
        let refusal = a.await.unwrap().expect("dropped at dequeue");
        assert_eq!(refusal.reason, ShedReason::WaitExpired);
        assert_eq!(p.metrics.stale_drops.load(Ordering::Relaxed), 1);
        assert!(refusal.retry_after > Duration::ZERO);
        token.cancel();
    }

    #[tokio::test]
    async fn pacer_serves_lifo_newest_first() {
        let p = pacer(1000.0, Duration::ZERO, Order::Lifo);
        let token = CancellationToken::new();
        let _first = p.admit(job(100.0, Duration::from_secs(10))).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let pi = p.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let permit = pi.admit(job(100.0, Duration::from_secs(10))).await;
                tx.send((i, permit.is_ok())).unwrap();
            });
            while p.lock().queue.len() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        tokio::spawn(p.clone().dispatch(token.clone()));
        let order: Vec<_> = vec![
            rx.recv().await.unwrap(),
            rx.recv().await.unwrap(),
            rx.recv().await.unwrap(),
        ];
        assert_eq!(order, vec![(2, true), (1, true), (0, true)]);
        token.cancel();
    }
}
