//! Tenants: what each API key is entitled to, enforced whatever the load.
//!
//! A tenant's entitlement is a rate limit (tokens per minute, optionally
//! requests per minute), kept as [`wire::QuotaBuckets`], the same buckets
//! the fake provider plays its quota with: each refills at the limit per
//! minute and holds `tenant_window` of it, one minute unless a rehearsal
//! compresses time (then one scenario minute, `60 s ÷ time_scale`). It is a different policy from
//! load shedding, with a different trigger: a tenant over its entitlement
//! is refused on an idle gateway, and a tenant well inside it can still be
//! shed when the gateway as a whole cannot serve everyone.
//!
//! A request reserves one request and its cost (prompt + max_tokens) at
//! admission, before any shedding. If it is then shed, dropped stale, or
//! its caller hangs up while it waits, the provider was never called and
//! the reservation goes back to the tenant ([`Charge`] is dropped). Once it
//! is dispatched the reservation is spent: the gateway does not read
//! answers, so it charges what a request may use, not what it used.
//!
//! A request with no API key, or a key that is not a tenant's, has no
//! entitlement to exceed: it is not limited (only shedding applies to it).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::header::{HeaderMap, AUTHORIZATION};
use wire::headers::X_API_KEY;
use wire::{Clock, QuotaBuckets, QuotaRefusal, QuotaSnapshot};

use crate::config::TenantConfig;

/// One tenant's buckets, shared by its requests in flight.
type Account = Arc<Mutex<QuotaBuckets>>;

/// Every tenant's account, by API key.
pub(crate) struct Tenants {
    clock: Clock,
    accounts: HashMap<String, Account>,
}

/// Why a tenant's request was refused, and the tenant's buckets then (for
/// its `x-ratelimit-*` headers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OverEntitlement {
    pub(crate) refusal: QuotaRefusal,
    pub(crate) snapshot: QuotaSnapshot,
    /// Unix microseconds of the refusal (Anthropic's reset headers are times).
    pub(crate) now_us: u64,
}

/// A request's reservation against its tenant's entitlement: given back
/// when dropped, unless [`Charge::spend`] was called first.
pub(crate) struct Charge {
    account: Account,
    clock: Clock,
    tokens: u64,
    spent: bool,
}

impl Tenants {
    /// Every tenant's account, full, each bucket holding `window` of its
    /// refill.
    pub(crate) fn new(config: &BTreeMap<String, TenantConfig>, window: Duration) -> Tenants {
        let clock = Clock::new();
        let accounts = config
            .iter()
            .map(|(key, t)| {
                let mut buckets = QuotaBuckets::with_window(window);
                buckets.configure(t.requests_per_minute, Some(t.tokens_per_minute), 0.0);
                (key.clone(), Arc::new(Mutex::new(buckets)))
            })
            .collect();
        Tenants { clock, accounts }
    }

    /// Reserves `tokens` (and one request) for the tenant whose API key
    /// `headers` carry. `Ok(None)`: no key, or not a tenant's, so nothing to
    /// charge.
    pub(crate) fn charge(
        &self,
        headers: &HeaderMap,
        tokens: u64,
    ) -> Result<Option<Charge>, OverEntitlement> {
        if self.accounts.is_empty() {
            return Ok(None);
        }
        let Some(account) = api_key(headers).and_then(|k| self.accounts.get(k)) else {
            return Ok(None);
        };
        let mut buckets = lock(account);
        let now = self.clock.secs();
        match buckets.reserve(tokens, now) {
            Ok(()) => Ok(Some(Charge {
                account: account.clone(),
                clock: self.clock,
                tokens,
                spent: false,
            })),
            Err(refusal) => Err(OverEntitlement {
                refusal,
                snapshot: buckets.snapshot(now),
                now_us: self.clock.now_us(),
            }),
        }
    }
}

impl Charge {
    /// The provider is being called: the reservation is the tenant's to
    /// keep paying for.
    pub(crate) fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if !self.spent {
            lock(&self.account).cancel(self.tokens, self.clock.secs());
        }
    }
}

fn lock(account: &Account) -> MutexGuard<'_, QuotaBuckets> {
    // The buckets are plain arithmetic; a panic elsewhere while holding
    // the lock leaves them usable.
    account.lock().unwrap_or_else(|e| e.into_inner())
}

/// The API key a request carries: `Authorization: Bearer KEY` (OpenAI),
/// else `x-api-key` (Anthropic).
pub(crate) fn api_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, key) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        });
    bearer
        .or_else(|| headers.get(X_API_KEY)?.to_str().ok().map(str::trim))
        .filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use wire::QuotaLimit;

    fn tenants(entries: &[(&str, u64, Option<u64>)]) -> Tenants {
        tenants_over(entries, QuotaBuckets::MINUTE)
    }

    fn tenants_over(entries: &[(&str, u64, Option<u64>)], window: Duration) -> Tenants {
        let config = entries
            .iter()
            .map(|&(k, tpm, rpm)| {
                (
                    k.to_string(),
                    TenantConfig {
                        tokens_per_minute: tpm,
                        requests_per_minute: rpm,
                    },
                )
            })
            .collect();
        Tenants::new(&config, window)
    }

    fn bearer(key: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
        h
    }

    #[test]
    fn the_key_is_the_bearer_token_or_x_api_key() {
        assert_eq!(api_key(&bearer("k-1")), Some("k-1"));
        let mut h = HeaderMap::new();
        h.insert(X_API_KEY, HeaderValue::from_static("k-2"));
        assert_eq!(api_key(&h), Some("k-2"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer k-1"));
        assert_eq!(api_key(&h), Some("k-1"), "the bearer token first");
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(api_key(&h), Some("k-2"), "not a bearer token");
        assert_eq!(api_key(&HeaderMap::new()), None);
        assert_eq!(api_key(&bearer("")), None);
    }

    #[test]
    fn over_its_entitlement_a_tenant_is_refused_with_its_buckets() {
        let t = tenants(&[("a", 600, None), ("b", 60_000, None)]);
        let a = bearer("a");
        let first = t.charge(&a, 500).unwrap().expect("a tenant's charge");
        first.spend();
        let limited = t.charge(&a, 200).err().expect("over 600 a minute");
        assert_eq!(limited.refusal.limit, QuotaLimit::Tokens);
        let (limit, remaining, _) = limited.snapshot.tokens.unwrap();
        assert_eq!((limit, remaining), (600, 100));
        // 100 missing at 10 tokens a second: about 10 s.
        let wait = limited.refusal.retry_after.unwrap().as_secs_f64();
        assert!((9.0..=10.0).contains(&wait), "{wait}");
        assert!(
            t.charge(&bearer("b"), 200).unwrap().is_some(),
            "another tenant is served"
        );
        assert!(
            t.charge(&bearer("nobody"), 1_000_000).unwrap().is_none(),
            "unknown key: not limited"
        );
        assert!(
            t.charge(&HeaderMap::new(), 1_000_000).unwrap().is_none(),
            "no key: not limited"
        );
        let never = t.charge(&a, 601).err().expect("larger than the bucket");
        assert_eq!(never.refusal.retry_after, None);
    }

    #[test]
    fn a_charge_not_spent_goes_back_to_the_tenant() {
        let t = tenants(&[("a", 600, Some(2))]);
        let a = bearer("a");
        drop(t.charge(&a, 500).unwrap());
        drop(t.charge(&a, 500).unwrap());
        drop(t.charge(&a, 500).unwrap());
        let kept = t.charge(&a, 500).unwrap().unwrap();
        kept.spend();
        let again = t.charge(&a, 500).err().expect("500 of 600 spent");
        assert_eq!(again.refusal.limit, QuotaLimit::Tokens);
        assert_eq!(
            again.snapshot.requests.unwrap().1,
            1,
            "one request of two spent"
        );
    }

    #[test]
    fn a_time_scaled_tenant_holds_one_scenario_minute() {
        // 12 requests and 12,000 tokens a minute at time scale 10 (and
        // quota scale 10, as scenarios/tenants.toml): 12 a real minute,
        // one scenario minute in 6 s, so the bucket holds 1.2 requests.
        let t = tenants_over(&[("batch", 12_000, Some(12))], Duration::from_secs(6));
        let key = bearer("batch");
        t.charge(&key, 500).unwrap().unwrap().spend();
        let limited = t
            .charge(&key, 500)
            .err()
            .expect("one scenario minute spent");
        assert_eq!(limited.refusal.limit, QuotaLimit::Requests);
        let (limit, remaining, reset) = limited.snapshot.requests.unwrap();
        assert_eq!(
            (limit, remaining),
            (12, 0),
            "the limit per minute, the bucket's remaining"
        );
        assert!(
            reset <= Duration::from_secs(6),
            "full within one window: {reset:?}"
        );
        let (limit, remaining, _) = limited.snapshot.tokens.unwrap();
        assert_eq!((limit, remaining), (12_000, 700), "1,200 held, 500 spent");
    }
}
