//! A spending guard for a real provider account: a budget of tokens the
//! requests sent may use, retries included, each request counted at what
//! it may cost (its prompt, at 4 characters a token, plus its
//! `max_tokens`). A request that would pass the budget is not sent: the
//! total sent stays at or below the budget, and above it less the largest
//! request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::request::Drawn;

/// Tokens left to spend, shared by everything that sends.
#[derive(Debug)]
pub struct SpendBudget {
    limit: u64,
    spent: AtomicU64,
    refused: AtomicBool,
}

impl SpendBudget {
    /// A budget of `limit` tokens.
    pub fn new(limit: u64) -> Self {
        SpendBudget {
            limit,
            spent: AtomicU64::new(0),
            refused: AtomicBool::new(false),
        }
    }

    /// Takes `tokens` from the budget if they fit; false (and nothing
    /// taken) if they would pass it.
    ///
    /// ```
    /// let b = loadgen::SpendBudget::new(100);
    /// assert!(b.take(60));
    /// assert!(!b.take(60));
    /// assert!(b.take(40));
    /// assert_eq!((b.spent(), b.refused()), (100, true));
    /// ```
    pub fn take(&self, tokens: u64) -> bool {
        let taken = self
            .spent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                s.checked_add(tokens).filter(|n| *n <= self.limit)
            })
            .is_ok();
        if !taken {
            self.refused.store(true, Ordering::Release);
        }
        taken
    }

    /// Tokens taken so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Acquire)
    }

    /// The budget.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether a request was held back for it.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// What it let through, for `summary.json`.
    pub fn summary(&self) -> crate::Spent {
        crate::Spent {
            limit_tokens: self.limit,
            sent_tokens: self.spent(),
            stopped: self.refused(),
        }
    }
}

/// What a drawn request may cost: its prompt (padding included) at 4
/// characters a token, plus its `max_tokens`.
pub(crate) fn cost(d: &Drawn) -> u64 {
    u64::from(d.prompt_tokens)
        + u64::from(d.padding_kb) * 1024 / wire::CHARS_PER_TOKEN as u64
        + u64::from(d.max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn many_senders_never_pass_the_budget() {
        let b = Arc::new(SpendBudget::new(10_000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..1_000).filter(|_| b.take(37)).count())
            })
            .collect();
        let sent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(sent as u64 * 37, b.spent());
        assert!(
            b.spent() <= 10_000 && b.spent() > 10_000 - 37,
            "{}",
            b.spent()
        );
    }
}
