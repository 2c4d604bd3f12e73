//! The load curve: how a call's latency grows with the calls in service,
//! as a batched inference server's does (more sequences in a batch, each
//! step slower).
//!
//! One shape, with an exponent: flat up to the knee K, then every latency
//! draw of a call admitted with `n` calls in service (itself included) is
//! multiplied by `(n / K)^e`. With a mean service time S at rest:
//!
//! | exponent e | latency at n > K | throughput at n > K | what it is like |
//! |---|---|---|---|
//! | 0 | S | n / S (no knee) | latency independent of load |
//! | 0.5 | S·√(n/K) | (K/S)·√(n/K): still grows, ever slower | a server with headroom past its sweet spot |
//! | 1 (default) | S·n/K | K / S, flat | batching: more calls, each slower, no more answers |
//! | 2 | S·(n/K)² | (K/S)·K/n: falls | thrashing: past the knee, added calls cost answers |
//!
//! So with K = 32 and S = 1 s, 64 calls at once each take 2 s (e = 1) and
//! the provider answers 32 a second either way; `rehearse calibrate` finds
//! the knee from the outside. The factor is fixed at admission: a call
//! keeps the pace it started at, as a sequence keeps its batch. It composes
//! with the multiplier (a brownout), the ceiling (calls past it wait and
//! are not in service) and the quota.

/// The factor on a call's latency draws when it is admitted with
/// `in_service` calls in service (itself included): 1 up to the knee,
/// `(in_service / knee)^exponent` past it; 1 without a knee.
///
/// ```
/// use fake_provider::curve::load_factor;
/// assert_eq!(load_factor(10, Some(32), 1.0), 1.0);
/// assert_eq!(load_factor(64, Some(32), 1.0), 2.0);
/// assert_eq!(load_factor(64, Some(32), 2.0), 4.0);
/// assert_eq!(load_factor(64, None, 1.0), 1.0);
/// ```
pub fn load_factor(in_service: u32, knee: Option<u32>, exponent: f64) -> f64 {
    match knee {
        Some(k) if k > 0 && in_service > k => (f64::from(in_service) / f64::from(k)).powf(exponent),
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_knee_throughput_is_flat_at_exponent_one() {
        // n calls each taking S·factor: throughput n / (S·factor).
        let s = 1.0;
        let throughput = |n: u32, e: f64| f64::from(n) / (s * load_factor(n, Some(32), e));
        for n in [32, 40, 64, 128] {
            assert!((throughput(n, 1.0) - 32.0).abs() < 1e-9, "{n}");
        }
        assert!(throughput(64, 2.0) < throughput(40, 2.0), "thrashing falls");
        assert!(
            throughput(64, 0.5) > throughput(40, 0.5),
            "headroom still grows"
        );
        assert_eq!(throughput(16, 1.0), 16.0, "flat latency below the knee");
    }
}
