//! The arrival schedule: when each person arrives, as an offset from the
//! run's start instant. It knows nothing of when the run stops (see
//! [`crate::run::StopCondition`]) nor of the network.
//!
//! Phases are generated lazily through their cumulative intensity
//! `Λ(t) = ∫ rate`: evenly spaced arrivals sit at `Λ(t) = 0, 1, 2, …`, and
//! Poisson arrivals at the partial sums of unit exponentials, which makes a
//! ramp an exact non-homogeneous Poisson process (time change of a unit one).

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1};
use serde::{Deserialize, Serialize};

use crate::replay::ReplayRow;

/// How arrivals are spread inside a phase.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PhaseArrivals {
    /// Evenly spaced (a deterministic schedule).
    #[default]
    Constant,
    /// A Poisson process (exponential gaps), seeded.
    Poisson,
}

/// A validated phase: a duration and a rate moving linearly from `from` to `to`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Phase {
    pub(crate) name: String,
    pub(crate) duration: Duration,
    pub(crate) from_per_sec: f64,
    pub(crate) to_per_sec: f64,
    pub(crate) arrivals: PhaseArrivals,
}

impl Phase {
    /// Expected arrivals in the phase: `Λ(duration)`.
    fn total(&self) -> f64 {
        (self.from_per_sec + self.to_per_sec) / 2.0 * self.duration.as_secs_f64()
    }

    /// The time t (seconds into the phase) at which `Λ(t) = l`.
    fn inverse(&self, l: f64) -> f64 {
        let a = self.from_per_sec;
        let b = (self.to_per_sec - self.from_per_sec) / self.duration.as_secs_f64();
        // Solves b/2 t² + a t = l in the form that is stable for b → 0.
        let disc = (a * a + 2.0 * b * l).max(0.0);
        let denom = a + disc.sqrt();
        if denom <= 0.0 {
            0.0
        } else {
            2.0 * l / denom
        }
    }
}

/// Where arrivals come from.
#[derive(Debug, Clone)]
pub(crate) enum Arrivals {
    Phases(Vec<Phase>),
    Replay {
        rows: Arc<[ReplayRow]>,
        speedup: f64,
        multiply: f64,
        jitter: Duration,
    },
}

/// One person's arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Arrival {
    /// Microseconds after the run's start.
    pub(crate) offset_us: u64,
    /// The phase (index into the phases) or the replayed row it came from.
    pub(crate) source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Phase(usize),
    Row(usize),
}

impl Arrivals {
    pub(crate) fn length(&self) -> Duration {
        match self {
            Arrivals::Phases(p) => p.iter().map(|p| p.duration).sum(),
            Arrivals::Replay {
                rows,
                speedup,
                multiply,
                jitter,
            } => {
                let last = rows.iter().map(|r| r.offset_us).max().unwrap_or(0);
                let slack = if *multiply > 1.0 {
                    jitter.as_micros() as u64
                } else {
                    0
                };
                Duration::from_micros(((last + slack) as f64 / speedup) as u64)
            }
        }
    }

    pub(crate) fn expected_count(&self) -> f64 {
        match self {
            Arrivals::Phases(p) => p.iter().map(Phase::total).sum(),
            Arrivals::Replay { rows, multiply, .. } => rows.len() as f64 * multiply,
        }
    }

    /// The schedule's arrivals in time order, drawn from `seed`.
    pub(crate) fn iter(&self, seed: u64) -> ScheduleIter {
        let rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5c4e_d01e);
        match self {
            Arrivals::Phases(phases) => ScheduleIter::Phases {
                phases: phases.clone(),
                index: 0,
                phase_start: 0.0,
                next_l: None,
                rng: Box::new(rng),
            },
            Arrivals::Replay {
                rows,
                speedup,
                multiply,
                jitter,
            } => {
                let mut rng = rng;
                let mut out = Vec::with_capacity((rows.len() as f64 * multiply.max(1.0)) as usize);
                let whole = multiply.floor() as u64;
                let frac = multiply - multiply.floor();
                let j = jitter.as_micros() as f64;
                for (i, row) in rows.iter().enumerate() {
                    let copies = whole + u64::from(rng.gen_bool(frac));
                    for c in 0..copies {
                        // The first copy keeps the row's own time, so a
                        // multiply of 1 replays the log exactly.
                        let t = if c == 0 || j == 0.0 {
                            row.offset_us as f64
                        } else {
                            (row.offset_us as f64 + rng.gen_range(-j..=j)).max(0.0)
                        };
                        out.push(Arrival {
                            offset_us: (t / speedup).round() as u64,
                            source: Source::Row(i),
                        });
                    }
                }
                out.sort_by_key(|a| a.offset_us);
                ScheduleIter::Replay(out.into_iter())
            }
        }
    }
}

/// Arrivals in time order.
pub(crate) enum ScheduleIter {
    Phases {
        phases: Vec<Phase>,
        index: usize,
        /// Seconds from the run's start to the current phase's start.
        phase_start: f64,
        /// The cumulative intensity of the next arrival in the current phase.
        next_l: Option<f64>,
        rng: Box<ChaCha8Rng>,
    },
    Replay(std::vec::IntoIter<Arrival>),
}

impl Iterator for ScheduleIter {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        match self {
            ScheduleIter::Replay(it) => it.next(),
            ScheduleIter::Phases {
                phases,
                index,
                phase_start,
                next_l,
                rng,
            } => loop {
                let phase = phases.get(*index)?;
                let l = *next_l.get_or_insert_with(|| match phase.arrivals {
                    PhaseArrivals::Constant => 0.0,
                    PhaseArrivals::Poisson => Exp1.sample(rng),
                });
                if l < phase.total() {
                    let t = *phase_start + phase.inverse(l);
                    let step: f64 = match phase.arrivals {
                        PhaseArrivals::Constant => 1.0,
                        PhaseArrivals::Poisson => Exp1.sample(rng),
                    };
                    *next_l = Some(l + step);
                    return Some(Arrival {
                        offset_us: (t * 1e6).round() as u64,
                        source: Source::Phase(*index),
                    });
                }
                *phase_start += phase.duration.as_secs_f64();
                *index += 1;
                *next_l = None;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(secs: u64, from: f64, to: f64, arrivals: PhaseArrivals) -> Phase {
        Phase {
            name: "p".into(),
            duration: Duration::from_secs(secs),
            from_per_sec: from,
            to_per_sec: to,
            arrivals,
        }
    }

    fn count_in(arr: &[Arrival], from_s: f64, to_s: f64) -> usize {
        arr.iter()
            .filter(|a| {
                let t = a.offset_us as f64 / 1e6;
                t >= from_s && t < to_s
            })
            .count()
    }

    #[test]
    fn constant_phase_counts_within_one_percent() {
        // 200/min for 30 s, then 2000/min for 60 s, then 200/min for 30 s.
        let a = Arrivals::Phases(vec![
            phase(30, 200.0 / 60.0, 200.0 / 60.0, PhaseArrivals::Constant),
            phase(60, 2000.0 / 60.0, 2000.0 / 60.0, PhaseArrivals::Constant),
            phase(30, 200.0 / 60.0, 200.0 / 60.0, PhaseArrivals::Constant),
        ]);
        let arr: Vec<_> = a.iter(1).collect();
        for (from, to, want) in [
            (0.0, 30.0, 100.0),
            (30.0, 90.0, 2000.0),
            (90.0, 120.0, 100.0),
        ] {
            let got = count_in(&arr, from, to) as f64;
            assert!(
                (got - want).abs() <= want * 0.01,
                "{from}..{to}: {got} vs {want}"
            );
        }
        assert!(arr.windows(2).all(|w| w[0].offset_us <= w[1].offset_us));
        // Evenly spaced: every gap in the middle phase is 30 ms.
        let mid: Vec<_> = arr
            .iter()
            .filter(|a| a.source == Source::Phase(1))
            .collect();
        assert!(mid
            .windows(2)
            .all(|w| (w[1].offset_us - w[0].offset_us).abs_diff(30_000) <= 1));
    }

    #[test]
    fn high_constant_rate_is_exact() {
        let a = Arrivals::Phases(vec![phase(10, 20_000.0, 20_000.0, PhaseArrivals::Constant)]);
        assert_eq!(a.iter(0).count(), 200_000);
    }

    #[test]
    fn poisson_mean_and_variance() {
        // Counts per 1 s window of a rate-50 Poisson process: mean 50, variance 50.
        let a = Arrivals::Phases(vec![phase(2000, 50.0, 50.0, PhaseArrivals::Poisson)]);
        let mut windows = vec![0u32; 2000];
        for arr in a.iter(42) {
            windows[(arr.offset_us / 1_000_000) as usize] += 1;
        }
        let n = windows.len() as f64;
        let mean = windows.iter().map(|&c| c as f64).sum::<f64>() / n;
        let var = windows
            .iter()
            .map(|&c| (c as f64 - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        assert!((mean - 50.0).abs() < 0.5, "mean {mean}");
        assert!((var / 50.0 - 1.0).abs() < 0.1, "variance {var}");
        // Inter-arrival gaps are exponential: their coefficient of variation is 1.
        let arr: Vec<_> = a.iter(42).collect();
        let gaps: Vec<f64> = arr
            .windows(2)
            .map(|w| (w[1].offset_us - w[0].offset_us) as f64)
            .collect();
        let gm = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let gsd = (gaps.iter().map(|g| (g - gm).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((gsd / gm - 1.0).abs() < 0.03, "cv {}", gsd / gm);
    }

    #[test]
    fn poisson_is_seeded() {
        let a = Arrivals::Phases(vec![phase(10, 100.0, 100.0, PhaseArrivals::Poisson)]);
        let x: Vec<_> = a.iter(7).collect();
        let y: Vec<_> = a.iter(7).collect();
        let z: Vec<_> = a.iter(8).collect();
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    #[test]
    fn ramp_follows_the_line() {
        // 0 → 100/s over 100 s: Λ(t) = t²/2, so 5,000 arrivals, a quarter of
        // them in the first half and the rate at t is t per second.
        let a = Arrivals::Phases(vec![phase(100, 0.0, 100.0, PhaseArrivals::Constant)]);
        let arr: Vec<_> = a.iter(0).collect();
        assert!((arr.len() as f64 - 5000.0).abs() <= 1.0, "{}", arr.len());
        let first_half = count_in(&arr, 0.0, 50.0) as f64;
        assert!((first_half - 1250.0).abs() <= 12.5, "{first_half}");
        for t in [10.0, 40.0, 90.0] {
            let got = count_in(&arr, t, t + 1.0) as f64;
            let want = t + 0.5;
            assert!((got - want).abs() <= 1.0, "at {t}: {got} vs {want}");
        }
        // A downward ramp, Poisson, has the same expected total.
        let a = Arrivals::Phases(vec![phase(100, 100.0, 0.0, PhaseArrivals::Poisson)]);
        let arr: Vec<_> = a.iter(3).collect();
        assert!((arr.len() as f64 - 5000.0).abs() < 250.0, "{}", arr.len());
        let first_half = count_in(&arr, 0.0, 50.0) as f64;
        assert!((first_half / arr.len() as f64 - 0.75).abs() < 0.02);
    }

    fn rows(n: usize, gap_us: u64) -> Arc<[ReplayRow]> {
        (0..n)
            .map(|i| ReplayRow {
                offset_us: i as u64 * gap_us,
                stream: Some(i % 4 == 0),
                ..ReplayRow::default()
            })
            .collect()
    }

    #[test]
    fn replay_speedup_compresses_time() {
        let a = Arrivals::Replay {
            rows: rows(1000, 10_000),
            speedup: 10.0,
            multiply: 1.0,
            jitter: Duration::from_secs(1),
        };
        let arr: Vec<_> = a.iter(0).collect();
        assert_eq!(arr.len(), 1000);
        assert_eq!(arr[1].offset_us, 1_000);
        assert_eq!(arr[999].offset_us, 999_000);
        assert_eq!(a.length(), Duration::from_micros(999_000));
    }

    #[test]
    fn replay_multiply_keeps_the_mix() {
        let data = rows(10_000, 10_000);
        for (m, want) in [(3.0, 30_000.0), (2.5, 25_000.0), (0.5, 5_000.0)] {
            let a = Arrivals::Replay {
                rows: data.clone(),
                speedup: 1.0,
                multiply: m,
                jitter: Duration::from_millis(500),
            };
            let arr: Vec<_> = a.iter(9).collect();
            let got = arr.len() as f64;
            assert!((got - want).abs() <= want * 0.02, "x{m}: {got} vs {want}");
            assert!(arr.windows(2).all(|w| w[0].offset_us <= w[1].offset_us));
            let streamed = arr
                .iter()
                .filter(|a| match a.source {
                    Source::Row(i) => data[i].stream == Some(true),
                    Source::Phase(_) => false,
                })
                .count() as f64;
            assert!(
                (streamed / got - 0.25).abs() < 0.02,
                "x{m}: mix {}",
                streamed / got
            );
            // Copies stay within the jitter of their row.
            assert!(arr.iter().all(|a| match a.source {
                Source::Row(i) => a.offset_us.abs_diff(data[i].offset_us) <= 500_000,
                Source::Phase(_) => false,
            }));
        }
    }
}
