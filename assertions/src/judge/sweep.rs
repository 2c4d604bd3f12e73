//! The sweep clock (G behind): seconds whose values are all in taken to
//! their percentiles, people done once no attempt of theirs can come,
//! their attempts classed and their Retry-After honoured or not.

use std::collections::HashMap;

use wire::Join;

use super::people::Compact;
use super::records::LatestCall;
use super::values::Value;
use super::*;
use crate::tally::{self, Previous, Retry};
use crate::timeline::record;

impl Judge {
    /// Everything that starts before `x` is released: attempts past their
    /// settling time settle, people past their time are done, seconds
    /// wholly before `x` take their percentiles.
    pub(super) fn pass_time(&mut self, x: u64) {
        if x <= self.window.released_to {
            return;
        }
        self.window.released_to = x;
        while let Some(bucket) = self.people.settle_at.next_before(x) {
            for a in &bucket {
                self.settle(a.person, a.index, None);
            }
            self.people.settle_at.recycle(bucket);
        }
        while let Some(bucket) = self.people.done_at.next_before(x) {
            for d in &bucket {
                let due = self
                    .people
                    .open
                    .get(&d.person)
                    .is_some_and(|p| p.done_at == d.at_us);
                if due {
                    self.person_done(d.person);
                }
            }
            self.people.done_at.recycle(bucket);
        }
        let upto = if x < self.rows.start_us {
            0
        } else {
            ((x - self.rows.start_us) / self.rows.bin_us).min(MAX_SECONDS - 1) as usize
        };
        self.values.take(upto, &mut self.rows);
    }

    pub(super) fn add_value(&mut self, t_us: u64, what: Value, v: u64) {
        let s = self.rows.second_of(t_us);
        if !self.values.add(s, what, v) {
            self.progress.out_of_order += 1;
        }
    }

    /// A person is done: no attempt or call of theirs can still be
    /// released. Their latency served and their retries are counted; if
    /// their last attempt went unanswered, a compact entry stays.
    pub(super) fn person_done(&mut self, person: u64) {
        let len = self
            .people
            .open
            .get(&person)
            .map_or(0, |p| p.attempts.len());
        for i in 0..len {
            self.settle(person, i, None);
        }
        let Some(mut p) = self.people.open.remove(&person) else {
            return;
        };
        self.people.attempts -= p.attempts.len();
        self.class_after_dispatch(&mut p.attempts);
        let f = &mut self.figures;
        f.tally.people += 1;
        let first = p
            .attempts
            .iter()
            .min_by_key(|a| (a.attempt, a.sent_us, a.seq));
        let answered = p
            .attempts
            .iter()
            .filter(|a| a.outcome == ClientOutcome::Ok)
            .map(|a| a.done_us)
            .min();
        if let Some(first) = first {
            let tenant_limited = p
                .attempts
                .iter()
                .any(|a| a.outcome == ClientOutcome::TenantLimited);
            f.tally.recovery.person(
                first.intended_us,
                f.names.get(first.tenant),
                answered.is_some(),
                tenant_limited,
            );
        }
        if let (Some(first), Some(done)) = (first, answered) {
            f.tally.served += 1;
            record(
                &mut f.latency.served,
                done.saturating_sub(first.intended_us),
            );
        }
        self.count_honoured(&p.attempts);
        self.figures.tally.silent_truncations += p
            .attempts
            .iter()
            .filter(|a| a.outcome == ClientOutcome::Ok && a.cut_pending)
            .count() as u64;
        if let Some(last) = p.attempts.last() {
            if last.outcome != ClientOutcome::Ok {
                self.people.compact.insert(
                    person,
                    Compact {
                        sent_us: last.sent_us,
                        done_us: last.done_us,
                        matched: last.matched,
                        late: last.late,
                        gave_up: tally::caller_gave_up(last.outcome),
                    },
                );
            }
        }
    }

    /// A person is done, every call of theirs joined: their attempts that
    /// a call reached a provider for before the answer (left unclassed at
    /// their settling) are classed by the latest such call, and counted;
    /// the provider's refusals relayed are counted by what the answer did
    /// with the provider's Retry-After.
    pub(super) fn class_after_dispatch(&mut self, attempts: &mut [Attempt]) {
        for a in attempts.iter_mut() {
            if a.counted.is_none() && self.joins(a.outcome) {
                let f = &mut self.figures;
                let reason = f.names.get(a.reason);
                let join = a.latest.map_or(Join::NoCall, |l| Join::Called(l.end()));
                let waited = a.done_us.saturating_sub(a.sent_us);
                let (counted, class) = a.outcome.joined(a.status, reason, join, waited);
                a.counted = Some(counted);
                let tenant = f.names.get(a.tenant).map(str::to_owned);
                f.ended(&mut self.rows, a.done_us, tenant.as_deref(), counted);
                if let Some(class) = class {
                    *f.refusals
                        .entry((class, a.status.unwrap_or(0), a.reason, a.tenant))
                        .or_default() += 1;
                }
                // Classed once its person is done, later than the sweep
                // walked its end: the sweep counts it where it stands.
                retry_after_given(&mut self.sweep, a, counted, false);
            }
            if a.counted == Some(ClientOutcome::UpstreamRefused) {
                let kept = match a.latest {
                    Some(LatestCall::Refused(kept)) => Some(kept),
                    _ => None,
                };
                self.figures.tally.relayed(kept);
            }
        }
    }

    /// Counts a person's retries that honoured a Retry-After (see
    /// [`tally::honoured`]); of duplicate attempt numbers, the last in
    /// the file counts, as in a map built from the file.
    pub(super) fn count_honoured(&mut self, attempts: &[Attempt]) {
        if attempts.len() < 2 {
            return;
        }
        let mut by_number: HashMap<u32, &Attempt> = HashMap::new();
        for a in attempts {
            by_number
                .entry(a.attempt)
                .and_modify(|b| {
                    if a.seq > b.seq {
                        *b = a;
                    }
                })
                .or_insert(a);
        }
        let tally = &mut self.figures.tally;
        for a in attempts {
            let prev = a
                .attempt
                .checked_sub(1)
                .and_then(|n| by_number.get(&n))
                .map(|p| Previous {
                    done_us: p.done_us,
                    retry_after_ms: p.retry_after_ms,
                });
            let retry = Retry {
                attempt: a.attempt,
                intended_us: a.intended_us,
                sent_us: a.sent_us,
                patience_ms: a.patience_ms,
                outcome: a.outcome,
            };
            let first_intended = by_number.get(&1).map(|f| f.intended_us);
            if let Some(admitted) =
                tally::honoured(&self.expect, &retry, prev.as_ref(), first_intended)
            {
                tally.honouring += 1;
                tally.honoured_admitted += u64::from(admitted);
            }
        }
    }
}
