//! The callers' new connections per second at most (`[load.clients]
//! connect_rate`): a connect is taken from a bucket that fills at that
//! rate and holds [`BURST_SPAN`] of it (at least one connect), kept as the
//! instant the next connect is due (the generic cell rate algorithm: one
//! atomic word, no lock, no timer of its own).
//!
//! A request that finds no idle connection, a place, and no connect left
//! waits in the client, as at a busy pool. Only one waiting request at a
//! time sleeps until the next connect is due ([`Pace::turn`]); the others
//! wait for an idle connection or for their turn, so a long wait line
//! costs no wake-up per connect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// The bucket holds this much of the rate: at 1,000 connects a second, 20
/// at once. A timer wakes a millisecond or so late, and a bucket of one
/// would lose each of those milliseconds for good.
const BURST_SPAN: Duration = Duration::from_millis(20);

/// New connections per second at most, for one target.
#[derive(Debug)]
pub(crate) struct Pace {
    base: Instant,
    /// Between two connects at the rate, nanoseconds.
    interval_ns: u64,
    /// How far ahead of now the next due connect may be and one still be
    /// taken: the bucket's room less one connect.
    tolerance_ns: u64,
    /// When the next connect is due at the rate, nanoseconds after `base`.
    due_ns: AtomicU64,
    /// The one waiting request whose turn it is to sleep until a connect
    /// is due.
    turn: Semaphore,
}

impl Pace {
    /// At most `per_s` connects a second (a rate above 0).
    pub(crate) fn new(per_s: f64) -> Pace {
        let interval_ns = (1e9 / per_s).clamp(1.0, 1e15) as u64;
        let room_ns = interval_ns.max(BURST_SPAN.as_nanos() as u64);
        Pace {
            base: Instant::now(),
            interval_ns,
            tolerance_ns: room_ns - interval_ns,
            due_ns: AtomicU64::new(0),
            turn: Semaphore::new(1),
        }
    }

    /// Takes a connect if one is left now; else says when the next is.
    pub(crate) fn take(&self) -> Result<(), Instant> {
        self.take_at(self.now_ns())
            .map_err(|at| self.base + Duration::from_nanos(at))
    }

    /// Whether a connect is left now, taking none.
    pub(crate) fn ready(&self) -> Result<(), Instant> {
        self.ready_at(self.now_ns())
            .map_err(|at| self.base + Duration::from_nanos(at))
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// [`Pace::take`] at `now` (nanoseconds after `base`); the error is
    /// when the next connect is left, on the same clock.
    fn take_at(&self, now: u64) -> Result<(), u64> {
        let mut due = self.due_ns.load(Ordering::Relaxed);
        loop {
            let next = due.max(now);
            if next - now > self.tolerance_ns {
                return Err(next - self.tolerance_ns);
            }
            match self.due_ns.compare_exchange_weak(
                due,
                next + self.interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => due = seen,
            }
        }
    }

    /// [`Pace::ready`] at `now`.
    fn ready_at(&self, now: u64) -> Result<(), u64> {
        let next = self.due_ns.load(Ordering::Relaxed).max(now);
        match next - now > self.tolerance_ns {
            true => Err(next - self.tolerance_ns),
            false => Ok(()),
        }
    }

    /// The turn to sleep until the next connect (see the module).
    pub(crate) fn turn(&self) -> &Semaphore {
        &self.turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_of_the_buckets_room_then_one_per_interval() {
        // 1,000 a second: 20 at once (20 ms of it), then one a millisecond.
        let pace = Pace::new(1_000.0);
        let t0 = 5 * MS;
        let taken = (0..100).take_while(|_| pace.take_at(t0).is_ok()).count();
        assert_eq!(taken, 20);
        assert_eq!(pace.take_at(t0), Err(t0 + MS));
        assert_eq!(pace.ready_at(t0), Err(t0 + MS), "the same, none taken");
        assert_eq!(pace.take_at(t0 + MS), Ok(()));
        assert!(pace.take_at(t0 + MS).is_err(), "one more, not a burst");
        // Idle for a while: the bucket fills to its room, no more.
        let later = t0 + 1_000 * MS;
        let taken = (0..100).take_while(|_| pace.take_at(later).is_ok()).count();
        assert_eq!(taken, 20);
        // On the real clock, the next is due within the millisecond.
        let fresh = Pace::new(1_000.0);
        while fresh.take().is_ok() {}
        let ahead = fresh
            .take()
            .unwrap_err()
            .saturating_duration_since(Instant::now());
        assert!(ahead <= Duration::from_millis(2), "{ahead:?}");
    }

    #[test]
    fn a_slow_rate_takes_one_at_a_time() {
        // 10 a second: the bucket holds one (100 ms is more than 20 ms).
        let pace = Pace::new(10.0);
        assert_eq!(pace.take_at(MS), Ok(()));
        assert_eq!(pace.take_at(MS), Err(101 * MS));
        assert_eq!(pace.ready_at(50 * MS), Err(101 * MS));
        assert_eq!(pace.take_at(101 * MS), Ok(()));
    }

    #[test]
    fn over_a_while_the_rate_is_kept_from_many_threads() {
        let pace = std::sync::Arc::new(Pace::new(2_000.0));
        let began = Instant::now();
        let taken: usize = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let pace = &pace;
                    s.spawn(move || {
                        let mut n = 0;
                        while began.elapsed() < Duration::from_millis(200) {
                            if pace.take().is_ok() {
                                n += 1;
                            }
                            std::hint::spin_loop();
                        }
                        n
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        let elapsed = began.elapsed().as_secs_f64();
        // 2,000/s over the time taken, plus the bucket's 40 at the start.
        let most = (2_000.0 * elapsed).ceil() as usize + 40;
        assert!(taken <= most, "{taken} connects in {elapsed} s");
        assert!(taken >= 200, "{taken} connects in {elapsed} s");
    }
}
