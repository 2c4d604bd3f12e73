//! A calendar queue: items filed by time into 10 ms buckets, each bucket
//! sorted once when its time has passed. The judge's queues hold a window
//! of a busy run (a million items and more); a binary heap that large
//! spends its time waiting on memory, a bucket is sorted in cache.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// The width of a bucket.
const WIDTH_US: u64 = 10_000;
/// Buckets kept ahead (about 11 minutes); later items wait in a heap.
const SPAN: u64 = 1 << 16;

/// Items of type `T` (ordered as they must come out) filed by time.
pub(crate) struct Calendar<T> {
    /// The first bucket's start, a multiple of the width.
    base: u64,
    buckets: VecDeque<Vec<T>>,
    /// Items beyond the buckets' span, with their times.
    far: BinaryHeap<Reverse<(u64, T)>>,
    len: usize,
    /// Emptied buckets, for reuse.
    spare: Vec<Vec<T>>,
}

impl<T: Ord + Copy> Calendar<T> {
    pub(crate) fn new() -> Self {
        Calendar {
            base: 0,
            buckets: VecDeque::new(),
            far: BinaryHeap::new(),
            len: 0,
            spare: Vec::new(),
        }
    }

    /// Items waiting.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every item before this instant has been taken.
    pub(crate) fn taken_before(&self) -> u64 {
        self.base
    }

    /// Files `item` at `t`, which is no earlier than [`Self::taken_before`]
    /// (an earlier one is filed there).
    pub(crate) fn push(&mut self, t: u64, item: T) {
        self.len += 1;
        let i = (t.saturating_sub(self.base) / WIDTH_US) as usize;
        if i as u64 >= SPAN {
            self.far.push(Reverse((t, item)));
            return;
        }
        while self.buckets.len() <= i {
            let empty = self.spare.pop().unwrap_or_default();
            self.buckets.push_back(empty);
        }
        self.buckets[i].push(item);
    }

    /// The next bucket whose time is wholly before `until`, sorted; `None`
    /// if there is none (the next one is not over yet). Nothing may be
    /// filed before `until` afterwards.
    pub(crate) fn next_before(&mut self, until: u64) -> Option<Vec<T>> {
        loop {
            if self.len == 0 {
                // Nothing waiting: nothing can still come before `until`.
                let to = until - until % WIDTH_US;
                if to > self.base {
                    self.base = to;
                    let emptied: Vec<Vec<T>> = self.buckets.drain(..).collect();
                    self.spare.extend(emptied);
                }
                return None;
            }
            if self.base.saturating_add(WIDTH_US) > until {
                return None;
            }
            if self.buckets.is_empty() {
                // Only far items: jump towards the first of them, never past
                // `until` (an item may still come for any time after it).
                let Reverse((t, _)) = *self.far.peek()?;
                let to = t.min(until);
                let to = to - to % WIDTH_US;
                if to <= self.base {
                    return None;
                }
                self.base = to;
                self.bring_near();
                continue;
            }
            let bucket = self.buckets.pop_front().unwrap_or_default();
            self.base = self.base.saturating_add(WIDTH_US);
            self.bring_near();
            if bucket.is_empty() {
                self.spare.push(bucket);
                continue;
            }
            self.len -= bucket.len();
            let mut bucket = bucket;
            bucket.sort_unstable();
            return Some(bucket);
        }
    }

    /// Hands back a bucket's storage once its items are walked.
    pub(crate) fn recycle(&mut self, mut bucket: Vec<T>) {
        bucket.clear();
        self.spare.push(bucket);
    }

    /// Every item left, sorted.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut all: Vec<T> = self.buckets.drain(..).flatten().collect();
        all.extend(self.far.drain().map(|Reverse((_, item))| item));
        all.sort_unstable();
        self.len = 0;
        all
    }

    /// Moves far items that are now within the buckets' span into them.
    fn bring_near(&mut self) {
        let horizon = self.base.saturating_add(SPAN * WIDTH_US);
        while let Some(&Reverse((t, item))) = self.far.peek() {
            if t >= horizon {
                break;
            }
            self.far.pop();
            self.len -= 1;
            self.push(t.max(self.base), item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_order_bucket_by_bucket() {
        let mut c = Calendar::new();
        let far = 20 * 60 * 1_000_000;
        for (t, v) in [(25_000, 3), (1_000, 1), (far, 9), (12_000, 2), (12_000, 1)] {
            c.push(t, (t, v));
        }
        assert_eq!(c.len(), 5);
        // The bucket of 1 ms is over at 10 ms, not before.
        assert_eq!(c.next_before(9_999), None);
        assert_eq!(c.next_before(10_000), Some(vec![(1_000, 1)]));
        assert_eq!(c.next_before(29_999), Some(vec![(12_000, 1), (12_000, 2)]));
        assert_eq!(c.next_before(29_999), None);
        assert_eq!(c.taken_before(), 20_000);
        c.push(21_000, (21_000, 0));
        assert_eq!(
            c.next_before(far + 10_000),
            Some(vec![(21_000, 0), (25_000, 3)])
        );
        assert_eq!(c.next_before(far + 10_000), Some(vec![(far, 9)]));
        assert_eq!(c.len(), 0);
        c.push(far + 5, (far + 5, 1));
        c.push(far + 3 * far, (4 * far, 1));
        assert_eq!(c.drain(), vec![(far + 5, 1), (4 * far, 1)]);
    }
}
