//! Retry decisions: reading Retry-After, the delay before the next attempt,
//! and the retry budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use rand::Rng;

use crate::config::{RetryKind, RetryPolicy};
use crate::record::Outcome;

/// Returns the wait a response asks for, from `retry-after-ms` (milliseconds,
/// fractions allowed) or else `retry-after` (whole or fractional seconds, or
/// an HTTP date, taken relative to `now`). Returns `None` when neither header
/// is present or readable. A date in the past means no wait. A negative
/// value, NaN, or one too large for a `Duration` (`1e300`) is unreadable:
/// it used to panic the attempt's task.
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .and_then(|v| Duration::try_from_secs_f64(v / 1000.0).ok())
    {
        return Some(ms);
    }
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Returns true if and only if an attempt that ended so may be retried:
/// sheds, provider errors that the official SDKs retry (408, 409, 429 and
/// 5xx), refused connections and resets. A timeout used up the person's
/// patience; a malformed answer will not get better.
pub(crate) fn retryable(outcome: Outcome, status: Option<u16>) -> bool {
    match outcome {
        Outcome::Shed | Outcome::ConnectError | Outcome::Reset => true,
        Outcome::ProviderError => {
            matches!(status, Some(408 | 409 | 429) | Some(500..=599))
        }
        Outcome::Ok | Outcome::Timeout | Outcome::Malformed | Outcome::Cancelled => false,
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

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retry_after_ms_seconds_date_and_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let p = |pairs: &[(&'static str, &str)]| parse_retry_after(&headers(pairs), now);
        assert_eq!(
            p(&[("retry-after-ms", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            p(&[("retry-after-ms", "12.5")]),
            Some(Duration::from_micros(12_500))
        );
        // retry-after-ms wins over retry-after.
        assert_eq!(
            p(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(p(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(
            p(&[("retry-after", "0.5")]),
            Some(Duration::from_millis(500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(p(&[("retry-after", &later)]), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(p(&[("retry-after", &earlier)]), Some(Duration::ZERO));
        assert_eq!(p(&[("retry-after", "soon")]), None);
        assert_eq!(p(&[("retry-after", "-3")]), None);
        // Too large for a Duration: unreadable, not a panic (found by fuzzing).
        assert_eq!(p(&[("retry-after", "1e300")]), None);
        assert_eq!(
            p(&[("retry-after-ms", "1e30"), ("retry-after", "NaN")]),
            None
        );
        assert_eq!(
            p(&[("retry-after", "1000000000000")]),
            Some(Duration::from_secs(1_000_000_000_000))
        );
        // Garbage in retry-after-ms falls back to retry-after.
        assert_eq!(
            p(&[("retry-after-ms", "x"), ("retry-after", "2")]),
            Some(Duration::from_secs(2))
        );
        assert_eq!(p(&[]), None);
    }

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
        assert!(retryable(Outcome::Shed, Some(429)));
        assert!(retryable(Outcome::ProviderError, Some(502)));
        assert!(!retryable(Outcome::ProviderError, Some(400)));
        assert!(retryable(Outcome::Reset, None));
        assert!(!retryable(Outcome::Timeout, None));
        assert!(!retryable(Outcome::Malformed, Some(200)));
    }
}
