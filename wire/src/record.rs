//! The records a rehearsal leaves behind, one JSON object per line: one
//! [`ClientRecord`] per attempt (`client.jsonl`, written by the load
//! generator), one [`ProviderRecord`] per call (`provider.jsonl`, written by
//! the fake provider), and the gateway's [`RssSample`]s (`rss.jsonl`). The
//! writers serialize these types and the checklist deserializes the same
//! ones, so the two sides cannot drift apart.
//!
//! Times are integer microseconds since the Unix epoch, taken from a
//! [`Clock`](crate::Clock) on each side, so the two sides join by request
//! id and compare in time.
//!
//! Reading is lenient, so that a run directory written by an older version
//! still loads: unknown fields are ignored, and the provider-side fields
//! the checklist does not need (`run_id`, `seq`, `dialect`, `model`,
//! `stream`, `max_tokens`, `reserved_tokens`) default when absent.

use serde::{Deserialize, Serialize};

use crate::{Api, Dialect, RetryAfterHeader, UNRECORDED_GRANULARITY_MS};

/// How an attempt ended, as the load generator saw it.
///
/// A refusal is split by which policy fired (README, "Refusals"): the
/// gateway's reason (`x-gateway-reason` or the body's error `code`) decides
/// first; without a known reason a 429 or 503 is `shed`, a 504
/// `gateway_timeout` and any other status `provider_error` here, and the
/// judge refines each of them by the join with the provider's records
/// ([`ClientOutcome::joined`]): an error answer no call reached the
/// provider for is the gateway's own refusal, whatever its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientOutcome {
    /// A 2xx with a body valid for the dialect.
    Ok,
    /// Refused at admission by the gateway (queue full, would miss its
    /// deadline); a 429 or 503 without a known reason. Older run
    /// directories hold every 429 and 503 under this name.
    Shed,
    /// Dropped at dequeue: it waited in the gateway past its budget or its
    /// deadline (`wait_expired`).
    Stale,
    /// Refused because its tenant is over its entitlement
    /// (`tenant_limited`), whatever the load.
    TenantLimited,
    /// The provider's own refusal passed through by the gateway
    /// (`upstream_refused`).
    UpstreamRefused,
    /// The gateway gave up on the provider call (`upstream_timeout`, or a
    /// 504 without a reason).
    GatewayTimeout,
    /// Any other 4xx or 5xx: as the judge counts it, the provider's error
    /// relayed (a call for it reached the provider and failed there).
    ProviderError,
    /// The person's patience ran out; the client hung up.
    Timeout,
    /// The connection could not be made.
    ConnectError,
    /// The connection broke before the answer was complete.
    Reset,
    /// A 2xx whose body is not valid for the dialect, or an answer that is
    /// not HTTP at all (garbage bytes, a head over the size limit).
    Malformed,
    /// The run was stopped (Ctrl-C, SIGTERM) while this attempt was in
    /// flight, and its grace period ran out: neither the target's fault nor
    /// the person's, neither an answer nor a loss.
    Cancelled,
}

/// Which kind of refusal an attempt met, by when it was refused: the
/// classes `refusals_legible` compares (README, "Refusals").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalClass {
    /// Refused at once, before any wait: the provider never saw it.
    AtAdmission,
    /// Dropped after waiting in the gateway: the provider never saw it.
    AtDequeue,
    /// Its tenant was over its entitlement.
    TenantLimited,
    /// Refused after the provider was called (a timeout, or the
    /// provider's own refusal passed through).
    AfterDispatch,
}

impl RefusalClass {
    /// Every class, in report order.
    pub const ALL: [RefusalClass; 4] = [
        RefusalClass::AtAdmission,
        RefusalClass::AtDequeue,
        RefusalClass::TenantLimited,
        RefusalClass::AfterDispatch,
    ];

    /// The name used in reports (`"at_admission"`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalClass::AtAdmission => "at_admission",
            RefusalClass::AtDequeue => "at_dequeue",
            RefusalClass::TenantLimited => "tenant_limited",
            RefusalClass::AfterDispatch => "after_dispatch",
        }
    }
}

impl RefusalClass {
    /// The class of a refusal by its outcome alone: what its reason, or
    /// its status without one, says. `None` when the outcome is not a
    /// refusal.
    fn by_outcome(outcome: ClientOutcome) -> Option<RefusalClass> {
        Some(match outcome {
            ClientOutcome::Shed => RefusalClass::AtAdmission,
            ClientOutcome::Stale => RefusalClass::AtDequeue,
            ClientOutcome::TenantLimited => RefusalClass::TenantLimited,
            ClientOutcome::UpstreamRefused | ClientOutcome::GatewayTimeout => {
                RefusalClass::AfterDispatch
            }
            _ => return None,
        })
    }
}

/// How the latest provider call made for an attempt before its answer
/// ended, as the provider's record says: what the gateway's answer can
/// have relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderEnd {
    /// The provider refused it for its quota or its capacity: 429, 503 or
    /// 529, whatever the provider's reason.
    Refused,
    /// The provider failed it: another error status, a reset, a malformed
    /// answer or a stream cut.
    Failed,
    /// The gateway gave up on it: it hung up before the call's end, or the
    /// call hung.
    GaveUp,
    /// The provider answered it.
    Answered,
}

impl ProviderEnd {
    /// How a call that ended with `status` (0: none) and `outcome` ended,
    /// `hung_up` when the gateway hung up on it.
    ///
    /// ```
    /// use wire::{ProviderEnd, ProviderOutcome as P};
    /// assert_eq!(ProviderEnd::of(429, P::QuotaExceeded, false), ProviderEnd::Refused);
    /// assert_eq!(ProviderEnd::of(503, P::ErrorStatus, false), ProviderEnd::Refused);
    /// assert_eq!(ProviderEnd::of(500, P::ErrorStatus, false), ProviderEnd::Failed);
    /// assert_eq!(ProviderEnd::of(200, P::Ok, true), ProviderEnd::GaveUp);
    /// assert_eq!(ProviderEnd::of(200, P::Ok, false), ProviderEnd::Answered);
    /// ```
    pub fn of(status: u16, outcome: ProviderOutcome, hung_up: bool) -> ProviderEnd {
        if matches!(status, 429 | 503 | 529) {
            return ProviderEnd::Refused;
        }
        match outcome {
            ProviderOutcome::QuotaExceeded | ProviderOutcome::CapacityRejected => {
                ProviderEnd::Refused
            }
            ProviderOutcome::ErrorStatus
            | ProviderOutcome::Reset
            | ProviderOutcome::StreamCut
            | ProviderOutcome::Malformed
            | ProviderOutcome::BadRequest => ProviderEnd::Failed,
            ProviderOutcome::Hang => ProviderEnd::GaveUp,
            ProviderOutcome::Ok if hung_up => ProviderEnd::GaveUp,
            ProviderOutcome::Ok => ProviderEnd::Answered,
        }
    }

    /// [`ProviderEnd::of`] a provider's record.
    pub fn of_record(c: &ProviderRecord) -> ProviderEnd {
        ProviderEnd::of(c.status, c.outcome, c.hung_up_us.is_some())
    }
}

/// What the join with the provider's records says of an attempt's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Join {
    /// Nothing: there are no provider records to join (a provider the
    /// harness does not see).
    Unknown,
    /// No call made for the attempt reached a provider before its answer.
    NoCall,
    /// Calls reached a provider before the answer; the latest of them
    /// ended so.
    Called(ProviderEnd),
}

impl ClientOutcome {
    /// How an attempt whose answer was not a success is counted, and its
    /// refusal's class (`None`: not a refusal), in the classification
    /// order of the README ("Refusals"):
    ///
    /// 1. the gateway's reason, when it is one of the refusal table's;
    /// 2. else the join: an answer no call reached a provider before is
    ///    the gateway's own refusal, whatever its status (408, 400, 500,
    ///    502 ...): at admission when it came within [`AT_ONCE_US`] of the
    ///    send, else after waiting (stale). One that came after a call
    ///    reached a provider: a 504 is the gateway's timeout; else by how
    ///    the latest call ended ([`ProviderEnd`]): refused by the provider
    ///    (429, 503, 529), the provider's refusal relayed
    ///    (`upstream_refused`); failed at the provider, the provider's
    ///    error relayed (`provider_error`, not a refusal); given up by the
    ///    gateway, its timeout; answered by the provider, the status alone
    ///    (a 429 or 503 `upstream_refused`, any other `provider_error`);
    /// 3. without provider records ([`Join::Unknown`]), the status alone
    ///    ([`ClientOutcome::refused`]).
    ///
    /// Outcomes that are no answer (`timeout`, `reset`, ...) or a success
    /// come back as they are.
    ///
    /// ```
    /// use wire::{ProviderEnd, ClientOutcome as O, Join, RefusalClass as K};
    /// let at = |status, join, waited| O::refused(status, None).joined(Some(status), None, join, waited);
    /// // The gateway's own 408, no call: at once, or after 50 ms held.
    /// assert_eq!(at(408, Join::NoCall, 2_000), (O::Shed, Some(K::AtAdmission)));
    /// assert_eq!(at(408, Join::NoCall, 50_000), (O::Stale, Some(K::AtDequeue)));
    /// // A 502 after the provider's call failed: the provider's error relayed.
    /// assert_eq!(at(502, Join::Called(ProviderEnd::Failed), 9_000), (O::ProviderError, None));
    /// // The provider's 429 passed through: not the gateway's own shed.
    /// assert_eq!(at(429, Join::Called(ProviderEnd::Refused), 9_000), (O::UpstreamRefused, Some(K::AfterDispatch)));
    /// // No provider records: the status alone.
    /// assert_eq!(at(408, Join::Unknown, 50_000), (O::ProviderError, None));
    /// ```
    pub fn joined(
        self,
        status: Option<u16>,
        reason: Option<&str>,
        join: Join,
        waited_us: u64,
    ) -> (ClientOutcome, Option<RefusalClass>) {
        let answered_not_ok = self.is_refusal() || self == ClientOutcome::ProviderError;
        if !answered_not_ok || reason.is_some_and(ClientOutcome::is_table_reason) {
            return (self, RefusalClass::by_outcome(self));
        }
        let after_dispatch = |o: ClientOutcome| (o, Some(RefusalClass::AfterDispatch));
        match join {
            Join::Unknown => (self, RefusalClass::by_outcome(self)),
            Join::NoCall if waited_us < AT_ONCE_US => {
                (ClientOutcome::Shed, Some(RefusalClass::AtAdmission))
            }
            Join::NoCall => (ClientOutcome::Stale, Some(RefusalClass::AtDequeue)),
            Join::Called(_) if status == Some(504) => after_dispatch(ClientOutcome::GatewayTimeout),
            Join::Called(ProviderEnd::Refused) => after_dispatch(ClientOutcome::UpstreamRefused),
            Join::Called(ProviderEnd::GaveUp) => after_dispatch(ClientOutcome::GatewayTimeout),
            Join::Called(ProviderEnd::Failed) => (ClientOutcome::ProviderError, None),
            Join::Called(ProviderEnd::Answered) if self.is_refusal() => {
                after_dispatch(ClientOutcome::UpstreamRefused)
            }
            Join::Called(ProviderEnd::Answered) => (ClientOutcome::ProviderError, None),
        }
    }
}

/// A refusal answered within this long of its send, that the provider
/// never saw, was refused at once (at admission); a longer one waited
/// first. Used only for refusals without a known reason.
pub const AT_ONCE_US: u64 = 20_000;

impl ClientOutcome {
    /// Every outcome, in report order (the order of [`ClientOutcome::index`]).
    pub const ALL: [ClientOutcome; 12] = [
        ClientOutcome::Ok,
        ClientOutcome::Shed,
        ClientOutcome::Stale,
        ClientOutcome::TenantLimited,
        ClientOutcome::UpstreamRefused,
        ClientOutcome::GatewayTimeout,
        ClientOutcome::ProviderError,
        ClientOutcome::Timeout,
        ClientOutcome::ConnectError,
        ClientOutcome::Reset,
        ClientOutcome::Malformed,
        ClientOutcome::Cancelled,
    ];

    /// The name used in records and reports (`"provider_error"`).
    ///
    /// ```
    /// assert_eq!(wire::ClientOutcome::ConnectError.as_str(), "connect_error");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ClientOutcome::Ok => "ok",
            ClientOutcome::Shed => "shed",
            ClientOutcome::Stale => "stale",
            ClientOutcome::TenantLimited => "tenant_limited",
            ClientOutcome::UpstreamRefused => "upstream_refused",
            ClientOutcome::GatewayTimeout => "gateway_timeout",
            ClientOutcome::ProviderError => "provider_error",
            ClientOutcome::Timeout => "timeout",
            ClientOutcome::ConnectError => "connect_error",
            ClientOutcome::Reset => "reset",
            ClientOutcome::Malformed => "malformed",
            ClientOutcome::Cancelled => "cancelled",
        }
    }

    /// The position of this outcome in [`ClientOutcome::ALL`], for arrays
    /// of counters indexed by outcome.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The outcome of an answer with this status and the gateway's reason
    /// (its `x-gateway-reason` header, else its body's error `code`), for a
    /// status that is not a success: the reason when it is one of the
    /// refusal table's, else the status alone (429 and 503 `shed`, 504
    /// `gateway_timeout`, any other `provider_error`). What the load
    /// generator records, not knowing the provider's side; the judge
    /// counts it as [`ClientOutcome::joined`] says.
    ///
    /// ```
    /// use wire::ClientOutcome;
    /// assert_eq!(ClientOutcome::refused(503, Some("wait_expired")), ClientOutcome::Stale);
    /// assert_eq!(ClientOutcome::refused(503, None), ClientOutcome::Shed);
    /// // Every upstream cooling: a shed at admission, whatever its status.
    /// assert_eq!(ClientOutcome::refused(500, Some("all_upstreams_cooling")), ClientOutcome::Shed);
    /// assert!(ClientOutcome::is_table_reason("all_upstreams_cooling"));
    /// assert_eq!(ClientOutcome::refused(500, None), ClientOutcome::ProviderError);
    /// ```
    pub fn refused(status: u16, reason: Option<&str>) -> ClientOutcome {
        match reason {
            Some("queue_full" | "would_miss_deadline" | "all_upstreams_cooling") => {
                ClientOutcome::Shed
            }
            Some("wait_expired") => ClientOutcome::Stale,
            Some("tenant_limited") => ClientOutcome::TenantLimited,
            Some("upstream_refused") => ClientOutcome::UpstreamRefused,
            Some("upstream_timeout") => ClientOutcome::GatewayTimeout,
            _ => match status {
                429 | 503 => ClientOutcome::Shed,
                504 => ClientOutcome::GatewayTimeout,
                _ => ClientOutcome::ProviderError,
            },
        }
    }

    /// Returns true if and only if a gateway's reason is one of the
    /// refusal table's (README, "Refusals").
    pub fn is_table_reason(reason: &str) -> bool {
        matches!(
            reason,
            "queue_full"
                | "would_miss_deadline"
                | "wait_expired"
                | "tenant_limited"
                | "upstream_refused"
                | "upstream_timeout"
                | "all_upstreams_cooling"
        )
    }

    /// Returns true if and only if the outcome is a refusal: `shed`,
    /// `stale`, `tenant_limited`, `upstream_refused` or `gateway_timeout`.
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            ClientOutcome::Shed
                | ClientOutcome::Stale
                | ClientOutcome::TenantLimited
                | ClientOutcome::UpstreamRefused
                | ClientOutcome::GatewayTimeout
        )
    }

    /// Returns true if and only if the gateway refused for scarcity, by
    /// its own decision and before calling the provider: `shed` (at
    /// admission) or `stale` (at dequeue). What `shed_onset`, `retry_after`
    /// and the first shed count; a tenant's entitlement and the provider's
    /// refusals are not scarcity in the gateway.
    pub fn is_gateway_shed(self) -> bool {
        matches!(self, ClientOutcome::Shed | ClientOutcome::Stale)
    }

    /// Returns true if and only if the outcome is an error other than a
    /// refusal or a timeout: `provider_error`, `connect_error`, `reset` or
    /// `malformed`.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            ClientOutcome::ProviderError
                | ClientOutcome::ConnectError
                | ClientOutcome::Reset
                | ClientOutcome::Malformed
        )
    }

    /// Returns true if and only if the attempt ended without an answer, a
    /// shed or a clear error status: `reset`, `connect_error`, `malformed`
    /// or `timeout`.
    pub fn is_silent_loss(self) -> bool {
        matches!(
            self,
            ClientOutcome::Reset
                | ClientOutcome::ConnectError
                | ClientOutcome::Malformed
                | ClientOutcome::Timeout
        )
    }
}

/// One attempt of one person: a line of `client.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The person's request id (the same on every attempt).
    pub id: String,
    /// 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// When the attempt was due (the schedule, or the retry's due time).
    pub intended_us: u64,
    /// When the load generator handed it on: to a connection, or to the
    /// client's wait line for one (see `client_wait_us`). From
    /// `intended_us` to here is the load generator's own lateness, its
    /// send lag, whatever the target does.
    pub sent_us: u64,
    /// How long it waited in the client for a connection after `sent_us`:
    /// all of the callers' pool busy (`[load.clients] pool`), the new
    /// connections per second spent (`connect_rate`), or the load
    /// generator's bound on open connections reached. Part of its latency
    /// (from `intended_us`), not of the target's queue: the request reached
    /// the target no sooner than `sent_us + client_wait_us`. 0, and not
    /// written, when it waited for none (and in older run directories).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub client_wait_us: u64,
    /// When the first byte of the response body arrived (the first event of
    /// a stream), if one did.
    pub first_byte_us: Option<u64>,
    /// When the attempt ended: answer complete, error, shed or hang-up.
    pub done_us: u64,
    /// The HTTP status, if a response head arrived.
    pub status: Option<u16>,
    /// How it ended.
    pub outcome: ClientOutcome,
    /// The Retry-After of the response, parsed, in milliseconds, if any.
    pub retry_after_ms: Option<u64>,
    /// The header it was read from (absent without one, and in older run
    /// directories: see [`ClientRecord::retry_after_granularity_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_header: Option<RetryAfterHeader>,
    /// Completion tokens received (from usage, else counted stream chunks).
    pub tokens: u64,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// True if and only if the person made no further attempt after this one.
    pub last: bool,
    /// The person's patience over all attempts, in milliseconds.
    pub patience_ms: u64,
    /// The gateway's reason for a refusal: its `x-gateway-reason` header,
    /// else the error `code` of its JSON body; absent when it gave none
    /// (and in older run directories). For a `connect_error`, why the
    /// connection could not be made, as the OS said it ("Too many open
    /// files (os error 24)": the load generator's own limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tenant (its name in `[[load.tenants]]`) the person belongs to;
    /// absent for a run of one tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// For an attempt that asked for a stream and got a response body: how
    /// many reads of the body brought data. A read is one time the socket
    /// (or the TLS session) handed the load generator new bytes that the
    /// body's decoding passed on as body (chunk framing alone does not
    /// count; nor do reads that brought nothing). Why: a provider's stream
    /// of N tokens over T seconds reaches a client that is relayed to as it
    /// is made in about N reads; one that reaches it in one or two reads
    /// was buffered whole by something between the provider and the client.
    /// (A large body buffered whole can still take a few back-to-back
    /// reads, a few KiB each: [`ClientRecord::longest_gap_us`] tells those
    /// apart.) `None`, and not written, for an attempt that did not ask for
    /// a stream or got no body, and in older run directories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_reads: Option<u32>,
    /// The longest time between two consecutive reads of the body that
    /// brought data ([`ClientRecord::body_reads`]), in microseconds on the
    /// clock of the record's other times; 0 when the body came in one read.
    /// Why: a relayed stream's longest gap is about the provider's own gap
    /// between tokens, far below the stream's whole duration; a buffered
    /// one has no gap worth the name (its reads come back to back), however
    /// long the stream took upstream. Present exactly when `body_reads` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_gap_us: Option<u64>,
}

/// How the reason of an attempt the load generator never sent begins
/// ([`ClientRecord::was_not_sent`]).
pub const NOT_SENT_PREFIX: &str = "not sent: ";

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ClientRecord {
    /// When the request left the client for the target: its send time
    /// plus its wait for a connection ([`ClientRecord::client_wait_us`]).
    pub fn on_the_wire_us(&self) -> u64 {
        self.sent_us.saturating_add(self.client_wait_us)
    }

    /// Whether the load generator never sent the attempt: a
    /// `connect_error` whose reason begins `not sent: ` (no connection
    /// within the patience at its own bound or the callers' pool, or come
    /// to only after the patience had ended). The gateway never saw it, so
    /// it is no loss of the gateway's.
    pub fn was_not_sent(&self) -> bool {
        self.outcome == ClientOutcome::ConnectError
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(NOT_SENT_PREFIX))
    }

    /// End-to-end latency of the attempt, from its intended send time.
    pub fn latency_us(&self) -> u64 {
        self.done_us.saturating_sub(self.intended_us)
    }

    /// How late the attempt was sent, compared with its intended time.
    pub fn send_lag_us(&self) -> u64 {
        self.sent_us.saturating_sub(self.intended_us)
    }

    /// The finest wait its Retry-After could say, in milliseconds: its
    /// header's ([`RetryAfterHeader::granularity_ms`]), a second when the
    /// record does not say which header (older run directories).
    pub fn retry_after_granularity_ms(&self) -> u64 {
        self.retry_after_header
            .map_or(UNRECORDED_GRANULARITY_MS, RetryAfterHeader::granularity_ms)
    }
}

/// How a provider call ended, as the fake provider decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderOutcome {
    /// Answered (or being answered, if the caller hung up first).
    Ok,
    /// Refused by the quota: 429 with retry-after.
    QuotaExceeded,
    /// Refused at the concurrency ceiling: 429 (OpenAI) or 529 (Anthropic).
    CapacityRejected,
    /// An injected error status.
    ErrorStatus,
    /// An injected connection reset before any answer.
    Reset,
    /// An injected hang: no answer at all.
    Hang,
    /// An injected cut in the middle of a stream.
    StreamCut,
    /// An injected malformed body.
    Malformed,
    /// The request was refused as invalid (400, 404, 413).
    BadRequest,
}

impl ProviderOutcome {
    /// Every outcome, in the order of [`ProviderOutcome::index`].
    pub const ALL: [ProviderOutcome; 9] = [
        ProviderOutcome::Ok,
        ProviderOutcome::QuotaExceeded,
        ProviderOutcome::CapacityRejected,
        ProviderOutcome::ErrorStatus,
        ProviderOutcome::Reset,
        ProviderOutcome::Hang,
        ProviderOutcome::StreamCut,
        ProviderOutcome::Malformed,
        ProviderOutcome::BadRequest,
    ];

    /// The name used in records and metrics (`"quota_exceeded"`).
    ///
    /// ```
    /// assert_eq!(wire::ProviderOutcome::StreamCut.as_str(), "stream_cut");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderOutcome::Ok => "ok",
            ProviderOutcome::QuotaExceeded => "quota_exceeded",
            ProviderOutcome::CapacityRejected => "capacity_rejected",
            ProviderOutcome::ErrorStatus => "error_status",
            ProviderOutcome::Reset => "reset",
            ProviderOutcome::Hang => "hang",
            ProviderOutcome::StreamCut => "stream_cut",
            ProviderOutcome::Malformed => "malformed",
            ProviderOutcome::BadRequest => "bad_request",
        }
    }

    /// The position of this outcome in [`ProviderOutcome::ALL`], for arrays
    /// of counters indexed by outcome.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One call as the provider saw it: a line of `provider.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderRecord {
    /// From `x-request-id`, else a `[rehearse:id=…]` marker in the prompt,
    /// else generated (`fake-N`): the person's id, if the gateway passed
    /// it on.
    pub id: String,
    /// The provider's run the call arrived in (`POST /_fake/reset` starts
    /// one); empty, and not written, when the provider names no run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Arrival order in its run at this provider, from 0.
    #[serde(default)]
    pub seq: u64,
    /// Which provider's dialect.
    #[serde(default)]
    pub dialect: Dialect,
    /// Which of its APIs (records written before there were four: chat).
    #[serde(default)]
    pub api: Api,
    /// The model named.
    #[serde(default)]
    pub model: String,
    /// Streamed or not.
    #[serde(default)]
    pub stream: bool,
    /// The request was fully read.
    pub received_us: u64,
    /// The call got past the provider's own concurrency queue.
    pub admitted_us: Option<u64>,
    /// The first byte of the answer (status line) went out.
    pub first_byte_us: Option<u64>,
    /// The answer was complete, or the call ended otherwise.
    pub finished_us: Option<u64>,
    /// The caller (the gateway) hung up before the answer was complete.
    pub hung_up_us: Option<u64>,
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// The caller's max_tokens, if any.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Completion tokens produced (sent, for a stream cut short).
    pub completion_tokens: u32,
    /// Tokens reserved against the quota at admission.
    #[serde(default)]
    pub reserved_tokens: u64,
    /// Active timeline phases joined by `+`, or `base`.
    pub phase: String,
    /// How the call ended.
    pub outcome: ProviderOutcome,
    /// The HTTP status answered; 0 if none (reset, hang).
    pub status: u16,
    /// The `retry-after` it answered with, in whole seconds (rounded up,
    /// at least 1); `None`, and not written, when it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// The `retry-after-ms` it answered with beside it, the wait exactly
    /// (to the millisecond); `None`, and not written, when it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The name of the scenario's provider that answered (`[[providers]]
    /// name`); `None`, and not written, for the provider named
    /// [`DEFAULT_PROVIDER`] (a scenario's one `[provider]`), so a
    /// one-provider run's file is as it always was. See
    /// [`ProviderRecord::provider_name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// The name of a scenario's one `[provider]`, and of the provider a record
/// without a `provider` field came from.
pub const DEFAULT_PROVIDER: &str = "default";

/// Returns true if and only if `name` can name a provider: 1 to 64 of
/// `a-z`, `0-9`, `_` and `-` (it goes into records, metric labels, file
/// names and environment variables' names as it is).
///
/// ```
/// assert!(wire::is_provider_name("azure-east_2"));
/// assert!(!wire::is_provider_name("Azure"));
/// assert!(!wire::is_provider_name(""));
/// ```
pub fn is_provider_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl ProviderRecord {
    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.completion_tokens)
    }

    /// The name of the provider that answered: its `provider` field, else
    /// [`DEFAULT_PROVIDER`].
    ///
    /// ```
    /// let line = r#"{"id":"r1","received_us":1,"admitted_us":null,"first_byte_us":null,"finished_us":null,"hung_up_us":null,"prompt_tokens":1,"completion_tokens":0,"phase":"base","outcome":"ok","status":200}"#;
    /// let mut r: wire::ProviderRecord = serde_json::from_str(line).unwrap();
    /// assert_eq!(r.provider_name(), "default");
    /// r.provider = Some("secondary".into());
    /// assert_eq!(r.provider_name(), "secondary");
    /// ```
    pub fn provider_name(&self) -> &str {
        self.provider.as_deref().unwrap_or(DEFAULT_PROVIDER)
    }
}

/// The gateway's own gauges at one instant, read from its `metrics_url`
/// (the metric names the scenario gives): a line of
/// `gateway-samples.jsonl`, what a run against a provider the harness does
/// not see (`--provider external`) judges the inside of the gateway by.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GatewaySample {
    /// When, in microseconds since the Unix epoch.
    pub t_us: u64,
    /// Requests waiting inside the gateway (`queue_depth_metric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<f64>,
    /// Calls in flight to the provider (`in_flight_metric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<f64>,
    /// Requests dropped stale so far, a counter (`stale_drops_metric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_drops: Option<f64>,
}

/// The gateway's resident memory at one instant: a line of `rss.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssSample {
    /// When, in microseconds since the Unix epoch.
    pub t_us: u64,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// Its anonymous part in bytes (`RssAnon` in /proc/PID/status, summed
    /// over the process group): the heap and stacks, without the binary's
    /// and libraries' file-backed pages, which come and go with the page
    /// cache and can hide a leak's growth or fake one. Absent where /proc
    /// does not give it (a metric's sample, an older kernel) and from
    /// files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_anon_bytes: Option<u64>,
}

impl RssSample {
    /// The memory the checks judge: the anonymous part when the sample has
    /// it, else the whole resident set.
    ///
    /// ```
    /// let old: wire::RssSample = serde_json::from_str(r#"{"t_us":1,"rss_bytes":300}"#).unwrap();
    /// assert_eq!(old.memory_bytes(), 300);
    /// let new = wire::RssSample { rss_anon_bytes: Some(120), ..old };
    /// assert_eq!(new.memory_bytes(), 120);
    /// ```
    pub fn memory_bytes(&self) -> u64 {
        self.rss_anon_bytes.unwrap_or(self.rss_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_samples_with_and_without_their_anonymous_part_load() {
        // A line written before the anonymous part was sampled.
        let old: RssSample = serde_json::from_str(r#"{"t_us":5,"rss_bytes":4096}"#).unwrap();
        assert_eq!(old.rss_anon_bytes, None);
        assert_eq!(old.memory_bytes(), 4096);
        // Without it, a line is written as before.
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"t_us":5,"rss_bytes":4096}"#
        );
        let new = RssSample {
            rss_anon_bytes: Some(1024),
            ..old
        };
        let line = serde_json::to_string(&new).unwrap();
        assert_eq!(line, r#"{"t_us":5,"rss_bytes":4096,"rss_anon_bytes":1024}"#);
        let back: RssSample = serde_json::from_str(&line).unwrap();
        assert_eq!(back, new);
        assert_eq!(back.memory_bytes(), 1024);
    }

    #[test]
    fn client_record_round_trips_as_json() {
        let r = ClientRecord {
            id: "r000001".into(),
            attempt: 2,
            intended_us: 10,
            sent_us: 12,
            client_wait_us: 0,
            first_byte_us: None,
            done_us: 100,
            status: Some(429),
            outcome: ClientOutcome::Shed,
            retry_after_ms: Some(1500),
            retry_after_header: Some(RetryAfterHeader::RetryAfterMs),
            tokens: 0,
            stream: false,
            last: true,
            patience_ms: 25_000,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains("body_reads"), "{line}");
        assert!(!line.contains("longest_gap_us"), "{line}");
        assert!(line.contains("\"outcome\":\"shed\""), "{line}");
        assert!(
            line.contains("\"retry_after_ms\":1500,\"retry_after_header\":\"retry_after_ms\""),
            "{line}"
        );
        assert!(!line.contains("client_wait_us"), "{line}");
        let back: ClientRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.latency_us(), 90);
        assert_eq!(back.send_lag_us(), 2);
        assert_eq!(back.on_the_wire_us(), 12);
        // A wait in the client for a connection: written, read back, in
        // the latency and not in the send lag.
        let waited = ClientRecord {
            client_wait_us: 30,
            ..r.clone()
        };
        let line = serde_json::to_string(&waited).unwrap();
        assert!(
            line.contains("\"sent_us\":12,\"client_wait_us\":30,"),
            "{line}"
        );
        let back: ClientRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, waited);
        assert_eq!((back.send_lag_us(), back.latency_us()), (2, 90));
        assert_eq!(back.on_the_wire_us(), 42);
        assert!(!back.was_not_sent());
        let not_sent = ClientRecord {
            outcome: ClientOutcome::ConnectError,
            reason: Some(format!("{NOT_SENT_PREFIX}no connection")),
            ..r.clone()
        };
        assert!(not_sent.was_not_sent());
        let refused = ClientRecord {
            reason: Some("connect: connection refused".into()),
            ..not_sent
        };
        assert!(!refused.was_not_sent());
        assert_eq!(back.retry_after_granularity_ms(), 1);
    }

    #[test]
    fn a_streamed_attempt_says_how_its_body_arrived() {
        let line = r#"{"id":"r1","attempt":1,"intended_us":10,"sent_us":12,"first_byte_us":40,"done_us":900,"status":200,"outcome":"ok","retry_after_ms":null,"tokens":20,"stream":true,"last":true,"patience_ms":0,"body_reads":21,"longest_gap_us":45000}"#;
        let r: ClientRecord = serde_json::from_str(line).unwrap();
        assert_eq!((r.body_reads, r.longest_gap_us), (Some(21), Some(45_000)));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            line,
            "written back as read"
        );
    }

    #[test]
    fn a_line_written_before_body_reads_were_recorded_parses() {
        // client.jsonl of an older run: a streamed answer, neither field.
        let r: ClientRecord = serde_json::from_str(
            r#"{"id":"r1","attempt":1,"intended_us":10,"sent_us":12,"first_byte_us":40,
            "done_us":900,"status":200,"outcome":"ok","retry_after_ms":null,"tokens":20,
            "stream":true,"last":true,"patience_ms":25000}"#,
        )
        .unwrap();
        assert!(r.stream);
        assert_eq!((r.body_reads, r.longest_gap_us), (None, None));
    }

    #[test]
    fn every_upstream_cooling_is_a_shed_at_admission_of_the_table() {
        let reason = Some("all_upstreams_cooling");
        for status in [503, 429] {
            assert_eq!(ClientOutcome::refused(status, reason), ClientOutcome::Shed);
        }
        // Its reason classes it, whatever the join says (a queued job
        // refused at dispatch waited; it is still the table's row).
        for (join, waited) in [
            (Join::NoCall, 900_000),
            (Join::Called(ProviderEnd::Refused), 0),
            (Join::Unknown, 0),
        ] {
            assert_eq!(
                ClientOutcome::Shed.joined(Some(503), reason, join, waited),
                (ClientOutcome::Shed, Some(RefusalClass::AtAdmission))
            );
        }
        assert!(ClientOutcome::Shed.is_gateway_shed());
    }

    /// Each error answer by the join: whose refusal or error it was,
    /// whatever its status.
    #[test]
    fn error_answers_are_classed_by_the_join_not_the_status_alone() {
        use ClientOutcome as O;
        use RefusalClass as K;
        let joined = |status: u16, join, waited_us| {
            O::refused(status, None).joined(Some(status), None, join, waited_us)
        };
        // No call reached the provider: the gateway's own refusal, by how
        // long it held the request.
        for status in [408, 400, 500, 502, 429, 503, 504] {
            assert_eq!(
                joined(status, Join::NoCall, AT_ONCE_US - 1),
                (O::Shed, Some(K::AtAdmission)),
                "{status}"
            );
            assert_eq!(
                joined(status, Join::NoCall, 2_000_000),
                (O::Stale, Some(K::AtDequeue)),
                "{status}"
            );
        }
        // A call reached it: by how the latest one ended.
        let called = |status, end| joined(status, Join::Called(end), 900_000);
        for status in [429, 503, 529, 500] {
            assert_eq!(
                called(status, ProviderEnd::Refused),
                (O::UpstreamRefused, Some(K::AfterDispatch)),
                "{status}"
            );
        }
        for status in [502, 500, 503, 429] {
            assert_eq!(
                called(status, ProviderEnd::Failed),
                (O::ProviderError, None)
            );
        }
        for end in [
            ProviderEnd::Refused,
            ProviderEnd::Failed,
            ProviderEnd::Answered,
        ] {
            assert_eq!(
                called(504, end),
                (O::GatewayTimeout, Some(K::AfterDispatch))
            );
        }
        assert_eq!(
            called(502, ProviderEnd::GaveUp),
            (O::GatewayTimeout, Some(K::AfterDispatch))
        );
        // The provider answered; the status alone, as before.
        assert_eq!(
            called(503, ProviderEnd::Answered),
            (O::UpstreamRefused, Some(K::AfterDispatch))
        );
        assert_eq!(called(502, ProviderEnd::Answered), (O::ProviderError, None));
        // Without provider records, the status alone.
        assert_eq!(joined(408, Join::Unknown, 0), (O::ProviderError, None));
        assert_eq!(
            joined(429, Join::Unknown, 900_000),
            (O::Shed, Some(K::AtAdmission))
        );
        // A table reason decides whatever the join says.
        assert_eq!(
            O::Stale.joined(Some(503), Some("wait_expired"), Join::NoCall, 0),
            (O::Stale, Some(K::AtDequeue))
        );
        assert_eq!(
            O::UpstreamRefused.joined(Some(429), Some("upstream_refused"), Join::NoCall, 0),
            (O::UpstreamRefused, Some(K::AfterDispatch))
        );
        // What is no answer, or a success, stays as it is.
        for o in [O::Ok, O::Timeout, O::Reset, O::ConnectError, O::Malformed] {
            assert_eq!(o.joined(None, None, Join::NoCall, 0), (o, None));
        }
    }

    #[test]
    fn a_call_ends_refused_failed_given_up_or_answered() {
        use ProviderOutcome as P;
        assert_eq!(
            ProviderEnd::of(429, P::QuotaExceeded, false),
            ProviderEnd::Refused
        );
        assert_eq!(
            ProviderEnd::of(529, P::CapacityRejected, false),
            ProviderEnd::Refused
        );
        assert_eq!(
            ProviderEnd::of(503, P::ErrorStatus, false),
            ProviderEnd::Refused
        );
        for (status, o) in [
            (500, P::ErrorStatus),
            (0, P::Reset),
            (200, P::StreamCut),
            (200, P::Malformed),
            (400, P::BadRequest),
        ] {
            assert_eq!(
                ProviderEnd::of(status, o, false),
                ProviderEnd::Failed,
                "{o:?}"
            );
        }
        assert_eq!(ProviderEnd::of(0, P::Hang, false), ProviderEnd::GaveUp);
        assert_eq!(ProviderEnd::of(200, P::Ok, true), ProviderEnd::GaveUp);
        assert_eq!(ProviderEnd::of(200, P::Ok, false), ProviderEnd::Answered);
    }

    #[test]
    fn outcome_names_are_their_json_and_their_index_their_place() {
        for (i, o) in ClientOutcome::ALL.into_iter().enumerate() {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<ClientOutcome>(&json).unwrap(), o);
            assert_eq!(o.index(), i);
        }
        for (i, o) in ProviderOutcome::ALL.into_iter().enumerate() {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<ProviderOutcome>(&json).unwrap(), o);
            assert_eq!(o.index(), i);
        }
    }

    #[test]
    fn lines_with_more_fields_parse() {
        let a: ClientRecord = serde_json::from_str(
            r#"{"id":"r1","attempt":1,"intended_us":10,"sent_us":12,"first_byte_us":null,
            "done_us":100,"status":429,"outcome":"shed","retry_after_ms":1500,"tokens":0,
            "stream":false,"last":true,"patience_ms":25000,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(a.outcome, ClientOutcome::Shed);
        assert_eq!(a.retry_after_ms, Some(1500));
        // Written before records said which header: a second's granularity.
        assert_eq!(a.retry_after_header, None);
        assert_eq!(a.retry_after_granularity_ms(), 1000);
        let c: ProviderRecord = serde_json::from_str(
            r#"{"id":"r1","seq":0,"dialect":"openai","model":"m","stream":false,
            "received_us":20,"admitted_us":21,"first_byte_us":30,"finished_us":40,
            "hung_up_us":null,"prompt_tokens":100,"max_tokens":null,"completion_tokens":50,
            "reserved_tokens":150,"phase":"base","outcome":"stream_cut","status":200,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(c.outcome, ProviderOutcome::StreamCut);
        assert_eq!(c.tokens(), 150);
    }

    #[test]
    fn provider_lines_without_the_fields_the_checks_skip_parse() {
        // The shape the checklist's own reader declared: no seq, dialect,
        // model, stream, max_tokens or reserved_tokens.
        let c: ProviderRecord = serde_json::from_str(
            r#"{"id":"r1","received_us":20,"admitted_us":null,"first_byte_us":null,
            "finished_us":40,"hung_up_us":30,"prompt_tokens":100,"completion_tokens":0,
            "outcome":"quota_exceeded","status":429,"phase":"base"}"#,
        )
        .unwrap();
        assert_eq!(c.outcome, ProviderOutcome::QuotaExceeded);
        assert_eq!((c.seq, c.dialect, c.stream), (0, Dialect::OpenAi, false));
        assert_eq!((c.max_tokens, c.reserved_tokens), (None, 0));
        assert_eq!(c.hung_up_us, Some(30));
        assert_eq!(c.run_id, "", "no run named");
    }

    #[test]
    fn a_run_id_is_written_only_when_there_is_one() {
        let line = r#"{"id":"r1","received_us":20,"admitted_us":null,"first_byte_us":null,"finished_us":40,"hung_up_us":null,"prompt_tokens":1,"completion_tokens":0,"phase":"base","outcome":"ok","status":200}"#;
        let mut c: ProviderRecord = serde_json::from_str(line).unwrap();
        assert!(!serde_json::to_string(&c).unwrap().contains("run_id"));
        c.run_id = "run-7".into();
        let written = serde_json::to_string(&c).unwrap();
        assert!(written.contains(r#""run_id":"run-7""#), "{written}");
        let back: ProviderRecord = serde_json::from_str(&written).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn error_and_silent_loss_classes() {
        use ClientOutcome::*;
        let errors: Vec<_> = ClientOutcome::ALL
            .into_iter()
            .filter(|o| o.is_error())
            .collect();
        assert_eq!(errors, [ProviderError, ConnectError, Reset, Malformed]);
        let lost: Vec<_> = ClientOutcome::ALL
            .into_iter()
            .filter(|o| o.is_silent_loss())
            .collect();
        assert_eq!(lost, [Timeout, ConnectError, Reset, Malformed]);
    }
}
