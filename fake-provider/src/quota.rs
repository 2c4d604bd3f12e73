//! The quota: requests per minute and tokens per minute as continuously
//! refilled buckets, and the snapshot the rate-limit headers describe.
//!
//! Each bucket holds up to one minute's allowance and refills at
//! `limit / 60` per second, which is how the providers describe their
//! limits. A call reserves one request and `prompt + max_tokens` tokens at
//! admission; when it ends it settles what it really used, and the
//! difference goes back into the bucket.

use std::time::Duration;

/// One continuously refilled bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    capacity: f64,
    level: f64,
    /// Units per second.
    rate: f64,
    /// Seconds since the quota's start, at the last refill.
    at: f64,
}

impl Bucket {
    /// A full bucket holding `per_minute` units.
    pub fn per_minute(per_minute: u64) -> Self {
        let capacity = per_minute as f64;
        Bucket {
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
pub enum Limit {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refusal {
    /// The limit that needs the longest wait.
    pub limit: Limit,
    /// When the reservation would fit; `None` if it never can.
    pub retry_after: Option<Duration>,
    /// The limit's size, for the error message.
    pub limit_value: u64,
    /// What was asked for.
    pub requested: u64,
}

/// The request and token buckets of one account.
#[derive(Debug, Clone, Default)]
pub struct Quota {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// A snapshot of both buckets, for the rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// (limit, remaining, time until full) of the request bucket.
    pub requests: Option<(u64, u64, Duration)>,
    /// (limit, remaining, time until full) of the token bucket.
    pub tokens: Option<(u64, u64, Duration)>,
}

impl Quota {
    /// Sets the limits in force (from the config and the active phase);
    /// `None` removes a limit.
    pub fn configure(&mut self, rpm: Option<u64>, tpm: Option<u64>, now: f64) {
        fn set(slot: &mut Option<Bucket>, limit: Option<u64>, now: f64) {
            match (slot.as_mut(), limit) {
                (_, None) => *slot = None,
                (None, Some(l)) => {
                    let mut b = Bucket::per_minute(l);
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
    pub fn reserve(&mut self, tokens: u64, now: f64) -> Result<(), Refusal> {
        let mut refusal: Option<Refusal> = None;
        let mut consider = |limit: Limit, bucket: &mut Bucket, amount: f64| {
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
                    refusal = Some(Refusal {
                        limit,
                        retry_after: wait,
                        limit_value: bucket.limit(),
                        requested: amount as u64,
                    });
                }
            }
        };
        if let Some(b) = self.requests.as_mut() {
            consider(Limit::Requests, b, 1.0);
        }
        if let Some(b) = self.tokens.as_mut() {
            consider(Limit::Tokens, b, tokens as f64);
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
    pub fn snapshot(&mut self, now: f64) -> Snapshot {
        let mut snap = |b: &mut Bucket| (b.limit(), b.remaining(now), b.until_full(now));
        Snapshot {
            requests: self.requests.as_mut().map(&mut snap),
            tokens: self.tokens.as_mut().map(&mut snap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_reserves_refills_and_says_when() {
        let mut q = Quota::default();
        q.configure(None, Some(6000), 0.0); // 100 tokens per second
        assert!(q.reserve(5000, 0.0).is_ok());
        let r = q.reserve(2000, 0.0).unwrap_err();
        assert_eq!(r.limit, Limit::Tokens);
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
        let mut q = Quota::default();
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
        let mut q = Quota::default();
        q.configure(Some(2), Some(1000), 0.0); // one request every 30 s
        q.reserve(1, 0.0).unwrap();
        q.reserve(1, 0.0).unwrap();
        let r = q.reserve(1, 0.0).unwrap_err();
        assert_eq!(r.limit, Limit::Requests);
        assert_eq!(r.retry_after, Some(Duration::from_secs(30)));
        let r = q.reserve(5000, 60.0).unwrap_err();
        assert_eq!((r.limit, r.retry_after), (Limit::Tokens, None));
    }

    #[test]
    fn resize_keeps_usage() {
        let mut q = Quota::default();
        q.configure(None, Some(600), 0.0);
        q.reserve(100, 0.0).unwrap();
        q.configure(None, Some(6000), 0.0);
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 5900);
        q.configure(None, Some(60), 0.0);
        assert_eq!(q.snapshot(0.0).tokens.unwrap().1, 0);
    }
}
