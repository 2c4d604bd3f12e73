//! The one scaling rule of a rehearsal.
//!
//! A scenario is written at full scale (the real event: 2,000 requests a
//! minute for 40 minutes against 500,000 tokens a minute) and rehearsed at
//! a smaller one: `time` compresses the clock, `quota` shrinks the account.
//! Each typed config (provider, load, gateway, thresholds, plan figures)
//! applies this rule in its own `scaled(Scale)`; nothing rewrites TOML.
//!
//! | quantity | rule | why |
//! |---|---|---|
//! | durations (phases, latencies, patience, budgets, timeouts, windows) | ÷ time | the clock runs `time` times faster |
//! | rates (requests per second or minute, replay multiply) | × time ÷ quota | as many arrivals per rehearsed phase, shared by a smaller account |
//! | tokens per minute (quota, a gateway's drain rate) | × time ÷ quota | a rate |
//! | counts (ceilings, queues, concurrency, a latency knee) | ÷ quota, rounded, at least 1 | Little's law: L = λ·W, with λ ÷ quota and W unchanged in scenario time |
//! | derived depths and backlogs (the plan's Q*, served, backlog) | ÷ quota | counts |
//! | bytes a backlog holds (the plan's unbounded backlog) | ÷ quota | a count of requests × bytes each |
//! | bytes per request, memory ceilings and limits | unscaled (limits and ceilings ÷ quota with `[gateway] scale_memory = true`) | a process's memory has a floor (code, buffers, allocator) that no scale shrinks, and a request's bytes are the real prompt's; a budget that stands for a number of requests held (1 MB each, 400 of them) shrinks with the account, as the counts do |
//! | thresholds in time (drain within, p99 SLO) | ÷ time | durations |
//! | the load generator's send-lag bound | unscaled | the harness's own precision, not the scenario's |
//! | a replay's speed-up | × time | a rate of the clock |
//!
//! A gateway the harness spawns gets its time scale one way only: the
//! reference gateway receives a config already scaled by this rule (and no
//! `REHEARSE_TIME_SCALE`); any other command receives `REHEARSE_TIME_SCALE`
//! and scales itself.

use std::time::Duration;

/// How a rehearsal is scaled down from the event it rehearses.
///
/// ```
/// use std::time::Duration;
/// use wire::Scale;
///
/// let s = Scale { time: 10.0, quota: 4.0 };
/// assert_eq!(s.duration(Duration::from_secs(25)), Duration::from_millis(2500));
/// assert_eq!(s.rate(2000.0), 5000.0);
/// assert_eq!(s.count(125), 31);
/// assert_eq!(s.count(1), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Divides every duration: a 40-minute event rehearsed in 4 minutes.
    pub time: f64,
    /// Divides every quota, rate and count: a rehearsal against an account
    /// scaled down this many times.
    pub quota: f64,
}

impl Default for Scale {
    fn default() -> Self {
        Scale::ONE
    }
}

impl Scale {
    /// The event itself, unscaled.
    pub const ONE: Scale = Scale {
        time: 1.0,
        quota: 1.0,
    };

    /// Returns true if and only if this scale changes nothing.
    pub fn is_one(&self) -> bool {
        self.time == 1.0 && self.quota == 1.0
    }

    /// A duration at rehearsal scale: ÷ time. Whole microseconds, so a
    /// scaled duration prints exactly.
    pub fn duration(&self, d: Duration) -> Duration {
        if self.time == 1.0 {
            return d;
        }
        Duration::from_micros((d.as_secs_f64() / self.time * 1e6).round() as u64)
    }

    /// Seconds at rehearsal scale: ÷ time.
    pub fn secs(&self, s: f64) -> f64 {
        s / self.time
    }

    /// A rate (per second, per minute, tokens per minute): × time ÷ quota.
    pub fn rate(&self, r: f64) -> f64 {
        r * self.time / self.quota
    }

    /// A count (a ceiling, a queue, a concurrency limit, a knee): ÷ quota,
    /// rounded, never below 1 (a zero stays zero: it means "none").
    pub fn count(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((n as f64 / self.quota).round() as u64).max(1)
    }

    /// A count as `usize` (see [`Scale::count`]).
    pub fn count_usize(&self, n: usize) -> usize {
        self.count(n as u64) as usize
    }

    /// A derived depth or backlog, unrounded: ÷ quota.
    pub fn depth(&self, n: f64) -> f64 {
        n / self.quota
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_changes_nothing() {
        let s = Scale::ONE;
        assert!(s.is_one());
        assert_eq!(
            s.duration(Duration::from_nanos(1_234_567)),
            Duration::from_nanos(1_234_567)
        );
        assert_eq!(s.rate(7.5), 7.5);
        assert_eq!(s.count(9), 9);
    }

    #[test]
    fn counts_round_and_keep_at_least_one() {
        let s = Scale {
            time: 1.0,
            quota: 1000.0,
        };
        assert_eq!(s.count(125), 1);
        assert_eq!(s.count(0), 0);
        assert_eq!(
            Scale {
                time: 1.0,
                quota: 4.0
            }
            .count(600),
            150
        );
    }

    #[test]
    fn durations_are_whole_microseconds() {
        let s = Scale {
            time: 3.0,
            quota: 1.0,
        };
        assert_eq!(
            s.duration(Duration::from_secs(1)),
            Duration::from_micros(333_333)
        );
    }
}
