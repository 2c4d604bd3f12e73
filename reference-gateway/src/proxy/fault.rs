//! The faults of [`crate::fault`] at work in a running gateway: what
//! each hook in the proxy's path does when the gateway was given one. A
//! gateway without faults has no [`Faults`] at all, and each hook costs
//! it one branch on an `Option`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use super::{error_response, BoxError, ChannelBody, GatewayBody, Shared};
use crate::admission::Permit;
use crate::config::GatewayConfig;
use crate::fault::Fault;

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
    use crate::config::Mode;

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
