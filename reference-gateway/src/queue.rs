//! The waiting room: jobs in arrival order, served FIFO or LIFO, and any job
//! removable at once when its caller hangs up.

use std::collections::BTreeMap;

use crate::config::Order;

/// Jobs waiting for a slot, keyed by arrival sequence number.
///
/// A `BTreeMap` rather than a `VecDeque`: a caller that hangs up removes its
/// own entry by key in O(log n), so a dead job never holds a queue place.
#[derive(Debug)]
pub(crate) struct WaitQueue<T> {
    order: Order,
    next_seq: u64,
    jobs: BTreeMap<u64, T>,
}

impl<T> WaitQueue<T> {
    pub(crate) fn new(order: Order) -> Self {
        WaitQueue {
            order,
            next_seq: 0,
            jobs: BTreeMap::new(),
        }
    }

    /// Adds a job and returns its key.
    pub(crate) fn push(&mut self, job: T) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.jobs.insert(seq, job);
        seq
    }

    /// Takes the job to serve next: the oldest (FIFO) or the newest (LIFO).
    pub(crate) fn pop(&mut self) -> Option<T> {
        match self.order {
            Order::Fifo => self.jobs.pop_first().map(|(_, j)| j),
            Order::Lifo => self.jobs.pop_last().map(|(_, j)| j),
        }
    }

    /// Removes the job with key `seq`, if it is still waiting.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<T> {
        self.jobs.remove(&seq)
    }

    /// The jobs in the order they are served.
    pub(crate) fn in_order(&self) -> Box<dyn Iterator<Item = &T> + '_> {
        match self.order {
            Order::Fifo => Box::new(self.jobs.values()),
            Order::Lifo => Box::new(self.jobs.values().rev()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_serves_the_oldest_first() {
        let mut q = WaitQueue::new(Order::Fifo);
        for i in 0..4 {
            q.push(i);
        }
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(0), Some(1), Some(2), Some(3), None)
        );
    }

    #[test]
    fn lifo_serves_the_newest_first() {
        let mut q = WaitQueue::new(Order::Lifo);
        for i in 0..3 {
            q.push(i);
        }
        assert_eq!(q.pop(), Some(2));
        q.push(9);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(9), Some(1), Some(0), None)
        );
    }

    #[test]
    fn a_removed_job_frees_its_place_and_is_never_served() {
        let mut q = WaitQueue::new(Order::Fifo);
        let a = q.push("a");
        let b = q.push("b");
        q.push("c");
        assert_eq!(q.remove(b), Some("b"));
        assert_eq!(q.remove(b), None, "removing twice is harmless");
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.remove(a), None, "a served job is no longer waiting");
        assert_eq!(q.pop(), Some("c"));
        assert!(q.is_empty());
    }
}
