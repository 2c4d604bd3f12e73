//! A sub-millisecond timer for the provider's scripted delays.
//!
//! Tokio's timer wheel has millisecond ticks and rounds every deadline up
//! to the next one, so a scripted 12 s answer came back 1.2 ms late at the
//! median and over 2 ms late at the 99th percentile with 10,000 calls in
//! flight. Scripted latency is the product here, so the delays use this
//! timer instead: one thread of its own keeps the deadlines in a heap and
//! sleeps with the OS's high-resolution sleep (timer slack cut to a
//! microsecond) until the earliest is due, then wakes its task.
//!
//! A [`Sleep`] dropped before its deadline (the caller hung up) gives its
//! waker back at once, so the task's memory is not held until the deadline;
//! only a small slot stays in the heap until then.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Waits until `at`, to within the OS's wake-up latency (tens of
/// microseconds) rather than tokio's millisecond.
pub fn sleep_until(at: Instant) -> Sleep {
    Sleep { at, slot: None }
}

/// The future [`sleep_until`] returns.
pub struct Sleep {
    at: Instant,
    slot: Option<Arc<Slot>>,
}

/// What the timer thread and one [`Sleep`] share.
struct Slot {
    waker: Mutex<Option<Waker>>,
    fired: AtomicBool,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        match &self.slot {
            Some(slot) => {
                // `fired` is read under the waker's lock: the timer thread
                // sets it before it takes the waker under that lock, so
                // either it is seen here or the waker stored here is the
                // one the timer wakes.
                let mut waker = lock(&slot.waker);
                if slot.fired.load(Ordering::Acquire) {
                    drop(waker);
                    // Due (by the timer's clock); the check at the top
                    // answers, or a fresh slot waits for what is left.
                    self.slot = None;
                    return self.poll(cx);
                }
                match waker.as_ref() {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
            }
            None => {
                let slot = Arc::new(Slot {
                    waker: Mutex::new(Some(cx.waker().clone())),
                    fired: AtomicBool::new(false),
                });
                timer().insert(self.at, slot.clone());
                self.slot = Some(slot);
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // Let the task go now; the slot itself waits in the heap.
            lock(&slot.waker).take();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing here can leave the data half-written, so a poisoned lock is
    // still good to use.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Entry {
    at: Instant,
    seq: u64,
    slot: Arc<Slot>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so the max-heap gives the earliest deadline first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Heap {
    entries: BinaryHeap<Entry>,
    seq: u64,
    /// The heap's length after the last purge of abandoned entries.
    purged_len: usize,
}

impl Heap {
    /// Drops the entries whose [`Sleep`] is gone (a caller hung up before
    /// the deadline), once the heap has doubled since the last purge, so a
    /// run where many callers give up on long delays does not keep their
    /// slots until the deadlines. Amortized O(1) per insertion.
    fn purge_if_grown(&mut self) {
        if self.entries.len() < 2 * self.purged_len.max(1024) {
            return;
        }
        self.entries.retain(|e| Arc::strong_count(&e.slot) > 1);
        if self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to(self.entries.len() * 2);
        }
        self.purged_len = self.entries.len();
    }
}

struct Timer {
    heap: Mutex<Heap>,
    changed: Condvar,
}

/// Rounds of wake-ups are at least this far apart: deadlines that fall due
/// during the gap are woken together in the next round, at most this late.
/// Streaming 1,000 calls at 10 ms a token makes 100,000 deadlines a second;
/// woken one at a time they kept the timer thread a third of a core busy
/// (3.3 s of CPU in 10 s), in rounds 1.3 s. (Tokio's wheel makes rounds of
/// a millisecond.)
const MIN_GAP: std::time::Duration = std::time::Duration::from_micros(100);

impl Timer {
    fn insert(&self, at: Instant, slot: Arc<Slot>) {
        let mut heap = lock(&self.heap);
        heap.purge_if_grown();
        let earliest = heap.entries.peek().is_none_or(|e| at < e.at);
        heap.seq += 1;
        let seq = heap.seq;
        heap.entries.push(Entry { at, seq, slot });
        drop(heap);
        if earliest {
            self.changed.notify_one();
        }
    }

    /// The timer thread: wake every due entry, then sleep until the next
    /// is due, and never start a round sooner than [`MIN_GAP`] after the
    /// last (whatever woke the thread).
    fn run(&self) {
        let mut due = Vec::new();
        let mut last_round = Instant::now();
        let mut heap = lock(&self.heap);
        loop {
            let now = Instant::now();
            if now >= last_round + MIN_GAP {
                while heap.entries.peek().is_some_and(|e| e.at <= now) {
                    if let Some(entry) = heap.entries.pop() {
                        due.push(entry.slot);
                    }
                }
            }
            if !due.is_empty() {
                last_round = now;
                drop(heap);
                for slot in due.drain(..) {
                    slot.fired.store(true, Ordering::Release);
                    let waker = lock(&slot.waker).take();
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                heap = lock(&self.heap);
                continue;
            }
            heap = match heap.entries.peek().map(|e| e.at) {
                None => self.changed.wait(heap).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let wait = at.max(last_round + MIN_GAP).saturating_duration_since(now);
                    self.changed
                        .wait_timeout(heap, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// The one timer of the process, its thread started on first use.
fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            heap: Mutex::new(Heap::default()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("provider-timer".into())
            .spawn(move || {
                sharpen();
                timer.run()
            })
            .expect("spawning the provider's timer thread");
        timer
    })
}

/// Makes the calling (timer) thread wake on time: a timer slack of one
/// microsecond instead of Linux's default 50, and the lowest real-time
/// priority where the OS allows it, so a wake-up does not wait for a busy
/// worker's time slice to end. It only sleeps and wakes tasks, so it cannot
/// starve the workers. Either may be refused; the timer then works, less
/// sharply.
fn sharpen() {
    #[cfg(target_os = "linux")]
    // SAFETY: both calls change only the calling thread's own settings and
    // take no pointers that outlive them.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
        let param = libc::sched_param { sched_priority: 1 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            tracing::debug!("the provider's timer thread runs at normal priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How late the timer fires, for tests: the time from `at` to the wake-up.
    /// Panics if it fires early.
    async fn lateness(after: Duration) -> Duration {
        let at = Instant::now() + after;
        sleep_until(at).await;
        let now = Instant::now();
        assert!(now >= at, "woke {:?} early", at - now);
        now - at
    }

    #[tokio::test]
    async fn wakes_after_the_deadline_never_before() {
        for ms in [0, 1, 3, 7] {
            let late = lateness(Duration::from_millis(ms)).await;
            // Never early; how late is for the benchmark, not a test.
            assert!(late < Duration::from_secs(5), "{late:?}");
        }
    }

    #[tokio::test]
    async fn many_sleeps_each_fire_after_their_deadline() {
        let start = Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in (0..50u64).rev() {
            let tx = tx.clone();
            tokio::spawn(async move {
                sleep_until(start + Duration::from_millis(2 * i + 5)).await;
                let _ = tx.send((i, Instant::now()));
            });
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some((i, when)) = rx.recv().await {
            assert!(when >= start + Duration::from_millis(2 * i + 5));
            got.push(i);
        }
        assert_eq!(got.len(), 50);
    }

    #[tokio::test]
    async fn an_abandoned_sleep_does_not_block_later_ones() {
        let task = tokio::spawn(async {
            sleep_until(Instant::now() + Duration::from_secs(3600)).await;
        });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        task.abort();
        let err = task.await.expect_err("aborted");
        assert!(err.is_cancelled());
        // A later, earlier deadline still fires: the stale slot does not
        // block the heap.
        let late = lateness(Duration::from_millis(2)).await;
        assert!(late < Duration::from_secs(5));
    }

    #[test]
    fn the_latest_waker_is_the_one_woken() {
        use std::sync::atomic::AtomicUsize;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let mut sleep = Box::pin(sleep_until(Instant::now() + Duration::from_millis(20)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&wa))
            .is_pending());
        // Polled again from another context (as in a select): that waker
        // replaces the first.
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&wb))
            .is_pending());
        let give_up = Instant::now() + Duration::from_secs(10);
        while b.0.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < give_up, "never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(a.0.load(Ordering::SeqCst), 0);
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&wb))
            .is_ready());
    }

    #[test]
    fn abandoned_entries_are_purged_once_the_heap_doubles() {
        let mut heap = Heap::default();
        let far = Instant::now() + Duration::from_secs(3600);
        let kept: Vec<Arc<Slot>> = (0..10)
            .map(|_| {
                Arc::new(Slot {
                    waker: Mutex::new(None),
                    fired: AtomicBool::new(false),
                })
            })
            .collect();
        for (seq, slot) in kept.iter().enumerate() {
            let slot = slot.clone();
            heap.entries.push(Entry {
                at: far,
                seq: seq as u64,
                slot,
            });
        }
        // 3,000 abandoned: only the heap holds their slots.
        for seq in 10..3010 {
            heap.purge_if_grown();
            let slot = Arc::new(Slot {
                waker: Mutex::new(None),
                fired: AtomicBool::new(false),
            });
            heap.entries.push(Entry { at: far, seq, slot });
        }
        assert!(heap.entries.len() < 3010, "never purged");
        heap.purged_len = 0;
        heap.entries.retain(|e| Arc::strong_count(&e.slot) > 1);
        assert_eq!(heap.entries.len(), 10, "the live entries are all kept");
    }

    #[test]
    fn drop_takes_the_waker_back() {
        let mut sleep = Box::pin(sleep_until(Instant::now() + Duration::from_secs(3600)));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        let slot = sleep.slot.clone().expect("registered");
        assert!(lock(&slot.waker).is_some());
        drop(sleep);
        assert!(lock(&slot.waker).is_none());
    }
}
