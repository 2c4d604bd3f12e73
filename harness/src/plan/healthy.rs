//! The waiting a healthy system holds once the overload is over
//! ([`wire::HealthyWaiting`], in `plan.json` and `run.json`): what `drain`
//! holds the backlog to when a run has fewer than 10 scenario seconds of
//! baseline of its own before the overload.
//!
//! After the overload, arrivals go on at the rate of the phases that
//! follow it, and a system serving them well still has some of them
//! waiting: the backlog has drained when it is back to that. Per segment
//! of the plan after the overload, at rehearsal scale:
//!
//! - no arrivals (the load ends with the overload): nothing waits;
//! - c servers: the reference gateway's concurrency limit (bounded's
//!   `concurrency`, aimd's `ceiling`) or its connection pool, and the
//!   provider's concurrency ceiling, the lowest of those known; each
//!   serves a call in S, the segment's service time. With λ·S ≥ c the
//!   servers cannot keep up: saturated, no steady state to come back to;
//! - evenly spaced arrivals below that: none wait (0);
//! - Poisson arrivals (a replayed log counts as Poisson: its arrivals are
//!   not evenly spaced) below it: Erlang C's mean queue
//!   Lq = C(c, a)·ρ / (1 − ρ), with a = λ·S and ρ = a / c; with no server
//!   limit known at all, none wait.
//!
//! The baseline is the largest over the segments after the overload; one
//! saturated segment decides.

use wire::HealthyWaiting;

/// A segment of the plan after the overload, at rehearsal scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct After {
    /// λ: its mean arrival rate, per second.
    pub(crate) arrivals_per_s: f64,
    /// S: its mean service time, seconds.
    pub(crate) service_s: f64,
    /// Poisson (or replayed) arrivals, rather than evenly spaced ones.
    pub(crate) poisson: bool,
    /// c: the calls served at once, when something limits them.
    pub(crate) servers: Option<u64>,
}

/// The waiting the segments after the overload leave in a healthy system
/// (see the module docs); `after` empty: nothing arrives after it.
pub(crate) fn healthy_waiting(after: &[After]) -> HealthyWaiting {
    let mut worst = HealthyWaiting::NoArrivals;
    for seg in after {
        let here = of_segment(seg);
        if let HealthyWaiting::Saturated { .. } = here {
            return here;
        }
        let rank = |w: &HealthyWaiting| match w {
            HealthyWaiting::NoArrivals => (0, 0.0),
            HealthyWaiting::Constant { .. } | HealthyWaiting::Unlimited { .. } => (1, 0.0),
            _ => (2, w.waiting().unwrap_or(0.0)),
        };
        let (a, b) = (rank(&here), rank(&worst));
        if a.0 > b.0 || (a.0 == b.0 && a.1 > b.1) {
            worst = here;
        }
    }
    worst
}

/// One segment's waiting.
fn of_segment(seg: &After) -> HealthyWaiting {
    let lambda = seg.arrivals_per_s;
    if !(lambda.is_finite() && lambda > 0.0) {
        return HealthyWaiting::NoArrivals;
    }
    let offered = lambda * seg.service_s.max(0.0);
    if let Some(c) = seg.servers.filter(|&c| c > 0) {
        if offered >= c as f64 {
            return HealthyWaiting::Saturated {
                servers: u32::try_from(c).unwrap_or(u32::MAX),
                arrivals_per_s: lambda,
                service_s: seg.service_s,
            };
        }
    }
    match (seg.poisson, seg.servers.filter(|&c| c > 0)) {
        (false, _) => HealthyWaiting::Constant {
            arrivals_per_s: lambda,
        },
        (true, None) => HealthyWaiting::Unlimited {
            arrivals_per_s: lambda,
        },
        (true, Some(c)) => HealthyWaiting::ErlangC {
            servers: u32::try_from(c).unwrap_or(u32::MAX),
            arrivals_per_s: lambda,
            service_s: seg.service_s,
            waiting: erlang_c_waiting(c, offered).unwrap_or(0.0),
        },
    }
}

/// Erlang C's mean queue length Lq of an M/M/c queue with `servers`
/// servers and offered load `a` = λ·S (erlangs); `None` at or past
/// saturation (a ≥ c).
///
/// Erlang B by its recurrence, B(0) = 1, B(k) = a·B(k−1) / (k + a·B(k−1)),
/// which stays within [0, 1] for any c (the factorial form overflows past
/// about 170 servers); then C = B / (1 − ρ·(1 − B)) and
/// Lq = C·ρ / (1 − ρ).
pub(crate) fn erlang_c_waiting(servers: u64, a: f64) -> Option<f64> {
    let c = servers as f64;
    if servers == 0 || !(a.is_finite() && a >= 0.0) || a >= c {
        return None;
    }
    let mut b = 1.0;
    for k in 1..=servers {
        b = a * b / (k as f64 + a * b);
    }
    let rho = a / c;
    let wait_probability = b / (1.0 - rho * (1.0 - b));
    Some(wait_probability * rho / (1.0 - rho))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }

    #[test]
    fn erlang_c_matches_the_tables() {
        // M/M/1: Lq = ρ² / (1 − ρ).
        close(erlang_c_waiting(1, 0.5).unwrap(), 0.5);
        close(erlang_c_waiting(1, 0.9).unwrap(), 8.1);
        // M/M/2 at a = 1: C = 1/3, Lq = 1/3.
        close(erlang_c_waiting(2, 1.0).unwrap(), 1.0 / 3.0);
        // The textbook case: 10 agents, 8 erlangs, C ≈ 0.4092 and
        // Lq = C·ρ/(1 − ρ) = 0.4092 × 4 ≈ 1.637.
        let lq = erlang_c_waiting(10, 8.0).unwrap();
        assert!((lq - 1.637).abs() < 0.001, "{lq}");
        // Idle servers: nobody waits.
        close(erlang_c_waiting(8, 0.0).unwrap(), 0.0);
        // At or past saturation there is no steady state.
        assert_eq!(erlang_c_waiting(4, 4.0), None);
        assert_eq!(erlang_c_waiting(0, 0.1), None);
        // Many servers: no overflow, and a light load waits little.
        let lq = erlang_c_waiting(1_000, 500.0).unwrap();
        assert!((0.0..1e-6).contains(&lq), "{lq}");
    }

    fn seg(rate: f64, poisson: bool, servers: Option<u64>) -> After {
        After {
            arrivals_per_s: rate,
            service_s: 1.0,
            poisson,
            servers,
        }
    }

    #[test]
    fn the_largest_waiting_after_the_overload_is_the_baseline() {
        assert_eq!(healthy_waiting(&[]), HealthyWaiting::NoArrivals);
        assert_eq!(
            healthy_waiting(&[seg(0.0, true, Some(4))]),
            HealthyWaiting::NoArrivals
        );
        assert_eq!(
            healthy_waiting(&[seg(2.0, false, Some(4))]),
            HealthyWaiting::Constant {
                arrivals_per_s: 2.0
            }
        );
        assert_eq!(
            healthy_waiting(&[seg(2.0, true, None)]),
            HealthyWaiting::Unlimited {
                arrivals_per_s: 2.0
            }
        );
        let w = healthy_waiting(&[seg(1.0, true, Some(2)), seg(8.0, true, Some(10))]);
        match w {
            HealthyWaiting::ErlangC {
                servers, waiting, ..
            } => {
                assert_eq!(servers, 10);
                assert!((waiting - 1.637).abs() < 0.001, "{waiting}");
            }
            other => panic!("{other:?}"),
        }
        // One segment past what its servers serve decides.
        let w = healthy_waiting(&[seg(1.0, true, Some(2)), seg(3.0, false, Some(2))]);
        assert!(
            matches!(w, HealthyWaiting::Saturated { servers: 2, .. }),
            "{w:?}"
        );
        assert_eq!(w.waiting(), None);
    }
}
