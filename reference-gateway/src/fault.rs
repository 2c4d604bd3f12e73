//! Faults the reference gateway can be given on purpose (`--fault KIND`,
//! `fault = "KIND"` in a config or a scenario's `[gateway.reference]`), so
//! that each check of the checklist can be shown failing on a gateway that
//! has the mistake it looks for. Never for a real rehearsal.
//!
//! Each fault is one mistake gateways in use are reported to make, applied
//! on top of whatever mode runs:
//! - `buffer-stream`: the upstream answer is read whole, then sent with the
//!   upstream's status and content type (a relay doing `r = await
//!   client.post(...)`, then `Response(r.content)`);
//! - `buffer-body`: the head goes out at once, the body is held until the
//!   upstream answer is complete, then sent in one piece;
//! - `leak-slots[=N]`: a call that ends by the upstream timeout, or by its
//!   caller hanging up while it runs, never gives its concurrency slot (and
//!   its pooled connection) back; at most N in all when N is given;
//! - `retry-storm`: a provider's 429 or 503 is retried at once, with no
//!   wait, up to 5 more times, before the caller is answered;
//! - `no-cancel`: a caller hanging up neither drops its queued job nor
//!   cancels its upstream call, which runs to its end for nobody;
//! - `hoard`: a copy of every request body is kept forever;
//! - `refuse-408`: every request is answered 408 at once, the provider
//!   never called;
//! - `refuse-500-after=DURATION`: every request is held DURATION, then
//!   answered 500, the provider never called.
//!
//! A gateway without a fault pays one branch on a field at each hook; the
//! hooks are in the proxy's path (before admission, after the answer's
//! head, at the call's end) and in the upstream client's refusal branch.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use crate::admission::Permit;
use crate::config::{GatewayConfig, Mode};
use crate::proxy::{error_response, BoxError, ChannelBody, GatewayBody, Shared};

/// The fault kinds, as `--fault` and `fault = ...` spell them.
pub const FAULT_KINDS: &str =
    "buffer-stream, buffer-body, leak-slots[=N], retry-storm, no-cancel, \
     hoard, refuse-408, refuse-500-after=DURATION";

/// How many more times `retry-storm` sends a refused call.
pub(crate) const STORM_RETRIES: u32 = 5;

/// One fault given to the gateway, to show a check failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Read the whole upstream answer, then send it (status and content
    /// type only).
    BufferStream,
    /// Send the head at once, hold the body until it is complete.
    BufferBody,
    /// Never give back the slot of a call that timed out or whose caller
    /// hung up; at most this many in all when given.
    LeakSlots(Option<u64>),
    /// Retry every 429 and 503 at once, up to 5 more times.
    RetryStorm,
    /// A caller hanging up cancels nothing.
    NoCancel,
    /// Keep a copy of every request body, forever.
    Hoard,
    /// Answer every request 408 at once, without calling the provider.
    Refuse408,
    /// Hold every request this long, then answer 500 without calling the
    /// provider.
    Refuse500After(Duration),
}

impl Fault {
    /// The kind's name, without its value.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::BufferStream => "buffer-stream",
            Fault::BufferBody => "buffer-body",
            Fault::LeakSlots(_) => "leak-slots",
            Fault::RetryStorm => "retry-storm",
            Fault::NoCancel => "no-cancel",
            Fault::Hoard => "hoard",
            Fault::Refuse408 => "refuse-408",
            Fault::Refuse500After(_) => "refuse-500-after",
        }
    }

    /// The fault with its duration scaled by `scale` (only
    /// `refuse-500-after` has one).
    pub(crate) fn scaled(self, scale: impl Fn(Duration) -> Duration) -> Fault {
        match self {
            Fault::Refuse500After(d) => Fault::Refuse500After(scale(d)),
            other => other,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::LeakSlots(Some(n)) => write!(f, "leak-slots={n}"),
            Fault::Refuse500After(d) => {
                write!(f, "refuse-500-after={}", humantime::format_duration(*d))
            }
            other => f.write_str(other.kind()),
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    /// Reads `KIND` or `KIND=VALUE`.
    ///
    /// ```
    /// use reference_gateway::Fault;
    /// use std::time::Duration;
    ///
    /// assert_eq!("leak-slots=3".parse(), Ok(Fault::LeakSlots(Some(3))));
    /// assert_eq!("refuse-500-after=2s".parse(), Ok(Fault::Refuse500After(Duration::from_secs(2))));
    /// assert!("slow".parse::<Fault>().unwrap_err().contains("buffer-stream"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, value) = match s.trim().split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (s.trim(), None),
        };
        let plain = |f: Fault| match value {
            None => Ok(f),
            Some(_) => Err(format!("`{s}`: {kind} takes no value")),
        };
        match kind {
            "buffer-stream" => plain(Fault::BufferStream),
            "buffer-body" => plain(Fault::BufferBody),
            "retry-storm" => plain(Fault::RetryStorm),
            "no-cancel" => plain(Fault::NoCancel),
            "hoard" => plain(Fault::Hoard),
            "refuse-408" => plain(Fault::Refuse408),
            "leak-slots" => match value {
                None => Ok(Fault::LeakSlots(None)),
                Some(v) => match v.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Fault::LeakSlots(Some(n))),
                    _ => Err(format!(
                        "`{s}`: leak-slots=N takes a whole number of slots above 0"
                    )),
                },
            },
            "refuse-500-after" => match value {
                Some(v) => humantime::parse_duration(v)
                    .map(Fault::Refuse500After)
                    .map_err(|e| format!("`{s}`: `{v}` is not a duration ({e}), e.g. 2s")),
                None => Err(format!(
                    "`{s}`: refuse-500-after takes a duration: refuse-500-after=2s"
                )),
            },
            _ => Err(format!(
                "unknown fault `{s}`: expected one of {FAULT_KINDS}"
            )),
        }
    }
}

/// `fault` in a config: one kind as a string, or a list of them; written
/// back as a list.
pub(crate) mod list {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(faults: &[Fault], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(faults.iter().map(ToString::to_string))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Fault>, D::Error> {
        struct Faults;
        impl<'de> Visitor<'de> for Faults {
            type Value = Vec<Fault>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a fault or a list of faults ({FAULT_KINDS})")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map(|f| vec![f]).map_err(E::custom)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    out.push(text.parse().map_err(de::Error::custom)?);
                }
                Ok(out)
            }
        }
        d.deserialize_any(Faults)
    }
}

/// Checks that `config`'s faults go together and with its mode: each kind
/// once, one way of holding the answer back, one way of refusing, and a
/// slot to leak for `leak-slots`.
pub(crate) fn validate(config: &GatewayConfig) -> Result<(), String> {
    let faults = &config.fault;
    for (i, f) in faults.iter().enumerate() {
        if faults[..i].iter().any(|g| g.kind() == f.kind()) {
            return Err(format!("`{}` is given twice", f.kind()));
        }
    }
    let has = |kind: &str| faults.iter().any(|f| f.kind() == kind);
    if has("buffer-stream") && has("buffer-body") {
        return Err("buffer-stream and buffer-body both hold the answer back: give one".into());
    }
    if has("refuse-408") && has("refuse-500-after") {
        return Err("refuse-408 and refuse-500-after both refuse every request: give one".into());
    }
    let slots = matches!(config.mode, Mode::Bounded | Mode::Aimd);
    if has("leak-slots") && !slots && config.pool_max_connections.is_none() {
        return Err(format!(
            "leak-slots: mode `{}` has no concurrency slot to leak: use bounded or aimd, \
             or set pool_max_connections (its connections leak)",
            config.mode
        ));
    }
    Ok(())
}

/// How an answer is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buffer {
    Stream,
    Body,
}

/// How every request is refused.
#[derive(Debug, Clone, Copy)]
enum Refuse {
    At408,
    With500After(Duration),
}

/// A running gateway's faults (none of them: no `Faults` at all).
pub(crate) struct Faults {
    buffer: Option<Buffer>,
    refuse: Option<Refuse>,
    /// Slots still to leak (`u64::MAX`: no end); present with `leak-slots`.
    leak_left: Option<AtomicU64>,
    leaked: AtomicU64,
    /// Whether a hang-up is ignored (`no-cancel`).
    pub(crate) no_cancel: bool,
    /// The request bodies kept (`hoard`), and their bytes.
    hoard: Option<Mutex<Vec<Box<[u8]>>>>,
    hoarded_bytes: AtomicU64,
}

impl Faults {
    /// The faults of `config`; None without any.
    pub(crate) fn new(config: &GatewayConfig) -> Option<Box<Faults>> {
        if config.fault.is_empty() {
            return None;
        }
        let mut faults = Faults {
            buffer: None,
            refuse: None,
            leak_left: None,
            leaked: AtomicU64::new(0),
            no_cancel: false,
            hoard: None,
            hoarded_bytes: AtomicU64::new(0),
        };
        for f in &config.fault {
            match *f {
                Fault::BufferStream => faults.buffer = Some(Buffer::Stream),
                Fault::BufferBody => faults.buffer = Some(Buffer::Body),
                Fault::LeakSlots(n) => {
                    faults.leak_left = Some(AtomicU64::new(n.unwrap_or(u64::MAX)));
                }
                // The upstream client reads this one from the config.
                Fault::RetryStorm => {}
                Fault::NoCancel => faults.no_cancel = true,
                Fault::Hoard => faults.hoard = Some(Mutex::new(Vec::new())),
                Fault::Refuse408 => faults.refuse = Some(Refuse::At408),
                Fault::Refuse500After(d) => faults.refuse = Some(Refuse::With500After(d)),
            }
        }
        Some(Box::new(faults))
    }

    /// Before admission, with the request's body read: `hoard` keeps a
    /// copy of it; `refuse-408` and `refuse-500-after` give the answer to
    /// send instead of calling the provider.
    pub(crate) async fn before_admission(&self, body: &Bytes) -> Option<Response<GatewayBody>> {
        if let Some(hoard) = &self.hoard {
            // A copy of its own, not a view of the request's buffer: the
            // memory held is the hoard's, whatever becomes of the request.
            let copy: Box<[u8]> = body.as_ref().into();
            self.hoarded_bytes
                .fetch_add(copy.len() as u64, Ordering::Relaxed);
            hoard.lock().unwrap_or_else(|e| e.into_inner()).push(copy);
        }
        match self.refuse? {
            Refuse::At408 => Some(error_response(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "timeout",
                "Request Timeout",
            )),
            Refuse::With500After(hold) => {
                tokio::time::sleep(hold).await;
                Some(error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "api_error",
                    "Internal Server Error",
                ))
            }
        }
    }

    /// The answer to pass on, held back as `buffer-stream` or
    /// `buffer-body` hold it (unchanged without either).
    pub(crate) async fn pass_on(&self, answer: Response<GatewayBody>) -> Response<GatewayBody> {
        match self.buffer {
            None => answer,
            Some(Buffer::Stream) => read_whole(answer).await,
            Some(Buffer::Body) => {
                let (parts, body) = answer.into_parts();
                let held = futures_util::stream::once(async move {
                    body.collect().await.map(|c| Frame::data(c.to_bytes()))
                });
                Response::from_parts(parts, http_body_util::StreamBody::new(held).boxed_unsync())
            }
        }
    }

    /// At the end of a call that timed out or whose caller hung up while
    /// it ran: with `leak-slots` (and slots left to leak), its concurrency
    /// slot and its pooled connection are never given back.
    pub(crate) fn leak(
        &self,
        permit: &mut Option<Permit>,
        connection: &mut Option<OwnedSemaphorePermit>,
    ) {
        let Some(left) = &self.leak_left else { return };
        let took = left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
            0 => None,
            u64::MAX => Some(u64::MAX),
            n => Some(n - 1),
        });
        if took.is_err() {
            return;
        }
        self.leaked.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = permit.take() {
            p.leak();
        }
        if let Some(c) = connection.take() {
            c.forget();
        }
    }

    /// The faults' own series for `/metrics`.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        if self.leak_left.is_some() {
            let _ = writeln!(
                out,
                "# HELP gateway_fault_leaked_slots_total Concurrency slots never given back (fault leak-slots).\n# TYPE gateway_fault_leaked_slots_total counter\ngateway_fault_leaked_slots_total {}",
                self.leaked.load(Ordering::Relaxed)
            );
        }
        if self.hoard.is_some() {
            let _ = writeln!(
                out,
                "# HELP gateway_fault_hoarded_bytes Request bytes kept forever (fault hoard).\n# TYPE gateway_fault_hoarded_bytes gauge\ngateway_fault_hoarded_bytes {}",
                self.hoarded_bytes.load(Ordering::Relaxed)
            );
        }
    }
}

/// `buffer-stream`: the answer read to its end, then sent whole with its
/// status and content type (and the gateway's own `x-gateway-*` marks); an
/// answer that broke on the way is a 502, as the relay's exception would
/// make it.
async fn read_whole(answer: Response<GatewayBody>) -> Response<GatewayBody> {
    let (parts, body) = answer.into_parts();
    let content = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            return error_response(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                "api_error",
                &format!("the upstream answer broke: {e}"),
            )
        }
    };
    let mut whole = Response::new(
        http_body_util::Full::new(content)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *whole.status_mut() = parts.status;
    let headers = whole.headers_mut();
    if let Some(kind) = parts.headers.get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, kind.clone());
    }
    for (name, value) in &parts.headers {
        if name.as_str().starts_with("x-gateway-") {
            headers.insert(name.clone(), value.clone());
        }
    }
    whole
}

/// `no-cancel`: the request's whole path (admission, the call, the answer
/// read to its end) runs in a task of its own that the caller's hang-up
/// does not reach; the caller reads the answer through a channel.
pub(crate) async fn uncancelled(
    shared: Arc<Shared>,
    req: http::Request<Incoming>,
    api: wire::Api,
) -> Response<GatewayBody> {
    let (head_tx, head_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (parts, mut body) = shared.proxy(req, api).await.into_parts();
        // Unbounded: the answer is read whether or not anyone listens.
        let (tx, rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, BoxError>>();
        let _ = head_tx.send(Response::from_parts(
            parts,
            ChannelBody::new(rx).boxed_unsync(),
        ));
        while let Some(frame) = body.frame().await {
            let broke = frame.is_err();
            // A closed receiver (the caller left) is ignored.
            let _ = tx.send(frame);
            if broke {
                break;
            }
        }
    });
    match head_rx.await {
        Ok(answer) => answer,
        Err(_) => error_response(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            "api_error",
            "the request's task ended without an answer",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written() {
        for text in [
            "buffer-stream",
            "buffer-body",
            "leak-slots",
            "leak-slots=3",
            "retry-storm",
            "no-cancel",
            "hoard",
            "refuse-408",
            "refuse-500-after=1s 500ms",
        ] {
            let f: Fault = text.parse().unwrap();
            assert_eq!(f.to_string(), text);
        }
        assert_eq!(" hoard ".parse(), Ok(Fault::Hoard));
    }

    #[test]
    fn bad_faults_say_what_is_expected() {
        for (text, says) in [
            ("slow", "expected one of buffer-stream"),
            ("leak-slots=0", "above 0"),
            ("leak-slots=many", "whole number"),
            ("hoard=2", "takes no value"),
            ("refuse-500-after", "takes a duration"),
            ("refuse-500-after=soon", "not a duration"),
        ] {
            let err = text.parse::<Fault>().unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn faults_must_go_together_and_with_the_mode() {
        let with = |mode: Mode, faults: &[&str]| {
            let mut c = GatewayConfig::new(mode, "http://127.0.0.1:1");
            c.upstream_timeout = Some(Duration::from_secs(1));
            c.fault = faults.iter().map(|f| f.parse().unwrap()).collect();
            validate(&c)
        };
        assert_eq!(
            with(Mode::Bounded, &["leak-slots", "hoard", "retry-storm"]),
            Ok(())
        );
        assert_eq!(with(Mode::Aimd, &["leak-slots=2"]), Ok(()));
        for (mode, faults, says) in [
            (Mode::Naive, &["hoard", "hoard"][..], "twice"),
            (Mode::Naive, &["leak-slots", "leak-slots=2"][..], "twice"),
            (
                Mode::Naive,
                &["buffer-stream", "buffer-body"][..],
                "give one",
            ),
            (
                Mode::Naive,
                &["refuse-408", "refuse-500-after=1s"][..],
                "give one",
            ),
            (Mode::Timeout, &["leak-slots"][..], "no concurrency slot"),
            (Mode::Deadline, &["leak-slots"][..], "pool_max_connections"),
        ] {
            let err = with(mode, faults).unwrap_err();
            assert!(err.contains(says), "{faults:?}: {err}");
        }
        let mut pooled = GatewayConfig::new(Mode::Timeout, "http://127.0.0.1:1");
        pooled.pool_max_connections = Some(4);
        pooled.fault = vec![Fault::LeakSlots(None)];
        assert_eq!(validate(&pooled), Ok(()), "the pool's connections leak");
    }

    #[test]
    fn a_leak_budget_runs_out() {
        let mut c = GatewayConfig::new(Mode::Bounded, "http://127.0.0.1:1");
        c.fault = vec![Fault::LeakSlots(Some(2))];
        let f = Faults::new(&c).unwrap();
        for _ in 0..5 {
            f.leak(&mut None, &mut None);
        }
        assert_eq!(f.leaked.load(Ordering::Relaxed), 2);
        let mut text = String::new();
        f.render(&mut text);
        assert!(
            text.contains("gateway_fault_leaked_slots_total 2"),
            "{text}"
        );
        assert!(Faults::new(&GatewayConfig::new(Mode::Bounded, "http://x:1")).is_none());
    }
}
