//! The timeline as the time charts draw it: one point a second, or one a
//! bucket of seconds for a long run.

use assertions::Second;

/// A chart draws at most this many points per series: a longer run is
/// drawn in buckets of several seconds.
const MAX_POINTS: usize = 1200;

/// One point of the time charts: a second, or the bucket of seconds it
/// stands for. Counts are per-second means over the bucket; levels and
/// latencies are the bucket's highest.
#[derive(Debug, Clone, Default)]
pub(super) struct Row {
    /// The middle of the bucket, seconds since start.
    pub(super) x: f64,
    /// The seconds it stands for (the last bucket may be short).
    pub(super) seconds: f64,
    pub(super) offered: f64,
    /// Attempts sent, those of them that reached a provider, and the
    /// provider calls made for them (in the second each attempt was
    /// sent): over `dispatched`, calls per attempt.
    pub(super) sent: f64,
    pub(super) dispatched: f64,
    pub(super) provider_calls: f64,
    pub(super) ok: f64,
    pub(super) shed: f64,
    pub(super) stale: f64,
    pub(super) tenant_limited: f64,
    /// Refused after the provider was called: the gateway's timeouts and
    /// the provider's refusals passed through.
    pub(super) after_dispatch: f64,
    pub(super) timeout: f64,
    pub(super) errors: f64,
    pub(super) outstanding: f64,
    pub(super) in_flight: f64,
    pub(super) depth: f64,
    pub(super) e2e: [Option<f64>; 2],
    pub(super) queue_wait: [Option<f64>; 2],
    pub(super) provider: [Option<f64>; 2],
    pub(super) rss_mib: Option<f64>,
    /// The median Retry-After of the gateway's own sheds, and of the
    /// provider's refusals it relayed (each the bucket's mean of them).
    pub(super) retry_after_s: Option<f64>,
    pub(super) relayed_retry_after_s: Option<f64>,
    pub(super) drain_s: f64,
}

pub(super) struct Rows {
    pub(super) rows: Vec<Row>,
    /// Seconds per point.
    bucket: usize,
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Rows {
    pub(super) fn of(seconds: &[Second]) -> Rows {
        let bucket = seconds.len().div_ceil(MAX_POINTS).max(1);
        let mut rows = Vec::with_capacity(seconds.len() / bucket + 1);
        for chunk in seconds.chunks(bucket) {
            let n = chunk.len() as f64;
            let first = chunk[0].t as f64;
            let mut r = Row {
                x: first + n / 2.0,
                seconds: n,
                ..Row::default()
            };
            let (mut retry, mut relayed) = ((0.0, 0u32), (0.0, 0u32));
            for s in chunk {
                r.offered += s.offered as f64 / n;
                r.sent += s.sent as f64 / n;
                r.dispatched += s.dispatched as f64 / n;
                r.provider_calls += s.provider_calls as f64 / n;
                r.ok += s.ok as f64 / n;
                r.shed += s.shed as f64 / n;
                r.stale += s.stale as f64 / n;
                r.tenant_limited += s.tenant_limited as f64 / n;
                r.after_dispatch += (s.gateway_timeout + s.upstream_refused) as f64 / n;
                r.timeout += s.timeout as f64 / n;
                r.errors += s.errors as f64 / n;
                r.outstanding = r.outstanding.max(s.client_outstanding as f64);
                r.in_flight = r.in_flight.max(s.provider_in_flight as f64);
                r.depth = r.depth.max(s.gateway_depth as f64);
                r.e2e = [
                    max_opt(r.e2e[0], s.e2e_p50_ms),
                    max_opt(r.e2e[1], s.e2e_p99_ms),
                ];
                r.queue_wait = [
                    max_opt(r.queue_wait[0], s.queue_wait_p50_ms),
                    max_opt(r.queue_wait[1], s.queue_wait_p99_ms),
                ];
                r.provider = [
                    max_opt(r.provider[0], s.provider_p50_ms),
                    max_opt(r.provider[1], s.provider_p99_ms),
                ];
                r.rss_mib = max_opt(r.rss_mib, s.rss_bytes.map(|b| b as f64 / (1024.0 * 1024.0)));
                for (sum, ms) in [
                    (&mut retry, s.retry_after_ms),
                    (&mut relayed, s.relayed_retry_after_ms),
                ] {
                    if let Some(ms) = ms {
                        *sum = (sum.0 + ms as f64 / 1000.0, sum.1 + 1);
                    }
                }
                r.drain_s = r.drain_s.max(s.drain_s);
            }
            let mean = |(sum, n): (f64, u32)| (n > 0).then(|| sum / f64::from(n));
            r.retry_after_s = mean(retry);
            r.relayed_retry_after_s = mean(relayed);
            rows.push(r);
        }
        Rows { rows, bucket }
    }

    /// A count per second (one value per timeline second, as a provider's
    /// calls are) at the rows' points: the mean per second of each bucket.
    pub(super) fn per_second(&self, values: &[u64]) -> Vec<(f64, f64)> {
        self.rows
            .iter()
            .zip(values.chunks(self.bucket))
            .map(|(r, chunk)| {
                let sum: u64 = chunk.iter().sum();
                (r.x, sum as f64 / chunk.len() as f64)
            })
            .collect()
    }

    /// What a point of the traffic chart says when pointed at: its
    /// seconds, the attempts sent, those that reached a provider, the
    /// provider calls made for them and calls per attempt (per-second
    /// means over a bucket), as `retry_amplification` counts them.
    pub(super) fn calls_per_attempt(&self, r: &Row) -> String {
        let from = r.x - r.seconds / 2.0;
        let when = if self.bucket > 1 {
            format!(
                "{}–{} s, mean per second",
                super::num(from, 0),
                super::num(from + r.seconds, 0)
            )
        } else {
            format!("{} s", super::num(from, 0))
        };
        let per = if r.dispatched > 0.0 {
            format!("{:.2} calls per attempt", r.provider_calls / r.dispatched)
        } else {
            "no attempt reached a provider".to_string()
        };
        format!(
            "{when}: {} attempts sent, {} reached a provider, {} provider calls for them: {per}",
            super::num(r.sent, 1),
            super::num(r.dispatched, 1),
            super::num(r.provider_calls, 1),
        )
    }

    /// The end of the last second, seconds since start.
    pub(super) fn end(&self) -> f64 {
        self.rows
            .last()
            .map_or(0.0, |r| r.x + self.bucket as f64 / 2.0)
    }

    pub(super) fn note(&self) -> Option<String> {
        (self.bucket > 1).then(|| {
            format!(
                "each point is {} s: counts are the mean per second, levels and latencies the highest",
                self.bucket
            )
        })
    }
}
