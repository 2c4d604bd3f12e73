//! The records the checklist reads: one [`Attempt`] per line of
//! `client.jsonl`, one [`Call`] per line of `provider.jsonl`, and the
//! gateway's [`RssSample`]s.
//!
//! Only the fields the checks use are declared; unknown fields in a line are
//! ignored, because the writers record more than the checks need.

use serde::{Deserialize, Serialize};

/// How an attempt ended, as the load generator saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientOutcome {
    /// A 2xx with a valid body.
    Ok,
    /// A 429 or 503.
    Shed,
    /// Any other 4xx or 5xx.
    ProviderError,
    /// The person's patience ran out and the client hung up.
    Timeout,
    /// The connection could not be made.
    ConnectError,
    /// The connection broke before the answer was complete.
    Reset,
    /// A 2xx whose body is not valid, or an answer that is not HTTP.
    Malformed,
    /// The run was stopped while the attempt was in flight: neither an
    /// answer nor a loss (a partial report says so).
    Cancelled,
}

impl ClientOutcome {
    /// Returns true if and only if the outcome is an error other than a shed
    /// or a timeout: `provider_error`, `connect_error`, `reset` or
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

    /// The name used in records and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientOutcome::Ok => "ok",
            ClientOutcome::Shed => "shed",
            ClientOutcome::ProviderError => "provider_error",
            ClientOutcome::Timeout => "timeout",
            ClientOutcome::ConnectError => "connect_error",
            ClientOutcome::Reset => "reset",
            ClientOutcome::Malformed => "malformed",
            ClientOutcome::Cancelled => "cancelled",
        }
    }
}

/// One attempt of one person: a line of `client.jsonl`.
///
/// Times are microseconds since the Unix epoch, on the clock the provider
/// side uses too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The person's request id, the same on every attempt.
    pub id: String,
    /// 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// When the attempt was due.
    pub intended_us: u64,
    /// When it was handed to the connection.
    pub sent_us: u64,
    /// When the first byte of the answer arrived, if one did.
    pub first_byte_us: Option<u64>,
    /// When the attempt ended: answer, error, shed or hang-up.
    pub done_us: u64,
    /// The HTTP status, if a response head arrived.
    pub status: Option<u16>,
    /// How it ended.
    pub outcome: ClientOutcome,
    /// The Retry-After of the response, in milliseconds, if any.
    pub retry_after_ms: Option<u64>,
    /// Completion tokens received.
    pub tokens: u64,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// True if and only if the person made no further attempt.
    pub last: bool,
    /// The person's patience over all attempts, in milliseconds.
    pub patience_ms: u64,
}

/// How a provider call ended, as the fake provider decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// Answered (or being answered when the caller hung up).
    Ok,
    /// Refused by the quota.
    QuotaExceeded,
    /// Refused at the concurrency ceiling.
    CapacityRejected,
    /// An injected error status.
    ErrorStatus,
    /// An injected connection reset.
    Reset,
    /// An injected hang.
    Hang,
    /// An injected cut in the middle of a stream.
    StreamCut,
    /// An injected malformed body.
    Malformed,
    /// Refused as invalid.
    BadRequest,
}

/// One call the provider received: a line of `provider.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The request id the call carried (the person's id, if the gateway
    /// forwarded it).
    pub id: String,
    /// The request was fully read.
    pub received_us: u64,
    /// The call got past the provider's own concurrency queue.
    pub admitted_us: Option<u64>,
    /// The first byte of the answer went out.
    pub first_byte_us: Option<u64>,
    /// The answer was complete, or the call ended otherwise.
    pub finished_us: Option<u64>,
    /// The caller (the gateway) hung up before the answer was complete.
    pub hung_up_us: Option<u64>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Completion tokens produced.
    pub completion_tokens: u32,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// The HTTP status answered; 0 if none.
    pub status: u16,
    /// The provider's timeline phase.
    pub phase: String,
}

impl Call {
    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.completion_tokens)
    }
}

/// The gateway's resident memory at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssSample {
    /// When, in microseconds since the Unix epoch.
    pub t_us: u64,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_more_fields_parse() {
        let a: Attempt = serde_json::from_str(
            r#"{"id":"r1","attempt":1,"intended_us":10,"sent_us":12,"first_byte_us":null,
            "done_us":100,"status":429,"outcome":"shed","retry_after_ms":1500,"tokens":0,
            "stream":false,"last":true,"patience_ms":25000,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(a.outcome, ClientOutcome::Shed);
        assert_eq!(a.retry_after_ms, Some(1500));
        let c: Call = serde_json::from_str(
            r#"{"id":"r1","seq":0,"dialect":"openai","model":"m","stream":false,
            "received_us":20,"admitted_us":21,"first_byte_us":30,"finished_us":40,
            "hung_up_us":null,"prompt_tokens":100,"max_tokens":null,"completion_tokens":50,
            "reserved_tokens":150,"phase":"base","outcome":"stream_cut","status":200}"#,
        )
        .unwrap();
        assert_eq!(c.outcome, CallOutcome::StreamCut);
        assert_eq!(c.tokens(), 150);
    }
}
