//! End-to-end tests of the fake provider over real HTTP on 127.0.0.1:0.

use std::time::{Duration, Instant};

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use serde_json::{json, Value};
use wire::{ProviderOutcome, ProviderRecord};

async fn start(toml: &str) -> ProviderHandle {
    let config = ProviderConfig::from_toml(toml, "test.toml").expect("test config is valid");
    FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn chat(content: &str, max_tokens: u32) -> Value {
    json!({"model": "gpt-4o-mini", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": content}]})
}

fn messages(content: &str, max_tokens: u32) -> Value {
    json!({"model": "claude-3-5-haiku-latest", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": content}]})
}

async fn post(p: &ProviderHandle, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", p.base_url()))
        .json(body)
        .send()
        .await
        .expect("request sent")
}

/// Waits until the provider has a record for `id` (records are written when
/// a call ends, which for a hang-up is a moment after the client left).
async fn record_of(p: &ProviderHandle, id: &str) -> ProviderRecord {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = p.records().into_iter().find(|r| r.id == id) {
            return r;
        }
        assert!(Instant::now() < deadline, "no record for {id}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Splits an SSE body into (event name, data) pairs.
fn sse_events(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (event, data)
        })
        .collect()
}

mod api {
    use super::*;

    #[tokio::test]
    async fn openai_plain_answer_has_the_real_shape_and_true_usage() {
        let p = start("completion_tokens = { fixed = 7 }\n").await;
        let prompt = "x".repeat(40); // 10 tokens at 4 characters a token
        let resp = post(&p, "/v1/chat/completions", &chat(&prompt, 100)).await;
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers().get("x-ratelimit-limit-tokens").is_none(),
            "no quota configured"
        );
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["prompt_tokens"], 10);
        assert_eq!(v["usage"]["completion_tokens"], 7);
        assert_eq!(v["usage"]["total_tokens"], 17);
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(wire::estimate_tokens(text.len()), 7);

        // max_completion_tokens caps the answer, and says so.
        let mut body = chat("hi", 100);
        body["max_completion_tokens"] = json!(3);
        let v: Value = post(&p, "/v1/chat/completions", &body)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 3);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn openai_stream_sends_chunks_usage_and_done() {
        let p = start("completion_tokens = { fixed = 5 }\n").await;
        let mut body = chat("abcdefgh", 50);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let resp = post(&p, "/v1/chat/completions", &body).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let text = resp.text().await.unwrap();
        let events = sse_events(&text);
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect();
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let content: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(wire::estimate_tokens(content.len()), 5);
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 5);
        assert_eq!(usage["usage"]["prompt_tokens"], 2);
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "stop"
        );

        // Without include_usage: no usage chunk, still [DONE].
        body["stream_options"] = json!(null);
        let text = post(&p, "/v1/chat/completions", &body)
            .await
            .text()
            .await
            .unwrap();
        assert!(!text.contains("\"usage\""), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"));
        p.shutdown().await;
    }

    #[tokio::test]
    async fn anthropic_plain_and_streamed() {
        let p = start("completion_tokens = { fixed = 4 }\n").await;
        let resp = post(&p, "/v1/messages", &messages("12345678", 100)).await;
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["type"], "message");
        assert_eq!(v["content"][0]["type"], "text");
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["usage"], json!({"input_tokens": 2, "output_tokens": 4}));

        let mut body = messages("12345678", 100);
        body["stream"] = json!(true);
        let text = post(&p, "/v1/messages", &body).await.text().await.unwrap();
        let names: Vec<String> = sse_events(&text)
            .into_iter()
            .map(|(e, _)| e.unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let delta = sse_events(&text)
            .into_iter()
            .find(|(e, _)| e.as_deref() == Some("message_delta"))
            .unwrap();
        let delta: Value = serde_json::from_str(&delta.1).unwrap();
        assert_eq!(delta["usage"]["output_tokens"], 4);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn models_are_listed_in_each_dialect() {
        let p = start("models = [\"m1\", \"m2\"]\n").await;
        let v: Value = client()
            .get(format!("{}/v1/models", p.base_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][1]["id"], "m2");
        let v: Value = client()
            .get(format!("{}/v1/models", p.base_url()))
            .header("anthropic-version", "2023-06-01")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["data"][0]["type"], "model");
        assert_eq!(v["has_more"], false);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn bad_requests_get_the_dialects_error_body() {
        let p = start("max_body_bytes = 1000\n").await;
        let url = format!("{}/v1/chat/completions", p.base_url());
        let resp = client().post(&url).body("{not json").send().await.unwrap();
        assert_eq!(resp.status(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");

        let resp = post(
            &p,
            "/v1/messages",
            &json!({"model": "c", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
        assert_eq!(resp.status(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"));

        let resp = post(&p, "/v1/chat/completions", &chat(&"x".repeat(5000), 10)).await;
        assert_eq!(resp.status(), 413);

        let resp = client()
            .post(format!("{}/v2/nothing", p.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
        let records = p.records();
        assert_eq!(
            records
                .iter()
                .filter(|r| r.outcome == ProviderOutcome::BadRequest)
                .count(),
            2
        );
        p.shutdown().await;
    }
}

mod ids {
    use super::*;

    #[tokio::test]
    async fn id_from_header_then_marker_then_generated() {
        let p = start("").await;
        let resp = client()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", "hdr-1")
            .json(&chat("[rehearse:id=marker-ignored] hi", 5))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["x-request-id"], "hdr-1");
        post(
            &p,
            "/v1/messages",
            &messages("ctx ... [rehearse:id=r000042] question", 5),
        )
        .await;
        post(&p, "/v1/chat/completions", &chat("untagged", 5)).await;
        let ids: Vec<String> = p.records().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["hdr-1", "r000042", "fake-2"]);
        p.shutdown().await;
    }
}

mod latency {
    use super::*;

    #[tokio::test]
    async fn non_streamed_takes_ttft_plus_n_per_token() {
        let p = start(
            "completion_tokens = { fixed = 10 }\n[latency]\nttft = { fixed = \"150ms\" }\nper_token = { fixed = \"10ms\" }\n",
        )
        .await;
        let t = Instant::now();
        let resp = post(&p, "/v1/chat/completions", &chat("hi", 100)).await;
        assert_eq!(resp.status(), 200);
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(250), "{took:?}");
        let r = &p.records()[0];
        let service = r.finished_us.unwrap() - r.admitted_us.unwrap();
        assert!(
            (250_000..260_000).contains(&service),
            "service {service} us"
        );
        p.shutdown().await;
    }

    #[tokio::test]
    async fn time_to_first_token_grows_with_the_prompt_and_the_timeline_changes_it() {
        let p = start(
            "completion_tokens = { fixed = 2 }\n[latency]\nprefill_per_token = \"1ms\"\n\
             [[timeline]]\nname = \"slow-read\"\nfrom = \"0s\"\nlatency = { prefill_per_token = \"2ms\" }\n",
        )
        .await;
        // 400 characters: 100 prompt tokens (plus the marker's), 2 ms each.
        let long = format!("[rehearse:id=long] {}", "x".repeat(400));
        post(&p, "/v1/chat/completions", &chat(&long, 10)).await;
        post(
            &p,
            "/v1/chat/completions",
            &chat("[rehearse:id=short] hi", 10),
        )
        .await;
        let ttft = |r: &ProviderRecord| r.first_byte_us.unwrap() - r.admitted_us.unwrap();
        let (long, short) = (record_of(&p, "long").await, record_of(&p, "short").await);
        let expected = u64::from(long.prompt_tokens) * 2_000;
        assert!(
            (expected..expected + 40_000).contains(&ttft(&long)),
            "{long:?}"
        );
        assert!(
            ttft(&short) < u64::from(short.prompt_tokens) * 2_000 + 40_000,
            "{short:?}"
        );
        assert!(
            ttft(&short) >= u64::from(short.prompt_tokens) * 2_000,
            "{short:?}"
        );
        p.shutdown().await;
    }

    #[tokio::test]
    async fn streamed_tokens_are_paced() {
        let p = start(
            "completion_tokens = { fixed = 5 }\n[latency]\nttft = { fixed = \"100ms\" }\nper_token = { fixed = \"50ms\" }\n",
        )
        .await;
        let mut body = chat("hi", 100);
        body["stream"] = json!(true);
        let t = Instant::now();
        let mut resp = post(&p, "/v1/chat/completions", &body).await;
        let mut arrivals = Vec::new();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            let text = String::from_utf8_lossy(&chunk).to_string();
            if text.contains("\"content\":\"") && !text.contains("\"content\":\"\"") {
                arrivals.push(t.elapsed());
            }
        }
        // Tokens at 100, 150, 200, 250, 300 ms (the first rides with the head).
        assert!(arrivals.len() >= 4, "{arrivals:?}");
        assert!(arrivals[0] >= Duration::from_millis(100), "{arrivals:?}");
        let last = *arrivals.last().unwrap();
        assert!(last >= Duration::from_millis(300), "{arrivals:?}");
        let r = &p.records()[0];
        // The first byte after the TTFT, not after a token's 50 ms more
        // (nor twice the TTFT): under 150 ms leaves a busy machine's late
        // timers room (120 ms seen) and still catches either mistake.
        let ttfb = r.first_byte_us.unwrap() - r.admitted_us.unwrap();
        assert!((100_000..150_000).contains(&ttfb), "ttfb {ttfb}");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn same_seed_same_draws() {
        let cfg = "seed = 42\ncompletion_tokens = { lognormal = { median = 50, p99 = 400 } }\n";
        let mut runs = Vec::new();
        for _ in 0..2 {
            let p = start(cfg).await;
            let mut got = Vec::new();
            for _ in 0..8 {
                let v: Value = post(&p, "/v1/chat/completions", &chat("hi", 1000))
                    .await
                    .json()
                    .await
                    .unwrap();
                got.push(v["usage"]["completion_tokens"].as_u64().unwrap());
            }
            runs.push(got);
            p.shutdown().await;
        }
        assert_eq!(runs[0], runs[1]);
        assert!(
            runs[0].iter().any(|&n| n != runs[0][0]),
            "draws vary: {:?}",
            runs[0]
        );
    }
}

mod ceiling {
    use super::*;

    #[tokio::test]
    async fn beyond_the_ceiling_calls_queue_fifo() {
        let p =
            start("[latency]\nttft = { fixed = \"300ms\" }\n[concurrency]\nceiling = 2\n").await;
        let base = p.base_url();
        let mut tasks = Vec::new();
        for i in 0..4 {
            let url = format!("{base}/v1/chat/completions");
            tasks.push(tokio::spawn(async move {
                client()
                    .post(url)
                    .header("x-request-id", format!("q{i}"))
                    .json(&chat("hi", 5))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = p.stats();
        assert_eq!((stats.in_service, stats.queued), (2, 2), "{stats:?}");
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        for i in 2..4 {
            let r = record_of(&p, &format!("q{i}")).await;
            let wait = r.admitted_us.unwrap() - r.received_us;
            assert!(wait >= 200_000, "q{i} waited {wait} us");
        }
        let r0 = record_of(&p, "q0").await;
        assert!(r0.admitted_us.unwrap() - r0.received_us < 20_000);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn reject_mode_answers_429_or_529() {
        let p = start("[latency]\nttft = { fixed = \"400ms\" }\n[concurrency]\nceiling = 1\noverflow = \"reject\"\n").await;
        let base = p.base_url();
        let hold = tokio::spawn(async move {
            client()
                .post(format!("{base}/v1/chat/completions"))
                .json(&chat("hi", 5))
                .send()
                .await
                .unwrap()
                .status()
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resp = post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert_eq!(resp.status(), 429);
        let resp = post(&p, "/v1/messages", &messages("hi", 5)).await;
        assert_eq!(resp.status(), 529);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["type"], "overloaded_error");
        assert_eq!(hold.await.unwrap(), 200);
        let rejected = p
            .records()
            .iter()
            .filter(|r| r.outcome == ProviderOutcome::CapacityRejected)
            .count();
        assert_eq!(rejected, 2);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn bounded_queue_rejects_when_full() {
        let p = start("[latency]\nttft = { fixed = \"400ms\" }\n[concurrency]\nceiling = 1\nqueue_limit = 1\n").await;
        let base = p.base_url();
        let mut held = Vec::new();
        for _ in 0..2 {
            let url = format!("{base}/v1/chat/completions");
            held.push(tokio::spawn(async move {
                client()
                    .post(url)
                    .json(&chat("hi", 5))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let resp = post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert_eq!(resp.status(), 429);
        for h in held {
            assert_eq!(h.await.unwrap(), 200);
        }
        p.shutdown().await;
    }
}

mod quota {
    use super::*;

    #[tokio::test]
    async fn over_quota_is_429_with_retry_after_and_true_headers() {
        // 600 tokens a minute = 10 per second. Each call reserves
        // prompt (2) + max_tokens (248) = 250 tokens.
        let p = start("completion_tokens = { fixed = 8 }\n[quota]\ntokens_per_minute = 600\nrequests_per_minute = 100\n").await;
        let body = chat("abcdefgh", 248);
        let r1 = post(&p, "/v1/chat/completions", &body).await;
        assert_eq!(r1.status(), 200);
        let h = r1.headers();
        assert_eq!(h["x-ratelimit-limit-tokens"], "600");
        assert_eq!(h["x-ratelimit-limit-requests"], "100");
        assert_eq!(h["x-ratelimit-remaining-requests"], "99");
        // 600 - 250 reserved (the call had not settled when headers were made).
        assert_eq!(h["x-ratelimit-remaining-tokens"], "350");
        // 250 tokens at 10/s: 25 s to full.
        assert_eq!(h["x-ratelimit-reset-tokens"], "25s");
        // Settled: 2 + 8 = 10 used, 240 given back.
        let r2 = post(&p, "/v1/chat/completions", &body).await;
        assert_eq!(r2.status(), 200);
        let rem: u64 = r2.headers()["x-ratelimit-remaining-tokens"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((340..=345).contains(&rem), "remaining {rem}");
        // Both settled: 600 - 10 - 10 = 580 left. Ask for all 600: 20
        // missing at 10 per second, a wait of 2 s.
        let big = chat("abcdefgh", 598);
        let r3 = post(&p, "/v1/chat/completions", &big).await;
        assert_eq!(r3.status(), 429);
        let ms: u64 = r3.headers()["retry-after-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let secs: u64 = r3.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1_800..=2_000).contains(&ms), "retry-after-ms {ms}");
        assert_eq!(secs, ms.div_ceil(1000));
        let v: Value = r3.json().await.unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        assert_eq!(v["error"]["type"], "tokens");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Limit 600"));
        // A 429 costs nothing: a small call still fits.
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("abcdefgh", 20))
                .await
                .status(),
            200
        );
        p.shutdown().await;
    }

    #[tokio::test]
    async fn retry_after_is_when_it_fits() {
        // 6000 tokens/min = 100 per second; a call reserves 2 + 5998, the
        // whole bucket, and settles 2 + 16 (the default completion).
        let p = start("[quota]\ntokens_per_minute = 6000\n").await;
        let drain = chat("abcdefgh", 5998);
        assert_eq!(post(&p, "/v1/chat/completions", &drain).await.status(), 200);
        // 18 tokens missing at 100 per second: 180 ms.
        let r = post(&p, "/v1/chat/completions", &drain).await;
        assert_eq!(r.status(), 429);
        let ms: u64 = r.headers()["retry-after-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((100..=180).contains(&ms), "{ms}");
        tokio::time::sleep(Duration::from_millis(ms + 20)).await;
        assert_eq!(
            post(&p, "/v1/chat/completions", &drain).await.status(),
            200,
            "admitted once retry-after-ms passed"
        );
        p.shutdown().await;
    }

    /// At time scale 10 a bucket holds one scenario minute (6 real
    /// seconds) of its rate-scaled limit, not ten: 5 requests a minute
    /// becomes 50 a real minute with a burst of 5, and 6,000 tokens a
    /// minute 60,000 with a burst of 6,000.
    #[tokio::test]
    async fn a_time_scaled_quota_bursts_one_scenario_minute() {
        let config = ProviderConfig::from_toml(
            "[quota]\nrequests_per_minute = 5\ntokens_per_minute = 6000\n",
            "test.toml",
        )
        .unwrap()
        .scaled(wire::Scale {
            time: 10.0,
            quota: 1.0,
        });
        let p = FakeProvider::new(config)
            .bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        // Larger than the bucket (2 + 6,999 > 6,000), though not than the
        // limit per minute: it never fits, and says so.
        let r = post(&p, "/v1/chat/completions", &chat("abcdefgh", 6999)).await;
        assert_eq!(r.status(), 429);
        assert!(r.headers().get("retry-after").is_none());
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("Limit 6000, Requested 7001"), "{message}");
        // A burst: 5 served, then refused until the bucket refills, at 50 a
        // real minute (one every 1.2 s).
        let started = Instant::now();
        let mut statuses = Vec::new();
        let mut refused = None;
        for _ in 0..8 {
            let r = post(&p, "/v1/chat/completions", &chat("abcdefgh", 10)).await;
            statuses.push(r.status().as_u16());
            if r.status() == 429 && refused.is_none() {
                refused = Some(r.headers().clone());
            }
        }
        let refills = (started.elapsed().as_secs_f64() / 1.2).floor() as usize;
        let served = statuses.iter().filter(|&&s| s == 200).count();
        assert_eq!(statuses[..5], [200; 5], "{statuses:?}");
        assert!(
            served <= 5 + refills,
            "{statuses:?} in {:?}",
            started.elapsed()
        );
        let h = refused.unwrap_or_else(|| panic!("no 429 in {statuses:?}"));
        // The limit per minute as scaled; the bucket's remaining and reset.
        assert_eq!(h["x-ratelimit-limit-requests"], "50");
        assert_eq!(h["x-ratelimit-remaining-requests"], "0");
        assert_eq!(h["x-ratelimit-limit-tokens"], "60000");
        let reset =
            wire::parse_go_duration(h["x-ratelimit-reset-requests"].to_str().unwrap()).unwrap();
        assert!(reset <= Duration::from_secs(6), "{reset:?}");
        let ms: u64 = h["retry-after-ms"].to_str().unwrap().parse().unwrap();
        assert!(ms <= 1_200, "retry-after-ms {ms}");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn anthropic_headers_are_rfc3339() {
        let p = start("[quota]\ntokens_per_minute = 6000\nrequests_per_minute = 60\n").await;
        let r = post(&p, "/v1/messages", &messages("hi", 100)).await;
        let h = r.headers();
        assert_eq!(h["anthropic-ratelimit-tokens-limit"], "6000");
        assert_eq!(h["anthropic-ratelimit-requests-remaining"], "59");
        let reset = h["anthropic-ratelimit-tokens-reset"].to_str().unwrap();
        let at = time::OffsetDateTime::parse(reset, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{reset}: {e}"));
        let ahead = at - time::OffsetDateTime::now_utc();
        assert!(
            ahead.whole_seconds() >= 0 && ahead.whole_seconds() <= 3,
            "{reset}"
        );
        p.shutdown().await;
    }
}

mod faults {
    use super::*;

    #[tokio::test]
    async fn error_status_with_dialect_body() {
        let p = start("[faults]\nerrors = { \"503\" = 1.0 }\n").await;
        let r = post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert_eq!(r.status(), 503);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].is_string());
        let r = post(&p, "/v1/messages", &messages("hi", 5)).await;
        assert_eq!(r.status(), 503);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn reset_closes_without_an_answer() {
        let p = start("[faults]\nreset = 1.0\n").await;
        let err = client()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .json(&chat("hi", 5))
            .send()
            .await
            .expect_err("a reset gives no response");
        assert!(!err.is_timeout(), "{err:?}");
        assert_eq!(p.records()[0].outcome, ProviderOutcome::Reset);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn hang_never_answers_and_the_hang_up_is_recorded() {
        let p = start("[faults]\nhang = 1.0\n").await;
        let err = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", "h1")
            .timeout(Duration::from_millis(300))
            .json(&chat("hi", 5))
            .send()
            .await
            .expect_err("a hang gives no response");
        assert!(err.is_timeout());
        let r = record_of(&p, "h1").await;
        assert_eq!(r.outcome, ProviderOutcome::Hang);
        assert!(r.hung_up_us.is_some());
        p.shutdown().await;
    }

    #[tokio::test]
    async fn stream_cut_stops_mid_way() {
        let p = start("completion_tokens = { fixed = 10 }\n[faults]\nstream_cut = 1.0\n").await;
        let mut body = chat("hi", 100);
        body["stream"] = json!(true);
        let resp = post(&p, "/v1/chat/completions", &body).await;
        assert_eq!(resp.status(), 200);
        let got = resp.text().await;
        assert!(got.is_err(), "the body must end in an error, got {got:?}");
        let r = record_of(&p, "fake-0").await;
        assert_eq!(r.outcome, ProviderOutcome::StreamCut);
        assert_eq!(r.completion_tokens, 5);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn malformed_body_is_not_json() {
        let p = start("[faults]\nmalformed = 1.0\n").await;
        let r = post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
        let mut body = chat("hi", 50);
        body["stream"] = json!(true);
        let text = post(&p, "/v1/chat/completions", &body)
            .await
            .text()
            .await
            .unwrap();
        let bad = sse_events(&text)
            .into_iter()
            .filter(|(_, d)| d != "[DONE]" && serde_json::from_str::<Value>(d).is_err())
            .count();
        assert_eq!(bad, 1, "{text}");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn rates_are_rates() {
        let p = start("seed = 3\n[faults]\nerrors = { \"500\" = 0.3 }\n").await;
        let mut errors = 0;
        for _ in 0..200 {
            if post(&p, "/v1/chat/completions", &chat("hi", 5))
                .await
                .status()
                == 500
            {
                errors += 1;
            }
        }
        assert!(
            (35..=85).contains(&errors),
            "{errors} of 200 at a rate of 0.3"
        );
        p.shutdown().await;
    }
}

mod hang_ups {
    use super::*;

    #[tokio::test]
    async fn a_caller_leaving_mid_call_is_recorded_and_generation_stops() {
        let p = start("completion_tokens = { fixed = 100 }\n[latency]\nttft = { fixed = \"100ms\" }\nper_token = { fixed = \"20ms\" }\n").await;
        // Non-streamed: the caller leaves during the 2.1 s of generation.
        let _ = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", "plain")
            .timeout(Duration::from_millis(400))
            .json(&chat("hi", 500))
            .send()
            .await;
        let r = record_of(&p, "plain").await;
        let left = r.hung_up_us.expect("hang-up recorded") - r.received_us;
        assert!((350_000..800_000).contains(&left), "left after {left} us");
        // Streamed: read a few chunks, then drop the response.
        let mut body = chat("hi", 500);
        body["stream"] = json!(true);
        let mut resp = client()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", "streamed")
            .json(&body)
            .send()
            .await
            .unwrap();
        for _ in 0..3 {
            resp.chunk().await.unwrap();
        }
        drop(resp);
        let r = record_of(&p, "streamed").await;
        assert!(r.hung_up_us.is_some());
        assert!(
            r.completion_tokens < 20,
            "generation stopped at {}",
            r.completion_tokens
        );
        assert_eq!(p.stats().in_flight, 0);
        p.shutdown().await;
    }

    #[tokio::test]
    async fn a_caller_leaving_the_queue_frees_its_place() {
        let p =
            start("[latency]\nttft = { fixed = \"300ms\" }\n[concurrency]\nceiling = 1\n").await;
        let base = p.base_url();
        let first = tokio::spawn({
            let url = format!("{base}/v1/chat/completions");
            async move {
                client()
                    .post(url)
                    .json(&chat("hi", 5))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .header("x-request-id", "quitter")
            .timeout(Duration::from_millis(100))
            .json(&chat("hi", 5))
            .send()
            .await;
        let r = record_of(&p, "quitter").await;
        assert!(r.admitted_us.is_none(), "never admitted");
        assert!(r.hung_up_us.is_some());
        assert_eq!(first.await.unwrap(), 200);
        assert_eq!(p.stats().queued, 0);
        p.shutdown().await;
    }
}

mod timeline {
    use super::*;

    #[tokio::test]
    async fn phases_change_calls_admitted_after_them() {
        let p = start(
            "[latency]\nttft = { fixed = \"20ms\" }\n[[timeline]]\nname = \"slow\"\nfrom = \"400ms\"\nuntil = \"1s\"\nlatency = { multiplier = 10.0 }\n",
        )
        .await;
        let t = Instant::now();
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        let fast = t.elapsed();
        tokio::time::sleep_until((p.started() + Duration::from_millis(450)).into()).await;
        let t = Instant::now();
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        let slow = t.elapsed();
        tokio::time::sleep_until((p.started() + Duration::from_millis(1050)).into()).await;
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert!(fast < Duration::from_millis(150), "{fast:?}");
        assert!(slow >= Duration::from_millis(200), "{slow:?}");
        let phases: Vec<String> = p.records().into_iter().map(|r| r.phase).collect();
        assert_eq!(phases, ["base", "slow", "base"]);
        p.shutdown().await;
    }

    /// `/health` answers as a vLLM worker's: 200 (GET and HEAD), then 503
    /// while a phase says `health = "failing"`, then 200 again.
    #[tokio::test]
    async fn health_fails_during_a_failing_phase_only() {
        let p = start(
            "[[timeline]]\nname = \"sick\"\nfrom = \"300ms\"\nuntil = \"900ms\"\nhealth = \"failing\"\n",
        )
        .await;
        let url = format!("{}/health", p.base_url());
        let before = client().get(&url).send().await.unwrap();
        let head = client().head(&url).send().await.unwrap();
        assert_eq!(
            (before.status().as_u16(), head.status().as_u16()),
            (200, 200)
        );
        tokio::time::sleep_until((p.started() + Duration::from_millis(500)).into()).await;
        let during = client().get(&url).send().await.unwrap().status();
        let head = client().head(&url).send().await.unwrap().status();
        assert_eq!((during.as_u16(), head.as_u16()), (503, 503));
        // Calls are still served: the health check is what fails.
        let call = post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert_eq!(call.status(), 200);
        tokio::time::sleep_until((p.started() + Duration::from_millis(1000)).into()).await;
        assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
        p.shutdown().await;
    }

    /// A call sent with `x-request-id: id`, through a client of its own
    /// (no pooled connection a cut left dead), that gives up after `wait`.
    async fn call_with_id(
        p: &ProviderHandle,
        id: &str,
        wait: Duration,
    ) -> Result<reqwest::Response, reqwest::Error> {
        reqwest::Client::builder()
            .timeout(wait)
            .build()
            .unwrap()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", id)
            .json(&chat("hi", 5))
            .send()
            .await
    }

    /// `down = "refuse"`: the call in flight when the phase begins is cut
    /// (the caller sees the connection end; the record says `reset`, not a
    /// hang-up), connections are refused during it, and the provider
    /// listens again on the same port when it ends.
    #[tokio::test]
    async fn a_refuse_phase_cuts_the_calls_refuses_connections_and_comes_back() {
        let p = start(
            "[[timeline]]\nname = \"slow\"\nfrom = \"0s\"\nuntil = \"400ms\"\nlatency = { ttft = { fixed = \"5s\" } }\n\
             [[timeline]]\nname = \"gone\"\nfrom = \"400ms\"\nuntil = \"1s\"\ndown = \"refuse\"\n",
        )
        .await;
        let started = p.started();
        let in_flight = call_with_id(&p, "cut-1", Duration::from_secs(10)).await;
        assert!(in_flight.is_err(), "the call was answered: {in_flight:?}");
        let cut_after = started.elapsed();
        assert!(
            cut_after < Duration::from_secs(3),
            "cut only after {cut_after:?}"
        );
        tokio::time::sleep_until((started + Duration::from_millis(600)).into()).await;
        let refused = tokio::net::TcpStream::connect(p.addr()).await;
        assert_eq!(
            refused.map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionRefused)
        );
        tokio::time::sleep_until((started + Duration::from_millis(1200)).into()).await;
        let back = call_with_id(&p, "after-1", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(back.status(), 200);
        let cut = record_of(&p, "cut-1").await;
        assert_eq!((cut.outcome, cut.status), (ProviderOutcome::Reset, 0));
        assert_eq!(cut.hung_up_us, None, "recorded as a hang-up: {cut:?}");
        assert_eq!(cut.phase, "slow");
        p.shutdown().await;
    }

    /// `down = "hang"`: the call in flight is cut when it begins; during
    /// it calls, /health and /v1/models are read and never answered (a
    /// caller that gives up is recorded `hang` and hung up; one still
    /// waiting is cut at the end, `hang` without a hang-up), the admin API
    /// still answers, and after it everything is served again.
    #[tokio::test]
    async fn a_hang_phase_holds_every_call_until_it_ends_and_then_serves() {
        let p = start(
            "[[timeline]]\nname = \"slow\"\nfrom = \"0s\"\nuntil = \"300ms\"\nlatency = { ttft = { fixed = \"5s\" } }\n\
             [[timeline]]\nname = \"stuck\"\nfrom = \"300ms\"\nuntil = \"1200ms\"\ndown = \"hang\"\n",
        )
        .await;
        let started = p.started();
        assert!(call_with_id(&p, "cut-2", Duration::from_secs(10))
            .await
            .is_err());
        tokio::time::sleep_until((started + Duration::from_millis(400)).into()).await;
        let quick = reqwest::Client::builder()
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let health = quick.get(format!("{}/health", p.base_url())).send().await;
        assert!(health.unwrap_err().is_timeout());
        let stats = client()
            .get(format!("{}/_fake/stats", p.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(stats.status(), 200, "the admin API hangs too");
        let (gave_up, waited) = tokio::join!(
            call_with_id(&p, "gave-up", Duration::from_millis(200)),
            call_with_id(&p, "waited", Duration::from_secs(10)),
        );
        assert!(gave_up.unwrap_err().is_timeout());
        let waited = waited.unwrap_err();
        assert!(!waited.is_timeout(), "{waited}");
        assert!(started.elapsed() >= Duration::from_millis(1150));
        tokio::time::sleep_until((started + Duration::from_millis(1300)).into()).await;
        assert_eq!(
            call_with_id(&p, "after-2", Duration::from_secs(10))
                .await
                .unwrap()
                .status(),
            200
        );
        let health = client()
            .get(format!("{}/health", p.base_url()))
            .send()
            .await;
        assert_eq!(health.unwrap().status(), 200);
        let cut = record_of(&p, "cut-2").await;
        assert_eq!(
            (cut.outcome, cut.hung_up_us),
            (ProviderOutcome::Reset, None)
        );
        let gave_up = record_of(&p, "gave-up").await;
        assert_eq!(gave_up.outcome, ProviderOutcome::Hang);
        assert!(gave_up.hung_up_us.is_some(), "{gave_up:?}");
        assert_eq!(gave_up.phase, "stuck");
        let waited = record_of(&p, "waited").await;
        assert_eq!(
            (waited.outcome, waited.hung_up_us),
            (ProviderOutcome::Hang, None)
        );
        p.shutdown().await;
    }

    /// Pinning a down phase through the admin API takes the provider down
    /// at once (not at the phase's time), and unpinning brings it back.
    #[tokio::test]
    async fn pinning_a_refuse_phase_closes_the_port_until_unpinned() {
        let p = start("[[timeline]]\nname = \"gone\"\nfrom = \"1h\"\ndown = \"refuse\"\n").await;
        assert_eq!(
            call_with_id(&p, "a", Duration::from_secs(10))
                .await
                .unwrap()
                .status(),
            200
        );
        p.set_phase(Some("gone")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokio::net::TcpStream::connect(p.addr()).await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "still listening when pinned down"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        p.set_phase(None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokio::net::TcpStream::connect(p.addr()).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "not listening again when unpinned"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            call_with_id(&p, "b", Duration::from_secs(10))
                .await
                .unwrap()
                .status(),
            200
        );
        p.shutdown().await;
    }

    /// `start_timeline_now` moves `t = 0` of the phases to now: a phase
    /// from 300 ms that the provider's own start would already have begun
    /// is not in force until 300 ms after the restart, and the run keeps
    /// its id and its arrival numbers.
    #[tokio::test]
    async fn the_timeline_starts_again_when_a_harness_says_so() {
        let p = start("[[timeline]]\nname = \"late\"\nfrom = \"300ms\"\nfaults = { errors = { \"503\" = 1.0 } }\n").await;
        let id = p.run_info().run_id;
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("a", 2))
                .await
                .status(),
            503
        );
        p.start_timeline_now();
        let restarted = Instant::now();
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("b", 2))
                .await
                .status(),
            200
        );
        assert!(p.started() >= restarted - Duration::from_millis(50));
        tokio::time::sleep_until((restarted + Duration::from_millis(350)).into()).await;
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("c", 2))
                .await
                .status(),
            503
        );
        assert_eq!(p.run_info().run_id, id);
        p.sync_records().await;
        let seqs: Vec<u64> = p.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [0, 1, 2], "arrival numbers go on");
        p.shutdown().await;
    }

    #[tokio::test]
    async fn admin_api_pins_a_phase_and_sets_overrides() {
        let p = start("[[timeline]]\nname = \"down\"\nfrom = \"1h\"\nfaults = { errors = { \"500\" = 1.0 } }\n").await;
        let admin = |path: &str| format!("{}{path}", p.base_url());
        let r = client()
            .post(admin("/_fake/phase"))
            .json(&json!({"name": "down"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("hi", 5))
                .await
                .status(),
            500
        );
        let r = client()
            .post(admin("/_fake/phase"))
            .json(&json!({"name": "nope"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        client()
            .post(admin("/_fake/phase"))
            .json(&json!({"name": null}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            post(&p, "/v1/chat/completions", &chat("hi", 5))
                .await
                .status(),
            200
        );

        let r = client()
            .post(admin("/_fake/overrides"))
            .json(&json!({"concurrency": {"ceiling": 1}, "latency": {"ttft": {"fixed": "300ms"}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let t = Instant::now();
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert!(t.elapsed() >= Duration::from_millis(300));
        let r = client()
            .post(admin("/_fake/overrides"))
            .json(&json!({"faults": {"reset": 2.0}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "invalid overrides are refused");
        let r = client()
            .post(admin("/_fake/overrides"))
            .json(&json!({"latency": {"bogus": 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "unknown fields are refused");
        client()
            .delete(admin("/_fake/overrides"))
            .send()
            .await
            .unwrap();
        let t = Instant::now();
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        assert!(t.elapsed() < Duration::from_millis(200));
        p.shutdown().await;
    }
}

#[path = "e2e/apis.rs"]
mod apis;
#[path = "e2e/records.rs"]
mod records;

#[path = "e2e/admin.rs"]
mod remote_admin;

mod admin {
    use super::*;

    #[tokio::test]
    async fn stats_records_and_metrics_agree() {
        let p = start("[quota]\ntokens_per_minute = 100000\n").await;
        for i in 0..3 {
            client()
                .post(format!("{}/v1/chat/completions", p.base_url()))
                .header("x-request-id", format!("m{i}"))
                .json(&chat("hi", 5))
                .send()
                .await
                .unwrap();
        }
        let stats: Value = client()
            .get(format!("{}/_fake/stats", p.base_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stats["received"], 3);
        assert_eq!(stats["by_outcome"]["ok"], 3);
        assert_eq!(stats["in_flight"], 0);
        let records = client()
            .get(format!("{}/_fake/records", p.base_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let lines: Vec<ProviderRecord> = records
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2].id, "m2");
        let metrics = client()
            .get(format!("{}/metrics", p.base_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("fake_provider_calls_finished_total{outcome=\"ok\"} 3"),
            "{metrics}"
        );
        assert!(metrics.contains("# TYPE fake_provider_in_service gauge"));
        assert!(metrics.contains("fake_provider_quota_remaining{limit=\"tokens\"}"));
        // The first-byte histogram counts streamed calls only: none yet,
        // then the one streamed below, in a bucket at or under +Inf.
        assert!(
            metrics.contains("fake_provider_first_byte_seconds_count 0"),
            "{metrics}"
        );
        let mut body = chat("hi", 5);
        body["stream"] = json!(true);
        let streamed = client()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        streamed.text().await.unwrap();
        let metrics = client()
            .get(format!("{}/metrics", p.base_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("fake_provider_first_byte_seconds_count 1")
                && metrics.contains("fake_provider_first_byte_seconds_bucket{le=\"+Inf\"} 1"),
            "{metrics}"
        );
        p.shutdown().await;
    }

    /// vLLM's series, per model: a call in service and one queued behind a
    /// ceiling of 1 show as running and waiting under their model's name;
    /// once answered, the streamed one is in the time-to-first-token
    /// histogram and both in the end-to-end one, each under its model.
    #[tokio::test]
    async fn vllm_series_count_each_model_s_calls_running_waiting_and_answered() {
        let p = start(
            "[concurrency]\nceiling = 1\noverflow = \"queue\"\n[latency]\nttft = { fixed = \"600ms\" }\n",
        )
        .await;
        let scrape = || async {
            client()
                .get(format!("{}/metrics", p.base_url()))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        };
        let mut streamed = messages("hi", 5);
        streamed["stream"] = json!(true);
        let first = post(&p, "/v1/messages", &streamed);
        let second = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            post(&p, "/v1/chat/completions", &chat("hi", 5)).await
        };
        let during = async {
            tokio::time::sleep(Duration::from_millis(350)).await;
            scrape().await
        };
        let (first, second, during) = tokio::join!(first, second, during);
        for line in [
            "vllm:num_requests_running{model_name=\"claude-3-5-haiku-latest\"} 1",
            "vllm:num_requests_waiting{model_name=\"gpt-4o-mini\"} 1",
            "vllm:num_requests_running{model_name=\"gpt-4o-mini\"} 0",
            "# TYPE vllm:time_to_first_token_seconds histogram",
        ] {
            assert!(during.contains(line), "no `{line}` in\n{during}");
        }
        first.text().await.unwrap();
        second.text().await.unwrap();
        let after = scrape().await;
        for line in [
            "vllm:num_requests_running{model_name=\"claude-3-5-haiku-latest\"} 0",
            "vllm:num_requests_waiting{model_name=\"gpt-4o-mini\"} 0",
            "vllm:time_to_first_token_seconds_count{model_name=\"claude-3-5-haiku-latest\"} 1",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"claude-3-5-haiku-latest\",le=\"0.5\"} 0",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"claude-3-5-haiku-latest\",le=\"0.75\"} 1",
            "vllm:time_to_first_token_seconds_count{model_name=\"gpt-4o-mini\"} 0",
            "vllm:e2e_request_latency_seconds_count{model_name=\"gpt-4o-mini\"} 1",
            "vllm:e2e_request_latency_seconds_count{model_name=\"claude-3-5-haiku-latest\"} 1",
            "vllm:e2e_request_latency_seconds_count{model_name=\"other\"} 0",
        ] {
            assert!(after.contains(line), "no `{line}` in\n{after}");
        }
        p.shutdown().await;
    }
}

mod sdk {
    use super::*;

    /// The official `openai` and `anthropic` Python SDKs, unmodified, pointed
    /// at the fake provider: plain and streamed calls, usage, and a 429 the
    /// SDK turns into its RateLimitError.
    #[tokio::test]
    async fn official_python_sdks_work_unmodified() {
        let p =
            start("completion_tokens = { fixed = 6 }\n[quota]\ntokens_per_minute = 3000\n").await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk_check.py");
        let out = tokio::process::Command::new("python3")
            .arg(script)
            .arg(p.base_url())
            .env("OPENAI_API_KEY", "sk-rehearse")
            .env("ANTHROPIC_API_KEY", "sk-ant-rehearse")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("ANTHROPIC_BASE_URL")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(50), out)
            .await
            .expect("the SDK script finished in time")
            .expect(
                "python3 runs (install it, and `pip install openai anthropic`, as .ci/run does)",
            );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "SDK check failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(stdout.contains("ALL SDK CHECKS PASSED"), "{stdout}");
        // The SDKs really called us: 2 openai + 2 anthropic + the 429.
        let records = p.records();
        assert!(
            records
                .iter()
                .filter(|r| r.outcome == ProviderOutcome::Ok)
                .count()
                >= 4,
            "{records:?}"
        );
        assert!(records
            .iter()
            .any(|r| r.outcome == ProviderOutcome::QuotaExceeded));
        p.shutdown().await;
    }

    /// The official `openai` SDK's Responses, embeddings and Azure
    /// clients, unmodified, each call but the first through a 429 (one
    /// request a second) that the SDK's retries wait out.
    #[tokio::test]
    async fn official_sdk_speaks_responses_embeddings_and_azure_through_429s() {
        let p = start(
            "completion_tokens = { fixed = 6 }\n[quota]\nrequests_per_minute = 60\nwindow = \"1s\"\n",
        )
        .await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk_apis_check.py");
        let out = tokio::process::Command::new("python3")
            .arg(script)
            .arg(p.base_url())
            .env_remove("OPENAI_BASE_URL")
            .env_remove("AZURE_OPENAI_ENDPOINT")
            .env_remove("OPENAI_API_VERSION")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(50), out)
            .await
            .expect("the SDK script finished in time")
            .expect("python3 runs (and `pip install openai`, as .ci/run does)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("ALL SDK API CHECKS PASSED"),
            "SDK check failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let records = p.records();
        for (id, api) in [
            ("sdk-resp-plain", wire::Api::Responses),
            ("sdk-resp-stream", wire::Api::Responses),
            ("sdk-emb", wire::Api::Embeddings),
            ("sdk-azure-chat", wire::Api::Chat),
        ] {
            let calls: Vec<_> = records.iter().filter(|r| r.id == id).collect();
            let (first, last) = (calls[0], calls[calls.len() - 1]);
            // One refusal, then an answer: a retry sooner than the
            // Retry-After said would have been refused again.
            assert_eq!(calls.len(), 2, "{id}: {calls:?}");
            assert_eq!(first.outcome, ProviderOutcome::QuotaExceeded, "{id}");
            assert_eq!((last.outcome, last.api), (ProviderOutcome::Ok, api), "{id}");
            let waited = last.received_us - first.received_us;
            assert!(waited >= 100_000, "{id}: retried after {waited} us");
        }
        p.shutdown().await;
    }
}

/// Hostile clients, from raw sockets: slow-loris heads, bodies that never
/// finish, oversized heads and bodies, malformed JSON, invalid UTF-8,
/// pipelined garbage, thousands of idle connections. Each must get a 4xx or
/// a close in bounded time, and a normal client is served quickly while
/// the abusers are still connected.
mod hostile {
    use super::*;
    use std::net::SocketAddr;
    use test_support::suite::{self, HostileTarget, QUICK};

    /// Read guards as the suite expects (`HEADER_TIMEOUT`, `BODY_TIMEOUT`:
    /// 3 s), a 64 KiB body limit, answers at once.
    const CONFIG: &str = "max_body_bytes = 65536\nheader_read_timeout = \"3s\"\nbody_read_timeout = \"3s\"\n[latency]\nttft = { fixed = \"1ms\" }\nper_token = { fixed = \"0ms\" }\n";

    struct Provider<'a>(&'a ProviderHandle);

    impl HostileTarget for Provider<'_> {
        fn addr(&self) -> SocketAddr {
            self.0.addr()
        }

        async fn normal_ok(&self) {
            let start = Instant::now();
            let resp =
                tokio::time::timeout(QUICK, post(self.0, "/v1/chat/completions", &chat("hi", 4)))
                    .await
                    .expect("a normal request is answered quickly during the abuse");
            assert_eq!(resp.status(), 200);
            resp.bytes().await.expect("the body");
            assert!(start.elapsed() < QUICK, "{:?}", start.elapsed());
        }

        fn chat_body(&self) -> String {
            chat("hi", 4).to_string()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_loris_heads_are_closed_and_others_served() {
        let p = start(CONFIG).await;
        suite::slow_loris_heads_are_closed_and_others_served(&Provider(&p)).await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_never_finishes_gets_408_in_bounded_time() {
        let p = start(CONFIG).await;
        suite::a_body_that_never_finishes_gets_408_in_bounded_time(&Provider(&p)).await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oversized_heads_and_bodies_are_refused_at_once() {
        let p = start(CONFIG).await;
        suite::oversized_heads_and_bodies_are_refused_at_once(&Provider(&p)).await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_json_and_invalid_utf8_get_400() {
        let p = start(CONFIG).await;
        suite::malformed_json_and_invalid_utf8_get_400(&Provider(&p)).await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_garbage_after_a_valid_request_is_refused() {
        let p = start(CONFIG).await;
        suite::pipelined_garbage_after_a_valid_request_is_refused(&Provider(&p)).await;
        p.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_thousand_idle_connections_do_not_stop_service() {
        let p = start(CONFIG).await;
        suite::two_thousand_idle_connections_do_not_stop_service(&Provider(&p)).await;
        p.shutdown().await;
    }
}
