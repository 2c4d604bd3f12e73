//! Values drawn per call or per person: the fake provider's latencies and
//! answer lengths, the load's prompt sizes, `max_tokens` and patience. One
//! type, [`Dist`], for both sides and for the plan, so that a shape reads,
//! validates, draws and averages the same wherever it is written.
//!
//! In TOML one key names the shape:
//!
//! ```toml
//! a = { fixed = 16 }
//! b = { uniform = { min = 50, max = 400 } }
//! c = { lognormal = { median = "620ms", p99 = "1.5s" } }
//! d = { exponential = { mean = 200 } }
//! e = { mix = [ { value = 0, weight = 0.8 }, { value = 40, weight = 0.2 } ] }
//! ```
//!
//! A value is a number for a count (`Dist<u32>`, `Dist<f64>`) and a
//! humantime string for a duration (`Dist<Dur>`). A lognormal is given by
//! its median and 99th percentile; a p99 equal to the median is no spread
//! (every draw is the median, and nothing is drawn from the random
//! stream), a p99 below it an error.
//!
//! Draws are made in one unit per kind of value ([`Quantity`]): counts as
//! they are, durations in milliseconds. The fake provider drew in
//! milliseconds before the load generator shared this type, and the seeded
//! draws of every shipped scenario depend on it (see the draw tests of
//! both crates).

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution as _, Exp, LogNormal};
use serde::{Deserialize, Serialize};

use crate::number::Z_P99;

/// A duration written as a humantime string (`"250ms"`, `"2m"`,
/// `"1h30m"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Dur(#[serde(with = "humantime_serde")] pub Duration);

/// What a [`Dist`] holds: a value that converts to and from the number
/// draws are made with.
pub trait Quantity: Copy {
    /// What one draw gives its user (a [`Duration`] for a [`Dur`]).
    type Drawn;
    /// The value as a number in the unit draws are made in (milliseconds
    /// for a duration).
    fn units(self) -> f64;
    /// A number in that unit as a number in the value's own (seconds for a
    /// duration): what [`Dist::mean`] and [`Dist::sample_f64`] give.
    fn own(units: f64) -> f64 {
        units
    }
    /// A draw, at least 0, in that unit, as its user takes it.
    fn drawn(units: f64) -> Self::Drawn;
}

impl Quantity for f64 {
    type Drawn = f64;
    fn units(self) -> f64 {
        self
    }
    fn drawn(units: f64) -> f64 {
        units
    }
}

impl Quantity for u32 {
    type Drawn = u32;
    fn units(self) -> f64 {
        f64::from(self)
    }
    /// Rounded to the nearest count.
    fn drawn(units: f64) -> u32 {
        units.round().clamp(0.0, f64::from(u32::MAX)) as u32
    }
}

impl Quantity for Dur {
    type Drawn = Duration;
    fn units(self) -> f64 {
        self.0.as_secs_f64() * 1000.0
    }
    fn own(units: f64) -> f64 {
        units / 1000.0
    }
    fn drawn(units: f64) -> Duration {
        Duration::from_secs_f64(Self::own(units))
    }
}

/// A value drawn from a distribution: fixed, uniform between two bounds,
/// lognormal given its median and 99th percentile, exponential given its
/// mean, or one of a few values with weights. See the module's docs for
/// the TOML.
///
/// ```
/// use rand::SeedableRng;
/// use wire::{Dist, Dur};
///
/// #[derive(serde::Deserialize)]
/// struct Load { patience: Dist<Dur>, prompt_tokens: Dist<f64> }
/// let load: Load = toml::from_str(
///     "patience = { fixed = \"25s\" }\nprompt_tokens = { lognormal = { median = 1500, p99 = 1500 } }",
/// ).unwrap();
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
/// assert_eq!(load.patience.sample(&mut rng), std::time::Duration::from_secs(25));
/// assert_eq!(load.patience.mean(), 25.0);
/// assert_eq!(load.prompt_tokens.sample(&mut rng), 1500.0, "no spread");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Dist<T> {
    /// Always this value.
    Fixed(T),
    /// Uniform in `[min, max]`.
    Uniform {
        /// The lower bound.
        min: T,
        /// The upper bound, at least `min`.
        max: T,
    },
    /// Lognormal with this median and 99th percentile.
    Lognormal {
        /// The median, above 0.
        median: T,
        /// The 99th percentile, at least the median (equal: no spread).
        p99: T,
    },
    /// Exponential with this mean.
    Exponential {
        /// The mean, above 0.
        mean: T,
    },
    /// One of a few values, each drawn in proportion to its weight.
    Mix(Vec<MixEntry<T>>),
}

/// One value of a `mix`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry<T> {
    /// The value.
    pub value: T,
    /// Its relative weight (the weights need not add up to 1).
    pub weight: f64,
}

/// Why a distribution is not valid: the field at fault, below the
/// distribution's own path (`lognormal.p99`, `mix[1].weight`), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DistError {
    /// The dotted field below the distribution's path.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for DistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for DistError {}

fn err(field: impl Into<String>, message: impl Into<String>) -> DistError {
    DistError {
        field: field.into(),
        message: message.into(),
    }
}

/// A number a distribution may hold: finite and at least 0.
fn non_negative(field: &str, v: f64) -> Result<f64, DistError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(err(field, format!("must be a finite number >= 0, got {v}")))
    }
}

/// A lognormal's `mu` and `sigma` from its median and p99 (in draw
/// units); `None` for a median of 0 or less.
fn lognormal(median: f64, p99: f64) -> Option<(f64, f64)> {
    if median <= 0.0 {
        return None;
    }
    let mu = median.ln();
    Some((mu, (p99.max(median).ln() - mu) / Z_P99))
}

impl<T: Quantity> Dist<T> {
    /// Checks the rules serde cannot: every value finite and at least 0, a
    /// uniform's `max` at least its `min`, a lognormal's median above 0
    /// and its p99 at least the median, an exponential's mean above 0, a
    /// mix with at least one entry and weights finite, at least 0, not all
    /// 0.
    ///
    /// ```
    /// use wire::Dist;
    /// let bad: Dist<f64> = Dist::Lognormal { median: 10.0, p99: 5.0 };
    /// assert_eq!(bad.check().unwrap_err().field, "lognormal.p99");
    /// assert!(Dist::Lognormal { median: 10.0, p99: 10.0 }.check().is_ok());
    /// ```
    pub fn check(&self) -> Result<(), DistError> {
        match self {
            Dist::Fixed(v) => non_negative("fixed", v.units()).map(drop),
            Dist::Uniform { min, max } => {
                let lo = non_negative("uniform.min", min.units())?;
                if non_negative("uniform.max", max.units())? < lo {
                    return Err(err("uniform.max", "must be at least `min`"));
                }
                Ok(())
            }
            Dist::Lognormal { median, p99 } => {
                if non_negative("lognormal.median", median.units())? <= 0.0 {
                    return Err(err("lognormal.median", "must be above 0"));
                }
                if non_negative("lognormal.p99", p99.units())? < median.units() {
                    return Err(err(
                        "lognormal.p99",
                        "must be at least the median (equal: no spread)",
                    ));
                }
                Ok(())
            }
            Dist::Exponential { mean } => {
                if non_negative("exponential.mean", mean.units())? <= 0.0 {
                    return Err(err("exponential.mean", "must be above 0"));
                }
                Ok(())
            }
            Dist::Mix(entries) => {
                if entries.is_empty() {
                    return Err(err("mix", "needs at least one `{ value, weight }` entry"));
                }
                let mut total = 0.0;
                for (i, e) in entries.iter().enumerate() {
                    non_negative(&format!("mix[{i}].value"), e.value.units())?;
                    total += non_negative(&format!("mix[{i}].weight"), e.weight)?;
                }
                if total <= 0.0 {
                    return Err(err("mix", "the weights must not all be 0"));
                }
                Ok(())
            }
        }
    }

    /// One draw, in draw units, at least 0. The random stream is read as
    /// the shape needs: nothing for a fixed value, an equal uniform's
    /// bounds or a lognormal with no spread; one value for a uniform or a
    /// mix; the normal or exponential sampler's values otherwise.
    fn draw_units<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let x = match self {
            Dist::Fixed(v) => v.units(),
            Dist::Uniform { min, max } => {
                let (a, b) = (min.units(), max.units());
                if b > a {
                    rng.gen_range(a..=b)
                } else {
                    a
                }
            }
            Dist::Lognormal { median, p99 } => match lognormal(median.units(), p99.units()) {
                None => 0.0,
                Some((_, sigma)) if sigma <= 0.0 => median.units(),
                // LogNormal::new fails only for a negative or NaN sigma,
                // excluded just above.
                Some((mu, sigma)) => {
                    LogNormal::new(mu, sigma).map_or(median.units(), |d| d.sample(rng))
                }
            },
            Dist::Exponential { mean } => {
                let mean = mean.units();
                // Exp::new fails only for a negative or NaN rate, which a
                // checked mean (above 0) never gives.
                Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng))
            }
            Dist::Mix(entries) => {
                let total: f64 = entries.iter().map(|e| e.weight).sum();
                let u: f64 = rng.gen();
                let mut cumulative = 0.0;
                let mut pick = entries.last().map_or(0.0, |e| e.value.units());
                for e in entries {
                    cumulative += e.weight / total;
                    if u < cumulative {
                        pick = e.value.units();
                        break;
                    }
                }
                pick
            }
        };
        x.max(0.0)
    }

    /// One draw, as its user takes it: a [`Duration`] for a [`Dur`], a
    /// count rounded for a `u32`, the number itself for an `f64`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> T::Drawn {
        T::drawn(self.draw_units(rng))
    }

    /// One draw as a number in the value's own unit (seconds for a
    /// duration), at least 0.
    pub fn sample_f64<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        T::own(self.draw_units(rng))
    }

    /// The distribution's mean, in the value's own unit (seconds for a
    /// duration): a lognormal's `median · e^(σ²/2)`, a mix's weighted mean.
    ///
    /// ```
    /// use wire::{Dist, Dur};
    /// let d = Dist::Uniform { min: Dur(std::time::Duration::from_secs(1)), max: Dur(std::time::Duration::from_secs(3)) };
    /// assert_eq!(d.mean(), 2.0);
    /// ```
    pub fn mean(&self) -> f64 {
        let units = match self {
            Dist::Fixed(v) => v.units(),
            Dist::Uniform { min, max } => (min.units() + max.units()) / 2.0,
            Dist::Lognormal { median, p99 } => match lognormal(median.units(), p99.units()) {
                None => 0.0,
                Some((_, sigma)) => median.units() * (sigma * sigma / 2.0).exp(),
            },
            Dist::Exponential { mean } => mean.units(),
            Dist::Mix(entries) => {
                let w: f64 = entries.iter().map(|e| e.weight).sum();
                if w > 0.0 {
                    entries
                        .iter()
                        .map(|e| e.value.units() * e.weight)
                        .sum::<f64>()
                        / w
                } else {
                    0.0
                }
            }
        };
        T::own(units)
    }

    /// The same shape with every value mapped by `f` (a duration ÷ the
    /// time scale).
    pub fn map<U>(&self, f: impl Fn(T) -> U) -> Dist<U> {
        match self {
            Dist::Fixed(v) => Dist::Fixed(f(*v)),
            Dist::Uniform { min, max } => Dist::Uniform {
                min: f(*min),
                max: f(*max),
            },
            Dist::Lognormal { median, p99 } => Dist::Lognormal {
                median: f(*median),
                p99: f(*p99),
            },
            Dist::Exponential { mean } => Dist::Exponential { mean: f(*mean) },
            Dist::Mix(entries) => Dist::Mix(
                entries
                    .iter()
                    .map(|e| MixEntry {
                        value: f(e.value),
                        weight: e.weight,
                    })
                    .collect(),
            ),
        }
    }
}

impl Dist<Dur> {
    /// Every duration at rehearsal scale ([`crate::Scale::duration`]).
    pub fn scaled(&self, scale: crate::Scale) -> Dist<Dur> {
        self.map(|d| Dur(scale.duration(d.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn ms(n: u64) -> Dur {
        Dur(Duration::from_millis(n))
    }

    #[test]
    fn lognormal_hits_its_median_p99_and_mean() {
        let d = Dist::Lognormal {
            median: ms(620),
            p99: ms(2000),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut v: Vec<f64> = (0..200_000).map(|_| d.sample_f64(&mut rng)).collect();
        v.sort_by(f64::total_cmp);
        let (median, p99) = (v[v.len() / 2], v[v.len() * 99 / 100]);
        assert!((median - 0.620).abs() < 0.01, "median {median}");
        assert!((p99 - 2.0).abs() < 0.06, "p99 {p99}");
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(
            (mean - d.mean()).abs() < 0.01,
            "mean {mean} against {}",
            d.mean()
        );
    }

    #[test]
    fn no_spread_draws_the_median_and_nothing_else() {
        let d = Dist::Lognormal {
            median: 7u32,
            p99: 7,
        };
        assert!(d.check().is_ok());
        let mut a = ChaCha8Rng::seed_from_u64(1);
        let mut b = a.clone();
        assert!((0..100).all(|_| d.sample(&mut a) == 7));
        assert_eq!(a.gen::<u64>(), b.gen::<u64>(), "the stream is untouched");
        assert_eq!(d.mean(), 7.0);
    }

    #[test]
    fn mix_follows_its_weights() {
        let d: Dist<f64> = toml::from_str::<toml::Table>(
            "d = { mix = [ { value = 0, weight = 3 }, { value = 40, weight = 1 } ] }",
        )
        .unwrap()["d"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(d.mean(), 10.0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let n = 40_000;
        let forties = (0..n).filter(|_| d.sample(&mut rng) == 40.0).count();
        let share = forties as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.01, "share {share}");
    }

    #[test]
    fn exponential_and_uniform_have_their_means() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for d in [
            Dist::Exponential { mean: ms(200) },
            Dist::Uniform {
                min: ms(100),
                max: ms(300),
            },
        ] {
            let n = 100_000;
            let mean = (0..n).map(|_| d.sample_f64(&mut rng)).sum::<f64>() / n as f64;
            assert!((mean - 0.2).abs() < 0.005, "{d:?}: {mean}");
            assert_eq!(d.mean(), 0.2, "{d:?}");
        }
    }

    #[test]
    fn bad_shapes_name_their_field() {
        let cases: [(Dist<f64>, &str); 8] = [
            (Dist::Fixed(-1.0), "fixed"),
            (Dist::Fixed(f64::NAN), "fixed"),
            (Dist::Uniform { min: 5.0, max: 1.0 }, "uniform.max"),
            (
                Dist::Lognormal {
                    median: 0.0,
                    p99: 1.0,
                },
                "lognormal.median",
            ),
            (
                Dist::Lognormal {
                    median: 10.0,
                    p99: 9.0,
                },
                "lognormal.p99",
            ),
            (Dist::Exponential { mean: 0.0 }, "exponential.mean"),
            (Dist::Mix(vec![]), "mix"),
            (
                Dist::Mix(vec![MixEntry {
                    value: 1.0,
                    weight: -1.0,
                }]),
                "mix[0].weight",
            ),
        ];
        for (d, field) in cases {
            assert_eq!(d.check().unwrap_err().field, field, "{d:?}");
        }
        let zero = Dist::Mix(vec![MixEntry {
            value: 1.0,
            weight: 0.0,
        }]);
        assert_eq!(zero.check().unwrap_err().field, "mix");
    }

    #[test]
    fn durations_read_as_humantime_and_scale() {
        let d: Dist<Dur> =
            toml::from_str::<toml::Table>("d = { uniform = { min = \"1s\", max = \"1500ms\" } }")
                .unwrap()["d"]
                .clone()
                .try_into()
                .unwrap();
        assert_eq!(
            d,
            Dist::Uniform {
                min: ms(1000),
                max: ms(1500)
            }
        );
        let tenfold = d.scaled(crate::Scale {
            time: 10.0,
            quota: 1.0,
        });
        assert_eq!(
            tenfold,
            Dist::Uniform {
                min: ms(100),
                max: ms(150)
            }
        );
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for _ in 0..100 {
            let x = tenfold.sample(&mut rng);
            assert!((ms(100).0..=ms(150).0).contains(&x), "{x:?}");
        }
    }
}
