//! The anchored clock both sides of a rehearsal stamp their records with.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Turns `Instant`s into microseconds since the Unix epoch that never go
/// backwards: one wall-clock reading at the anchor, and the monotonic clock
/// after it. The load generator and the fake provider each anchor one, so
/// their records compare in time (to the precision of two wall-clock
/// readings on one machine) while a wall-clock step during a run moves
/// neither.
///
/// ```
/// use std::time::{Duration, Instant};
/// let clock = wire::Clock::new();
/// let t = Instant::now();
/// assert_eq!(clock.us_at(t + Duration::from_millis(3)) - clock.us_at(t), 3_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    anchor_us: u64,
}

impl Clock {
    /// A clock anchored now.
    pub fn new() -> Self {
        let start = Instant::now();
        let anchor_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Clock { start, anchor_us }
    }

    /// The instant the clock was anchored.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Microseconds since the Unix epoch of `at`. An instant before the
    /// anchor (none in a run, whose instants all come later) reads as the
    /// anchor.
    pub fn us_at(&self, at: Instant) -> u64 {
        self.anchor_us + at.saturating_duration_since(self.start).as_micros() as u64
    }

    /// Microseconds since the Unix epoch, now.
    pub fn now_us(&self) -> u64 {
        self.us_at(Instant::now())
    }

    /// Seconds since the anchor.
    pub fn secs(&self) -> f64 {
        self.secs_at(Instant::now())
    }

    /// Seconds from the anchor to `at` (0 for an instant before it).
    pub fn secs_at(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64()
    }

    /// This clock, reading `by_us` microseconds later (earlier when
    /// negative) at every instant. For tests that need two machines' clocks
    /// apart (the fake provider's test-only clock offset).
    ///
    /// ```
    /// let clock = wire::Clock::new();
    /// let t = clock.start();
    /// assert_eq!(clock.shifted(-250_000).us_at(t), clock.us_at(t) - 250_000);
    /// ```
    pub fn shifted(mut self, by_us: i64) -> Clock {
        self.anchor_us = self.anchor_us.saturating_add_signed(by_us);
        self
    }

    /// The wall-clock time of `at`, for HTTP dates.
    pub fn system_time(&self, at: Instant) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.us_at(at))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_in_microseconds() {
        let c = Clock::new();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(3);
        assert_eq!(c.us_at(t1) - c.us_at(t0), 3000);
        assert!(c.us_at(t0) > 1_600_000_000_000_000);
        assert!(c.now_us() >= c.us_at(t0));
        // Before the anchor reads as the anchor.
        let before = c.start().checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(c.us_at(before), c.us_at(c.start()));
        }
        assert_eq!(
            c.system_time(t1)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64,
            c.us_at(t1)
        );
    }

    #[test]
    fn seconds_at_an_instant_agree_with_its_microseconds() {
        let c = Clock::new();
        let t = c.start() + Duration::from_millis(2_500);
        assert_eq!(c.secs_at(t), 2.5);
        assert_eq!(c.us_at(t) - c.us_at(c.start()), 2_500_000);
        if let Some(before) = c.start().checked_sub(Duration::from_secs(1)) {
            assert_eq!(c.secs_at(before), 0.0);
        }
        assert!(c.secs() >= c.secs_at(c.start()));
    }
}
