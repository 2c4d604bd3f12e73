//! Request ids in prompt text: the `[rehearse:id=…]` marker.
//!
//! The load generator sends each person's id twice: in the `x-request-id`
//! header and as a marker at the start of the prompt. A gateway may drop or
//! rewrite headers, but it forwards the prompt, so the fake provider (and
//! the reference gateway, for its logs) find the id there when the header is
//! gone. One writer ([`marker`]) and one reader ([`marker_id`]), with one
//! rule for what an id is ([`is_request_id`]), so every part reads the same
//! id out of the same body; and one rule for a call's id, header first
//! ([`request_id`]), so the provider's records and the gateway's logs name
//! a call alike.

use std::fmt;
use std::sync::LazyLock;

use memchr::memmem;

/// What opens a marker.
pub const MARKER_OPEN: &str = "[rehearse:id=";
/// What closes a marker.
pub const MARKER_CLOSE: &str = "]";
/// The longest id a marker may carry, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Returns true if and only if `id` can be carried in a marker: 1 to
/// [`MAX_ID_LEN`] bytes of ASCII letters, digits, `-`, `_`, `.` and `:`.
/// Nothing in it then needs escaping in JSON or a header, and no quote or
/// bracket of the surrounding text can be taken for part of it.
///
/// ```
/// assert!(wire::is_request_id("r000042"));
/// assert!(!wire::is_request_id("a\"b"));
/// assert!(!wire::is_request_id(""));
/// ```
pub fn is_request_id(id: &str) -> bool {
    valid(id.as_bytes())
}

fn valid(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The marker carrying `id`, to write into a prompt: displays as
/// `[rehearse:id=<id>]`. The caller keeps to [`is_request_id`]; an id
/// outside it is written anyway, and [`marker_id`] will not read it back.
///
/// ```
/// let m = wire::marker("r000042");
/// assert_eq!(m.to_string(), "[rehearse:id=r000042]");
/// assert_eq!(m.len(), m.to_string().len());
/// assert_eq!(wire::marker_id(m.to_string().as_bytes()), Some("r000042"));
/// ```
pub fn marker(id: &str) -> Marker<'_> {
    Marker(id)
}

/// A request id as a prompt marker; see [`marker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<'a>(&'a str);

impl Marker<'_> {
    /// The marker's length in bytes, without writing it (for a
    /// `content-length` computed before the body is made).
    #[allow(clippy::len_without_is_empty)] // a marker is never empty
    pub fn len(&self) -> usize {
        MARKER_OPEN.len() + self.0.len() + MARKER_CLOSE.len()
    }
}

impl fmt::Display for Marker<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MARKER_OPEN)?;
        f.write_str(self.0)?;
        f.write_str(MARKER_CLOSE)
    }
}

/// Finds the first `[rehearse:id=…]` marker anywhere in a raw body and
/// returns its id, if the id keeps to [`is_request_id`]. The raw bytes are
/// searched, so the marker is found whatever JSON surrounds it; a marker
/// with no closing bracket within [`MAX_ID_LEN`] bytes, or whose id breaks
/// the rule, gives `None` (a later marker is not looked for).
///
/// ```
/// assert_eq!(wire::marker_id(br#"{"content":"hi [rehearse:id=r-42] there"}"#), Some("r-42"));
/// assert_eq!(wire::marker_id(b"[rehearse:id=a\"b]"), None);
/// ```
pub fn marker_id(body: &[u8]) -> Option<&str> {
    // A body without a marker (a caller that is not the load generator,
    // behind a gateway that drops the header) is searched to its end on
    // every call: memchr's searcher, made once, rather than a comparison
    // at every byte (8.1 µs for a 16 KB prompt that way, 0.39 µs this
    // way: wire/examples/marker_scan.rs).
    static OPEN: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(MARKER_OPEN.as_bytes()));
    let start = OPEN.find(body)? + MARKER_OPEN.len();
    let rest = &body[start..];
    // An id is at most MAX_ID_LEN bytes: the bracket is within one more.
    let len = memchr::memchr(
        MARKER_CLOSE.as_bytes()[0],
        &rest[..rest.len().min(MAX_ID_LEN + 1)],
    )?;
    let id = &rest[..len];
    if !valid(id) {
        return None;
    }
    // Only ASCII passed `valid`.
    std::str::from_utf8(id).ok()
}

/// The id of a call: its `x-request-id` header, trimmed, when that is 1
/// to [`MAX_ID_LEN`] bytes of a header's text (visible ASCII, spaces and
/// tabs, as `http`'s `HeaderValue::to_str` reads it); else the body's
/// marker ([`marker_id`]); else `None`, and each side names the call its
/// own way (the fake provider `fake-N`, the reference gateway `-`).
///
/// ```
/// let body = b"[rehearse:id=r-7] hi";
/// assert_eq!(wire::request_id(Some(b" h-1 "), body), Some("h-1"));
/// assert_eq!(wire::request_id(Some(b""), body), Some("r-7"));
/// assert_eq!(wire::request_id(Some("x".repeat(129).as_bytes()), body), Some("r-7"));
/// assert_eq!(wire::request_id(None, b"{}"), None);
/// ```
pub fn request_id<'a>(header: Option<&'a [u8]>, body: &'a [u8]) -> Option<&'a str> {
    header
        .filter(|h| h.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b)))
        .map(<[u8]>::trim_ascii)
        .filter(|h| !h.is_empty() && h.len() <= MAX_ID_LEN)
        // Only ASCII passed the filter.
        .and_then(|h| std::str::from_utf8(h).ok())
        .or_else(|| marker_id(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_found_anywhere() {
        assert_eq!(
            marker_id(br#"{"content":"hi [rehearse:id=r00042] there"}"#),
            Some("r00042")
        );
        assert_eq!(marker_id(b"[rehearse:id=a.b:c_d-9]"), Some("a.b:c_d-9"));
        assert_eq!(marker_id(b"[rehearse:id=]"), None);
        assert_eq!(marker_id(b"[rehearse:id=abc"), None);
        assert_eq!(marker_id(b"nothing"), None);
    }

    #[test]
    fn a_marker_is_found_deep_in_a_long_body_and_near_misses_are_not() {
        // Near misses before it (every prefix of the opening), a long
        // prompt, then the marker: found wherever it is.
        let mut body = String::new();
        for n in 1..MARKER_OPEN.len() {
            body.push_str(&MARKER_OPEN[..n]);
            body.push(' ');
        }
        body.push_str(&"lorem ipsum ".repeat(20_000));
        assert_eq!(marker_id(body.as_bytes()), None, "no marker at all");
        body.push_str("[rehearse:id=deep-1] and after");
        assert_eq!(marker_id(body.as_bytes()), Some("deep-1"));
        // A body that ends inside a marker has none.
        assert_eq!(marker_id(b"x [rehearse:id"), None);
        assert_eq!(marker_id(b"x [rehearse:id=r-1"), None);
        // Only the first marker counts, even when it is not an id.
        assert_eq!(marker_id(b"[rehearse:id=a b] [rehearse:id=ok]"), None);
        assert_eq!(marker_id(b"[rehearse:id=ok] [rehearse:id=no]"), Some("ok"));
    }

    #[test]
    fn a_quote_in_the_id_is_no_id() {
        // The case the fake provider and the reference gateway used to
        // disagree on: one refused it, the other took `a"b` as the id.
        assert_eq!(marker_id(b"[rehearse:id=a\"b]"), None);
        assert_eq!(marker_id(br#"{"content":"[rehearse:id=a\"b] hi"}"#), None);
        assert!(!is_request_id("a\"b"));
    }

    #[test]
    fn ids_are_limited_in_length_and_charset() {
        let longest = "x".repeat(MAX_ID_LEN);
        assert!(is_request_id(&longest));
        let body = format!("[rehearse:id={longest}]");
        assert_eq!(marker_id(body.as_bytes()), Some(longest.as_str()));
        let too_long = format!("[rehearse:id={longest}x]");
        assert_eq!(marker_id(too_long.as_bytes()), None);
        for bad in ["a b", "é", "a/b", "a]b", "a\\b"] {
            assert!(!is_request_id(bad), "{bad:?}");
        }
        assert_eq!(marker_id("[rehearse:id=é]".as_bytes()), None);
    }

    #[test]
    fn what_is_written_is_read_back() {
        for id in ["r000000", "pool-demo_7", "a.b:c"] {
            let text = format!("prefix {} rest", marker(id));
            assert_eq!(marker_id(text.as_bytes()), Some(id));
            assert_eq!(marker(id).len(), marker(id).to_string().len());
        }
    }

    #[test]
    fn a_call_is_named_by_its_header_then_its_marker() {
        let body = b"{\"content\":\"[rehearse:id=m-1] hi\"}";
        assert_eq!(request_id(Some(b"h-1"), body), Some("h-1"));
        assert_eq!(request_id(Some(b" \th-1  "), body), Some("h-1"), "trimmed");
        assert_eq!(
            request_id(Some(b"a b"), body),
            Some("a b"),
            "inner space kept"
        );
        assert_eq!(request_id(Some(b""), body), Some("m-1"), "empty");
        assert_eq!(request_id(Some(b"   "), body), Some("m-1"), "blank");
        assert_eq!(request_id(None, body), Some("m-1"));
        let longest = "h".repeat(MAX_ID_LEN);
        assert_eq!(
            request_id(Some(longest.as_bytes()), body),
            Some(longest.as_str())
        );
        let too_long = "h".repeat(MAX_ID_LEN + 1);
        assert_eq!(
            request_id(Some(too_long.as_bytes()), body),
            Some("m-1"),
            "129 bytes"
        );
        let padded = format!("  {longest}  ");
        assert_eq!(
            request_id(Some(padded.as_bytes()), body),
            Some(longest.as_str()),
            "measured once trimmed"
        );
        assert_eq!(
            request_id(Some("é".as_bytes()), body),
            Some("m-1"),
            "not a header's text"
        );
        assert_eq!(request_id(Some(b"a\nb"), body), Some("m-1"));
        assert_eq!(request_id(Some(b""), b"no marker"), None);
        assert_eq!(request_id(None, b"[rehearse:id=a\"b]"), None);
    }
}
