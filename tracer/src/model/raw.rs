//! A ring-buffer record as the probe wrote it: the call, and the string or
//! bytes copied at its entry.

use tracer_common::{CallEvent, NO_RETURN};

/// A record as the probe wrote it, with the string argument or the bytes
/// copied at entry (the cookie's blob), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCall<'a> {
    pub event: CallEvent,
    pub name: Option<&'a [u8]>,
    /// The bytes read (empty when the read failed).
    pub blob: Option<&'a [u8]>,
}

impl RawCall<'_> {
    pub fn has_return(&self) -> bool {
        self.event.dur_ns != NO_RETURN
    }
}
