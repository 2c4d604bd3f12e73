//! Per-second values whose second is not over yet ([`Values`]): each
//! second's exact percentiles come from its own values, sorted once when
//! the release passes its end. (Retry-After values wait for their
//! refusal's kind, known when it settles: the sweep takes them.)

use std::collections::VecDeque;

use crate::sweep::Rows;
use crate::timeline::ms_percentiles;

/// The values of the seconds not yet taken.
#[derive(Default)]
pub(super) struct Values {
    /// The first second not yet taken.
    first: usize,
    seconds: VecDeque<SecondValues>,
    /// Values held, all seconds together.
    pub(super) held: usize,
}

/// One second's values, in microseconds.
#[derive(Default)]
struct SecondValues {
    e2e: Vec<u64>,
    waits: Vec<u64>,
    provider: Vec<u64>,
}

/// Which of a second's values.
#[derive(Clone, Copy)]
pub(super) enum Value {
    /// Intended send to done, of an answered attempt.
    E2e,
    /// Sent to the matched call's receipt.
    Wait,
    /// Received to finished, of an answered call.
    Provider,
}

impl Values {
    /// Adds `v` to second `s`; false if that second was taken already.
    pub(super) fn add(&mut self, s: usize, what: Value, v: u64) -> bool {
        if s < self.first {
            return false;
        }
        let i = s - self.first;
        if self.seconds.len() <= i {
            self.seconds.resize_with(i + 1, SecondValues::default);
        }
        let sv = &mut self.seconds[i];
        match what {
            Value::E2e => sv.e2e.push(v),
            Value::Wait => sv.waits.push(v),
            Value::Provider => sv.provider.push(v),
        }
        self.held += 1;
        true
    }

    /// Takes every second before `upto` into its row.
    pub(super) fn take(&mut self, upto: usize, rows: &mut Rows) {
        while self.first < upto {
            let Some(mut sv) = self.seconds.pop_front() else {
                self.first = upto;
                return;
            };
            self.held -= sv.e2e.len() + sv.waits.len() + sv.provider.len();
            if sv.e2e.len() + sv.waits.len() + sv.provider.len() > 0 {
                let row = rows.row(self.first);
                (row.e2e_p50_ms, row.e2e_p99_ms) = ms_percentiles(&mut sv.e2e);
                (row.queue_wait_p50_ms, row.queue_wait_p99_ms) = ms_percentiles(&mut sv.waits);
                (row.provider_p50_ms, row.provider_p99_ms) = ms_percentiles(&mut sv.provider);
            }
            self.first += 1;
        }
    }
}
