//! Bad input is answered, never a panic: 413, 400, 404, and 502 at once
//! when the upstream cannot be reached.

use std::time::Duration;

use reference_gateway::Mode;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_bodies_are_refused_in_every_mode() {
    bounded_in_time(async {
        let provider = provider("[latency]\nttft = { fixed = \"1ms\" }\n").await;
        for mode in [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd] {
            let mut cfg = config(mode, &provider);
            cfg.max_body_bytes = 2048;
            let gw = gateway(cfg).await;
            let client = client();
            let url = format!("{}/v1/chat/completions", gw.base_url());

            let big = chat_body("big", 4000, 5, false);
            let r = client.post(&url).body(big).send().await.unwrap();
            assert_eq!(r.status(), 413, "{mode}");
            assert_eq!(
                r.headers()["connection"],
                "close",
                "the unread body spoils the connection"
            );
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "body_too_large");

            // Without a content-length (chunked), the limit holds too.
            let chunks = futures_util::stream::iter(
                (0..10).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 1000]))),
            );
            let r = client
                .post(&url)
                .body(reqwest::Body::wrap_stream(chunks))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 413, "{mode} chunked");

            for bad in ["{not json", "[1,2,3]", "{\"model\":\"m\"}"] {
                let r = client.post(&url).body(bad).send().await.unwrap();
                assert_eq!(r.status(), 400, "{mode}: {bad}");
                let v: serde_json::Value = r.json().await.unwrap();
                assert_eq!(v["error"]["type"], "invalid_request_error");
            }
            let r = client
                .get(format!("{}/nope", gw.base_url()))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404);

            // Still serving after all that.
            let ok = chat(
                &client,
                &gw.base_url(),
                "ok",
                chat_body("ok", 40, 5, false),
                None,
                None,
            )
            .await
            .unwrap();
            assert_eq!(ok.status, 200, "{mode}: {ok:?}");
            assert_eq!(
                metric(&client, &gw.base_url(), "gateway_bad_requests_total").await,
                Some(5.0)
            );
            gw.shutdown().await;
        }
        assert_eq!(
            provider.records().len(),
            4,
            "only the good requests reached the provider"
        );
        provider.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_at_once() {
    bounded_in_time(async {
        // A port that was just free: nothing listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        for mode in [Mode::Naive, Mode::Bounded, Mode::Deadline, Mode::Aimd] {
            let cfg =
                reference_gateway::GatewayConfig::new(mode, format!("http://127.0.0.1:{port}"));
            let gw = gateway(cfg).await;
            let client = client();
            let a = chat(
                &client,
                &gw.base_url(),
                "x",
                chat_body("x", 40, 5, false),
                None,
                None,
            )
            .await
            .unwrap();
            assert_eq!(a.status, 502, "{mode}: {a:?}");
            assert_eq!(a.error_code().as_deref(), Some("upstream_unreachable"));
            // Refused connections fail at once, not after a timeout.
            assert!(
                a.elapsed < Duration::from_secs(1),
                "{mode}: {:?}",
                a.elapsed
            );
            until(|| gw.snapshot().in_flight == 0).await;
            assert_eq!(
                metric(&client, &gw.base_url(), "gateway_upstream_errors_total").await,
                Some(1.0)
            );
            gw.shutdown().await;
        }
    })
    .await;
}
