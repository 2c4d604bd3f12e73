//! JSON on the load generator's path: the one question asked of a whole
//! (not streamed) 2xx answer (is it a valid answer of its dialect, and how
//! many completion tokens does its usage say?), read through serde_json;
//! strings and numbers are written into request bodies and `client.jsonl`
//! by `wire::json`.
//!
//! The answer is read by typed structs that borrow from the body and keep
//! nothing they do not need: `choices` and `content` are checked as
//! arrays (non-empty for OpenAI) element by element, never collected, and
//! everything else is skipped by serde_json, which still validates it.
//! - OpenAI: an object whose `choices` is a non-empty array of objects that
//!   each have a `message`; `usage`, if present and not null, an object
//!   whose `completion_tokens`, if present and not null, is an unsigned
//!   integer;
//! - Anthropic: an object whose `type` is `"message"`, whose `content` is
//!   an array, and whose `usage.output_tokens` reads as above;
//! - Responses: an object whose `object` is `"response"`, whose `output`
//!   is an array, and whose `usage.output_tokens` reads as above;
//! - embeddings: an object whose `data` is a non-empty array of objects
//!   that each have an `embedding` (no completion tokens: 0);
//! - a field named twice among those read is an error (serde's derive);
//! - the whole body is UTF-8 (RFC 8259), checked once up front: serde_json
//!   then reads it as a `str` and skips its per-string UTF-8 checks (a
//!   sixth of the instructions of an answer read, measured with callgrind).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use wire::Api;

/// The completion tokens of a valid answer of `api` in `body` (0 when
/// its usage does not say, and for embeddings), or `None` if it is not
/// one.
pub(crate) fn answer_tokens(api: Api, body: &[u8]) -> Option<u64> {
    let body = std::str::from_utf8(body).ok()?;
    match api {
        Api::Chat => {
            let c: OaCompletion = serde_json::from_str(body).ok()?;
            Some(c.usage.and_then(|u| u.completion_tokens).unwrap_or(0))
        }
        Api::Messages => {
            let m: AnMessage<'_> = serde_json::from_str(body).ok()?;
            (m.kind == "message").then(|| m.usage.and_then(|u| u.output_tokens).unwrap_or(0))
        }
        Api::Responses => {
            let r: RsResponse<'_> = serde_json::from_str(body).ok()?;
            (r.object == "response").then(|| r.usage.and_then(|u| u.output_tokens).unwrap_or(0))
        }
        Api::Embeddings => {
            let _: EmList = serde_json::from_str(body).ok()?;
            Some(0)
        }
    }
}

#[derive(Deserialize)]
struct RsResponse<'a> {
    #[serde(borrow)]
    object: Cow<'a, str>,
    #[allow(dead_code)]
    output: Array<IgnoredAny, 0>,
    usage: Option<AnUsage>,
}

#[derive(Deserialize)]
struct EmItem {
    #[allow(dead_code)]
    embedding: IgnoredAny,
}

#[derive(Deserialize)]
struct EmList {
    #[allow(dead_code)]
    data: Array<EmItem, 1>,
}

#[derive(Deserialize)]
struct OaUsage {
    completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OaChoice {
    #[allow(dead_code)]
    message: IgnoredAny,
}

#[derive(Deserialize)]
struct OaCompletion {
    #[allow(dead_code)]
    choices: Array<OaChoice, 1>,
    usage: Option<OaUsage>,
}

#[derive(Deserialize)]
struct AnUsage {
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct AnMessage<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[allow(dead_code)]
    content: Array<IgnoredAny, 0>,
    usage: Option<AnUsage>,
}

/// A JSON array of at least `MIN` elements, each a valid `T`, checked as
/// it is read and not kept (a `Vec` would allocate for every answer).
struct Array<T, const MIN: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MIN: usize> Deserialize<'de> for Array<T, MIN> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Count<T, const MIN: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const MIN: usize> Visitor<'de> for Count<T, MIN> {
            type Value = Array<T, MIN>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at least {MIN}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut n = 0;
                while seq.next_element::<T>()?.is_some() {
                    n += 1;
                }
                if n < MIN {
                    return Err(de::Error::invalid_length(n, &self));
                }
                Ok(Array(PhantomData))
            }
        }
        d.deserialize_seq(Count(PhantomData))
    }
}

// The writer of request bodies and record lines is the one in `wire`.
pub(crate) use wire::json::{push_str, push_u64, str_len, u64_len};

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str = r#"{"id":"chatcmpl-rh0","object":"chat.completion","created":1796133226,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"sun cat map red oak sky tea ink fox bay elm owl jar fig ivy pen ","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":16,"total_tokens":25},"system_fingerprint":"fp_rehearse"}"#;
    const ANTHROPIC: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00 \"q\" é"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}"#;

    #[test]
    fn answers_are_valid_by_their_dialect_s_fields() {
        let cases: &[(Api, &str, Option<u64>)] = &[
            (Api::Chat, OPENAI, Some(16)),
            (Api::Messages, ANTHROPIC, Some(4)),
            (
                Api::Responses,
                r#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message"}],"usage":{"input_tokens":3,"output_tokens":7}}"#,
                Some(7),
            ),
            (
                Api::Responses,
                r#"{"object":"response","output":[]}"#,
                Some(0),
            ),
            (Api::Responses, r#"{"object":"list","output":[]}"#, None),
            (Api::Responses, r#"{"object":"response"}"#, None),
            (
                Api::Embeddings,
                r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":5,"total_tokens":5}}"#,
                Some(0),
            ),
            (Api::Embeddings, r#"{"object":"list","data":[]}"#, None),
            (Api::Embeddings, r#"{"data":[{"index":0}]}"#, None),
            (Api::Chat, r#"{"choices":[{"message":null}]}"#, Some(0)),
            (
                Api::Chat,
                r#" {"choices":[{"message":1}],"usage":null} "#,
                Some(0),
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":null}}"#,
                Some(0),
            ),
            (Api::Chat, r#"{"choices":[]}"#, None),
            (Api::Chat, r#"{"choices":[{}]}"#, None),
            (
                Api::Chat,
                r#"{"choices":[{"message":1,"message":2}]}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"choices":[{"message":1}]}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":-1}}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":1.0}}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":1e2}}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":18446744073709551616}}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":18446744073709551615}}"#,
                Some(u64::MAX),
            ),
            (Api::Chat, r#"{"choices":[{"message":1}]} x"#, None),
            (Api::Chat, r#"{"choic\u0065s":[{"message":1}]}"#, Some(0)),
            (Api::Chat, "{\"choices\":[{\"message\":\"a\tb\"}]}", None),
            // As serde_json: a skipped string's \u escapes are not checked
            // for surrogates, a key's are.
            (Api::Chat, r#"{"choices":[{"message":"\ud800"}]}"#, Some(0)),
            (
                Api::Chat,
                r#"{"choices":[{"message":1,"x\ud800":1}]}"#,
                None,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"message":1,"\ud83d\ude00":1}]}"#,
                Some(0),
            ),
            (Api::Chat, r#"{"choices":[{"message":01}]}"#, None),
            (Api::Chat, r#"{"choices":[{"message":-}]}"#, None),
            (Api::Chat, r#"{"choices":[{"message":[1,]}]}"#, None),
            (Api::Chat, r#"{"choices":[{"message":1},]}"#, None),
            (Api::Messages, r#"{"type":"message","content":[]}"#, Some(0)),
            (Api::Messages, r#"{"type":"error","content":[]}"#, None),
            (Api::Messages, r#"{"type":"message"}"#, None),
            (
                Api::Messages,
                r#"{"type":"messag\u0065","content":[],"usage":{"output_tokens":7}}"#,
                Some(7),
            ),
            (Api::Messages, r#"{"type":1,"content":[]}"#, None),
            (Api::Chat, "", None),
            (Api::Chat, "[]", None),
        ];
        for (dialect, body, want) in cases {
            assert_eq!(answer_tokens(*dialect, body.as_bytes()), *want, "{body}");
        }
        // Not UTF-8, even where the reader skips: not an answer.
        let mut latin1 = br#"{"choices":[{"message":"caf"#.to_vec();
        latin1.extend_from_slice(b"\xe9\"}]}");
        assert_eq!(answer_tokens(Api::Chat, &latin1), None);
        let e_acute = latin1.len() - 5;
        latin1[e_acute] = b'e';
        assert_eq!(answer_tokens(Api::Chat, &latin1), Some(0));
        // Nesting under a skipped value: any depth, as serde_json skips it.
        let deep = |n: usize| {
            format!(
                r#"{{"choices":[{{"message":{}{}}}]}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        for n in [100, 126, 200, 100_000] {
            let body = deep(n);
            assert_eq!(
                answer_tokens(Api::Chat, body.as_bytes()),
                Some(0),
                "depth {n}"
            );
        }
    }
}
