//! Messages for the person running gputrace, on stderr, in one place:
//! `say!` for what they should know (`gputrace: ...`, one line), `debug!`
//! for what a developer asked for with `GPUTRACE_DEBUG=1`
//! (docs/configuration.md). A stderr that cannot be written is never a
//! reason to fail or panic.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static DEBUG: AtomicBool = AtomicBool::new(false);

/// Turns the `debug!` lines on (from `Config::debug`).
pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Writes `gputrace: {args}` and a newline.
pub fn say(args: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "gputrace: {args}");
}

/// Writes a line that carries its own prefix (an NCCL stall line, a
/// report made of several lines).
pub fn say_raw(args: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `gputrace: ...` on stderr.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::log::say(format_args!($($arg)*)) };
}

/// A developer's line on stderr, only with `GPUTRACE_DEBUG=1`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            $crate::log::say_raw(format_args!($($arg)*))
        }
    };
}
