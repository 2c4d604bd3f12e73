//! OpenAI's Responses and embeddings APIs, and Azure OpenAI's paths: their
//! requests read, their answers and stream events written in the real
//! shapes. Chat and messages are `dialect`'s; a call to any of the four
//! goes through the same quota, ceiling, load curve, timeline and faults
//! (`server`).
//!
//! - Responses: `input` is a string or a list of messages (their content a
//!   string or `input_text` parts), `instructions` counts too;
//!   `max_output_tokens` caps the answer. A stream is typed events:
//!   `response.created`, then one `response.output_text.delta` per token,
//!   `response.output_text.done` and `response.completed` with the usage
//!   (`input_tokens`, `output_tokens`);
//! - embeddings: `input` is a string, a list of strings, or token arrays
//!   (each number a token); one vector per input, no completion tokens;
//! - Azure: `/openai/deployments/NAME/{chat/completions,responses,embeddings}`
//!   with an `api-version` query parameter; the deployment must be one of
//!   the provider's `models`, and is the call's model.

use bytes::Bytes;
use serde_json::{json, Value};
use wire::Api;

use crate::dialect::{answer_text, token_text, Answer, BadRequest, Finish, Request};

fn bad(param: &'static str, message: impl Into<String>) -> BadRequest {
    BadRequest {
        param: Some(param),
        message: message.into(),
    }
}

fn estimate_tokens(chars: usize) -> u32 {
    u32::try_from(wire::estimate_tokens(chars)).unwrap_or(u32::MAX)
}

/// A request body read as JSON, its model checked.
fn object(body: &[u8]) -> Result<(serde_json::Map<String, Value>, String), BadRequest> {
    let v: Value = serde_json::from_slice(body).map_err(|e| BadRequest {
        param: None,
        message: format!("the request body is not valid JSON: {e}"),
    })?;
    let Value::Object(o) = v else {
        return Err(BadRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    };
    let model = match o.get("model") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(bad("model", "model must be a non-empty string")),
        None => return Err(bad("model", "Missing required parameter: 'model'.")),
    };
    Ok((o, model))
}

/// The characters of a Responses message's content: a string, or parts
/// each with a `text`.
fn content_chars(content: &Value) -> Result<usize, BadRequest> {
    match content {
        Value::String(s) => Ok(s.chars().count()),
        Value::Array(parts) => parts.iter().try_fold(0, |n, p| match p.get("text") {
            Some(Value::String(t)) => Ok(n + t.chars().count()),
            _ => Err(bad("input", "each content part needs a `text` string")),
        }),
        _ => Err(bad(
            "input",
            "a message's content must be a string or an array of parts",
        )),
    }
}

/// A Responses request: its model, prompt estimate, `max_output_tokens`
/// and `stream`.
pub(crate) fn parse_responses(body: &[u8]) -> Result<Request, BadRequest> {
    let (o, model) = object(body)?;
    let mut chars = match o.get("input") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(items)) if !items.is_empty() => {
            items
                .iter()
                .try_fold(0, |n, item| match item.get("content") {
                    Some(c) => Ok(n + content_chars(c)?),
                    None => Err(bad("input", "each input item needs a `content`")),
                })?
        }
        Some(_) => return Err(bad("input", "input must be a string or a non-empty array")),
        None => return Err(bad("input", "Missing required parameter: 'input'.")),
    };
    match o.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => chars += s.chars().count(),
        Some(_) => return Err(bad("instructions", "instructions must be a string")),
    }
    let max_tokens = match o.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => {
                return Err(bad(
                    "max_output_tokens",
                    "max_output_tokens must be a positive integer",
                ))
            }
        },
    };
    let stream = match o.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("stream", "stream must be a boolean")),
    };
    Ok(Request {
        model,
        prompt_tokens: estimate_tokens(chars).max(1),
        max_tokens,
        stream,
        include_usage: true,
    })
}

/// A request body to `api` read as the provider reads it: its model,
/// prompt estimate, token cap and stream flag, or the parameter at fault
/// (the fuzz targets call this on every API).
///
/// ```
/// use wire::Api;
/// let r = fake_provider::parse_request(Api::Embeddings, br#"{"model":"e","input":["1234","5678"]}"#).unwrap();
/// assert_eq!((r.prompt_tokens, r.max_tokens), (2, None));
/// assert_eq!(fake_provider::parse_request(Api::Responses, b"{}").unwrap_err().param, Some("model"));
/// ```
pub fn parse_request(api: Api, body: &[u8]) -> Result<Request, BadRequest> {
    use crate::ProviderDialect;
    match api {
        Api::Chat | Api::Messages => api.dialect().parse(body),
        Api::Responses => parse_responses(body),
        Api::Embeddings => parse_embeddings(body).map(|(r, _)| r),
    }
}

/// An embeddings request and how many inputs it has: its prompt tokens
/// are every input's (a token array's numbers are its tokens).
pub(crate) fn parse_embeddings(body: &[u8]) -> Result<(Request, u32), BadRequest> {
    let (o, model) = object(body)?;
    let one = |v: &Value| -> Result<u32, BadRequest> {
        match v {
            Value::String(s) => Ok(estimate_tokens(s.chars().count()).max(1)),
            Value::Array(tokens) if tokens.iter().all(Value::is_u64) && !tokens.is_empty() => {
                Ok(u32::try_from(tokens.len()).unwrap_or(u32::MAX))
            }
            _ => Err(bad(
                "input",
                "each input must be a non-empty string or array of tokens",
            )),
        }
    };
    let (prompt_tokens, inputs) = match o.get("input") {
        Some(Value::Array(items)) if items.iter().all(Value::is_u64) && !items.is_empty() => {
            (one(&Value::Array(items.clone()))?, 1)
        }
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut total = 0u32;
            for item in items {
                total = total.saturating_add(one(item)?);
            }
            (total, u32::try_from(items.len()).unwrap_or(u32::MAX))
        }
        Some(v @ Value::String(_)) => (one(v)?, 1),
        Some(_) => return Err(bad("input", "input must be a string or a non-empty array")),
        None => return Err(bad("input", "Missing required parameter: 'input'.")),
    };
    if o.get("stream")
        .is_some_and(|s| s != &Value::Bool(false) && !s.is_null())
    {
        return Err(bad("stream", "embeddings are not streamed"));
    }
    let request = Request {
        model,
        prompt_tokens,
        max_tokens: None,
        stream: false,
        include_usage: false,
    };
    Ok((request, inputs))
}

/// The length of each embedding vector answered.
const DIMENSIONS: usize = 8;

/// An embeddings answer: one vector per input, the usage its prompt.
pub(crate) fn embeddings_body(model: &str, prompt_tokens: u32, inputs: u32) -> Bytes {
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let vector: Vec<f64> = (0..DIMENSIONS)
                .map(|k| f64::from((i as usize * 7 + k) as u32 % 10) / 10.0 - 0.45)
                .collect();
            json!({"object": "embedding", "index": i, "embedding": vector})
        })
        .collect();
    let v = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    });
    Bytes::from(v.to_string())
}

/// A Responses answer's object; `text` is `None` while it is in progress.
fn response_object(a: &Answer, created: u64, text: Option<&str>) -> Value {
    let status = match (text, a.finish) {
        (None, _) => "in_progress",
        (Some(_), Finish::Stop) => "completed",
        (Some(_), Finish::Length) => "incomplete",
    };
    let output = match text {
        None => json!([]),
        Some(t) => json!([{
            "type": "message", "id": format!("msg_{}", a.id), "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": t, "annotations": []}],
        }]),
    };
    let usage = text.map(|_| {
        json!({
            "input_tokens": a.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": a.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": a.prompt_tokens + a.completion_tokens,
        })
    });
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": a.id, "object": "response", "created_at": created, "status": status,
        "model": a.model, "output": output, "usage": usage,
        "incomplete_details": incomplete, "error": null,
    })
}

/// The whole (not streamed) Responses answer.
pub(crate) fn responses_body(a: &Answer) -> Bytes {
    let text = answer_text(a.completion_tokens);
    Bytes::from(response_object(a, a.created, Some(&text)).to_string())
}

fn event(kind: &str, mut data: Value, sequence: u32) -> Bytes {
    data["type"] = Value::from(kind);
    data["sequence_number"] = Value::from(sequence);
    let data = data.to_string();
    let mut s = String::with_capacity(data.len() + kind.len() + 16);
    s.push_str("event: ");
    s.push_str(kind);
    s.push_str("\ndata: ");
    s.push_str(&data);
    s.push_str("\n\n");
    Bytes::from(s)
}

/// `response.created`: before the first token.
pub(crate) fn responses_stream_head(a: &Answer) -> Bytes {
    event(
        "response.created",
        json!({"response": response_object(a, a.created, None)}),
        0,
    )
}

/// The delta of token `i`.
pub(crate) fn responses_stream_token(a: &Answer, i: u32) -> Bytes {
    event(
        "response.output_text.delta",
        json!({"item_id": format!("msg_{}", a.id), "output_index": 0, "content_index": 0,
               "delta": token_text(i)}),
        i + 1,
    )
}

/// `response.output_text.done` and `response.completed`, with the usage.
pub(crate) fn responses_stream_tail(a: &Answer) -> Bytes {
    let text = answer_text(a.completion_tokens);
    let n = a.completion_tokens;
    let mut b = Vec::new();
    b.extend_from_slice(&event(
        "response.output_text.done",
        json!({"item_id": format!("msg_{}", a.id), "output_index": 0, "content_index": 0,
               "text": text}),
        n + 1,
    ));
    b.extend_from_slice(&event(
        "response.completed",
        json!({"response": response_object(a, a.created, Some(&text))}),
        n + 2,
    ));
    Bytes::from(b)
}

/// An Azure OpenAI path: the deployment and the API, if `path` is one.
pub(crate) fn azure_route(path: &str) -> Option<(&str, Api)> {
    let rest = path.strip_prefix("/openai/deployments/")?;
    let (name, api) = rest.split_once('/')?;
    let api = match api {
        "chat/completions" => Api::Chat,
        "responses" => Api::Responses,
        "embeddings" => Api::Embeddings,
        _ => return None,
    };
    (!name.is_empty()).then_some((name, api))
}

/// The `api-version` query parameter, if given and not empty.
pub(crate) fn api_version(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("api-version="))
        .filter(|v| !v.is_empty())
}

/// Azure's error body: `{"error": {"code", "message"}}`.
pub(crate) fn azure_error(code: &str, message: &str) -> Bytes {
    Bytes::from(json!({"error": {"code": code, "message": message}}).to_string())
}

/// The answer's id for `api` (`chatcmpl-…`, `msg_…`, `resp_…`).
pub(crate) fn answer_id(api: Api, seq: u64) -> String {
    let prefix = match api {
        Api::Chat | Api::Embeddings => "chatcmpl-rh",
        Api::Messages => "msg_rh",
        Api::Responses => "resp_rh",
    };
    prefixed_number(prefix, seq)
}

/// `prefix` then `n` in decimal, in one allocation of the right size
/// (`format!`'s machinery costs more than the id).
pub(crate) fn prefixed_number(prefix: &str, n: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut s = String::with_capacity(prefix.len() + digits.len());
    s.push_str(prefix);
    s.push_str(digits);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(n: u32, finish: Finish) -> Answer {
        Answer {
            id: "resp_rh1".into(),
            model: "m".into(),
            created: 1,
            prompt_tokens: 3,
            completion_tokens: n,
            finish,
        }
    }

    #[test]
    fn answer_ids_are_the_prefix_and_the_sequence_number() {
        for seq in [0, 7, 42, 1_000_000, u64::MAX] {
            assert_eq!(answer_id(Api::Chat, seq), format!("chatcmpl-rh{seq}"));
            assert_eq!(answer_id(Api::Embeddings, seq), format!("chatcmpl-rh{seq}"));
            assert_eq!(answer_id(Api::Messages, seq), format!("msg_rh{seq}"));
            assert_eq!(answer_id(Api::Responses, seq), format!("resp_rh{seq}"));
        }
    }

    #[test]
    fn responses_requests_are_read_and_refused_by_parameter() {
        let r = parse_responses(
            br#"{"model":"m","input":"12345678","instructions":"abcd","max_output_tokens":9,"stream":true}"#,
        )
        .unwrap();
        assert_eq!(
            (r.prompt_tokens, r.max_tokens, r.stream),
            (3, Some(9), true)
        );
        let r = parse_responses(
            br#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"12345678"}]}]}"#,
        )
        .unwrap();
        assert_eq!((r.prompt_tokens, r.max_tokens, r.stream), (2, None, false));
        for (body, param) in [
            (r#"{"input":"x"}"#, "model"),
            (r#"{"model":"m"}"#, "input"),
            (
                r#"{"model":"m","input":"x","max_output_tokens":0}"#,
                "max_output_tokens",
            ),
            (r#"{"model":"m","input":[{"role":"user"}]}"#, "input"),
        ] {
            assert_eq!(
                parse_responses(body.as_bytes()).unwrap_err().param,
                Some(param),
                "{body}"
            );
        }
    }

    #[test]
    fn embeddings_take_one_input_or_many() {
        let (r, n) = parse_embeddings(br#"{"model":"e","input":"12345678"}"#).unwrap();
        assert_eq!((r.prompt_tokens, n, r.max_tokens), (2, 1, None));
        let (r, n) =
            parse_embeddings(br#"{"model":"e","input":["1234","12345678",[1,2,3]]}"#).unwrap();
        assert_eq!((r.prompt_tokens, n), (1 + 2 + 3, 3));
        let (r, n) = parse_embeddings(br#"{"model":"e","input":[5,6,7,8]}"#).unwrap();
        assert_eq!((r.prompt_tokens, n), (4, 1));
        assert!(parse_embeddings(br#"{"model":"e","input":[]}"#).is_err());
        assert!(parse_embeddings(br#"{"model":"e","input":"x","stream":true}"#).is_err());
        let v: Value = serde_json::from_slice(&embeddings_body("e", 6, 3)).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 3);
        assert_eq!(v["data"][2]["index"], 2);
        assert_eq!(
            v["data"][0]["embedding"].as_array().unwrap().len(),
            DIMENSIONS
        );
        assert_eq!(v["usage"]["prompt_tokens"], 6);
    }

    #[test]
    fn responses_answers_have_the_real_shapes() {
        let v: Value = serde_json::from_slice(&responses_body(&answer(2, Finish::Stop))).unwrap();
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
        assert_eq!(v["output"][0]["content"][0]["text"], "sun cat ");
        assert_eq!(
            (
                v["usage"]["input_tokens"].as_u64(),
                v["usage"]["output_tokens"].as_u64()
            ),
            (Some(3), Some(2))
        );
        let v: Value = serde_json::from_slice(&responses_body(&answer(2, Finish::Length))).unwrap();
        assert_eq!(v["status"], "incomplete");
        let a = answer(2, Finish::Stop);
        let mut all = Vec::new();
        all.extend_from_slice(&responses_stream_head(&a));
        for i in 0..2 {
            all.extend_from_slice(&responses_stream_token(&a, i));
        }
        all.extend_from_slice(&responses_stream_tail(&a));
        let text = String::from_utf8(all).unwrap();
        let kinds: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.completed"
            ]
        );
        let last: Value = serde_json::from_str(
            text.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .next_back()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["response"]["usage"]["output_tokens"], 2);
        assert_eq!(last["sequence_number"], 4);
    }

    #[test]
    fn azure_paths_name_a_deployment_and_an_api() {
        assert_eq!(
            azure_route("/openai/deployments/gpt-4o/chat/completions"),
            Some(("gpt-4o", Api::Chat))
        );
        assert_eq!(
            azure_route("/openai/deployments/e/embeddings"),
            Some(("e", Api::Embeddings))
        );
        assert_eq!(
            azure_route("/openai/deployments/r/responses"),
            Some(("r", Api::Responses))
        );
        assert_eq!(azure_route("/openai/deployments//responses"), None);
        assert_eq!(azure_route("/openai/deployments/x/completions"), None);
        assert_eq!(
            api_version(Some("a=1&api-version=2024-10-21")),
            Some("2024-10-21")
        );
        assert_eq!(api_version(Some("api-version=")), None);
        assert_eq!(api_version(None), None);
    }
}
