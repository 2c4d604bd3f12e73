//! The release clock (P behind the latest end fed): records fed, held
//! until nothing can start before them, then released in start order,
//! each attempt and call to its person.

use wire::ProviderOutcome;

use super::people::{id_hash, AttemptAt, DoneAt};
use super::records::{Call, Record, Release, Side};
use super::values::Value;
use super::*;
use crate::delivery::{Received, Sent};
use crate::routing::{RoutedCall, ALL_COOLING};
use crate::sweep::Level;
use crate::tally::{self};
use crate::timeline::record;

impl Judge {
    /// Feeds the attempt that is `seq`th in its file.
    pub(super) fn feed_attempt(&mut self, a: ClientRecord, seq: u64) {
        // Judged from when it left the client for the gateway: a wait in
        // the client for a connection (a busy pool, the connect rate) is
        // the callers', in the latency from the intended send but never in
        // the gateway's queue or depth. (What a record from before
        // `client_wait_us` said as its sent time.)
        let a = ClientRecord {
            sent_us: a.on_the_wire_us(),
            client_wait_us: 0,
            ..a
        };
        self.progress.attempts_fed += 1;
        self.count_attempt(&a);
        self.window.saw_attempt(&a);
        if a.sent_us < self.window.released_to {
            self.progress.out_of_order += 1;
        }
        let names = &mut self.figures.names;
        let attempt = Attempt {
            seq,
            attempt: a.attempt,
            outcome: a.outcome,
            settled: false,
            matched: false,
            late: false,
            retry_after_fine: a.retry_after_granularity_ms() == 1,
            cut_pending: false,
            intended_us: a.intended_us,
            sent_us: a.sent_us,
            done_us: a.done_us,
            retry_after_ms: a.retry_after_ms,
            patience_ms: a.patience_ms,
            status: a.status,
            reason: names.index(a.reason.as_deref()),
            tenant: names.index(a.tenant.as_deref()),
            received: Received::of(&a),
            latest: None,
            counted: None,
        };
        let release = Release {
            start_us: a.sent_us,
            side: Side::Attempt { number: a.attempt },
            seq,
        };
        self.pending
            .push(release, id_hash(&a.id), Record::Attempt(attempt));
        self.fed();
    }

    /// Feeds the call that is `seq`th in its file.
    pub(super) fn feed_call(&mut self, c: ProviderRecord, seq: u64) {
        self.progress.calls_fed += 1;
        let last = call_end_us(&c);
        // Its end as far as the records go (a first byte is no end).
        let end = [c.admitted_us, c.finished_us, c.hung_up_us]
            .into_iter()
            .flatten()
            .fold(c.received_us, u64::max);
        self.progress.reached(end);
        self.window.saw_call(c.received_us, last);
        if c.received_us < self.window.released_to {
            self.progress.out_of_order += 1;
        }
        let completed = tally::completed(&c);
        let call = Call {
            received_us: c.received_us,
            admitted_us: c.admitted_us,
            finished_us: c.finished_us,
            hung_up_us: c.hung_up_us,
            tokens: u32::try_from(c.tokens()).unwrap_or(u32::MAX),
            outcome: c.outcome,
            status: c.status,
            cut: tally::cut_mid_stream(&c),
            completed,
            provider: u16::try_from(self.routing.index(c.provider_name())).unwrap_or(u16::MAX),
            retry_after_ms: tally::provider_wait_ms(&c)
                .and_then(|ms| std::num::NonZeroU32::new(u32::try_from(ms).unwrap_or(u32::MAX))),
            sent: if completed { Sent::of(&c) } else { None },
            generating_after_us: u32::try_from(
                tally::Generation::of(&c)
                    .from_us
                    .saturating_sub(c.received_us),
            )
            .unwrap_or(u32::MAX),
            completion_tokens: c.completion_tokens,
        };
        let release = Release {
            start_us: c.received_us,
            side: Side::Call,
            seq,
        };
        self.pending
            .push(release, id_hash(&c.id), Record::Call(call));
        self.fed();
    }

    /// The counts an attempt adds wherever it falls: per second (offered,
    /// sent, how it ended) and for the run.
    pub(super) fn count_attempt(&mut self, a: &ClientRecord) {
        let joins = self.joins(a.outcome);
        self.progress
            .reached(a.done_us.max(a.sent_us).max(a.intended_us));
        let f = &mut self.figures;
        f.tally.attempts += 1;
        f.counts.sent += 1;
        if a.attempt <= 1 {
            f.counts.offered += 1;
            let s = self.rows.second_of(a.intended_us);
            self.rows.row(s).offered += 1;
        }
        let s = self.rows.second_of(a.sent_us);
        self.rows.row(s).sent += 1;
        if a.outcome == ClientOutcome::Ok {
            if let Some((from, to)) = self.expect.overload {
                if from <= a.done_us && a.done_us < to {
                    f.tally.answered_in_overload += 1;
                }
            }
        }
        if let Some(t) = a.tenant.as_deref() {
            let t = f.names.index(Some(t));
            let c = f.tenants.entry(t.unwrap_or(u16::MAX)).or_default();
            c.sent += 1;
            c.offered += u64::from(a.attempt <= 1);
        }
        // An answer that was not a success is counted when its class is
        // known (at its settling, or when its person is done).
        if !joins {
            f.ended(&mut self.rows, a.done_us, a.tenant.as_deref(), a.outcome);
        }
        // One the load generator never sent never reached the gateway: no
        // loss of its (the run's notes say why it was not sent).
        if let Some(k) = Tally::lost_kind(a.outcome).filter(|_| !a.was_not_sent()) {
            f.tally.lost[k] += 1;
        }
        if f.deaths.lost(a) {
            f.lost += 1;
        }
        f.distribution.add(a);
        f.tally.deliveries.count(a);
    }

    /// After each record: release what the window allows, note the peak.
    pub(super) fn fed(&mut self) {
        let bound = self.window.release_bound();
        if bound > self.window.released_to {
            self.advance(bound);
        }
        self.progress.peak_held = self.progress.peak_held.max(self.held().windowed());
    }

    /// Releases every record that starts before `bound`, in start order,
    /// and sweeps as far as everything is known.
    pub(super) fn advance(&mut self, bound: u64) {
        while let Some(bucket) = self.pending.next_before(bound) {
            for &(release, slot) in &bucket {
                let Some((person, record)) = self.pending.take(slot) else {
                    continue;
                };
                self.pass_time(release.start_us);
                match record {
                    Record::Attempt(a) => self.release_attempt(person, a),
                    Record::Call(c) => self.release_call(person, &c),
                }
            }
            self.pending.recycle(bucket);
        }
        self.pass_time(self.pending.taken_before());
        while let Some(&front) = self.people.unsettled.front() {
            match self.people.attempt_mut(front.person, front.index) {
                Some(a) if !a.settled => break,
                _ => {
                    self.people.unsettled.pop_front();
                }
            }
        }
        let released_to = self.window.released_to;
        let until = self
            .people
            .unsettled
            .front()
            .map_or(released_to, |u| u.at_us.min(released_to));
        self.sweep.run(until, self.progress.end_us, &mut self.rows);
    }

    /// An attempt, released at its send: it closes its person's previous
    /// attempt's window and opens its own.
    pub(super) fn release_attempt(&mut self, person: u64, a: Attempt) {
        let settle_at = a.done_us.saturating_add(self.window.settling_us());
        let done_at = settle_at.max(
            a.intended_us
                .saturating_add(a.patience_ms.saturating_mul(1000))
                .saturating_add(MARGIN_US),
        );
        let p = self.people.open.entry(person).or_default();
        let previous = p.attempts.len().checked_sub(1);
        let index = p.attempts.len();
        p.attempts.push(a.clone());
        let later = done_at > p.done_at;
        p.done_at = p.done_at.max(done_at);
        if later {
            self.people.done_at.push(
                done_at,
                DoneAt {
                    at_us: done_at,
                    person,
                },
            );
        }
        if let Some(prev) = previous {
            self.settle(person, prev, None);
        }
        self.people.attempts += 1;
        self.people.unsettled.push_back(AttemptAt {
            at_us: a.sent_us,
            person,
            index,
        });
        self.people.settle_at.push(
            settle_at,
            AttemptAt {
                at_us: settle_at,
                person,
                index,
            },
        );
        self.sweep
            .interval(Level::Outstanding, a.sent_us, a.done_us);
        if a.outcome == ClientOutcome::Ok {
            self.add_value(
                a.done_us,
                Value::E2e,
                a.done_us.saturating_sub(a.intended_us),
            );
        }
        if let Some(ra) = a.retry_after_ms {
            if a.outcome == ClientOutcome::Shed
                && self.figures.names.get(a.reason) == Some(ALL_COOLING)
            {
                let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                self.routing.cooling_refusal(a.done_us, ra, granularity_ms);
            }
        }
    }

    /// A call, released at its receipt: its levels, its provider time, and
    /// its join to the latest attempt of its person.
    pub(super) fn release_call(&mut self, person: u64, c: &Call) {
        self.figures.provider.calls += 1;
        match c.finished_us.or(c.hung_up_us) {
            Some(end) => {
                self.sweep.interval(Level::InFlight, c.received_us, end);
                if let Some(a) = c.admitted_us {
                    self.sweep.interval(Level::InService, a, end);
                }
            }
            None => {
                self.sweep.open_ended(Level::InFlight, c.received_us);
                if let Some(a) = c.admitted_us {
                    self.sweep.open_ended(Level::InService, a);
                }
            }
        }
        if let (ProviderOutcome::Ok, Some(f), None) = (c.outcome, c.finished_us, c.hung_up_us) {
            let took = f.saturating_sub(c.received_us);
            self.add_value(f, Value::Provider, took);
            record(&mut self.figures.latency.provider, took);
            if let Some((from, to)) = self.expect.overload {
                if from <= f && f < to {
                    self.figures.tally.calls_answered_in_overload += 1;
                }
            }
        }
        self.routing.call(&RoutedCall {
            provider: usize::from(c.provider),
            received_us: c.received_us,
            end_us: [c.admitted_us, c.finished_us, c.hung_up_us]
                .into_iter()
                .flatten()
                .fold(c.received_us, u64::max),
            second: self.rows.second_of(c.received_us),
            status: c.status,
            accepted: c.completed,
            retry_after_ms: c.retry_after_ms.map(|ms| u64::from(ms.get())),
            retry: self.called_before(person),
        });
        self.count_hangup(person, c);
        self.join(person, c);
    }
}
