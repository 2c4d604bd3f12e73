//! The timer hyper is given for a connection's header read timeout.
//!
//! hyper arms the timeout whenever it starts reading a request head (on a
//! keep-alive connection: as soon as the previous answer is out) and drops
//! it once the head is in. With hyper-util's `TokioTimer` that is a tokio
//! `Sleep` made, put into tokio's timer wheel and taken out again for
//! every request. Here one tokio `Sleep` serves the connection: a
//! request's timeout polls it, and when the request's head is in, the
//! `Sleep` stays in the wheel at its deadline. The next request's
//! deadline is later; the earlier one fires (a wake-up of the connection
//! for nothing, at most one a timeout's length), and the `Sleep` is then
//! moved on to the deadline of the request waiting. So the wheel sees one
//! entry a timeout's length per connection instead of one a request, and
//! a head that takes too long still times out at its own deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

type Slot = Arc<Mutex<Option<Pin<Box<tokio::time::Sleep>>>>>;

/// One connection's timer (give each connection its own).
#[derive(Clone, Default)]
pub(crate) struct HeadTimer {
    slot: Slot,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HeadSleep {
            deadline: tokio::time::Instant::from_std(deadline),
            slot: self.slot.clone(),
        })
    }
}

/// A timeout hyper holds: done at `deadline`, waiting on the connection's
/// one tokio `Sleep`.
struct HeadSleep {
    deadline: tokio::time::Instant,
    slot: Slot,
}

impl hyper::rt::Sleep for HeadSleep {}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        // Only the connection's task polls it: the lock is never contended.
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let sleep = slot.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() > deadline {
            // Not seen from hyper (each request's deadline is later than
            // the one before), but a timer must not fire late.
            sleep.as_mut().reset(deadline);
        }
        loop {
            ready!(sleep.as_mut().poll(cx));
            if sleep.deadline() >= deadline {
                return Poll::Ready(());
            }
            // An earlier request's deadline went by: on to this one's.
            sleep.as_mut().reset(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Timer;

    #[tokio::test]
    async fn each_timeout_ends_at_its_own_deadline() {
        let timer = HeadTimer::default();
        let start = Instant::now();
        // One request's timeout, polled (the tokio Sleep goes into the
        // wheel at 100 ms) and dropped when its head is in.
        let mut first = timer.sleep_until(start + Duration::from_millis(100));
        let polled = tokio::time::timeout(Duration::from_millis(10), first.as_mut()).await;
        assert!(polled.is_err(), "not yet due");
        drop(first);
        // The next request's timeout is not done at the first's deadline
        // but at its own.
        let second = timer.sleep_until(start + Duration::from_millis(300));
        second.await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        // One already past its deadline is done at once, and an earlier
        // deadline than the Sleep's is not missed.
        let t = Instant::now();
        timer.sleep_until(t).await;
        timer.sleep(Duration::from_millis(20)).await;
        let third = timer.sleep_until(Instant::now() + Duration::from_secs(30));
        assert!(tokio::time::timeout(Duration::from_millis(50), third)
            .await
            .is_err());
        let fourth = Instant::now() + Duration::from_millis(40);
        timer.sleep_until(fourth).await;
        assert!(Instant::now() >= fourth);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
