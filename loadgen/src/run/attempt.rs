//! One attempt of a person: its request written whole, sent on a
//! connection of the pool (or after a wait in the client for one), its
//! answer read as it comes (an answer's tokens, a refusal's code), and its
//! record.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::{debug, warn};
use wire::headers::REQUEST_ID;
use wire::{ClientOutcome, ClientRecord};

use super::Shared;
use crate::http1::{BodyPace, BoundWait, HttpError};
use crate::request::{json, AnswerReader, Drawn};

/// What every attempt of one person sends alike: the request id, the
/// tenant (`None`: the plan's own key) and the request drawn for the
/// person. Passed by value (32 bytes, as the tuple it replaced).
#[derive(Clone, Copy)]
pub(super) struct PersonRequest<'a> {
    pub(super) id: &'a str,
    pub(super) tenant: Option<u16>,
    pub(super) drawn: &'a Drawn,
}

/// What is known of an attempt so far; read back after a hang-up.
#[derive(Default)]
struct Seen {
    status: Option<u16>,
    /// How the body arrived: its first byte, and for a stream how many
    /// reads brought it and the longest gap between two.
    body: BodyPace,
    retry_after: Option<Duration>,
    /// The header `retry_after` was read from (a field of its own: one
    /// byte in the struct's padding, where a pair would add eight).
    retry_after_header: Option<wire::RetryAfterHeader>,
    /// A wait at the load generator's own bound for a connection.
    wait: BoundWait,
}

/// The wait in the client for a connection of an attempt handed on at
/// `began` (its sent time: the load generator's lateness ends there), and
/// what it makes of the attempt. One that got a connection waited
/// `client_wait_us`: in its latency, not in its send lag nor in the
/// gateway's queue. One that got none within its patience was never
/// sent: a connect error, its reason [`crate::NOT_SENT_AT_BOUND`] (the
/// load generator's own bound) or [`crate::NOT_SENT_IN_CLIENT`] (the
/// callers' pool or connect rate), its wait all the time to its end.
/// Gives the wait, the outcome and the reason.
fn in_the_client(
    shared: &Shared,
    wait: BoundWait,
    (began, done): (Instant, Instant),
    outcome: ClientOutcome,
    reason: Option<String>,
) -> (u64, ClientOutcome, Option<String>) {
    if !wait.never_got() && wait.waited_us().is_none() {
        return (0, outcome, reason);
    }
    shared.bound_waits.fetch_add(1, Ordering::Relaxed);
    let at_own_bound = shared.connector.limits() == (true, false);
    if at_own_bound {
        shared.own_bound_waits.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(us) = wait.waited_us() {
        return (us, outcome, reason);
    }
    let waited = done.saturating_duration_since(began).as_micros() as u64;
    if outcome != ClientOutcome::Timeout {
        // Stopped (cancelled) while waiting: not sent either.
        return (waited, outcome, reason);
    }
    shared.not_sent.fetch_add(1, Ordering::Relaxed);
    let limit = shared.connector.limit();
    let reason = match at_own_bound {
        true => format!("{}: {limit} open", crate::NOT_SENT_AT_BOUND),
        false => format!("{}: {limit} open", crate::NOT_SENT_IN_CLIENT),
    };
    (waited, ClientOutcome::ConnectError, Some(reason))
}

/// Where a response body goes: the dialect's reader for an answer, a
/// bounded buffer for a refusal (read for its error code when the
/// `x-gateway-reason` header gave no reason). One or the other: the state
/// of a waiting request grows by neither.
pub(super) enum Sink {
    Answer(AnswerReader),
    Refusal {
        reason: Option<String>,
        body: Vec<u8>,
    },
}

impl Sink {
    fn feed(&mut self, data: &[u8]) {
        match self {
            Sink::Answer(r) => r.feed(data),
            Sink::Refusal { body, .. } => {
                let room = REFUSAL_BODY_MAX.saturating_sub(body.len());
                body.extend_from_slice(&data[..data.len().min(room)]);
            }
        }
    }
}

/// The most of a refusal's body kept to read its error code.
const REFUSAL_BODY_MAX: usize = 4096;

/// The error `code` of a JSON error body (`{"error": {"code": ...}}`), if
/// it is a string.
fn body_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("error")?.get("code")?.as_str().map(str::to_owned)
}

/// One attempt's request, whole: the tenant's head prefix, the request
/// id, the patience left (as it is written), the body's length, then the
/// body; in one buffer, made as it is written and dropped after.
fn request_bytes(
    shared: &Shared,
    req: PersonRequest<'_>,
    attempt: u32,
    give_up: Instant,
) -> Vec<u8> {
    let PersonRequest { id, tenant, drawn } = req;
    let head = &shared.heads[tenant.map_or(0, |t| usize::from(t) + 1)];
    let shape = shared.plan.shape(tenant);
    let body_len = shape.body_len(id, drawn);
    let mut out =
        Vec::with_capacity(head.prefix.len() + 128 + id.len() + head.pieces_len(id) + body_len);
    out.extend_from_slice(&head.prefix);
    out.extend_from_slice(REQUEST_ID.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\r\n");
    head.put_pieces(&mut out, id, attempt);
    if let Some(name) = &shared.plan.patience_header {
        let left = give_up
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        json::push_u64(&mut out, left);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    json::push_u64(&mut out, body_len as u64);
    out.extend_from_slice(b"\r\n\r\n");
    shape.put_body(&mut out, id, drawn);
    out
}

pub(super) async fn attempt_once(
    shared: &Shared,
    req: PersonRequest<'_>,
    attempt: u32,
    intended: Instant,
    give_up: Instant,
) -> ClientRecord {
    let PersonRequest {
        id: _,
        tenant,
        drawn: _,
    } = req;
    let sent = Instant::now();
    // Come to only after the person gave up (the load generator fell
    // behind by more than the patience): not sent. Sending it would hang
    // up at once, cost the target a call for a caller gone and the load
    // generator a connection, and so slow its catching up.
    let late = sent >= give_up;
    if !late {
        shared.live.sent.fetch_add(1, Ordering::Relaxed);
        shared.live.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    let mut seen = Seen::default();
    let api = shared.plan.shape(tenant).api;
    let clock = shared.clock;
    let exchange = async {
        let resp = match shared
            .connector
            .send(
                || request_bytes(shared, req, attempt, give_up),
                &mut seen.wait,
            )
            .await
        {
            Ok(r) => r,
            Err(HttpError::Connect(e)) => {
                if !shared.connect_warned.swap(true, Ordering::Relaxed) {
                    warn!(cause = %e, "cannot connect to the target; later connect errors are only counted");
                }
                // The cause is kept (in the record's `reason`): "too many
                // open files" is the load generator's own limit, which
                // makes a run invalid, where a refused connect is the
                // target's doing.
                return (ClientOutcome::ConnectError, 0, Some(e.to_string()));
            }
            Err(HttpError::Protocol(e)) => {
                // An answer, but not HTTP: the target is broken, not gone.
                debug!(cause = %e, "not an HTTP answer");
                return (ClientOutcome::Malformed, 0, None);
            }
            Err(e) => {
                debug!(cause = %e, "request failed");
                return (ClientOutcome::Reset, 0, None);
            }
        };
        let status = resp.status;
        seen.status = Some(status);
        let headers = &resp.headers;
        if headers.retry_after_ms.is_some() || headers.retry_after.is_some() {
            let read = wire::read_retry_after(
                headers.retry_after_ms.as_deref(),
                headers.retry_after.as_deref(),
                clock.system_time(Instant::now()),
            );
            seen.retry_after = read.map(|(wait, _)| wait);
            seen.retry_after_header = read.map(|(_, header)| header);
        }
        let success = (200..300).contains(&status);
        // An answer is read by the dialect's reader; a refusal's first
        // bytes are kept for its error code. One or the other, never both.
        let mut sink = if success {
            Sink::Answer(AnswerReader::new(api, resp.headers.event_stream))
        } else {
            Sink::Refusal {
                reason: resp.headers.gateway_reason.clone(),
                body: Vec::new(),
            }
        };
        let cap = shared.plan.max_answer_bytes;
        let read = resp
            .read_body(&mut seen.body, cap, |data| sink.feed(data))
            .await;
        match read {
            Ok(()) => {}
            Err(HttpError::Oversized(cap)) => {
                // A kind of malformed answer: the reason says which, and
                // the checklist counts it with every malformed one.
                debug!(cap, "answer past max_answer_bytes");
                let reason = Some(crate::OVERSIZED.to_owned());
                return (ClientOutcome::Malformed, 0, reason);
            }
            Err(HttpError::Protocol(e)) if success => {
                debug!(cause = %e, "bad body framing");
                return (ClientOutcome::Malformed, 0, None);
            }
            Err(e) => {
                debug!(cause = %e, "body broke");
                return (ClientOutcome::Reset, 0, None);
            }
        }
        match sink {
            Sink::Answer(r) => match r.finish() {
                Some(tokens) => (ClientOutcome::Ok, tokens, None),
                None => (ClientOutcome::Malformed, 0, None),
            },
            Sink::Refusal { reason, body } => {
                let reason = reason.or_else(|| body_code(&body));
                (ClientOutcome::refused(status, reason.as_deref()), 0, reason)
            }
        }
    };
    // Dropping the exchange at the deadline drops its connection: the
    // client hangs up, as a person who gave up does.
    let (outcome, tokens, reason): (ClientOutcome, u64, Option<String>) = if late {
        drop(exchange);
        let not_sent = Some(crate::NOT_SENT_LATE.to_owned());
        (ClientOutcome::ConnectError, 0, not_sent)
    } else {
        tokio::select! {
            r = tokio::time::timeout_at(give_up.into(), exchange) => match r {
                Ok(r) => r,
                Err(_) => (ClientOutcome::Timeout, 0, None),
            },
            // Boxed: 8 bytes in every waiting person's state instead of the
            // cancellation future itself.
            () = Box::pin(shared.hard_stop.cancelled()) => (ClientOutcome::Cancelled, 0, None),
        }
    };
    let done = Instant::now();
    if !late {
        shared.live.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
    let times = (intended, sent, done);
    attempt_record(
        shared,
        req,
        attempt,
        times,
        late,
        &seen,
        (outcome, tokens, reason),
    )
}

/// The record of an attempt that ended at `done`: begun at `sent`, not
/// sent at all if `late`, else sent when it got its connection. Inlined:
/// out of line, a request cost a few hundred instructions more (the record
/// made, then copied out; callgrind at 1,000/s: 26,800-28,000 against
/// 25,600-26,500).
#[inline(always)]
fn attempt_record(
    shared: &Shared,
    req: PersonRequest<'_>,
    attempt: u32,
    (intended, sent, done): (Instant, Instant, Instant),
    late: bool,
    seen: &Seen,
    (outcome, tokens, reason): (ClientOutcome, u64, Option<String>),
) -> ClientRecord {
    let PersonRequest { id, tenant, drawn } = req;
    let (sent, client_wait_us, outcome, reason) = match late {
        true => {
            shared.not_sent_late.fetch_add(1, Ordering::Relaxed);
            (done, 0, outcome, reason)
        }
        false => {
            let (waited, outcome, reason) =
                in_the_client(shared, seen.wait, (sent, done), outcome, reason);
            (sent, waited, outcome, reason)
        }
    };
    let clock = shared.clock;
    let streamed_body = drawn.stream && seen.body.reads() > 0;
    ClientRecord {
        id: id.to_string(),
        attempt,
        intended_us: clock.us_at(intended),
        sent_us: clock.us_at(sent),
        client_wait_us,
        first_byte_us: seen.body.first().map(|t| clock.us_at(t)),
        done_us: clock.us_at(done),
        status: seen.status,
        outcome,
        retry_after_ms: seen.retry_after.map(|d| d.as_millis() as u64),
        retry_after_header: seen.retry_after_header,
        tokens,
        stream: drawn.stream,
        last: true,
        patience_ms: 0,
        reason,
        tenant: tenant
            .and_then(|t| shared.plan.tenants.get(usize::from(t)))
            .map(|t| t.name.clone()),
        // Said of streams only (how an answer not streamed arrives says
        // nothing of a relay), and only when a body came.
        body_reads: streamed_body.then_some(seen.body.reads()),
        longest_gap_us: streamed_body.then_some(seen.body.longest_gap_us()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_body_gives_its_error_code() {
        let code = |b: &[u8]| body_code(b);
        assert_eq!(
            code(br#"{"error":{"message":"m","type":"t","code":"wait_expired"}}"#).as_deref(),
            Some("wait_expired")
        );
        assert_eq!(code(br#"{"error":{"code":null}}"#), None);
        assert_eq!(
            code(b"<html>503 Service Temporarily Unavailable</html>"),
            None
        );
        let mut sink = Sink::Refusal {
            reason: None,
            body: Vec::new(),
        };
        sink.feed(&vec![b'x'; REFUSAL_BODY_MAX + 100]);
        sink.feed(b"more");
        match sink {
            Sink::Refusal { body, .. } => assert_eq!(body.len(), REFUSAL_BODY_MAX),
            Sink::Answer(_) => unreachable!(),
        }
    }
}
