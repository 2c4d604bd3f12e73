//! Retry-After is honoured: a shed person retries no earlier than asked,
//! and no later than the jitter allows; retries are counted apart.

use std::collections::{HashMap, HashSet};

use wire::ClientOutcome;

use crate::rehearse;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_wait_for_retry_after_within_jitter() {
    // A quota of 60 requests a minute: a full bucket of 60, refilled at one
    // a second, so most of a burst of 100 is shed with Retry-After ≤ ~1 s.
    let r = rehearse(
        r#"
[load]
seed = 11
patience = { fixed = "20s" }
[[load.phases]]
duration = "500ms"
rate = 200
[load.retry]
policy = "retry_after"
max_attempts = 3
jitter = 1.0
"#,
        "[quota]\nrequests_per_minute = 60\n",
    )
    .await;
    let shed_first = r
        .client
        .iter()
        .filter(|c| c.attempt == 1 && c.outcome == ClientOutcome::Shed)
        .count();
    assert!(shed_first >= 20, "{shed_first} first attempts shed");
    let by_key: HashMap<(&str, u32), _> = r
        .client
        .iter()
        .map(|c| ((c.id.as_str(), c.attempt), c))
        .collect();
    let mut retries = 0;
    for c in r.client.iter().filter(|c| c.attempt > 1) {
        retries += 1;
        let prev = by_key[&(c.id.as_str(), c.attempt - 1)];
        assert_eq!(prev.outcome, ClientOutcome::Shed);
        assert!(!prev.last);
        let ra_us = prev.retry_after_ms.expect("the 429 said when") * 1000;
        // Never earlier than asked...
        assert!(c.intended_us >= prev.done_us + ra_us, "{prev:?} -> {c:?}");
        assert!(c.sent_us >= prev.done_us + ra_us, "{prev:?} -> {c:?}");
        // ...and within full jitter: at most twice the wait (plus scheduling slack).
        assert!(
            c.intended_us <= prev.done_us + 2 * ra_us + 100_000,
            "{prev:?} -> {c:?}"
        );
    }
    assert!(retries >= 20, "{retries} retries");
    assert!(
        r.client
            .iter()
            .any(|c| c.attempt > 1 && c.outcome == ClientOutcome::Ok),
        "a retry honouring Retry-After was admitted"
    );
    // Attempts beyond max_attempts are never made; the last one says so.
    assert!(r.client.iter().all(|c| c.attempt <= 3));
    assert!(r.client.iter().filter(|c| c.attempt == 3).all(|c| c.last));
    let retried_total: u64 = r.report.outcomes.iter().map(|o| o.retries).sum();
    assert_eq!(retried_total, retries);
    // The provider saw the same id again on a retry.
    let mut seen = HashSet::new();
    assert!(r.provider.iter().any(|p| !seen.insert(p.id.clone())));
}
