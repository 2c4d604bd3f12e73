//! Strings with every kind of character a JSON writer treats apart, for
//! the tests that hold a hand-written writer to serde_json's bytes.

/// Strings with every kind of character serde_json treats apart.
pub fn awkward_strings() -> Vec<String> {
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
