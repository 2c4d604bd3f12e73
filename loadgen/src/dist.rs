//! Distributions of counts (tokens, kilobytes) and of durations (patience),
//! as written in the `[load]` table and as sampled during a run.
//!
//! Both kinds are written the same way, one key naming the shape:
//! `{ fixed = X }`, `{ uniform = { min = X, max = Y } }`,
//! `{ lognormal = { median = X, p99 = Y } }`, `{ exponential = { mean = X } }`
//! or `{ mix = [ { value = X, weight = W }, ... ] }`, where X is a number for
//! counts and a humantime string (`"250ms"`) for durations.

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Deserialize;
use wire::number::Z_P99;

/// A distribution of non-negative counts, as configured.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum CountDist {
    /// Always this value.
    Fixed(f64),
    /// Uniform between `min` and `max`, inclusive.
    Uniform {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
    },
    /// Lognormal with this median and 99th percentile.
    Lognormal {
        /// The median.
        median: f64,
        /// The 99th percentile; must be above the median.
        p99: f64,
    },
    /// Exponential with this mean.
    Exponential {
        /// The mean.
        mean: f64,
    },
    /// One of a few values, with weights.
    Mix(Vec<MixEntry<f64>>),
}

/// A distribution of durations, as configured (humantime strings).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum DurationDist {
    /// Always this duration.
    Fixed(#[serde(with = "humantime_serde")] Duration),
    /// Uniform between `min` and `max`.
    Uniform {
        /// Shortest.
        #[serde(with = "humantime_serde")]
        min: Duration,
        /// Longest.
        #[serde(with = "humantime_serde")]
        max: Duration,
    },
    /// Lognormal with this median and 99th percentile.
    Lognormal {
        /// The median.
        #[serde(with = "humantime_serde")]
        median: Duration,
        /// The 99th percentile; must be above the median.
        #[serde(with = "humantime_serde")]
        p99: Duration,
    },
    /// Exponential with this mean.
    Exponential {
        /// The mean.
        #[serde(with = "humantime_serde")]
        mean: Duration,
    },
    /// One of a few durations, with weights.
    Mix(Vec<MixEntry<HumanDuration>>),
}

/// A duration written as a humantime string, inside a `mix` entry.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct HumanDuration(#[serde(with = "humantime_serde")] pub Duration);

/// One value of a `mix` distribution.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MixEntry<T> {
    /// The value.
    pub value: T,
    /// Its relative weight (weights need not add up to 1).
    pub weight: f64,
}

/// A validated distribution over non-negative reals, ready to sample.
#[derive(Debug, Clone)]
pub(crate) enum Sampler {
    Fixed(f64),
    Uniform(f64, f64),
    Lognormal(LogNormal<f64>),
    Exponential(Exp<f64>),
    /// Values with cumulative weights normalised to end at 1.
    Mix(Vec<(f64, f64)>),
}

impl Sampler {
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let x = match self {
            Sampler::Fixed(v) => *v,
            Sampler::Uniform(lo, hi) if lo == hi => *lo,
            Sampler::Uniform(lo, hi) => rng.gen_range(*lo..=*hi),
            Sampler::Lognormal(d) => d.sample(rng),
            Sampler::Exponential(d) => d.sample(rng),
            Sampler::Mix(cumulative) => {
                let u: f64 = rng.gen();
                cumulative
                    .iter()
                    .find(|(_, c)| u < *c)
                    .or(cumulative.last())
                    .map_or(0.0, |(v, _)| *v)
            }
        };
        x.max(0.0)
    }

    /// Returns the mean of the distribution (used for plans and tests).
    #[cfg(test)]
    pub(crate) fn mean(&self) -> f64 {
        match self {
            Sampler::Fixed(v) => *v,
            Sampler::Uniform(lo, hi) => (lo + hi) / 2.0,
            Sampler::Lognormal(_) | Sampler::Exponential(_) => f64::NAN,
            Sampler::Mix(c) => {
                let mut prev = 0.0;
                c.iter()
                    .map(|(v, cum)| {
                        let w = cum - prev;
                        prev = *cum;
                        v * w
                    })
                    .sum()
            }
        }
    }
}

/// Why a distribution is not valid, with the sub-field at fault.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DistError {
    /// Dotted suffix below the distribution's own path, e.g. `lognormal.p99`.
    pub(crate) field: String,
    pub(crate) message: String,
}

fn err(field: &str, message: impl Into<String>) -> DistError {
    DistError {
        field: field.to_string(),
        message: message.into(),
    }
}

fn finite_non_negative(field: &str, v: f64) -> Result<f64, DistError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(err(field, format!("must be a finite number >= 0, got {v}")))
    }
}

fn build(
    fixed: Option<f64>,
    uniform: Option<(f64, f64)>,
    lognormal: Option<(f64, f64)>,
    exponential: Option<f64>,
    mix: Option<Vec<(f64, f64)>>,
) -> Result<Sampler, DistError> {
    if let Some(v) = fixed {
        return Ok(Sampler::Fixed(finite_non_negative("fixed", v)?));
    }
    if let Some((lo, hi)) = uniform {
        let lo = finite_non_negative("uniform.min", lo)?;
        let hi = finite_non_negative("uniform.max", hi)?;
        if hi < lo {
            return Err(err("uniform.max", "must be >= `min`"));
        }
        return Ok(Sampler::Uniform(lo, hi));
    }
    if let Some((median, p99)) = lognormal {
        let median = finite_non_negative("lognormal.median", median)?;
        let p99 = finite_non_negative("lognormal.p99", p99)?;
        if median <= 0.0 {
            return Err(err("lognormal.median", "must be > 0"));
        }
        if p99 <= median {
            return Err(err("lognormal.p99", "must be above `median`"));
        }
        // The lognormal's sigma from its median and p99.
        let sigma = (p99 / median).ln() / Z_P99;
        let d = LogNormal::new(median.ln(), sigma)
            .map_err(|e| err("lognormal", format!("invalid: {e}")))?;
        return Ok(Sampler::Lognormal(d));
    }
    if let Some(mean) = exponential {
        let mean = finite_non_negative("exponential.mean", mean)?;
        if mean <= 0.0 {
            return Err(err("exponential.mean", "must be > 0"));
        }
        let d = Exp::new(1.0 / mean).map_err(|e| err("exponential", format!("invalid: {e}")))?;
        return Ok(Sampler::Exponential(d));
    }
    let entries = mix.unwrap_or_default();
    if entries.is_empty() {
        return Err(err("mix", "needs at least one `{ value, weight }` entry"));
    }
    let mut total = 0.0;
    for (i, (v, w)) in entries.iter().enumerate() {
        finite_non_negative(&format!("mix[{i}].value"), *v)?;
        if !(w.is_finite() && *w >= 0.0) {
            return Err(err(
                &format!("mix[{i}].weight"),
                "must be a finite number >= 0",
            ));
        }
        total += w;
    }
    if total <= 0.0 {
        return Err(err("mix", "weights must not all be 0"));
    }
    let mut cum = 0.0;
    let cumulative = entries
        .into_iter()
        .map(|(v, w)| {
            cum += w / total;
            (v, cum)
        })
        .collect();
    Ok(Sampler::Mix(cumulative))
}

impl CountDist {
    pub(crate) fn sampler(&self) -> Result<Sampler, DistError> {
        match self {
            CountDist::Fixed(v) => build(Some(*v), None, None, None, None),
            CountDist::Uniform { min, max } => build(None, Some((*min, *max)), None, None, None),
            CountDist::Lognormal { median, p99 } => {
                build(None, None, Some((*median, *p99)), None, None)
            }
            CountDist::Exponential { mean } => build(None, None, None, Some(*mean), None),
            CountDist::Mix(entries) => build(
                None,
                None,
                None,
                None,
                Some(entries.iter().map(|e| (e.value, e.weight)).collect()),
            ),
        }
    }
}

impl DurationDist {
    /// The sampler works in seconds.
    pub(crate) fn sampler(&self) -> Result<Sampler, DistError> {
        let s = |d: &Duration| d.as_secs_f64();
        match self {
            DurationDist::Fixed(v) => build(Some(s(v)), None, None, None, None),
            DurationDist::Uniform { min, max } => {
                build(None, Some((s(min), s(max))), None, None, None)
            }
            DurationDist::Lognormal { median, p99 } => {
                build(None, None, Some((s(median), s(p99))), None, None)
            }
            DurationDist::Exponential { mean } => build(None, None, None, Some(s(mean)), None),
            DurationDist::Mix(entries) => build(
                None,
                None,
                None,
                None,
                Some(entries.iter().map(|e| (s(&e.value.0), e.weight)).collect()),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn lognormal_hits_median_and_p99() {
        let s = CountDist::Lognormal {
            median: 100.0,
            p99: 1000.0,
        }
        .sampler()
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut xs: Vec<f64> = (0..100_000).map(|_| s.sample(&mut rng)).collect();
        xs.sort_by(f64::total_cmp);
        let median = xs[50_000];
        let p99 = xs[99_000];
        assert!((median / 100.0 - 1.0).abs() < 0.03, "median {median}");
        assert!((p99 / 1000.0 - 1.0).abs() < 0.08, "p99 {p99}");
    }

    #[test]
    fn mix_follows_weights() {
        let s = CountDist::Mix(vec![
            MixEntry {
                value: 0.0,
                weight: 3.0,
            },
            MixEntry {
                value: 40.0,
                weight: 1.0,
            },
        ])
        .sampler()
        .unwrap();
        assert_eq!(s.mean(), 10.0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let n = 40_000;
        let forties = (0..n).filter(|_| s.sample(&mut rng) == 40.0).count();
        let share = forties as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.01, "share {share}");
    }

    #[test]
    fn invalid_shapes_name_their_field() {
        let e = CountDist::Lognormal {
            median: 10.0,
            p99: 5.0,
        }
        .sampler()
        .unwrap_err();
        assert_eq!(e.field, "lognormal.p99");
        let e = CountDist::Uniform { min: 5.0, max: 1.0 }
            .sampler()
            .unwrap_err();
        assert_eq!(e.field, "uniform.max");
        let e = CountDist::Fixed(-1.0).sampler().unwrap_err();
        assert_eq!(e.field, "fixed");
        let e = CountDist::Mix(vec![]).sampler().unwrap_err();
        assert_eq!(e.field, "mix");
    }

    #[test]
    fn durations_deserialize_from_humantime() {
        #[derive(Deserialize)]
        struct W {
            p: DurationDist,
        }
        let w: W = toml::from_str("p = { uniform = { min = \"1s\", max = \"1500ms\" } }").unwrap();
        let s = w.p.sampler().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..100 {
            let x = s.sample(&mut rng);
            assert!((1.0..=1.5).contains(&x));
        }
        let w: W = toml::from_str("p = { fixed = \"25s\" }").unwrap();
        assert_eq!(w.p.sampler().unwrap().sample(&mut rng), 25.0);
    }
}
