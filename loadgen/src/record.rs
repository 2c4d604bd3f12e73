//! What the client side records: one [`ClientRecord`] per attempt, with
//! times in microseconds since the Unix epoch from a monotonic [`Clock`].

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A 2xx with a body valid for the dialect.
    Ok,
    /// A 429 or 503 from the gateway.
    Shed,
    /// Any other 4xx or 5xx.
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
    /// the person's.
    Cancelled,
}

impl Outcome {
    /// Every outcome, in report order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Shed,
        Outcome::ProviderError,
        Outcome::Timeout,
        Outcome::ConnectError,
        Outcome::Reset,
        Outcome::Malformed,
        Outcome::Cancelled,
    ];

    /// The name used in records and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Shed => "shed",
            Outcome::ProviderError => "provider_error",
            Outcome::Timeout => "timeout",
            Outcome::ConnectError => "connect_error",
            Outcome::Reset => "reset",
            Outcome::Malformed => "malformed",
            Outcome::Cancelled => "cancelled",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One attempt of one person, as written to `client.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The person's request id (the same on every attempt).
    pub id: String,
    /// 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// When the attempt was due (the schedule, or the retry's due time).
    pub intended_us: u64,
    /// When it was handed to the connection.
    pub sent_us: u64,
    /// When the first byte of the response body arrived (the first event of
    /// a stream), if one did.
    pub first_byte_us: Option<u64>,
    /// When the attempt ended: answer complete, error, or hang-up.
    pub done_us: u64,
    /// The HTTP status, if a response head arrived.
    pub status: Option<u16>,
    /// How it ended.
    pub outcome: Outcome,
    /// The Retry-After of the response, parsed, in milliseconds.
    pub retry_after_ms: Option<u64>,
    /// Completion tokens received (from usage, else counted stream chunks).
    pub tokens: u64,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// True if and only if the person made no further attempt after this one.
    pub last: bool,
    /// The person's patience over all attempts, in milliseconds.
    pub patience_ms: u64,
}

impl ClientRecord {
    /// End-to-end latency of the attempt, from its intended send time.
    pub fn latency_us(&self) -> u64 {
        self.done_us.saturating_sub(self.intended_us)
    }

    /// How late the attempt was sent, compared with its intended time.
    pub fn send_lag_us(&self) -> u64 {
        self.sent_us.saturating_sub(self.intended_us)
    }
}

/// Turns `Instant`s into microseconds since the Unix epoch that never go
/// backwards: one wall-clock reading at the anchor, and the monotonic clock
/// after it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor_instant: Instant,
    anchor_unix_us: u64,
}

impl Clock {
    /// Anchors a clock now.
    pub fn new() -> Self {
        let anchor_instant = Instant::now();
        let anchor_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_micros() as u64;
        Clock {
            anchor_instant,
            anchor_unix_us,
        }
    }

    /// Microseconds since the Unix epoch of `at`.
    pub fn us(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.anchor_instant);
        // An instant before the anchor (it cannot happen in a run, whose
        // instants all come later) is clamped to the anchor.
        self.anchor_unix_us + since.as_micros() as u64
    }

    /// The wall-clock time of `at`, for HTTP dates.
    pub fn system_time(&self, at: Instant) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.us(at))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_as_json() {
        let r = ClientRecord {
            id: "r000001".into(),
            attempt: 2,
            intended_us: 10,
            sent_us: 12,
            first_byte_us: None,
            done_us: 100,
            status: Some(429),
            outcome: Outcome::Shed,
            retry_after_ms: Some(1500),
            tokens: 0,
            stream: false,
            last: true,
            patience_ms: 25_000,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains("\"outcome\":\"shed\""), "{line}");
        let back: ClientRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.latency_us(), 90);
        assert_eq!(back.send_lag_us(), 2);
        for o in Outcome::ALL {
            assert_eq!(
                serde_json::to_string(&o).unwrap(),
                format!("\"{}\"", o.as_str())
            );
        }
    }

    #[test]
    fn clock_is_monotonic_and_in_microseconds() {
        let c = Clock::new();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(3);
        assert_eq!(c.us(t1) - c.us(t0), 3000);
        assert!(c.us(t0) > 1_600_000_000_000_000);
    }
}
