//! The concurrency ceiling: at most C calls in service, the rest waiting in
//! a FIFO queue (or refused).
//!
//! A hand-made gate rather than a `tokio::sync::Semaphore` because the
//! ceiling moves with the timeline (a phase may lower it from 12 to 4 while
//! 12 calls are in service) and the queue's length is part of the record.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The outcome of asking for a place in service.
pub enum Admission {
    /// In service now.
    Now(Permit),
    /// Waiting; resolves to a permit when a place frees up.
    Queued(oneshot::Receiver<Permit>),
    /// No place and no queue room.
    Rejected,
}

#[derive(Default)]
struct State {
    in_service: u32,
    ceiling: Option<u32>,
    waiters: VecDeque<oneshot::Sender<Permit>>,
}

/// The gate in front of service.
#[derive(Clone, Default)]
pub struct Ceiling {
    state: Arc<Mutex<State>>,
}

/// A place in service; dropping it lets the next waiter in.
pub struct Permit {
    state: Arc<Mutex<State>>,
}

impl Ceiling {
    /// Asks for a place under `ceiling` (`None`: no ceiling). Beyond it, the
    /// call queues if `queue` is true and the queue holds fewer than
    /// `queue_limit` waiters (`None`: unbounded).
    pub fn admit(&self, ceiling: Option<u32>, queue: bool, queue_limit: Option<u32>) -> Admission {
        // The lock is held for a few instructions only and never across an
        // await, so a std mutex is the cheaper choice here.
        let mut st = lock(&self.state);
        st.ceiling = ceiling;
        Self::wake(&mut st, &self.state);
        let room = ceiling.is_none_or(|c| st.in_service < c);
        if room && st.waiters.is_empty() {
            st.in_service += 1;
            return Admission::Now(Permit {
                state: self.state.clone(),
            });
        }
        if !queue {
            return Admission::Rejected;
        }
        st.waiters.retain(|w| !w.is_closed());
        if queue_limit.is_some_and(|l| st.waiters.len() >= l as usize) {
            return Admission::Rejected;
        }
        let (tx, rx) = oneshot::channel();
        st.waiters.push_back(tx);
        Admission::Queued(rx)
    }

    /// Calls in service now.
    pub fn in_service(&self) -> u32 {
        lock(&self.state).in_service
    }

    /// Hands free places to waiters, oldest first, skipping those who left.
    fn wake(st: &mut State, shared: &Arc<Mutex<State>>) {
        while st.ceiling.is_none_or(|c| st.in_service < c) {
            let Some(tx) = st.waiters.pop_front() else {
                break;
            };
            st.in_service += 1;
            let permit = Permit {
                state: shared.clone(),
            };
            if let Err(permit) = tx.send(permit) {
                // The waiter left (its caller hung up). Releasing the permit
                // here would re-lock the mutex we hold, so undo by hand.
                std::mem::forget(permit);
                st.in_service -= 1;
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let shared = self.state.clone();
        let mut st = lock(&shared);
        st.in_service -= 1;
        Ceiling::wake(&mut st, &shared);
    }
}

/// A poisoned lock means a panic elsewhere while holding it; the counters
/// are still meaningful, so go on with them.
fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(a: Admission) -> Permit {
        match a {
            Admission::Now(p) => p,
            _ => panic!("expected a place now"),
        }
    }

    #[tokio::test]
    async fn queues_fifo_and_hands_over_on_release() {
        let c = Ceiling::default();
        let p1 = now(c.admit(Some(1), true, None));
        let Admission::Queued(w1) = c.admit(Some(1), true, None) else {
            panic!()
        };
        let Admission::Queued(w2) = c.admit(Some(1), true, None) else {
            panic!()
        };
        assert_eq!(c.in_service(), 1);
        drop(p1);
        let p2 = w1.await.unwrap();
        assert_eq!(c.in_service(), 1);
        drop(p2);
        let _p3 = w2.await.unwrap();
        assert_eq!(c.in_service(), 1);
    }

    #[tokio::test]
    async fn a_waiter_who_left_is_skipped() {
        let c = Ceiling::default();
        let p1 = now(c.admit(Some(1), true, None));
        let Admission::Queued(gone) = c.admit(Some(1), true, None) else {
            panic!()
        };
        let Admission::Queued(w) = c.admit(Some(1), true, None) else {
            panic!()
        };
        drop(gone);
        drop(p1);
        let _p = w.await.unwrap();
        assert_eq!(c.in_service(), 1);
    }

    #[test]
    fn rejects_without_queue_or_beyond_its_limit() {
        let c = Ceiling::default();
        let _p = now(c.admit(Some(1), false, None));
        assert!(matches!(c.admit(Some(1), false, None), Admission::Rejected));
        let _q = c.admit(Some(1), true, Some(1));
        assert!(matches!(
            c.admit(Some(1), true, Some(1)),
            Admission::Rejected
        ));
    }

    #[tokio::test]
    async fn a_lower_ceiling_applies_to_later_calls_and_a_higher_one_wakes() {
        let c = Ceiling::default();
        let _a = now(c.admit(Some(3), true, None));
        let _b = now(c.admit(Some(3), true, None));
        let Admission::Queued(w) = c.admit(Some(2), true, None) else {
            panic!()
        };
        // The ceiling rises with the next call: the waiter goes in first.
        let Admission::Queued(_w2) = c.admit(Some(3), true, None) else {
            panic!("FIFO: the old waiter goes first")
        };
        let _p = w.await.unwrap();
        assert_eq!(c.in_service(), 3);
        assert!(matches!(c.admit(None, true, None), Admission::Now(_)));
    }
}
