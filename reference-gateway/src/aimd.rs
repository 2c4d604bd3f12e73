//! The arithmetic of an adaptive concurrency limit (additive increase,
//! multiplicative decrease), kept free of I/O so it can be tested by hand.

/// An AIMD concurrency limit between a floor and a ceiling.
///
/// The limit is kept as a real number so that repeated x0.9 cuts compound
/// the way they read; [`AimdLimit::current`] is what admission uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AimdLimit {
    limit: f64,
    floor: f64,
    ceiling: f64,
}

/// The multiplicative cut applied when a call passes the latency target.
pub(crate) const BACKOFF: f64 = 0.9;

impl AimdLimit {
    pub(crate) fn new(initial: usize, floor: usize, ceiling: usize) -> Self {
        AimdLimit {
            limit: initial as f64,
            floor: floor as f64,
            ceiling: ceiling as f64,
        }
    }

    /// The whole number of calls allowed in flight now.
    pub(crate) fn current(&self) -> usize {
        self.limit.floor().max(self.floor) as usize
    }

    /// A call finished within the latency target while `in_use` calls
    /// (itself included) were in flight: grow by one if and only if at least
    /// half the limit was in use. Growing an idle limit would only raise a
    /// ceiling nobody tested. Returns true if and only if the limit changed.
    pub(crate) fn on_fast_success(&mut self, in_use: usize) -> bool {
        if (in_use as f64) * 2.0 >= self.current() as f64 && self.limit < self.ceiling {
            self.limit = (self.limit + 1.0).min(self.ceiling);
            true
        } else {
            false
        }
    }

    /// A call passed the latency target (or the upstream said it is
    /// overloaded): cut the limit to 90%, not below the floor.
    pub(crate) fn on_slow(&mut self) {
        self.limit = (self.limit * BACKOFF).max(self.floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_one_only_when_half_the_limit_is_in_use() {
        let mut l = AimdLimit::new(10, 1, 12);
        assert!(!l.on_fast_success(4), "4 of 10 in use is under half");
        assert_eq!(l.current(), 10);
        assert!(l.on_fast_success(5));
        assert_eq!(l.current(), 11);
        assert!(l.on_fast_success(11));
        assert!(!l.on_fast_success(12), "the ceiling holds");
        assert_eq!(l.current(), 12);
    }

    #[test]
    fn cuts_to_ninety_percent_down_to_the_floor() {
        let mut l = AimdLimit::new(20, 3, 40);
        l.on_slow();
        assert_eq!(l.current(), 18);
        l.on_slow();
        assert_eq!(l.current(), 16, "20 x 0.9 x 0.9 = 16.2");
        for _ in 0..100 {
            l.on_slow();
        }
        assert_eq!(l.current(), 3);
        assert!(l.on_fast_success(2), "2 of 3 is over half");
        assert_eq!(l.current(), 4);
    }
}
