//! Text laid out for a terminal: how wide it is, whether it takes colour,
//! and the helpers that keep a line inside it (display columns, where a
//! wide character counts as two; words wrapped; a table cut into blocks).

use std::io::IsTerminal as _;

use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

/// The most columns any line is laid out for, however wide the terminal:
/// past it a paragraph is harder to read, and a CI log or a pull-request
/// comment is no wider.
pub const MAX_WIDTH: usize = 100;

/// The width assumed when the output is not a terminal (a pipe, a file, a
/// CI log).
pub const PIPE_WIDTH: usize = 80;

/// How text is laid out for one output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// The columns a wrapped line may take.
    pub width: usize,
    /// Whether marks are coloured (ANSI escapes).
    pub colour: bool,
    /// Each check's whole line (predicted, observed, explanation) instead
    /// of its short form.
    pub verbose: bool,
}

impl Default for Style {
    /// Plain text for a pipe: 80 columns, no colour, short lines.
    fn default() -> Self {
        Style {
            width: PIPE_WIDTH,
            colour: false,
            verbose: false,
        }
    }
}

/// An output stream a [`Style`] is chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Style {
    /// The style for `stream` as this process has it: on a terminal, its
    /// width (at most [`MAX_WIDTH`]) and colour unless `NO_COLOR` is set to
    /// anything but the empty string (no-color.org); else [`PIPE_WIDTH`]
    /// and no colour.
    pub fn detect(stream: Stream, verbose: bool) -> Style {
        let (terminal, size) = match stream {
            Stream::Stdout => (
                std::io::stdout().is_terminal(),
                console::Term::stdout().size_checked(),
            ),
            Stream::Stderr => (
                std::io::stderr().is_terminal(),
                console::Term::stderr().size_checked(),
            ),
        };
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style::for_output(
            terminal,
            size.map(|(_, cols)| cols as usize),
            no_color,
            verbose,
        )
    }

    /// The style for an output that is a terminal of `columns` or not.
    ///
    /// ```
    /// use report::Style;
    /// assert_eq!(Style::for_output(false, None, false, false), Style::default());
    /// let wide = Style::for_output(true, Some(240), false, false);
    /// assert_eq!((wide.width, wide.colour), (100, true));
    /// assert!(!Style::for_output(true, Some(120), true, false).colour);
    /// ```
    pub fn for_output(
        terminal: bool,
        columns: Option<usize>,
        no_color: bool,
        verbose: bool,
    ) -> Style {
        Style {
            width: match (terminal, columns) {
                (true, Some(c)) if c >= 20 => c.min(MAX_WIDTH),
                _ => PIPE_WIDTH,
            },
            colour: terminal && !no_color,
            verbose,
        }
    }

    /// `text` in the ANSI colour `code` (`"32"` green) when colour is on.
    pub(crate) fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

/// The display columns `text` takes: a wide (East Asian) character counts
/// as two, a combining one as none.
///
/// ```
/// assert_eq!(report::columns("naive"), 5);
/// assert_eq!(report::columns("限流"), 4);
/// ```
pub fn columns(text: &str) -> usize {
    text.width()
}

/// `text` padded with spaces to `width` display columns.
pub(crate) fn pad(text: &str, width: usize) -> String {
    let n = columns(text);
    format!("{text}{}", " ".repeat(width.saturating_sub(n)))
}

/// `text` cut to at most `width` display columns, ending in `…` when cut.
pub(crate) fn fit(text: &str, width: usize) -> String {
    if columns(text) <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `text` wrapped at word boundaries into lines of at most `width` display
/// columns, the first starting with `first`, the others with `rest` (both
/// counted in the width). A word longer than a line is cut.
///
/// ```
/// let lines = report::wrap("one two three four", 10, "  ", "    ");
/// assert_eq!(lines, ["  one two", "    three", "    four"]);
/// ```
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let room = width.saturating_sub(columns(&line) + usize::from(!empty));
        if columns(word) <= room {
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
            continue;
        }
        if !empty {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
        }
        // A word wider than a whole line: cut it into pieces that fit.
        let mut word = word.to_string();
        loop {
            let room = width.saturating_sub(columns(&line)).max(1);
            if columns(&word) <= room {
                line.push_str(&word);
                break;
            }
            let (head, tail) = split_at_columns(&word, room);
            line.push_str(&head);
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            word = tail;
        }
        empty = false;
    }
    lines.push(line);
    lines
}

/// The first `width` display columns of `word` (at least one character),
/// and the rest.
fn split_at_columns(word: &str, width: usize) -> (String, String) {
    let mut used = 0;
    for (i, c) in word.char_indices() {
        let w = c.width().unwrap_or(0);
        if used + w > width && i > 0 {
            return (word[..i].to_string(), word[i..].to_string());
        }
        used += w;
    }
    (word.to_string(), String::new())
}

/// Rows of cells as aligned columns, two spaces apart, each line indented
/// by two: when the whole is wider than `width`, the columns after the
/// first are cut into blocks that fit, each repeating the first column (a
/// name); a first column too wide alone is cut with `…`.
///
/// ```
/// let rows = vec![
///     vec!["variant".to_string(), "ok".into(), "shed".into()],
///     vec!["bounded".to_string(), "131".into(), "267".into()],
/// ];
/// assert_eq!(report::table(&rows, 100), "  variant  ok   shed\n  bounded  131  267\n");
/// assert_eq!(
///     report::table(&rows, 16),
///     "  variant  ok\n  bounded  131\n\n  variant  shed\n  bounded  267\n"
/// );
/// ```
pub fn table(rows: &[Vec<String>], width: usize) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    if n == 0 {
        return String::new();
    }
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| columns(c)))
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Two columns of indent, two between columns: the name is cut so that
    // it and any one other column fit, to no less than a third of the line.
    let widest = widths[1..].iter().copied().max().unwrap_or(0);
    let name = widths[0].min(width.saturating_sub(4 + widest).max(width / 3));
    let mut blocks: Vec<Vec<usize>> = Vec::new();
    let mut used = 2 + name;
    for (i, width_i) in widths.iter().enumerate().skip(1) {
        let w = 2 + width_i;
        match blocks.last_mut() {
            Some(block) if used + w <= width => block.push(i),
            _ => {
                blocks.push(vec![i]);
                used = 2 + name;
            }
        }
        used += w;
    }
    if blocks.is_empty() {
        blocks.push(Vec::new());
    }
    let mut out = String::new();
    for (b, block) in blocks.iter().enumerate() {
        if b > 0 {
            out.push('\n');
        }
        for row in rows {
            let mut line = format!(
                "  {}",
                pad(&fit(row.first().map_or("", String::as_str), name), name)
            );
            for &i in block {
                line.push_str("  ");
                line.push_str(&pad(row.get(i).map_or("", String::as_str), widths[i]));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_count_twice_when_wrapping_and_fitting() {
        let lines = wrap("限流限流 限流", 8, "", "");
        assert_eq!(lines, ["限流限流", "限流"]);
        assert_eq!(fit("限流限流", 5), "限流…");
        assert!(columns(&fit("abcdefghij", 6)) <= 6);
    }

    #[test]
    fn a_word_longer_than_the_line_is_cut() {
        let lines = wrap("see /a/very/long/path/to/report.json now", 12, "  ", "  ");
        assert!(lines.iter().all(|l| columns(l) <= 12), "{lines:?}");
        assert_eq!(
            lines.concat().replace(' ', ""),
            "see/a/very/long/path/to/report.jsonnow"
        );
    }

    #[test]
    fn every_block_of_a_wide_table_fits() {
        let head: Vec<String> = std::iter::once("variant".to_string())
            .chain((0..12).map(|i| format!("column {i}")))
            .collect();
        let row: Vec<String> =
            std::iter::once("gateway.reference.mode=bounded-with-a-long-name".to_string())
                .chain((0..12).map(|i| format!("{}", i * 1000)))
                .collect();
        let text = table(&[head, row], 60);
        assert!(text.lines().all(|l| columns(l) <= 60), "{text}");
        for i in 0..12 {
            assert!(text.contains(&format!("column {i}")), "{text}");
        }
    }
}
