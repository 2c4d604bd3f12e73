//! Aggregates of a run: HDR histograms by outcome, counts of first attempts
//! and retries, the send lag, and a per-second timeline; and the report a
//! person reads at the end.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use wire::{ClientOutcome, ClientRecord};

/// Longest latency a histogram holds (longer values are clamped): one hour.
const MAX_US: u64 = 3_600_000_000;

fn histogram() -> Histogram<u64> {
    // 3 significant digits over 1 µs .. 1 h: about 200 KB per histogram.
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static bounds are valid")
}

fn record(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.clamp(1, MAX_US));
}

/// One second of the run as the client saw it, counted by when things
/// happened: a row of `load-seconds.csv`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LoadSecond {
    /// Seconds since the run's start.
    pub second: u64,
    /// People who arrived (first attempts due).
    pub offered: u64,
    /// Attempts sent (first attempts and retries).
    pub sent: u64,
    /// Retries sent.
    pub retries: u64,
    /// Attempts answered ok.
    pub ok: u64,
    /// Attempts refused, of every kind (shed, stale, tenant-limited, the
    /// provider's refusals passed through, gateway timeouts).
    pub shed: u64,
    /// Attempts that ran out of patience.
    pub timed_out: u64,
    /// Other failed attempts (provider errors, connect errors, resets, malformed).
    pub errors: u64,
    /// People still waiting for an outcome at the end of the second.
    pub outstanding: i64,
}

/// The running aggregates, fed one record at a time.
#[derive(Debug)]
pub(crate) struct Stats {
    start_us: u64,
    latency: Vec<Histogram<u64>>,
    /// Time to first byte of streamed attempts, by outcome.
    ttft: Vec<Histogram<u64>>,
    send_lag: Histogram<u64>,
    retry_send_lag: Histogram<u64>,
    /// Waits in the client for a connection, of the attempts that waited.
    client_wait: Histogram<u64>,
    person_ok: Histogram<u64>,
    first: [u64; ClientOutcome::ALL.len()],
    retry: [u64; ClientOutcome::ALL.len()],
    tokens: u64,
    people: u64,
    /// Deltas of outstanding people per second, summed up at the end.
    timeline: Vec<LoadSecond>,
    /// First intended time of a person is not on later attempts' records,
    /// so the person's whole wait is tracked from attempt 1 by id. Only
    /// people between attempts are in it: an entry is made by a first
    /// attempt that is not the last and taken out by the person's last
    /// attempt (a person's records arrive in attempt order, from one task),
    /// so it holds at most the people outstanding, never the run's people.
    first_intended: std::collections::HashMap<String, u64>,
    /// The most records seen waiting for the writer at once (set by it).
    pub(crate) records_backlog_max: u64,
}

impl Stats {
    pub(crate) fn new(start_us: u64) -> Self {
        Stats {
            start_us,
            latency: ClientOutcome::ALL.iter().map(|_| histogram()).collect(),
            ttft: ClientOutcome::ALL.iter().map(|_| histogram()).collect(),
            send_lag: histogram(),
            retry_send_lag: histogram(),
            client_wait: histogram(),
            person_ok: histogram(),
            first: [0; ClientOutcome::ALL.len()],
            retry: [0; ClientOutcome::ALL.len()],
            tokens: 0,
            people: 0,
            timeline: Vec::new(),
            first_intended: std::collections::HashMap::new(),
            records_backlog_max: 0,
        }
    }

    fn second(&mut self, t_us: u64) -> &mut LoadSecond {
        let s = (t_us.saturating_sub(self.start_us) / 1_000_000) as usize;
        if self.timeline.len() <= s {
            let from = self.timeline.len();
            self.timeline.extend((from..=s).map(|i| LoadSecond {
                second: i as u64,
                ..LoadSecond::default()
            }));
        }
        &mut self.timeline[s]
    }

    pub(crate) fn add(&mut self, r: &ClientRecord) {
        let o = r.outcome.index();
        record(&mut self.latency[o], r.latency_us());
        if r.attempt == 1 {
            record(&mut self.send_lag, r.send_lag_us());
        } else {
            record(&mut self.retry_send_lag, r.send_lag_us());
        }
        if r.client_wait_us > 0 {
            record(&mut self.client_wait, r.client_wait_us);
        }
        if r.stream {
            if let Some(fb) = r.first_byte_us {
                record(&mut self.ttft[o], fb.saturating_sub(r.intended_us));
            }
        }
        self.tokens += r.tokens;
        if r.attempt == 1 {
            self.first[o] += 1;
            self.people += 1;
            let s = self.second(r.intended_us);
            s.offered += 1;
            s.outstanding += 1;
        } else {
            self.retry[o] += 1;
        }
        let first_intended = if r.attempt == 1 {
            if !r.last {
                self.first_intended.insert(r.id.clone(), r.intended_us);
            }
            r.intended_us
        } else if r.last {
            self.first_intended.remove(&r.id).unwrap_or(r.intended_us)
        } else {
            self.first_intended
                .get(&r.id)
                .copied()
                .unwrap_or(r.intended_us)
        };
        if r.last && r.outcome == ClientOutcome::Ok {
            record(
                &mut self.person_ok,
                r.done_us.saturating_sub(first_intended),
            );
        }
        // One the load generator did not send is not counted sent.
        if !r.reason.as_deref().is_some_and(was_not_sent) {
            let s = self.second(r.sent_us);
            s.sent += 1;
            if r.attempt > 1 {
                s.retries += 1;
            }
        }
        let last = r.last;
        let s = self.second(r.done_us);
        match r.outcome {
            ClientOutcome::Ok => s.ok += 1,
            o if o.is_refusal() => s.shed += 1,
            ClientOutcome::Timeout => s.timed_out += 1,
            _ => s.errors += 1,
        }
        if last {
            s.outstanding -= 1;
        }
    }

    /// The send lag's p99 over first attempts, in microseconds.
    pub(crate) fn send_lag_p99_us(&self) -> u64 {
        self.send_lag.value_at_quantile(0.99)
    }

    /// Writes every histogram, whole-run, to an HDR interval log (tags
    /// `latency.<outcome>`, `ttft_stream.<outcome>`, `person.ok`, `send_lag`,
    /// `send_lag.retry`; values in microseconds), readable by the HdrHistogram
    /// tools (HistogramLogProcessor, the hdrhistogram crate).
    pub(crate) fn write_histogram_log(
        &self,
        out: &mut impl std::io::Write,
        start: std::time::SystemTime,
        elapsed: Duration,
    ) -> std::io::Result<()> {
        use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
        use hdrhistogram::serialization::V2DeflateSerializer;
        let mut serializer = V2DeflateSerializer::new();
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("rehearse loadgen: whole-run histograms, values in microseconds")
            .with_base_time(start)
            .with_start_time(start)
            .begin_log_with(out, &mut serializer)?;
        let mut named: Vec<(String, &Histogram<u64>)> = ClientOutcome::ALL
            .iter()
            .map(|o| (format!("latency.{}", o.as_str()), &self.latency[o.index()]))
            .collect();
        named.extend(
            ClientOutcome::ALL
                .iter()
                .map(|o| (format!("ttft_stream.{}", o.as_str()), &self.ttft[o.index()])),
        );
        named.push(("person.ok".into(), &self.person_ok));
        named.push(("send_lag".into(), &self.send_lag));
        named.push(("send_lag.retry".into(), &self.retry_send_lag));
        named.push(("client_wait".into(), &self.client_wait));
        for (name, h) in named {
            log.write_histogram(h, Duration::ZERO, elapsed, Tag::new(&name))
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
        Ok(())
    }

    pub(crate) fn into_report(mut self, elapsed: Duration, send_lag_bound: Duration) -> RunReport {
        let mut outstanding = 0;
        for s in &mut self.timeline {
            outstanding += s.outstanding;
            s.outstanding = outstanding;
        }
        let outcomes = ClientOutcome::ALL
            .iter()
            .map(|o| OutcomeSummary {
                outcome: *o,
                first_attempts: self.first[o.index()],
                retries: self.retry[o.index()],
                latency: LoadPercentiles::of(&self.latency[o.index()]),
                ttft_stream: LoadPercentiles::of(&self.ttft[o.index()]),
            })
            .collect();
        let lag_p99 = self.send_lag_p99_us();
        RunReport {
            start_us: self.start_us,
            elapsed_ms: elapsed.as_millis() as u64,
            people: self.people,
            attempts: self.first.iter().sum::<u64>() + self.retry.iter().sum::<u64>(),
            tokens: self.tokens,
            outcomes,
            ttft_stream_ok: LoadPercentiles::of(&self.ttft[ClientOutcome::Ok.index()]),
            person_ok: LoadPercentiles::of(&self.person_ok),
            send_lag: LoadPercentiles::of(&self.send_lag),
            retry_send_lag: LoadPercentiles::of(&self.retry_send_lag),
            client_wait: LoadPercentiles::of(&self.client_wait),
            send_lag_bound_us: send_lag_bound.as_micros() as u64,
            // Until the bound's figures are known (`run`), the send lag.
            valid: Duration::from_micros(lag_p99) <= send_lag_bound,
            records_backlog_max: self.records_backlog_max,
            connections_opened: 0,
            cpu_share: None,
            gave_out: None,
            connection_bound: ConnectionBound::default(),
            notes: Vec::new(),
            timeline: self.timeline,
            spend: None,
        }
    }
}

/// Percentiles of one of the load generator's histograms, in microseconds.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LoadPercentiles {
    /// Values recorded.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl LoadPercentiles {
    fn of(h: &Histogram<u64>) -> Self {
        let q = |x| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(x)
            }
        };
        LoadPercentiles {
            count: h.len(),
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if h.is_empty() { 0 } else { h.max() },
        }
    }
}

/// Counts and latency of one outcome.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OutcomeSummary {
    /// The outcome.
    pub outcome: ClientOutcome,
    /// First attempts that ended so.
    pub first_attempts: u64,
    /// Retries that ended so.
    pub retries: u64,
    /// Latency of those attempts, from their intended send time.
    pub latency: LoadPercentiles,
    /// Time to first byte of those that were streamed and got one, from
    /// their intended send time.
    pub ttft_stream: LoadPercentiles,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// When the schedule starts (its offset 0), in microseconds since the
    /// Unix epoch on the records' clock: the run's time zero, whatever the
    /// first arrival's offset.
    pub start_us: u64,
    /// From the start instant to the last person's end.
    pub elapsed_ms: u64,
    /// People who arrived.
    pub people: u64,
    /// Attempts made (first attempts and retries).
    pub attempts: u64,
    /// Completion tokens received.
    pub tokens: u64,
    /// Counts and latencies by outcome, attempts timed from intended send.
    pub outcomes: Vec<OutcomeSummary>,
    /// Time to first byte of streamed ok attempts, from intended send.
    pub ttft_stream_ok: LoadPercentiles,
    /// People served: from their first attempt's intended time to the answer.
    pub person_ok: LoadPercentiles,
    /// Actual minus intended send time of first attempts: how well the
    /// schedule was kept. The run's validity is judged on this.
    pub send_lag: LoadPercentiles,
    /// The same for retries, whose due times the clients set themselves
    /// (tokio's millisecond timer wakes them, so expect about a millisecond).
    pub retry_send_lag: LoadPercentiles,
    /// The attempts that waited in the client for a connection (a busy
    /// pool, the connect rate, the bound), first attempts and retries, and
    /// how long: in their latency, not in their send lag (each record's
    /// `client_wait_us`).
    pub client_wait: LoadPercentiles,
    /// The bound on the send lag's p99.
    pub send_lag_bound_us: u64,
    /// True if and only if the send lag's p99 stayed within its bound.
    pub valid: bool,
    /// The most attempts' records that waited at once for the writer of
    /// `client.jsonl` (about 130 bytes each in memory): a few per
    /// millisecond of the rate when the disk keeps up; more means writes
    /// stalled and the records of the stall were held meanwhile.
    pub records_backlog_max: u64,
    /// Connections the load generator opened to the target, those opened
    /// before the schedule started included. A person opens one only when
    /// none is idle (and, under `max_connections`, one may be opened), and
    /// one the target closed is replaced. Far more than the rate times the
    /// latency means answers came back late and people opened new ones
    /// meanwhile.
    pub connections_opened: u64,
    /// The load generator's own bound on open connections (what its
    /// callers can hold), and what met it.
    pub connection_bound: ConnectionBound,
    /// The CPU the load generator's process used over the run ÷ (the
    /// run's time × the cores it may run on), when the system says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<f64>,
    /// In an invalid run, what gave out: `core` (it used all the CPU it
    /// may run on), `connections` (its own bound), `ports`, `file
    /// descriptors`, or `machine` (none of its own: other work held its
    /// cores); said in the notes too. `None` in a valid run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_out: Option<&'static str>,
    /// What the load generator says of its run for the run's notes (its
    /// bound on open connections reached, ...); none when all went as
    /// planned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// One entry per second of the run.
    pub timeline: Vec<LoadSecond>,
    /// The spending guard, when one was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spend: Option<Spent>,
}

/// The load generator's bound on its open connections (`summary.json`'s
/// `connection_bound`): per phase, rate × mean patience with headroom (or
/// the open files, or the scenario's `max_connections`, when lower).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ConnectionBound {
    /// The largest limit of any phase.
    pub largest: u64,
    /// The most connections open at once.
    pub most_open: u64,
    /// Attempts that waited in the client for a connection: at the bound,
    /// at a busy pool or for the connect rate (each wait in the record's
    /// `client_wait_us` and in its latency, not in its send lag).
    pub waited: u64,
    /// Of those, the attempts that got none within their patience and
    /// were not sent (`connect_error`, reason [`crate::NOT_SENT_AT_BOUND`]
    /// or [`crate::NOT_SENT_IN_CLIENT`]).
    pub not_sent: u64,
    /// Of those that waited, the attempts that waited at the load
    /// generator's own bound (what its callers can hold, or the open files
    /// it has), not at the callers' pool, cap or connect rate: the run
    /// could not open the connections its callers would have, a limit of
    /// the machine's, and is invalid.
    pub waited_at_own_bound: u64,
    /// How the callers held connections: `per caller` or `pool`.
    pub model: &'static str,
    /// The callers' new connections per second at most, if limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_rate_per_s: Option<f64>,
}

/// The reason of an attempt's record (`connect_error`) that got no
/// connection within its patience because the load generator's own bound
/// on open connections was reached: it was never sent, a limit of the
/// load generator's (see the run's notes), not the gateway's doing.
pub const NOT_SENT_AT_BOUND: &str =
    "not sent: no connection within the patience, the load generator's bound on open connections was reached";

/// The reason of an attempt's record (`connect_error`) that got no
/// connection within its patience because the callers' own limits held
/// it in the client: every connection of their pool busy, or their new
/// connections per second spent. Never sent: the callers' doing, not the
/// gateway's.
pub const NOT_SENT_IN_CLIENT: &str =
    "not sent: no connection within the patience, the callers' pool was busy or their connect rate spent";

/// The reason of an attempt's record (`connect_error`) that the load
/// generator came to only after its person's patience had ended (it fell
/// behind its schedule by more than that: see the send lag): not sent.
pub const NOT_SENT_LATE: &str =
    "not sent: the load generator came to it only after the person's patience had ended";

/// The reason of an attempt's record (`malformed`) whose answer passed the
/// scenario's `max_answer_bytes`: the generator closed the connection
/// rather than read on. A kind of malformed answer, counted with them.
pub const OVERSIZED: &str = "oversized";

/// Returns true if and only if a record's `reason` says the load
/// generator did not send the attempt ([`NOT_SENT_AT_BOUND`],
/// [`NOT_SENT_LATE`]): its own limit, never the gateway's doing.
///
/// ```
/// assert!(loadgen::was_not_sent(loadgen::NOT_SENT_LATE));
/// assert!(!loadgen::was_not_sent("connect: connection refused"));
/// ```
pub fn was_not_sent(reason: &str) -> bool {
    reason.starts_with(wire::NOT_SENT_PREFIX)
}

/// What the spending guard let through (`summary.json`'s `spend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Spent {
    /// The budget, tokens.
    pub limit_tokens: u64,
    /// Tokens of the requests sent (prompt at 4 characters a token plus
    /// max_tokens), retries included.
    pub sent_tokens: u64,
    /// True if a request was held back: the load stopped there.
    pub stopped: bool,
}

impl RunReport {
    /// The summary of one outcome.
    pub fn outcome(&self, o: ClientOutcome) -> &OutcomeSummary {
        &self.outcomes[o.index()]
    }

    /// A table of counts and percentiles for a terminal.
    pub fn table(&self) -> String {
        let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "outcome", "first", "retries", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        );
        let mut row = |name: &str, first: String, retries: String, p: &LoadPercentiles| {
            let _ = writeln!(
                out,
                "{:<16} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
                name,
                first,
                retries,
                ms(p.p50_us),
                ms(p.p90_us),
                ms(p.p99_us),
                ms(p.p999_us),
                ms(p.max_us)
            );
        };
        for o in &self.outcomes {
            if o.first_attempts + o.retries > 0 {
                row(
                    o.outcome.as_str(),
                    o.first_attempts.to_string(),
                    o.retries.to_string(),
                    &o.latency,
                );
            }
        }
        if self.ttft_stream_ok.count > 0 {
            row(
                "ttft (stream)",
                self.ttft_stream_ok.count.to_string(),
                "-".into(),
                &self.ttft_stream_ok,
            );
        }
        row(
            "served person",
            self.person_ok.count.to_string(),
            "-".into(),
            &self.person_ok,
        );
        row(
            "send lag",
            self.send_lag.count.to_string(),
            "-".into(),
            &self.send_lag,
        );
        if self.retry_send_lag.count > 0 {
            row(
                "retry send lag",
                "-".into(),
                self.retry_send_lag.count.to_string(),
                &self.retry_send_lag,
            );
        }
        if self.client_wait.count > 0 {
            row(
                "client wait",
                self.client_wait.count.to_string(),
                "-".into(),
                &self.client_wait,
            );
        }
        let secs = self.elapsed_ms as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{} people, {} attempts, {} completion tokens in {:.1} s; send lag p99 {} ms (bound {} ms): {}",
            self.people,
            self.attempts,
            self.tokens,
            secs,
            ms(self.send_lag.p99_us),
            ms(self.send_lag_bound_us),
            match (self.valid, self.connection_bound.waited_at_own_bound, self.gave_out) {
                (true, ..) => "run valid".to_owned(),
                (false, 0, Some(what)) => format!(
                    "RUN INVALID: the generator could not keep its schedule (what gave out: {what})"
                ),
                (false, 0, None) => "RUN INVALID: the generator could not keep its schedule".to_owned(),
                (false, ..) => "RUN INVALID: the generator's own bound on open connections was reached".to_owned(),
            }
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// The per-second counts as CSV, header included: the load
    /// generator's `load-seconds.csv` ([`wire::files::LOAD_SECONDS`]).
    pub fn seconds_csv(&self) -> String {
        let mut out =
            String::from("second,offered,sent,retries,ok,shed,timed_out,errors,outstanding\n");
        for s in &self.timeline {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{}",
                s.second,
                s.offered,
                s.sent,
                s.retries,
                s.ok,
                s.shed,
                s.timed_out,
                s.errors,
                s.outstanding
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        id: &str,
        attempt: u32,
        intended: u64,
        done: u64,
        outcome: ClientOutcome,
        last: bool,
    ) -> ClientRecord {
        ClientRecord {
            id: id.into(),
            attempt,
            intended_us: intended,
            sent_us: intended + 100,
            client_wait_us: 0,
            first_byte_us: Some(intended + 500),
            done_us: done,
            status: Some(200),
            outcome,
            retry_after_ms: None,
            retry_after_header: None,
            tokens: 3,
            stream: true,
            last,
            patience_ms: 30_000,
            reason: None,
            tenant: None,
            body_reads: Some(3),
            longest_gap_us: Some(200),
        }
    }

    #[test]
    fn counts_percentiles_and_timeline() {
        let t0 = 1_000_000_000;
        let mut s = Stats::new(t0);
        // Person a: shed at 0.1 s, retried at 1.2 s, served at 2.5 s.
        s.add(&rec("a", 1, t0, t0 + 100_000, ClientOutcome::Shed, false));
        s.add(&rec(
            "a",
            2,
            t0 + 1_200_000,
            t0 + 2_500_000,
            ClientOutcome::Ok,
            true,
        ));
        // Person b: served in 10 ms, 4 ms of it waiting in the client for
        // a connection; person c times out at 1.5 s.
        s.add(&ClientRecord {
            client_wait_us: 4_000,
            ..rec("b", 1, t0 + 10_000, t0 + 20_000, ClientOutcome::Ok, true)
        });
        s.add(&rec(
            "c",
            1,
            t0 + 20_000,
            t0 + 1_500_000,
            ClientOutcome::Timeout,
            true,
        ));
        let r = s.into_report(Duration::from_secs(3), Duration::from_millis(5));
        assert_eq!(r.people, 3);
        assert_eq!(r.attempts, 4);
        assert_eq!(r.outcome(ClientOutcome::Ok).first_attempts, 1);
        assert_eq!(r.outcome(ClientOutcome::Ok).retries, 1);
        assert_eq!(r.outcome(ClientOutcome::Shed).first_attempts, 1);
        // Person a's wait counts from their first arrival.
        assert_eq!(r.person_ok.count, 2);
        let max = r.person_ok.max_us;
        assert!((2_495_000..=2_505_000).contains(&max), "{max}");
        assert!(r.valid);
        // The one wait in the client: counted apart, and in the table.
        assert_eq!(r.client_wait.count, 1);
        let wait = r.client_wait.max_us;
        assert!((3_995..=4_005).contains(&wait), "{wait}");
        assert!(r.table().contains("client wait"), "{}", r.table());
        assert_eq!(r.send_lag.p99_us, 100);
        let outstanding: Vec<i64> = r.timeline.iter().map(|s| s.outstanding).collect();
        assert_eq!(outstanding, vec![2, 1, 0]);
        assert_eq!(r.timeline[0].offered, 3);
        assert_eq!(r.timeline[1].retries, 1);
        assert_eq!(r.timeline[2].ok, 1);
        assert!(r.table().contains("run valid"));
        assert!(r.seconds_csv().starts_with("second,offered"));
    }

    #[test]
    fn only_people_between_attempts_are_remembered() {
        // 100,000 people, each shed once and served on a retry, their
        // records interleaved as a run's are: the map of first intended
        // times holds the people between attempts, never the run's people.
        let mut s = Stats::new(0);
        let mut most = 0;
        for i in 0..100_000u64 {
            let id = format!("r{i:06}");
            s.add(&rec(
                &id,
                1,
                i * 1000,
                i * 1000 + 10,
                ClientOutcome::Shed,
                false,
            ));
            if i >= 50 {
                let j = i - 50;
                let id = format!("r{j:06}");
                let done = i * 1000 + 20;
                s.add(&rec(&id, 2, j * 1000 + 500, done, ClientOutcome::Ok, true));
            }
            most = most.max(s.first_intended.len());
        }
        assert_eq!(most, 50);
        for j in 99_950..100_000u64 {
            let id = format!("r{j:06}");
            s.add(&rec(
                &id,
                2,
                j * 1000 + 500,
                j * 1000 + 900,
                ClientOutcome::Ok,
                true,
            ));
        }
        assert!(s.first_intended.is_empty());
        assert!(
            s.first_intended.capacity() < 1024,
            "{}",
            s.first_intended.capacity()
        );
        let r = s.into_report(Duration::from_secs(100), Duration::from_millis(5));
        assert_eq!(r.person_ok.count, 100_000);
    }

    #[test]
    fn histogram_log_reads_back() {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let mut s = Stats::new(0);
        s.add(&rec("a", 1, 0, 2_000, ClientOutcome::Ok, true));
        let mut out = Vec::new();
        s.write_histogram_log(
            &mut out,
            std::time::SystemTime::now(),
            Duration::from_secs(1),
        )
        .unwrap();
        let tags: Vec<String> = IntervalLogIterator::new(&out)
            .filter_map(|e| match e {
                Ok(LogEntry::Interval(h)) => h.tag().map(|t| t.as_str().to_string()),
                _ => None,
            })
            .collect();
        // latency and ttft_stream per outcome, person.ok, two send lags and
        // the client's waits.
        assert_eq!(tags.len(), 2 * ClientOutcome::ALL.len() + 4, "{tags:?}");
        assert!(tags.contains(&"client_wait".to_string()));
        assert!(tags.contains(&"latency.ok".to_string()));
    }

    #[test]
    fn late_sends_make_the_run_invalid() {
        let mut s = Stats::new(0);
        for i in 0..100 {
            let mut r = rec(
                &format!("p{i}"),
                1,
                i * 1000,
                i * 1000 + 50,
                ClientOutcome::Ok,
                true,
            );
            r.sent_us = r.intended_us + 20_000;
            s.add(&r);
        }
        let r = s.into_report(Duration::from_secs(1), Duration::from_millis(5));
        assert!(!r.valid);
        assert!(r.table().contains("RUN INVALID"));
    }
}
