//! The closed-loop arrival model: N workers, each sending its next request
//! the moment its last one ended, for a step of time. Unlike the open loop
//! of [`crate::run()`], arrivals wait for answers, so the calls in flight
//! are exactly N: the model `rehearse calibrate` drives a target with at
//! rising N to find where its latency curve bends.
//!
//! The HTTP is the caller's (a closure per call), so the sweep runs on an
//! HTTP client of its own, apart from the open loop's. A call counts by
//! when it ended: those that end in the warm-up (the first part of the
//! step) are not counted, and a call still running at the step's end is
//! waited for (up to its timeout) and not counted either, so every level
//! measures the answers of the same span of steady state.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::config::LoadPlan;

/// How one call of a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// An answer (2xx), read to its end.
    Answered,
    /// A refusal (429, 503, 529).
    Refused,
    /// Any other status, or the connection failed.
    Failed,
    /// The request timeout passed.
    TimedOut,
}

impl CallEnd {
    /// The end of a call answered with `status`.
    ///
    /// ```
    /// use loadgen::CallEnd;
    /// assert_eq!(CallEnd::of_status(200), CallEnd::Answered);
    /// assert_eq!(CallEnd::of_status(529), CallEnd::Refused);
    /// assert_eq!(CallEnd::of_status(500), CallEnd::Failed);
    /// ```
    pub fn of_status(status: u16) -> CallEnd {
        match status {
            200..=299 => CallEnd::Answered,
            429 | 503 | 529 => CallEnd::Refused,
            _ => CallEnd::Failed,
        }
    }
}

/// One level of a closed-loop sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClosedLevel {
    /// Workers.
    pub workers: usize,
    /// The whole step, warm-up included.
    pub step: Duration,
    /// The part of the step not counted.
    pub warmup: Duration,
}

/// What a level measured.
#[derive(Debug, Clone)]
pub struct ClosedTally {
    /// Workers.
    pub workers: usize,
    /// Seconds counted.
    pub measured_s: f64,
    /// Calls by how they ended, in the counted span.
    pub answered: u64,
    /// Refusals.
    pub refused: u64,
    /// Other failures.
    pub failed: u64,
    /// Timeouts.
    pub timed_out: u64,
    /// Latency of the answers, microseconds.
    pub latency_us: Histogram<u64>,
}

impl ClosedTally {
    fn new(workers: usize, measured_s: f64) -> Self {
        ClosedTally {
            workers,
            measured_s,
            answered: 0,
            refused: 0,
            failed: 0,
            timed_out: 0,
            latency_us: Histogram::new(3).expect("3 significant figures"),
        }
    }

    fn count(&mut self, end: CallEnd, took: Duration) {
        match end {
            CallEnd::Answered => {
                self.answered += 1;
                let _ = self.latency_us.record(took.as_micros().max(1) as u64);
            }
            CallEnd::Refused => self.refused += 1,
            CallEnd::Failed => self.failed += 1,
            CallEnd::TimedOut => self.timed_out += 1,
        }
    }

    /// Answers per second.
    pub fn throughput_per_s(&self) -> f64 {
        if self.measured_s > 0.0 {
            self.answered as f64 / self.measured_s
        } else {
            0.0
        }
    }
}

/// Runs one level: `level.workers` workers call `send` back to back until
/// the step ends; each call's number is passed to `send` (for its request
/// id). `send` must end by itself (its own timeout, reported as
/// [`CallEnd::TimedOut`]).
pub async fn closed_level<F, Fut>(level: ClosedLevel, send: F) -> ClosedTally
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = CallEnd> + Send + 'static,
{
    let start = Instant::now();
    let counted_from = start + level.warmup;
    let end = start + level.step;
    let measured_s = level.step.saturating_sub(level.warmup).as_secs_f64();
    let tally = Arc::new(Mutex::new(ClosedTally::new(level.workers, measured_s)));
    let send = Arc::new(send);
    let seq = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..level.workers)
        .map(|_| {
            let (send, seq, tally) = (send.clone(), seq.clone(), tally.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let began = Instant::now();
                    let n = seq.fetch_add(1, Ordering::Relaxed);
                    let ended = send(n).await;
                    let done = Instant::now();
                    // Counted by when it ended: in steady state the
                    // answers ending in a span are the throughput times
                    // the span, whatever the calls' length.
                    if done >= counted_from && done <= end {
                        if let Ok(mut t) = tally.lock() {
                            t.count(ended, done - began);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let t = tally.lock().map(|t| t.clone());
    t.unwrap_or_else(|_| ClosedTally::new(level.workers, measured_s))
}

/// The requests of a sweep: the scenario's `[load.request]` shape, drawn
/// with its seed, each with a request id of its own.
pub struct SweepRequests {
    plan: LoadPlan,
}

impl SweepRequests {
    /// The requests of `plan`'s `[load.request]` (its first tenant's shape
    /// when it has several).
    pub fn new(plan: LoadPlan) -> Self {
        SweepRequests { plan }
    }

    /// Call `n`'s path (below the target's base), body and what it may
    /// cost in tokens (prompt at 4 characters a token plus max_tokens: what
    /// a [`crate::SpendBudget`] counts): its request id is
    /// `calibrate-{n}`, in the body's marker.
    pub fn request(&self, n: u64) -> (&str, Bytes, u64) {
        let shape = self
            .plan
            .tenants
            .first()
            .map_or(&self.plan.request, |t| &t.request);
        let mut rng = ChaCha8Rng::seed_from_u64(self.plan.seed);
        rng.set_stream(n);
        let drawn = shape.draw(&mut rng, None);
        let id = format!("calibrate-{n}");
        (
            shape.path(),
            shape.body(&id, &drawn),
            crate::spend::cost(&drawn),
        )
    }

    /// The headers call `n` carries besides its content type and request
    /// id: the key as the shape's auth says (and Anthropic's version), then
    /// the scenario's headers, filled for tenant `default`, attempt 1.
    /// Errors naming a header that needs `{provider_url}` or
    /// `{provider_url:NAME}`, which a sweep does not know.
    pub fn headers(&self, n: u64) -> Result<Vec<(String, String)>, String> {
        let shape = self
            .plan
            .tenants
            .first()
            .map_or(&self.plan.request, |t| &t.request);
        let tenant = self
            .plan
            .tenants
            .first()
            .map_or(crate::request::head::DEFAULT_TENANT, |t| t.name.as_str());
        let mut out = vec![(
            shape.auth.header().to_string(),
            shape.auth.value(&shape.api_key),
        )];
        if shape.api.dialect() == wire::Dialect::Anthropic {
            out.push((wire::headers::ANTHROPIC_VERSION.into(), "2023-06-01".into()));
        }
        let id = format!("calibrate-{n}");
        for h in &shape.headers {
            let value = h.value(tenant, (&id, 1), &[]).map_err(|placeholder| {
                format!(
                    "header `{}` needs {placeholder}, which a calibration sweep does not know",
                    h.name
                )
            })?;
            out.push((h.name.to_string(), value));
        }
        Ok(out)
    }

    /// The request shape in words: dialect, model, tokens.
    pub fn describe(&self) -> String {
        let (path, body, cost) = self.request(0);
        format!("POST {path}, {} bytes, {cost} tokens at most", body.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_sends_the_scenarios_path_key_and_headers() {
        let plan = |request: &str| {
            let text = format!(
                "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n[load.request]\n{request}"
            );
            SweepRequests::new(
                LoadPlan::from_scenario_str(&text, "s.toml", std::path::Path::new(".")).unwrap(),
            )
        };
        let s = plan(
            "api = \"embeddings\"\nauth = \"api-key\"\npath = \"/openai/deployments/e/embeddings?api-version=1\"\n\
             api_key = \"k\"\nheaders = { \"x-trace\" = \"{request_id}/{attempt}\", \"x-app\" = \"{tenant}\" }\n",
        );
        assert_eq!(
            s.request(3).0,
            "/openai/deployments/e/embeddings?api-version=1"
        );
        assert_eq!(
            s.headers(3).unwrap(),
            [
                ("api-key".to_string(), "k".to_string()),
                ("x-app".into(), "default".into()),
                ("x-trace".into(), "calibrate-3/1".into()),
            ]
        );
        let s = plan("headers = { \"x-portkey-custom-host\" = \"{provider_url}/v1\" }\n");
        let err = s.headers(0).unwrap_err();
        assert!(
            err.contains("`x-portkey-custom-host` needs {provider_url},"),
            "{err}"
        );
        // A named provider's placeholder is named as it is written.
        let s = plan("headers = { \"x-backup\" = \"{provider_url:backup-eu}\" }\n");
        let err = s.headers(0).unwrap_err();
        assert!(
            err.contains("`x-backup` needs {provider_url:backup-eu},"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn n_workers_keep_n_calls_in_flight_and_the_warm_up_is_not_counted() {
        let in_flight = Arc::new(AtomicU64::new(0));
        let most = Arc::new(AtomicU64::new(0));
        let (f, m) = (in_flight.clone(), most.clone());
        let tally = closed_level(
            ClosedLevel {
                workers: 4,
                step: Duration::from_millis(600),
                warmup: Duration::from_millis(100),
            },
            move |_| {
                let (f, m) = (f.clone(), m.clone());
                async move {
                    let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    f.fetch_sub(1, Ordering::SeqCst);
                    CallEnd::Answered
                }
            },
        )
        .await;
        assert_eq!(most.load(Ordering::SeqCst), 4);
        assert_eq!(in_flight.load(Ordering::SeqCst), 0, "every call waited for");
        // 4 workers at 20 ms a call over the 500 ms counted: at most 100.
        assert!(
            tally.answered <= 100 && tally.answered >= 40,
            "{}",
            tally.answered
        );
        assert!(tally.latency_us.value_at_quantile(0.5) >= 20_000);
        assert_eq!(tally.measured_s, 0.5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_are_counted_by_how_they_ended() {
        let tally = closed_level(
            ClosedLevel {
                workers: 2,
                step: Duration::from_millis(200),
                warmup: Duration::ZERO,
            },
            |n| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if n % 2 == 0 {
                    CallEnd::Answered
                } else {
                    CallEnd::Refused
                }
            },
        )
        .await;
        assert!(tally.answered > 0 && tally.refused > 0, "{tally:?}");
        assert_eq!(tally.failed + tally.timed_out, 0);
    }
}
