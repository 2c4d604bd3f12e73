//! A small JSON writer for the hot answers: strings quoted and escaped
//! exactly as serde_json writes them, numbers by itoa.
//!
//! serde_json escapes `"` and `\`, writes `\b \t \n \f \r` for those
//! control characters and `\u00XX` (lowercase hex) for the others below
//! 0x20, and copies everything else (DEL and non-ASCII included) as it
//! is. So does this; the runs between escapes are copied at once.

/// Appends `s` as a JSON string: quoted, escaped as serde_json escapes it.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
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
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Strings with every kind of character serde_json treats apart.
    pub(crate) fn awkward_strings() -> Vec<String> {
        let mut v: Vec<String> = [
            "",
            "plain",
            "\"",
            "\\",
            "a\"b\\c",
            "\"\"\\\\",
            "tab\there\nnew\rret\u{8}bs\u{c}ff",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "héllo wörld",
            "日本語のモデル",
            "emoji 🦀 and \u{2028}\u{2029}",
            "</script>",
            "ends with a quote\"",
            "\\\"\\n",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        // Every character below 0x80, one by one and all together.
        let all: String = (0u8..0x80).map(char::from).collect();
        v.extend((0u8..0x80).map(|b| char::from(b).to_string()));
        v.push(all);
        // One character to escape (or not) at every place of strings
        // around the eight-byte words' lengths.
        for len in 1..=25 {
            for at in 0..len {
                for c in ['"', '\\', '\n', '\u{1}', '\u{1f}', ' ', '\u{7f}', 'é', '🦀'] {
                    let mut s: String = "abcdefghijklmnopqrstuvwxy"[..len - 1].into();
                    s.insert(at, c);
                    v.push(s);
                }
            }
        }
        v
    }

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
    fn numbers_are_decimal() {
        for n in [0, 1, 9, 10, 99, 12345, u64::from(u32::MAX), u64::MAX] {
            let mut ours = Vec::new();
            push_u64(&mut ours, n);
            assert_eq!(ours, serde_json::to_vec(&n).unwrap());
        }
    }
}
