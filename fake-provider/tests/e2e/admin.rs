//! The admin API as a remote harness drives it: the token, uploading a
//! config, resets and their lease, the clock.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::Method;

use super::*;

const TOKEN: &str = "s3cret-token";

async fn start_with_token(toml: &str, token: Option<&str>) -> ProviderHandle {
    let mut config = ProviderConfig::from_toml(toml, "test.toml").expect("test config is valid");
    config.admin_token = token.map(str::to_string);
    FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

/// An admin call: status and JSON body (`Null` when the body is not JSON).
async fn call_admin(
    p: &ProviderHandle,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client().request(method, format!("{}{path}", p.base_url()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("admin request sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `PUT /_fake/config` with a body of this content type.
async fn put_config(
    p: &ProviderHandle,
    token: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let mut req = client()
        .put(format!("{}/_fake/config", p.base_url()))
        .header("content-type", content_type)
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

async fn reset(p: &ProviderHandle, token: Option<&str>, body: Value) -> (u16, Value) {
    call_admin(p, Method::POST, "/_fake/reset", token, Some(body)).await
}

/// One call's completion tokens, by its answer's usage.
async fn completion_tokens(p: &ProviderHandle) -> u64 {
    let v: Value = post(p, "/v1/chat/completions", &chat("hi", 100))
        .await
        .json()
        .await
        .unwrap();
    v["usage"]["completion_tokens"].as_u64().unwrap()
}

/// Microseconds since the Unix epoch on this machine's clock.
fn local_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// `GET /_fake/time`, with the local clock read just before and after.
async fn provider_time(p: &ProviderHandle, token: Option<&str>) -> (u64, u64, u64) {
    let before = local_us();
    let (status, v) = call_admin(p, Method::GET, "/_fake/time", token, None).await;
    let after = local_us();
    assert_eq!(status, 200, "{v}");
    (before, v["unix_us"].as_u64().unwrap(), after)
}

/// The records of a file, whole lines only.
fn records_in(path: &PathBuf) -> Vec<ProviderRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn numbered(path: &std::path::Path, k: usize) -> PathBuf {
    PathBuf::from(format!("{}.{k}", path.display()))
}

#[tokio::test]
async fn a_wrong_or_missing_token_gets_401_and_changes_nothing() {
    let p = start_with_token("completion_tokens = { fixed = 3 }\n", Some(TOKEN)).await;
    // The LLM API itself needs no admin token.
    assert_eq!(completion_tokens(&p).await, 3);
    let (_, run_before) = call_admin(&p, Method::GET, "/_fake/run", Some(TOKEN), None).await;

    let new_config = "completion_tokens = { fixed = 9 }\n";
    for token in [
        None,
        Some("wrong"),
        Some("s3cret-toke"),
        Some("s3cret-token-"),
    ] {
        for (method, path, body) in [
            (Method::GET, "/_fake/time", None),
            (Method::GET, "/_fake/stats", None),
            (Method::GET, "/_fake/run", None),
            (Method::GET, "/_fake/records", None),
            (Method::GET, "/_fake/config", None),
            (Method::GET, "/metrics", None),
            (Method::POST, "/_fake/reset", Some(json!({"force": true}))),
            (
                Method::POST,
                "/_fake/lease",
                Some(json!({"run_id": run_before["run_id"], "lease_s": 0})),
            ),
            (Method::POST, "/_fake/phase", Some(json!({"name": null}))),
            (
                Method::POST,
                "/_fake/overrides",
                Some(json!({"completion_tokens": {"fixed": 8}})),
            ),
            (Method::DELETE, "/_fake/overrides", None),
        ] {
            let (status, v) = call_admin(&p, method.clone(), path, token, body).await;
            assert_eq!(status, 401, "{method} {path} with {token:?}: {v}");
            assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
        }
        let (status, v) = put_config(&p, token, "application/toml", new_config).await;
        assert_eq!((status, v["error"].is_string()), (401, true), "{v}");
    }

    // Nothing changed: the same run, nothing pending, the same counts and
    // records, the same answers.
    let (status, run_after) = call_admin(&p, Method::GET, "/_fake/run", Some(TOKEN), None).await;
    assert_eq!(status, 200);
    assert_eq!(run_after["run_id"], run_before["run_id"]);
    assert_eq!(run_after["run_number"], 0);
    assert_eq!(run_after["pending_config_version"], Value::Null);
    let (_, stats) = call_admin(&p, Method::GET, "/_fake/stats", Some(TOKEN), None).await;
    assert_eq!(
        (stats["received"].as_u64(), stats["phase"].as_str()),
        (Some(1), Some("base"))
    );
    assert_eq!(p.records().len(), 1);
    assert_eq!(completion_tokens(&p).await, 3);
    p.shutdown().await;
}

#[tokio::test]
async fn without_a_token_loopback_callers_are_served_and_with_one_they_need_it() {
    let open = start_with_token("", None).await;
    let (before, unix_us, after) = provider_time(&open, None).await;
    assert!((before - 5_000..=after + 5_000).contains(&unix_us));
    open.shutdown().await;

    let locked = start_with_token("", Some(TOKEN)).await;
    // A port-forward arrives from 127.0.0.1: loopback is no pass here.
    let (status, _) = call_admin(&locked, Method::GET, "/_fake/time", None, None).await;
    assert_eq!(status, 401);
    let resp = client()
        .get(format!("{}/_fake/stats", locked.base_url()))
        .header("authorization", format!("bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the scheme's case does not matter");
    locked.shutdown().await;
}

#[tokio::test]
async fn an_uploaded_config_applies_at_the_next_reset() {
    let p = start_with_token(
        "completion_tokens = { fixed = 3 }\n[[timeline]]\nname = \"late\"\nfrom = \"1h\"\n",
        None,
    )
    .await;
    let toml = "completion_tokens = { fixed = 7 }\n[latency]\nttft = { fixed = \"150ms\" }\n";
    let (status, v) = put_config(&p, None, "application/toml", toml).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["config_version"], 1);
    assert_eq!(v["config"]["completion_tokens"], json!({"fixed": 7}));
    assert_eq!(v["config"]["latency"]["ttft"], json!({"fixed": "150ms"}));
    assert!(v["config"].get("admin_token").is_none(), "{v}");

    // Pending until a reset: calls are answered as before.
    let (_, run) = call_admin(&p, Method::GET, "/_fake/run", None, None).await;
    assert_eq!(
        (
            run["config_version"].as_u64(),
            run["pending_config_version"].as_u64()
        ),
        (Some(0), Some(1))
    );
    assert_eq!(completion_tokens(&p).await, 3);
    // A phase pinned and overrides set belong to the run: a reset ends them.
    let (status, _) = call_admin(
        &p,
        Method::POST,
        "/_fake/phase",
        None,
        Some(json!({"name": "late"})),
    )
    .await;
    assert_eq!(status, 200);

    let (status, v) = reset(&p, None, json!({"config_version": 1, "lease_s": 0})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["config_version"].as_u64(),
            v["pending_config_version"].as_u64()
        ),
        (Some(1), None)
    );
    let t = Instant::now();
    assert_eq!(completion_tokens(&p).await, 7);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    let (_, stats) = call_admin(&p, Method::GET, "/_fake/stats", None, None).await;
    assert_eq!(
        stats["phase"], "base",
        "the pinned phase ended with its run"
    );

    // JSON as well, the shape GET /_fake/config gives back (nulls and all).
    let (_, view) = call_admin(&p, Method::GET, "/_fake/config", None, None).await;
    assert_eq!(view["current"]["config_version"], 1);
    let mut config = view["current"]["config"].clone();
    config["completion_tokens"] = json!({"fixed": 5});
    config["concurrency"]["ceiling"] = Value::Null;
    let (status, v) = put_config(&p, None, "application/json", &config.to_string()).await;
    assert_eq!(
        (status, v["config_version"].as_u64()),
        (200, Some(2)),
        "{v}"
    );
    // A reset naming a version that is no longer the pending one: 409.
    let (status, v) = reset(&p, None, json!({"config_version": 1})).await;
    assert_eq!(
        (status, v["config_version"].as_u64()),
        (409, Some(2)),
        "{v}"
    );
    let (status, _) = reset(&p, None, json!({"config_version": 2})).await;
    assert_eq!(status, 200);
    assert_eq!(completion_tokens(&p).await, 5);
    p.shutdown().await;
}

#[tokio::test]
async fn a_bad_config_is_refused_naming_its_line_and_field() {
    let p = start_with_token("completion_tokens = { fixed = 3 }\n", None).await;
    let cases = [
        (
            "application/toml",
            "seed = 1\n[latency]\nttft = { fixed = \"1s\" }\nper_tokn = { fixed = \"1ms\" }\n",
            4,
            "per_tokn",
        ),
        (
            "text/plain",
            "[[timeline]]\nname = \"a\"\nfrom = \"10s\"\nuntil = \"5s\"\n",
            4,
            "timeline[0].until",
        ),
        (
            "application/toml",
            "seed = 1\nadmin_token = \"mine\"\n",
            2,
            "admin_token",
        ),
        (
            "application/json; charset=utf-8",
            "{\n  \"concurrency\": {\n    \"ceiling\": 0\n  }\n}",
            3,
            "concurrency.ceiling",
        ),
        (
            "application/json",
            "{\"seed\": 1,\n \"admin_token\": \"mine\"}",
            2,
            "admin_token",
        ),
    ];
    for (content_type, body, line, field) in cases {
        let (status, v) = put_config(&p, None, content_type, body).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["line"], line, "{body}: {v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.starts_with(&format!("PUT /_fake/config:{line}:")),
            "{error}"
        );
        assert!(error.contains(field), "{error}");
        assert!(v["field"].as_str().unwrap().contains(field), "{v}");
    }
    let (status, v) = put_config(&p, None, "application/json", "{\"seed\": ").await;
    assert_eq!((status, v["line"].as_u64()), (400, Some(1)), "{v}");
    // Nothing was kept.
    let (_, run) = call_admin(&p, Method::GET, "/_fake/run", None, None).await;
    assert_eq!(run["pending_config_version"], Value::Null);
    p.shutdown().await;
}

#[tokio::test]
async fn a_reset_starts_the_run_anew_and_a_call_across_it_keeps_its_run() {
    let p = start_with_token(
        "completion_tokens = { fixed = 2 }\n[quota]\nrequests_per_minute = 3\n[latency]\nttft = { fixed = \"500ms\" }\n",
        None,
    )
    .await;
    let (_, first) = call_admin(&p, Method::GET, "/_fake/run", None, None).await;
    let first_id = first["run_id"].as_str().unwrap().to_string();
    // Two calls done, the third open across the reset: the quota's three
    // requests a minute are spent.
    for _ in 0..2 {
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
    }
    let url = format!("{}/v1/chat/completions", p.base_url());
    let across = tokio::spawn(async move {
        client()
            .post(url)
            .header("x-request-id", "across")
            .json(&chat("hi", 5))
            .send()
            .await
            .unwrap()
            .status()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.stats().in_flight == 0 {
        assert!(Instant::now() < deadline, "the call never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        post(&p, "/v1/chat/completions", &chat("hi", 5))
            .await
            .status(),
        429
    );

    let (status, v) = reset(&p, None, json!({"run_id": "second", "lease_s": 0})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["run_id"].as_str(), v["run_number"].as_u64()),
        (Some("second"), Some(1))
    );
    assert_eq!(v["previous"]["run_id"], first_id.as_str());
    assert_eq!(v["previous"]["records"], 3, "two answers and a 429");
    let (_, stats) = call_admin(&p, Method::GET, "/_fake/stats", None, None).await;
    assert_eq!(stats["run_id"], "second");
    assert_eq!(
        (stats["received"].as_u64(), stats["in_flight"].as_u64()),
        (Some(0), Some(1)),
        "counts start anew; the open call is still in flight: {stats}"
    );
    let resp = client()
        .get(format!("{}/_fake/records?after=0", p.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()[fake_provider::RECORDS_NEXT_HEADER], "0");
    assert_eq!(resp.text().await.unwrap(), "");

    // The call across the reset is answered, and recorded in its own run's
    // file under its run's id; the new run's quota is full.
    assert_eq!(across.await.unwrap(), 200);
    let resp = client()
        .post(format!("{}/v1/chat/completions", p.base_url()))
        .header("x-request-id", "new")
        .json(&chat("hi", 5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the quota was refilled");
    let current = p.records();
    assert_eq!(current.len(), 1, "{current:?}");
    assert_eq!(
        (
            current[0].id.as_str(),
            current[0].run_id.as_str(),
            current[0].seq
        ),
        ("new", "second", 0)
    );
    let earlier = records_in(&numbered(p.records_path(), 1));
    let late = earlier.iter().find(|r| r.id == "across").expect("recorded");
    assert_eq!(late.run_id, first_id);
    assert_eq!(late.outcome, ProviderOutcome::Ok);
    assert!(earlier.iter().all(|r| r.run_id == first_id));
    assert_eq!(earlier.len(), 4);
    let (_, stats) = call_admin(&p, Method::GET, "/_fake/stats", None, None).await;
    assert_eq!(
        (
            stats["received"].as_u64(),
            stats["records_written"].as_u64()
        ),
        (Some(1), Some(1)),
        "{stats}"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_reset_while_a_run_holds_its_lease_gets_409_unless_forced() {
    let p = start_with_token("", Some(TOKEN)).await;
    let t = Some(TOKEN);
    let (status, v) = reset(&p, t, json!({"run_id": "pipeline-a", "lease_s": 60})).await;
    assert_eq!(status, 200, "{v}");
    let expires = v["lease"]["expires_unix_ms"].as_u64().unwrap();
    let remaining = v["lease"]["remaining_ms"].as_u64().unwrap();
    assert!((59_000..=60_000).contains(&remaining), "{v}");

    // Another pipeline, and a reset naming no run: refused, nothing changed.
    for body in [json!({"run_id": "pipeline-b"}), json!({})] {
        let (status, v) = reset(&p, t, body).await;
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["run_id"], "pipeline-a");
        assert_eq!(v["lease_expires_unix_ms"], expires);
        assert!(v["error"].as_str().unwrap().contains("force"), "{v}");
    }
    assert_eq!(p.run_info().run_id, "pipeline-a");
    assert_eq!(p.run_info().run_number, 1);

    // The holder may reset its own run again (a retried reset).
    let (status, v) = reset(&p, t, json!({"run_id": "pipeline-a", "lease_s": 60})).await;
    assert_eq!((status, v["run_number"].as_u64()), (200, Some(2)), "{v}");
    // Forced: taken over.
    let (status, v) = reset(
        &p,
        t,
        json!({"run_id": "pipeline-b", "force": true, "lease_s": 30}),
    )
    .await;
    assert_eq!(
        (status, v["run_id"].as_str()),
        (200, Some("pipeline-b")),
        "{v}"
    );
    assert_eq!(v["previous"]["run_id"], "pipeline-a");

    // Only the current run renews or gives back the lease.
    let lease = |run: &str, s: f64| json!({"run_id": run, "lease_s": s});
    let (status, v) = call_admin(
        &p,
        Method::POST,
        "/_fake/lease",
        t,
        Some(lease("pipeline-a", 0.0)),
    )
    .await;
    assert_eq!(
        (status, v["run_id"].as_str()),
        (409, Some("pipeline-b")),
        "{v}"
    );
    let (status, v) = call_admin(
        &p,
        Method::POST,
        "/_fake/lease",
        t,
        Some(lease("pipeline-b", 0.0)),
    )
    .await;
    assert_eq!((status, &v["lease"]), (200, &Value::Null), "{v}");
    let (status, v) = reset(&p, t, json!({"run_id": "pipeline-c", "lease_s": 0})).await;
    assert_eq!((status, &v["lease"]), (200, &Value::Null), "{v}");

    let (status, v) = reset(&p, t, json!({"run_id": "bad id"})).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = reset(&p, t, json!({"lease_s": -1})).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = reset(&p, t, json!({"forced": true})).await;
    assert_eq!(status, 400, "unknown fields are refused: {v}");
    assert_eq!(p.run_info().run_id, "pipeline-c");
    p.shutdown().await;
}

#[tokio::test]
async fn a_reset_at_a_later_instant_starts_the_timeline_then() {
    let p = start_with_token(
        "[[timeline]]\nname = \"promo\"\nfrom = \"0s\"\nuntil = \"1h\"\ncompletion_tokens = { fixed = 9 }\n",
        None,
    )
    .await;
    let (_, now_us, _) = provider_time(&p, None).await;
    let start_ms = now_us / 1000 + 400;
    let (status, v) = reset(
        &p,
        None,
        json!({"start_at_unix_ms": start_ms, "lease_s": 0}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["timeline_start_unix_ms"], start_ms);
    // Before its start: no phase; from it, phase 0.
    assert_eq!(completion_tokens(&p).await, 16, "the default, phase-less");
    tokio::time::sleep_until((p.started() + Duration::from_millis(20)).into()).await;
    assert_eq!(completion_tokens(&p).await, 9);
    let phases: Vec<String> = p.records().into_iter().map(|r| r.phase).collect();
    assert_eq!(phases, ["base", "promo"]);
    let (status, v) = reset(&p, None, json!({"start_at_unix_ms": now_us / 1_000_000})).await;
    assert_eq!(status, 400, "seconds, not milliseconds: {v}");
    p.shutdown().await;
}

#[tokio::test]
async fn the_provider_clock_is_the_local_clock_unless_shifted_for_a_test() {
    let p = start_with_token("", None).await;
    for _ in 0..3 {
        let (before, unix_us, after) = provider_time(&p, None).await;
        assert!(
            before - 5_000 <= unix_us && unix_us <= after + 5_000,
            "{before} {unix_us} {after}"
        );
    }
    p.shutdown().await;

    for offset_ms in [250i64, -250] {
        let config = ProviderConfig::from_toml("", "t").unwrap();
        let p = FakeProvider::new(config)
            .clock_offset_ms(offset_ms)
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        let shift = |us: u64| us.checked_add_signed(offset_ms * 1000).unwrap();
        let (before, unix_us, after) = provider_time(&p, None).await;
        assert!(
            shift(before) - 5_000 <= unix_us && unix_us <= shift(after) + 5_000,
            "{offset_ms}: {before} {unix_us} {after}"
        );
        let before = local_us();
        post(&p, "/v1/chat/completions", &chat("hi", 5)).await;
        let after = local_us();
        let r = &p.records()[0];
        assert!(
            shift(before) - 5_000 <= r.received_us && r.received_us <= shift(after) + 5_000,
            "{offset_ms}: {before} {} {after}",
            r.received_us
        );
        p.shutdown().await;
    }
}
