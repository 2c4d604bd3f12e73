//! What `/metrics` exports (Prometheus text format): queue wait, upstream
//! call time and end-to-end time as separate histograms; each row of the
//! refusal table counted apart, never summed (sheds at admission by
//! `reason`, a tenant's rate limit as one more `reason` of the same
//! counter, stale drops, upstream timeouts and provider refusals each a
//! counter of its own); in-flight calls, queue depth, the concurrency limit
//! and resident memory as gauges.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the histogram buckets: from well under a
/// millisecond (a shed) to half an hour (a request parked in a backlog that
/// outlives a brownout).
const BUCKETS: [f64; 23] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
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
        self.render_series(out, name, None);
    }

    /// One series of the family `name`: with the label `upstream="…"`
    /// when `upstream` is given.
    fn render_series(&self, out: &mut String, name: &str, upstream: Option<&str>) {
        let (first, only) = match upstream {
            Some(u) => (
                format!("upstream=\"{u}\","),
                format!("{{upstream=\"{u}\"}}"),
            ),
            None => (String::new(), String::new()),
        };
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{first}le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{first}le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "{name}_sum{only} {sum}\n{name}_count{only} {cumulative}"
        );
    }
}

/// Why a request was refused: one row of the gateway's refusal table (the
/// crate docs hold the table). Its `code` is the `x-gateway-reason` header,
/// the JSON body's error `code` and the `reason` label of `/metrics`.
///
/// The name is older than the table: three rows are load shedding
/// (scarcity: the gateway cannot serve everyone now), one is a tenant's
/// rate limit (an entitlement, enforced whatever the load), two are the
/// upstream's (it took too long, or it refused), and one says that every
/// upstream is cooling down (none may be called before the first
/// cooldown ends).
///
/// ```
/// use reference_gateway::ShedReason;
/// assert_eq!(ShedReason::QueueFull.status(), Some(429));
/// assert_eq!(ShedReason::WouldMissDeadline.status(), Some(503));
/// assert_eq!(ShedReason::WaitExpired.code(), "wait_expired");
/// assert_eq!(ShedReason::UpstreamTimeout.status(), Some(504));
/// assert!(!ShedReason::UpstreamTimeout.retry_after());
/// assert_eq!(ShedReason::UpstreamRefused.status(), None, "the provider's own");
/// assert_eq!(ShedReason::AllUpstreamsCooling.status(), Some(503));
/// assert!(ShedReason::AllUpstreamsCooling.retry_after());
/// assert!(ShedReason::AllUpstreamsCooling.before_dispatch());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// At admission: the queue was full (bounded, aimd). 429, or 503 when
    /// `queue_full_status` says so.
    QueueFull,
    /// At admission: the tokens queued ahead would make it miss its
    /// deadline (deadline). 503.
    WouldMissDeadline,
    /// At dequeue: it waited past the wait budget or its deadline and was
    /// dropped unsent (bounded, aimd, deadline). 503.
    WaitExpired,
    /// At admission, whatever the load: its tenant (API key) is over its
    /// entitlement (every mode). 429 with the tenant's rate-limit headers.
    TenantLimited,
    /// After dispatch: `upstream_timeout` passed and the upstream call was
    /// cancelled (every mode). 504, no Retry-After.
    UpstreamTimeout,
    /// The provider answered 429, 503 or 529: passed on as it came, status,
    /// body and Retry-After (every mode).
    UpstreamRefused,
    /// At admission or at dispatch: every upstream is cooling down after
    /// refusing (or timing out, or being unreachable), so none is called.
    /// 503, with a Retry-After of the shortest cooldown left.
    AllUpstreamsCooling,
}

impl ShedReason {
    /// Every row of the table, in its order.
    pub const ALL: [ShedReason; 7] = [
        ShedReason::QueueFull,
        ShedReason::WouldMissDeadline,
        ShedReason::WaitExpired,
        ShedReason::TenantLimited,
        ShedReason::UpstreamTimeout,
        ShedReason::UpstreamRefused,
        ShedReason::AllUpstreamsCooling,
    ];

    /// The `x-gateway-reason` header, the error `code` in the JSON body and
    /// the metric label.
    pub fn code(self) -> &'static str {
        match self {
            ShedReason::QueueFull => "queue_full",
            ShedReason::WouldMissDeadline => "would_miss_deadline",
            ShedReason::WaitExpired => "wait_expired",
            ShedReason::TenantLimited => "tenant_limited",
            ShedReason::UpstreamTimeout => "upstream_timeout",
            ShedReason::UpstreamRefused => "upstream_refused",
            ShedReason::AllUpstreamsCooling => "all_upstreams_cooling",
        }
    }

    /// The HTTP status the gateway answers with (for `QueueFull`, the
    /// default of `queue_full_status`); `None` for `UpstreamRefused`, which
    /// keeps the provider's.
    pub fn status(self) -> Option<u16> {
        match self {
            ShedReason::QueueFull | ShedReason::TenantLimited => Some(429),
            ShedReason::WouldMissDeadline
            | ShedReason::WaitExpired
            | ShedReason::AllUpstreamsCooling => Some(503),
            ShedReason::UpstreamTimeout => Some(504),
            ShedReason::UpstreamRefused => None,
        }
    }

    /// Returns true if and only if the gateway writes a Retry-After of its
    /// own on this refusal (from the live backlog, or from the tenant's
    /// bucket). An upstream timeout has none: nothing says when the
    /// provider will be faster. A provider's refusal keeps the provider's.
    pub fn retry_after(self) -> bool {
        !matches!(
            self,
            ShedReason::UpstreamTimeout | ShedReason::UpstreamRefused
        )
    }

    /// Returns true if and only if the provider was never called for a
    /// request refused so: these also carry the older `x-gateway-shed`.
    pub fn before_dispatch(self) -> bool {
        !matches!(
            self,
            ShedReason::UpstreamTimeout | ShedReason::UpstreamRefused
        )
    }
}

/// The numbers of one upstream's calls.
#[derive(Debug, Default)]
pub(crate) struct UpstreamMetrics {
    /// Its name, the `upstream` label.
    pub(crate) name: String,
    /// Each call's time (`gateway_upstream_seconds`).
    pub(crate) seconds: Histogram,
    /// Calls sent to it (each attempt).
    pub(crate) calls: AtomicU64,
    /// Its refusals passed on to the caller (`upstream_refused`).
    pub(crate) refused: AtomicU64,
    /// Its calls cancelled by `upstream_timeout`.
    pub(crate) timeouts: AtomicU64,
    /// Its calls that failed to connect or broke.
    pub(crate) errors: AtomicU64,
    /// Requests it refused (or timed out on, or failed) that were sent on
    /// to the next upstream.
    pub(crate) sent_on: AtomicU64,
    /// Times it was put to cool down.
    pub(crate) cooldowns: AtomicU64,
}

/// Every number the gateway exports.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) queue_wait: Histogram,
    /// Per upstream, in the order configured (a lone `upstream`: one).
    pub(crate) upstreams: Vec<UpstreamMetrics>,
    /// The upstream series carry an `upstream` label (there are
    /// `upstreams`); a lone `upstream`'s series stay as they always were.
    labelled: bool,
    /// Cooldowns are on: `all_upstreams_cooling` and the cooling gauges are
    /// exported.
    cools: bool,
    pub(crate) shed_cooling: AtomicU64,
    pub(crate) end_to_end: Histogram,
    /// Waits for a pooled connection (exported with `split_pool_wait`).
    pub(crate) pool_wait: Histogram,
    /// Calls waiting for a pooled connection now.
    pub(crate) pool_waiting: AtomicU64,
    /// Provider refusals retried by the gateway's client.
    pub(crate) upstream_retries: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) shed_queue_full: AtomicU64,
    pub(crate) shed_deadline: AtomicU64,
    pub(crate) tenant_limited: AtomicU64,
    pub(crate) stale_drops: AtomicU64,
    pub(crate) cancelled_queued: AtomicU64,
    pub(crate) cancelled_upstream: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) in_flight: AtomicU64,
}

impl Default for Metrics {
    /// One upstream, `default`, unlabelled, no cooldowns.
    fn default() -> Self {
        Metrics::new(vec!["default".into()], false, false)
    }
}

/// Gauges read from the admission state when `/metrics` is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gauges {
    pub(crate) queue_depth: usize,
    pub(crate) queued_tokens: Option<f64>,
    pub(crate) limit: Option<usize>,
    /// The connection pool's cap, when it is metered (`split_pool_wait`).
    pub(crate) pool: Option<usize>,
}

impl Metrics {
    /// The metrics of a gateway routing over upstreams `names` (in the
    /// order configured); `labelled` when they came as `upstreams`, `cools`
    /// when cooldowns are on.
    pub(crate) fn new(names: Vec<String>, labelled: bool, cools: bool) -> Metrics {
        Metrics {
            queue_wait: Histogram::default(),
            upstreams: names
                .into_iter()
                .map(|name| UpstreamMetrics {
                    name,
                    ..UpstreamMetrics::default()
                })
                .collect(),
            labelled,
            cools,
            shed_cooling: AtomicU64::new(0),
            end_to_end: Histogram::default(),
            pool_wait: Histogram::default(),
            pool_waiting: AtomicU64::new(0),
            upstream_retries: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            shed_queue_full: AtomicU64::new(0),
            shed_deadline: AtomicU64::new(0),
            tenant_limited: AtomicU64::new(0),
            stale_drops: AtomicU64::new(0),
            cancelled_queued: AtomicU64::new(0),
            cancelled_upstream: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Counts one refusal in its metric; the upstream's rows
    /// (`upstream_timeout`, `upstream_refused`) at the upstream `at`.
    pub(crate) fn refused_at(&self, reason: ShedReason, at: usize) {
        let upstream = &self.upstreams[at.min(self.upstreams.len() - 1)];
        let c = match reason {
            ShedReason::QueueFull => &self.shed_queue_full,
            ShedReason::WouldMissDeadline => &self.shed_deadline,
            ShedReason::TenantLimited => &self.tenant_limited,
            ShedReason::WaitExpired => &self.stale_drops,
            ShedReason::AllUpstreamsCooling => &self.shed_cooling,
            ShedReason::UpstreamTimeout => &upstream.timeouts,
            ShedReason::UpstreamRefused => &upstream.refused,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one refusal of the gateway's own in its metric (the
    /// upstream's rows at the first upstream).
    pub(crate) fn refused(&self, reason: ShedReason) {
        self.refused_at(reason, 0);
    }

    /// The sum of one counter over the upstreams.
    pub(crate) fn upstream_total(&self, of: impl Fn(&UpstreamMetrics) -> &AtomicU64) -> u64 {
        self.upstreams
            .iter()
            .map(|u| of(u).load(Ordering::Relaxed))
            .sum()
    }

    /// The Prometheus text. `cooling` is what is left of each upstream's
    /// cooldown (zero: not cooling), in the order configured.
    pub(crate) fn render(&self, mode: &str, gauges: Gauges, cooling: &[Duration]) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP gateway_info The gateway's admission mode.\n# TYPE gateway_info gauge\ngateway_info{{mode=\"{mode}\"}} 1"
        );
        self.render_histograms(&mut out, gauges.pool.is_some());
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
            "# HELP gateway_shed_total Requests refused at admission, unsent, by the policy that fired: load shedding (queue_full, would_miss_deadline{}) or a tenant's rate limit (tenant_limited).\n# TYPE gateway_shed_total counter\ngateway_shed_total{{reason=\"queue_full\"}} {}\ngateway_shed_total{{reason=\"would_miss_deadline\"}} {}\ngateway_shed_total{{reason=\"tenant_limited\"}} {}",
            if self.cools { ", all_upstreams_cooling" } else { "" },
            load(&self.shed_queue_full),
            load(&self.shed_deadline),
            load(&self.tenant_limited)
        );
        if self.cools {
            let _ = writeln!(
                out,
                "gateway_shed_total{{reason=\"all_upstreams_cooling\"}} {}",
                load(&self.shed_cooling)
            );
        }
        counter(&mut out, "gateway_stale_drops_total", "Queued jobs dropped at dequeue because they waited too long (503, wait_expired); the provider was not called.", load(&self.stale_drops));
        self.render_upstream_counters(&mut out);
        counter(
            &mut out,
            "gateway_upstream_retries_total",
            "Provider refusals retried by the gateway's client (upstream_retries).",
            load(&self.upstream_retries),
        );
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
            "gateway_bad_requests_total",
            "Requests refused as malformed or too large (400, 413).",
            load(&self.bad_requests),
        );
        self.render_gauges(&mut out, gauges);
        self.render_cooling(&mut out, cooling);
        out
    }

    /// The counters of upstream calls: unlabelled for a lone `upstream`
    /// (as they always were), one series per upstream otherwise, and then
    /// also the calls, the send-ons and the cooldowns.
    fn render_upstream_counters(&self, out: &mut String) {
        type Of = fn(&UpstreamMetrics) -> &AtomicU64;
        let mut families: Vec<(&str, &str, Of)> = vec![
            (
                "gateway_upstream_timeouts_total",
                "Upstream calls cancelled because upstream_timeout passed (504, upstream_timeout).",
                |u| &u.timeouts,
            ),
            (
                "gateway_upstream_refused_total",
                "Provider refusals (429, 503, 529) passed on to the caller (upstream_refused).",
                |u| &u.refused,
            ),
            (
                "gateway_upstream_errors_total",
                "Upstream calls that failed to connect or broke (502).",
                |u| &u.errors,
            ),
        ];
        if self.labelled {
            families.extend([
                (
                    "gateway_upstream_calls_total",
                    "Calls sent to each upstream (each attempt of a request sent on counts at its upstream).",
                    (|u| &u.calls) as Of,
                ),
                (
                    "gateway_upstream_sent_on_total",
                    "Requests an upstream refused (429, 503, 529), timed out on or failed, sent on to the next upstream.",
                    |u| &u.sent_on,
                ),
                (
                    "gateway_upstream_cooldowns_total",
                    "Times an upstream was put to cool down.",
                    |u| &u.cooldowns,
                ),
            ]);
        }
        for (name, help, of) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for u in &self.upstreams {
                let v = of(u).load(Ordering::Relaxed);
                if self.labelled {
                    let _ = writeln!(out, "{name}{{upstream=\"{}\"}} {v}", u.name);
                } else {
                    let _ = writeln!(out, "{name} {v}");
                }
            }
        }
    }

    /// Each upstream's cooldown, when cooldowns are on: cooling or not, and
    /// the seconds left.
    fn render_cooling(&self, out: &mut String, cooling: &[Duration]) {
        if !self.cools {
            return;
        }
        let _ = writeln!(
            out,
            "# HELP gateway_upstream_cooling 1 while an upstream is cooling down (left out of routing), else 0.\n# TYPE gateway_upstream_cooling gauge"
        );
        for (u, left) in self.upstreams.iter().zip(cooling) {
            let on = u8::from(!left.is_zero());
            let _ = writeln!(
                out,
                "gateway_upstream_cooling{{upstream=\"{}\"}} {on}",
                u.name
            );
        }
        let _ = writeln!(
            out,
            "# HELP gateway_upstream_cooldown_seconds What is left of an upstream's cooldown.\n# TYPE gateway_upstream_cooldown_seconds gauge"
        );
        for (u, left) in self.upstreams.iter().zip(cooling) {
            let _ = writeln!(
                out,
                "gateway_upstream_cooldown_seconds{{upstream=\"{}\"}} {:.3}",
                u.name,
                left.as_secs_f64()
            );
        }
    }

    /// The histograms: queue wait, (pool wait,) upstream, end to end.
    fn render_histograms(&self, out: &mut String, pool_metered: bool) {
        self.queue_wait.render(
            out,
            "gateway_queue_wait_seconds",
            "Time from arrival to dispatch (or to being shed at dequeue), in the gateway only.",
        );
        if pool_metered {
            self.pool_wait.render(
                out,
                "gateway_pool_wait_seconds",
                "Time from dispatch to having a pooled connection to the provider.",
            );
        }
        let help = if pool_metered {
            "Time from having a pooled connection to the end of the provider's answer."
        } else {
            "Time from dispatch to the end of the provider's answer."
        };
        let name = "gateway_upstream_seconds";
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for u in &self.upstreams {
            let label = self.labelled.then_some(u.name.as_str());
            u.seconds.render_series(out, name, label);
        }
        self.end_to_end.render(
            out,
            "gateway_request_seconds",
            "Time from arrival to the end of the answer, for requests sent upstream.",
        );
    }

    /// The gauges, read now.
    fn render_gauges(&self, out: &mut String, gauges: Gauges) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let gauge = |out: &mut String, name: &str, help: &str, v: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            out,
            "gateway_in_flight",
            "Upstream calls in flight.",
            load(&self.in_flight).to_string(),
        );
        gauge(
            out,
            "gateway_queue_depth",
            "Jobs waiting in the gateway.",
            gauges.queue_depth.to_string(),
        );
        if let Some(t) = gauges.queued_tokens {
            gauge(
                out,
                "gateway_queued_tokens",
                "Tokens (prompt + max_tokens) waiting, incl. the pacer's debt.",
                format!("{t:.0}"),
            );
        }
        if let Some(l) = gauges.limit {
            gauge(
                out,
                "gateway_concurrency_limit",
                "Upstream calls allowed in flight now.",
                l.to_string(),
            );
        }
        if let Some(cap) = gauges.pool {
            gauge(
                out,
                "gateway_pool_connections_max",
                "The connection pool's cap (pool_max_connections).",
                cap.to_string(),
            );
            gauge(
                out,
                "gateway_pool_waiting",
                "Upstream calls waiting for a pooled connection.",
                load(&self.pool_waiting).to_string(),
            );
        }
        if let Some(rss) = resident_memory_bytes() {
            gauge(
                out,
                "process_resident_memory_bytes",
                "Resident memory of the gateway process.",
                rss.to_string(),
            );
        }
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
        m.refused(ShedReason::QueueFull);
        m.refused(ShedReason::QueueFull);
        m.refused(ShedReason::WaitExpired);
        m.refused(ShedReason::TenantLimited);
        m.refused(ShedReason::UpstreamTimeout);
        let text = m.render(
            "bounded",
            Gauges {
                queue_depth: 3,
                queued_tokens: None,
                limit: Some(8),
                pool: None,
            },
            &[],
        );
        assert!(
            text.contains("gateway_shed_total{reason=\"queue_full\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("gateway_stale_drops_total 1\n"), "{text}");
        assert!(
            text.contains("gateway_shed_total{reason=\"tenant_limited\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("gateway_shed_total{reason=\"would_miss_deadline\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("gateway_upstream_timeouts_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("gateway_upstream_refused_total 0\n"),
            "{text}"
        );
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
