//! The Responses and embeddings APIs and Azure OpenAI's paths: their
//! shapes, their records, and the quota and faults they share with chat.

use super::*;

fn responses(input: &str, max: u32) -> Value {
    json!({"model": "gpt-4o-mini", "input": input, "max_output_tokens": max})
}

#[tokio::test]
async fn responses_answer_whole_and_streamed_with_typed_events() {
    let p = start("completion_tokens = { fixed = 5 }\n").await;
    let resp = post(
        &p,
        "/v1/responses",
        &responses("[rehearse:id=resp-1] abcdefgh", 50),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        (v["object"].as_str(), v["status"].as_str()),
        (Some("response"), Some("completed"))
    );
    assert_eq!(v["usage"]["output_tokens"], 5);
    assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
    let r = record_of(&p, "resp-1").await;
    assert_eq!(
        (r.api, r.dialect, r.completion_tokens),
        (wire::Api::Responses, wire::Dialect::OpenAi, 5)
    );

    let mut body = responses("[rehearse:id=resp-2] abcdefgh", 50);
    body["stream"] = json!(true);
    let resp = post(&p, "/v1/responses", &body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse_events(&resp.text().await.unwrap());
    let kinds: Vec<_> = events.iter().map(|(e, _)| e.clone().unwrap()).collect();
    assert_eq!(kinds.first().unwrap(), "response.created");
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "response.output_text.delta")
            .count(),
        5
    );
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["response.output_text.done", "response.completed"]
    );
    let done: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(done["response"]["usage"]["input_tokens"], 8);
    assert!(record_of(&p, "resp-2").await.stream);
    p.shutdown().await;
}

#[tokio::test]
async fn a_responses_stream_cut_ends_mid_output() {
    let p = start("completion_tokens = { fixed = 10 }\n[faults]\nstream_cut = 1.0\n").await;
    let mut body = responses("[rehearse:id=cut-1] abcd", 50);
    body["stream"] = json!(true);
    let resp = post(&p, "/v1/responses", &body).await;
    let mut text = Vec::new();
    let mut stream = resp.bytes_stream();
    use futures_util::StreamExt;
    while let Some(Ok(chunk)) = stream.next().await {
        text.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("response.output_text.delta"), "{text}");
    assert!(!text.contains("response.completed"), "{text}");
    let r = record_of(&p, "cut-1").await;
    assert_eq!(r.outcome, ProviderOutcome::StreamCut);
    assert_eq!(r.completion_tokens, 5);
    p.shutdown().await;
}

#[tokio::test]
async fn embeddings_take_many_inputs_and_the_quota_charges_them() {
    // 40 tokens a minute: the first call's 3 inputs take 30 of them.
    let p = start("[quota]\ntokens_per_minute = 40\n").await;
    let body = json!({"model": "text-embedding-3-small",
                      "input": ["[rehearse:id=emb-1] 12", "x".repeat(40), "y".repeat(40)]});
    let resp = post(&p, "/v1/embeddings", &body).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 3);
    let used = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(used, 6 + 10 + 10);
    let r = record_of(&p, "emb-1").await;
    assert_eq!(
        (r.api, r.completion_tokens, r.reserved_tokens),
        (wire::Api::Embeddings, 0, used)
    );
    let again = json!({"model": "text-embedding-3-small", "input": "z".repeat(80)});
    let resp = post(&p, "/v1/embeddings", &again).await;
    assert_eq!(
        resp.status(),
        429,
        "20 more tokens do not fit in what is left"
    );
    assert!(resp.headers().contains_key("retry-after-ms"));
    p.shutdown().await;
}

#[tokio::test]
async fn azure_paths_need_a_known_deployment_and_an_api_version() {
    let p = start("models = [\"gpt-4o-mini\"]\ncompletion_tokens = { fixed = 3 }\n").await;
    let url = |path: &str| format!("{}{path}", p.base_url());
    let send = |path: String, body: Value| async move {
        client()
            .post(path)
            .header("api-key", "k")
            .json(&body)
            .send()
            .await
            .unwrap()
    };
    let chat_path = "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21";
    let resp = send(url(chat_path), chat("[rehearse:id=az-1] hi", 10)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    let r = record_of(&p, "az-1").await;
    assert_eq!((r.api, r.model.as_str()), (wire::Api::Chat, "gpt-4o-mini"));

    let resp = send(
        url("/openai/deployments/gpt-4o-mini/embeddings?api-version=2024-10-21"),
        json!({"input": "[rehearse:id=az-2] abcd", "model": "ignored"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(record_of(&p, "az-2").await.api, wire::Api::Embeddings);
    let resp = send(
        url("/openai/deployments/gpt-4o-mini/responses?api-version=2025-04-01-preview"),
        responses("[rehearse:id=az-3] abcd", 10),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(record_of(&p, "az-3").await.api, wire::Api::Responses);

    let resp = send(
        url("/openai/deployments/nope/chat/completions?api-version=2024-10-21"),
        chat("hi", 10),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "DeploymentNotFound");
    let resp = send(
        url("/openai/deployments/gpt-4o-mini/chat/completions"),
        chat("hi", 10),
    )
    .await;
    assert_eq!(resp.status(), 404);
    p.shutdown().await;
}
