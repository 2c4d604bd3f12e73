//! The live counters ([`Live`]) as Prometheus text, for a rehearsal
//! watched while it runs (`--metrics-listen`): the load's side of a run
//! (offered, sent, each outcome, in flight, latency, send lag, Retry-After
//! given, streams' first byte), beside the gateway's own dashboards. Counters are cumulative
//! from the run's start; the histograms are classic ones (`_bucket{le}`),
//! fixed buckets updated with atomics on the path that counts an attempt.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wire::{ClientOutcome, ClientRecord};

use crate::config::LoadPlan;
use crate::progress::{Live, LATENCY, RETRY_AFTER, SEND_LAG};

/// A label value as the text format writes it (`\`, `"` and newlines
/// escaped).
pub fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Live {
    /// The counters a run counts into (`given`, else its own), its start
    /// (`start_us`, µs since the epoch) set.
    pub(crate) fn starting(given: Option<Arc<Live>>, start_us: u64) -> Arc<Live> {
        let live = given.unwrap_or_default();
        live.start_us.store(start_us, Ordering::Relaxed);
        live
    }

    /// Counts an attempt's record as it ends: its outcome, its send lag
    /// against `send_lag_bound_us`, an answer's latency, a refusal's
    /// Retry-After.
    pub(crate) fn count_record(&self, rec: &ClientRecord, send_lag_bound_us: u64) {
        self.outcomes[rec.outcome.index()].fetch_add(1, Ordering::Relaxed);
        let lag = rec.sent_us.saturating_sub(rec.intended_us);
        self.send_lag.observe_us(SEND_LAG, lag);
        if lag > send_lag_bound_us {
            self.late_sends.fetch_add(1, Ordering::Relaxed);
        }
        if rec.outcome == ClientOutcome::Ok {
            let us = rec.done_us.saturating_sub(rec.intended_us);
            self.latency.observe_us(LATENCY, us);
            if let (true, Some(first)) = (rec.stream, rec.first_byte_us) {
                self.first_byte
                    .observe_us(LATENCY, first.saturating_sub(rec.sent_us));
            }
        }
        if let Some(ms) = rec.retry_after_ms {
            self.retry_after
                .observe_us(RETRY_AFTER, ms.saturating_mul(1000));
        }
    }

    /// The live series as Prometheus text, each with `labels` (`scenario`
    /// and `run_id`, written `k="v",...`), at `now_us` (µs since the
    /// epoch): the counts, the histograms, whether the harness keeps its
    /// schedule (at most 1% of sends later than the plan's bound: its p99
    /// within it), the scenario time elapsed and the phase in force (an
    /// info gauge, so that no other series is split by phase).
    pub fn exposition(
        &self,
        plan: &LoadPlan,
        labels: &str,
        time_scale: f64,
        now_us: u64,
    ) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut one = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v}"
            );
        };
        one(
            "rehearse_offered_total",
            "counter",
            "People who arrived.",
            load(&self.offered) as f64,
        );
        one(
            "rehearse_sent_total",
            "counter",
            "Attempts sent.",
            load(&self.sent) as f64,
        );
        one(
            "rehearse_retries_total",
            "counter",
            "Retries made.",
            load(&self.retries) as f64,
        );
        one(
            "rehearse_outstanding",
            "gauge",
            "People without an outcome yet.",
            load(&self.outstanding) as f64,
        );
        one(
            "rehearse_in_flight",
            "gauge",
            "Attempts sent and not yet ended: inside the gateway, as the client sees it.",
            load(&self.in_flight) as f64,
        );
        let sent = load(&self.sent);
        let late = load(&self.late_sends);
        one(
            "rehearse_late_sends_total",
            "counter",
            "Attempts sent later than the send-lag bound.",
            late as f64,
        );
        let valid = late.saturating_mul(100) <= sent;
        one(
            "rehearse_harness_valid",
            "gauge",
            "1 while the load generator keeps its schedule (send lag p99 within its bound), else 0.",
            if valid { 1.0 } else { 0.0 },
        );
        one(
            "rehearse_time_scale",
            "gauge",
            "The rehearsal's time scale.",
            time_scale,
        );
        let start = load(&self.start_us);
        let elapsed_s = if start == 0 {
            0.0
        } else {
            now_us.saturating_sub(start) as f64 / 1e6
        };
        one(
            "rehearse_scenario_seconds",
            "gauge",
            "Scenario time since the schedule's start (rehearsal time × the time scale).",
            elapsed_s * time_scale,
        );
        let _ = writeln!(
            out,
            "# HELP rehearse_attempts_total Attempts ended, by outcome (ok: served; shed, stale, tenant_limited, gateway_timeout, upstream_refused: each kind of refusal; timeout: the caller gave up).\n# TYPE rehearse_attempts_total counter"
        );
        for o in ClientOutcome::ALL {
            let n = load(&self.outcomes[o.index()]);
            let _ = writeln!(
                out,
                "rehearse_attempts_total{{{labels},outcome=\"{}\"}} {n}",
                o.as_str()
            );
        }
        self.render_histograms(&mut out, labels);
        let phase = if start == 0 {
            "before the load".to_string()
        } else {
            phase_at(plan, elapsed_s)
        };
        let _ = writeln!(
            out,
            "# HELP rehearse_phase_info The load phase in force (1).\n# TYPE rehearse_phase_info gauge\nrehearse_phase_info{{{labels},phase=\"{}\"}} 1",
            label_value(&phase)
        );
        out
    }
    /// The histograms: latency, send lag, Retry-After, streams' first byte.
    fn render_histograms(&self, out: &mut String, labels: &str) {
        self.latency.render(
            out,
            LATENCY,
            "rehearse_latency_seconds",
            labels,
            "End-to-end latency of answered attempts, from the intended send.",
        );
        self.send_lag.render(
            out,
            SEND_LAG,
            "rehearse_send_lag_seconds",
            labels,
            "How late each attempt was sent.",
        );
        self.retry_after.render(
            out,
            RETRY_AFTER,
            "rehearse_retry_after_seconds",
            labels,
            "The Retry-After refusals carried.",
        );
        self.first_byte.render(
            out,
            LATENCY,
            "rehearse_first_byte_seconds",
            labels,
            "Answered streams: from the send to the first byte (the first token, as the caller sees it).",
        );
    }
}

/// The phase in force `elapsed_s` rehearsal seconds into the schedule (its
/// phases at rehearsal scale): its name, or `after the load`.
fn phase_at(plan: &LoadPlan, elapsed_s: f64) -> String {
    let mut end = 0.0;
    for p in plan.phases() {
        end += p.duration.as_secs_f64();
        if elapsed_s < end {
            return p.name.to_string();
        }
    }
    if plan.phases().is_empty() && elapsed_s < plan.schedule_length().as_secs_f64() {
        return "replay".into();
    }
    "after the load".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_carry_their_labels_and_the_phase_in_force() {
        let text = "[load]\n[[load.phases]]\nname = \"calm\"\nduration = \"2s\"\nrate = 10\n\
                    [[load.phases]]\nname = \"peak \\\"x\\\"\"\nduration = \"2s\"\nrate = 40\n";
        let plan = LoadPlan::from_scenario_str(text, "s.toml", std::path::Path::new(".")).unwrap();
        let live = Live::default();
        live.start_us.store(1_000_000, Ordering::Relaxed);
        live.sent.store(100, Ordering::Relaxed);
        let rec = |outcome, sent_us, done_us, retry_after_ms| ClientRecord {
            id: "p1".into(),
            attempt: 1,
            intended_us: 0,
            sent_us,
            client_wait_us: 0,
            first_byte_us: None,
            done_us,
            status: None,
            outcome,
            retry_after_ms,
            retry_after_header: None,
            tokens: 0,
            stream: false,
            last: true,
            patience_ms: 0,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        };
        live.count_record(&rec(ClientOutcome::Ok, 100, 300_000, None), 20_000);
        live.count_record(
            &rec(ClientOutcome::Shed, 50_000, 60_000, Some(2_000)),
            20_000,
        );
        let labels = "scenario=\"demo\",run_id=\"r1\"";
        let t = live.exposition(&plan, labels, 10.0, 1_000_000 + 300_000);
        for want in [
            "rehearse_sent_total{scenario=\"demo\",run_id=\"r1\"} 100",
            "rehearse_attempts_total{scenario=\"demo\",run_id=\"r1\",outcome=\"shed\"} 1",
            "rehearse_latency_seconds_bucket{scenario=\"demo\",run_id=\"r1\",le=\"0.25\"} 0",
            "rehearse_latency_seconds_bucket{scenario=\"demo\",run_id=\"r1\",le=\"0.5\"} 1",
            "rehearse_latency_seconds_bucket{scenario=\"demo\",run_id=\"r1\",le=\"+Inf\"} 1",
            "rehearse_retry_after_seconds_sum{scenario=\"demo\",run_id=\"r1\"} 2",
            "rehearse_late_sends_total{scenario=\"demo\",run_id=\"r1\"} 1",
            "rehearse_harness_valid{scenario=\"demo\",run_id=\"r1\"} 1",
            "rehearse_scenario_seconds{scenario=\"demo\",run_id=\"r1\"} 3",
            "rehearse_phase_info{scenario=\"demo\",run_id=\"r1\",phase=\"calm\"} 1",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
        let t = live.exposition(&plan, labels, 1.0, 1_000_000 + 2_500_000);
        assert!(t.contains("phase=\"peak \\\"x\\\"\"} 1"), "{t}");
        let t = live.exposition(&plan, labels, 1.0, 1_000_000 + 9_000_000);
        assert!(t.contains("phase=\"after the load\"} 1"), "{t}");
        // Streams only, from the send: an answered stream's first byte 40 ms
        // after it was sent; the unstreamed answers above are not counted.
        let streamed = ClientRecord {
            stream: true,
            first_byte_us: Some(40_100),
            ..rec(ClientOutcome::Ok, 100, 300_000, None)
        };
        live.count_record(&streamed, 20_000);
        let t = live.exposition(&plan, labels, 1.0, 0);
        for want in [
            "rehearse_first_byte_seconds_bucket{scenario=\"demo\",run_id=\"r1\",le=\"0.025\"} 0",
            "rehearse_first_byte_seconds_bucket{scenario=\"demo\",run_id=\"r1\",le=\"0.05\"} 1",
            "rehearse_first_byte_seconds_count{scenario=\"demo\",run_id=\"r1\"} 1",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
        // Two late sends of 100: over 1%, the harness is behind.
        live.count_record(&rec(ClientOutcome::Ok, 90_000, 100_000, None), 20_000);
        assert!(live
            .exposition(&plan, labels, 1.0, 0)
            .contains("rehearse_harness_valid{scenario=\"demo\",run_id=\"r1\"} 0"));
    }
}
