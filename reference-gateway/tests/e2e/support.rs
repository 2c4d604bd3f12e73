//! Shared by the topic modules: start a provider and a gateway, send chat
//! requests, read `/metrics`.

use std::future::Future;
use std::time::{Duration, Instant};

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use reference_gateway::{Gateway, GatewayConfig, GatewayHandle, Mode};
use tokio_util::sync::CancellationToken;

/// Every test must end by itself, well within a minute.
pub const TEST_LIMIT: Duration = Duration::from_secs(50);

/// Runs `test` under [`TEST_LIMIT`].
pub async fn bounded_in_time<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_LIMIT, test)
        .await
        .expect("the test ran past its time limit");
}

/// Held by the tests that keep up sustained load for seconds (hundreds of
/// requests a second), so that two of them never share the machine's few
/// cores and skew each other's timing. Taken before the time limit starts.
pub static SUSTAINED_LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn provider(toml: &str) -> ProviderHandle {
    let config = ProviderConfig::from_toml(toml, "test-provider.toml").expect("provider config");
    FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind the fake provider")
}

pub fn config(mode: Mode, provider: &ProviderHandle) -> GatewayConfig {
    GatewayConfig::new(mode, provider.base_url())
}

pub async fn gateway(config: GatewayConfig) -> GatewayHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the gateway");
    Gateway::new(config)
        .expect("valid gateway config")
        .serve(listener, CancellationToken::new())
        .expect("serve")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

/// An OpenAI chat body whose prompt carries the id marker.
pub fn chat_body(id: &str, prompt_chars: usize, max_tokens: u64, stream: bool) -> String {
    let marker = wire::marker(id).to_string();
    let pad = prompt_chars.saturating_sub(marker.len());
    serde_json::json!({
        "model": "gpt-4o-mini",
        "max_tokens": max_tokens,
        "stream": stream,
        "messages": [{"role": "user", "content": format!("{marker}{}", "x".repeat(pad))}],
    })
    .to_string()
}

/// What a caller saw.
#[derive(Debug, Clone)]
pub struct Answer {
    pub id: String,
    pub status: u16,
    pub retry_after: Option<u64>,
    pub retry_after_ms: Option<u64>,
    pub body: String,
    /// From send to the end of the body.
    pub elapsed: Duration,
    pub headers: reqwest::header::HeaderMap,
}

impl Answer {
    pub fn error_code(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        v["error"]["code"].as_str().map(str::to_string)
    }

    /// The value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }
}

fn header_u64(r: &reqwest::Response, name: &str) -> Option<u64> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// Sends one chat request. The caller hangs up after `hang_up_after` (the
/// client's timeout); `patience_ms` goes in the `x-request-timeout-ms` header.
pub async fn chat(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    body: String,
    hang_up_after: Option<Duration>,
    patience_ms: Option<u64>,
) -> Result<Answer, reqwest::Error> {
    let start = Instant::now();
    let mut req = client
        .post(format!("{base}/v1/chat/completions"))
        .header("x-request-id", id)
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = hang_up_after {
        req = req.timeout(t);
    }
    if let Some(ms) = patience_ms {
        req = req.header("x-request-timeout-ms", ms.to_string());
    }
    answer(id, start, req).await
}

/// Sends `req` and reads the whole answer.
pub async fn answer(
    id: &str,
    start: Instant,
    req: reqwest::RequestBuilder,
) -> Result<Answer, reqwest::Error> {
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let retry_after = header_u64(&resp, "retry-after");
    let retry_after_ms = header_u64(&resp, "retry-after-ms");
    let headers = resp.headers().clone();
    let body = resp.text().await?;
    Ok(Answer {
        id: id.to_string(),
        status,
        retry_after,
        retry_after_ms,
        body,
        elapsed: start.elapsed(),
        headers,
    })
}

/// Sends one OpenAI chat request (prompt of 40 characters, `max_tokens`
/// 40: 50 tokens), with `key` as its bearer token when given.
pub async fn chat_as(client: &reqwest::Client, base: &str, key: Option<&str>, id: &str) -> Answer {
    let mut req = client
        .post(format!("{base}/v1/chat/completions"))
        .header("x-request-id", id)
        .header("content-type", "application/json")
        .body(chat_body(id, 40, 40, false));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    answer(id, Instant::now(), req).await.expect("an answer")
}

/// Asserts that `a` is the refusal table's row `reason`: its status, its
/// `x-gateway-reason`, its body `code` (when the gateway wrote the body),
/// and a Retry-After in seconds and milliseconds if and only if
/// `retry_after`.
pub fn assert_row(a: &Answer, status: u16, reason: &str, retry_after: bool) {
    assert_eq!(a.status, status, "{reason}: {a:?}");
    assert_eq!(a.header("x-gateway-reason"), Some(reason), "{a:?}");
    if reason != "upstream_refused" {
        assert_eq!(a.error_code().as_deref(), Some(reason), "{a:?}");
    }
    assert_eq!(a.retry_after.is_some(), retry_after, "{reason}: {a:?}");
    assert_eq!(a.retry_after_ms.is_some(), retry_after, "{reason}: {a:?}");
    if let Some(ms) = a.retry_after_ms {
        assert_eq!(a.retry_after, Some(ms.div_ceil(1000)), "{a:?}");
    }
    // The older header is kept on the refusals made before any provider call.
    let unsent = !matches!(reason, "upstream_timeout" | "upstream_refused");
    let shed = a.header("x-gateway-shed");
    assert_eq!(shed, unsent.then_some(reason), "{a:?}");
}

/// Spawns one request now (open loop: nobody waits for it here).
pub fn spawn_chat(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    body: String,
    patience: Option<Duration>,
) -> tokio::task::JoinHandle<Result<Answer, reqwest::Error>> {
    let (client, base, id) = (client.clone(), base.to_string(), id.to_string());
    tokio::spawn(async move { chat(&client, &base, &id, body, patience, None).await })
}

/// Reads `/metrics` over HTTP and returns the value of the sample `name`
/// (full name with labels, e.g. `gateway_shed_total{reason="queue_full"}`).
pub async fn metric(client: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    sample(&text, name)
}

pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Polls `cond` every 10 ms until it holds (the test's overall time limit
/// catches a condition that never does).
pub async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
