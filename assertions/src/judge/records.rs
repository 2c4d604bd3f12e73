//! What the judge keeps of each record ([`Attempt`], [`Call`], the names
//! they repeat), and the records waiting to be released in start order
//! ([`Pending`]; the window is in the judge's module docs).

use wire::{ClientOutcome, ProviderEnd, ProviderOutcome};

use crate::calendar::Calendar;
use crate::delivery::{Received, Sent};
use crate::tally::RelayedRetryAfter;

/// What the judge keeps of an attempt.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    /// Its place in `client.jsonl` (ties are broken by it, as in the file).
    pub(super) seq: u64,
    pub(super) attempt: u32,
    pub(super) outcome: ClientOutcome,
    /// Its departure from the gateway is known and handed to the sweep.
    pub(super) settled: bool,
    /// A call joined it as its first.
    pub(super) matched: bool,
    /// An answer to it came after it had ended, and was counted late: a
    /// gateway's retries of the provider's refusals give it several.
    pub(super) late: bool,
    /// Its Retry-After came in a header of 1 ms granularity
    /// (`retry-after-ms`), not of a second.
    pub(super) retry_after_fine: bool,
    /// The latest call joined to it that was cut or completed was cut: an
    /// `ok` answer to it was cut short (see `tally::cut_mid_stream`).
    pub(super) cut_pending: bool,
    pub(super) intended_us: u64,
    pub(super) sent_us: u64,
    pub(super) done_us: u64,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) patience_ms: u64,
    pub(super) status: Option<u16>,
    /// The gateway's reason and the tenant, as indexes into the judge's
    /// [`Names`].
    pub(super) reason: Option<u16>,
    pub(super) tenant: Option<u16>,
    /// A streamed answer: what the client saw of it, until the call that
    /// answered it joins (then taken, so that it is judged once).
    pub(super) received: Option<Received>,
    /// How the latest call for it received before its answer ended; `None`
    /// while none has been (so none reached a provider before its answer).
    pub(super) latest: Option<LatestCall>,
    /// How it is counted, once the judge has classed it (an answer that
    /// was not a success: `wire::ClientOutcome::joined`); `None` before,
    /// and for any other outcome, counted as it came.
    pub(super) counted: Option<ClientOutcome>,
}

/// How the latest call for an attempt that reached a provider before its
/// answer ended ([`ProviderEnd`]); for a refusal, what the answer did with the
/// provider's Retry-After. One byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LatestCall {
    Refused(RelayedRetryAfter),
    Failed,
    GaveUp,
    Answered,
}

impl LatestCall {
    pub(super) fn new(end: ProviderEnd, relayed: RelayedRetryAfter) -> LatestCall {
        match end {
            ProviderEnd::Refused => LatestCall::Refused(relayed),
            ProviderEnd::Failed => LatestCall::Failed,
            ProviderEnd::GaveUp => LatestCall::GaveUp,
            ProviderEnd::Answered => LatestCall::Answered,
        }
    }

    pub(super) fn end(self) -> ProviderEnd {
        match self {
            LatestCall::Refused(_) => ProviderEnd::Refused,
            LatestCall::Failed => ProviderEnd::Failed,
            LatestCall::GaveUp => ProviderEnd::GaveUp,
            LatestCall::Answered => ProviderEnd::Answered,
        }
    }
}

/// What the judge keeps of a call.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) received_us: u64,
    pub(super) admitted_us: Option<u64>,
    pub(super) finished_us: Option<u64>,
    pub(super) hung_up_us: Option<u64>,
    /// Prompt plus completion tokens (saturating: a call of 4 billion
    /// tokens is none a provider answers).
    pub(super) tokens: u32,
    pub(super) outcome: ProviderOutcome,
    pub(super) status: u16,
    /// Cut mid-stream, and completed (`tally::cut_mid_stream`,
    /// `tally::completed`).
    pub(super) cut: bool,
    pub(super) completed: bool,
    /// Its provider, as an index into the judge's `Routing`.
    pub(super) provider: u16,
    /// The Retry-After it announced, milliseconds (none, or 0: `None`).
    pub(super) retry_after_ms: Option<std::num::NonZeroU32>,
    /// How it sent its answer, if it completed (for `stream_intact`).
    pub(super) sent: Option<Sent>,
    /// When its tokens were made, for `cancel_on_hangup`
    /// (`tally::Generation`): from this long after its receipt
    /// (saturating: 71 minutes is past any window), this many.
    pub(super) generating_after_us: u32,
    pub(super) completion_tokens: u32,
}

impl Call {
    /// When its tokens were made (`tally::Generation`).
    pub(super) fn generation(&self) -> crate::tally::Generation {
        crate::tally::Generation {
            from_us: self.received_us + u64::from(self.generating_after_us),
            completion_tokens: self.completion_tokens,
        }
    }
}

/// The few distinct strings records repeat (reasons, tenants), each kept
/// once; an attempt holds its index.
#[derive(Default)]
pub(super) struct Names(Vec<String>);

impl Names {
    /// The index of `name`; past 65,535 distinct names, `None` (a reason
    /// or tenant that many is not a label but noise).
    pub(super) fn index(&mut self, name: Option<&str>) -> Option<u16> {
        let name = name?;
        if let Some(i) = self.0.iter().position(|n| n == name) {
            return u16::try_from(i).ok();
        }
        let i = u16::try_from(self.0.len()).ok()?;
        self.0.push(name.to_owned());
        Some(i)
    }

    pub(super) fn get(&self, i: Option<u16>) -> Option<&str> {
        i.and_then(|i| self.0.get(usize::from(i)))
            .map(String::as_str)
    }
}

/// A record waiting to be released, in a slab slot.
pub(super) enum Record {
    Attempt(Attempt),
    Call(Call),
}

/// Where a record comes in the release order: by its start (an attempt's
/// send, a call's receipt); at one instant attempts before calls, attempts
/// by their number; then by the record's place in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Release {
    pub(super) start_us: u64,
    pub(super) side: Side,
    pub(super) seq: u64,
}

/// Which file a record comes from, in the order records of one instant are
/// released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Side {
    Attempt { number: u32 },
    Call,
}

/// Records waiting to be released, in start order: small keys in a
/// calendar (the records themselves stay put in a slab).
pub(super) struct Pending {
    /// Each record's place in the release order, with its slot.
    queue: Calendar<(Release, usize)>,
    /// The records, with their person (the id's hash).
    slots: Vec<Option<(u64, Record)>>,
    free: Vec<usize>,
}

impl Pending {
    pub(super) fn new() -> Self {
        Pending {
            queue: Calendar::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, release: Release, person: u64, record: Record) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some((person, record));
                i
            }
            None => {
                self.slots.push(Some((person, record)));
                self.slots.len() - 1
            }
        };
        self.queue.push(release.start_us, (release, slot));
    }

    /// The next bucket of keys wholly before `until`, in release order
    /// (see [`Calendar::next_before`]).
    pub(super) fn next_before(&mut self, until: u64) -> Option<Vec<(Release, usize)>> {
        self.queue.next_before(until)
    }

    /// Hands back a bucket's storage.
    pub(super) fn recycle(&mut self, bucket: Vec<(Release, usize)>) {
        self.queue.recycle(bucket);
    }

    /// Every record that starts before this instant has been taken.
    pub(super) fn taken_before(&self) -> u64 {
        self.queue.taken_before()
    }

    /// Takes the record in `slot`, with its person.
    pub(super) fn take(&mut self, slot: usize) -> Option<(u64, Record)> {
        let taken = self.slots[slot].take();
        self.free.push(slot);
        taken
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}
