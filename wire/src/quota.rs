//! A provider's quota as arithmetic: requests per minute and tokens per
//! minute as continuously refilled buckets ([`QuotaBuckets`]), and the
//! rate-limit headers that describe them ([`ratelimit_headers`]). No clock
//! and no locks: the caller says what time it is (seconds since the
//! quota's start) and keeps the buckets behind whatever lock it likes. The
//! fake provider plays a provider's quota with it; a gateway can keep the
//! same account of its upstream.
//!
//! Each bucket refills at `limit / 60` per second and holds one *window*
//! of that refill: `limit × window / 60` (never less than one unit). The
//! window is one minute by default, so a bucket holds one minute's
//! allowance, which is how the providers describe their limits. A
//! time-compressed rehearsal sets the window to the real time that holds
//! one scenario minute, `60 s ÷ time_scale`: its per-minute limits are
//! already scaled as rates (× time, so that a real minute refills what a
//! scenario minute did), and with a one-minute window the bucket would hold
//! `time_scale` scenario minutes of burst; with `60 s ÷ time_scale` it holds
//! one, as at full scale ([`QuotaBuckets::with_window`]).
//!
//! The rate-limit headers say the limit per minute as configured (scaled as
//! a rate, like every per-minute figure of a rehearsal), what is left in
//! the bucket, and the time until it is full again. At a one-minute window
//! the limit is also the bucket's size; at a shorter one what remains is
//! at most `limit × window / 60` and the reset at most the window.
//!
//! A call reserves one request and `prompt + max_tokens` tokens at
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

/// The window of a bucket when none is given: one minute.
const MINUTE: Duration = Duration::from_secs(60);

/// One continuously refilled bucket (of requests or of tokens).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// The limit per minute, as configured.
    per_minute: u64,
    /// Seconds of refill the bucket holds.
    window: f64,
    capacity: f64,
    level: f64,
    /// Units per second.
    rate: f64,
    /// Seconds since the quota's start, at the last refill.
    at: f64,
}

/// What a bucket of `per_minute` holds over `window` seconds: never less
/// than one unit (a bucket that cannot hold one request would refuse every
/// request forever), unless the limit is zero.
fn capacity(per_minute: u64, window: f64) -> f64 {
    let per_minute = per_minute as f64;
    (per_minute * window / 60.0).max(per_minute.min(1.0))
}

impl TokenBucket {
    /// A full bucket holding `per_minute` units, refilled at `per_minute /
    /// 60` a second (a one-minute window).
    pub fn per_minute(per_minute: u64) -> Self {
        TokenBucket::with_window(per_minute, MINUTE)
    }

    /// A full bucket refilled at `per_minute / 60` a second that holds
    /// `window` of that refill: `per_minute × window / 60` units, never
    /// less than one. A rehearsal at time scale `k` gives `60 s ÷ k`, so
    /// that the bucket holds one scenario minute of its (rate-scaled)
    /// limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wire::TokenBucket;
    ///
    /// // 12 a minute at time scale 10: 120 a real minute, 12 a burst.
    /// let mut b = TokenBucket::with_window(120, Duration::from_secs(6));
    /// assert_eq!((b.limit(), b.capacity(), b.remaining(0.0)), (120, 12, 12));
    /// assert_eq!(b.until_full(0.0), Duration::ZERO);
    /// ```
    pub fn with_window(per_minute: u64, window: Duration) -> Self {
        let window = window.as_secs_f64();
        let capacity = capacity(per_minute, window);
        TokenBucket {
            per_minute,
            window,
            capacity,
            level: capacity,
            rate: per_minute as f64 / 60.0,
            at: 0.0,
        }
    }

    fn refill(&mut self, now: f64) {
        if now > self.at {
            self.level = (self.level + (now - self.at) * self.rate).min(self.capacity);
            self.at = now;
        }
    }

    /// The limit per minute, as configured (the rate-limit headers' limit;
    /// the bucket's size too at a one-minute window).
    pub fn limit(&self) -> u64 {
        self.per_minute
    }

    /// The most the bucket holds, in whole units: a reservation larger than
    /// this never fits.
    pub fn capacity(&self) -> u64 {
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

    /// Changes the bucket's limit (a timeline phase changed the quota),
    /// keeping its window and what is used: a full bucket stays full.
    fn resize(&mut self, per_minute: u64, now: f64) {
        if per_minute == self.per_minute {
            return;
        }
        self.refill(now);
        let used = self.capacity - self.level;
        let capacity = capacity(per_minute, self.window);
        self.per_minute = per_minute;
        self.capacity = capacity;
        self.rate = per_minute as f64 / 60.0;
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
    /// The limit per minute, for the error message.
    pub limit_value: u64,
    /// The most the limit's bucket holds (whole units): what a request
    /// larger than never fits. `limit_value` at a one-minute window.
    pub capacity: u64,
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
#[derive(Debug, Clone)]
pub struct QuotaBuckets {
    /// The span of refill each bucket holds.
    window: Duration,
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
}

/// Buckets with a one-minute window.
impl Default for QuotaBuckets {
    fn default() -> Self {
        QuotaBuckets::with_window(MINUTE)
    }
}

/// A snapshot of both buckets, for the rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSnapshot {
    /// (limit per minute, remaining, time until full) of the request
    /// bucket.
    pub requests: Option<(u64, u64, Duration)>,
    /// (limit per minute, remaining, time until full) of the token bucket.
    pub tokens: Option<(u64, u64, Duration)>,
}

impl QuotaBuckets {
    /// The window of [`QuotaBuckets::default`] and [`TokenBucket::per_minute`]:
    /// one minute, the window of a provider's per-minute limits.
    pub const MINUTE: Duration = MINUTE;

    /// No limits yet; each bucket [`QuotaBuckets::configure`] makes holds
    /// `window` of its refill (see [`TokenBucket::with_window`]): one
    /// minute at full scale, `60 s ÷ time_scale` in a rehearsal, so that a
    /// bucket holds one scenario minute of its limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wire::{QuotaBuckets, QuotaLimit};
    ///
    /// // 12 requests a minute, rehearsed at time scale 10: 120 a real
    /// // minute, and a burst of 12, as in one minute of the event.
    /// let mut q = QuotaBuckets::with_window(Duration::from_secs(6));
    /// q.configure(Some(120), None, 0.0);
    /// for _ in 0..12 {
    ///     q.reserve(0, 0.0).unwrap();
    /// }
    /// let refused = q.reserve(0, 0.0).unwrap_err();
    /// assert_eq!(refused.limit, QuotaLimit::Requests);
    /// assert_eq!(refused.retry_after, Some(Duration::from_millis(500)));
    /// // The headers' limit is the limit per minute; what remains is the bucket's.
    /// assert_eq!(q.snapshot(0.0).requests, Some((120, 0, Duration::from_secs(6))));
    /// ```
    pub fn with_window(window: Duration) -> Self {
        QuotaBuckets {
            window,
            requests: None,
            tokens: None,
        }
    }

    /// The span of refill each bucket holds.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Sets the limits in force (from the config and the active phase);
    /// `None` removes a limit.
    pub fn configure(&mut self, rpm: Option<u64>, tpm: Option<u64>, now: f64) {
        let window = self.window;
        let set = |slot: &mut Option<TokenBucket>, limit: Option<u64>| match (slot.as_mut(), limit)
        {
            (_, None) => *slot = None,
            (None, Some(l)) => {
                let mut b = TokenBucket::with_window(l, window);
                b.at = now;
                *slot = Some(b);
            }
            (Some(b), Some(l)) => b.resize(l, now),
        };
        set(&mut self.requests, rpm);
        set(&mut self.tokens, tpm);
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
                        capacity: bucket.capacity(),
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
/// reset as an RFC 3339 time). A limit not in force has no headers. The
/// limit is the limit per minute as configured (in a rehearsal, scaled as
/// a rate); remaining and reset are the bucket's, which in a time-compressed
/// rehearsal holds one scenario minute: remaining at most `limit ÷
/// time_scale`, reset at most `60 s ÷ time_scale` (see the module doc).
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
    fn a_window_of_six_seconds_holds_a_tenth_of_the_limit_per_minute() {
        let six = Duration::from_secs(6);
        let mut b = TokenBucket::with_window(12_000, six);
        assert_eq!(
            (b.limit(), b.capacity(), b.remaining(0.0)),
            (12_000, 1_200, 1_200)
        );
        // The refill rate is the limit's: 200 a second, full again in 6 s.
        b.take(200.0);
        assert_eq!(b.wait_for(1_200.0, 0.0), Some(Duration::from_secs(1)));
        assert_eq!(b.wait_for(1_201.0, 0.0), None, "larger than the bucket");
        let mut minute = TokenBucket::per_minute(12_000);
        assert_eq!((minute.limit(), minute.capacity()), (12_000, 12_000));
        assert_eq!(minute.remaining(0.0), 12_000);
        assert_eq!(QuotaBuckets::default().window(), MINUTE);
    }

    #[test]
    fn twelve_a_minute_rehearsed_ten_times_faster_holds_one_scenario_minute() {
        // 12 requests a minute at time scale 10 and quota scale 10: 12 a
        // real minute (× 10 ÷ 10), one scenario minute in 6 real seconds.
        // The bucket holds 1.2 requests: the second of two at once is
        // refused (with a one-minute window it held 12, ten scenario
        // minutes of burst).
        let mut q = QuotaBuckets::with_window(Duration::from_secs(6));
        q.configure(Some(12), None, 0.0);
        q.reserve(0, 0.0).unwrap();
        let r = q.reserve(0, 0.0).unwrap_err();
        assert_eq!(r.limit, QuotaLimit::Requests);
        assert_eq!((r.limit_value, r.capacity), (12, 1));
        // 0.2 left, 0.8 missing at 0.2 a second.
        let wait = r.retry_after.unwrap().as_secs_f64();
        assert!((wait - 4.0).abs() < 1e-9, "{wait}");
        assert!(q.reserve(0, 4.0).is_ok());
        let snap = q.snapshot(4.0).requests.unwrap();
        assert_eq!(
            (snap.0, snap.1),
            (12, 0),
            "the limit per minute, the bucket's remaining"
        );
        assert!(
            (snap.2.as_secs_f64() - 6.0).abs() < 1e-9,
            "full in one window"
        );

        // At time scale 10 alone: 120 a real minute, a burst of 12.
        let mut q = QuotaBuckets::with_window(Duration::from_secs(6));
        q.configure(Some(120), None, 0.0);
        for i in 0..12 {
            assert!(q.reserve(0, 0.0).is_ok(), "request {i}");
        }
        assert!(q.reserve(0, 0.0).is_err(), "the 13th");
        let mut full = QuotaBuckets::default();
        full.configure(Some(120), None, 0.0);
        for i in 0..120 {
            assert!(full.reserve(0, 0.0).is_ok(), "request {i}");
        }
    }

    #[test]
    fn a_window_keeps_at_least_one_unit_and_survives_a_resize() {
        // 5 a minute over 6 s would hold half a request: it holds one.
        let mut q = QuotaBuckets::with_window(Duration::from_secs(6));
        q.configure(Some(5), Some(60_000), 0.0);
        q.reserve(100, 0.0).unwrap();
        let r = q.reserve(100, 0.0).unwrap_err();
        assert_eq!((r.limit, r.capacity), (QuotaLimit::Requests, 1));
        assert_eq!(r.retry_after, Some(Duration::from_secs(12)));
        // A request larger than the bucket (6,000 tokens) never fits, though
        // smaller than the limit per minute.
        let r = q.reserve(7_000, 12.0).unwrap_err();
        assert_eq!((r.limit, r.retry_after), (QuotaLimit::Tokens, None));
        assert_eq!(
            (r.limit_value, r.capacity, r.requested),
            (60_000, 6_000, 7_000)
        );
        // A phase doubles the limit: the bucket doubles within its window,
        // keeping what is used (100 of 6,000).
        q.reserve(100, 12.0).unwrap();
        q.configure(Some(5), Some(120_000), 12.0);
        let tokens = q.snapshot(12.0).tokens.unwrap();
        assert_eq!((tokens.0, tokens.1), (120_000, 11_900));
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
