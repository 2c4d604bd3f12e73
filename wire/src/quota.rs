//! A provider's quota as arithmetic: requests per minute and tokens per
//! minute as continuously refilled buckets ([`QuotaBuckets`]), and the
//! rate-limit headers that describe them ([`ratelimit_headers`]). No clock
//! and no locks: the caller says what time it is (seconds since the
//! quota's start) and keeps the buckets behind whatever lock it likes. The
//! fake provider plays a provider's quota with it; a gateway can keep the
//! same account of its upstream.
//!
//! Each bucket holds up to one minute's allowance and refills at
//! `limit / 60` per second, which is how the providers describe their
//! limits. A call reserves one request and `prompt + max_tokens` tokens at
//! admission; when it ends it settles what it really used, and the
//! difference goes back into the bucket.

use std::time::Duration;

use crate::headers::{
    ANTHROPIC_RATELIMIT_REQUESTS_LIMIT, ANTHROPIC_RATELIMIT_REQUESTS_REMAINING,
    ANTHROPIC_RATELIMIT_REQUESTS_RESET, ANTHROPIC_RATELIMIT_TOKENS_LIMIT,
    ANTHROPIC_RATELIMIT_TOKENS_REMAINING, ANTHROPIC_RATELIMIT_TOKENS_RESET,
    RATELIMIT_LIMIT_REQUESTS, RATELIMIT_LIMIT_TOKENS, RATELIMIT_REMAINING_REQUESTS,
    RATELIMIT_REMAINING_TOKENS, RATELIMIT_RESET_REQUESTS, RATELIMIT_RESET_TOKENS,
};
use crate::{go_duration, Dialect};

/// One continuously refilled bucket (of requests or of tokens).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    level: f64,
    /// Units per second.
    rate: f64,
    /// Seconds since the quota's start, at the last refill.
    at: f64,
}

impl TokenBucket {
    /// A full bucket holding `per_minute` units.
    pub fn per_minute(per_minute: u64) -> Self {
        let capacity = per_minute as f64;
        TokenBucket {
            capacity,
            level: capacity,
            rate: capacity / 60.0,
            at: 0.0,
        }
    }

    fn refill(&mut self, now: f64) {
        if now > self.at {
            self.level = (self.level + (now - self.at) * self.rate).min(self.capacity);
            self.at = now;
        }
    }

    /// The bucket's size.
    pub fn limit(&self) -> u64 {
        self.capacity as u64
    }

    /// Whole units left at `now`.
    pub fn remaining(&mut self, now: f64) -> u64 {
        self.refill(now);
        self.level.max(0.0).floor() as u64
    }

    /// Time until the bucket is full again.
    pub fn until_full(&mut self, now: f64) -> Duration {
        self.refill(now);
        Duration::from_secs_f64(((self.capacity - self.level).max(0.0)) / self.rate)
    }

    /// Time until `amount` fits, or `None` if it never can (larger than the
    /// bucket).
    pub fn wait_for(&mut self, amount: f64, now: f64) -> Option<Duration> {
        self.refill(now);
        if amount > self.capacity {
            return None;
        }
        Some(Duration::from_secs_f64(
            ((amount - self.level).max(0.0)) / self.rate,
        ))
    }

    fn take(&mut self, amount: f64) {
        self.level -= amount;
    }

    fn give_back(&mut self, amount: f64, now: f64) {
        self.refill(now);
        self.level = (self.level + amount).min(self.capacity);
    }

    /// Changes the bucket's size (a timeline phase changed the quota),
    /// keeping what is used: a full bucket stays full.
    fn resize(&mut self, per_minute: u64, now: f64) {
        let capacity = per_minute as f64;
        if capacity == self.capacity {
            return;
        }
        self.refill(now);
        let used = self.capacity - self.level;
        self.capacity = capacity;
        self.rate = capacity / 60.0;
        self.level = (capacity - used).min(capacity);
    }
}

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaLimit {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaRefusal {
    /// The limit that needs the longest wait.
    pub limit: QuotaLimit,
    /// When the reservation would fit; `None` if it never can.
    pub retry_after: Option<Duration>,
    /// The limit's size, for the error message.
    pub limit_value: u64,
    /// What was asked for.
    pub requested: u64,
}

/// The request and token buckets of one account. Times are seconds since
/// the quota's start, from the caller's clock.
///
/// ```
/// use std::time::Duration;
/// use wire::{QuotaBuckets, QuotaLimit};
///
/// let mut q = QuotaBuckets::default();
/// q.configure(None, Some(6000), 0.0); // 100 tokens a second
/// q.reserve(5000, 0.0).unwrap();
/// let refused = q.reserve(2000, 0.0).unwrap_err();
/// assert_eq!(refused.limit, QuotaLimit::Tokens);
/// assert_eq!(refused.retry_after, Some(Duration::from_secs(10)));
/// assert!(q.reserve(2000, 10.0).is_ok());
/// ```
#[derive(Debug, Clone, Default)]
pub struct QuotaBuckets {
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
}

/// A snapshot of both buckets, for the rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSnapshot {
    /// (limit, remaining, time until full) of the request bucket.
    pub requests: Option<(u64, u64, Duration)>,
    /// (limit, remaining, time until full) of the token bucket.
    pub tokens: Option<(u64, u64, Duration)>,
}

impl QuotaBuckets {
    /// Sets the limits in force (from the config and the active phase);
    /// `None` removes a limit.
    pub fn configure(&mut self, rpm: Option<u64>, tpm: Option<u64>, now: f64) {
        fn set(slot: &mut Option<TokenBucket>, limit: Option<u64>, now: f64) {
            match (slot.as_mut(), limit) {
                (_, None) => *slot = None,
                (None, Some(l)) => {
                    let mut b = TokenBucket::per_minute(l);
                    b.at = now;
                    *slot = Some(b);
                }
                (Some(b), Some(l)) => b.resize(l, now),
            }
        }
        set(&mut self.requests, rpm, now);
        set(&mut self.tokens, tpm, now);
    }

    /// Reserves one request and `tokens` tokens at `now` (seconds), or says
    /// why not and when it would fit.
    pub fn reserve(&mut self, tokens: u64, now: f64) -> Result<(), QuotaRefusal> {
        let mut refusal: Option<QuotaRefusal> = None;
        let mut consider = |limit: QuotaLimit, bucket: &mut TokenBucket, amount: f64| {
            let wait = bucket.wait_for(amount, now);
            if wait != Some(Duration::ZERO) {
                let worse = match (&refusal, wait) {
                    (None, _) => true,
                    (Some(r), w) => match (r.retry_after, w) {
                        (_, None) => true,
                        (None, Some(_)) => false,
                        (Some(a), Some(b)) => b > a,
                    },
                };
                if worse {
                    refusal = Some(QuotaRefusal {
                        limit,
                        retry_after: wait,
                        limit_value: bucket.limit(),
                        requested: amount as u64,
                    });
                }
            }
        };
        if let Some(b) = self.requests.as_mut() {
            consider(QuotaLimit::Requests, b, 1.0);
        }
        if let Some(b) = self.tokens.as_mut() {
            consider(QuotaLimit::Tokens, b, tokens as f64);
        }
        if let Some(r) = refusal {
            return Err(r);
        }
        if let Some(b) = self.requests.as_mut() {
            b.take(1.0);
        }
        if let Some(b) = self.tokens.as_mut() {
            b.take(tokens as f64);
        }
        Ok(())
    }

    /// Settles a call that reserved `reserved` tokens and used `used`
    /// (prompt + completion actually produced).
    pub fn settle(&mut self, reserved: u64, used: u64, now: f64) {
        if let Some(b) = self.tokens.as_mut() {
            if reserved > used {
                b.give_back((reserved - used) as f64, now);
            } else {
                b.refill(now);
                b.take((used - reserved) as f64);
            }
        }
    }

    /// Gives back a whole reservation, request included (the call was never
    /// served, e.g. rejected at the ceiling).
    pub fn cancel(&mut self, reserved: u64, now: f64) {
        if let Some(b) = self.requests.as_mut() {
            b.give_back(1.0, now);
        }
        if let Some(b) = self.tokens.as_mut() {
            b.give_back(reserved as f64, now);
        }
    }

    /// The state of both buckets at `now`.
    pub fn snapshot(&mut self, now: f64) -> QuotaSnapshot {
        let mut snap = |b: &mut TokenBucket| (b.limit(), b.remaining(now), b.until_full(now));
        QuotaSnapshot {
            requests: self.requests.as_mut().map(&mut snap),
            tokens: self.tokens.as_mut().map(&mut snap),
        }
    }
}

/// The rate-limit headers of a provider's answer, as (name, value) pairs,
/// from a snapshot of its buckets taken at `now_us` (Unix microseconds):
/// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (the
/// reset as a Go duration), or Anthropic's
/// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (the
/// reset as an RFC 3339 time). A limit not in force has no headers.
///
/// ```
/// use std::time::Duration;
/// use wire::{ratelimit_headers, Dialect, QuotaSnapshot};
///
/// let snap = QuotaSnapshot { requests: None, tokens: Some((600, 350, Duration::from_secs(25))) };
/// let h = ratelimit_headers(Dialect::OpenAi, &snap, 0);
/// assert_eq!(h, [
///     ("x-ratelimit-limit-tokens", "600".to_string()),
///     ("x-ratelimit-remaining-tokens", "350".to_string()),
///     ("x-ratelimit-reset-tokens", "25s".to_string()),
/// ]);
/// ```
pub fn ratelimit_headers(
    dialect: Dialect,
    snap: &QuotaSnapshot,
    now_us: u64,
) -> Vec<(&'static str, String)> {
    let (requests, tokens) = match dialect {
        Dialect::OpenAi => (
            [
                RATELIMIT_LIMIT_REQUESTS,
                RATELIMIT_REMAINING_REQUESTS,
                RATELIMIT_RESET_REQUESTS,
            ],
            [
                RATELIMIT_LIMIT_TOKENS,
                RATELIMIT_REMAINING_TOKENS,
                RATELIMIT_RESET_TOKENS,
            ],
        ),
        Dialect::Anthropic => (
            [
                ANTHROPIC_RATELIMIT_REQUESTS_LIMIT,
                ANTHROPIC_RATELIMIT_REQUESTS_REMAINING,
                ANTHROPIC_RATELIMIT_REQUESTS_RESET,
            ],
            [
                ANTHROPIC_RATELIMIT_TOKENS_LIMIT,
                ANTHROPIC_RATELIMIT_TOKENS_REMAINING,
                ANTHROPIC_RATELIMIT_TOKENS_RESET,
            ],
        ),
    };
    let reset = |d: Duration| match dialect {
        Dialect::OpenAi => go_duration(d),
        Dialect::Anthropic => {
            rfc3339_utc(now_us.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)))
        }
    };
    let mut out = Vec::with_capacity(6);
    for (names, bucket) in [(requests, snap.requests), (tokens, snap.tokens)] {
        if let Some((limit, remaining, until_full)) = bucket {
            out.push((names[0], limit.to_string()));
            out.push((names[1], remaining.to_string()));
            out.push((names[2], reset(until_full)));
        }
    }
    out
}

/// RFC 3339 in UTC, to the second, rounded up (`1970-01-01T00:00:02Z` for
/// 1.5 s after the epoch), as Anthropic's reset headers are. Empty past the
/// year 9999, which RFC 3339 cannot write.
///
/// ```
/// assert_eq!(wire::rfc3339_utc(1_700_000_000_000_000), "2023-11-14T22:13:20Z");
/// ```
pub fn rfc3339_utc(unix_us: u64) -> String {
    let secs = unix_us / 1_000_000 + u64::from(unix_us % 1_000_000 != 0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        return String::new();
    }
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian (year, month, day) of a count of days since
/// 1970-01-01 (Howard Hinnant's `civil_from_days`, for days ≥ 0).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_reserves_refills_and_says_when() {
        let mut q = QuotaBuckets::default();
        q.configure(None, Some(6000), 0.0); // 100 tokens per second
        assert!(q.reserve(5000, 0.0).is_ok());
        let r = q.reserve(2000, 0.0).unwrap_err();
        assert_eq!(r.limit, QuotaLimit::Tokens);
        // 1000 left, 1000 missing, at 100/s: 10 s.
        assert_eq!(r.retry_after, Some(Duration::from_secs(10)));
        // After 10 s it fits, exactly.
        assert!(q.reserve(2000, 10.0).is_ok());
        let snap = q.snapshot(10.0);
        assert_eq!(snap.tokens.unwrap().0, 6000);
        assert_eq!(snap.tokens.unwrap().1, 0);
        assert_eq!(snap.tokens.unwrap().2, Duration::from_secs(60));
        assert!(snap.requests.is_none());
    }

    #[test]
    fn settle_gives_back_the_unused_reservation() {
        let mut q = QuotaBuckets::default();
        q.configure(Some(60), Some(600), 0.0);
        q.reserve(500, 0.0).unwrap(); // 100 tokens left
        q.settle(500, 120, 0.0); // used 120: 480 left
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 480);
        assert_eq!(q.snapshot(0.0).requests.unwrap().1, 59);
        q.cancel(50, 0.0);
        assert_eq!(q.snapshot(0.0).requests.unwrap().1, 60);
        // Using more than reserved takes the excess.
        q.reserve(10, 0.0).unwrap();
        q.settle(10, 40, 0.0);
        // 480, plus the 50 cancelled above, less 40 used.
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 480 + 50 - 40);
    }

    #[test]
    fn requests_limit_and_oversized_reservation() {
        let mut q = QuotaBuckets::default();
        q.configure(Some(2), Some(1000), 0.0); // one request every 30 s
        q.reserve(1, 0.0).unwrap();
        q.reserve(1, 0.0).unwrap();
        let r = q.reserve(1, 0.0).unwrap_err();
        assert_eq!(r.limit, QuotaLimit::Requests);
        assert_eq!(r.retry_after, Some(Duration::from_secs(30)));
        let r = q.reserve(5000, 60.0).unwrap_err();
        assert_eq!((r.limit, r.retry_after), (QuotaLimit::Tokens, None));
    }

    #[test]
    fn resize_keeps_usage() {
        let mut q = QuotaBuckets::default();
        q.configure(None, Some(600), 0.0);
        q.reserve(100, 0.0).unwrap();
        q.configure(None, Some(6000), 0.0);
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 5900);
        q.configure(None, Some(60), 0.0);
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 0);
    }

    #[test]
    fn rfc3339_is_utc_to_the_second_rounded_up() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_500_000), "1970-01-01T00:00:02Z");
        assert_eq!(rfc3339_utc(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_709_251_199_000_000), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_799_000_000), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_800_000_000), "");
        // Every day boundary of a leap year and its neighbours, against a
        // day count kept by hand.
        let mut days = 0u64;
        for y in 1970..2101u64 {
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            for (m, len) in [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ]
            .into_iter()
            .enumerate()
            {
                assert_eq!(civil_from_days(days), (y, m as u64 + 1, 1));
                days += len;
            }
        }
    }

    #[test]
    fn headers_say_each_limit_in_each_dialect() {
        let snap = QuotaSnapshot {
            requests: Some((100, 99, Duration::from_millis(600))),
            tokens: Some((6000, 5900, Duration::from_secs(1))),
        };
        let openai = ratelimit_headers(Dialect::OpenAi, &snap, 0);
        let names: Vec<_> = openai.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                RATELIMIT_LIMIT_REQUESTS,
                RATELIMIT_REMAINING_REQUESTS,
                RATELIMIT_RESET_REQUESTS,
                RATELIMIT_LIMIT_TOKENS,
                RATELIMIT_REMAINING_TOKENS,
                RATELIMIT_RESET_TOKENS,
            ]
        );
        assert_eq!(openai[2].1, "600ms");
        assert_eq!(openai[4].1, "5900");
        let anthropic = ratelimit_headers(Dialect::Anthropic, &snap, 1_000_000);
        assert_eq!(
            anthropic[0],
            (ANTHROPIC_RATELIMIT_REQUESTS_LIMIT, "100".into())
        );
        assert_eq!(anthropic[2].1, "1970-01-01T00:00:02Z");
        assert_eq!(
            anthropic[5],
            (
                ANTHROPIC_RATELIMIT_TOKENS_RESET,
                "1970-01-01T00:00:02Z".into()
            )
        );
        let none = QuotaSnapshot {
            requests: None,
            tokens: None,
        };
        assert!(ratelimit_headers(Dialect::Anthropic, &none, 0).is_empty());
    }
}
