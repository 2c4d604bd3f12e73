//! Request bodies for each dialect, and reading answers back: whether a 2xx
//! body is valid for the dialect, and how many completion tokens it carried.
//!
//! Its rooms: `head`, a request's head (the API key, the path, the
//! scenario's headers and their placeholders); `json`, the one question
//! asked of a whole 2xx answer, through serde_json.

use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use rand::Rng;
use wire::{Api, CHARS_PER_TOKEN};

use crate::config::RequestShape;
use crate::replay::ReplayRow;

pub(crate) mod head;
pub(crate) mod json;

/// The draws of one person's request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Drawn {
    pub(crate) prompt_tokens: u32,
    pub(crate) padding_kb: u32,
    pub(crate) max_tokens: u32,
    pub(crate) stream: bool,
    pub(crate) model: Option<Arc<str>>,
}

impl RequestShape {
    /// Draws one request; a replayed row's columns take precedence.
    pub(crate) fn draw<R: Rng + ?Sized>(&self, rng: &mut R, row: Option<&ReplayRow>) -> Drawn {
        let prompt = self.prompt_tokens.sample(rng).round() as u32;
        let padding = self.padding_kb.sample(rng).round() as u32;
        let max = self.max_tokens.sample(rng).round().max(1.0) as u32;
        let stream = self.stream_share > 0.0 && rng.gen_bool(self.stream_share);
        Drawn {
            prompt_tokens: row.and_then(|r| r.prompt_tokens).unwrap_or(prompt),
            padding_kb: padding,
            max_tokens: row.and_then(|r| r.max_tokens).unwrap_or(max).max(1),
            stream: row.and_then(|r| r.stream).unwrap_or(stream),
            model: row.and_then(|r| r.model.clone()),
        }
    }

    /// The path requests go to, below the target's base path (with the
    /// scenario's query string, if it gave a path with one).
    pub(crate) fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(self.api.path())
    }

    /// The length of the body [`RequestShape::put_body`] writes, without
    /// writing it.
    pub(crate) fn body_len(&self, id: &str, d: &Drawn) -> usize {
        let model = d.model.as_deref().unwrap_or(&self.model);
        let form = BodyForm::of(self.api);
        let mut n = r#"{"model":"#.len() + json::str_len(model);
        if let Some(key) = form.max_tokens {
            n += key.len() + json::u64_len(u64::from(d.max_tokens));
        }
        if d.stream {
            n += form.stream.len();
        }
        // The marker and a space before the prompt text.
        n += form.open.len() + wire::marker(id).len() + 1;
        n += d.prompt_tokens as usize * CHARS_PER_TOKEN;
        if d.padding_kb > 0 {
            n += r#"\n\nContext:\n"#.len() + d.padding_kb as usize * 1024;
        }
        n + form.close.len()
    }

    /// Appends the JSON body of a request to `out` ([`RequestShape::body_len`]
    /// bytes).
    pub(crate) fn put_body(&self, out: &mut Vec<u8>, id: &str, d: &Drawn) {
        let model = d.model.as_deref().unwrap_or(&self.model);
        let form = BodyForm::of(self.api);
        let start = out.len();
        out.extend_from_slice(b"{\"model\":");
        json::push_str(out, model);
        if let Some(key) = form.max_tokens {
            out.extend_from_slice(key.as_bytes());
            json::push_u64(out, u64::from(d.max_tokens));
        }
        if d.stream {
            out.extend_from_slice(form.stream.as_bytes());
        }
        out.extend_from_slice(form.open.as_bytes());
        // Ids are validated ASCII letters, digits, '-' and '_' (within
        // wire::is_request_id): nothing to escape.
        out.extend_from_slice(wire::MARKER_OPEN.as_bytes());
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(wire::MARKER_CLOSE.as_bytes());
        out.push(b' ');
        put_filler(out, d.prompt_tokens as usize * CHARS_PER_TOKEN);
        if d.padding_kb > 0 {
            out.extend_from_slice(b"\\n\\nContext:\\n");
            put_filler(out, d.padding_kb as usize * 1024);
        }
        out.extend_from_slice(form.close.as_bytes());
        debug_assert_eq!(
            out.len() - start,
            self.body_len(id, d),
            "content-length must match"
        );
    }

    /// The JSON body of a request, on its own.
    pub(crate) fn body(&self, id: &str, d: &Drawn) -> Bytes {
        let mut out = Vec::with_capacity(self.body_len(id, d));
        self.put_body(&mut out, id, d);
        out.into()
    }
}

/// The JSON around a body's model, counts and prompt, per API: the
/// prompt is one user message (chat, messages) or the `input` string
/// (responses, embeddings).
struct BodyForm {
    /// The key of the token limit and its colon (embeddings have none).
    max_tokens: Option<&'static str>,
    /// What a streamed request adds.
    stream: &'static str,
    /// Up to the prompt's opening quote.
    open: &'static str,
    /// From the prompt's closing quote.
    close: &'static str,
}

impl BodyForm {
    fn of(api: Api) -> BodyForm {
        const MESSAGES: &str = r#","messages":[{"role":"user","content":""#;
        match api {
            Api::Chat => BodyForm {
                max_tokens: Some(r#","max_tokens":"#),
                stream: r#","stream":true,"stream_options":{"include_usage":true}"#,
                open: MESSAGES,
                close: r#""}]}"#,
            },
            Api::Messages => BodyForm {
                max_tokens: Some(r#","max_tokens":"#),
                stream: r#","stream":true"#,
                open: MESSAGES,
                close: r#""}]}"#,
            },
            Api::Responses => BodyForm {
                max_tokens: Some(r#","max_output_tokens":"#),
                stream: r#","stream":true"#,
                open: r#","input":""#,
                close: r#""}"#,
            },
            // Never streamed (validated).
            Api::Embeddings => BodyForm {
                max_tokens: None,
                stream: "",
                open: r#","input":""#,
                close: r#""}"#,
            },
        }
    }
}

/// Plain lowercase words and spaces: nothing to escape in JSON.
fn filler() -> &'static [u8] {
    static TEXT: OnceLock<Vec<u8>> = OnceLock::new();
    TEXT.get_or_init(|| {
        const WORDS: [&str; 16] = [
            "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "while", "shoppers",
            "ask", "about", "sizes", "colours", "prices", "today",
        ];
        let mut out = Vec::with_capacity(64 * 1024);
        let mut i = 0usize;
        while out.len() < 64 * 1024 {
            out.extend_from_slice(WORDS[(i * 7 + i / 16) % WORDS.len()].as_bytes());
            out.push(b' ');
            i += 1;
        }
        out
    })
}

fn put_filler(out: &mut Vec<u8>, mut n: usize) {
    let text = filler();
    out.reserve(n);
    while n > 0 {
        let k = n.min(text.len());
        out.extend_from_slice(&text[..k]);
        n -= k;
    }
}

/// Reads a 2xx answer, whole or streamed, and decides whether it is valid.
#[derive(Debug)]
pub(crate) struct AnswerReader {
    api: Api,
    sse: bool,
    /// The whole body (JSON) or the unfinished last line (SSE).
    buf: BytesMut,
    done: bool,
    usage_tokens: Option<u64>,
    chunks: u64,
    invalid: bool,
}

/// Bodies larger than this are not kept for validation: a JSON answer that
/// large is not one a fake provider or a gateway produces.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

impl AnswerReader {
    /// A reader of an answer of `api`, a stream of server-sent events if
    /// `sse` (its content type said `text/event-stream`).
    pub(crate) fn new(api: Api, sse: bool) -> Self {
        AnswerReader {
            api,
            sse,
            buf: BytesMut::new(),
            done: false,
            usage_tokens: None,
            chunks: 0,
            invalid: false,
        }
    }

    pub(crate) fn feed(&mut self, data: &[u8]) {
        if self.invalid {
            return;
        }
        if !self.sse {
            if self.buf.len() + data.len() > MAX_JSON_BODY {
                self.invalid = true;
                self.buf = BytesMut::new();
            } else {
                self.buf.extend_from_slice(data);
            }
            return;
        }
        self.buf.extend_from_slice(data);
        while let Some(nl) = self.buf.iter().position(|&c| c == b'\n') {
            let line = self.buf.split_to(nl + 1);
            self.sse_line(&line[..nl]);
        }
        if self.buf.len() > MAX_JSON_BODY {
            self.invalid = true;
        }
    }

    fn sse_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return; // event:, id:, comments and blank separators
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if self.done {
            // Nothing may follow the end of a stream.
            self.invalid = true;
            return;
        }
        if self.api == Api::Chat && data == b"[DONE]" {
            self.done = true;
            return;
        }
        match self.api {
            Api::Chat => self.chat_chunk(data),
            Api::Messages => self.messages_event(data),
            Api::Responses => self.responses_event(data),
            // An embeddings answer is never a stream.
            Api::Embeddings => self.invalid = true,
        }
    }

    fn chat_chunk(&mut self, data: &[u8]) {
        let Ok(chunk) = serde_json::from_slice::<shapes::OaChunk<'_>>(data) else {
            self.invalid = true;
            return;
        };
        if chunk.error.is_some() {
            self.invalid = true;
            return;
        }
        if let Some(t) = chunk.usage.and_then(|u| u.completion_tokens) {
            self.usage_tokens = Some(t);
        }
        let has_content = chunk
            .choices
            .first()
            .and_then(|c| c.delta.as_ref())
            .and_then(|d| d.content.as_ref())
            .is_some_and(|c| !c.is_empty());
        if has_content {
            self.chunks += 1;
        }
    }

    fn messages_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<shapes::AnEvent<'_>>(data) else {
            self.invalid = true;
            return;
        };
        match event.kind.as_ref() {
            "content_block_delta" => self.chunks += 1,
            "message_delta" => {
                if let Some(t) = event.usage.and_then(|u| u.output_tokens) {
                    self.usage_tokens = Some(t);
                }
            }
            "message_stop" => self.done = true,
            "error" => self.invalid = true,
            _ => {}
        }
    }

    /// A Responses stream's typed event: the text's deltas counted, the
    /// usage read from `response.completed`, which ends the stream.
    fn responses_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<shapes::RsEvent<'_>>(data) else {
            self.invalid = true;
            return;
        };
        match event.kind.as_ref() {
            "response.output_text.delta" => self.chunks += 1,
            "response.completed" => {
                if let Some(t) = event
                    .response
                    .and_then(|r| r.usage)
                    .and_then(|u| u.output_tokens)
                {
                    self.usage_tokens = Some(t);
                }
                self.done = true;
            }
            "error" | "response.failed" | "response.incomplete" => self.invalid = true,
            _ => {}
        }
    }

    /// The completion tokens of a valid answer, or `None` if the body is
    /// not valid for the dialect (a stream that ended without its end
    /// marker counts as invalid).
    pub(crate) fn finish(mut self) -> Option<u64> {
        if self.invalid {
            return None;
        }
        if self.sse {
            if !self.buf.is_empty() {
                let rest = self.buf.split();
                self.sse_line(&rest);
            }
            return (self.done && !self.invalid).then(|| self.usage_tokens.unwrap_or(self.chunks));
        }
        json::answer_tokens(self.api, &self.buf)
    }
}

/// The parts of a stream's events that are read, as typed structs (faster
/// than a generic JSON value; unknown fields are skipped). A whole answer
/// is read in `json`.
mod shapes {
    use std::borrow::Cow;

    use serde::de::IgnoredAny;
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub(super) struct OaUsage {
        pub(super) completion_tokens: Option<u64>,
    }

    #[derive(Deserialize)]
    pub(super) struct OaDelta<'a> {
        #[serde(borrow)]
        pub(super) content: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(super) struct OaDeltaChoice<'a> {
        #[serde(borrow)]
        pub(super) delta: Option<OaDelta<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct OaChunk<'a> {
        #[serde(default, borrow)]
        pub(super) choices: Vec<OaDeltaChoice<'a>>,
        pub(super) usage: Option<OaUsage>,
        pub(super) error: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    pub(super) struct AnUsage {
        pub(super) output_tokens: Option<u64>,
    }

    #[derive(Deserialize)]
    pub(super) struct RsResponse {
        pub(super) usage: Option<AnUsage>,
    }

    #[derive(Deserialize)]
    pub(super) struct RsEvent<'a> {
        #[serde(rename = "type", borrow)]
        pub(super) kind: Cow<'a, str>,
        pub(super) response: Option<RsResponse>,
    }

    #[derive(Deserialize)]
    pub(super) struct AnEvent<'a> {
        #[serde(rename = "type", borrow)]
        pub(super) kind: Cow<'a, str>,
        pub(super) usage: Option<AnUsage>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Dist;

    fn shape(api: Api) -> RequestShape {
        RequestShape {
            api,
            model: "m\"odel".into(),
            prompt_tokens: Dist::Fixed(100.0),
            padding_kb: Dist::Fixed(2.0),
            max_tokens: Dist::Fixed(50.0),
            stream_share: 0.0,
            api_key: "k".into(),
            path: None,
            auth: head::Auth::Bearer,
            headers: Vec::new(),
        }
    }

    #[test]
    fn openai_body_is_valid_json_with_marker_and_sizes() {
        let s = shape(Api::Chat);
        let mut rng = rand::thread_rng();
        let mut d = s.draw(&mut rng, None);
        d.stream = true;
        let body = s.body("r000042", &d);
        assert_eq!(body.len(), s.body_len("r000042", &d));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "m\"odel");
        assert_eq!(v["max_tokens"], 50);
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        let content = v["messages"][0]["content"].as_str().unwrap();
        assert!(content.starts_with("[rehearse:id=r000042] "));
        // 100 tokens of about 4 characters, and 2 KiB of context.
        let len = content.len();
        assert!((400 + 2048..400 + 2048 + 64).contains(&len), "{len}");
    }

    #[test]
    fn replayed_row_overrides_draws() {
        let s = shape(Api::Messages);
        let row = ReplayRow {
            prompt_tokens: Some(7),
            max_tokens: Some(9),
            stream: Some(true),
            model: Some(Arc::from("claude")),
            ..ReplayRow::default()
        };
        let d = s.draw(&mut rand::thread_rng(), Some(&row));
        assert_eq!(s.body("x1", &d).len(), s.body_len("x1", &d));
        let v: serde_json::Value = serde_json::from_slice(&s.body("x1", &d)).unwrap();
        assert_eq!(v["model"], "claude");
        assert_eq!(v["max_tokens"], 9);
        assert_eq!(v["stream"], true);
        assert!(v.get("stream_options").is_none());
    }

    fn read(api: Api, ct: &str, chunks: &[&str]) -> Option<u64> {
        let mut r = AnswerReader::new(api, ct.starts_with("text/event-stream"));
        for c in chunks {
            r.feed(c.as_bytes());
        }
        r.finish()
    }

    #[test]
    fn openai_answers() {
        let json = "application/json";
        let ok = r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"completion_tokens":12}}"#;
        assert_eq!(read(Api::Chat, json, &[&ok[..10], &ok[10..]]), Some(12));
        assert_eq!(read(Api::Chat, json, &["{\"choices\":[]}"]), None);
        assert_eq!(read(Api::Chat, json, &["not json"]), None);
        let sse = "text/event-stream";
        let c =
            |s: &str| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{s}\"}}}}]}}\n\n");
        let (a, b) = (c("a"), c("b"));
        let usage = "data: {\"choices\":[],\"usage\":{\"completion_tokens\":5}}\n\n";
        // Split across chunk boundaries in the middle of a line.
        let all = format!("{a}{b}{usage}data: [DONE]\n\n");
        assert_eq!(
            read(Api::Chat, sse, &[&all[..7], &all[7..40], &all[40..]]),
            Some(5)
        );
        // Without usage, chunks are counted.
        assert_eq!(read(Api::Chat, sse, &[&a, &b, "data: [DONE]\n\n"]), Some(2));
        // Cut before [DONE]: not a valid answer.
        assert_eq!(read(Api::Chat, sse, &[&a, &b]), None);
        assert_eq!(read(Api::Chat, sse, &[&a, "data: {oops\n\n"]), None);
    }

    #[test]
    fn anthropic_answers() {
        let ok = r#"{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":4}}"#;
        assert_eq!(read(Api::Messages, "application/json", &[ok]), Some(4));
        assert_eq!(
            read(Api::Messages, "application/json", &["{\"type\":\"error\"}"]),
            None
        );
        let sse = "text/event-stream";
        let stream = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
                      event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n\
                      event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n\
                      event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert_eq!(read(Api::Messages, sse, &[stream]), Some(9));
        assert_eq!(read(Api::Messages, sse, &[&stream[..120]]), None);
    }

    #[test]
    fn responses_and_embeddings_bodies_carry_the_prompt_as_input() {
        let mut rng = rand::thread_rng();
        let s = shape(Api::Responses);
        let mut d = s.draw(&mut rng, None);
        d.stream = true;
        let body = s.body("r000042", &d);
        assert_eq!(body.len(), s.body_len("r000042", &d));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["max_output_tokens"], 50);
        assert_eq!(v["stream"], true);
        assert!(v.get("stream_options").is_none() && v.get("messages").is_none());
        assert!(v["input"]
            .as_str()
            .unwrap()
            .starts_with("[rehearse:id=r000042] "));
        let s = shape(Api::Embeddings);
        let d = s.draw(&mut rng, None);
        let body = s.body("r1", &d);
        assert_eq!(body.len(), s.body_len("r1", &d));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v.get("max_tokens").is_none() && v.get("stream").is_none());
        assert!(v["input"]
            .as_str()
            .unwrap()
            .starts_with("[rehearse:id=r1] "));
    }

    #[test]
    fn responses_streams_end_at_completed_and_count_its_usage() {
        let sse = "text/event-stream";
        let ev = |kind: &str, rest: &str| {
            format!("event: {kind}\ndata: {{\"type\":\"{kind}\"{rest}}}\n\n")
        };
        let created = ev(
            "response.created",
            r#","response":{"id":"resp_1","status":"in_progress"}"#,
        );
        let delta = ev("response.output_text.delta", r#","delta":"hi ""#);
        let done = ev("response.output_text.done", r#","text":"hi hi ""#);
        let completed = ev(
            "response.completed",
            r#","response":{"status":"completed","usage":{"input_tokens":3,"output_tokens":11}}"#,
        );
        let all = format!("{created}{delta}{delta}{done}{completed}");
        assert_eq!(
            read(Api::Responses, sse, &[&all[..50], &all[50..]]),
            Some(11)
        );
        // Cut before response.completed: not a valid answer.
        let cut = format!("{created}{delta}{delta}");
        assert_eq!(read(Api::Responses, sse, &[&cut]), None);
        let failed = format!("{created}{}", ev("response.failed", ""));
        assert_eq!(read(Api::Responses, sse, &[&failed]), None);
        assert_eq!(read(Api::Embeddings, sse, &[&all]), None);
    }
}
