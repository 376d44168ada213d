//! Text another user chose, made safe to show.
//!
//! Unsafe on a terminal: control characters (C0, DEL, C1: they start escape
//! sequences, `ESC ]0;title BEL` retitles the window, `ESC [2J` clears it)
//! and the Unicode bidirectional controls (U+200E, U+200F, U+202A to
//! U+202E, U+2066 to U+2069: a right-to-left override shows the text after
//! it reversed, so a name can pass for another).

use std::borrow::Cow;
use std::path::Path;

/// A bidirectional control: marks, embeddings, overrides, isolates.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` must not reach a terminal as it is.
fn is_unsafe(c: char) -> bool {
    c.is_control() || is_bidi(c)
}

/// `s` with each unsafe character but those `keep` allows replaced by `?`.
fn replaced(s: &str, keep: fn(char) -> bool) -> Cow<'_, str> {
    if s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        s.chars()
            .map(|c| if is_unsafe(c) && !keep(c) { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// Text another user chose (a command name, a path) made safe to print on
/// a terminal: control characters and bidirectional controls become `?`.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    replaced(s, |_| false)
}

/// Text of several lines (a summary, folded stacks) made safe to print:
/// as [`printable`], the line ends kept.
pub(crate) fn printable_lines(s: &str) -> Cow<'_, str> {
    replaced(s, |c| c == '\n')
}

/// JSON text made safe to print, the same JSON: every unsafe character,
/// which can only be inside a string there, written as its `\uXXXX`
/// escape (serde_json escapes C0 controls itself, not DEL, C1 or the
/// bidirectional controls); line ends between values kept.
pub(crate) fn printable_json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && c != '\n') {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_unsafe(c) && c != '\n' {
            // All of them are in the Basic Multilingual Plane: one escape.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// A path another user chose, printable (see [`printable`]).
pub(crate) fn printable_path(p: &Path) -> String {
    printable(&p.to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_controls_are_escaped() {
        assert_eq!(printable("w\u{1b}]0;x\u{7}"), "w?]0;x?");
        for c in [
            '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}',
            '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            assert_eq!(printable(&format!("a{c}b")), "a?b", "{:x}", c as u32);
        }
        // Not controls: kept.
        assert_eq!(printable("é→ ü\u{2070}"), "é→ ü\u{2070}");
        assert_eq!(printable_lines("a\u{202e}b\nc\u{9b}\n"), "a?b\nc?\n");
        let json = serde_json::json!({"k": "a\u{202e}\u{1b}\u{9b}\u{7f}b"}).to_string() + "\n";
        let safe = printable_json(&json);
        assert_eq!(safe, "{\"k\":\"a\\u202e\\u001b\\u009b\\u007fb\"}\n");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["k"], "a\u{202e}\u{1b}\u{9b}\u{7f}b");
    }
}
