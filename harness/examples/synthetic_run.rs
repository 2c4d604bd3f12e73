//! Writes a synthetic run directory of any size, for measuring `rehearse
//! report` (time and memory) on runs longer than one can afford to make.
//!
//! ```sh
//! cargo run --release -p harness --example synthetic_run -- DIR \
//!     --requests 3600000 [--rate 1000] [--seed 7]
//! rehearse report DIR
//! ```
//!
//! DIR gets what `rehearse run` leaves for judging, from the same types:
//! `scenario.toml` (read back as a [`harness::Scenario`]), `plan.json`
//! ([`harness::plan`]), `run.json` ([`wire::RunMeta`] with the
//! [`wire::Expectations`] the harness would derive from that plan),
//! `client.jsonl` and `provider.jsonl` ([`wire::ClientRecord`],
//! [`wire::ProviderRecord`], each file in the order the attempts and calls
//! ended, as the writers append them), and `rss.jsonl`.
//!
//! The traffic: `--requests` people arriving at `--rate` per second
//! (constant arrivals, ids `r000000`, … as the load generator makes them,
//! so the provider's records carry the same ids, as the marker or the
//! header would bring them), patience 5 s, retries honouring Retry-After
//! (3 attempts at most). The provider serves in 50 ms, and 0.2% of its
//! calls hang until the caller hangs up. From 40% to 45% of the run it is 4x
//! slower, which the plan sees as an overload: then the gateway queues
//! (up to 1.5 s), sheds 44% of first attempts (429 with a Retry-After the
//! callers honour), and 6% end in a timeout: 4% while their provider call
//! runs (the gateway hangs up on it) and 2% dispatched after the caller
//! left (stale dispatches, answered in full).
//!
//! Records are generated person by person in arrival order and held only
//! until no later person can end before them (a heap per file, keyed by
//! the end time), so the generator holds a few seconds of records, never
//! the run.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wire::{files, ClientOutcome, ClientRecord, Dialect, ProviderOutcome, ProviderRecord, RunMeta};

/// 2026-12-01T00:00:00Z, in microseconds: every run written starts there,
/// so two directories made with the same flags are the same bytes.
const START_US: u64 = 1_796_083_200_000_000;
const PATIENCE_US: u64 = 5_000_000;
const MAX_ATTEMPTS: u32 = 3;
/// The provider's time per call, and in the slow window.
const SERVICE_US: u64 = 50_000;
const SLOW_SERVICE_US: u64 = 200_000;
/// The prompt as the provider counts it (100 tokens and the id marker).
const PROMPT_TOKENS: u32 = 106;
const COMPLETION_TOKENS: u32 = 16;

type Error = Box<dyn std::error::Error>;

struct Args {
    dir: PathBuf,
    requests: u64,
    rate: u64,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let (mut requests, mut rate, mut seed) = (3_600_000, 1_000, 7);
    while let Some(a) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .ok_or(format!("{name} needs a whole number"))
        };
        match a.as_str() {
            "--requests" => requests = number("--requests")?,
            "--rate" => rate = number("--rate")?,
            "--seed" => seed = number("--seed")?,
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag}")),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err("one directory only".into()),
        }
    }
    if requests == 0 || rate == 0 {
        return Err("--requests and --rate must be above 0".into());
    }
    Ok(Args {
        dir: dir.ok_or("usage: synthetic_run DIR [--requests N] [--rate R] [--seed S]")?,
        requests,
        rate,
        seed,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let began = std::time::Instant::now();
    match write_run(&args) {
        Ok(c) => {
            println!(
                "{}: {} people, {} attempts ({} ok, {} shed, {} timeout), {} provider calls ({} hung up on, {} stale) in {:.1} s",
                args.dir.display(),
                c.people,
                c.attempts,
                c.ok,
                c.shed,
                c.timeout,
                c.calls,
                c.hung_up,
                c.stale,
                began.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The scenario the directory describes: `rate`/s for `secs` seconds, the
/// provider 4x slower during `slow` (seconds from the start).
fn scenario_text(rate: u64, secs: u64, slow: (u64, u64)) -> String {
    format!(
        r#"# Written by harness/examples/synthetic_run.rs: the scenario of a
# synthetic run directory (records generated, no rehearsal made).
[scenario]
name = "synthetic"
description = "synthetic records: {rate}/s for {secs} s, the provider 4x slower from {a} s to {b} s"
seed = 7

[provider]
completion_tokens = {{ fixed = {COMPLETION_TOKENS} }}

[provider.latency]
ttft = {{ fixed = "50ms" }}
per_token = {{ fixed = "0ms" }}

[provider.concurrency]
ceiling = 100
overflow = "queue"

[provider.faults]
hang = 0.002

[[provider.timeline]]
name = "brownout"
from = "{a}s"
until = "{b}s"
latency = {{ multiplier = 4.0 }}

[gateway]
memory_ceiling = "256MiB"

[gateway.reference]
mode = "bounded"
bounded = {{ concurrency = 100, queue = 2000, wait_budget = "6s" }}

[load]
patience = {{ fixed = "5s" }}

[[load.phases]]
name = "steady"
duration = "{secs}s"
rate = {rate}

[load.request]
prompt_tokens = {{ fixed = 100 }}
max_tokens = {{ fixed = {COMPLETION_TOKENS} }}

[load.retry]
policy = "retry_after"
max_attempts = {MAX_ATTEMPTS}

[checklist]
drain = {{ within = "10s" }}
served_latency = {{ p99_ms = 3000 }}
goodput = {{ min_share = 0.8 }}
"#,
        a = slow.0,
        b = slow.1,
    )
}

/// What was written.
#[derive(Debug, Default)]
struct Counts {
    people: u64,
    attempts: u64,
    ok: u64,
    shed: u64,
    timeout: u64,
    calls: u64,
    hung_up: u64,
    stale: u64,
}

fn write_run(args: &Args) -> Result<Counts, Error> {
    std::fs::create_dir_all(&args.dir)?;
    let secs = args.requests.div_ceil(args.rate);
    let slow = (secs * 40 / 100, (secs * 45 / 100).max(secs * 40 / 100 + 1));
    let text = scenario_text(args.rate, secs, slow);
    let scenario_path = args.dir.join(files::SCENARIO);
    files::write_atomic(&scenario_path, text.as_bytes())?;
    let scenario = harness::Scenario::from_str(&text, files::SCENARIO, &scenario_path)?;
    let plan = harness::plan(&scenario);
    files::write_atomic(
        &args.dir.join(files::PLAN),
        serde_json::to_string_pretty(&plan)?.as_bytes(),
    )?;

    let slow_us = (START_US + slow.0 * 1_000_000, START_US + slow.1 * 1_000_000);
    let mut run = Generator::create(&args.dir, args.seed, slow_us)?;
    for index in 0..args.requests {
        run.person(index, START_US + index * 1_000_000 / args.rate)?;
    }
    let (counts, send_lag_p99_ms, end_us) = run.finish()?;
    write_rss(&args.dir.join(files::RSS_RECORDS), slow_us, end_us)?;

    let rehearsal = scenario.rehearsal();
    let at = |s: f64| START_US + (s * 1e6) as u64;
    let o = plan.overload.as_ref();
    // As the harness derives them from the plan (harness/src/run/mod.rs).
    let expectations = wire::Expectations {
        start_us: START_US,
        load_end_us: at(rehearsal.load.schedule_length().as_secs_f64()),
        overload: o.map(|o| (at(o.from_s), at(o.until_s))),
        capacity_per_s: o.map_or(0.0, |o| o.capacity_per_s),
        patience_s: rehearsal.scale.secs(plan.patience_s),
        service_s: o.map_or(0.0, |o| o.service_s),
        queue_bound: o.map_or(0.0, |o| o.queue_bound),
        in_flight_at_provider: o.map_or(0.0, |o| o.capacity_per_s * o.service_s),
        gateway_wait_s: 0.0,
        knee: None,
        drain_baseline: plan.drain_baseline,
        after_trouble: None,
        memory_ceiling_bytes: scenario.gateway.memory_ceiling,
        memory_settle: None,
        send_lag_bound_ms: rehearsal.load.send_lag_bound().as_secs_f64() * 1000.0,
        send_lag_p99_ms,
        stopped_us: None,
    };
    let meta = RunMeta {
        scenario: scenario.meta.name.clone(),
        gateway: "reference gateway (bounded)".into(),
        time_scale: rehearsal.scale.time,
        quota_scale: rehearsal.scale.quota,
        expectations,
        partial: false,
        provider_url: "http://127.0.0.1:40001".into(),
        target_url: "http://127.0.0.1:40002".into(),
        notes: vec![
            "synthetic records written by harness/examples/synthetic_run.rs: no rehearsal was made"
                .into(),
        ],
        gateway_events: Vec::new(),
        untrusted: Vec::new(),
        provider_external: false,
        allow_unjudged: Vec::new(),
        gauge_period_s: 0.0,
        rig: None,
    };
    files::write_atomic(
        &args.dir.join(files::RUN),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
    )?;
    Ok(counts)
}

/// The gateway's memory every 100 ms: 20 MB, up to 60 MB while it queues
/// in the slow window, back down over the 30 s after it.
fn write_rss(path: &Path, slow: (u64, u64), end_us: u64) -> Result<(), Error> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut t = START_US - 50_000;
    while t <= end_us + 100_000 {
        let extra = if t < slow.0 {
            0.0
        } else if t < slow.1 {
            ((t - slow.0) as f64 / 10e6).min(1.0)
        } else {
            (1.0 - (t - slow.1) as f64 / 30e6).max(0.0)
        };
        let sawtooth = (t / 100_000 % 20) * 50_000;
        let sample = wire::RssSample {
            t_us: t,
            rss_bytes: 20_000_000 + (extra * 40e6) as u64 + sawtooth,
            rss_anon_bytes: None,
        };
        serde_json::to_writer(&mut out, &sample)?;
        out.write_all(b"\n")?;
        t += 100_000;
    }
    out.flush()?;
    Ok(())
}

/// splitmix64: enough randomness for a synthetic run, with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + (self.unit() * (hi - lo) as f64) as u64
    }
}

/// A record waiting in a heap until it may be written, ordered by `key`
/// (then by when it was made, so equal keys keep their order).
struct Pending<T> {
    key: u64,
    n: u64,
    record: T,
}

impl<T> PartialEq for Pending<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.n) == (other.key, other.n)
    }
}
impl<T> Eq for Pending<T> {}
impl<T> PartialOrd for Pending<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Pending<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.key, self.n).cmp(&(other.key, other.n))
    }
}

/// A heap of records, earliest key first.
struct Queue<T> {
    heap: BinaryHeap<Reverse<Pending<T>>>,
    made: u64,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            made: 0,
        }
    }

    fn push(&mut self, key: u64, record: T) {
        self.made += 1;
        self.heap.push(Reverse(Pending {
            key,
            n: self.made,
            record,
        }));
    }

    /// The earliest record, if its key is at most `until`.
    fn pop_until(&mut self, until: u64) -> Option<T> {
        if self.heap.peek()?.0.key > until {
            return None;
        }
        self.heap.pop().map(|Reverse(p)| p.record)
    }
}

/// How one attempt ends.
enum Fate {
    /// Answered after waiting this long in the gateway's queue.
    Served { wait_us: u64 },
    /// Shed by the gateway.
    Shed,
    /// The caller's patience ran out while the provider call ran; the
    /// gateway then hung up on it (`hang`: the provider's hang fault).
    HungUp { wait_us: u64, hang: bool },
    /// The caller's patience ran out in the gateway's queue, and the call
    /// was made after they left.
    Stale,
}

/// Generates people in arrival order and writes their records in end order.
struct Generator {
    rng: Rng,
    slow: (u64, u64),
    client: BufWriter<File>,
    provider: BufWriter<File>,
    /// Attempts, by when they ended.
    ended: Queue<ClientRecord>,
    /// Calls, by when the provider received them (to number them in
    /// arrival order), then by when they finished.
    received: Queue<ProviderRecord>,
    finished: Queue<ProviderRecord>,
    seq: u64,
    /// Send lags of first attempts, by the microsecond up to 2 ms.
    lags: Vec<u64>,
    last_end_us: u64,
    counts: Counts,
}

impl Generator {
    fn create(dir: &Path, seed: u64, slow: (u64, u64)) -> Result<Generator, Error> {
        let open = |name: &str| -> Result<BufWriter<File>, Error> {
            Ok(BufWriter::with_capacity(
                1 << 20,
                File::create(dir.join(name))?,
            ))
        };
        Ok(Generator {
            rng: Rng(seed),
            slow,
            client: open(files::CLIENT_RECORDS)?,
            provider: open(files::PROVIDER_RECORDS)?,
            ended: Queue::new(),
            received: Queue::new(),
            finished: Queue::new(),
            seq: 0,
            lags: vec![0; 2001],
            last_end_us: START_US,
            counts: Counts::default(),
        })
    }

    fn slow_at(&self, t: u64) -> bool {
        (self.slow.0..self.slow.1).contains(&t)
    }

    /// One person arriving at `arrival_us`, with every attempt they make.
    fn person(&mut self, index: u64, arrival_us: u64) -> Result<(), Error> {
        // Every later record ends after this arrival: what ended by now can
        // be written.
        self.write_until(arrival_us)?;
        self.counts.people += 1;
        let id = format!("r{index:06}");
        let give_up = arrival_us + PATIENCE_US;
        let mut intended = arrival_us;
        for attempt in 1..=MAX_ATTEMPTS {
            let lag = if self.rng.unit() < 0.99 {
                self.rng.between(40, 260)
            } else {
                self.rng.between(260, 2000)
            };
            if attempt == 1 {
                self.lags[lag.min(2000) as usize] += 1;
            }
            let sent = intended + lag;
            let fate = self.fate(sent, attempt, give_up);
            let mut rec = self.attempt(&id, attempt, intended, sent, give_up, fate);
            let retry_at = match rec.retry_after_ms {
                Some(ra) if attempt < MAX_ATTEMPTS => {
                    let wait = ra * 1000 + self.rng.between(0, ra * 1000 + 1);
                    // Only with time left for an answer: every attempt
                    // then ends within the person's patience.
                    Some(rec.done_us + wait).filter(|&t| t + 300_000 < give_up)
                }
                _ => None,
            };
            rec.last = retry_at.is_none();
            self.end(rec);
            match retry_at {
                Some(t) => intended = t,
                None => break,
            }
        }
        Ok(())
    }

    fn fate(&mut self, sent: u64, attempt: u32, give_up: u64) -> Fate {
        let u = self.rng.unit();
        if !self.slow_at(sent) {
            return if u < 0.998 {
                Fate::Served {
                    wait_us: self.rng.between(0, 300),
                }
            } else {
                Fate::HungUp {
                    wait_us: self.rng.between(0, 300),
                    hang: true,
                }
            };
        }
        // The slow window: the gateway queues, sheds and lets some wait out
        // their patience.
        // A served call ends within the caller's patience.
        let room = give_up.saturating_sub(sent + SLOW_SERVICE_US + 20_000);
        let wait_us = self.rng.between(0, 1_500_000).min(room);
        match (attempt, u) {
            (1, u) if u < 0.50 => Fate::Served { wait_us },
            (1, u) if u < 0.94 => Fate::Shed,
            (1, u) if u < 0.98 => Fate::HungUp {
                wait_us,
                hang: false,
            },
            (1, _) => Fate::Stale,
            (_, u) if u < 0.60 => Fate::Served { wait_us },
            _ => Fate::Shed,
        }
    }

    /// The attempt's record, and its provider call (queued) if it made one.
    fn attempt(
        &mut self,
        id: &str,
        attempt: u32,
        intended: u64,
        sent: u64,
        give_up: u64,
        fate: Fate,
    ) -> ClientRecord {
        let mut rec = ClientRecord {
            id: id.to_string(),
            attempt,
            intended_us: intended,
            sent_us: sent,
            client_wait_us: 0,
            first_byte_us: None,
            done_us: give_up,
            status: None,
            outcome: ClientOutcome::Timeout,
            retry_after_ms: None,
            retry_after_header: None,
            tokens: 0,
            stream: false,
            last: true,
            patience_ms: PATIENCE_US / 1000,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        };
        match fate {
            Fate::Served { wait_us } => {
                let finished = self.call(id, sent + 300 + wait_us, None);
                rec.first_byte_us = Some(finished + self.rng.between(150, 400));
                rec.done_us = rec.first_byte_us.unwrap_or(finished) + 40;
                rec.status = Some(200);
                rec.outcome = ClientOutcome::Ok;
                rec.tokens = u64::from(COMPLETION_TOKENS);
            }
            Fate::Shed => {
                rec.first_byte_us = Some(sent + self.rng.between(300, 2500));
                rec.done_us = rec.first_byte_us.unwrap_or(sent) + 20;
                rec.status = Some(429);
                rec.outcome = ClientOutcome::Shed;
                // What the gateway's queue would take to drain, as it says.
                rec.retry_after_ms = Some(self.rng.between(800, 2600));
            }
            Fate::HungUp { wait_us, hang } => {
                let hung_up = give_up + self.rng.between(500, 3000);
                self.call(id, sent + 300 + wait_us, Some((hung_up, hang)));
                self.counts.hung_up += 1;
            }
            Fate::Stale => {
                let received = give_up + self.rng.between(1_000, 800_000);
                self.call(id, received, None);
                self.counts.stale += 1;
            }
        }
        rec
    }

    /// A provider call received at `received`: answered in full, or hung up
    /// on at the given time. Returns when it finished.
    fn call(&mut self, id: &str, received: u64, hung_up: Option<(u64, bool)>) -> u64 {
        let admitted = received + self.rng.between(10, 60);
        let slow = self.slow_at(admitted);
        let base = if slow { SLOW_SERVICE_US } else { SERVICE_US };
        let answered = admitted + base - base / 20 + self.rng.between(0, base / 10);
        let (finished, first_byte, completion, outcome, status) = match hung_up {
            None => (
                answered,
                Some(answered),
                COMPLETION_TOKENS,
                ProviderOutcome::Ok,
                200,
            ),
            Some((at, hang)) => {
                let outcome = if hang {
                    ProviderOutcome::Hang
                } else {
                    ProviderOutcome::Ok
                };
                (at, None, 0, outcome, 0)
            }
        };
        let call = ProviderRecord {
            id: id.to_string(),
            run_id: String::new(),
            seq: 0,
            dialect: Dialect::OpenAi,
            api: wire::Api::Chat,
            model: "gpt-4o-mini".into(),
            stream: false,
            received_us: received,
            admitted_us: Some(admitted),
            first_byte_us: first_byte,
            finished_us: Some(finished),
            hung_up_us: hung_up.map(|(at, _)| at),
            prompt_tokens: PROMPT_TOKENS,
            max_tokens: Some(COMPLETION_TOKENS),
            completion_tokens: completion,
            reserved_tokens: 0,
            phase: if slow { "brownout" } else { "base" }.into(),
            outcome,
            status,
            retry_after_s: None,
            retry_after_ms: None,
            provider: None,
        };
        self.received.push(received, call);
        finished
    }

    fn end(&mut self, rec: ClientRecord) {
        self.counts.attempts += 1;
        match rec.outcome {
            ClientOutcome::Ok => self.counts.ok += 1,
            ClientOutcome::Shed => self.counts.shed += 1,
            _ => self.counts.timeout += 1,
        }
        self.last_end_us = self.last_end_us.max(rec.done_us);
        self.ended.push(rec.done_us, rec);
    }

    /// Writes every attempt and call that ended by `t`, in end order (calls
    /// numbered in the order the provider received them).
    fn write_until(&mut self, t: u64) -> Result<(), Error> {
        while let Some(rec) = self.ended.pop_until(t) {
            serde_json::to_writer(&mut self.client, &rec)?;
            self.client.write_all(b"\n")?;
        }
        while let Some(mut call) = self.received.pop_until(t) {
            call.seq = self.seq;
            self.seq += 1;
            let end = call.finished_us.unwrap_or(call.received_us);
            self.last_end_us = self.last_end_us.max(end);
            self.finished.push(end, call);
        }
        while let Some(call) = self.finished.pop_until(t) {
            serde_json::to_writer(&mut self.provider, &call)?;
            self.provider.write_all(b"\n")?;
            self.counts.calls += 1;
        }
        Ok(())
    }

    /// Writes what is left; returns the counts, the first attempts' send
    /// lag p99 in ms, and when the last record ended.
    fn finish(mut self) -> Result<(Counts, f64, u64), Error> {
        self.write_until(u64::MAX)?;
        self.client.flush()?;
        self.provider.flush()?;
        let total: u64 = self.lags.iter().sum();
        let mut seen = 0;
        let mut p99_us = 0;
        for (us, n) in self.lags.iter().enumerate() {
            seen += n;
            if seen * 100 >= total * 99 {
                p99_us = us;
                break;
            }
        }
        Ok((self.counts, p99_us as f64 / 1000.0, self.last_end_us))
    }
}
