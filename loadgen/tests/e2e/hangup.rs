//! A person who runs out of patience hangs up, and the provider sees the
//! hang-up then, long before its answer would have been ready.

use wire::ClientOutcome;

use crate::rehearse;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_at_patience_is_seen_by_the_provider() {
    let r = rehearse(
        r#"
[load]
patience = { fixed = "400ms" }
[[load.phases]]
duration = "500ms"
rate = 10
"#,
        "[latency]\nttft = { fixed = \"5s\" }\n",
    )
    .await;
    assert_eq!(r.client.len(), 5);
    for c in &r.client {
        assert_eq!(c.outcome, ClientOutcome::Timeout, "{c:?}");
        assert_eq!(c.status, None, "no answer came");
        assert_eq!(c.patience_ms, 400);
        let waited = c.latency_us();
        assert!(
            (400_000..2_000_000).contains(&waited),
            "gave up after {waited} µs"
        );
        let p = r
            .provider
            .iter()
            .find(|p| p.id == c.id)
            .unwrap_or_else(|| panic!("the provider saw {}", c.id));
        let hung_up = p
            .hung_up_us
            .unwrap_or_else(|| panic!("the provider saw {} hang up: {p:?}", c.id));
        // Seen at the client's give-up time, well before the 5 s answer.
        assert!(hung_up >= c.done_us - 50_000, "{hung_up} vs {}", c.done_us);
        assert!(hung_up - p.received_us < 3_000_000, "{p:?}");
        assert_eq!(p.first_byte_us, None, "{p:?}");
    }
    assert_eq!(r.report.outcome(ClientOutcome::Timeout).first_attempts, 5);
}
