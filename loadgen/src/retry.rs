//! Retry decisions: whether an attempt may be retried, the delay before the
//! next attempt (honouring a Retry-After read by
//! [`wire::parse_retry_after`]), and the retry budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use wire::ClientOutcome;

use crate::config::{RetryKind, RetryPolicy};

/// Returns true if and only if an attempt that ended so may be retried:
/// refusals of every kind (shed, stale, tenant-limited, the provider's
/// passed through, a gateway timeout: the official SDKs retry 429 and
/// 5xx), provider errors that the SDKs retry (408, 409, 429 and 5xx),
/// refused connections and resets. A timeout used up the person's
/// patience; a malformed answer will not get better.
pub(crate) fn retryable(outcome: ClientOutcome, status: Option<u16>) -> bool {
    match outcome {
        ClientOutcome::Shed
        | ClientOutcome::Stale
        | ClientOutcome::TenantLimited
        | ClientOutcome::UpstreamRefused
        | ClientOutcome::GatewayTimeout
        | ClientOutcome::ConnectError
        | ClientOutcome::Reset => true,
        ClientOutcome::ProviderError => {
            matches!(status, Some(408 | 409 | 429) | Some(500..=599))
        }
        ClientOutcome::Ok
        | ClientOutcome::Timeout
        | ClientOutcome::Malformed
        | ClientOutcome::Cancelled => false,
    }
}

impl RetryPolicy {
    /// The wait before attempt `next_attempt` (2 for the first retry), given
    /// the Retry-After of the failed attempt.
    ///
    /// - immediate: no wait;
    /// - retry_after with a header at most `cap`: the header's value plus a
    ///   uniform share of it up to `jitter` (never earlier than asked, and a
    ///   crowd told the same value spreads out);
    /// - otherwise, full-jitter exponential backoff:
    ///   `U(0, min(backoff_max, backoff_initial × 2^(next_attempt−2)))`.
    pub(crate) fn delay<R: Rng + ?Sized>(
        &self,
        next_attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        match self.kind {
            RetryKind::None | RetryKind::Immediate => Duration::ZERO,
            RetryKind::RetryAfter => match retry_after {
                Some(ra) if ra <= self.cap => {
                    let extra = if self.jitter > 0.0 {
                        rng.gen_range(0.0..=self.jitter)
                    } else {
                        0.0
                    };
                    ra.mul_f64(1.0 + extra)
                }
                _ => {
                    let exp = next_attempt.saturating_sub(2).min(30);
                    let step = self
                        .backoff_initial
                        .saturating_mul(1u32 << exp)
                        .min(self.backoff_max);
                    step.mul_f64(rng.gen::<f64>())
                }
            },
        }
    }
}

/// Counts first attempts and retries, and lets a retry through only while
/// retries stay within the budget's share of first attempts.
#[derive(Debug, Default)]
pub(crate) struct RetryBudget {
    firsts: AtomicU64,
    retries: AtomicU64,
}

impl RetryBudget {
    pub(crate) fn first_attempt(&self) {
        self.firsts.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget; returns true if and only if it was
    /// available (always, with no budget).
    pub(crate) fn take(&self, share: Option<f64>) -> bool {
        let Some(share) = share else {
            self.retries.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let allowed = (self.firsts.load(Ordering::Relaxed) as f64 * share).floor() as u64;
        self.retries
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r < allowed).then_some(r + 1)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn policy(kind: RetryKind) -> RetryPolicy {
        RetryPolicy {
            kind,
            max_attempts: 5,
            ..RetryPolicy::none()
        }
    }

    #[test]
    fn honoured_retry_after_is_never_early_and_jittered() {
        let p = policy(RetryKind::RetryAfter);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let ra = Duration::from_millis(400);
        let ds: Vec<_> = (0..1000).map(|_| p.delay(2, Some(ra), &mut rng)).collect();
        assert!(ds.iter().all(|d| *d >= ra && *d <= ra * 2));
        let distinct: std::collections::HashSet<_> = ds.iter().collect();
        assert!(distinct.len() > 900, "jitter spreads retries");
        // Above the cap the header is not honoured: backoff instead.
        let d = p.delay(2, Some(Duration::from_secs(120)), &mut rng);
        assert!(d <= Duration::from_millis(500));
    }

    #[test]
    fn backoff_doubles_with_full_jitter_up_to_max() {
        let p = policy(RetryKind::RetryAfter);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for (attempt, bound) in [(2, 500), (3, 1000), (4, 2000), (9, 8000)] {
            let ds: Vec<_> = (0..2000)
                .map(|_| p.delay(attempt, None, &mut rng))
                .collect();
            let max = ds.iter().max().unwrap().as_millis() as u64;
            assert!(
                max <= bound && max > bound * 9 / 10,
                "attempt {attempt}: {max}"
            );
        }
        assert_eq!(
            policy(RetryKind::Immediate).delay(2, Some(Duration::from_secs(3)), &mut rng),
            Duration::ZERO
        );
    }

    #[test]
    fn budget_limits_retries_to_a_share_of_first_attempts() {
        let b = RetryBudget::default();
        for _ in 0..100 {
            b.first_attempt();
        }
        let granted = (0..50).filter(|_| b.take(Some(0.2))).count();
        assert_eq!(granted, 20);
        assert!(RetryBudget::default().take(None));
    }

    #[test]
    fn what_is_retried() {
        assert!(retryable(ClientOutcome::Shed, Some(429)));
        assert!(retryable(ClientOutcome::ProviderError, Some(502)));
        assert!(!retryable(ClientOutcome::ProviderError, Some(400)));
        assert!(retryable(ClientOutcome::Reset, None));
        assert!(!retryable(ClientOutcome::Timeout, None));
        assert!(!retryable(ClientOutcome::Malformed, Some(200)));
    }
}
