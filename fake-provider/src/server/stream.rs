//! A streamed answer, paced token by token, owning its call's guard.

use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wire::{Api, Dialect, ProviderOutcome};

use crate::dialect::Answer;
// Scripted delays use the provider's own sub-millisecond timer, not
// tokio's millisecond wheel.
use super::guard::CallGuard;
use crate::timer::sleep_until;

/// A streamed answer, paced token by token. Owning the call's guard means
/// that if hyper drops the body (the caller hung up), the record says so.
pub(super) struct TokenStream {
    pub(super) guard: CallGuard,
    pub(super) answer: Answer,
    pub(super) dialect: Dialect,
    pub(super) api: Api,
    pub(super) include_usage: bool,
    pub(super) first_at: Instant,
    pub(super) per_token: Duration,
    pub(super) next: u32,
    pub(super) head_sent: bool,
    pub(super) cut_at: Option<u32>,
    pub(super) malformed_at: Option<u32>,
    pub(super) cut_now: bool,
    pub(super) finished: bool,
}

impl TokenStream {
    pub(super) fn due(&self, i: u32) -> Instant {
        self.first_at + self.per_token * i
    }

    pub(super) fn cut(&mut self) -> Option<io::Result<Bytes>> {
        self.finished = true;
        self.guard.finish(ProviderOutcome::StreamCut, 200);
        Some(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "stream cut by fault injection",
        )))
    }

    /// The next chunk: every token that is due, sent together (so a tiny
    /// per-token time does not cost one timer per token).
    pub(super) async fn step(&mut self) -> Option<io::Result<Bytes>> {
        if self.finished {
            return None;
        }
        if self.cut_now {
            // Let hyper flush what was sent (it flushes when the body is
            // pending) so the caller sees half a stream, then cut.
            tokio::time::sleep(Duration::from_millis(5)).await;
            return self.cut();
        }
        let n = self.answer.completion_tokens;
        let mut out = Vec::new();
        if !self.head_sent {
            self.head_sent = true;
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_head(&self.answer),
                _ => self.answer.stream_head(self.dialect, self.include_usage),
            });
        } else {
            sleep_until(self.due(self.next)).await;
        }
        let now = Instant::now();
        while self.next < n && self.due(self.next) <= now {
            if self.cut_at == Some(self.next) {
                self.cut_now = true;
                break;
            }
            if self.malformed_at == Some(self.next) {
                out.extend_from_slice(b"data: {\"id\": \"broken\", \"choices\": [\n\n");
            }
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_token(&self.answer, self.next),
                _ => self
                    .answer
                    .stream_token(self.dialect, self.next, self.include_usage),
            });
            self.next += 1;
            self.guard.record.completion_tokens = self.next;
        }
        if self.cut_now {
            // Send what was due first; the cut comes on the next poll.
            return if out.is_empty() {
                self.cut()
            } else {
                Some(Ok(Bytes::from(out)))
            };
        }
        if self.next == n && self.due(n) <= now {
            out.extend_from_slice(&match self.api {
                Api::Responses => crate::api::responses_stream_tail(&self.answer),
                _ => self.answer.stream_tail(self.dialect, self.include_usage),
            });
            self.guard.record.finished_us = Some(self.guard.shared.clock.now_us());
            let outcome = if self.malformed_at.is_some() {
                ProviderOutcome::Malformed
            } else {
                ProviderOutcome::Ok
            };
            self.guard.finish(outcome, 200);
            self.finished = true;
        }
        Some(Ok(Bytes::from(out)))
    }
}
