//! One provider call's life: read, quota, the ceiling, the draws of its
//! fault, pace and length, then the answer (whole, or handed to the
//! token stream).

use std::ops::ControlFlow::{self, Break, Continue};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wire::headers::{ANTHROPIC_REQUEST_ID, REQUEST_ID, RETRY_AFTER, RETRY_AFTER_MS};
use wire::{
    go_duration, ratelimit_headers, retry_after_values, Api, Clock, Dialect, ProviderOutcome,
    ProviderRecord, QuotaLimit, QuotaRefusal, QuotaSnapshot,
};

use crate::ceiling::Admission;
use crate::config::{Effective, Overflow};
use crate::dialect::{Answer, BadRequest, Finish, ProviderDialect, Request as CallRequest};
use crate::run::Run;
use crate::shared::{full, json_response, lock, read_body, respond, Body, Shared};
// Scripted delays use the provider's own sub-millisecond timer, not
// tokio's millisecond wheel.
use super::guard::{empty_record, request_id, CallGuard};
use super::stream::TokenStream;
use crate::timer::sleep_until;

/// An error that makes hyper drop the connection; with SO_LINGER 0 set just
/// before, the peer sees a reset.
#[derive(Debug, thiserror::Error)]
#[error("connection reset by fault injection")]
pub(super) struct ResetConnection;

pub(super) type RouteResult = Result<Response<Body>, ResetConnection>;

pub(super) fn simple_error(dialect: Dialect, status: StatusCode, message: &str) -> Response<Body> {
    json_response(
        status,
        dialect.error_body(status.as_u16(), message, None, None),
    )
}

/// The response headers of a call: rate limits, request id.
pub(super) fn call_headers(
    dialect: Dialect,
    id: &str,
    snap: Option<QuotaSnapshot>,
    clock: &Clock,
) -> HeaderMap {
    // Made once: `HeaderName::from_static` checks its name each call.
    static OPENAI_ID: HeaderName = HeaderName::from_static(REQUEST_ID);
    static ANTHROPIC_ID: HeaderName = HeaderName::from_static(ANTHROPIC_REQUEST_ID);
    let mut h = HeaderMap::new();
    let mut put = |name: &HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name.clone(), v);
        }
    };
    match dialect {
        Dialect::OpenAi => put(&OPENAI_ID, id),
        Dialect::Anthropic => put(&ANTHROPIC_ID, id),
    }
    if let Some(snap) = snap {
        for (name, value) in ratelimit_headers(dialect, &snap, clock.now_us()) {
            put(&HeaderName::from_static(name), &value);
        }
    }
    h
}

/// The fault drawn for one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Fault {
    None,
    Status(u16),
    Reset,
    Hang,
    StreamCut,
    Malformed,
}

pub(super) fn draw_fault(eff: &Effective, u: f64) -> Fault {
    let mut acc = 0.0;
    for (status, rate) in &eff.faults.errors {
        acc += rate;
        if u < acc {
            return Fault::Status(status.parse().unwrap_or(500));
        }
    }
    for (fault, rate) in [
        (Fault::Reset, eff.faults.reset),
        (Fault::Hang, eff.faults.hang),
        (Fault::StreamCut, eff.faults.stream_cut),
        (Fault::Malformed, eff.faults.malformed),
    ] {
        acc += rate;
        if u < acc {
            return fault;
        }
    }
    Fault::None
}

/// The draws of [`CallGuard::draw`] from the call's random stream
/// (`stream`: the provider's seed and the call's sequence number), with
/// `in_service` calls in service.
pub(super) fn draw_for(
    eff: &Effective,
    stream: (u64, u64),
    in_service: u32,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Draw {
    let mut rng = CallRng::new(stream);
    let f = &eff.faults;
    let no_fault = f.errors.values().all(|r| *r <= 0.0)
        && [f.reset, f.hang, f.stream_cut, f.malformed]
            .iter()
            .all(|r| *r <= 0.0);
    // With every rate 0 the fault is none whatever is drawn: its draw is
    // only skipped over, if a later draw needs the stream at all.
    let fault = if no_fault {
        rng.skip_f64();
        Fault::None
    } else {
        draw_fault(eff, rng.gen::<f64>())
    };
    let m = eff.latency.multiplier
        * crate::curve::load_factor(in_service, eff.latency.knee, eff.latency.knee_exponent);
    // Reading the prompt comes before the first token; no draw, so the
    // seeded draws stay those of a provider without it.
    let prefill = eff.latency.prefill_per_token.0 * prompt_tokens;
    let ttft = (eff.latency.ttft.sample(&mut rng) + prefill).mul_f64(m);
    let per_token = eff.latency.per_token.sample(&mut rng).mul_f64(m);
    let n = eff.completion_tokens.sample(&mut rng).min(max_tokens);
    let finish = if n >= max_tokens {
        Finish::Length
    } else {
        Finish::Stop
    };
    Draw {
        fault,
        ttft,
        per_token,
        n,
        finish,
    }
}

/// A call's random stream, made on its first draw: a call whose faults
/// are off and whose distributions are fixed draws nothing, and seeding a
/// ChaCha8 costs more than the rest of its draws. The values are those
/// of the stream made at once (a test compares them).
pub(super) struct CallRng {
    pub(super) stream: (u64, u64),
    /// A fault's draw skipped over: taken first when the stream is made.
    pub(super) skipped: bool,
    pub(super) rng: Option<ChaCha8Rng>,
}

impl CallRng {
    pub(super) fn new(stream: (u64, u64)) -> CallRng {
        CallRng {
            stream,
            skipped: false,
            rng: None,
        }
    }

    /// Passes over one `f64` draw without making the stream for it.
    pub(super) fn skip_f64(&mut self) {
        match &mut self.rng {
            Some(rng) => {
                let _: f64 = rng.gen();
            }
            None => self.skipped = true,
        }
    }

    pub(super) fn rng(&mut self) -> &mut ChaCha8Rng {
        let (seed, seq) = self.stream;
        let skipped = self.skipped;
        self.rng.get_or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(seq);
            if skipped {
                let _: f64 = rng.gen();
            }
            rng
        })
    }
}

impl rand::RngCore for CallRng {
    fn next_u32(&mut self) -> u32 {
        self.rng().next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.rng().next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.rng().fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.rng().try_fill_bytes(dest)
    }
}

/// A step of a call's life: go on with `T`, or end the call here with this
/// response. Not a `Result`: a refusal is an answer, not an error (and a
/// response is too big to be a `Result`'s error unboxed).
pub(super) type Step<T> = ControlFlow<Response<Body>, T>;

/// What is drawn for a call when it is admitted: its fault, its pace and
/// its length.
#[derive(Debug, PartialEq)]
pub(super) struct Draw {
    pub(super) fault: Fault,
    pub(super) ttft: Duration,
    pub(super) per_token: Duration,
    /// Completion tokens.
    pub(super) n: u32,
    pub(super) finish: Finish,
}

/// One provider call's life: read the request, take quota at arrival, wait
/// for a place under the concurrency ceiling, draw a fault and a pace, then
/// answer whole or as a stream. A step that ends the call early writes its
/// record ([`CallGuard::finish`]) and gives back the response to send; a
/// call whose task is dropped first (the caller hung up) has its record
/// written by the guard's `Drop`.
///
/// This is the hot path. Only the steps that wait (the ceiling's queue, a
/// hang) are async, the pacing sleeps are here, and what is done with
/// (the request's headers and body, the settings at arrival) is dropped
/// early: the future every held call keeps stays small.
pub(super) async fn call(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    api: Api,
    deployment: Option<String>,
    fd: RawFd,
) -> RouteResult {
    let dialect = api.dialect();
    let run = shared.run();
    let limit = run.config.max_body_bytes;
    // Boxed: the body read is over before the call's long wait begins, so
    // its state need not make every held call's future bigger.
    let (req_headers, body) =
        match Box::pin(read_body(req, limit, run.config.body_read_timeout)).await {
            Ok(x) => x,
            Err((status, msg)) => return Ok(simple_error(dialect, status, &msg)),
        };
    let default_max_tokens = run.config.default_max_tokens;
    let (mut g, eff) = CallGuard::open(&shared, run, api, &req_headers, &body);
    drop(req_headers);
    let parsed = g.parse(&body);
    if shared.down.hanging() {
        // A hung worker reads the request and answers nothing.
        drop((parsed, body));
        return Ok(g.hang().await);
    }
    let (mut parsed, inputs) = match parsed {
        Ok(p) => p,
        Err(bad) => return Ok(g.bad_request(bad)),
    };
    drop(body);
    if let Some(d) = deployment {
        // Azure's model is the deployment the path names.
        g.record.model.clone_from(&d);
        parsed.model = d;
    }
    // An embedding has no completion: its quota is its input alone.
    let max_tokens = match api {
        Api::Embeddings => 0,
        _ => parsed.max_tokens.unwrap_or(default_max_tokens),
    };
    let snap = match g.take_quota(&eff, &parsed, max_tokens) {
        Continue(snap) => snap,
        Break(refused) => return Ok(refused),
    };
    let admitted = match g.admit(&eff, snap.as_ref()).await {
        Continue(at) => at,
        Break(refused) => return Ok(refused),
    };
    drop(eff); // The draw reads the settings in force at admission.
    let draw = g.draw(admitted, max_tokens);
    let headers = call_headers(dialect, &g.record.id, snap, &shared.clock);

    match draw.fault {
        Fault::None | Fault::StreamCut | Fault::Malformed => {}
        Fault::Status(status) => return Ok(g.error_status(status, headers)),
        Fault::Reset => return Err(g.reset(fd)),
        Fault::Hang => return Ok(g.hang().await),
    }

    let answer = g.answer(parsed.model, parsed.prompt_tokens, &draw, admitted);
    let first_at = admitted + draw.ttft;
    // At zero latency a deadline is the instant of admission: no sleep
    // (and no clock read to find it past).
    if !parsed.stream {
        let done_at = first_at + draw.per_token * draw.n;
        if done_at > admitted {
            sleep_until(done_at).await;
        }
        return Ok(g.whole_answer(&answer, inputs, draw.fault, headers));
    }
    if first_at > admitted {
        sleep_until(first_at).await;
    }
    Ok(g.streamed_answer(answer, &draw, first_at, parsed.include_usage, headers))
}

/// The steps of [`call`], in the order a call goes through them.
impl CallGuard {
    /// Counts the call in and starts its record, under the settings in
    /// force at arrival (also returned: quota and the ceiling use them).
    pub(super) fn open(
        shared: &Arc<Shared>,
        run: Arc<Run>,
        api: Api,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (CallGuard, Arc<Effective>) {
        let received = Instant::now();
        let seq = run.seq.fetch_add(1, Ordering::Relaxed);
        run.counters.received.fetch_add(1, Ordering::Relaxed);
        shared.gauges.in_flight.fetch_add(1, Ordering::Relaxed);
        let id = request_id(headers, body, seq);
        let (eff, label) = shared.effective_at(received);
        let g = CallGuard {
            shared: shared.clone(),
            record: ProviderRecord {
                id,
                seq,
                dialect: api.dialect(),
                api,
                received_us: shared.clock.us_at(received),
                phase: label.to_string(),
                ..empty_record()
            },
            received,
            run,
            permit: None,
            queued: false,
            done: false,
            cut_epoch: shared.down.epoch(),
            model_slot: usize::MAX,
        };
        (g, eff)
    }

    /// Reads what the provider needs from the body into the record; a body
    /// the dialect refuses is its [`BadRequest`] (answered by
    /// [`CallGuard::bad_request`] unless a down phase holds the call).
    pub(super) fn parse(&mut self, body: &[u8]) -> Result<(CallRequest, u32), BadRequest> {
        let dialect = self.record.dialect;
        let read = match self.record.api {
            Api::Chat | Api::Messages => dialect.parse(body).map(|p| (p, 1)),
            Api::Responses => crate::api::parse_responses(body).map(|p| (p, 1)),
            Api::Embeddings => crate::api::parse_embeddings(body),
        };
        let (parsed, inputs) = read?;
        self.record.model = parsed.model.clone();
        self.record.stream = parsed.stream;
        self.record.prompt_tokens = parsed.prompt_tokens;
        self.record.max_tokens = parsed.max_tokens;
        Ok((parsed, inputs))
    }

    /// A body the dialect refuses: a 400 naming the parameter.
    pub(super) fn bad_request(&mut self, bad: BadRequest) -> Response<Body> {
        let BadRequest { param, message } = bad;
        let dialect = self.record.dialect;
        self.finish(ProviderOutcome::BadRequest, 400);
        let mut h = call_headers(dialect, &self.record.id, None, &self.shared.clock);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = dialect.error_body(400, &message, param, None);
        respond(StatusCode::BAD_REQUEST, h, full(body), "application/json")
    }

    /// Quota, at arrival: a real provider answers 429 before any queueing.
    /// The prompt and the most the answer may take are reserved (the guard
    /// settles the reservation at the end). Gives the buckets' snapshot for
    /// the rate-limit headers, `None` when no limit is set.
    pub(super) fn take_quota(
        &mut self,
        eff: &Effective,
        parsed: &CallRequest,
        max_tokens: u32,
    ) -> Step<Option<QuotaSnapshot>> {
        let reserve = parsed.prompt_tokens as u64 + max_tokens as u64;
        let limits = &eff.quota;
        let secs = self.shared.clock.secs_at(self.received);
        let (res, snap) = {
            let mut q = lock(&self.run.quota);
            q.configure(limits.requests_per_minute, limits.tokens_per_minute, secs);
            let res = q.reserve(reserve, secs);
            (res, q.snapshot(secs))
        };
        if let Err(refusal) = res {
            // What the refusal's headers will say (quota_refusal sends
            // these same values).
            if let Some((secs, ms)) = refusal.retry_after.map(retry_after_values) {
                self.record.retry_after_s = Some(secs);
                self.record.retry_after_ms = Some(ms);
            }
            self.finish(ProviderOutcome::QuotaExceeded, 429);
            return Break(quota_refusal(
                self.record.dialect,
                &self.record.id,
                refusal,
                snap,
                &self.shared.clock,
                &parsed.model,
            ));
        }
        if limits.requests_per_minute.is_some() || limits.tokens_per_minute.is_some() {
            self.record.reserved_tokens = reserve;
        }
        let has_quota = snap.requests.is_some() || snap.tokens.is_some();
        Continue(has_quota.then_some(snap))
    }

    /// The concurrency ceiling: a place in service now, or after a wait in
    /// the provider's own queue, or an "overloaded" refusal. Gives the
    /// instant of admission, from which the answer is paced.
    pub(super) async fn admit(
        &mut self,
        eff: &Effective,
        snap: Option<&QuotaSnapshot>,
    ) -> Step<Instant> {
        let c = &eff.concurrency;
        let queue = c.overflow == Overflow::Queue;
        self.model_slot = self.run.counters.model_slot(&self.record.model);
        let permit = match self.shared.ceiling.admit(c.ceiling, queue, c.queue_limit) {
            Admission::Now(p) => p,
            Admission::Queued(rx) => {
                self.queued = true;
                self.shared.gauges.queued.fetch_add(1, Ordering::Relaxed);
                self.model().waiting.fetch_add(1, Ordering::Relaxed);
                let got = rx.await;
                self.queued = false;
                self.shared.gauges.queued.fetch_sub(1, Ordering::Relaxed);
                self.model().waiting.fetch_sub(1, Ordering::Relaxed);
                match got {
                    Ok(p) => p,
                    // The ceiling (and its queue) went away: shutdown.
                    Err(_) => {
                        self.finish(ProviderOutcome::CapacityRejected, 503);
                        return Break(simple_error(
                            self.record.dialect,
                            StatusCode::SERVICE_UNAVAILABLE,
                            "shutting down",
                        ));
                    }
                }
            }
            Admission::Rejected => return Break(self.overloaded(snap.copied())),
        };
        self.permit = Some(permit);
        self.model().running.fetch_add(1, Ordering::Relaxed);
        let admitted = Instant::now();
        self.record.admitted_us = Some(self.shared.clock.us_at(admitted));
        Continue(admitted)
    }

    /// No place under the ceiling and no room to queue: OpenAI's 429 or
    /// Anthropic's 529, each with its own words for "overloaded".
    pub(super) fn overloaded(&mut self, snap: Option<QuotaSnapshot>) -> Response<Body> {
        let dialect = self.record.dialect;
        let status = dialect.overloaded_status();
        self.finish(ProviderOutcome::CapacityRejected, status);
        let msg = match dialect {
            Dialect::OpenAi => {
                "The server is overloaded: too many concurrent requests. Please retry."
            }
            Dialect::Anthropic => "Overloaded",
        };
        let h = call_headers(dialect, &self.record.id, snap, &self.shared.clock);
        let body = dialect.error_body(status, msg, None, Some("overloaded"));
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        respond(status, h, full(body), "application/json")
    }

    /// Draws the call's fault, pace and length with the settings in force
    /// at admission: a phase change applies to calls admitted after it.
    /// The draws come from the call's own random stream (the provider's
    /// seed, the call's sequence number), so they do not depend on how
    /// other calls interleave.
    pub(super) fn draw(&mut self, admitted: Instant, max_tokens: u32) -> Draw {
        let (eff, label) = self.shared.effective_at(admitted);
        // The label at arrival is in the record already: copied again
        // only if a phase changed since.
        if self.record.phase != *label {
            self.record.phase.clear();
            self.record.phase.push_str(&label);
        }
        let in_service = self.shared.ceiling.in_service();
        let stream = (self.run.config.seed, self.record.seq);
        draw_for(
            &eff,
            stream,
            in_service,
            self.record.prompt_tokens,
            max_tokens,
        )
    }

    /// The fault of an error status: answered at once.
    pub(super) fn error_status(&mut self, status: u16, headers: HeaderMap) -> Response<Body> {
        self.record.first_byte_us = Some(self.shared.clock.now_us());
        self.finish(ProviderOutcome::ErrorStatus, status);
        let msg = match status {
            500 => "The server had an error while processing your request.",
            502 => "Bad gateway.",
            503 => "The service is temporarily unavailable.",
            _ => "Overloaded",
        };
        let body = self.record.dialect.error_body(status, msg, None, None);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        respond(status, headers, full(body), "application/json")
    }

    /// The fault of a reset: SO_LINGER 0 on the call's socket, then the
    /// error that makes hyper drop the connection, so the peer sees a RST.
    pub(super) fn reset(&mut self, fd: RawFd) -> ResetConnection {
        self.finish(ProviderOutcome::Reset, 0);
        // SAFETY: `fd` is the socket of the connection this very request
        // arrived on; hyper owns it and keeps it open while it polls this
        // service future, so it is a valid open descriptor here. We only
        // set an option on it and do not close it.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = socket2::SockRef::from(&borrowed).set_linger(Some(Duration::ZERO));
        ResetConnection
    }

    /// The fault of a hang: never answers. The guard's `Drop` records the
    /// hang-up when the caller gives up; shutdown ends it here.
    pub(super) async fn hang(&mut self) -> Response<Body> {
        self.record.outcome = ProviderOutcome::Hang;
        self.shared.shutdown.cancelled().await;
        self.finish(ProviderOutcome::Hang, 0);
        simple_error(
            self.record.dialect,
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down",
        )
    }

    /// The answer's identity and sizes; `model` is the caller's, echoed.
    /// `created` is the second of admission, when the answer began.
    pub(super) fn answer(
        &self,
        model: String,
        prompt_tokens: u32,
        draw: &Draw,
        admitted: Instant,
    ) -> Answer {
        let seq = self.record.seq;
        Answer {
            id: crate::api::answer_id(self.record.api, seq),
            model,
            created: self.shared.clock.us_at(admitted) / 1_000_000,
            prompt_tokens,
            completion_tokens: draw.n,
            finish: draw.finish,
        }
    }

    /// The whole answer, sent once it is all written (the caller has slept
    /// until then); a malformed fault sends half its JSON.
    pub(super) fn whole_answer(
        &mut self,
        answer: &Answer,
        inputs: u32,
        fault: Fault,
        headers: HeaderMap,
    ) -> Response<Body> {
        let now = self.shared.clock.now_us();
        self.record.first_byte_us = Some(now);
        self.record.finished_us = Some(now);
        self.record.completion_tokens = answer.completion_tokens;
        let mut body = match self.record.api {
            Api::Chat | Api::Messages => answer.body(self.record.dialect),
            Api::Responses => crate::api::responses_body(answer),
            Api::Embeddings => {
                crate::api::embeddings_body(&answer.model, answer.prompt_tokens, inputs)
            }
        };
        if fault == Fault::Malformed {
            self.finish(ProviderOutcome::Malformed, 200);
            body = body.slice(..body.len() / 2);
        } else {
            self.finish(ProviderOutcome::Ok, 200);
        }
        respond(StatusCode::OK, headers, full(body), "application/json")
    }

    /// The streamed answer, from its first byte (the caller has slept until
    /// `first_at`): the guard moves into a [`TokenStream`] that paces the
    /// tokens and finishes the call at its tail or its cut; dropped before
    /// (the caller hung up), the guard writes the record itself.
    /// A stream-cut or malformed fault strikes halfway.
    pub(super) fn streamed_answer(
        mut self,
        answer: Answer,
        draw: &Draw,
        first_at: Instant,
        include_usage: bool,
        headers: HeaderMap,
    ) -> Response<Body> {
        self.record.first_byte_us = Some(self.shared.clock.now_us());
        let half = draw.n / 2;
        let stream = TokenStream {
            dialect: self.record.dialect,
            api: self.record.api,
            guard: self,
            answer,
            include_usage,
            first_at,
            per_token: draw.per_token,
            next: 0,
            head_sent: false,
            cut_at: (draw.fault == Fault::StreamCut).then_some(half),
            malformed_at: (draw.fault == Fault::Malformed).then_some(half),
            cut_now: false,
            finished: false,
        };
        let body = StreamBody::new(futures_util::stream::unfold(stream, |mut s| async move {
            s.step().await.map(|item| (item.map(Frame::data), s))
        }));
        let mut resp = respond(
            StatusCode::OK,
            headers,
            BodyExt::boxed(body),
            "text/event-stream",
        );
        resp.headers_mut().insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        resp
    }
}

pub(super) fn quota_refusal(
    dialect: Dialect,
    id: &str,
    refusal: QuotaRefusal,
    snap: QuotaSnapshot,
    clock: &Clock,
    model: &str,
) -> Response<Body> {
    let mut h = call_headers(dialect, id, Some(snap), clock);
    let (what, short) = match refusal.limit {
        QuotaLimit::Requests => ("requests per min (RPM)", "requests"),
        QuotaLimit::Tokens => ("tokens per min (TPM)", "tokens"),
    };
    let message = match refusal.retry_after {
        Some(wait) => {
            let (secs, ms) = retry_after_values(wait);
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
            h.insert(RETRY_AFTER_MS, HeaderValue::from(ms));
            format!(
                "Rate limit reached for {model} on {what}: Limit {}, Requested {}. Please try again in {}.",
                refusal.limit_value,
                refusal.requested,
                go_duration(Duration::from_millis(ms))
            )
        }
        // What can never fit is what the bucket holds: the limit itself at
        // a one-minute window, one scenario minute of it in a rehearsal.
        None => format!(
            "Request too large for {model} on {what}: Limit {}, Requested {}. The request can never fit this limit.",
            refusal.capacity, refusal.requested
        ),
    };
    let body = dialect.error_body(429, &message, Some(short), Some("rate_limit_exceeded"));
    respond(
        StatusCode::TOO_MANY_REQUESTS,
        h,
        full(body),
        "application/json",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderConfig;

    /// [`draw_for`] as it was: the stream made at once, the fault drawn
    /// whatever its rates.
    fn eager_draw(
        eff: &Effective,
        (seed, seq): (u64, u64),
        in_service: u32,
        prompt_tokens: u32,
        max_tokens: u32,
    ) -> Draw {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(seq);
        let fault = draw_fault(eff, rng.gen::<f64>());
        let m = eff.latency.multiplier
            * crate::curve::load_factor(in_service, eff.latency.knee, eff.latency.knee_exponent);
        let prefill = eff.latency.prefill_per_token.0 * prompt_tokens;
        let ttft = (eff.latency.ttft.sample(&mut rng) + prefill).mul_f64(m);
        let per_token = eff.latency.per_token.sample(&mut rng).mul_f64(m);
        let n = eff.completion_tokens.sample(&mut rng).min(max_tokens);
        let finish = if n >= max_tokens {
            Finish::Length
        } else {
            Finish::Stop
        };
        Draw {
            fault,
            ttft,
            per_token,
            n,
            finish,
        }
    }

    #[test]
    fn the_lazy_stream_draws_what_the_eager_one_drew() {
        let configs = [
            "completion_tokens = { fixed = 16 }\n",
            "[latency]\nttft = { uniform = { min = \"10ms\", max = \"90ms\" } }\n",
            "completion_tokens = { lognormal = { median = 40, p99 = 400 } }\n",
            "[latency]\nper_token = { exponential = { mean = \"5ms\" } }\nknee = 2\n",
            "[latency]\nttft = { fixed = \"5ms\" }\n[faults]\nerrors = { \"500\" = 0.3 }\nhang = 0.1\n",
            "completion_tokens = { mix = [ { value = 0, weight = 3 }, { value = 40, weight = 1 } ] }\n[faults]\nmalformed = 0.5\n",
            "[faults]\nreset = 0.2\nstream_cut = 0.2\n",
        ];
        for toml in configs {
            let cfg = ProviderConfig::from_toml(&format!("seed = 7\n{toml}"), "t")
                .unwrap_or_else(|e| panic!("{toml}: {e}"));
            let eff = cfg.effective([], None);
            for seq in 0..200 {
                let (in_service, prompt, max) = (seq as u32 % 5, seq as u32 % 300, 32);
                assert_eq!(
                    draw_for(&eff, (7, seq), in_service, prompt, max),
                    eager_draw(&eff, (7, seq), in_service, prompt, max),
                    "{toml} seq {seq}"
                );
            }
        }
    }

    #[test]
    fn faults_are_drawn_by_cumulative_rate() {
        let cfg = ProviderConfig::from_toml(
            "[faults]\nerrors = { \"500\" = 0.1, \"503\" = 0.1 }\nreset = 0.1\nhang = 0.1\nstream_cut = 0.1\nmalformed = 0.1\n",
            "t",
        )
        .unwrap();
        let eff = cfg.effective([], None);
        assert_eq!(draw_fault(&eff, 0.05), Fault::Status(500));
        assert_eq!(draw_fault(&eff, 0.15), Fault::Status(503));
        assert_eq!(draw_fault(&eff, 0.25), Fault::Reset);
        assert_eq!(draw_fault(&eff, 0.35), Fault::Hang);
        assert_eq!(draw_fault(&eff, 0.45), Fault::StreamCut);
        assert_eq!(draw_fault(&eff, 0.55), Fault::Malformed);
        assert_eq!(draw_fault(&eff, 0.65), Fault::None);
    }
}
