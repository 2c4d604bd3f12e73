//! The people the judge holds: each person whose attempts may still come
//! or still be joined ([`Person`]), with the queues that say when their
//! attempts settle and when they are done, and a [`Compact`] entry for each
//! person done whose last attempt went unanswered.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash as _, Hasher};

use super::records::Attempt;
use crate::calendar::Calendar;

/// A hasher for keys that are already hashes or counters: one multiply,
/// so the table's control bytes still see mixed bits.
#[derive(Default)]
pub(super) struct Mixed(u64);

impl Hasher for Mixed {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A table by person (the id's hash).
pub(super) type Map<V> = HashMap<u64, V, BuildHasherDefault<Mixed>>;

/// A person's id as the judge knows it.
pub(super) fn id_hash(id: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// A person whose attempts may still come or still be joined.
#[derive(Debug, Default)]
pub(super) struct Person {
    /// Released attempts, in send order; the last one's window is open.
    pub(super) attempts: Vec<Attempt>,
    /// When the person is done: no attempt and no call for them can still
    /// be released.
    pub(super) done_at: u64,
}

/// A person done, whose last attempt ended without an answer: kept to the
/// end of the run for a call a gateway may still make for them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Compact {
    pub(super) sent_us: u64,
    pub(super) done_us: u64,
    /// A call joined it already.
    pub(super) matched: bool,
    /// A late answer to it was counted already.
    pub(super) late: bool,
    /// Its caller gave up (`tally::caller_gave_up`).
    pub(super) gave_up: bool,
}

/// An attempt of a person, by its place among their attempts, filed at an
/// instant (its send, or its settling time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct AttemptAt {
    pub(super) at_us: u64,
    pub(super) person: u64,
    pub(super) index: usize,
}

/// A person, filed at the instant they are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct DoneAt {
    pub(super) at_us: u64,
    pub(super) person: u64,
}

/// The people part of the judge's state.
pub(super) struct People {
    /// People not yet done.
    pub(super) open: Map<Person>,
    /// Their attempts, all together.
    pub(super) attempts: usize,
    /// Unsettled attempts by send time, in send order (some settled ones
    /// not yet dropped from the front).
    pub(super) unsettled: VecDeque<AttemptAt>,
    /// Unsettled attempts by the time they settle without a call.
    pub(super) settle_at: Calendar<AttemptAt>,
    /// People by the time they are done.
    pub(super) done_at: Calendar<DoneAt>,
    /// People done whose last attempt went unanswered (to the end).
    pub(super) compact: Map<Compact>,
}

impl People {
    pub(super) fn new() -> Self {
        People {
            open: Map::default(),
            attempts: 0,
            unsettled: VecDeque::new(),
            settle_at: Calendar::new(),
            done_at: Calendar::new(),
            compact: Map::default(),
        }
    }

    /// Attempt `index` of `person`, if they are not done.
    pub(super) fn attempt_mut(&mut self, person: u64, index: usize) -> Option<&mut Attempt> {
        self.open
            .get_mut(&person)
            .and_then(|p| p.attempts.get_mut(index))
    }
}
