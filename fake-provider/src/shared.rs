//! What the server and the admin API share: the provider's state behind
//! its locks (the current run, the phase pinned, the overrides, the lease
//! book), the settings in force, and the small HTTP helpers both answer
//! with.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, RwLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;
use wire::Clock;

use crate::ceiling::Ceiling;
use crate::config::{Effective, Overrides};
use crate::counters::{Gauges, Stats};
use crate::records::RecordFile;
use crate::run::{Book, Run};

pub(crate) type Body = BoxBody<Bytes, io::Error>;

pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into())
        .map_err(|e: Infallible| match e {})
        .boxed()
}

/// The response header of `GET /_fake/records` that gives the position
/// (records in write order) the answer ends at: ask `?after=` it next.
pub const RECORDS_NEXT_HEADER: &str = "x-fake-records-next";

/// The admin API named a phase that is not in the timeline.
#[derive(Debug, thiserror::Error)]
#[error("no timeline phase is named `{0}`")]
pub struct UnknownPhase(pub String);

/// What the admin API changes while calls are served, behind one lock:
/// the run, and the phase pinned or overrides set in it.
pub(crate) struct Control {
    pub(crate) pinned: Option<usize>,
    pub(crate) overrides: Option<Overrides>,
    /// Bumped at every change: the cached settings in force are stale.
    pub(crate) generation: u64,
    pub(crate) run: Arc<Run>,
}

pub(crate) struct Cached {
    mask: u64,
    generation: u64,
    effective: Arc<Effective>,
    label: Arc<str>,
}

pub(crate) struct Shared {
    /// Every admin call needs it when set (the process's, never a run's).
    pub(crate) admin_token: Option<String>,
    pub(crate) clock: Clock,
    pub(crate) ceiling: Ceiling,
    pub(crate) records: RecordFile,
    pub(crate) gauges: Gauges,
    /// Whether a timeline phase has taken the provider down.
    pub(crate) down: crate::down::DownState,
    pub(crate) control: RwLock<Control>,
    pub(crate) cache: Mutex<Option<Cached>>,
    /// The lease and the config uploaded for the next run.
    pub(crate) book: Mutex<Book>,
    /// One reset at a time.
    pub(crate) resetting: tokio::sync::Mutex<()>,
    pub(crate) shutdown: CancellationToken,
}

/// Poisoning means another task panicked while holding the lock; the data
/// behind these locks stays consistent at every await-free step, so go on.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The current run.
    pub(crate) fn run(&self) -> Arc<Run> {
        self.control
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .run
            .clone()
    }

    /// The settings in force now and the label of the active phases.
    pub(crate) fn effective(&self) -> (Arc<Effective>, Arc<str>) {
        self.effective_at(Instant::now())
    }

    /// The current run, the mask of the timeline phases in force at `at`
    /// (bit i: phase i; the pinned one alone when a phase is pinned), and
    /// whether one is pinned.
    pub(crate) fn phases_at(&self, at: Instant) -> (Arc<Run>, u64, bool) {
        let (pinned, run) = {
            let c = self.control.read().unwrap_or_else(|e| e.into_inner());
            (c.pinned, c.run.clone())
        };
        let mask = match pinned {
            Some(i) => 1u64 << i,
            None => run.phase_mask(at),
        };
        (run, mask, pinned.is_some())
    }

    /// Whether `/health` says healthy now: no phase in force marks the
    /// provider `health = "failing"`.
    pub(crate) fn healthy(&self) -> bool {
        let (run, mask, _) = self.phases_at(Instant::now());
        !run.config
            .timeline
            .iter()
            .enumerate()
            .any(|(i, p)| mask & (1 << i) != 0 && p.health == Some(crate::config::Health::Failing))
    }

    /// The settings in force at `at` (an instant the caller has read
    /// already: a call reads the clock once at arrival and once at
    /// admission) and the label of the phases active then.
    pub(crate) fn effective_at(&self, at: Instant) -> (Arc<Effective>, Arc<str>) {
        let (pinned, generation, run) = {
            let c = self.control.read().unwrap_or_else(|e| e.into_inner());
            (c.pinned, c.generation, c.run.clone())
        };
        let mask = match pinned {
            Some(i) => 1u64 << i,
            None => run.phase_mask(at),
        };
        let mut cache = lock(&self.cache);
        if let Some(c) = cache.as_ref() {
            if c.mask == mask && c.generation == generation {
                return (c.effective.clone(), c.label.clone());
            }
        }
        let config = &run.config;
        let active: Vec<(usize, Overrides)> = config
            .timeline
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(i, p)| (i, p.overrides()))
            .collect();
        let admin = self
            .control
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .overrides
            .clone();
        let effective = Arc::new(config.effective(active.iter().map(|(_, o)| o), admin.as_ref()));
        let mut label = active
            .iter()
            .map(|(i, _)| config.timeline[*i].name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        if label.is_empty() {
            label = "base".into();
        }
        if admin.is_some() {
            label.push_str("+admin");
        }
        let label: Arc<str> = label.into();
        *cache = Some(Cached {
            mask,
            generation,
            effective: effective.clone(),
            label: label.clone(),
        });
        (effective, label)
    }

    pub(crate) fn set_phase(&self, name: Option<&str>) -> Result<(), UnknownPhase> {
        let mut c = self.control.write().unwrap_or_else(|e| e.into_inner());
        let idx = match name {
            None => None,
            Some(n) => Some(
                c.run
                    .config
                    .timeline
                    .iter()
                    .position(|p| p.name == n)
                    .ok_or_else(|| UnknownPhase(n.to_string()))?,
            ),
        };
        c.pinned = idx;
        c.generation += 1;
        drop(c);
        self.down.changed.notify_one();
        Ok(())
    }

    /// Starts the current run's timeline at `at` (see
    /// [`crate::ProviderHandle::start_timeline_now`]).
    pub(crate) fn restart_timeline(&self, at: Instant) {
        let mut c = self.control.write().unwrap_or_else(|e| e.into_inner());
        c.run = Arc::new(c.run.restarted_at(&self.clock, at));
        c.generation += 1;
        drop(c);
        self.down.changed.notify_one();
    }

    pub(crate) fn set_overrides(&self, o: Option<Overrides>) {
        let mut c = self.control.write().unwrap_or_else(|e| e.into_inner());
        c.overrides = o;
        c.generation += 1;
        drop(c);
        self.down.changed.notify_one();
    }

    pub(crate) fn stats(&self) -> Stats {
        let (_, label) = self.effective();
        let run = self.run();
        let mut stats =
            run.counters
                .snapshot(&self.gauges, self.ceiling.in_service(), label.to_string());
        stats.records_written = self.records.written().records;
        stats.records_dropped = self.records.dropped();
        stats.run_id = run.id.clone();
        stats
    }
}

pub(crate) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Reads a whole request body, within the size limit and the time limit.
pub(crate) async fn read_body(
    req: Request<Incoming>,
    limit: usize,
    within: Duration,
) -> Result<(HeaderMap, Bytes), (StatusCode, String)> {
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body of {len} bytes is over the limit of {limit} bytes"),
            ));
        }
    }
    let collect = collect_body(Limited::new(body, limit));
    let mut collect = std::pin::pin!(collect);
    // A small body is most often in by the first poll: the timeout's
    // timer is made only for one that is not.
    let read = match std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await {
        Poll::Ready(read) => read,
        Poll::Pending => match tokio::time::timeout(within, collect).await {
            Ok(read) => read,
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body was not sent in time".into(),
                ))
            }
        },
    };
    match read {
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body is over the limit of {limit} bytes"),
                ))
            } else {
                Err((
                    StatusCode::BAD_REQUEST,
                    format!("could not read the request body: {e}"),
                ))
            }
        }
        Ok(bytes) => Ok((parts.headers, bytes)),
    }
}

/// A body's data frames joined (its trailers dropped): a body of one
/// frame is that frame's bytes as they are, with no buffer list
/// collected and copied out of.
async fn collect_body<B>(mut body: B) -> Result<Bytes, B::Error>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let mut first: Option<Bytes> = None;
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match (&mut first, &mut joined) {
            (_, Some(joined)) => joined.extend_from_slice(&data),
            (Some(one), None) => {
                let mut v = Vec::with_capacity(one.len() + data.len());
                v.extend_from_slice(one);
                v.extend_from_slice(&data);
                joined = Some(v);
            }
            (None, None) => first = Some(data),
        }
    }
    Ok(match (joined, first) {
        (Some(joined), _) => Bytes::from(joined),
        (None, Some(one)) => one,
        (None, None) => Bytes::new(),
    })
}

pub(crate) fn respond(
    status: StatusCode,
    headers: HeaderMap,
    body: Body,
    content_type: &'static str,
) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::StreamBody;

    fn body(
        frames: Vec<Result<Frame<Bytes>, io::Error>>,
    ) -> impl http_body::Body<Data = Bytes, Error = io::Error> + Unpin {
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_bodys_data_frames_are_joined_and_one_frame_is_kept_as_it_is() {
        let one = Bytes::from_static(b"{\"model\":\"m\"}");
        let got = collect_body(body(vec![Ok(Frame::data(one.clone()))]))
            .await
            .unwrap();
        assert_eq!(got, one);
        assert_eq!(
            got.as_ptr(),
            one.as_ptr(),
            "the frame's own bytes, not a copy"
        );
        let frames = ["{\"a\"", ":", "1", "}"]
            .map(|s| Ok(Frame::data(Bytes::from_static(s.as_bytes()))))
            .into_iter()
            .chain([Ok(Frame::trailers(HeaderMap::new()))])
            .collect();
        assert_eq!(collect_body(body(frames)).await.unwrap(), "{\"a\":1}");
        assert_eq!(collect_body(body(vec![])).await.unwrap(), "");
        let failed = vec![
            Ok(Frame::data(Bytes::from_static(b"x"))),
            Err(io::Error::other("gone")),
        ];
        assert_eq!(
            collect_body(body(failed)).await.unwrap_err().to_string(),
            "gone"
        );
        // Over the limit: Limited's error, as before.
        let big = body(vec![Ok(Frame::data(Bytes::from(vec![b'x'; 10])))]);
        let e = collect_body(Limited::new(big, 4)).await.unwrap_err();
        assert!(e
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some());
    }
}
