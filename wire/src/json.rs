//! The one JSON writer of the hot paths: the records' lines (the fake
//! provider's `provider.jsonl`, the load generator's `client.jsonl`), the
//! provider's answers and the load generator's request bodies. Strings are
//! quoted and escaped exactly as serde_json writes them, numbers by itoa;
//! each record's writer is held to serde_json's bytes by its own test.
//! Each function is `#[inline]`: the release build inlines across crates
//! only what says so, and these sit in the callers' innermost loops.
//!
//! serde_json escapes `"` and `\`, writes `\b \t \n \f \r` for those
//! control characters and `\u00XX` (lowercase hex) for the others below
//! 0x20, and copies everything else (DEL and non-ASCII included) as it
//! is. So does this; the runs between escapes are copied at once.

/// Appends `s` as a JSON string: quoted, escaped as serde_json escapes it.
#[inline]
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Eight bytes at a time while none of them needs an escape, then one
    // by one; `start` is where the run not yet copied begins.
    let mut i = 0;
    while let Some(word) = bytes.get(i..i + 8) {
        if word_needs_escape(u64::from_le_bytes(word.try_into().unwrap_or([0; 8]))) {
            break;
        }
        i += 8;
    }
    let mut start = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if NEEDS_ESCAPE[b as usize] {
            out.extend_from_slice(&bytes[start..i]);
            push_escape(out, b);
            start = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The bytes that need an escape: below 0x20, a quote, a backslash.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = needs_escape(b as u8);
        b += 1;
    }
    t
};

const fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the eight bytes of `w` needs an escape: one below 0x20,
/// a quote or a backslash (the bit tricks' "has a byte less than n" and
/// "has a zero byte", exact as to whether there is one).
#[inline]
fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = ONES * 0x80;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS != 0;
    let quote = has_zero(w ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
    below_space || quote || backslash
}

/// The escape of one byte that needs one (a quote, a backslash, a control
/// character).
#[inline]
fn push_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        b'\t' => out.extend_from_slice(b"\\t"),
        b'\n' => out.extend_from_slice(b"\\n"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\r' => out.extend_from_slice(b"\\r"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[(b >> 4) as usize],
            HEX[(b & 0xf) as usize],
        ]),
    }
}

/// Appends `v` in decimal.
#[inline]
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal, or `null`.
#[inline]
pub fn push_opt(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => push_u64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// The length of `s` as [`push_str`] writes it, quotes included.
#[inline]
pub fn str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 2,
            b if needs_escape(b) => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// The number of decimal digits of `v`.
#[inline]
pub fn u64_len(v: u64) -> usize {
    itoa::Buffer::new().format(v).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::strings::awkward_strings;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in awkward_strings() {
            let mut ours = Vec::new();
            push_str(&mut ours, &s);
            let theirs = serde_json::to_vec(&s).unwrap();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(theirs).unwrap(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_word_needs_an_escape_exactly_when_one_of_its_bytes_does() {
        for fill in [b'a', b' ', 0x7f, 0x80, 0xc3, 0xff, 0x21, 0x5d] {
            for at in 0..8 {
                for b in 0..=255u8 {
                    let mut bytes = [fill; 8];
                    bytes[at] = b;
                    let want = bytes.iter().any(|&b| needs_escape(b));
                    let w = u64::from_le_bytes(bytes);
                    assert_eq!(word_needs_escape(w), want, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn lengths_are_what_is_written() {
        for s in awkward_strings() {
            let mut out = Vec::new();
            push_str(&mut out, &s);
            assert_eq!(str_len(&s), out.len(), "{s:?}");
        }
        for v in [0, 7, 10, 999, 1000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            assert_eq!(u64_len(v), out.len());
        }
        let mut out = Vec::new();
        push_opt(&mut out, None);
        push_opt(&mut out, Some(42));
        assert_eq!(out, b"null42");
    }

    #[test]
    fn numbers_are_decimal() {
        for n in [0, 1, 9, 10, 99, 12345, u64::from(u32::MAX), u64::MAX] {
            let mut ours = Vec::new();
            push_u64(&mut ours, n);
            assert_eq!(ours, serde_json::to_vec(&n).unwrap());
        }
    }
}
