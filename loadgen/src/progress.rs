//! Live counters of a run, and the progress bar drawn from them (and the
//! Prometheus text, in `exposition`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Counters updated by person tasks as the run goes (relaxed atomics: they
/// feed a display, not the report, which comes from the records).
#[derive(Debug, Default)]
pub struct Live {
    /// People who arrived.
    pub offered: AtomicU64,
    /// Attempts sent.
    pub sent: AtomicU64,
    /// People without an outcome yet.
    pub outstanding: AtomicU64,
    /// Retries made.
    pub retries: AtomicU64,
    /// Attempts answered ok.
    pub ok: AtomicU64,
    /// Attempts refused (every kind of refusal).
    pub shed: AtomicU64,
    /// Attempts timed out.
    pub timed_out: AtomicU64,
    /// Other failed attempts.
    pub errors: AtomicU64,
    /// Attempts sent and not yet ended.
    pub in_flight: AtomicU64,
    /// Attempts ended, by outcome (at [`wire::ClientOutcome::index`]).
    pub outcomes: [AtomicU64; wire::ClientOutcome::ALL.len()],
    /// Answered attempts' latency, from the intended send.
    pub latency: LiveHistogram,
    /// Each attempt's send lag.
    pub send_lag: LiveHistogram,
    /// The Retry-After refusals carried.
    pub retry_after: LiveHistogram,
    /// Answered streams' first byte, from the send: beside the provider's
    /// own first byte (`fake_provider_first_byte_seconds`), what the
    /// gateway adds to the first token, live.
    pub first_byte: LiveHistogram,
    /// Attempts sent later than the plan's send-lag bound.
    pub late_sends: AtomicU64,
    /// When the schedule starts, µs since the Unix epoch (0 until the run
    /// has set it).
    pub start_us: AtomicU64,
}

/// A histogram's upper bounds, in seconds.
pub(crate) type Bounds = &'static [f64];

/// End-to-end latency of answered attempts: a millisecond to ten minutes.
pub(crate) const LATENCY: Bounds = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
    300.0, 600.0,
];

/// The load generator's send lag: its bound is tens of milliseconds.
pub(crate) const SEND_LAG: Bounds = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
];

/// The Retry-After a refusal carried.
pub(crate) const RETRY_AFTER: Bounds = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// The most buckets a [`LiveHistogram`] has, `+Inf` included.
const MOST_BUCKETS: usize = 24;

/// A fixed-bucket histogram counted with relaxed atomics: no lock where
/// an attempt is counted.
#[derive(Debug, Default)]
pub struct LiveHistogram {
    counts: [AtomicU64; MOST_BUCKETS],
    sum_us: AtomicU64,
}

impl LiveHistogram {
    /// Counts one value of `us` microseconds into the buckets `bounds`.
    pub(crate) fn observe_us(&self, bounds: Bounds, us: u64) {
        let secs = us as f64 / 1e6;
        let i = bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub(crate) fn render(
        &self,
        out: &mut String,
        bounds: Bounds,
        name: &str,
        labels: &str,
        help: &str,
    ) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, b) in bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.counts[bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {cumulative}"
        );
    }
}

/// A running progress bar; [`BarTask::finish`] clears it.
pub(crate) struct BarTask {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl BarTask {
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Draws a bar on stderr, refreshed five times a second, with elapsed and
/// total time, the current send rate, outstanding people and outcome counts.
pub(crate) fn spawn(live: Arc<Live>, start: Instant, total: Duration) -> BarTask {
    let bar = ProgressBar::with_draw_target(
        Some(total.as_millis().max(1) as u64),
        ProgressDrawTarget::stderr_with_hz(5),
    );
    bar.set_style(
        ProgressStyle::with_template("{bar:20} {msg}").expect("a static template is valid"),
    );
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut last_sent = 0u64;
        let mut last_at = Instant::now();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = tick.tick() => {}
            }
            let sent = live.sent.load(Ordering::Relaxed);
            let now = Instant::now();
            let rate =
                (sent - last_sent) as f64 / now.duration_since(last_at).as_secs_f64().max(1e-3);
            last_sent = sent;
            last_at = now;
            let elapsed = now.saturating_duration_since(start);
            bar.set_position(elapsed.as_millis() as u64);
            bar.set_message(format!(
                "{:.0}/{:.0}s {:.0}/s waiting {} ok {} refused {} timeout {} err {} retries {}",
                elapsed.as_secs_f64(),
                total.as_secs_f64(),
                rate,
                live.outstanding.load(Ordering::Relaxed),
                live.ok.load(Ordering::Relaxed),
                live.shed.load(Ordering::Relaxed),
                live.timed_out.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed),
                live.retries.load(Ordering::Relaxed),
            ));
        }
        bar.finish_and_clear();
    });
    BarTask { stop, task }
}
