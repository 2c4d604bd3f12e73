//! Places for open connections: at most `limit` open at once, each open
//! connection holding one place ([`Slot`]) from its connect to its close.
//!
//! The limit is the load generator's own bound (what its callers can
//! hold, see `run::bound`), or the scenario's `max_connections` when that
//! is lower; it changes with the phase. Past it a request waits for an
//! idle connection or a freed place; a request that finds one at once
//! takes it before those waiting (no queue to join: a person arriving on
//! time is sent on time, and those who waited longest are the ones who
//! give up at the bound, counted as such).
//!
//! Why not tokio's semaphore (as before): its permits cannot be taken
//! back while held, and a bound that falls with the phase has to let the
//! connections above it close first.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

/// The places, shared by every connection to one target.
#[derive(Debug)]
pub(crate) struct Slots {
    open: AtomicUsize,
    limit: AtomicUsize,
    /// The limit in force is the load generator's own bound (not the
    /// scenario's `max_connections`): a wait at it is the load
    /// generator's, and is recorded as such.
    own: AtomicBool,
    /// The most open at once.
    most: AtomicUsize,
    /// Requests waiting for a place (or an idle connection).
    waiting: AtomicUsize,
    /// Signalled (one waiter) when a place is freed or a connection goes
    /// back idle; all waiters when the limit rises.
    freed: Notify,
    /// Signalled when a place is freed or the limit rises: for the one
    /// request whose turn it is to open a connection under a connect rate
    /// (see `pace`), which needs a place where the others need an idle
    /// connection.
    placed: Notify,
}

/// One open connection's place, freed when it is dropped (with the
/// connection). `None` only once given back ([`Slot::give_back`]); the
/// option costs no room (an `Arc` is never null).
#[derive(Debug)]
pub(crate) struct Slot(Option<Arc<Slots>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.0.take() {
            slots.open.fetch_sub(1, Ordering::SeqCst);
            slots.wake_one();
            slots.placed.notify_one();
        }
    }
}

impl Slot {
    /// Gives the place back without waking anyone: it was taken only to be
    /// given back at once (the connect rate allowed no connection), and a
    /// waiter woken for it would find the same.
    pub(crate) fn give_back(mut self) {
        if let Some(slots) = self.0.take() {
            slots.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Counts a request among those waiting while it lives.
pub(crate) struct Waiting<'s>(&'s Slots);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slots {
    pub(crate) fn new(limit: usize, own: bool) -> Arc<Slots> {
        Arc::new(Slots {
            open: AtomicUsize::new(0),
            limit: AtomicUsize::new(limit),
            own: AtomicBool::new(own),
            most: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            placed: Notify::new(),
        })
    }

    /// A place, if fewer than the limit are open.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Slot> {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut open = self.open.load(Ordering::Relaxed);
        loop {
            if open >= limit {
                return None;
            }
            match self.open.compare_exchange_weak(
                open,
                open + 1,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.most.fetch_max(open + 1, Ordering::Relaxed);
                    return Some(Slot(Some(self.clone())));
                }
                Err(now) => open = now,
            }
        }
    }

    /// Sets the limit (a phase starts), and whose it is. Connections
    /// above a lower limit stay until they close; none goes back idle
    /// meanwhile ([`Slots::over`]).
    pub(crate) fn set_limit(&self, limit: usize, own: bool) {
        let before = self.limit.swap(limit, Ordering::SeqCst);
        self.own.store(own, Ordering::Relaxed);
        if limit > before {
            self.freed.notify_waiters();
            self.placed.notify_one();
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether the limit in force is the load generator's own bound.
    pub(crate) fn is_own(&self) -> bool {
        self.own.load(Ordering::Relaxed)
    }

    /// More connections are open than the limit allows (it fell).
    pub(crate) fn over(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.limit.load(Ordering::Relaxed)
    }

    /// The most connections open at once so far.
    pub(crate) fn most(&self) -> usize {
        self.most.load(Ordering::Relaxed)
    }

    /// Joins the requests waiting; the caller then registers for
    /// [`Slots::freed`] before it looks again, so a place freed in
    /// between is not missed.
    pub(crate) fn wait(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(self)
    }

    pub(crate) fn freed(&self) -> &Notify {
        &self.freed
    }

    /// See the field: a place freed, for the request whose turn it is to
    /// open a connection under a connect rate.
    pub(crate) fn placed(&self) -> &Notify {
        &self.placed
    }

    /// Wakes one waiting request, if any waits (a place was freed, or a
    /// connection went back idle). No waiter: nothing is done, so an
    /// answer read costs no wake-up.
    pub(crate) fn wake_one(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
    }
}

/// How long a request waited in the client for its connection (at the
/// bound, at a busy pool, for the connect rate); written by the request
/// and read by its person after it ends, even when it ended (a hang-up)
/// while waiting. Four bytes, kept in a person's state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoundWait(u32);

impl BoundWait {
    /// Still waiting (or never got one).
    const WAITING: u32 = u32::MAX;

    fn start(&mut self) {
        self.0 = Self::WAITING;
    }

    fn got(&mut self, since: Instant) {
        let us = since
            .elapsed()
            .as_micros()
            .min(u128::from(Self::WAITING - 2)) as u32;
        self.0 = us + 1;
    }

    /// The request ended while waiting: it was never sent.
    pub(crate) fn never_got(self) -> bool {
        self.0 == Self::WAITING
    }

    /// How long it waited before it got a connection, if it waited.
    pub(crate) fn waited_us(self) -> Option<u64> {
        (self.0 != 0 && self.0 != Self::WAITING).then(|| u64::from(self.0 - 1))
    }
}

/// A wait in the client being timed: started on creation, stopped by
/// [`Timed::got`].
pub(crate) struct Timed<'w> {
    wait: &'w mut BoundWait,
    since: Instant,
}

impl<'w> Timed<'w> {
    pub(crate) fn start(wait: &'w mut BoundWait) -> Timed<'w> {
        wait.start();
        Timed {
            wait,
            since: Instant::now(),
        }
    }

    pub(crate) fn got(self) {
        self.wait.got(self.since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_up_to_the_limit_and_freed_with_their_connection() {
        let slots = Slots::new(2, true);
        let a = slots.take().unwrap();
        let b = slots.take().unwrap();
        assert!(slots.take().is_none());
        drop(a);
        let c = slots.take().unwrap();
        assert_eq!(slots.most(), 2);
        // A lower limit: the two open stay, over it, and none is added
        // until they close.
        slots.set_limit(1, true);
        assert!(slots.over());
        drop(b);
        assert!(!slots.over());
        assert!(slots.take().is_none());
        drop(c);
        let _d = slots.take().unwrap();
        slots.set_limit(3, false);
        assert!(!slots.is_own());
        assert!(slots.take().is_some());
    }

    #[test]
    fn a_wait_is_told_apart_from_none_and_from_one_that_never_ended() {
        let mut wait = BoundWait::default();
        assert_eq!((wait.never_got(), wait.waited_us()), (false, None));
        // Started, and ended (a hang-up) before it got a connection.
        let _ = Timed::start(&mut wait);
        assert!(wait.never_got(), "dropped while waiting");
        let mut wait = BoundWait::default();
        Timed::start(&mut wait).got();
        assert!(!wait.never_got());
        assert!(wait.waited_us().is_some());
    }

    #[test]
    fn a_place_given_back_wakes_nobody_and_is_free_again() {
        let slots = Slots::new(1, false);
        let _waiting = slots.wait();
        slots.take().unwrap().give_back();
        assert_eq!(slots.open.load(Ordering::SeqCst), 0);
        let held = slots.take().expect("free again");
        // Given back: no wake-up stored for a waiter (a dropped one stores
        // one, and the waiter would find the place).
        let woken = slots.freed().notified();
        tokio::pin!(woken);
        assert!(!woken.as_mut().enable(), "no wake-up was stored");
        drop(held);
        assert!(woken.as_mut().enable(), "a dropped place wakes one");
    }

    #[tokio::test]
    async fn a_freed_place_wakes_a_waiter() {
        let slots = Slots::new(1, true);
        let held = slots.take().unwrap();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move {
                let _waiting = slots.wait();
                loop {
                    let freed = slots.freed().notified();
                    tokio::pin!(freed);
                    freed.as_mut().enable();
                    if let Some(slot) = slots.take() {
                        return slot;
                    }
                    freed.await;
                }
            })
        };
        tokio::task::yield_now().await;
        drop(held);
        let slot = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        drop(slot);
        assert_eq!(slots.waiting.load(Ordering::SeqCst), 0);
    }
}
