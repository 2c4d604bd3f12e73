//! A strict, allocation-free JSON scanner for the one question asked of a
//! whole (not streamed) 2xx answer: is it a valid answer of its dialect,
//! and how many completion tokens does its usage say?
//!
//! Why not serde_json: a typed parse of a 370-byte OpenAI answer, skipping
//! the fields it does not need, cost about 7,400 instructions (callgrind),
//! a fifth of everything the load generator did per request. This scanner
//! validates the whole body as JSON in one pass, as serde_json validates
//! what it skips (strings with their escapes and no control characters,
//! numbers by the grammar, nesting to any depth, nothing after the value
//! but whitespace), decodes the keys it reads as serde_json does (UTF-8,
//! escapes, surrogate pairs), and reads the few fields on the way.
//!
//! It accepts what the typed parse accepted, with the same field rules:
//! - OpenAI: an object whose `choices` is a non-empty array of objects that
//!   each have a `message`; `usage`, if present and not null, an object
//!   whose `completion_tokens`, if present and not null, is an unsigned
//!   integer;
//! - Anthropic: an object whose `type` is `"message"`, whose `content` is
//!   an array, and whose `usage.output_tokens` reads as above;
//! - a field named twice among those read is an error, as it was.
//!
//! It is stricter in one corner no provider or gateway writes: an object
//! given as an array (serde's sequence form of a struct) is refused. The
//! differential test below holds it to serde_json on mutated answers.
//!
//! Also here, the other way: strings and numbers written as serde_json
//! writes them, for request bodies and `client.jsonl`.

use wire::Dialect;

/// The completion tokens of a valid answer of `dialect` in `body` (0 when
/// its usage does not say), or `None` if it is not one.
pub(crate) fn answer_tokens(dialect: Dialect, body: &[u8]) -> Option<u64> {
    let mut s = Scanner { b: body, i: 0 };
    let tokens = match dialect {
        Dialect::OpenAi => s.openai()?,
        Dialect::Anthropic => s.anthropic()?,
    };
    s.ws();
    (s.i == s.b.len()).then_some(tokens)
}

/// A string as it appears between its quotes.
#[derive(Clone, Copy)]
struct Str<'a> {
    raw: &'a [u8],
    /// It has a backslash escape.
    escaped: bool,
    /// Every byte is ASCII.
    ascii: bool,
}

impl Str<'_> {
    /// Whether the string's value is `want`; `None` when it is not text
    /// (invalid UTF-8, a lone surrogate), which serde_json refuses in a
    /// key or a string it reads.
    #[inline(always)]
    fn is(&self, want: &str) -> Option<bool> {
        match (self.escaped, self.ascii) {
            // Nearly always: plain ASCII, compared as it is.
            (false, true) => Some(self.raw == want.as_bytes()),
            (false, false) => {
                std::str::from_utf8(self.raw).ok()?;
                Some(self.raw == want.as_bytes())
            }
            // Rare: written with escapes, decoded to compare.
            (true, _) => Some(decode(self.raw)? == want),
        }
    }
}

/// The value of a scanned string with escapes; `None` if it is not text.
fn decode(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    let hex = |chars: &mut std::str::Chars<'_>| {
        let h: String = chars.by_ref().take(4).collect();
        u32::from_str_radix(&h, 16).ok()
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let unit = hex(&mut chars)?;
                if (0xD800..0xDC00).contains(&unit) {
                    // A high surrogate: a low one must follow.
                    if (chars.next()?, chars.next()?) != ('\\', 'u') {
                        return None;
                    }
                    let low = hex(&mut chars)?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return None;
                    }
                    char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                } else {
                    char::from_u32(unit)?
                }
            }
            _ => return None,
        });
    }
    Some(out)
}

/// The containers open while a value is skipped, innermost last: one bit
/// each, set for an object. The first 64 need no allocation.
#[derive(Default)]
struct Open {
    depth: usize,
    bits: u64,
    deeper: Vec<bool>,
}

impl Open {
    fn push(&mut self, object: bool) {
        if self.depth < 64 {
            self.bits = self.bits & !(1 << self.depth) | (u64::from(object) << self.depth);
        } else {
            self.deeper.push(object);
        }
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.depth -= 1;
        if self.depth >= 64 {
            self.deeper.pop();
        }
    }

    /// Whether the innermost open container is an object; `None` if none is.
    fn top(&self) -> Option<bool> {
        match self.depth {
            0 => None,
            d if d <= 64 => Some(self.bits >> (d - 1) & 1 == 1),
            _ => self.deeper.last().copied(),
        }
    }
}

/// The high bit of each of eight bytes.
const HIGH: u64 = 0x8080_8080_8080_8080;
/// One in each of eight bytes.
const ONES: u64 = 0x0101_0101_0101_0101;

/// Nonzero if and only if one of the eight bytes of `x` is a quote, a
/// backslash or under 0x20 (the usual bit tricks: a byte's high bit is set
/// in `(b - k) & !b` when b < k, for b under 0x80; a byte equal to q is
/// zero in `b ^ q`). Bytes from 0x80 up never count.
#[inline(always)]
fn special(x: u64) -> u64 {
    let below = |x: u64, k: u8| x.wrapping_sub(ONES * u64::from(k)) & !x & HIGH;
    below(x, 0x20)
        | below(x ^ (ONES * u64::from(b'"')), 1)
        | below(x ^ (ONES * u64::from(b'\\')), 1)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A string, the opening quote next. As in serde_json, a skipped
    /// string is checked for its escapes and control characters only; a
    /// key (and a value compared, [`Str::is`]) is also decoded as UTF-8.
    #[inline(always)]
    fn string(&mut self) -> Option<Str<'a>> {
        self.eat(b'"')?;
        let start = self.i;
        let (mut escaped, mut ascii) = (false, true);
        loop {
            // Eight bytes at a time to the next special one: a quote, a
            // backslash, a control character (each a byte under 0x80).
            while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                ascii &= x & HIGH == 0;
                let found = special(x);
                if found != 0 {
                    // The lowest flag is always a special byte (a false
                    // flag, from a borrow, only ever sits above a true one).
                    self.i += (found.trailing_zeros() / 8) as usize;
                    break;
                }
                self.i += 8;
            }
            let c = *self.b.get(self.i)?;
            match c {
                b'"' => {
                    let raw = &self.b[start..self.i];
                    self.i += 1;
                    return Some(Str {
                        raw,
                        escaped,
                        ascii,
                    });
                }
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                0..=0x1f => return None,
                _ => {
                    ascii &= c < 0x80;
                    self.i += 1;
                }
            }
        }
    }

    /// One escape sequence, the backslash next.
    fn escape(&mut self) -> Option<()> {
        self.i += 1;
        match *self.b.get(self.i)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                self.i += 1;
                Some(())
            }
            b'u' => {
                let digits = self.b.get(self.i + 1..self.i + 5)?;
                if !digits.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                self.i += 5;
                Some(())
            }
            _ => None,
        }
    }

    /// A number; returns its value when it is an unsigned integer that
    /// fits a u64 (no sign, fraction or exponent), as a u64 field needs.
    fn number(&mut self) -> Option<Option<u64>> {
        self.ws();
        let start = self.i;
        let negative = self.b.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let int_end = self.i;
        let mut plain = !negative;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.digit_run()?;
            plain = false;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            self.digit_run()?;
            plain = false;
        }
        if !plain {
            return Some(None);
        }
        // Digits only: a u64, unless it is too large for one.
        let mut v = 0u64;
        for d in &self.b[start..int_end] {
            v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        Some(Some(v))
    }

    #[inline(always)]
    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// At least one digit.
    fn digit_run(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// Any value, validated and skipped: iteratively, with a stack of
    /// one bit per open container, so any depth is read (as serde_json
    /// skips a value) and none overflows the thread's stack.
    fn value(&mut self) -> Option<()> {
        let mut open = Open::default();
        loop {
            match self.peek()? {
                b'{' => {
                    self.i += 1;
                    if self.peek()? == b'}' {
                        self.i += 1;
                    } else {
                        open.push(true);
                        self.key()?;
                        continue;
                    }
                }
                b'[' => {
                    self.i += 1;
                    if self.peek()? == b']' {
                        self.i += 1;
                    } else {
                        open.push(false);
                        continue;
                    }
                }
                b'"' => drop(self.string()?),
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => drop(self.number()?),
            }
            // A value is complete: close what it completes, or go on to
            // the next element or entry.
            loop {
                let Some(object) = open.top() else {
                    return Some(());
                };
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if object {
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if object => open.pop(),
                    b']' if !object => open.pop(),
                    _ => return None,
                }
                self.i += 1;
            }
        }
    }

    /// A key and its colon, in a skipped object (not decoded, as serde_json
    /// does not).
    fn key(&mut self) -> Option<()> {
        self.string()?;
        self.eat(b':')
    }

    /// An object read field by field; `entry` is called with each key and
    /// must consume its value.
    fn object(&mut self, mut entry: impl FnMut(&mut Self, Str<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            entry(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array read element by element; `element` must consume each.
    /// Returns how many there were.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<usize> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(0);
        }
        let mut n = 0;
        loop {
            element(self)?;
            n += 1;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(n);
                }
                _ => return None,
            }
        }
    }

    /// `null`, if it is next.
    fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal(b"null").is_some()
    }

    /// An `Option<u64>` field: null, or an unsigned integer.
    fn optional_count(&mut self) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        self.number()?.map(Some)
    }

    /// A `usage` object read for its `field`, or null: the count it gives.
    fn usage(&mut self, field: &str) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        let mut tokens = None;
        let mut seen = false;
        self.object(|s, key| {
            if key.is(field)? {
                if std::mem::replace(&mut seen, true) {
                    return None;
                }
                tokens = s.optional_count()?;
                Some(())
            } else {
                s.value()
            }
        })?;
        Some(tokens)
    }

    fn openai(&mut self) -> Option<u64> {
        let (mut choices, mut usage) = (None, None);
        self.object(|s, key| {
            if key.is("choices")? {
                if choices.is_some() {
                    return None;
                }
                choices = Some(s.array(|s| {
                    let mut message = false;
                    s.object(|s, key| {
                        if key.is("message")? && std::mem::replace(&mut message, true) {
                            return None;
                        }
                        s.value()
                    })?;
                    message.then_some(())
                })?);
            } else if key.is("usage")? {
                if usage.is_some() {
                    return None;
                }
                usage = Some(s.usage("completion_tokens")?);
            } else {
                s.value()?;
            }
            Some(())
        })?;
        if choices? == 0 {
            return None;
        }
        Some(usage.flatten().unwrap_or(0))
    }

    fn anthropic(&mut self) -> Option<u64> {
        let (mut kind, mut content, mut usage) = (None, false, None);
        self.object(|s, key| {
            if key.is("type")? {
                if kind.is_some() {
                    return None;
                }
                kind = Some(s.string()?.is("message")?);
            } else if key.is("content")? {
                if std::mem::replace(&mut content, true) {
                    return None;
                }
                s.array(|s| s.value())?;
            } else if key.is("usage")? {
                if usage.is_some() {
                    return None;
                }
                usage = Some(s.usage("output_tokens")?);
            } else {
                s.value()?;
            }
            Some(())
        })?;
        if kind != Some(true) || !content {
            return None;
        }
        Some(usage.flatten().unwrap_or(0))
    }
}

/// Decimal digits, two at a time.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// A JSON string, escaped as serde_json escapes it: `"` and `\`, the
/// control characters (`\n`, `\r`, `\t`, `\b`, `\f`, else `\u00XX`),
/// everything else as it is.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            out.extend_from_slice(b"00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The number of decimal digits of `v`.
pub(crate) fn u64_len(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The length of `s` as [`push_str`] writes it, quotes included.
pub(crate) fn str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const OPENAI: &str = r#"{"id":"chatcmpl-rh0","object":"chat.completion","created":1796133226,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"sun cat map red oak sky tea ink fox bay elm owl jar fig ivy pen ","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":16,"total_tokens":25},"system_fingerprint":"fp_rehearse"}"#;
    const ANTHROPIC: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00 \"q\" é"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}"#;

    /// What the typed serde parse (the reader before this scanner) says.
    fn serde_says(dialect: Dialect, body: &[u8]) -> Option<u64> {
        use serde::de::IgnoredAny;
        use serde::Deserialize;
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
            choices: Vec<OaChoice>,
            usage: Option<OaUsage>,
        }
        #[derive(Deserialize)]
        struct AnUsage {
            output_tokens: Option<u64>,
        }
        #[derive(Deserialize)]
        struct AnMessage<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
            #[allow(dead_code)]
            content: Vec<IgnoredAny>,
            usage: Option<AnUsage>,
        }
        match dialect {
            Dialect::OpenAi => {
                let c: OaCompletion = serde_json::from_slice(body).ok()?;
                if c.choices.is_empty() {
                    return None;
                }
                Some(c.usage.and_then(|u| u.completion_tokens).unwrap_or(0))
            }
            Dialect::Anthropic => {
                let m: AnMessage<'_> = serde_json::from_slice(body).ok()?;
                if m.kind != "message" {
                    return None;
                }
                Some(m.usage.and_then(|u| u.output_tokens).unwrap_or(0))
            }
        }
    }

    #[test]
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let awkward: String = (0u8..0x80).map(char::from).collect::<String>() + "\"\\é😀";
        for s in ["", "gpt-4o", "m\"odel", awkward.as_str()] {
            let mut out = Vec::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap());
            assert_eq!(str_len(s), out.len());
        }
        for v in [0, 1, 9, 10, 99, 100, 101, 999, 1000, 123_456_789, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
            assert_eq!(u64_len(v), out.len());
        }
    }

    #[test]
    fn answers_are_read_as_the_typed_parse_read_them() {
        let cases: &[(Dialect, &str, Option<u64>)] = &[
            (Dialect::OpenAi, OPENAI, Some(16)),
            (Dialect::Anthropic, ANTHROPIC, Some(4)),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":null}]}"#,
                Some(0),
            ),
            (
                Dialect::OpenAi,
                r#" {"choices":[{"message":1}],"usage":null} "#,
                Some(0),
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":null}}"#,
                Some(0),
            ),
            (Dialect::OpenAi, r#"{"choices":[]}"#, None),
            (Dialect::OpenAi, r#"{"choices":[{}]}"#, None),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1,"message":2}]}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"choices":[{"message":1}]}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":-1}}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":1.0}}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":1e2}}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":18446744073709551616}}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1}],"usage":{"completion_tokens":18446744073709551615}}"#,
                Some(u64::MAX),
            ),
            (Dialect::OpenAi, r#"{"choices":[{"message":1}]} x"#, None),
            (
                Dialect::OpenAi,
                r#"{"choic\u0065s":[{"message":1}]}"#,
                Some(0),
            ),
            (
                Dialect::OpenAi,
                "{\"choices\":[{\"message\":\"a\tb\"}]}",
                None,
            ),
            // As serde_json: a skipped string's \u escapes are not checked
            // for surrogates, a key's are.
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":"\ud800"}]}"#,
                Some(0),
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1,"x\ud800":1}]}"#,
                None,
            ),
            (
                Dialect::OpenAi,
                r#"{"choices":[{"message":1,"\ud83d\ude00":1}]}"#,
                Some(0),
            ),
            (Dialect::OpenAi, r#"{"choices":[{"message":01}]}"#, None),
            (Dialect::OpenAi, r#"{"choices":[{"message":-}]}"#, None),
            (Dialect::OpenAi, r#"{"choices":[{"message":[1,]}]}"#, None),
            (Dialect::OpenAi, r#"{"choices":[{"message":1},]}"#, None),
            (
                Dialect::Anthropic,
                r#"{"type":"message","content":[]}"#,
                Some(0),
            ),
            (Dialect::Anthropic, r#"{"type":"error","content":[]}"#, None),
            (Dialect::Anthropic, r#"{"type":"message"}"#, None),
            (
                Dialect::Anthropic,
                r#"{"type":"messag\u0065","content":[],"usage":{"output_tokens":7}}"#,
                Some(7),
            ),
            (Dialect::Anthropic, r#"{"type":1,"content":[]}"#, None),
            (Dialect::OpenAi, "", None),
            (Dialect::OpenAi, "[]", None),
        ];
        for (dialect, body, want) in cases {
            assert_eq!(answer_tokens(*dialect, body.as_bytes()), *want, "{body}");
            assert_eq!(
                serde_says(*dialect, body.as_bytes()),
                *want,
                "serde: {body}"
            );
        }
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
                answer_tokens(Dialect::OpenAi, body.as_bytes()),
                serde_says(Dialect::OpenAi, body.as_bytes()),
                "depth {n}"
            );
        }
    }

    /// Mutated answers (truncated, a byte replaced, inserted or removed,
    /// spans duplicated) are judged alike by the scanner and serde_json.
    #[test]
    fn mutated_answers_are_judged_as_serde_json_judges_them() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let alphabet = b"{}[]\":,.-+eE0123456789 \\/untrfalsx\tmessagechoicesusagetype";
        let mut agreed = (0, 0);
        for round in 0..60_000 {
            let (dialect, base) = if round % 2 == 0 {
                (Dialect::OpenAi, OPENAI)
            } else {
                (Dialect::Anthropic, ANTHROPIC)
            };
            let mut b = base.as_bytes().to_vec();
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..=b.len());
                match rng.gen_range(0..5) {
                    0 => b.truncate(at),
                    1 if at < b.len() => b[at] = alphabet[rng.gen_range(0..alphabet.len())],
                    2 => b.insert(at, alphabet[rng.gen_range(0..alphabet.len())]),
                    3 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => {
                        let end = rng.gen_range(at..=b.len().min(at + 40));
                        let span = b[at..end].to_vec();
                        b.splice(at..at, span);
                    }
                }
            }
            let ours = answer_tokens(dialect, &b);
            let theirs = serde_says(dialect, &b);
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(&b));
            if ours.is_some() {
                agreed.0 += 1;
            } else {
                agreed.1 += 1;
            }
        }
        // Both kinds of verdict were exercised.
        assert!(agreed.0 > 1_000 && agreed.1 > 1_000, "{agreed:?}");
    }
}
