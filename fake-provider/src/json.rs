//! A small JSON writer for the hot answers: strings quoted and escaped
//! exactly as serde_json writes them, numbers by itoa.
//!
//! serde_json escapes `"` and `\`, writes `\b \t \n \f \r` for those
//! control characters and `\u00XX` (lowercase hex) for the others below
//! 0x20, and copies everything else (DEL and non-ASCII included) as it
//! is. So does this; the runs between escapes are copied at once.

/// Appends `s` as a JSON string: quoted, escaped as serde_json escapes it.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        push_escape(out, b);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
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
    fn numbers_are_decimal() {
        for n in [0, 1, 9, 10, 99, 12345, u64::from(u32::MAX), u64::MAX] {
            let mut ours = Vec::new();
            push_u64(&mut ours, n);
            assert_eq!(ours, serde_json::to_vec(&n).unwrap());
        }
    }
}
