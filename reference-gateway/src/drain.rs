//! How long the backlog takes to drain, and so a shed caller's Retry-After
//! (written as headers by [`wire::retry_after_values`]): work over the
//! rate it leaves at ([`retry_after`]: the pacer's tokens at its own rate;
//! behind a concurrency limit, before any call has completed, jobs at the
//! rate observed leaving the queue, [`DrainMeter`]), or, behind a
//! concurrency limit, when the queue's last job leaves it
//! ([`queue_drain`]), from when the calls in flight will end
//! ([`ServiceMeter`]: how long a call takes).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Work leaving the queue (dispatched to the provider or dropped), over a
/// sliding window: the drain rate actually observed, never a configured one.
#[derive(Debug)]
pub(crate) struct DrainMeter {
    window: Duration,
    started: Instant,
    events: VecDeque<(Instant, f64)>,
    sum: f64,
}

impl DrainMeter {
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        DrainMeter {
            window,
            started: now,
            events: VecDeque::new(),
            sum: 0.0,
        }
    }

    /// `amount` units of work (requests, or tokens) left the queue at `now`.
    pub(crate) fn record(&mut self, now: Instant, amount: f64) {
        self.expire(now);
        self.events.push_back((now, amount));
        self.sum += amount;
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(t, a)) = self.events.front() {
            if now.saturating_duration_since(t) > self.window {
                self.events.pop_front();
                self.sum -= a;
            } else {
                break;
            }
        }
        if self.events.is_empty() {
            // Float subtraction drift must not leave a ghost rate behind.
            self.sum = 0.0;
        }
    }

    /// Units per second over the window, or `None` if nothing drained in it.
    ///
    /// Until a whole window has passed since start, the span observed so far
    /// is used (but at least a tenth of the window, so that the very first
    /// departure does not read as an infinite rate).
    pub(crate) fn rate(&mut self, now: Instant) -> Option<f64> {
        self.expire(now);
        if self.sum <= 0.0 {
            return None;
        }
        let observed = now.saturating_duration_since(self.started).min(self.window);
        let span = observed.max(self.window / 10).as_secs_f64();
        Some(self.sum / span)
    }

    /// The slowest rate consistent with seeing nothing drain for a whole
    /// window: one unit per window.
    pub(crate) fn pessimistic_rate(&self, unit: f64) -> f64 {
        unit / self.window.as_secs_f64()
    }
}

/// Time for `work` units to drain at `rate` units per second.
///
/// ```text
/// retry_after = work / rate
/// ```
pub(crate) fn retry_after(work: f64, rate: f64) -> Duration {
    // An hour: past that a number means "not today", and an absurd value
    // would overflow `Duration`.
    const CAP: f64 = 3600.0;
    if rate.is_nan() || rate <= 0.0 || !work.is_finite() {
        return Duration::from_secs_f64(CAP);
    }
    Duration::from_secs_f64((work.max(0.0) / rate).min(CAP))
}

/// How long a provider call takes, as observed: a moving mean of the calls
/// that completed (the provider answered and the answer was delivered).
#[derive(Debug, Default)]
pub(crate) struct ServiceMeter {
    mean_s: Option<f64>,
}

impl ServiceMeter {
    /// The weight of the latest call: a provider that slows down shows in
    /// a few calls.
    const WEIGHT: f64 = 0.25;

    /// A call completed after `took`.
    pub(crate) fn record(&mut self, took: Duration) {
        let s = took.as_secs_f64();
        self.mean_s = Some(match self.mean_s {
            Some(m) => m + Self::WEIGHT * (s - m),
            None => s,
        });
    }

    /// The time a call takes now: the mean, but at least `oldest`, the
    /// age of the oldest call in flight (a provider that just slowed down
    /// shows there before any slow call completes); `None` before any call
    /// completed.
    pub(crate) fn estimate(&self, oldest: Duration) -> Option<f64> {
        self.mean_s.map(|m| m.max(oldest.as_secs_f64()))
    }
}

/// How long until the queue has drained: until its last job leaves it,
/// FIFO, behind `limit` slots whose calls in flight end `ends` seconds from
/// now (0 or less: due now) and then take `service_s` each. Each job
/// waiting (`waited`: how long each has waited so far, in the order they
/// are served) takes the next slot to free, unless by then it has waited
/// past `budget_s`: it is dropped there, stale, and the slot goes to the
/// next. A slot frees as each call ends (past the limit only once fewer
/// than `limit` are in flight: the `limit` latest ends are the slots' next
/// free times; free slots free now). With nobody waiting, when the first
/// slot frees: when a retry can be admitted.
///
/// So behind eight calls that started together the wait jumps by a whole
/// call every eight jobs, and a queue deeper than its budget drains
/// sooner than its length says (its tail is dropped, not served): what a
/// rate would smooth over, and what the queue's last job will see.
pub(crate) fn queue_drain(
    ends: &[f64],
    limit: usize,
    waited: impl Iterator<Item = f64>,
    budget_s: f64,
    service_s: f64,
) -> Duration {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let us = |s: f64| (s.max(0.0) * 1e6).min(3.6e9) as u64;
    let limit = limit.max(1);
    let mut free: Vec<u64> = ends.iter().map(|&e| us(e)).collect();
    free.sort_unstable();
    // The `limit` latest ends, with free slots (none in flight) at 0.
    let from = free.len().saturating_sub(limit);
    let mut slots: BinaryHeap<Reverse<u64>> =
        std::iter::repeat_n(0, limit.saturating_sub(free.len()))
            .chain(free.drain(from..))
            .map(Reverse)
            .collect();
    let (budget, service) = (us(budget_s), us(service_s));
    let mut last = None;
    for waited in waited {
        let Some(&Reverse(at)) = slots.peek() else {
            break;
        };
        last = Some(at);
        if at.saturating_add(us(waited)) <= budget {
            slots.pop();
            slots.push(Reverse(at.saturating_add(service)));
        }
    }
    let first = slots.peek().map_or(0, |r| r.0);
    Duration::from_micros(last.unwrap_or(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(d: Duration, s: f64) {
        assert!((d.as_secs_f64() - s).abs() < 1e-9, "{d:?} vs {s}");
    }

    #[test]
    fn the_queues_last_job_waits_for_its_slot() {
        let fresh = |n: usize| std::iter::repeat_n(0.0, n);
        // Eight calls of 1.4 s that started together, 0.5 s ago: the first
        // eight jobs waiting go in 0.9 s, the next eight 1.4 s later.
        let ends = [0.9; 8];
        close(queue_drain(&ends, 8, fresh(1), 10.0, 1.4), 0.9);
        close(queue_drain(&ends, 8, fresh(8), 10.0, 1.4), 0.9);
        close(queue_drain(&ends, 8, fresh(11), 10.0, 1.4), 2.3);
        // With a budget of 2 s, jobs that waited 0.5 s are dropped at 2.3 s
        // instead: the last leaves then all the same; jobs that waited
        // 1.5 s are dropped at 0.9 s, the ninth of fresh ones goes at 2.3.
        let mixed = [1.5, 1.5, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        close(queue_drain(&ends, 8, mixed.into_iter(), 2.0, 1.4), 0.9);
        let mixed = [1.5, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        close(queue_drain(&ends, 8, mixed.into_iter(), 2.0, 1.4), 2.3);
        // Calls ending one after another: the 3rd job takes the 3rd slot.
        let spread: Vec<f64> = (0..8).map(|i| 0.1 * f64::from(i)).collect();
        close(queue_drain(&spread, 8, fresh(3), 10.0, 1.0), 0.2);
        close(queue_drain(&spread, 8, fresh(10), 10.0, 1.0), 1.1);
        // Nobody waiting: when the first slot frees.
        close(queue_drain(&spread, 8, fresh(0), 10.0, 1.0), 0.0);
        close(queue_drain(&[0.5; 4], 4, fresh(0), 10.0, 1.0), 0.5);
        // Over the limit (an AIMD cut): a slot frees only when fewer than
        // the limit are in flight, at the 3rd of 4 ends for a limit of 2.
        close(
            queue_drain(&[0.1, 0.2, 0.3, 0.4], 2, fresh(1), 10.0, 1.0),
            0.3,
        );
        // Overdue calls end now; a limit of 0 counts as 1.
        close(queue_drain(&[-1.0], 1, fresh(1), 10.0, 1.0), 0.0);
        close(queue_drain(&[], 0, fresh(2), 10.0, 1.0), 1.0);
    }

    #[test]
    fn the_service_time_follows_the_calls_and_the_oldest_in_flight() {
        let mut m = ServiceMeter::default();
        assert_eq!(m.estimate(Duration::from_secs(9)), None);
        m.record(Duration::from_millis(200));
        assert!((m.estimate(Duration::ZERO).unwrap() - 0.2).abs() < 1e-9);
        // A call in flight for 1 s says a call takes at least that now.
        assert!((m.estimate(Duration::from_secs(1)).unwrap() - 1.0).abs() < 1e-9);
        for _ in 0..20 {
            m.record(Duration::from_millis(1400));
        }
        assert!((m.estimate(Duration::ZERO).unwrap() - 1.4).abs() < 0.01);
    }

    #[test]
    fn rate_is_what_left_in_the_window() {
        let t0 = Instant::now();
        let mut m = DrainMeter::new(Duration::from_secs(10), t0);
        assert_eq!(m.rate(t0), None);
        for i in 0..20 {
            m.record(t0 + Duration::from_millis(500 * i), 1.0);
        }
        // 20 departures in the first 10 s.
        let r = m.rate(t0 + Duration::from_secs(10)).unwrap();
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // The window slides: at 15 s, only the departures after 5 s count.
        let r = m.rate(t0 + Duration::from_secs(15)).unwrap();
        assert!((r - 1.0).abs() < 1e-9, "{r}");
        // Nothing left for more than a window: no rate at all.
        assert_eq!(m.rate(t0 + Duration::from_secs(30)), None);
    }

    #[test]
    fn a_young_meter_uses_the_span_observed_so_far() {
        let t0 = Instant::now();
        let mut m = DrainMeter::new(Duration::from_secs(10), t0);
        m.record(t0 + Duration::from_secs(1), 300.0);
        m.record(t0 + Duration::from_secs(2), 300.0);
        let r = m.rate(t0 + Duration::from_secs(2)).unwrap();
        assert!((r - 300.0).abs() < 1e-9, "{r}");
        // A first departure right at start reads over a tenth of the window.
        let mut m = DrainMeter::new(Duration::from_secs(10), t0);
        m.record(t0, 1.0);
        assert!((m.rate(t0).unwrap() - 1.0).abs() < 1e-9);
        assert!((m.pessimistic_rate(1.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn retry_after_is_backlog_over_rate_and_grows_with_it() {
        assert_eq!(retry_after(12.0, 4.0), Duration::from_secs(3));
        assert!(retry_after(24.0, 4.0) > retry_after(12.0, 4.0));
        assert_eq!(retry_after(1.0, 0.0), Duration::from_secs(3600));
        assert_eq!(retry_after(1e12, 1.0), Duration::from_secs(3600));
    }
}
