//! Text another user chose, made safe to show.

use std::path::Path;

/// Text another user chose (a command name, a path) made safe to print on
/// a terminal: control characters, which start escape sequences, become `?`.
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A path another user chose, printable (see [`printable`]).
pub(crate) fn printable_path(p: &Path) -> String {
    printable(&p.to_string_lossy()).into_owned()
}
