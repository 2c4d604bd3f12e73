//! What `/metrics` exports (Prometheus text format): queue wait, upstream
//! call time and end-to-end time as separate histograms; sheds and stale
//! drops as separate counters; in-flight calls, queue depth, the concurrency
//! limit and resident memory as gauges.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the histogram buckets: from well under a
/// millisecond (a shed) to two minutes (a request parked behind a brownout).
const BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// A fixed-bucket histogram updated with atomics (no lock on the hot path).
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub(crate) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Why a request was answered without calling the provider.
///
/// ```
/// use reference_gateway::ShedReason;
/// assert_eq!(ShedReason::QueueFull.status(), 429);
/// assert_eq!(ShedReason::WaitExpired.status(), 503);
/// assert_eq!(ShedReason::WaitExpired.code(), "wait_expired");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// 429: the queue was full (bounded, aimd).
    QueueFull,
    /// 429: the tokens already queued would make it miss its deadline.
    WouldMissDeadline,
    /// 503: it waited past the wait budget / its deadline; dropped at dequeue.
    WaitExpired,
}

impl ShedReason {
    /// The error `code` in the JSON body and the metric label.
    pub fn code(self) -> &'static str {
        match self {
            ShedReason::QueueFull => "queue_full",
            ShedReason::WouldMissDeadline => "would_miss_deadline",
            ShedReason::WaitExpired => "wait_expired",
        }
    }

    /// The HTTP status of the answer.
    pub fn status(self) -> u16 {
        match self {
            ShedReason::QueueFull | ShedReason::WouldMissDeadline => 429,
            ShedReason::WaitExpired => 503,
        }
    }
}

/// Every number the gateway exports.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) queue_wait: Histogram,
    pub(crate) upstream: Histogram,
    pub(crate) end_to_end: Histogram,
    pub(crate) requests: AtomicU64,
    pub(crate) shed_queue_full: AtomicU64,
    pub(crate) shed_deadline: AtomicU64,
    pub(crate) stale_drops: AtomicU64,
    pub(crate) cancelled_queued: AtomicU64,
    pub(crate) cancelled_upstream: AtomicU64,
    pub(crate) upstream_errors: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) in_flight: AtomicU64,
}

/// Gauges read from the admission state when `/metrics` is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gauges {
    pub(crate) queue_depth: usize,
    pub(crate) queued_tokens: Option<f64>,
    pub(crate) limit: Option<usize>,
}

impl Metrics {
    pub(crate) fn shed(&self, reason: ShedReason) {
        let c = match reason {
            ShedReason::QueueFull => &self.shed_queue_full,
            ShedReason::WouldMissDeadline => &self.shed_deadline,
            ShedReason::WaitExpired => &self.stale_drops,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn render(&self, mode: &str, gauges: Gauges) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP gateway_info The gateway's admission mode.\n# TYPE gateway_info gauge\ngateway_info{{mode=\"{mode}\"}} 1"
        );
        self.queue_wait.render(
            &mut out,
            "gateway_queue_wait_seconds",
            "Time from arrival to dispatch (or to being shed at dequeue), in the gateway only.",
        );
        self.upstream.render(
            &mut out,
            "gateway_upstream_seconds",
            "Time from dispatch to the end of the provider's answer.",
        );
        self.end_to_end.render(
            &mut out,
            "gateway_request_seconds",
            "Time from arrival to the end of the answer, for requests sent upstream.",
        );
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        counter(
            &mut out,
            "gateway_requests_total",
            "Requests received on the proxied endpoints.",
            load(&self.requests),
        );
        let _ = writeln!(
            out,
            "# HELP gateway_shed_total Requests refused at admission (429), by reason.\n# TYPE gateway_shed_total counter\ngateway_shed_total{{reason=\"queue_full\"}} {}\ngateway_shed_total{{reason=\"would_miss_deadline\"}} {}",
            load(&self.shed_queue_full),
            load(&self.shed_deadline)
        );
        counter(&mut out, "gateway_stale_drops_total", "Queued jobs dropped at dequeue because they waited too long (503); the provider was not called.", load(&self.stale_drops));
        counter(
            &mut out,
            "gateway_cancelled_queued_total",
            "Queued jobs dropped because their caller hung up.",
            load(&self.cancelled_queued),
        );
        counter(
            &mut out,
            "gateway_cancelled_upstream_total",
            "Upstream calls cancelled because their caller hung up.",
            load(&self.cancelled_upstream),
        );
        counter(
            &mut out,
            "gateway_upstream_errors_total",
            "Upstream calls that failed to connect or broke (502).",
            load(&self.upstream_errors),
        );
        counter(
            &mut out,
            "gateway_bad_requests_total",
            "Requests refused as malformed or too large (400, 413).",
            load(&self.bad_requests),
        );
        let gauge = |out: &mut String, name: &str, help: &str, v: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            &mut out,
            "gateway_in_flight",
            "Upstream calls in flight.",
            load(&self.in_flight).to_string(),
        );
        gauge(
            &mut out,
            "gateway_queue_depth",
            "Jobs waiting in the gateway.",
            gauges.queue_depth.to_string(),
        );
        if let Some(t) = gauges.queued_tokens {
            gauge(
                &mut out,
                "gateway_queued_tokens",
                "Tokens (prompt + max_tokens) waiting, incl. the pacer's debt.",
                format!("{t:.0}"),
            );
        }
        if let Some(l) = gauges.limit {
            gauge(
                &mut out,
                "gateway_concurrency_limit",
                "Upstream calls allowed in flight now.",
                l.to_string(),
            );
        }
        if let Some(rss) = resident_memory_bytes() {
            gauge(
                &mut out,
                "process_resident_memory_bytes",
                "Resident memory of the gateway process.",
                rss.to_string(),
            );
        }
        out
    }
}

/// The process's resident set size, from `/proc/self/statm` (Linux only;
/// `None` elsewhere).
///
/// ```
/// if let Some(rss) = reference_gateway::resident_memory_bytes() {
///     assert!(rss > 0);
/// }
/// ```
pub fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // statm counts pages; every Linux platform we run on uses 4 KiB pages
    // and reading the real size would need libc.
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(500));
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.0001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"120\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"));
        assert_eq!(h.count(), 3);
    }

    #[test]
    fn sheds_and_stale_drops_are_counted_apart() {
        let m = Metrics::default();
        m.shed(ShedReason::QueueFull);
        m.shed(ShedReason::QueueFull);
        m.shed(ShedReason::WaitExpired);
        let text = m.render(
            "bounded",
            Gauges {
                queue_depth: 3,
                queued_tokens: None,
                limit: Some(8),
            },
        );
        assert!(
            text.contains("gateway_shed_total{reason=\"queue_full\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("gateway_stale_drops_total 1\n"), "{text}");
        assert!(text.contains("gateway_queue_depth 3\n"));
        assert!(text.contains("gateway_concurrency_limit 8\n"));
        assert!(!text.contains("gateway_queued_tokens"));
    }

    #[test]
    fn resident_memory_is_read_from_proc() {
        let rss = resident_memory_bytes().expect("/proc/self/statm on Linux");
        assert!(
            rss > 1024 * 1024,
            "a test process holds more than 1 MiB: {rss}"
        );
    }
}
