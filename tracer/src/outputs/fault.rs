//! A sink that panics on purpose (`GPUTRACE_FAULT_PANIC_AFTER`, tests
//! only): the way to show that a panic while tracing still ends every
//! output with what was recorded, and is one line with exit 1.

use crate::model::sink::Sink;
use crate::model::Event;

/// Panics as the `after`th call reaches it; put it first among the sinks,
/// so that the others have every call before that one, and none after.
pub(crate) struct FaultSink {
    after: u64,
    calls: u64,
}

impl FaultSink {
    pub(crate) fn new(after: u64) -> Self {
        Self { after, calls: 0 }
    }
}

impl Sink for FaultSink {
    fn event(&mut self, event: &Event) {
        if matches!(event, Event::Call { .. }) {
            self.calls += 1;
            if self.calls == self.after {
                panic!(
                    "fault injected at call {} (GPUTRACE_FAULT_PANIC_AFTER)",
                    self.calls
                );
            }
        }
    }
}
