//! `stream_intact`: a streamed answer reaches the client as it is made:
//! the time the gateway added to its first token, and whether it came in
//! pieces or in one lump.
//!
//! Each streamed answer (an attempt that asked for a stream and ended
//! `ok`) is set against the call that answered it, from the join
//! (`crate::delivery` has the rule): the time added to its first token is
//! the client's first body byte less the provider's head, which for a
//! stream goes out at its first token. Its p99 must be within `added_ms`
//! (scenario time) plus `margin` (the machine's, not scaled).
//! A stream the provider sent in many pieces (at least four tokens over
//! at least 20 ms) is lumped when its first byte reached the client no
//! earlier than the provider's last token, when it came in one or two
//! reads, or when its reads came back to back (spread over under a
//! quarter of the time the provider took); an answer the gateway asked of
//! the provider whole is lumped too. At most `max_lumped_share` of those
//! judged may be.
//!
//! Old run directories, whose client records have no `body_reads`, are
//! judged on the time added alone (a gateway that reads the whole answer
//! before sending shows there too), and the verdict says lumps were not
//! judged and why. A run without streamed answers is skipped, saying so;
//! so is one whose streamed answers never joined a call that answered them
//! (the provider's side unseen).

use crate::delivery::{Deliveries, Lump, MIN_PIECES, MIN_SPREAD_US};
use crate::expect::StreamIntactThreshold;
use crate::verdict::{count, num, percent, plural, Figure, Status, Verdict};

use super::Evidence;

/// `stream_intact`: the p99 of the time the gateway added to the first
/// token within `added_ms` plus `margin`, and at most `max_lumped_share` of the streams
/// the provider sent in pieces delivered in a lump.
pub(crate) fn stream_intact(ev: &Evidence, th: &StreamIntactThreshold) -> Verdict {
    const ID: &str = crate::Check::StreamIntact.id();
    if let Some(v) = ev.skip_before(ID, th.enabled) {
        return v;
    }
    let d = &ev.tally.deliveries;
    if d.answers == 0 {
        return Verdict::skipped(
            ID,
            "no streamed answers",
            "no streamed answers: no request that asked for a stream was answered, so there is no stream to judge",
        );
    }
    let (Some(p50), Some(p99)) = (added_ms(d, 0.5), added_ms(d, 0.99)) else {
        return Verdict::skipped(
            ID,
            "no stream joined to its call",
            format!(
                "no data: none of the {} joined a provider call that answered it with its head, so the time the gateway added to the first token was never seen",
                plural(d.answers, "streamed answer", "streamed answers")
            ),
        );
    };
    let bound = th.bound_ms();
    let lumps = Lumps::of(d, th.max_lumped_share);
    let added_ok = p99 <= bound;
    let status = if added_ok && lumps.ok {
        Status::Pass
    } else {
        Status::Fail
    };
    let short = format!(
        "first token +{} ms p99 (bound {} ms); {}",
        ms(p99),
        ms(bound),
        lumps.short
    );
    let predicted = format!(
        "the gateway adds at most {} ms to the first token at the 99th percentile ({} ms and {} ms for the machine), and at most {} of the streams the provider sent in pieces reach the client in a lump",
        ms(bound),
        ms(th.added_ms),
        ms(th.margin.as_secs_f64() * 1000.0),
        percent(th.max_lumped_share)
    );
    let observed = format!(
        "{}: {} ms added to the first token at p50, {} ms at p99; {}",
        plural(d.judged, "streamed answer", "streamed answers"),
        ms(p50),
        ms(p99),
        lumps.observed
    );
    let detail = if status == Status::Pass {
        format!(
            "the {} reached the client as they were made: the gateway added {} ms to the first token at the median and {} ms at the 99th percentile (bound {} ms); {}",
            plural(d.judged, "streamed answer", "streamed answers"),
            ms(p50),
            ms(p99),
            ms(bound),
            lumps.detail
        )
    } else {
        failed(d, p50, p99, bound, added_ok, &lumps)
    };
    Verdict::new(ID, status, short, predicted, observed, detail).with(Figure::higher(
        p99,
        "ms",
        "p99 time added to the first token",
    ))
}

/// The time added to the first token at quantile `q`, in milliseconds:
/// the middle of its histogram bucket (three significant figures), so that
/// 1,960 ms reads as 1,960, not as its bucket's top.
fn added_ms(d: &Deliveries, q: f64) -> Option<f64> {
    let h = &d.added;
    (!h.is_empty()).then(|| h.median_equivalent(h.value_at_quantile(q)) as f64 / 1000.0)
}

/// Milliseconds with one decimal under 100, whole above.
fn ms(x: f64) -> String {
    num(x, if x < 100.0 { 1 } else { 0 })
}

/// What the verdict says of lumps.
struct Lumps {
    ok: bool,
    short: String,
    observed: String,
    detail: String,
}

impl Lumps {
    fn of(d: &Deliveries, max_share: f64) -> Lumps {
        let judged = d.lumps_judged;
        if judged == 0 {
            let why = if d.reads_unrecorded > 0 {
                "the client's records have no body_reads (a run directory from before they were kept)".to_owned()
            } else {
                format!(
                    "no stream was sent in pieces enough to tell (at least {MIN_PIECES} tokens over at least {} ms)",
                    MIN_SPREAD_US / 1000
                )
            };
            return Lumps {
                ok: true,
                short: "lumps not judged".into(),
                observed: format!("lumps not judged: {why}"),
                detail: format!("whether they came in pieces was not judged: {why}"),
            };
        }
        let lumped = d.lumped_total();
        let share = lumped as f64 / judged as f64;
        let kinds: Vec<String> = Lump::ALL
            .into_iter()
            .filter(|&k| d.of(k) > 0)
            .map(|k| format!("{} {}", count(d.of(k)), noun(k)))
            .collect();
        let how = if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        Lumps {
            ok: share <= max_share,
            short: format!("{} of {} lumped", count(lumped), count(judged)),
            observed: format!(
                "{} of the {} sent in pieces lumped{how}",
                count(lumped),
                plural(judged, "stream", "streams"),
            ),
            detail: format!(
                "{} of the {} the provider sent in pieces arrived in a lump{how}, {} (at most {} allowed)",
                count(lumped),
                plural(judged, "stream", "streams"),
                percent(share),
                percent(max_share)
            ),
        }
    }
}

/// How a kind of lump reads in a list.
fn noun(k: Lump) -> &'static str {
    match k {
        Lump::AfterLastToken => "after the provider's last token",
        Lump::AskedWhole => "asked of the provider whole",
        Lump::FewReads => "in one or two reads",
        Lump::Burst => "in back-to-back reads",
    }
}

/// The detail of a failure: what was held back, then what to fix.
fn failed(d: &Deliveries, p50: f64, p99: f64, bound: f64, added_ok: bool, lumps: &Lumps) -> String {
    let what = format!(
        "the gateway added {} ms to the first token at the 99th percentile (median {} ms; bound {} ms), and {}",
        ms(p99),
        ms(p50),
        ms(bound),
        lumps.detail
    );
    let mut fixes = Vec::new();
    if !added_ok || d.of(Lump::AfterLastToken) > 0 {
        fixes.push(
            "something between the provider and the client reads the whole answer before sending it (a proxy that awaits the upstream body): relay each event as the provider sends it",
        );
    }
    if d.of(Lump::AskedWhole) > 0 {
        fixes.push(
            "the gateway asked the provider for whole answers and replayed them as streams: pass `stream` on and relay the provider's events",
        );
    }
    if d.of(Lump::FewReads) + d.of(Lump::Burst) > 0 {
        fixes.push(
            "a buffer in front of the SSE stream holds events back: flush each event as it comes (no response buffering or compression on text/event-stream)",
        );
    }
    format!("{what}: {}", fixes.join("; "))
}

#[cfg(test)]
mod tests {
    use wire::{ClientOutcome, ProviderRecord};

    use crate::stories::{at, attempt, call, expect, Story};
    use crate::{judge, Judgement, Status, Thresholds, Verdict};

    /// How the gateway in front of a streaming provider hands on each
    /// answer: the client's first body byte, its end, its body's reads and
    /// their longest gap, all from the provider's head (at 300 ms), which
    /// sends 40 tokens 50 ms apart.
    type Relay = fn(usize) -> (u64, u64, Option<(u32, u64)>);

    /// Twenty streamed answers, one a second, through `relay`.
    fn through(relay: Relay) -> Story {
        let (mut attempts, mut calls) = (Vec::new(), Vec::new());
        for person in 0..20usize {
            let id = format!("s{person:05}");
            let ms = person as u64 * 1000;
            let head = ms + 300;
            let last = head + 39 * 50;
            let (first, done, reads) = relay(person);
            let mut a = attempt(&id, 1, ms, head + done, ClientOutcome::Ok, None);
            a.stream = true;
            a.first_byte_us = Some(at(head + first));
            a.body_reads = reads.map(|r| r.0);
            a.longest_gap_us = reads.map(|r| r.1);
            attempts.push(a);
            let mut c = call(&id, ms + 1, ms + 1, last);
            c.stream = true;
            c.first_byte_us = Some(at(head));
            c.completion_tokens = 40;
            calls.push(c);
        }
        Story {
            attempts,
            calls,
            rss: Vec::new(),
            expect: expect(None, 20_000, 30.0),
        }
    }

    fn verdict(s: &Story) -> Verdict {
        let j: Judgement = judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        // The one pass and the oracle judge every stream alike.
        let oracle = crate::oracle::judge(
            &s.attempts,
            &s.calls,
            &s.rss,
            &s.expect,
            &Thresholds::default(),
        );
        let v = j.verdict("stream_intact").expect("judged").clone();
        assert_eq!(Some(&v), oracle.verdict("stream_intact"));
        v
    }

    /// Relayed as made: the first byte 1 ms after the head (10 ms for one
    /// in twenty), a read per token, 50 ms apart at most.
    fn relayed(person: usize) -> (u64, u64, Option<(u32, u64)>) {
        let first = if person == 7 { 10 } else { 1 };
        (first, 39 * 50 + 2, Some((41, 52_000)))
    }

    #[test]
    fn a_relayed_stream_passes() {
        let v = verdict(&through(relayed));
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(
            v.short,
            "first token +10 ms p99 (bound 110 ms); 0 of 20 lumped"
        );
        assert_eq!(
            v.detail,
            "the 20 streamed answers reached the client as they were made: the gateway added 1 ms to the first token at the median and 10 ms at the 99th percentile (bound 110 ms); 0 of the 20 streams the provider sent in pieces arrived in a lump, 0% (at most 1% allowed)"
        );
        let f = v.figure.expect("a figure");
        // The histogram's three significant figures.
        assert!((f.value - 10.0).abs() < 0.01, "{f:?}");
        assert_eq!(f.unit, "ms");
        assert_eq!(f.worse, crate::Worse::Higher);
    }

    #[test]
    fn a_stream_buffered_whole_fails_with_the_time_added() {
        // Read whole (the last token at 1,950 ms after the head), then
        // sent: 2 s added, three 4 KiB reads back to back.
        let v = verdict(&through(|_| (1_960, 1_961, Some((3, 150)))));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.short,
            "first token +1,960 ms p99 (bound 110 ms); 20 of 20 lumped"
        );
        assert!(
            v.detail.starts_with(
                "the gateway added 1,960 ms to the first token at the 99th percentile (median 1,960 ms; bound 110 ms), and 20 of the 20 streams the provider sent in pieces arrived in a lump (20 after the provider's last token), 100%"
            ),
            "{}",
            v.detail
        );
        assert!(
            v.detail
                .contains("reads the whole answer before sending it"),
            "{}",
            v.detail
        );
        let p99 = v.figure.map_or(0.0, |f| f.value);
        assert!((p99 - 1_960.0).abs() < 2.0, "{p99}");
        // An older run, without body_reads: the time added still fails it.
        let v = verdict(&through(|_| (1_960, 1_961, None)));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.short,
            "first token +1,960 ms p99 (bound 110 ms); lumps not judged"
        );
        assert!(v.detail.contains("no body_reads"), "{}", v.detail);
    }

    #[test]
    fn headers_at_once_but_the_body_buffered_fails_on_lumps() {
        // The head went out at once (no body byte: the client's first byte
        // is the first body byte), the body buffered to the end.
        let v = verdict(&through(|_| (1_955, 1_956, Some((2, 900)))));
        assert_eq!(v.status, Status::Fail);
        assert!(v.short.ends_with("20 of 20 lumped"), "{}", v.short);
        // The first event at once, then the rest held to the end: on time
        // for the first token, and lumped.
        let v = verdict(&through(|_| (1, 1_955, Some((2, 1_954_000)))));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.short,
            "first token +1 ms p99 (bound 110 ms); 20 of 20 lumped"
        );
        assert!(
            v.detail.contains("(20 in one or two reads)")
                && v.detail.contains("a buffer in front of the SSE stream")
                && !v.detail.contains("reads the whole answer"),
            "{}",
            v.detail
        );
        // Held until 1.8 s, then out in 12 reads back to back.
        let v = verdict(&through(|_| (1_800, 1_952, Some((12, 2_000)))));
        assert_eq!(v.status, Status::Fail);
        assert!(v.detail.contains("in back-to-back reads"), "{}", v.detail);
    }

    /// At `--time-scale 30` the 100 ms are 3.3: a relay's own 10 ms at
    /// p99 passes by the machine's margin, which is not scaled.
    #[test]
    fn the_bound_is_scaled_but_the_machines_margin_is_not() {
        let s = through(relayed);
        let scaled = Thresholds::default().scaled(wire::Scale {
            time: 30.0,
            quota: 1.0,
        });
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &scaled);
        let v = j.verdict("stream_intact").unwrap();
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert_eq!(
            v.short,
            "first token +10 ms p99 (bound 13.3 ms); 0 of 20 lumped"
        );
        assert!(
            v.predicted.contains("at most 13.3 ms to the first token at the 99th percentile (3.3 ms and 10 ms for the machine)"),
            "{}",
            v.predicted
        );
        let mut no_margin = scaled;
        no_margin.stream_intact.margin = std::time::Duration::ZERO;
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &no_margin);
        assert_eq!(j.verdict("stream_intact").unwrap().status, Status::Fail);
    }

    #[test]
    fn one_lump_in_a_hundred_is_allowed() {
        let lumped_once: Relay = |p| {
            if p == 3 {
                (1, 1_955, Some((1, 0)))
            } else {
                relayed(p)
            }
        };
        let mut s = through(lumped_once);
        // One lump in 20 is 5%: too many.
        assert_eq!(verdict(&s).status, Status::Fail);
        let mut t = Thresholds::default();
        t.stream_intact.max_lumped_share = 0.05;
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.verdict("stream_intact").unwrap().status, Status::Pass);
        // Nothing sent in pieces: lumps not judged, said so.
        for c in &mut s.calls {
            c.completion_tokens = 3;
        }
        let v = verdict(&s);
        assert_eq!(v.status, Status::Pass);
        assert!(
            v.detail.contains("no stream was sent in pieces"),
            "{}",
            v.detail
        );
    }

    #[test]
    fn without_streams_it_is_skipped_and_says_why() {
        let v = verdict(&crate::stories::bounded());
        assert_eq!(v.status, Status::Skipped);
        assert!(v.detail.starts_with("no streamed answers"), "{}", v.detail);
        assert_eq!(v.figure, None);
        // Streamed answers, but the provider's side never seen.
        let mut s = through(relayed);
        s.calls.clear();
        let v = verdict(&s);
        assert_eq!(v.status, Status::Skipped);
        assert!(
            v.detail
                .starts_with("no data: none of the 20 streamed answers joined"),
            "{}",
            v.detail
        );
        // Turned off.
        let mut t = Thresholds::default();
        t.stream_intact.enabled = false;
        let s = through(relayed);
        let j = judge(&s.attempts, &s.calls, &s.rss, &s.expect, &t);
        assert_eq!(j.verdict("stream_intact").unwrap().status, Status::Off);
    }

    #[test]
    fn the_first_call_that_answered_decides() {
        // A call cut mid-stream, then one that answered: judged once,
        // against the second.
        let mut s = through(relayed);
        let mut cut: ProviderRecord = s.calls[4].clone();
        cut.outcome = wire::ProviderOutcome::StreamCut;
        cut.received_us -= 500;
        cut.finished_us = Some(cut.received_us + 100_000);
        s.calls.insert(4, cut);
        let mut again = s.calls[5].clone();
        again.received_us += 1;
        again.first_byte_us = again.first_byte_us.map(|t| t - 250_000);
        s.calls.push(again);
        let v = verdict(&s);
        assert_eq!(
            v.short,
            "first token +10 ms p99 (bound 110 ms); 0 of 20 lumped"
        );
    }
}
