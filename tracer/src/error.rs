//! A failure the user sees: one line and an exit code (1 runtime, 2 usage;
//! docs/cli.md). A panic is one line too: `gputrace: internal error: ...`
//! and exit 1.

use std::fmt;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn runtime(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the causes said.
        f.write_str(&self.message.replace('\n', " "))
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::runtime(format!("{e:#}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::runtime(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

/// Writes `gputrace: {line}` to stderr; a stderr that cannot be written
/// is not a reason to panic.
pub fn say(line: &str) {
    crate::log::say(format_args!("{line}"));
}

/// clap's rendered usage error as one line: its `error: ` prefix, the
/// `Usage:` block and the `--help` pointer dropped, the rest (the problem,
/// and a tip where clap has one) joined with `; `.
pub fn usage_line(rendered: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let mut in_usage = false;
    for line in rendered.lines() {
        let t = line.trim();
        if t.starts_with("Usage:") {
            in_usage = true;
            continue;
        }
        // The usage block goes on with indented lines, up to a blank one.
        if in_usage && !t.is_empty() && line.starts_with(' ') {
            continue;
        }
        in_usage = false;
        if t.is_empty() || t.starts_with("For more information") {
            continue;
        }
        parts.push(t.strip_prefix("error: ").unwrap_or(t));
    }
    if parts.is_empty() {
        return "bad arguments (see gputrace --help)".into();
    }
    let mut out = String::new();
    for p in parts {
        if !out.is_empty() {
            // `...not provided:` followed by what was missing reads as one.
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(p);
    }
    format!("{out} (see gputrace --help)")
}

/// The last panic's message, said by `main` once the panic has unwound
/// (until then stderr may be `top`'s capture, and the terminal its screen).
static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Makes every panic one line: `gputrace: internal error: MESSAGE at
/// FILE:LINE` (the place is what a bug report needs). On the main thread
/// it is said after unwinding (see [`say_panic`]); on another thread at once.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let line = format!("internal error: {}{at}", what.replace('\n', " "));
        if std::thread::current().name() == Some("main") {
            *PANIC.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
        } else {
            say(&line);
        }
    }));
}

/// Says the main thread's panic (after it unwound).
pub fn say_panic() {
    let line = PANIC.lock().unwrap_or_else(|p| p.into_inner()).take();
    say(line.as_deref().unwrap_or("internal error: a panic"));
}

#[cfg(test)]
mod tests {
    use crate::error::usage_line;

    #[test]
    fn clap_errors_become_one_line() {
        let rendered = "error: unexpected argument '-1' found\n\n  tip: to pass '-1' as a value, use '-- -1'\n\nUsage: gputrace [OPTIONS] [-- <CMD>...]\n       gputrace <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_line(rendered),
            "unexpected argument '-1' found; tip: to pass '-1' as a value, use '-- -1' (see gputrace --help)"
        );
        assert_eq!(
            usage_line("error: the following required arguments were not provided:\n  <FILE>\n\nUsage: gputrace stats <FILE>\n\nFor more information, try '--help'.\n"),
            "the following required arguments were not provided: <FILE> (see gputrace --help)"
        );
        assert_eq!(usage_line(""), "bad arguments (see gputrace --help)");
    }
}
