//! How a streamed answer was delivered: what the client saw of it
//! ([`Received`]: its first body byte, its body's reads) set against how
//! the provider sent it ([`Sent`]: its head at the first token, its last
//! token, in pieces or whole), for `stream_intact`. [`delivery`] is the
//! one rule the one pass and the oracle apply to an answer and the call
//! that answered it; [`Deliveries`] is what they keep of every answer
//! judged, whatever the run's length: a histogram of the time the gateway
//! added to the first token, and counts.
//!
//! Both sides' times are on one clock (the in-process provider shares the
//! harness's; a staging run's records are moved onto it before they are
//! judged), so the time added is a plain difference.

use hdrhistogram::Histogram;
use wire::{ClientOutcome, ClientRecord, ProviderRecord};

use crate::timeline::{histogram, record};

/// A provider call answered with fewer completion tokens than this was not
/// sent in pieces worth counting: one or two reads are all it can take.
pub(crate) const MIN_PIECES: u32 = 4;

/// A stream whose tokens all went out within this many microseconds (its
/// head to its last token) may reach the client in one read however it is
/// relayed: the socket coalesces writes that close together. Rehearsal
/// time, not scenario time: coalescing is the machine's, the same at every
/// time scale.
pub(crate) const MIN_SPREAD_US: u64 = 20_000;

/// A stream whose body reached the client in less than this share of the
/// time its provider took to send it was held back and released in a
/// burst (its reads back to back).
pub(crate) const MIN_SPREAD_SHARE: f64 = 0.25;

/// How many reads of its body brought a streamed answer data: what tells
/// a relayed stream (about one read a token) from a lump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// The record says nothing (written before `body_reads` was kept).
    Unrecorded,
    /// One or two.
    Few,
    /// Three or more.
    Many,
}

/// What the client saw of a streamed answer: enough to set it against the
/// call that answered it, kept while the answer waits for its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    /// Its first body byte.
    pub(crate) first_byte_us: u64,
    /// The most its body's reads can have been spread over, in
    /// microseconds (saturating): from the first byte to the attempt's end,
    /// and no more than (reads − 1) × the longest gap between two reads.
    pub(crate) spread_us: u32,
    pub(crate) reads: Reads,
}

impl Received {
    /// What the client saw of `a`, if it is a streamed answer: it asked
    /// for a stream, ended `ok`, and got a first body byte.
    pub(crate) fn of(a: &ClientRecord) -> Option<Received> {
        if !a.stream || a.outcome != ClientOutcome::Ok {
            return None;
        }
        let first_byte_us = a.first_byte_us?;
        let to_end = a.done_us.saturating_sub(first_byte_us);
        let by_gaps = match (a.body_reads, a.longest_gap_us) {
            (Some(n), Some(gap)) => u64::from(n.saturating_sub(1)).saturating_mul(gap),
            _ => u64::MAX,
        };
        let reads = match a.body_reads {
            None => Reads::Unrecorded,
            Some(n) if n <= 2 => Reads::Few,
            Some(_) => Reads::Many,
        };
        Some(Received {
            first_byte_us,
            spread_us: u32::try_from(to_end.min(by_gaps)).unwrap_or(u32::MAX),
            reads,
        })
    }
}

/// How the provider sent an answer, as far as lumps go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pieces {
    /// Streamed, in at least [`MIN_PIECES`] tokens over at least
    /// [`MIN_SPREAD_US`]: a relay hands it on in many reads.
    Many,
    /// Streamed, but too few tokens or too close together to tell a relay
    /// from a lump.
    Few,
    /// Not streamed: the gateway asked for the whole answer at once, so the
    /// client's stream could not have begun before the last token.
    Whole,
}

/// How the provider sent the answer to a call: its head (for a stream,
/// right at its first token), how long after it its last token went
/// (microseconds, saturating: the judge holds one per call in its window),
/// and in how many pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) head_us: u64,
    pub(crate) took_us: u32,
    pub(crate) pieces: Pieces,
}

impl Sent {
    /// When its last token went out.
    pub(crate) fn last_token_us(&self) -> u64 {
        self.head_us.saturating_add(u64::from(self.took_us))
    }
}

impl Sent {
    /// How `c` was sent, if it has a head and an end. Only a call that
    /// completed (`tally::completed`) answered: the callers ask that first.
    pub(crate) fn of(c: &ProviderRecord) -> Option<Sent> {
        let head_us = c.first_byte_us?;
        let took_us = c.finished_us?.saturating_sub(head_us);
        let pieces = if !c.stream {
            if c.completion_tokens >= MIN_PIECES {
                Pieces::Whole
            } else {
                Pieces::Few
            }
        } else if c.completion_tokens >= MIN_PIECES && took_us >= MIN_SPREAD_US {
            Pieces::Many
        } else {
            Pieces::Few
        };
        Some(Sent {
            head_us,
            took_us: u32::try_from(took_us).unwrap_or(u32::MAX),
            pieces,
        })
    }
}

/// How a streamed answer came to be delivered in a lump, in the order a
/// delivery is classed (the first that holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lump {
    /// Its first byte reached the client no earlier than the provider's
    /// last token: held whole, then sent.
    AfterLastToken,
    /// The gateway asked the provider for a whole answer and handed it on
    /// as a stream.
    AskedWhole,
    /// It came in one or two reads though the provider sent many pieces.
    FewReads,
    /// Its reads came back to back: spread over less than
    /// [`MIN_SPREAD_SHARE`] of the time the provider took.
    Burst,
}

impl Lump {
    /// Every kind, in [`Deliveries::lumped`]'s order.
    pub(crate) const ALL: [Lump; 4] = [
        Lump::AfterLastToken,
        Lump::AskedWhole,
        Lump::FewReads,
        Lump::Burst,
    ];

    /// Its place in [`Deliveries::lumped`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One streamed answer judged: the time the gateway added to its first
/// token, and whether it came in pieces (`None`: not judged, for the
/// client's reads were not recorded or the provider's pieces were too few
/// to tell; `Some(None)`: in pieces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) added_us: u64,
    pub(crate) lump: Option<Option<Lump>>,
    /// Its client record lacked `body_reads` (an older run directory).
    pub(crate) reads_unrecorded: bool,
}

/// The rule: streamed answer `r`, answered by the call that sent `s`.
/// The time added is the client's first body byte less the provider's
/// head (never below 0: on one clock it cannot be). Lumps are judged only
/// when the client recorded its reads, and only of answers the provider
/// sent in many pieces or whole.
pub(crate) fn delivery(r: &Received, s: &Sent) -> Delivery {
    let added_us = r.first_byte_us.saturating_sub(s.head_us);
    let reads_unrecorded = r.reads == Reads::Unrecorded;
    let lump = match (r.reads, s.pieces) {
        (Reads::Unrecorded, _) | (_, Pieces::Few) => None,
        (_, Pieces::Whole) => Some(Some(Lump::AskedWhole)),
        (reads, Pieces::Many) => Some(if r.first_byte_us >= s.last_token_us() {
            Some(Lump::AfterLastToken)
        } else if reads == Reads::Few {
            Some(Lump::FewReads)
        } else if f64::from(r.spread_us) < MIN_SPREAD_SHARE * f64::from(s.took_us) {
            Some(Lump::Burst)
        } else {
            None
        }),
    };
    Delivery {
        added_us,
        lump,
        reads_unrecorded,
    }
}

/// What `stream_intact` reads: every streamed answer counted, those judged
/// against their call, the time added to their first token, and their
/// lumps by kind; a histogram and counts, whatever the run's length.
#[derive(Debug, Clone)]
pub(crate) struct Deliveries {
    /// Attempts that asked for a stream and were answered `ok`.
    pub(crate) answers: u64,
    /// Of them, those with a first byte joined to a call that answered
    /// them with a head: judged.
    pub(crate) judged: u64,
    /// The time the gateway added to each one's first token, microseconds.
    pub(crate) added: Histogram<u64>,
    /// Those judged for lumps (reads recorded, the provider's pieces many
    /// or the answer asked whole), and those lumped, by [`Lump::ALL`].
    pub(crate) lumps_judged: u64,
    pub(crate) lumped: [u64; 4],
    /// Those judged whose client record had no `body_reads`.
    pub(crate) reads_unrecorded: u64,
}

impl Deliveries {
    pub(crate) fn new() -> Self {
        Deliveries {
            answers: 0,
            judged: 0,
            added: histogram(),
            lumps_judged: 0,
            lumped: [0; 4],
            reads_unrecorded: 0,
        }
    }

    /// Counts attempt `a` if it is a streamed answer (whether or not it is
    /// ever judged).
    pub(crate) fn count(&mut self, a: &ClientRecord) {
        if a.stream && a.outcome == ClientOutcome::Ok {
            self.answers += 1;
        }
    }

    /// Adds one answer judged.
    pub(crate) fn add(&mut self, d: &Delivery) {
        self.judged += 1;
        record(&mut self.added, d.added_us);
        self.reads_unrecorded += u64::from(d.reads_unrecorded);
        if let Some(lump) = d.lump {
            self.lumps_judged += 1;
            if let Some(kind) = lump {
                self.lumped[kind.index()] += 1;
            }
        }
    }

    /// The answers judged for lumps that were lumped, of every kind.
    pub(crate) fn lumped_total(&self) -> u64 {
        self.lumped.iter().sum()
    }

    /// How many of kind `k` were lumped.
    pub(crate) fn of(&self, k: Lump) -> u64 {
        self.lumped[k.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stories::{at, attempt, call};

    /// A streamed answer sent at 0, its first byte at `first_ms`, ended at
    /// `done_ms`, its body in `reads` reads at most `gap_ms` apart.
    fn answer(first_ms: u64, done_ms: u64, reads: Option<(u32, u64)>) -> ClientRecord {
        let mut a = attempt("s", 1, 0, done_ms, ClientOutcome::Ok, None);
        a.stream = true;
        a.first_byte_us = Some(at(first_ms));
        a.body_reads = reads.map(|r| r.0);
        a.longest_gap_us = reads.map(|r| r.1 * 1000);
        a
    }

    /// A stream of `tokens` from its head at `head_ms` to `last_ms`.
    fn streamed(tokens: u32, head_ms: u64, last_ms: u64) -> ProviderRecord {
        let mut c = call("s", 0, 0, last_ms);
        c.stream = true;
        c.first_byte_us = Some(at(head_ms));
        c.completion_tokens = tokens;
        c
    }

    fn judged(a: &ClientRecord, c: &ProviderRecord) -> Delivery {
        delivery(
            &Received::of(a).expect("a streamed answer"),
            &Sent::of(c).expect("answered"),
        )
    }

    #[test]
    fn a_relayed_stream_is_in_pieces_and_adds_what_the_relay_took() {
        // 40 tokens from 300 ms, 50 ms apart: 41 reads a token apart.
        let d = judged(
            &answer(301, 2_252, Some((41, 52))),
            &streamed(40, 300, 2_250),
        );
        assert_eq!(d.added_us, 1_000);
        assert_eq!(d.lump, Some(None));
    }

    #[test]
    fn each_kind_of_lump_is_told() {
        let c = streamed(40, 300, 2_250);
        // Read whole, then sent: 3 reads of 4 KiB back to back.
        let d = judged(&answer(2_260, 2_261, Some((3, 0))), &c);
        assert_eq!(
            (d.added_us, d.lump),
            (1_960_000, Some(Some(Lump::AfterLastToken)))
        );
        // The first event at once, then the rest held to the end.
        let d = judged(&answer(301, 2_260, Some((2, 1_950))), &c);
        assert_eq!(d.lump, Some(Some(Lump::FewReads)));
        // Held until 1.9 s, then 12 reads back to back: its first byte
        // before the last token, its reads spread over 10 ms of 1.95 s.
        let d = judged(&answer(1_900, 2_255, Some((12, 1))), &c);
        assert_eq!(d.lump, Some(Some(Lump::Burst)));
        // Asked of the provider whole, handed on as a stream.
        let mut whole = streamed(40, 2_250, 2_250);
        whole.stream = false;
        let d = judged(&answer(2_251, 2_252, Some((1, 0))), &whole);
        assert_eq!(d.lump, Some(Some(Lump::AskedWhole)));
    }

    #[test]
    fn lumps_are_judged_only_of_what_can_tell_them() {
        // Three tokens: one read is all a relay may give.
        let d = judged(&answer(301, 400, Some((1, 0))), &streamed(3, 300, 399));
        assert_eq!(d.lump, None);
        // Forty tokens in 5 ms: the socket coalesces them.
        let d = judged(&answer(301, 306, Some((1, 0))), &streamed(40, 300, 305));
        assert_eq!(d.lump, None);
        // An older run: the added time alone.
        let d = judged(&answer(2_260, 2_261, None), &streamed(40, 300, 2_250));
        assert_eq!((d.added_us, d.lump), (1_960_000, None));
        assert!(d.reads_unrecorded);
        // A first byte "before" the head (clocks a little apart) adds 0.
        let d = judged(
            &answer(299, 2_250, Some((41, 52))),
            &streamed(40, 300, 2_250),
        );
        assert_eq!(d.added_us, 0);
    }

    #[test]
    fn only_streamed_answers_and_calls_with_a_head_count() {
        let mut a = answer(301, 2_252, Some((41, 52)));
        a.stream = false;
        assert_eq!(Received::of(&a), None);
        let mut a = answer(301, 2_252, Some((41, 52)));
        a.outcome = ClientOutcome::Reset;
        assert_eq!(Received::of(&a), None);
        let mut c = streamed(40, 300, 2_250);
        c.first_byte_us = None;
        assert_eq!(Sent::of(&c), None);
        let mut tally = Deliveries::new();
        tally.count(&answer(301, 2_252, None));
        tally.count(&a);
        tally.add(&judged(
            &answer(2_260, 2_261, Some((3, 0))),
            &streamed(40, 300, 2_250),
        ));
        assert_eq!((tally.answers, tally.judged, tally.lumps_judged), (1, 1, 1));
        assert_eq!(tally.of(Lump::AfterLastToken), 1);
        assert_eq!(tally.lumped_total(), 1);
    }
}
