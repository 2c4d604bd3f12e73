//! The admin API (`/_fake/...`) and the Prometheus metrics (`/metrics`):
//! who may call them, and what each does.
//!
//! Access: without an admin token, loopback callers only (403 for anyone
//! else); with one, every caller, loopback included, must send
//! `Authorization: Bearer TOKEN` (401 without it or with another: nothing
//! is changed). The token is compared in constant time.
//!
//! | endpoint | what it does |
//! |---|---|
//! | `GET /_fake/time` | the provider's clock: `{"unix_us": N}` |
//! | `GET /_fake/run` | the current run, its lease, the config versions |
//! | `GET /_fake/stats` | the run's counts and the live gauges |
//! | `GET /_fake/records?after=N` | the run's records after the first N, streamed |
//! | `GET /_fake/config` | the config in force and the one waiting for a reset |
//! | `PUT /_fake/config` | uploads a provider table (TOML, or JSON): applied at the next reset |
//! | `POST /_fake/reset` | starts a new run ([`ResetRequest`]) |
//! | `POST /_fake/lease` | renews or gives back the current run's lease ([`LeaseRequest`]) |
//! | `POST /_fake/phase` | pins a timeline phase (`{"name": null}`: back to the clock) |
//! | `POST`/`DELETE /_fake/overrides` | sets or clears overrides on top of the timeline |
//! | `GET /metrics` | Prometheus text |

use std::net::SocketAddr;
use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;
use std::time::Instant;

use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{json, Value};

use crate::config::{ConfigError, Overrides, ProviderConfig};
use crate::records::ReadError;
use crate::run::{
    check_lease, check_run_id, lease_length, timeline_start, AdminRefusal, LeaseInfo, LeaseRequest,
    Pending, PreviousRun, ResetRequest, Run, RunInfo,
};
use crate::shared::{
    full, json_response, lock, read_body, respond, Body, Shared, RECORDS_NEXT_HEADER,
};

/// Where an uploaded config's errors say they come from.
pub(crate) const UPLOAD_ORIGIN: &str = "PUT /_fake/config";

/// The largest body an admin call may send (an uploaded config).
const ADMIN_BODY_LIMIT: usize = 1 << 20;

/// Who may call the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Granted,
    /// No token is set and the caller is not on loopback (403).
    NotLoopback,
    /// A token is set and the caller sent none (401).
    NoToken,
    /// A token is set and the caller sent another (401).
    WrongToken,
}

/// The rule: without a token, loopback callers only; with one, whoever
/// sends it, loopback or not.
pub(crate) fn access(token: Option<&str>, headers: &HeaderMap, peer: SocketAddr) -> Access {
    let Some(token) = token else {
        return if peer.ip().is_loopback() {
            Access::Granted
        } else {
            Access::NotLoopback
        };
    };
    match bearer(headers) {
        None => Access::NoToken,
        Some(sent) if constant_time_eq(sent, token.as_bytes()) => Access::Granted,
        Some(_) => Access::WrongToken,
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any
/// case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = value[7..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Compares `sent` with `token` in a time that depends on the token's
/// length only, never on where they first differ.
fn constant_time_eq(sent: &[u8], token: &[u8]) -> bool {
    let mut diff = u8::from(sent.len() != token.len());
    for (i, t) in token.iter().enumerate() {
        diff |= t ^ sent.get(i).copied().unwrap_or(!t);
    }
    std::hint::black_box(diff) == 0
}

fn admin_json(status: StatusCode, v: Value) -> Response<Body> {
    json_response(status, v.to_string())
}

fn refused(r: &AdminRefusal) -> Response<Body> {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
    admin_json(status, r.body())
}

fn denied(access: Access) -> Response<Body> {
    let (status, message) = match access {
        Access::Granted => unreachable!("granted access is not denied"),
        Access::NotLoopback => (
            StatusCode::FORBIDDEN,
            "the admin endpoints answer loopback callers only: this provider has no admin token (give it one with REHEARSE_ADMIN_TOKEN or --admin-token-file to call it from elsewhere)",
        ),
        Access::NoToken => (
            StatusCode::UNAUTHORIZED,
            "the admin endpoints need the admin token: send Authorization: Bearer TOKEN",
        ),
        Access::WrongToken => (
            StatusCode::UNAUTHORIZED,
            "wrong admin token (Authorization: Bearer TOKEN)",
        ),
    };
    let mut r = admin_json(status, json!({"error": message}));
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"rehearse fake provider\""),
        );
    }
    r
}

/// Serves an admin call (a path under `/_fake/`, or `/metrics`).
pub(crate) async fn admin(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let access = access(shared.admin_token.as_deref(), req.headers(), peer);
    if access != Access::Granted {
        return denied(access);
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    match (method, path.as_str()) {
        // First: the offset measurement wants it answered at once.
        (Method::GET, "/_fake/time") => {
            admin_json(StatusCode::OK, json!({"unix_us": shared.clock.now_us()}))
        }
        (Method::GET, "/_fake/stats") => admin_json(
            StatusCode::OK,
            serde_json::to_value(shared.stats()).unwrap_or_default(),
        ),
        (Method::GET, "/_fake/run") => admin_json(
            StatusCode::OK,
            serde_json::to_value(shared.run_info(None)).unwrap_or_default(),
        ),
        (Method::GET, "/_fake/records") => records_after(&shared, req.uri().query()).await,
        (Method::GET, "/metrics") => respond(
            StatusCode::OK,
            HeaderMap::new(),
            full(metrics_text(&shared)),
            "text/plain; version=0.0.4",
        ),
        (Method::GET, "/_fake/config") => admin_json(StatusCode::OK, shared.config_view()),
        (Method::PUT, "/_fake/config") => put_config(&shared, req).await,
        (Method::POST, "/_fake/reset") => reset(&shared, req).await,
        (Method::POST, "/_fake/lease") => lease(&shared, req).await,
        (Method::POST, "/_fake/phase") => phase(&shared, req).await,
        (Method::POST | Method::PUT, "/_fake/overrides") => overrides(&shared, req).await,
        (Method::DELETE, "/_fake/overrides") => {
            shared.set_overrides(None);
            admin_json(StatusCode::OK, json!({"phase": shared.stats().phase}))
        }
        (
            _,
            "/_fake/time" | "/_fake/stats" | "/_fake/run" | "/_fake/records" | "/metrics"
            | "/_fake/config" | "/_fake/reset" | "/_fake/lease" | "/_fake/phase"
            | "/_fake/overrides",
        ) => admin_json(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": format!("{} does not take this method", path)}),
        ),
        _ => admin_json(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no admin route {path}")}),
        ),
    }
}

/// Go on with `T`, or answer with this response (a refusal is an answer,
/// and a response too big for a `Result`'s error).
type Step<T> = ControlFlow<Response<Body>, T>;

/// An admin call's body, or the response refusing it.
async fn body_of(shared: &Shared, req: Request<Incoming>) -> Step<(HeaderMap, Vec<u8>)> {
    let within = shared.run().config.body_read_timeout;
    match read_body(req, ADMIN_BODY_LIMIT, within).await {
        Ok((headers, body)) => Continue((headers, body.to_vec())),
        Err((status, message)) => Break(admin_json(status, json!({"error": message}))),
    }
}

/// A JSON body into `T`; an empty body is `T::default()`.
fn json_body<T: serde::de::DeserializeOwned + Default>(body: &[u8], shape: &str) -> Step<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Continue(T::default());
    }
    match serde_json::from_slice(body) {
        Ok(v) => Continue(v),
        Err(e) => Break(admin_json(
            StatusCode::BAD_REQUEST,
            json!({"error": format!("expected {shape}: {e}")}),
        )),
    }
}

async fn reset(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let body = match body_of(shared, req).await {
        Continue((_, b)) => b,
        Break(r) => return r,
    };
    let request: ResetRequest = match json_body(
        &body,
        "{\"run_id\", \"start_at_unix_ms\", \"lease_s\", \"force\", \"config_version\"}, each optional",
    ) {
        Continue(r) => r,
        Break(r) => return r,
    };
    match shared.reset(request).await {
        Ok(info) => admin_json(
            StatusCode::OK,
            serde_json::to_value(info).unwrap_or_default(),
        ),
        Err(r) => refused(&r),
    }
}

async fn lease(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let body = match body_of(shared, req).await {
        Continue((_, b)) => b,
        Break(r) => return r,
    };
    let request: LeaseRequest = match json_body(&body, "{\"run_id\": RUN, \"lease_s\": S}") {
        Continue(r) => r,
        Break(r) => return r,
    };
    match shared.renew_lease(&request) {
        Ok(info) => admin_json(
            StatusCode::OK,
            serde_json::to_value(info).unwrap_or_default(),
        ),
        Err(r) => refused(&r),
    }
}

async fn phase(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let body = match body_of(shared, req).await {
        Continue((_, b)) => b,
        Break(r) => return r,
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PhaseReq {
        name: Option<String>,
    }
    match serde_json::from_slice::<PhaseReq>(&body) {
        Err(e) => admin_json(
            StatusCode::BAD_REQUEST,
            json!({"error": format!("expected {{\"name\": \"PHASE\" or null}}: {e}")}),
        ),
        Ok(p) => match shared.set_phase(p.name.as_deref()) {
            Ok(()) => admin_json(StatusCode::OK, json!({"phase": shared.stats().phase})),
            Err(e) => admin_json(StatusCode::NOT_FOUND, json!({"error": e.to_string()})),
        },
    }
}

async fn overrides(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let body = match body_of(shared, req).await {
        Continue((_, b)) => b,
        Break(r) => return r,
    };
    let o = match serde_json::from_slice::<Overrides>(&body) {
        Ok(o) => o,
        Err(e) => return admin_json(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
    };
    let text = String::from_utf8_lossy(&body);
    let src = toml_located::Source::new(&text, "overrides");
    if let Err(e) = o.check(&src, "overrides") {
        return admin_json(
            StatusCode::BAD_REQUEST,
            json!({"error": format!("field `{}`: {}", e.field, e.message)}),
        );
    }
    shared.set_overrides(Some(o));
    admin_json(StatusCode::OK, json!({"phase": shared.stats().phase}))
}

async fn put_config(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let (headers, body) = match body_of(shared, req).await {
        Continue(x) => x,
        Break(r) => return r,
    };
    let is_json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            let t = t.trim().to_ascii_lowercase();
            t == "application/json" || t.ends_with("+json")
        });
    let Ok(text) = std::str::from_utf8(&body) else {
        return admin_json(
            StatusCode::BAD_REQUEST,
            json!({"error": "the config is not UTF-8 text"}),
        );
    };
    let parsed = if is_json {
        config_from_json(text, UPLOAD_ORIGIN)
    } else {
        config_from_toml(text, UPLOAD_ORIGIN)
    };
    match parsed {
        Ok(config) => {
            let version = shared.upload_config(config.clone());
            admin_json(
                StatusCode::OK,
                json!({
                    "config_version": version,
                    "applies": "at the next reset",
                    "config": config_json(&config),
                }),
            )
        }
        Err(e) => admin_json(
            StatusCode::BAD_REQUEST,
            json!({
                "error": e.to_string(),
                "line": e.line,
                "column": e.column,
                "field": e.field,
                "message": e.message,
            }),
        ),
    }
}

/// What an uploaded config may not set, whatever its format.
fn no_token(config: &ProviderConfig) -> Result<(), &'static str> {
    if config.admin_token.is_some() {
        Err("the admin token cannot be set through the admin API: it is the provider process's (REHEARSE_ADMIN_TOKEN, --admin-token-file, or its --config file)")
    } else {
        Ok(())
    }
}

/// An uploaded provider table in TOML: the schema and the located errors
/// of a `--config` file.
pub(crate) fn config_from_toml(text: &str, origin: &str) -> Result<ProviderConfig, ConfigError> {
    let config = ProviderConfig::from_toml(text, origin)?;
    no_token(&config)
        .map_err(|m| toml_located::Source::new(text, origin).error("admin_token", m))?;
    Ok(config)
}

/// An uploaded provider table in JSON (the TOML schema's fields, durations
/// as strings; `null` is an absent field): errors name the field, and the
/// line and column of its value in `text`.
///
/// The JSON is read into a value, written as TOML and read as a
/// `--config` file is, so both formats meet the same schema and the same
/// checks; an error's position is then looked up in the JSON by its field.
pub(crate) fn config_from_json(text: &str, origin: &str) -> Result<ProviderConfig, ConfigError> {
    let error = |line, column, field: &str, message: String| ConfigError {
        origin: origin.to_string(),
        line,
        column,
        field: field.to_string(),
        message,
    };
    let mut value: Value = serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        // serde_json ends with " at line L column C": given apart.
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m)
            .to_string();
        error(e.line(), e.column(), "", message)
    })?;
    if !value.is_object() {
        return Err(error(
            1,
            1,
            "",
            "expected a JSON object: the provider table".into(),
        ));
    }
    drop_nulls(&mut value);
    let as_toml = toml::to_string(&value)
        .map_err(|e| error(0, 0, "", format!("not a provider table: {e}")))?;
    let located = |e: ConfigError| {
        let (line, column) =
            json_locate(text, &e.field).map_or((0, 0), |at| toml_located::line_col(text, at));
        error(line, column, &e.field, e.message)
    };
    let config = ProviderConfig::from_toml(&as_toml, origin).map_err(located)?;
    no_token(&config).map_err(|m| located(error(0, 0, "admin_token", m.to_string())))?;
    Ok(config)
}

/// Removes every `null` member (an absent field, as TOML has no null).
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The byte offset in the JSON `text` of the value at `path` (dotted, with
/// `[i]` for array elements), or of its nearest parent present.
fn json_locate(text: &str, path: &str) -> Option<usize> {
    use serde_json::value::RawValue;
    let base = text.as_ptr() as usize;
    let mut node: &str = text;
    let mut best = None;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        let mut steps: Vec<Result<&str, usize>> = Vec::new();
        if !key.is_empty() {
            steps.push(Ok(key));
        }
        while let Some(end) = rest.find(']') {
            if let Ok(i) = rest[1..end].parse() {
                steps.push(Err(i));
            }
            rest = &rest[end + 1..];
        }
        for step in steps {
            // Values borrowed from `text`: where they start is an offset.
            let next: Option<&RawValue> = match step {
                Ok(key) => {
                    serde_json::from_str::<std::collections::HashMap<String, &RawValue>>(node)
                        .ok()
                        .and_then(|m| m.get(key).copied())
                }
                Err(i) => serde_json::from_str::<Vec<&RawValue>>(node)
                    .ok()
                    .and_then(|v| v.get(i).copied()),
            };
            let Some(next) = next else {
                return best;
            };
            node = next.get();
            best = Some(node.as_ptr() as usize - base);
        }
    }
    best
}

/// A config as JSON, without its admin token.
fn config_json(config: &ProviderConfig) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.remove("admin_token");
    }
    v
}

impl Shared {
    /// The current run as the admin API shows it.
    pub(crate) fn run_info(&self, previous: Option<PreviousRun>) -> RunInfo {
        let run = self.run();
        let book = lock(&self.book);
        let now_us = self.clock.now_us();
        let lease = book
            .lease_until_us
            .filter(|&until| until > now_us)
            .map(|until| LeaseInfo {
                expires_unix_ms: until / 1000,
                remaining_ms: (until - now_us).div_ceil(1000),
            });
        RunInfo {
            run_id: run.id.clone(),
            run_number: run.number,
            reset_at_unix_ms: run.reset_at_us / 1000,
            timeline_start_unix_ms: run.timeline_start_us / 1000,
            config_version: run.config_version,
            pending_config_version: book.pending.as_ref().map(|p| p.version),
            lease,
            previous,
        }
    }

    /// `GET /_fake/config`: the config in force and the one waiting.
    fn config_view(&self) -> Value {
        let run = self.run();
        let book = lock(&self.book);
        json!({
            "current": {"config_version": run.config_version, "config": config_json(&run.config)},
            "pending": book.pending.as_ref().map(|p| json!({
                "config_version": p.version,
                "config": config_json(&p.config),
            })),
        })
    }

    /// Keeps `config` (already validated, without a token) for the next
    /// reset, replacing any kept before; gives its version.
    fn upload_config(&self, config: ProviderConfig) -> u64 {
        let mut book = lock(&self.book);
        book.last_version += 1;
        let version = book.last_version;
        book.pending = Some(Pending { version, config });
        version
    }

    /// `POST /_fake/lease`: the current run's lease from now on.
    fn renew_lease(&self, request: &LeaseRequest) -> Result<RunInfo, AdminRefusal> {
        let length = lease_length(request.lease_s)?;
        {
            let run = self.run();
            if run.id != request.run_id {
                return Err(AdminRefusal::NotCurrent {
                    asked: request.run_id.clone(),
                    current: run.id.clone(),
                });
            }
            let now_us = self.clock.now_us();
            lock(&self.book).lease_until_us = length.map(|d| now_us + d.as_micros() as u64);
        }
        Ok(self.run_info(None))
    }

    /// `POST /_fake/reset`: checks the lease and the config version, starts
    /// the new run's record file (the run before's becomes FILE.1), then
    /// swaps the run in: new counts, full quota buckets, the timeline from
    /// `start_at`, no pinned phase nor overrides, the pending config.
    pub(crate) async fn reset(&self, request: ResetRequest) -> Result<RunInfo, AdminRefusal> {
        let _one_at_a_time = self.resetting.lock().await;
        let now = Instant::now();
        let now_us = self.clock.us_at(now);
        if let Some(id) = &request.run_id {
            check_run_id(id)?;
        }
        let lease = lease_length(request.lease_s)?;
        let start = timeline_start(&self.clock, now, request.start_at_unix_ms)?;
        let old = self.run();
        let (config, version) = {
            let book = lock(&self.book);
            check_lease(
                &old.id,
                book.lease_until_us,
                now_us,
                request.run_id.as_deref(),
                request.force,
            )?;
            let (version, config) = match &book.pending {
                Some(p) => (p.version, &p.config),
                None => (old.config_version, &old.config),
            };
            if let Some(asked) = request.config_version.filter(|&v| v != version) {
                return Err(AdminRefusal::ConfigVersion {
                    asked,
                    applies: version,
                });
            }
            (config.clone(), version)
        };
        let number = old.number + 1;
        let id = request
            .run_id
            .unwrap_or_else(|| format!("run-{}-{number}", now_us / 1000));
        // The file first: every call of the new run has its line after the
        // rotation, and a line of the old run after it goes to FILE.1.
        let rotated = self
            .records
            .rotate(number)
            .await
            .map_err(|e| AdminRefusal::Io(e.to_string()))?;
        let run = Arc::new(Run::new(id, number, config, version, &self.clock, start));
        {
            let mut c = self.control.write().unwrap_or_else(|e| e.into_inner());
            c.run = run;
            c.pinned = None;
            c.overrides = None;
            c.generation += 1;
        }
        self.down.changed.notify_one();
        {
            let mut book = lock(&self.book);
            book.lease_until_us = lease.map(|d| now_us + d.as_micros() as u64);
            if book.pending.as_ref().is_some_and(|p| p.version == version) {
                book.pending = None;
            }
        }
        Ok(self.run_info(Some(PreviousRun {
            run_id: old.id.clone(),
            records: rotated.written.records,
            records_file: rotated.previous.display().to_string(),
        })))
    }
}

/// `GET /_fake/records?after=N`: the records after position N (in write
/// order), up to the position current now, which the header
/// [`RECORDS_NEXT_HEADER`] gives; streamed from the file (chunked), never
/// read into memory whole.
async fn records_after(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let mut after = 0;
    for (key, value) in query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
    {
        if key == "after" {
            match value.parse::<u64>() {
                Ok(n) => after = n,
                Err(_) => {
                    return admin_json(
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({"error": format!("after must be a count of records already read (0 or more), not `{value}`")}),
                    )
                }
            }
        }
    }
    match shared.records.read_after(after).await {
        Ok((stream, end)) => {
            let body = StreamBody::new(futures_util::StreamExt::map(stream, |chunk| {
                chunk.map(Frame::data)
            }));
            let mut headers = HeaderMap::new();
            headers.insert(RECORDS_NEXT_HEADER, HeaderValue::from(end.records));
            respond(
                StatusCode::OK,
                headers,
                BodyExt::boxed(body),
                "application/x-ndjson",
            )
        }
        Err(e @ ReadError::PastEnd { .. }) => admin_json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": e.to_string(), "run_id": shared.run().id}),
        ),
        Err(e @ ReadError::Reset) => admin_json(
            StatusCode::CONFLICT,
            serde_json::json!({"error": e.to_string(), "run_id": shared.run().id}),
        ),
        Err(e @ ReadError::Io(_)) => admin_json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"error": e.to_string()}),
        ),
    }
}

fn metrics_text(shared: &Shared) -> String {
    use std::fmt::Write;
    let s = shared.stats();
    let mut t = String::new();
    // A named provider's samples are labelled with its name (several
    // served beside each other, scraped into one Prometheus); the default
    // provider's are as they were.
    let run = shared.run();
    let provider = run
        .config
        .name
        .as_deref()
        .map(|n| format!("provider=\"{n}\""));
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(t, "# HELP {name} {help}");
        let _ = writeln!(t, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            match (&provider, labels.strip_prefix('{')) {
                (Some(p), Some(rest)) => {
                    let _ = writeln!(t, "{name}{{{p},{rest} {v}");
                }
                (Some(p), None) => {
                    let _ = writeln!(t, "{name}{{{p}}} {v}");
                }
                (None, _) => {
                    let _ = writeln!(t, "{name}{labels} {v}");
                }
            }
        }
    };
    metric(
        "fake_provider_calls_received_total",
        "counter",
        "Calls received.",
        &[("", s.received)],
    );
    let by: Vec<(String, u64)> = s
        .by_outcome
        .iter()
        .map(|(k, v)| (format!("{{outcome=\"{k}\"}}"), *v))
        .collect();
    let by_ref: Vec<(&str, u64)> = by.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    metric(
        "fake_provider_calls_finished_total",
        "counter",
        "Finished calls by outcome.",
        &by_ref,
    );
    metric(
        "fake_provider_in_service",
        "gauge",
        "Calls in service (past the ceiling).",
        &[("", s.in_service)],
    );
    metric(
        "fake_provider_queued",
        "gauge",
        "Calls waiting in the provider's own queue.",
        &[("", s.queued)],
    );
    metric(
        "fake_provider_in_flight",
        "gauge",
        "Calls not yet finished.",
        &[("", s.in_flight)],
    );
    metric(
        "fake_provider_hung_up_total",
        "counter",
        "Finished calls whose caller hung up early.",
        &[("", s.hung_up)],
    );
    metric(
        "fake_provider_tokens_total",
        "counter",
        "Tokens of finished calls.",
        &[
            ("{kind=\"prompt\"}", s.prompt_tokens),
            ("{kind=\"completion\"}", s.completion_tokens),
        ],
    );
    metric(
        "fake_provider_records_written_total",
        "counter",
        "Records written to the record file by this run.",
        &[("", s.records_written)],
    );
    metric(
        "fake_provider_records_dropped_total",
        "counter",
        "Records not written: over the size cap, or a failed write.",
        &[("", s.records_dropped)],
    );
    let snap = lock(&shared.run().quota).snapshot(shared.clock.secs());
    let mut remaining = Vec::new();
    if let Some((_, r, _)) = snap.requests {
        remaining.push(("{limit=\"requests\"}", r));
    }
    if let Some((_, r, _)) = snap.tokens {
        remaining.push(("{limit=\"tokens\"}", r));
    }
    if !remaining.is_empty() {
        metric(
            "fake_provider_quota_remaining",
            "gauge",
            "What is left in each quota bucket.",
            &remaining,
        );
    }
    let name = "fake_provider_first_byte_seconds";
    help(
        &mut t,
        name,
        "histogram",
        "Streamed calls: from the request read to the answer's first byte (the first token).",
    );
    histogram(
        &mut t,
        name,
        provider.as_deref().unwrap_or(""),
        &run.counters.first_byte,
    );
    vllm_series(&mut t, provider.as_deref(), &run.counters);
    t
}

/// One classic histogram's samples: `labels` (none, or `a="x",b="y"`) on
/// each, `le` beside them on the buckets.
fn histogram(t: &mut String, name: &str, labels: &str, h: &crate::counters::Buckets) {
    use std::fmt::Write;
    let (cumulative, sum) = h.cumulative();
    let (lead, plain) = match labels {
        "" => (String::new(), String::new()),
        l => (format!("{l},"), format!("{{{l}}}")),
    };
    let bounds = h.bounds().iter().map(|b| b.to_string());
    for (le, n) in bounds.chain(["+Inf".to_string()]).zip(&cumulative) {
        let _ = writeln!(t, "{name}_bucket{{{lead}le=\"{le}\"}} {n}");
    }
    let count = cumulative.last().copied().unwrap_or(0);
    let _ = writeln!(t, "{name}_sum{plain} {sum}\n{name}_count{plain} {count}");
}

fn help(t: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write;
    let _ = writeln!(t, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// vLLM's series, under vLLM's names and labels (`model_name`), so that
/// a router reads the provider as it reads a vLLM worker: per model of the
/// run's config (and `other`), the calls running and waiting now, streamed
/// calls' time to first token and answered calls' time from arrival to
/// the end (`provider` labelled too when the provider has a name).
fn vllm_series(t: &mut String, provider: Option<&str>, counters: &crate::counters::Counters) {
    use std::fmt::Write;
    let labels = |model: &str| match provider {
        Some(p) => format!("{p},model_name=\"{model}\""),
        None => format!("model_name=\"{model}\""),
    };
    use std::sync::atomic::Ordering::Relaxed;
    let gauges = [
        (
            "vllm:num_requests_running",
            "Calls in service now (past the concurrency ceiling).",
            false,
        ),
        (
            "vllm:num_requests_waiting",
            "Calls waiting in the provider's queue now.",
            true,
        ),
    ];
    for (name, text, waiting) in gauges {
        help(t, name, "gauge", text);
        for (model, series) in counters.model_series() {
            let n = if waiting {
                &series.waiting
            } else {
                &series.running
            };
            let _ = writeln!(t, "{name}{{{}}} {}", labels(model), n.load(Relaxed));
        }
    }
    let name = "vllm:time_to_first_token_seconds";
    help(
        t,
        name,
        "histogram",
        "Streamed calls: from the request read to the first token.",
    );
    for (model, series) in counters.model_series() {
        histogram(t, name, &labels(model), &series.ttft);
    }
    let name = "vllm:e2e_request_latency_seconds";
    help(
        t,
        name,
        "histogram",
        "Answered calls: from the request read to the answer's end.",
    );
    for (model, series) in counters.model_series() {
        histogram(t, name, &labels(model), &series.e2e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(AUTHORIZATION, HeaderValue::from_static(a));
        }
        h
    }

    #[test]
    fn without_a_token_loopback_only_with_one_the_token_only() {
        let loopback: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let v6: SocketAddr = "[::1]:5000".parse().unwrap();
        let remote: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let (none, good, bad) = (
            headers(None),
            headers(Some("Bearer s3cret")),
            headers(Some("Bearer nope")),
        );
        assert_eq!(access(None, &none, loopback), Access::Granted);
        assert_eq!(access(None, &none, v6), Access::Granted);
        assert_eq!(access(None, &none, remote), Access::NotLoopback);
        assert_eq!(
            access(None, &good, remote),
            Access::NotLoopback,
            "no token configured: remote never"
        );
        let token = Some("s3cret");
        assert_eq!(access(token, &good, remote), Access::Granted);
        assert_eq!(access(token, &good, loopback), Access::Granted);
        assert_eq!(access(token, &bad, remote), Access::WrongToken);
        assert_eq!(
            access(token, &none, loopback),
            Access::NoToken,
            "a port-forward arrives from loopback: it needs the token too"
        );
        assert_eq!(
            access(token, &headers(Some("bearer s3cret")), remote),
            Access::Granted
        );
        assert_eq!(
            access(token, &headers(Some("Basic s3cret")), remote),
            Access::NoToken
        );
        assert_eq!(
            access(token, &headers(Some("Bearer ")), remote),
            Access::NoToken
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        for other in [&b"abd"[..], b"ab", b"abcd", b"", b"xbc"] {
            assert!(!constant_time_eq(other, b"abc"), "{other:?}");
        }
    }

    #[test]
    fn an_uploaded_toml_config_is_refused_at_its_line_and_field() {
        let err = config_from_toml(
            "seed = 1\n[latency]\nmultiplier = 2.0\nttft = { fixed = \"fast\" }\n",
            UPLOAD_ORIGIN,
        )
        .unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.to_string().starts_with("PUT /_fake/config:4:"), "{err}");
        let err = config_from_toml("seed = 1\nadmin_token = \"x\"\n", UPLOAD_ORIGIN).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (2, "admin_token"), "{err}");
        assert!(config_from_toml("completion_tokens = { fixed = 3 }\n", UPLOAD_ORIGIN).is_ok());
    }

    #[test]
    fn an_uploaded_json_config_is_refused_at_its_line_and_field() {
        let ok = config_from_json(
            r#"{"latency": {"ttft": {"fixed": "20ms"}}, "completion_tokens": {"fixed": 3}}"#,
            UPLOAD_ORIGIN,
        )
        .unwrap();
        assert_eq!(ok.completion_tokens, crate::config::Dist::Fixed(3));

        // A type error: serde's position and path.
        let err = config_from_json(
            "{\n  \"seed\": 1,\n  \"latency\": {\n    \"ttft\": {\"fixed\": \"fast\"}\n  }\n}",
            UPLOAD_ORIGIN,
        )
        .unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.field.starts_with("latency.ttft"), "{err}");
        assert!(!err.message.contains(" at line "), "{err}");

        // A rule the validator checks: located by its path in the JSON.
        let text = "{\n  \"timeline\": [\n    {\"name\": \"a\", \"from\": \"1s\"},\n    {\"name\": \"b\", \"from\": \"2s\",\n     \"until\": \"1s\"}\n  ]\n}";
        let err = config_from_json(text, UPLOAD_ORIGIN).unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (5, "timeline[1].until"),
            "{err}"
        );

        let err =
            config_from_json("{\"seed\": 1,\n\"admin_token\": \"x\"}", UPLOAD_ORIGIN).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (2, "admin_token"), "{err}");

        let err = config_from_json("{\"sed\": 1}", UPLOAD_ORIGIN).unwrap_err();
        assert!(err.message.contains("sed"), "{err}");
        assert_eq!(err.line, 1);
    }

    #[test]
    fn json_paths_are_found_where_their_values_are() {
        let text = r#"{"a": {"b": [1, {"c": 2}]}, "d": 3}"#;
        let at = |p: &str| json_locate(text, p).map(|i| &text[i..i + 1]);
        assert_eq!(at("d"), Some("3"));
        assert_eq!(at("a.b[1].c"), Some("2"));
        assert_eq!(at("a.b[0]"), Some("1"));
        assert_eq!(at("a.x"), Some("{"), "the nearest parent present");
        assert_eq!(at("x"), None);
    }
}
