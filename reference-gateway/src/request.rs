//! What the gateway reads from a request body: only enough to admit it
//! (its size in tokens, by the estimate every part of a rehearsal uses,
//! [`wire::estimate_tokens`], and whether it streams). The body is
//! forwarded byte for byte; the prompt is never touched.

use serde_json::Value;
use wire::Api;

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("the body is not valid JSON: {0}")]
    NotJson(String),
    #[error("the body must be a JSON object with a `messages` array")]
    NoMessages,
    #[error("the body must be a JSON object with an `input` (a string or an array)")]
    NoInput,
}

/// What admission needs from a request body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestShape {
    /// Estimated prompt tokens.
    pub(crate) prompt_tokens: u64,
    /// `max_tokens` (or `max_completion_tokens`) if the request sets it.
    pub(crate) max_tokens: Option<u64>,
    /// Whether the caller asked for a server-sent-events stream.
    pub(crate) stream: bool,
}

impl RequestShape {
    /// Reads a body of `api`: a chat of either dialect (`messages`,
    /// Anthropic's `system`), a Responses call (`input`, `instructions`,
    /// `max_output_tokens`) or an embeddings call (`input`; it completes
    /// nothing, so its cost is its prompt).
    pub(crate) fn parse(body: &[u8], api: Api) -> Result<RequestShape, BodyError> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| BodyError::NotJson(e.to_string()))?;
        let refused = match api {
            Api::Chat | Api::Messages => BodyError::NoMessages,
            Api::Responses | Api::Embeddings => BodyError::NoInput,
        };
        let obj = v.as_object().ok_or(refused.clone())?;
        let mut chars = 0usize;
        match api {
            Api::Chat | Api::Messages => {
                let messages = obj
                    .get("messages")
                    .and_then(Value::as_array)
                    .ok_or(refused)?;
                if let Some(system) = obj.get("system") {
                    chars += text_chars(system);
                }
                for m in messages {
                    chars += m.get("content").map_or(0, text_chars);
                }
            }
            Api::Responses | Api::Embeddings => {
                match obj.get("input") {
                    Some(s @ Value::String(_)) => chars += text_chars(s),
                    Some(Value::Array(items)) => {
                        for item in items {
                            chars += match item {
                                Value::String(s) => s.chars().count(),
                                // A token array: four characters a token.
                                Value::Array(tokens) => tokens.len() * wire::CHARS_PER_TOKEN,
                                other => other.get("content").map_or(0, text_chars),
                            };
                        }
                    }
                    _ => return Err(refused),
                }
                if let Some(i) = obj.get("instructions") {
                    chars += text_chars(i);
                }
            }
        }
        let max_tokens = match api {
            Api::Embeddings => Some(0),
            _ => ["max_tokens", "max_completion_tokens", "max_output_tokens"]
                .iter()
                .find_map(|k| obj.get(*k).and_then(Value::as_u64)),
        };
        Ok(RequestShape {
            prompt_tokens: wire::estimate_tokens(chars),
            max_tokens,
            stream: obj.get("stream").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// Tokens this request can consume: prompt + max_tokens (the same
    /// reservation a provider's quota makes at admission).
    pub(crate) fn cost(&self, default_max_tokens: u64) -> u64 {
        self.prompt_tokens + self.max_tokens.unwrap_or(default_max_tokens)
    }
}

/// Characters of text in a message `content` (a string, or an array of
/// parts with `text`) or an Anthropic `system` field.
fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.chars().count(),
                other => other
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or(0, |s| s.chars().count()),
            })
            .sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_body_cost_is_prompt_plus_max_tokens() {
        let body = br#"{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"12345678"},{"role":"assistant","content":[{"type":"text","text":"abcd"}]}]}"#;
        let s = RequestShape::parse(body, Api::Chat).unwrap();
        assert_eq!(s.prompt_tokens, 3, "12 chars / 4");
        assert_eq!(s.max_tokens, Some(50));
        assert!(!s.stream);
        assert_eq!(s.cost(999), 53);
    }

    #[test]
    fn anthropic_system_counts_and_default_max_tokens_applies() {
        let body =
            br#"{"system":"sys!","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let s = RequestShape::parse(body, Api::Chat).unwrap();
        assert_eq!(s.prompt_tokens, 2, "6 chars rounds up to 2");
        assert!(s.stream);
        assert_eq!(s.cost(100), 102);
        let body = br#"{"max_completion_tokens":7,"messages":[]}"#;
        assert_eq!(
            RequestShape::parse(body, Api::Chat).unwrap().max_tokens,
            Some(7)
        );
    }

    #[test]
    fn bad_bodies_are_refused() {
        assert!(matches!(
            RequestShape::parse(b"{nope", Api::Chat),
            Err(BodyError::NotJson(_))
        ));
        assert_eq!(
            RequestShape::parse(b"[1,2]", Api::Messages),
            Err(BodyError::NoMessages)
        );
        assert_eq!(
            RequestShape::parse(br#"{"messages":3}"#, Api::Chat),
            Err(BodyError::NoMessages)
        );
    }

    #[test]
    fn responses_and_embeddings_are_read_by_their_input() {
        let body = br#"{"model":"m","input":"12345678","instructions":"abcd","max_output_tokens":9,"stream":true}"#;
        let s = RequestShape::parse(body, Api::Responses).unwrap();
        assert_eq!(
            (s.prompt_tokens, s.max_tokens, s.stream),
            (3, Some(9), true)
        );
        let body = br#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"12345678"}]}]}"#;
        assert_eq!(
            RequestShape::parse(body, Api::Responses)
                .unwrap()
                .prompt_tokens,
            2
        );
        let body = br#"{"model":"e","input":["1234","12345678",[1,2,3]]}"#;
        let s = RequestShape::parse(body, Api::Embeddings).unwrap();
        assert_eq!((s.prompt_tokens, s.cost(1000)), (6, 6), "its prompt alone");
        assert_eq!(
            RequestShape::parse(br#"{"model":"e"}"#, Api::Embeddings),
            Err(BodyError::NoInput)
        );
    }
}
