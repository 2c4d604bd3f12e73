//! The HTTP header names rehearse's parts read and write, lowercase (the
//! form `http::HeaderName::from_static` takes).
//!
//! Who writes and who reads each is said beside it; a part that reads a
//! header names it from here, so a rename cannot leave a reader behind.

/// The person's request id: sent by the load generator on every attempt,
/// passed on by a gateway, recorded by the fake provider (which also echoes
/// it on OpenAI answers). See also the prompt marker,
/// [`marker`](crate::marker).
pub const REQUEST_ID: &str = "x-request-id";

/// The request id on an Anthropic answer (Anthropic's name for it).
pub const ANTHROPIC_REQUEST_ID: &str = "request-id";

/// What is left of the caller's patience, in milliseconds: sent by the load
/// generator when `send_patience` is on, read by the reference gateway's
/// deadline mode, passed on upstream. The default name; both sides let a
/// scenario rename it.
pub const REQUEST_TIMEOUT_MS: &str = "x-request-timeout-ms";

/// On every answer the reference gateway forwards: microseconds the request
/// spent in the gateway before its upstream call.
pub const GATEWAY_QUEUE_WAIT_US: &str = "x-gateway-queue-wait-us";

/// On every answer the reference gateway sheds: why (`queue_full`,
/// `would_miss_deadline`, `wait_expired`, `tenant_limited`,
/// `all_upstreams_cooling`). The older
/// name of [`GATEWAY_REASON`], still written, with the same value, on the
/// refusals for which the provider was never called.
pub const GATEWAY_SHED: &str = "x-gateway-shed";

/// On every refusal the reference gateway answers or passes on: which
/// policy fired, one row of its refusal table (`queue_full`,
/// `would_miss_deadline`, `wait_expired`, `tenant_limited`,
/// `upstream_timeout`, `upstream_refused`, `all_upstreams_cooling`); also the `code` of the JSON
/// error body the gateway writes itself. Lets a person reading a 429 or a
/// 503 tell an entitlement (a tenant's rate limit) from scarcity (load
/// shedding) from the provider's own refusal.
pub const GATEWAY_REASON: &str = "x-gateway-reason";

/// The wait a 429 or 503 asks for, in whole seconds (or an HTTP date, from
/// others): written with [`retry_after_values`](crate::retry_after_values),
/// read with [`parse_retry_after`](crate::parse_retry_after).
pub const RETRY_AFTER: &str = "retry-after";

/// The same wait in milliseconds, as OpenAI and Anthropic send it; a reader
/// prefers it to [`RETRY_AFTER`].
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// Anthropic's API version, on every Anthropic request.
pub const ANTHROPIC_VERSION: &str = "anthropic-version";

/// Anthropic's API key header (OpenAI's is `authorization: Bearer …`).
pub const X_API_KEY: &str = "x-api-key";

/// OpenAI's request-per-minute limit.
pub const RATELIMIT_LIMIT_REQUESTS: &str = "x-ratelimit-limit-requests";
/// OpenAI's requests left in the current minute's bucket.
pub const RATELIMIT_REMAINING_REQUESTS: &str = "x-ratelimit-remaining-requests";
/// OpenAI's time until the request bucket is full, as a Go duration
/// ([`go_duration`](crate::go_duration)).
pub const RATELIMIT_RESET_REQUESTS: &str = "x-ratelimit-reset-requests";
/// OpenAI's token-per-minute limit.
pub const RATELIMIT_LIMIT_TOKENS: &str = "x-ratelimit-limit-tokens";
/// OpenAI's tokens left in the bucket.
pub const RATELIMIT_REMAINING_TOKENS: &str = "x-ratelimit-remaining-tokens";
/// OpenAI's time until the token bucket is full, as a Go duration.
pub const RATELIMIT_RESET_TOKENS: &str = "x-ratelimit-reset-tokens";

/// Anthropic's request-per-minute limit.
pub const ANTHROPIC_RATELIMIT_REQUESTS_LIMIT: &str = "anthropic-ratelimit-requests-limit";
/// Anthropic's requests left.
pub const ANTHROPIC_RATELIMIT_REQUESTS_REMAINING: &str = "anthropic-ratelimit-requests-remaining";
/// When Anthropic's request bucket is full again, RFC 3339 in UTC.
pub const ANTHROPIC_RATELIMIT_REQUESTS_RESET: &str = "anthropic-ratelimit-requests-reset";
/// Anthropic's token-per-minute limit.
pub const ANTHROPIC_RATELIMIT_TOKENS_LIMIT: &str = "anthropic-ratelimit-tokens-limit";
/// Anthropic's tokens left.
pub const ANTHROPIC_RATELIMIT_TOKENS_REMAINING: &str = "anthropic-ratelimit-tokens-remaining";
/// When Anthropic's token bucket is full again, RFC 3339 in UTC.
pub const ANTHROPIC_RATELIMIT_TOKENS_RESET: &str = "anthropic-ratelimit-tokens-reset";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name is a valid lowercase header name, as
    /// `HeaderName::from_static` requires (it panics otherwise).
    #[test]
    fn names_are_lowercase_tokens() {
        for name in [
            REQUEST_ID,
            ANTHROPIC_REQUEST_ID,
            REQUEST_TIMEOUT_MS,
            GATEWAY_QUEUE_WAIT_US,
            GATEWAY_SHED,
            GATEWAY_REASON,
            RETRY_AFTER,
            RETRY_AFTER_MS,
            ANTHROPIC_VERSION,
            X_API_KEY,
            RATELIMIT_LIMIT_REQUESTS,
            RATELIMIT_REMAINING_REQUESTS,
            RATELIMIT_RESET_REQUESTS,
            RATELIMIT_LIMIT_TOKENS,
            RATELIMIT_REMAINING_TOKENS,
            RATELIMIT_RESET_TOKENS,
            ANTHROPIC_RATELIMIT_REQUESTS_LIMIT,
            ANTHROPIC_RATELIMIT_REQUESTS_REMAINING,
            ANTHROPIC_RATELIMIT_REQUESTS_RESET,
            ANTHROPIC_RATELIMIT_TOKENS_LIMIT,
            ANTHROPIC_RATELIMIT_TOKENS_REMAINING,
            ANTHROPIC_RATELIMIT_TOKENS_RESET,
        ] {
            assert!(
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name}"
            );
        }
    }
}
