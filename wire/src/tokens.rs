//! The token estimate every part uses: one token per four characters.

/// Characters per estimated token: the usual rule of thumb for English text
/// with both providers' tokenizers. The load generator writes prompts of
/// this many characters per token asked for, the fake provider and the
/// reference gateway estimate a prompt's tokens with it, and the plan turns
/// prompt bytes into tokens with it.
pub const CHARS_PER_TOKEN: usize = 4;

/// Estimated tokens of `chars` characters of text: one per
/// [`CHARS_PER_TOKEN`], rounded up. Order of magnitude, not the exact count
/// a tokenizer would give; what matters is that every part of a rehearsal
/// counts the same.
///
/// ```
/// assert_eq!(wire::estimate_tokens(400), 100);
/// assert_eq!(wire::estimate_tokens(5), 2);
/// assert_eq!(wire::estimate_tokens(0), 0);
/// ```
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up() {
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(4), 1);
        assert_eq!(estimate_tokens(9), 3);
        assert_eq!(estimate_tokens(usize::MAX), (usize::MAX / 4 + 1) as u64);
    }
}
