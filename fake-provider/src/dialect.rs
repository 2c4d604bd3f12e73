//! The two API dialects: parsing requests, and writing answers, stream
//! events and error bodies in each provider's real shape.
//!
//! Prompt tokens are estimated by [`wire::estimate_tokens`] (one token per
//! 4 characters of message text, rounded up); every string in a message's
//! content counts (plain strings, `text` parts, and Anthropic's `system`).

use bytes::Bytes;
use serde_json::{json, Value};
use wire::Dialect;

use wire::json;

/// What the provider needs from a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The model named by the caller.
    pub model: String,
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// The caller's cap on completion tokens, if any.
    pub max_tokens: Option<u32>,
    /// Server-sent events wanted.
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
}

/// A request the dialect refuses, with the parameter at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRequest {
    /// The parameter at fault, if one.
    pub param: Option<&'static str>,
    /// What is wrong.
    pub message: String,
}

fn bad(param: &'static str, message: impl Into<String>) -> BadRequest {
    BadRequest {
        param: Some(param),
        message: message.into(),
    }
}

/// Estimated tokens of `chars` characters, by the rule every part of a
/// rehearsal uses ([`wire::estimate_tokens`]), as a record's `u32`.
fn estimate_tokens(chars: usize) -> u32 {
    u32::try_from(wire::estimate_tokens(chars)).unwrap_or(u32::MAX)
}

#[derive(serde::Deserialize)]
struct FastBody<'a> {
    #[serde(borrow)]
    model: std::borrow::Cow<'a, str>,
    messages: Messages,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<FastStreamOptions>,
    #[serde(default)]
    system: Option<Chars>,
}

#[derive(serde::Deserialize)]
struct FastMessage<'a> {
    #[serde(borrow)]
    role: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    content: Option<Chars>,
}

/// The messages, read without being kept: how many, whether each names
/// its role, and their contents' characters.
struct Messages {
    count: usize,
    roles: bool,
    chars: usize,
}

impl<'de> serde::Deserialize<'de> for Messages {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        struct Read;
        impl<'de> serde::de::Visitor<'de> for Read {
            type Value = Messages;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of messages")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Messages, A::Error> {
                let mut m = Messages {
                    count: 0,
                    roles: true,
                    chars: 0,
                };
                while let Some(message) = seq.next_element::<FastMessage<'de>>()? {
                    m.count += 1;
                    m.roles &= message.role.is_some();
                    m.chars += message.content.map_or(0, |c| c.0);
                }
                Ok(m)
            }
        }
        d.deserialize_seq(Read)
    }
}

/// The characters of a message content (or of Anthropic's `system`),
/// counted as the body is read: a string's, or the `text` strings' of an
/// array of parts (objects). Anything else fails the typed path, which
/// leaves the request to the checked one (a null or absent content is
/// the `Option`'s `None`: no characters).
struct Chars(usize);

impl<'de> serde::Deserialize<'de> for Chars {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Chars, D::Error> {
        struct Count;
        impl<'de> serde::de::Visitor<'de> for Count {
            type Value = Chars;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of parts")
            }

            fn visit_str<E>(self, s: &str) -> Result<Chars, E> {
                Ok(Chars(s.chars().count()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut parts: A,
            ) -> Result<Chars, A::Error> {
                let mut n = 0;
                while let Some(part) = parts.next_element::<FastPart<'de>>()? {
                    n += part.text.map_or(0, |t| t.chars().count());
                }
                Ok(Chars(n))
            }
        }
        d.deserialize_any(Count)
    }
}

#[derive(serde::Deserialize)]
struct FastStreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(serde::Deserialize)]
struct FastPart<'a> {
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
}

fn content_chars(content: &Value, param: &'static str) -> Result<usize, BadRequest> {
    match content {
        Value::String(s) => Ok(s.chars().count()),
        Value::Null => Ok(0),
        Value::Array(parts) => {
            let mut n = 0;
            for part in parts {
                match part {
                    Value::Object(o) => {
                        if let Some(Value::String(t)) = o.get("text") {
                            n += t.chars().count();
                        }
                    }
                    Value::String(s) => n += s.chars().count(),
                    _ => return Err(bad(param, "each content part must be an object")),
                }
            }
            Ok(n)
        }
        _ => Err(bad(param, "content must be a string or an array of parts")),
    }
}

fn messages_chars(body: &Value) -> Result<usize, BadRequest> {
    let Some(messages) = body.get("messages") else {
        return Err(bad("messages", "messages: Field required"));
    };
    let Value::Array(messages) = messages else {
        return Err(bad("messages", "messages must be an array"));
    };
    if messages.is_empty() {
        return Err(bad("messages", "messages must not be empty"));
    }
    let mut chars = 0;
    for m in messages {
        let Value::Object(m) = m else {
            return Err(bad("messages", "each message must be an object"));
        };
        if !matches!(m.get("role"), Some(Value::String(_))) {
            return Err(bad("messages", "each message needs a string `role`"));
        }
        chars += content_chars(m.get("content").unwrap_or(&Value::Null), "messages")?;
    }
    Ok(chars)
}

fn opt_u32(body: &Value, key: &'static str) -> Result<Option<u32>, BadRequest> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n.min(u32::MAX as u64) as u32)),
            _ => Err(bad(key, format!("{key} must be a positive integer"))),
        },
    }
}

fn opt_bool(body: &Value, key: &'static str) -> Result<bool, BadRequest> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(key, format!("{key} must be a boolean"))),
    }
}

fn model(body: &Value) -> Result<String, BadRequest> {
    match body.get("model") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(bad("model", "model must be a non-empty string")),
        None => Err(bad("model", "model: Field required")),
    }
}

/// What the fake provider does in each API: read a request, and write the
/// error bodies and statuses of that provider. Implemented for
/// [`wire::Dialect`], the dialect every part of a rehearsal names.
///
/// ```
/// use fake_provider::ProviderDialect;
/// use wire::Dialect;
///
/// let body = br#"{"model":"claude","max_tokens":9,"messages":[{"role":"user","content":"12345678"}]}"#;
/// let request = Dialect::Anthropic.parse(body).unwrap();
/// assert_eq!((request.prompt_tokens, request.max_tokens), (2, Some(9)));
/// assert_eq!(Dialect::OpenAi.parse(b"not json").unwrap_err().param, None);
/// assert_eq!(Dialect::Anthropic.overloaded_status(), 529);
/// ```
pub trait ProviderDialect {
    /// Parses a request body of this dialect.
    fn parse(self, body: &[u8]) -> Result<Request, BadRequest>;

    /// The JSON error body of this dialect.
    fn error_body(
        self,
        status: u16,
        message: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Bytes;

    /// The status for "over the concurrency ceiling".
    fn overloaded_status(self) -> u16;
}

impl ProviderDialect for Dialect {
    fn parse(self, body: &[u8]) -> Result<Request, BadRequest> {
        // Well-formed requests take the typed path (no JSON tree is built);
        // anything it does not accept is parsed again as a tree, which finds
        // the exact fault for the error message.
        if let Some(r) = parse_fast(self, body) {
            return Ok(r);
        }
        parse_checked(self, body)
    }

    fn error_body(
        self,
        status: u16,
        message: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Bytes {
        let v = match self {
            Dialect::OpenAi => {
                let kind = match status {
                    400 | 404 | 413 => "invalid_request_error",
                    429 => "rate_limit_exceeded",
                    _ => "server_error",
                };
                let kind = if status == 429 && code == Some("overloaded") {
                    "server_error"
                } else if status == 429 {
                    // OpenAI's rate-limit errors say which limit in `type`.
                    param.unwrap_or(kind)
                } else {
                    kind
                };
                json!({"error": {
                    "message": message,
                    "type": kind,
                    "param": if status == 429 { None } else { param },
                    "code": code,
                }})
            }
            Dialect::Anthropic => {
                let kind = match status {
                    400 | 413 => "invalid_request_error",
                    404 => "not_found_error",
                    429 => "rate_limit_error",
                    529 => "overloaded_error",
                    _ => "api_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        };
        Bytes::from(v.to_string())
    }

    fn overloaded_status(self) -> u16 {
        match self {
            Dialect::OpenAi => 429,
            Dialect::Anthropic => 529,
        }
    }
}

/// The typed path of [`ProviderDialect::parse`]: `None` for anything it does
/// not accept as it is.
fn parse_fast(dialect: Dialect, body: &[u8]) -> Option<Request> {
    // UTF-8 checked once for the whole body: read as a `str`, serde_json
    // skips its check of each string (about 1,000 instructions a call).
    // A body that is not UTF-8 goes the slow way, which says where.
    let b: FastBody<'_> = serde_json::from_str(std::str::from_utf8(body).ok()?).ok()?;
    if b.model.is_empty() || b.messages.count == 0 || !b.messages.roles {
        return None;
    }
    let mut chars = b.messages.chars;
    let positive = |n: Option<u64>| match n {
        None => Some(None),
        Some(0) => None,
        Some(n) => Some(Some(n.min(u32::MAX as u64) as u32)),
    };
    let stream = b.stream.unwrap_or(false);
    match dialect {
        Dialect::OpenAi => {
            let max_tokens = match positive(b.max_completion_tokens)? {
                Some(n) => Some(n),
                None => positive(b.max_tokens)?,
            };
            Some(Request {
                model: b.model.into_owned(),
                prompt_tokens: estimate_tokens(chars).max(1),
                max_tokens,
                stream,
                include_usage: b
                    .stream_options
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
            })
        }
        Dialect::Anthropic => {
            chars += b.system.map_or(0, |c| c.0);
            let max_tokens = positive(b.max_tokens)??;
            Some(Request {
                model: b.model.into_owned(),
                prompt_tokens: estimate_tokens(chars).max(1),
                max_tokens: Some(max_tokens),
                stream,
                include_usage: true,
            })
        }
    }
}

/// The checked path of [`ProviderDialect::parse`]: a JSON tree, walked to
/// find the exact fault of a refused request.
fn parse_checked(dialect: Dialect, body: &[u8]) -> Result<Request, BadRequest> {
    let body: Value = serde_json::from_slice(body).map_err(|e| BadRequest {
        param: None,
        message: format!("the request body is not valid JSON: {e}"),
    })?;
    if !body.is_object() {
        return Err(BadRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    }
    let model = model(&body)?;
    let mut chars = messages_chars(&body)?;
    let stream = opt_bool(&body, "stream")?;
    match dialect {
        Dialect::OpenAi => {
            let max_tokens = match opt_u32(&body, "max_completion_tokens")? {
                Some(n) => Some(n),
                None => opt_u32(&body, "max_tokens")?,
            };
            let include_usage = match body.get("stream_options") {
                None | Some(Value::Null) => false,
                Some(Value::Object(o)) => match o.get("include_usage") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => {
                        return Err(bad(
                            "stream_options",
                            "stream_options.include_usage must be a boolean",
                        ))
                    }
                },
                Some(_) => return Err(bad("stream_options", "stream_options must be an object")),
            };
            Ok(Request {
                model,
                prompt_tokens: estimate_tokens(chars).max(1),
                max_tokens,
                stream,
                include_usage,
            })
        }
        Dialect::Anthropic => {
            if let Some(system) = body.get("system") {
                chars += content_chars(system, "system")?;
            }
            let Some(max_tokens) = opt_u32(&body, "max_tokens")? else {
                return Err(bad("max_tokens", "max_tokens: Field required"));
            };
            Ok(Request {
                model,
                prompt_tokens: estimate_tokens(chars).max(1),
                max_tokens: Some(max_tokens),
                stream,
                include_usage: true,
            })
        }
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The answer was complete.
    Stop,
    /// `max_tokens` was reached.
    Length,
}

impl Finish {
    fn openai(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
    fn anthropic(self) -> &'static str {
        match self {
            Finish::Stop => "end_turn",
            Finish::Length => "max_tokens",
        }
    }
}

/// Words of four characters or so, one per token, so that a reader of the
/// answer estimating at 4 characters a token counts what we sent.
const WORDS: [&str; 16] = [
    "sun ", "cat ", "map ", "red ", "oak ", "sky ", "tea ", "ink ", "fox ", "bay ", "elm ", "owl ",
    "jar ", "fig ", "ivy ", "pen ",
];

/// [`WORDS`] one after the other, each four bytes.
const WORDS_IN_TURN: &str = "sun cat map red oak sky tea ink fox bay elm owl jar fig ivy pen ";

/// The text of token `i` of an answer.
pub fn token_text(i: u32) -> &'static str {
    WORDS[(i as usize) % WORDS.len()]
}

/// The whole text of an answer of `n` tokens.
pub fn answer_text(n: u32) -> String {
    let mut s = String::with_capacity(n as usize * 4);
    for i in 0..n {
        s.push_str(token_text(i));
    }
    s
}

/// Identity and sizes of one answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `chatcmpl-…` or `msg_…`.
    pub id: String,
    /// The model echoed back.
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Completion tokens.
    pub completion_tokens: u32,
    /// Why it stopped.
    pub finish: Finish,
}

impl Answer {
    /// The non-streamed body, written by hand into one buffer: the bytes
    /// serde_json writes for the wire shapes (the test module keeps that
    /// path and compares the two), without its serializer's machinery.
    pub fn body(&self, dialect: Dialect) -> Bytes {
        // The fixed parts of either shape are under 320 bytes.
        let text_len = self.completion_tokens as usize * 4;
        let mut out = Vec::with_capacity(320 + self.id.len() + self.model.len() + text_len);
        match dialect {
            Dialect::OpenAi => {
                out.extend_from_slice(b"{\"id\":");
                json::push_str(&mut out, &self.id);
                out.extend_from_slice(b",\"object\":\"chat.completion\",\"created\":");
                json::push_u64(&mut out, self.created);
                out.extend_from_slice(b",\"model\":");
                json::push_str(&mut out, &self.model);
                out.extend_from_slice(
                    b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
                );
                self.push_text(&mut out);
                out.extend_from_slice(b",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"");
                out.extend_from_slice(self.finish.openai().as_bytes());
                let usage = self.usage();
                out.extend_from_slice(b"\"}],\"usage\":{\"prompt_tokens\":");
                json::push_u64(&mut out, usage.prompt_tokens.into());
                out.extend_from_slice(b",\"completion_tokens\":");
                json::push_u64(&mut out, usage.completion_tokens.into());
                out.extend_from_slice(b",\"total_tokens\":");
                json::push_u64(&mut out, usage.total_tokens.into());
                out.extend_from_slice(b"},\"system_fingerprint\":\"fp_rehearse\"}");
            }
            Dialect::Anthropic => {
                out.extend_from_slice(b"{\"id\":");
                json::push_str(&mut out, &self.id);
                out.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
                json::push_str(&mut out, &self.model);
                out.extend_from_slice(b",\"content\":[{\"type\":\"text\",\"text\":");
                self.push_text(&mut out);
                out.extend_from_slice(b"}],\"stop_reason\":\"");
                out.extend_from_slice(self.finish.anthropic().as_bytes());
                out.extend_from_slice(b"\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":");
                json::push_u64(&mut out, self.prompt_tokens.into());
                out.extend_from_slice(b",\"output_tokens\":");
                json::push_u64(&mut out, self.completion_tokens.into());
                out.extend_from_slice(b"}}");
            }
        }
        Bytes::from(out)
    }

    /// The answer's text as a JSON string: its words need no escaping (a
    /// test checks), so they are copied as they are.
    fn push_text(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        // The words in turn: whole turns of all 16, then the first few.
        let n = self.completion_tokens as usize;
        for _ in 0..n / WORDS.len() {
            out.extend_from_slice(WORDS_IN_TURN.as_bytes());
        }
        out.extend_from_slice(&WORDS_IN_TURN.as_bytes()[..(n % WORDS.len()) * 4]);
        out.push(b'"');
    }

    fn usage(&self) -> shapes::Usage {
        shapes::Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
        }
    }

    fn openai_chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Bytes {
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_rehearse",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            v["usage"] = Value::Null;
        }
        sse(None, &v.to_string())
    }

    /// The events before the first token (OpenAI: the role chunk;
    /// Anthropic: message_start, content_block_start, ping).
    pub fn stream_head(&self, dialect: Dialect, include_usage: bool) -> Bytes {
        match dialect {
            Dialect::OpenAi => self.openai_chunk(
                json!({"role": "assistant", "content": ""}),
                None,
                include_usage,
            ),
            Dialect::Anthropic => {
                let start = json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1},
                }});
                let block = json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}});
                let mut b = Vec::new();
                b.extend_from_slice(&sse(Some("message_start"), &start.to_string()));
                b.extend_from_slice(&sse(Some("content_block_start"), &block.to_string()));
                b.extend_from_slice(&sse(Some("ping"), r#"{"type": "ping"}"#));
                Bytes::from(b)
            }
        }
    }

    /// The event carrying token `i`.
    pub fn stream_token(&self, dialect: Dialect, i: u32, include_usage: bool) -> Bytes {
        let text = token_text(i);
        let data = match dialect {
            Dialect::OpenAi => serde_json::to_string(&shapes::Chunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                system_fingerprint: "fp_rehearse",
                choices: [shapes::ChunkChoice {
                    index: 0,
                    delta: shapes::Delta { content: text },
                    logprobs: None,
                    finish_reason: None,
                }],
                usage: include_usage.then_some(None),
            }),
            Dialect::Anthropic => serde_json::to_string(&shapes::BlockDelta {
                kind: "content_block_delta",
                index: 0,
                delta: shapes::TextDelta {
                    kind: "text_delta",
                    text,
                },
            }),
        };
        let event = (dialect == Dialect::Anthropic).then_some("content_block_delta");
        sse(event, &data.unwrap_or_default())
    }

    /// The events after the last token.
    pub fn stream_tail(&self, dialect: Dialect, include_usage: bool) -> Bytes {
        let mut b = Vec::new();
        match dialect {
            Dialect::OpenAi => {
                b.extend_from_slice(&self.openai_chunk(
                    json!({}),
                    Some(self.finish.openai()),
                    include_usage,
                ));
                if include_usage {
                    let v = json!({
                        "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                        "model": self.model, "system_fingerprint": "fp_rehearse",
                        "choices": [], "usage": serde_json::to_value(self.usage()).unwrap_or_default(),
                    });
                    b.extend_from_slice(&sse(None, &v.to_string()));
                }
                b.extend_from_slice(b"data: [DONE]\n\n");
            }
            Dialect::Anthropic => {
                b.extend_from_slice(&sse(
                    Some("content_block_stop"),
                    r#"{"type":"content_block_stop","index":0}"#,
                ));
                let delta = json!({"type": "message_delta",
                    "delta": {"stop_reason": self.finish.anthropic(), "stop_sequence": null},
                    "usage": {"output_tokens": self.completion_tokens}});
                b.extend_from_slice(&sse(Some("message_delta"), &delta.to_string()));
                b.extend_from_slice(&sse(Some("message_stop"), r#"{"type":"message_stop"}"#));
            }
        }
        Bytes::from(b)
    }
}

/// The wire shapes of the hot paths (token chunks; the non-streamed
/// answers', which `Answer::body` now writes by hand, for its test),
/// serialized straight from borrowed fields.
mod shapes {
    use serde::Serialize;

    #[derive(Serialize)]
    pub struct Usage {
        pub prompt_tokens: u32,
        pub completion_tokens: u32,
        pub total_tokens: u32,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct Message<'a> {
        pub role: &'static str,
        pub content: &'a str,
        pub refusal: Option<&'a str>,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct Choice<'a> {
        pub index: u32,
        pub message: Message<'a>,
        pub logprobs: Option<()>,
        pub finish_reason: &'static str,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct Completion<'a> {
        pub id: &'a str,
        pub object: &'static str,
        pub created: u64,
        pub model: &'a str,
        pub choices: [Choice<'a>; 1],
        pub usage: Usage,
        pub system_fingerprint: &'static str,
    }

    #[derive(Serialize)]
    pub struct Delta<'a> {
        pub content: &'a str,
    }

    #[derive(Serialize)]
    pub struct ChunkChoice<'a> {
        pub index: u32,
        pub delta: Delta<'a>,
        pub logprobs: Option<()>,
        pub finish_reason: Option<&'static str>,
    }

    #[derive(Serialize)]
    pub struct Chunk<'a> {
        pub id: &'a str,
        pub object: &'static str,
        pub created: u64,
        pub model: &'a str,
        pub system_fingerprint: &'static str,
        pub choices: [ChunkChoice<'a>; 1],
        /// Absent without `include_usage`; `null` on every chunk but the
        /// usage chunk with it.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub usage: Option<Option<Usage>>,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct TextBlock<'a> {
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub text: &'a str,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct AnthropicUsage {
        pub input_tokens: u32,
        pub output_tokens: u32,
    }

    // Only the test's serde path of `Answer::body` writes these now.
    #[cfg(test)]
    #[derive(Serialize)]
    pub struct Msg<'a> {
        pub id: &'a str,
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub role: &'static str,
        pub model: &'a str,
        pub content: [TextBlock<'a>; 1],
        pub stop_reason: &'static str,
        pub stop_sequence: Option<&'a str>,
        pub usage: AnthropicUsage,
    }

    #[derive(Serialize)]
    pub struct TextDelta<'a> {
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub text: &'a str,
    }

    #[derive(Serialize)]
    pub struct BlockDelta<'a> {
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub index: u32,
        pub delta: TextDelta<'a>,
    }
}

/// One server-sent event.
fn sse(event: Option<&str>, data: &str) -> Bytes {
    let mut s = String::with_capacity(data.len() + 32);
    if let Some(e) = event {
        s.push_str("event: ");
        s.push_str(e);
        s.push('\n');
    }
    s.push_str("data: ");
    s.push_str(data);
    s.push_str("\n\n");
    Bytes::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Answer {
        /// The non-streamed body as it was written before the hand-written
        /// one: serde_json serializing the wire shapes.
        fn serde_body(&self, dialect: Dialect) -> Vec<u8> {
            let text = answer_text(self.completion_tokens);
            match dialect {
                Dialect::OpenAi => serde_json::to_vec(&shapes::Completion {
                    id: &self.id,
                    object: "chat.completion",
                    created: self.created,
                    model: &self.model,
                    choices: [shapes::Choice {
                        index: 0,
                        message: shapes::Message {
                            role: "assistant",
                            content: &text,
                            refusal: None,
                        },
                        logprobs: None,
                        finish_reason: self.finish.openai(),
                    }],
                    usage: self.usage(),
                    system_fingerprint: "fp_rehearse",
                }),
                Dialect::Anthropic => serde_json::to_vec(&shapes::Msg {
                    id: &self.id,
                    kind: "message",
                    role: "assistant",
                    model: &self.model,
                    content: [shapes::TextBlock {
                        kind: "text",
                        text: &text,
                    }],
                    stop_reason: self.finish.anthropic(),
                    stop_sequence: None,
                    usage: shapes::AnthropicUsage {
                        input_tokens: self.prompt_tokens,
                        output_tokens: self.completion_tokens,
                    },
                }),
            }
            .unwrap()
        }
    }

    #[test]
    fn hand_written_bodies_are_serde_jsons_bytes() {
        let strings = test_support::strings::awkward_strings();
        let mut n = 0;
        for (k, id) in strings.iter().enumerate() {
            // Each id with a model of the list further on, so that every
            // string is tried in both places and with either neighbour.
            let model = &strings[(k * 7 + 3) % strings.len()];
            for (completion_tokens, finish, created, prompt_tokens) in [
                (0, Finish::Stop, 0, 0),
                (1, Finish::Length, 1, 1),
                (16, Finish::Stop, 1_764_000_000, 16),
                (17, Finish::Length, u64::MAX, u32::MAX / 2),
            ] {
                let a = Answer {
                    id: id.clone(),
                    model: model.clone(),
                    created,
                    prompt_tokens,
                    completion_tokens,
                    finish,
                };
                for d in [Dialect::OpenAi, Dialect::Anthropic] {
                    assert_eq!(
                        String::from_utf8(a.body(d).to_vec()).unwrap(),
                        String::from_utf8(a.serde_body(d)).unwrap(),
                        "{d:?} {a:?}"
                    );
                    n += 1;
                }
            }
        }
        assert!(n > 1000, "{n} bodies compared");
    }

    #[test]
    fn the_words_in_turn_are_the_answers_text() {
        assert_eq!(WORDS_IN_TURN, WORDS.concat());
        assert!(WORDS.iter().all(|w| w.len() == 4));
        for n in 0..100 {
            let a = Answer {
                id: "x".into(),
                model: "m".into(),
                created: 1,
                prompt_tokens: 1,
                completion_tokens: n,
                finish: Finish::Stop,
            };
            let mut out = Vec::new();
            a.push_text(&mut out);
            assert_eq!(out, format!("\"{}\"", answer_text(n)).into_bytes(), "{n}");
        }
    }

    #[test]
    fn the_answers_words_need_no_escaping() {
        for w in WORDS {
            assert_eq!(serde_json::to_string(w).unwrap(), format!("\"{w}\""));
        }
    }

    #[test]
    fn openai_request_is_parsed_and_estimated() {
        let body = br#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"abcd"},{"role":"user","content":[{"type":"text","text":"efghi"}]}],"max_completion_tokens":50,"stream":true,"stream_options":{"include_usage":true}}"#;
        let r = Dialect::OpenAi.parse(body).unwrap();
        assert_eq!(r.prompt_tokens, 3); // 9 chars
        assert_eq!(r.max_tokens, Some(50));
        assert!(r.stream && r.include_usage);
    }

    #[test]
    fn anthropic_needs_max_tokens_and_counts_system() {
        let body = br#"{"model":"claude","messages":[{"role":"user","content":"12345678"}]}"#;
        let e = Dialect::Anthropic.parse(body).unwrap_err();
        assert_eq!(e.param, Some("max_tokens"));
        let body = br#"{"model":"claude","system":"1234","max_tokens":9,"messages":[{"role":"user","content":"12345678"}]}"#;
        let r = Dialect::Anthropic.parse(body).unwrap();
        assert_eq!((r.prompt_tokens, r.max_tokens), (3, Some(9)));
    }

    #[test]
    fn bad_requests_are_refused() {
        for body in [
            &b"not json"[..],
            br#"[]"#,
            br#"{"messages":[{"role":"user","content":"x"}]}"#,
            br#"{"model":"m","messages":"x"}"#,
            br#"{"model":"m","messages":[]}"#,
            br#"{"model":"m","messages":[{"content":"x"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":5}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
        ] {
            assert!(
                Dialect::OpenAi.parse(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn fast_and_checked_paths_agree() {
        let bodies: [&[u8]; 8] = [
            br#"{"model":"m","messages":[{"role":"user","content":"tab\there \ud83e\udd80 and \\ \/"}],"max_tokens":7}"#,
            br#"{"model":"m","messages":[{"role":"user"},{"role":"user","content":[]},{"role":"user","content":[{"type":"image"},{"text":"\u00e9t\u00e9"}]}],"max_tokens":2}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"h\u00e9llo w\"rld"}],"max_tokens":7}"#,
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"x"}}]}],"stream":true,"stream_options":{"include_usage":true}}"#,
            br#"{"model":"m","messages":[{"role":"assistant","content":null},{"role":"user","content":"x"}],"max_completion_tokens":3,"max_tokens":9,"temperature":0.2}"#,
            br#"{"model":"m","system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":5}"#,
            br#"{"model":"m","system":"1234","messages":[{"role":"user","content":"x"}],"max_tokens":5,"stream":false}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"metadata":{"user_id":"u"}}"#,
        ];
        for body in bodies {
            for d in [Dialect::OpenAi, Dialect::Anthropic] {
                let fast = parse_fast(d, body);
                let checked = parse_checked(d, body).ok();
                assert_eq!(fast, checked, "{d:?} {}", String::from_utf8_lossy(body));
            }
        }
        // Odd shapes: the typed path may leave them to the checked one, and
        // whatever it takes it reads as the checked path does.
        let odd: [&[u8]; 4] = [
            br#"{"model":"m","system":5,"messages":[{"role":"user","content":"x"}],"max_tokens":5}"#,
            br#"{"model":"m","system":["a"],"messages":[{"role":"user","content":["a","bc"]}],"max_tokens":5}"#,
            br#"{"model":"m","system":null,"messages":[{"role":"user","content":{"text":"x"}}],"max_tokens":5}"#,
            br#"{"model":"m","messages":[{"role":"user","content":[{"text":5}]}],"max_tokens":5,"stream":true}"#,
        ];
        for body in odd {
            for d in [Dialect::OpenAi, Dialect::Anthropic] {
                let checked = parse_checked(d, body).ok();
                if let Some(fast) = parse_fast(d, body) {
                    assert_eq!(
                        Some(fast),
                        checked,
                        "{d:?} {}",
                        String::from_utf8_lossy(body)
                    );
                }
                assert_eq!(d.parse(body).ok(), checked);
            }
        }
        // The typed path must not accept what the checked path refuses.
        let zero = br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#;
        assert!(parse_fast(Dialect::OpenAi, zero).is_none());
        assert!(Dialect::OpenAi.parse(zero).is_err());
        // Nor a body that is not UTF-8, even in a field it skips: the
        // checked path refuses it and says where.
        let latin1 = b"{\"model\":\"m\",\"user\":\"caf\xe9\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
        assert!(parse_fast(Dialect::OpenAi, latin1).is_none());
        let refused = Dialect::OpenAi.parse(latin1).unwrap_err();
        assert!(refused.message.contains("column"), "{}", refused.message);
    }

    #[test]
    fn answer_text_is_four_chars_a_token() {
        assert_eq!(estimate_tokens(answer_text(25).len()), 25);
    }

    #[test]
    fn bodies_have_the_real_shapes() {
        let a = Answer {
            id: "x".into(),
            model: "m".into(),
            created: 1,
            prompt_tokens: 3,
            completion_tokens: 2,
            finish: Finish::Length,
        };
        let v: Value = serde_json::from_slice(&a.body(Dialect::OpenAi)).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 5);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let v: Value = serde_json::from_slice(&a.body(Dialect::Anthropic)).unwrap();
        assert_eq!(v["stop_reason"], "max_tokens");
        assert_eq!(v["usage"]["output_tokens"], 2);
        let tail = a.stream_tail(Dialect::OpenAi, true);
        assert!(tail.ends_with(b"data: [DONE]\n\n"));
        let e: Value =
            serde_json::from_slice(&Dialect::Anthropic.error_body(529, "Overloaded", None, None))
                .unwrap();
        assert_eq!(e["error"]["type"], "overloaded_error");
    }
}
