//! Hand-made runs for the unit tests: small constructors, and two whole
//! stories simulated in a few lines, a `bounded` gateway that sheds at its
//! queue bound and a `naive` one that forwards everything to a queueing
//! provider.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::expect::{Expectations, Thresholds};
use crate::judgement::Judgement;
use crate::timeline::Timeline;
use wire::{ClientOutcome, ClientRecord, Dialect, ProviderOutcome, ProviderRecord, RssSample};

/// The run's start: a real epoch, so nothing relies on small numbers.
pub(crate) const T0: u64 = 1_700_000_000_000_000;

/// The instant `ms` milliseconds into the run.
pub(crate) fn at(ms: u64) -> u64 {
    T0 + ms * 1000
}

/// An attempt sent (and due) at `sent_ms`, ended at `done_ms`.
pub(crate) fn attempt(
    id: &str,
    n: u32,
    sent_ms: u64,
    done_ms: u64,
    outcome: ClientOutcome,
    retry_after_ms: Option<u64>,
) -> ClientRecord {
    ClientRecord {
        id: id.to_string(),
        attempt: n,
        intended_us: at(sent_ms),
        sent_us: at(sent_ms),
        client_wait_us: 0,
        first_byte_us: None,
        done_us: at(done_ms),
        status: match outcome {
            ClientOutcome::Ok => Some(200),
            ClientOutcome::Shed => Some(429),
            ClientOutcome::ProviderError => Some(500),
            _ => None,
        },
        outcome,
        retry_after_ms,
        retry_after_header: None,
        tokens: 0,
        stream: false,
        last: true,
        patience_ms: 30_000,
        reason: None,
        tenant: None,
        body_reads: None,
        longest_gap_us: None,
    }
}

/// An answered call with 100 prompt and 50 completion tokens.
pub(crate) fn call(
    id: &str,
    received_ms: u64,
    admitted_ms: u64,
    finished_ms: u64,
) -> ProviderRecord {
    ProviderRecord {
        id: id.to_string(),
        run_id: String::new(),
        seq: 0,
        dialect: Dialect::OpenAi,
        api: wire::Api::Chat,
        model: "m".to_string(),
        stream: false,
        received_us: at(received_ms),
        admitted_us: Some(at(admitted_ms)),
        first_byte_us: Some(at(admitted_ms)),
        finished_us: Some(at(finished_ms)),
        hung_up_us: None,
        prompt_tokens: 100,
        max_tokens: None,
        completion_tokens: 50,
        reserved_tokens: 150,
        outcome: ProviderOutcome::Ok,
        status: 200,
        phase: "base".to_string(),
        retry_after_s: None,
        retry_after_ms: None,
        provider: None,
    }
}

/// Expectations for a provider of 8 slots at 1 s per call (μ = 8/s), with
/// callers of `patience_s`.
pub(crate) fn expect(
    overload_ms: Option<(u64, u64)>,
    load_end_ms: u64,
    patience_s: f64,
) -> Expectations {
    Expectations {
        start_us: T0,
        load_end_us: at(load_end_ms),
        overload: overload_ms.map(|(a, b)| (at(a), at(b))),
        capacity_per_s: 8.0,
        patience_s,
        service_s: 1.0,
        queue_bound: 8.0 * (patience_s - 1.0),
        in_flight_at_provider: 8.0,
        gateway_wait_s: 0.0,
        // The provider of 8 slots batches them: its curve bends at 8.
        knee: Some(8.0),
        drain_baseline: None,
        after_trouble: None,
        memory_ceiling_bytes: Some(200 * MIB),
        memory_settle: None,
        send_lag_bound_ms: 5.0,
        send_lag_p99_ms: 0.5,
        stopped_us: None,
    }
}

pub(crate) const MIB: u64 = 1024 * 1024;

/// The per-second timeline the judge makes of these records: [`judged`]
/// in rows of a second.
pub(crate) fn timeline(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
) -> Timeline {
    judged(attempts, calls, rss, 1.0).timeline
}

/// These records judged in one pass, for a run started at [`T0`] that
/// predicted nothing (no patience, no overload), in rows of `1 s ÷
/// time_scale` (finer rows show when each attempt left the gateway and
/// the backlog).
pub(crate) fn judged(
    attempts: &[ClientRecord],
    calls: &[ProviderRecord],
    rss: &[RssSample],
    time_scale: f64,
) -> Judgement {
    let nothing = Expectations {
        start_us: T0,
        load_end_us: T0,
        overload: None,
        capacity_per_s: 0.0,
        patience_s: 0.0,
        service_s: 0.0,
        queue_bound: 0.0,
        in_flight_at_provider: 0.0,
        gateway_wait_s: 0.0,
        knee: None,
        drain_baseline: None,
        after_trouble: None,
        memory_ceiling_bytes: None,
        memory_settle: None,
        send_lag_bound_ms: 0.0,
        send_lag_p99_ms: 0.0,
        stopped_us: None,
    };
    let t = Thresholds::default();
    crate::judge::judge_at(attempts, calls, rss, &nothing, &t, time_scale)
}

/// A whole run.
pub(crate) struct Story {
    pub(crate) attempts: Vec<ClientRecord>,
    pub(crate) calls: Vec<ProviderRecord>,
    pub(crate) rss: Vec<RssSample>,
    pub(crate) expect: Expectations,
}

/// The steady lead-in of the `bounded` and `naive` stories before their
/// overload, in ms: the drain rule needs 10 s of baseline.
pub(crate) const LEAD_MS: u64 = 10_000;

/// Arrival times, in ms: `rate` per second from `from_ms` to `to_ms`.
fn arrivals(from_ms: u64, to_ms: u64, per_s: u64) -> impl Iterator<Item = u64> {
    let step = 1000 / per_s;
    (from_ms..to_ms).step_by(step as usize)
}

/// 1 s per call on 8 slots, first come first served: the dispatch time of
/// a job ready at `t_us`.
fn take_slot(slots: &mut BinaryHeap<Reverse<u64>>, t_us: u64) -> u64 {
    let free = slots.pop().map_or(t_us, |Reverse(f)| f);
    let start = free.max(t_us);
    slots.push(Reverse(start + 1_000_000));
    start
}

fn eight_slots() -> BinaryHeap<Reverse<u64>> {
    (0..8).map(|_| Reverse(0)).collect()
}

/// Memory of 50 MiB plus 1 MiB per open attempt, every 100 ms.
fn rss(attempts: &[ClientRecord], end_ms: u64) -> Vec<RssSample> {
    (0..=end_ms)
        .step_by(100)
        .map(|ms| {
            let t = at(ms);
            let open = attempts
                .iter()
                .filter(|a| a.sent_us <= t && t < a.done_us)
                .count() as u64;
            RssSample {
                t_us: t,
                rss_bytes: 50 * MIB + open * MIB,
                rss_anon_bytes: None,
            }
        })
        .collect()
}

/// A bounded gateway: 8 upstream calls at a time, a queue of 11, sheds
/// with a Retry-After of the time its queue needs to empty (rounded up to
/// 100 ms). Load: 4/s for 10 s, 12/s for 10 s (the overload, μ = 8/s), 2/s
/// for 10 s. The gateway bounds waits for a patience of 3 s; callers give
/// up after 10 s over all attempts, and retry a shed once, after
/// its Retry-After plus some jitter.
pub(crate) fn bounded() -> Story {
    const QUEUE: usize = 11;
    let mut pending: BinaryHeap<Reverse<(u64, u32, u32)>> = BinaryHeap::new();
    let times = arrivals(0, LEAD_MS, 4)
        .chain(arrivals(LEAD_MS, LEAD_MS + 10_000, 12))
        .chain(arrivals(LEAD_MS + 10_000, LEAD_MS + 20_000, 2));
    for (n, ms) in times.enumerate() {
        pending.push(Reverse((at(ms), n as u32, 1)));
    }
    let mut slots = eight_slots();
    let mut dispatched: Vec<u64> = Vec::new();
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    while let Some(Reverse((t, person, n))) = pending.pop() {
        let id = format!("p{person:05}");
        let waiting: Vec<u64> = dispatched.iter().copied().filter(|&d| d > t).collect();
        let mut a = attempt(&id, n, 0, 0, ClientOutcome::Ok, None);
        a.intended_us = t;
        a.sent_us = t;
        a.patience_ms = 10_000;
        if waiting.len() >= QUEUE {
            let drain_us = waiting.iter().max().map_or(0, |&d| d - t);
            let ra = drain_us.div_ceil(100_000).max(1) * 100;
            a.done_us = t + 1_000;
            a.outcome = ClientOutcome::Shed;
            a.status = Some(429);
            a.retry_after_ms = Some(ra);
            if n == 1 {
                a.last = false;
                let jitter_ms = ra * u64::from(person % 10) / 10;
                pending.push(Reverse((a.done_us + (ra + jitter_ms) * 1000, person, 2)));
            }
        } else {
            let start = take_slot(&mut slots, t);
            dispatched.push(start);
            a.done_us = start + 1_001_000;
            let mut c = call(&id, 0, 0, 0);
            c.received_us = start;
            c.admitted_us = Some(start);
            c.first_byte_us = Some(start + 100_000);
            c.finished_us = Some(start + 1_000_000);
            calls.push(c);
        }
        attempts.push(a);
    }
    let rss = rss(&attempts, LEAD_MS + 22_000);
    let mut expect = expect(Some((LEAD_MS, LEAD_MS + 10_000)), LEAD_MS + 19_500, 3.0);
    expect.memory_ceiling_bytes = Some(100 * MIB);
    Story {
        attempts,
        calls,
        rss,
        expect,
    }
}

/// `s` stopped `stop_ms` into the run, as a Ctrl-C stops one: nothing is
/// sent after the stop; attempts still open half a second after it end
/// `cancelled`, their calls hung up on then; the memory samples stop.
pub(crate) fn stopped(mut s: Story, stop_ms: u64) -> Story {
    let (stop, end) = (at(stop_ms), at(stop_ms + 500));
    s.attempts.retain(|a| a.sent_us < stop);
    let mut open = std::collections::HashSet::new();
    for a in &mut s.attempts {
        if a.done_us > end {
            a.done_us = end;
            a.outcome = ClientOutcome::Cancelled;
            (a.status, a.retry_after_ms) = (None, None);
            open.insert(a.id.clone());
        }
    }
    s.calls.retain(|c| c.received_us < stop);
    for c in &mut s.calls {
        if open.contains(&c.id) && c.finished_us.is_some_and(|f| f > end) {
            (c.finished_us, c.hung_up_us) = (None, Some(end));
        }
    }
    s.rss.retain(|r| r.t_us < end);
    s.expect.stopped_us = Some(stop);
    s
}

/// A naive gateway: forwards every request at once (200 µs later), never
/// sheds and never hangs up on the provider, which serves 8 calls at a
/// time, 1 s each, and queues the rest. Load: 4/s for 10 s, then 40/s for
/// 10 s (the overload, μ = 8/s), then nothing. Callers have 30 s of
/// patience; those who give up leave their call queued at the provider.
pub(crate) fn naive() -> Story {
    let mut slots = eight_slots();
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    let times = arrivals(0, LEAD_MS, 4).chain(arrivals(LEAD_MS, LEAD_MS + 10_000, 40));
    for (person, ms) in times.enumerate() {
        let id = format!("p{person:05}");
        let t = at(ms);
        let received = t + 200;
        let start = take_slot(&mut slots, received);
        let finished = start + 1_000_000;
        let gives_up = t + 30_000_000;
        let mut a = attempt(&id, 1, ms, 0, ClientOutcome::Ok, None);
        if finished + 200 <= gives_up {
            a.done_us = finished + 200;
        } else {
            a.done_us = gives_up;
            a.outcome = ClientOutcome::Timeout;
            a.status = None;
        }
        attempts.push(a);
        let mut c = call(&id, 0, 0, 0);
        c.received_us = received;
        c.admitted_us = Some(start);
        c.first_byte_us = Some(start + 100_000);
        c.finished_us = Some(finished);
        calls.push(c);
    }
    let rss = rss(&attempts, LEAD_MS + 55_000);
    Story {
        attempts,
        calls,
        rss,
        expect: expect(Some((LEAD_MS, LEAD_MS + 10_000)), LEAD_MS + 9_975, 30.0),
    }
}

/// A gateway of 8 slots (1 s a call) with a FIFO queue of `queue`, under
/// `per_s` arrivals a second for 10 s after 10 s of 4/s, callers of 60 s
/// of patience who do not retry: each shed (queue full, answered at once)
/// carries the Retry-After `ra` makes of the backlog drain time at it (in
/// microseconds: when the last job queued then is dispatched), with the
/// header it names.
pub(crate) fn queued(
    queue: usize,
    per_s: u64,
    ra: impl Fn(u64) -> (u64, Option<wire::RetryAfterHeader>),
) -> Story {
    let times = arrivals(0, LEAD_MS, 4).chain(arrivals(LEAD_MS, LEAD_MS + 10_000, per_s));
    let mut slots = eight_slots();
    let mut dispatched: Vec<u64> = Vec::new();
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    for (person, ms) in times.enumerate() {
        let id = format!("q{person:05}");
        let t = at(ms);
        let mut a = attempt(&id, 1, ms, ms, ClientOutcome::Ok, None);
        a.patience_ms = 60_000;
        let waiting = dispatched.iter().filter(|&&d| d > t).count();
        if waiting >= queue {
            let drain_us = dispatched.iter().max().map_or(0, |&d| d.saturating_sub(t));
            let (ms, header) = ra(drain_us);
            a.done_us = t + 1_000;
            a.outcome = ClientOutcome::Shed;
            a.status = Some(429);
            a.reason = Some("queue_full".into());
            a.retry_after_ms = Some(ms);
            a.retry_after_header = header;
        } else {
            let start = take_slot(&mut slots, t);
            dispatched.push(start);
            a.done_us = start + 1_001_000;
            let mut c = call(&id, 0, 0, 0);
            c.received_us = start;
            c.admitted_us = Some(start);
            c.first_byte_us = Some(start + 100_000);
            c.finished_us = Some(start + 1_000_000);
            calls.push(c);
        }
        attempts.push(a);
    }
    let mut expect = expect(Some((LEAD_MS, LEAD_MS + 10_000)), LEAD_MS + 9_999, 60.0);
    expect.memory_ceiling_bytes = None;
    Story {
        attempts,
        calls,
        rss: Vec::new(),
        expect,
    }
}

/// A gateway that never refuses at admission: 8 slots (1 s a call) and a
/// queue of any length whose jobs are dropped after waiting 2 s, answered
/// 503 without a reason (an off-the-shelf load balancer's queue timeout),
/// under 16/s for 10 s after 10 s of 4/s; callers of 30 s of patience.
pub(crate) fn queue_timeout() -> Story {
    let times = arrivals(0, LEAD_MS, 4).chain(arrivals(LEAD_MS, LEAD_MS + 10_000, 16));
    let mut slots = eight_slots();
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    for (person, ms) in times.enumerate() {
        let id = format!("t{person:05}");
        let t = at(ms);
        let mut a = attempt(&id, 1, ms, ms, ClientOutcome::Ok, None);
        let free = slots.peek().map_or(t, |r| r.0);
        if free.max(t) > t + 2_000_000 {
            a.done_us = t + 2_000_000;
            a.outcome = ClientOutcome::Shed;
            a.status = Some(503);
        } else {
            let start = take_slot(&mut slots, t);
            a.done_us = start + 1_001_000;
            let mut c = call(&id, 0, 0, 0);
            c.received_us = start;
            c.admitted_us = Some(start);
            c.first_byte_us = Some(start + 100_000);
            c.finished_us = Some(start + 1_000_000);
            calls.push(c);
        }
        attempts.push(a);
    }
    Story {
        attempts,
        calls,
        rss: Vec::new(),
        expect: expect(Some((LEAD_MS, LEAD_MS + 10_000)), LEAD_MS + 9_999, 30.0),
    }
}

/// Streamed answers, one person a second for 20 s, each call 500 ms; the
/// calls of people 5, 10 and 15 are cut by the provider halfway, and what
/// the client saw of each is `seen(person)` (the others are answered).
pub(crate) fn streamed(seen: impl Fn(usize) -> ClientOutcome) -> Story {
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    for person in 0..20usize {
        let id = format!("s{person:05}");
        let ms = person as u64 * 1000;
        let cut = person % 5 == 0 && person > 0;
        let outcome = if cut { seen(person) } else { ClientOutcome::Ok };
        let mut a = attempt(&id, 1, ms, ms + 510, outcome, None);
        a.stream = true;
        a.status = Some(200);
        attempts.push(a);
        let mut c = call(&id, ms + 5, ms + 5, ms + 505);
        c.stream = true;
        if cut {
            c.outcome = ProviderOutcome::StreamCut;
            c.finished_us = Some(at(ms + 255));
            c.completion_tokens = 25;
        }
        calls.push(c);
    }
    Story {
        attempts,
        calls,
        rss: Vec::new(),
        expect: expect(None, 19_000, 30.0),
    }
}

/// A deterministic generator (splitmix64): tests need no `rand`.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[from, to)`.
    pub(crate) fn range(&mut self, from: u64, to: u64) -> u64 {
        from + self.next() % (to - from).max(1)
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A long run of everything at once: `people` arriving at `per_s` with
/// 2 s of patience, in front of a gateway that answers most, sheds some
/// (with a Retry-After the callers honour once), lets some time out while
/// their call waits at the provider or is dispatched after they left
/// (within `late_dispatch_ms` of their leaving), hangs up on some calls,
/// leaves some calls unfinished to the end, resets some connections, and
/// makes calls for ids nobody sent. Memory is sampled every 100 ms.
pub(crate) fn soak(people: u64, per_s: u64, late_dispatch_ms: u64, seed: u64) -> Story {
    let mut rng = Rng::new(seed);
    let (mut attempts, mut calls) = (Vec::new(), Vec::new());
    let step_us = 1_000_000 / per_s;
    for n in 0..people {
        let id = format!("s{n:07}");
        let due = T0 + n * step_us + rng.range(0, step_us);
        let mut intended = due;
        for k in 1..=2u32 {
            let sent = intended + rng.range(0, 300);
            let mut a = attempt(&id, k, 0, 0, ClientOutcome::Ok, None);
            (a.intended_us, a.sent_us, a.patience_ms) = (intended, sent, 2_000);
            let give_up = due + 2_000_000;
            let mut c = call(&id, 0, 0, 0);
            c.received_us = sent + rng.range(50, 30_000);
            let roll = rng.range(0, 100);
            let retry = match roll {
                // Answered.
                0..=54 => {
                    let admitted = c.received_us + rng.range(0, 300_000);
                    let finished = admitted + rng.range(50_000, 400_000);
                    (c.admitted_us, c.first_byte_us) = (Some(admitted), Some(admitted));
                    c.finished_us = Some(finished);
                    a.done_us = (finished + 500).min(give_up);
                    if a.done_us == give_up {
                        (a.outcome, a.status) = (ClientOutcome::Timeout, None);
                    }
                    calls.push(c);
                    false
                }
                // Shed by the gateway, with a Retry-After.
                55..=69 => {
                    a.done_us = sent + rng.range(100, 2_000);
                    (a.outcome, a.status) = (ClientOutcome::Shed, Some(429));
                    let ra = rng.range(1, 8) * 100;
                    a.retry_after_ms = Some(ra);
                    intended = a.done_us + ra * 1000 + rng.range(0, 100_000);
                    intended < give_up
                }
                // Shed by the provider: its 429 passed on.
                70..=74 => {
                    let finished = c.received_us + rng.range(100, 5_000);
                    (c.admitted_us, c.first_byte_us) = (None, Some(finished));
                    c.finished_us = Some(finished);
                    (c.outcome, c.status, c.completion_tokens) =
                        (ProviderOutcome::CapacityRejected, 429, 0);
                    a.done_us = finished + 300;
                    (a.outcome, a.status) = (ClientOutcome::Shed, Some(429));
                    calls.push(c);
                    false
                }
                // Timed out: the call waits at the provider, or is
                // dispatched after the caller left; answered into a
                // closed socket.
                75..=86 => {
                    a.done_us = give_up;
                    (a.outcome, a.status) = (ClientOutcome::Timeout, None);
                    if roll % 2 == 0 {
                        c.received_us = give_up + rng.range(0, late_dispatch_ms * 1000 + 1);
                    }
                    let admitted = c.received_us.max(give_up - 100_000) + rng.range(0, 500_000);
                    let finished = admitted + rng.range(50_000, 400_000);
                    (c.admitted_us, c.first_byte_us) = (Some(admitted), Some(admitted));
                    c.finished_us = Some(finished);
                    calls.push(c);
                    false
                }
                // Hung up on by the gateway at the caller's deadline.
                87..=91 => {
                    a.done_us = give_up;
                    (a.outcome, a.status) = (ClientOutcome::Timeout, None);
                    c.admitted_us = Some(c.received_us + rng.range(0, 100_000));
                    c.first_byte_us = None;
                    c.finished_us = rng.chance(50).then_some(give_up + 100);
                    c.hung_up_us = Some(give_up + 100);
                    (c.status, c.completion_tokens) = (0, 0);
                    calls.push(c);
                    false
                }
                // A call that never finishes (the provider hangs).
                92..=94 => {
                    a.done_us = give_up;
                    (a.outcome, a.status) = (ClientOutcome::Timeout, None);
                    (c.admitted_us, c.first_byte_us, c.finished_us) =
                        (Some(c.received_us), None, None);
                    (c.outcome, c.status) = (ProviderOutcome::Hang, 0);
                    calls.push(c);
                    false
                }
                // Reset before any call.
                95..=97 => {
                    a.done_us = sent + rng.range(100, 50_000);
                    (a.outcome, a.status) = (ClientOutcome::Reset, None);
                    false
                }
                // Answered, plus a call for an id nobody sent.
                _ => {
                    a.done_us = sent + rng.range(1_000, 200_000);
                    a.outcome = ClientOutcome::ProviderError;
                    a.status = Some(502);
                    let mut ghost = call(&format!("ghost{n}"), 0, 0, 0);
                    ghost.received_us = sent;
                    ghost.admitted_us = Some(sent + 10);
                    ghost.finished_us = Some(sent + 20_000);
                    calls.push(ghost);
                    false
                }
            };
            a.last = !(retry && k == 1);
            attempts.push(a);
            if a_last(&attempts) {
                break;
            }
        }
    }
    let end = attempts.iter().map(|a| a.done_us).max().unwrap_or(T0);
    let rss = (T0..=end)
        .step_by(100_000)
        .enumerate()
        .map(|(i, t)| RssSample {
            t_us: t,
            rss_bytes: 50 * MIB + (i as u64 % 37) * MIB,
            rss_anon_bytes: None,
        })
        .collect();
    let mut expect = expect(Some((10_000, 20_000)), people * 1000 / per_s, 2.0);
    expect.service_s = 0.3;
    expect.capacity_per_s = per_s as f64 * 0.6;
    expect.queue_bound = expect.capacity_per_s * 1.7;
    Story {
        attempts,
        calls,
        rss,
        expect,
    }
}

fn a_last(attempts: &[ClientRecord]) -> bool {
    attempts.last().is_none_or(|a| a.last)
}

/// `s` rehearsed `k` times faster: every instant's distance from the run's
/// start, every duration (patience, Retry-After, service) divided by `k`,
/// rates multiplied by it; depths and counts unchanged (as `wire::Scale`
/// scales a scenario's time).
pub(crate) fn compressed(s: &Story, k: u64) -> Story {
    let t = |us: u64| T0 + (us - T0) / k;
    let attempts = s
        .attempts
        .iter()
        .map(|a| {
            let mut a = a.clone();
            (a.intended_us, a.sent_us, a.done_us) = (t(a.intended_us), t(a.sent_us), t(a.done_us));
            a.first_byte_us = a.first_byte_us.map(t);
            a.retry_after_ms = a.retry_after_ms.map(|ms| ms / k);
            a.patience_ms /= k;
            a
        })
        .collect();
    let calls = s
        .calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.received_us = t(c.received_us);
            c.admitted_us = c.admitted_us.map(t);
            c.first_byte_us = c.first_byte_us.map(t);
            c.finished_us = c.finished_us.map(t);
            c.hung_up_us = c.hung_up_us.map(t);
            c
        })
        .collect();
    let rss = s
        .rss
        .iter()
        .map(|r| RssSample {
            t_us: t(r.t_us),
            ..*r
        })
        .collect();
    let e = &s.expect;
    let expect = Expectations {
        load_end_us: t(e.load_end_us),
        overload: e.overload.map(|(a, b)| (t(a), t(b))),
        stopped_us: e.stopped_us.map(t),
        capacity_per_s: e.capacity_per_s * k as f64,
        patience_s: e.patience_s / k as f64,
        service_s: e.service_s / k as f64,
        after_trouble: e.after_trouble.map(|a| wire::AfterTrouble {
            from_us: t(a.from_us),
            capacity_per_s: a.capacity_per_s.map(|c| c * k as f64),
        }),
        memory_settle: e.memory_settle.map(|(a, b)| (t(a), t(b))),
        ..e.clone()
    };
    Story {
        attempts,
        calls,
        rss,
        expect,
    }
}
