//! The settle clock (C behind a release): each attempt settled once the
//! calls that may be its own have been seen, joined to its call, its
//! delivery and its hang-up judged.

use wire::{Join, ProviderEnd};

use super::records::{Call, LatestCall};
use super::values::Value;
use super::*;
use crate::delivery::delivery;
use crate::routing::ALL_COOLING;
use crate::sweep::Level;
use crate::tally::{self, relayed_retry_after};
use crate::timeline::record;

impl Judge {
    /// Attempt `i` of `person` left the gateway: when its first call was
    /// received (`m`), else when it ended. Nothing if it was settled.
    pub(super) fn settle(&mut self, person: u64, i: usize, m: Option<Match>) {
        let Some(a) = self.people.attempt_mut(person, i) else {
            return;
        };
        if a.settled {
            return;
        }
        a.settled = true;
        let a = a.clone();
        let leave = m.map_or(a.done_us, |m| m.received_us);
        let backlog_leave = m
            .and_then(|m| m.left_queue_us)
            .unwrap_or(a.done_us)
            .min(a.done_us);
        self.sweep.interval(Level::Depth, a.sent_us, leave);
        self.sweep
            .interval(Level::Backlog, a.sent_us, backlog_leave);
        self.sweep.fold(a.sent_us, leave);
        let provider_saw = m.is_some_and(|m| m.received_us <= a.done_us);
        if !self.joins(a.outcome) {
            return;
        }
        let reason = self.figures.names.get(a.reason);
        let cooling = reason == Some(ALL_COOLING);
        let join = match a.latest {
            // Classed by the latest call when its person is done
            // (`class_after_dispatch`): a gateway's retries are still to come.
            Some(_) if !reason.is_some_and(ClientOutcome::is_table_reason) => return,
            Some(latest) => Join::Called(latest.end()),
            // Without provider records (an external provider), a refusal
            // is taken for one the provider never saw, as it always was.
            None => Join::NoCall,
        };
        let (counted, class) =
            a.outcome
                .joined(a.status, reason, join, a.done_us.saturating_sub(a.sent_us));
        if let Some(x) = self.people.attempt_mut(person, i) {
            x.counted = Some(counted);
        }
        let f = &mut self.figures;
        let tenant = f.names.get(a.tenant).map(str::to_owned);
        f.ended(&mut self.rows, a.done_us, tenant.as_deref(), counted);
        let Some(class) = class else {
            return;
        };
        *f.refusals
            .entry((class, a.status.unwrap_or(0), a.reason, a.tenant))
            .or_default() += 1;
        let gateway_shed =
            matches!(class, RefusalClass::AtAdmission | RefusalClass::AtDequeue) && !provider_saw;
        retry_after_given(&mut self.sweep, &a, counted, gateway_shed);
        if !gateway_shed {
            return;
        }
        f.tally.sheds += 1;
        match a.retry_after_ms {
            Some(ra) => {
                f.tally.retry_after_values.insert(ra);
                // Every upstream cooling: judged against the time until a
                // provider next accepted (`crate::routing`), not the drain.
                if !cooling {
                    let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                    self.sweep.query(a.done_us, ra, granularity_ms);
                }
            }
            None => f.tally.sheds_without_retry_after += 1,
        }
        if class == RefusalClass::AtDequeue {
            // Dropped after a wait: no onset of shedding.
            f.tally.stale_drops += 1;
            record(
                &mut f.tally.stale_waits,
                a.done_us.saturating_sub(a.sent_us),
            );
            return;
        }
        f.tally.admission_sheds += 1;
        if !self.sweep.found_first_shed() {
            self.sweep.probe(
                a.sent_us,
                a.seq,
                leave > a.sent_us,
                backlog_leave > a.sent_us,
            );
        }
    }

    /// Counts call `c` for `cancel_on_hangup` if its caller (the latest
    /// attempt of `person`, alive or compact) gave up while it was in
    /// service (`tally::after_hangup`).
    pub(super) fn count_hangup(&mut self, person: u64, c: &Call) {
        let caller = match self.people.open.get(&person) {
            Some(p) => p
                .attempts
                .last()
                .map(|a| (tally::caller_gave_up(a.outcome), a.done_us)),
            None => self
                .people
                .compact
                .get(&person)
                .map(|e| (e.gave_up, e.done_us)),
        };
        let Some((true, left_us)) = caller else {
            return;
        };
        let span = tally::CallSpan {
            received_us: c.received_us,
            finished_us: c.finished_us,
            hung_up_us: c.hung_up_us,
            generation: c.generation(),
        };
        let within_us =
            u64::try_from(self.thresholds.cancel_on_hangup.within.as_micros()).unwrap_or(u64::MAX);
        if let Some(h) = tally::after_hangup(left_us, &span, within_us) {
            let p = &mut self.figures.provider;
            p.running_at_hangup += u64::from(h.to_cancel);
            p.cancelled_at_hangup += u64::from(h.to_cancel && h.cancelled);
            p.tokens_after_hangup += h.tokens;
        }
    }

    /// Returns true if and only if the attempt a call of `person` joins
    /// (their latest, alive or compact: see [`Judge::join`]) had a call
    /// already: this one is the gateway's own retry or failover.
    pub(super) fn called_before(&self, person: u64) -> bool {
        match self.people.open.get(&person) {
            Some(p) => p.attempts.last().is_some_and(|a| a.matched),
            None => self.people.compact.get(&person).is_some_and(|e| e.matched),
        }
    }

    /// Marks `person`'s latest attempt (alive at `alive`, else compact) as
    /// answered late; true the first time, so that an attempt counts once
    /// however many calls the gateway made for it.
    pub(super) fn first_late(&mut self, person: u64, alive: Option<usize>) -> bool {
        let late = match alive {
            Some(i) => self.people.attempt_mut(person, i).map(|a| &mut a.late),
            None => self.people.compact.get_mut(&person).map(|e| &mut e.late),
        };
        late.is_some_and(|late| !std::mem::replace(late, true))
    }

    /// Joins call `c` to its caller: the latest attempt of `person`, alive
    /// or compact.
    pub(super) fn join(&mut self, person: u64, c: &Call) {
        // (sent, done, first call for it, still unsettled, index if alive)
        let caller = if let Some(p) = self.people.open.get_mut(&person) {
            let i = p.attempts.len() - 1;
            let a = &mut p.attempts[i];
            let first = !std::mem::replace(&mut a.matched, true);
            // The latest of its calls cut or completed decides whether an
            // `ok` answer to it was cut short.
            if c.cut || c.completed {
                a.cut_pending = c.cut;
            }
            // Calls that reached a provider before the answer, from the
            // first on (one joined after the attempt settled without a
            // call came out of its window: it was classed without it).
            if c.received_us <= a.done_us && (a.latest.is_some() || !a.settled) {
                let granularity_ms = if a.retry_after_fine { 1 } else { 1000 };
                let provider_ms = c.retry_after_ms.map(|ms| u64::from(ms.get()));
                let kept = relayed_retry_after(a.retry_after_ms, granularity_ms, provider_ms);
                let end = ProviderEnd::of(c.status, c.outcome, c.hung_up_us.is_some());
                a.latest = Some(LatestCall::new(end, kept));
            }
            Some((a.sent_us, a.done_us, first, !a.settled, Some(i)))
        } else if let Some(e) = self.people.compact.get_mut(&person) {
            let first = !std::mem::replace(&mut e.matched, true);
            Some((e.sent_us, e.done_us, first, false, None))
        } else {
            None
        };
        let Some((sent, done, first, unsettled, alive)) = caller else {
            return;
        };
        if let Some(i) = alive {
            self.delivered(person, i, c);
        }
        // Calls per attempt: in the row of the attempt's send.
        let row = self.rows.row(self.rows.second_of(sent));
        row.provider_calls += 1;
        row.dispatched += u64::from(first);
        self.figures.tally.cut_calls += u64::from(c.cut);
        if done < c.admitted_us.unwrap_or(c.received_us) {
            self.figures.provider.stale_dispatch += 1;
            self.figures.provider.wasted_tokens += u64::from(c.tokens);
        }
        if c.hung_up_us.is_none()
            && c.status != 0
            && c.finished_us.is_some_and(|f| f > done)
            && self.first_late(person, alive)
        {
            self.figures.counts.late += 1;
        }
        if !first {
            return;
        }
        let wait = c.received_us.saturating_sub(sent);
        self.add_value(c.received_us, Value::Wait, wait);
        record(&mut self.figures.latency.queue_wait, wait);
        match alive {
            Some(i) if unsettled => self.settle(
                person,
                i,
                Some(Match {
                    received_us: c.received_us,
                    left_queue_us: c.admitted_us.or(c.finished_us),
                }),
            ),
            _ => self.progress.settled_before_dispatch += 1,
        }
    }

    /// Call `c` joined attempt `i` of `person`: if it answered and the
    /// attempt is a streamed answer not yet judged, how the answer was
    /// delivered against how the call sent it (`crate::delivery`). The
    /// first call that answered decides.
    pub(super) fn delivered(&mut self, person: u64, i: usize, c: &Call) {
        let Some(sent) = c.sent else {
            return;
        };
        let Some(received) = self
            .people
            .attempt_mut(person, i)
            .and_then(|a| a.received.take())
        else {
            return;
        };
        self.figures
            .tally
            .deliveries
            .add(&delivery(&received, &sent));
    }

    /// Returns true if and only if an attempt that ended so is classed by
    /// the join before it is counted: an answer that was not a success
    /// (a refusal, or a `provider_error` when the provider's records are
    /// there to tell whose error it was).
    pub(super) fn joins(&self, outcome: ClientOutcome) -> bool {
        outcome.is_refusal() || (outcome == ClientOutcome::ProviderError && self.external.is_none())
    }
}
