//! A call's stack as the outputs show it: frame strings, innermost first,
//! interned so a stack seen again is one id.

use std::sync::Arc;

/// Stands where frames are missing: the native unwind stopped short of the
/// Python frames the probe walked, or the Python chain was longer than the
/// probe copies.
pub const GAP: &str = "[...]";

/// Frame strings of one stack, innermost first.
pub type Frames = Arc<[Arc<str>]>;

/// One distinct stack.
#[derive(Debug, PartialEq, Eq)]
pub struct CallStack {
    /// Unique within a run (and within a timeline file).
    pub id: u32,
    pub frames: Frames,
}
