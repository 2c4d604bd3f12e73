//! How fast the backlog is draining, as observed, and what that means for
//! a shed caller's Retry-After (written as headers by
//! [`wire::retry_after_values`]).

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

#[cfg(test)]
mod tests {
    use super::*;

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
