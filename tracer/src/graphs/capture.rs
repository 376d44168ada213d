//! Stream capture, followed from the traced calls: which streams of a
//! process are capturing and into which capture. Work issued to such a
//! stream does not run; it becomes a node of the capture's graph.
//!
//! A capture begins on one stream (`cuStreamBeginCapture*`); other streams
//! join it by waiting on an event recorded in it (`cuEventRecord*` then
//! `cuStreamWaitEvent*`); it ends for all of them at `cuStreamEndCapture`
//! on the stream that began it.

use rustc_hash::FxHashMap as HashMap;

/// One capture sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Capture {
    /// Its number in the process (1, 2, …): what `"capture"` says.
    pub seq: u64,
    /// The graph it records into (a `GraphBook` id).
    pub graph: u64,
    /// Begun before gputrace attached: the work recorded before that is
    /// not known, and neither is what ran or not on its streams until then.
    pub joined_late: bool,
    /// When the call that began it began (CLOCK_MONOTONIC ns; 0 where not
    /// known).
    pub begin_ns: u64,
}

/// What a call tells about the captures of a process.
#[derive(Default, Debug)]
pub(crate) struct CaptureBook {
    /// Capturing stream → capture number.
    streams: HashMap<u64, u64>,
    captures: HashMap<u64, Capture>,
    /// Event recorded on a capturing stream → its capture.
    events: HashMap<u64, u64>,
    next: u64,
}

/// Streams that cannot capture (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
fn capturable(stream: u64) -> bool {
    stream > 2
}

impl CaptureBook {
    /// The capture `stream` records into, if it is capturing.
    pub(crate) fn of_stream(&self, stream: u64) -> Option<&Capture> {
        let seq = self.streams.get(&stream)?;
        self.captures.get(seq)
    }

    /// A capture begins on `stream`, recording into `graph`.
    pub(crate) fn begin(
        &mut self,
        stream: u64,
        graph: u64,
        joined_late: bool,
        begin_ns: u64,
    ) -> u64 {
        self.next += 1;
        let seq = self.next;
        self.captures.insert(
            seq,
            Capture {
                seq,
                graph,
                joined_late,
                begin_ns,
            },
        );
        if let Some(old) = self.streams.insert(stream, seq) {
            // The driver refuses a second begin on a capturing stream; if
            // the trace missed an end, the old capture is over.
            self.drop_if_unused(old);
        }
        seq
    }

    /// Whether a live capture records into `graph` (a `GraphBook` id).
    pub(crate) fn records_into(&self, graph: u64) -> bool {
        self.captures.values().any(|c| c.graph == graph)
    }

    /// `cuEventRecord*(event, stream)` that succeeded.
    pub(crate) fn record(&mut self, event: u64, stream: u64) {
        match self.streams.get(&stream) {
            Some(seq) => {
                self.events.insert(event, *seq);
            }
            None => {
                self.events.remove(&event);
            }
        }
    }

    /// `cuStreamWaitEvent*(stream, event)` that succeeded: a stream waiting
    /// on an event of a live capture joins it.
    pub(crate) fn wait(&mut self, stream: u64, event: u64) {
        let Some(seq) = self.events.get(&event).copied() else {
            return;
        };
        if self.captures.contains_key(&seq) && capturable(stream) {
            self.streams.insert(stream, seq);
        }
    }

    /// `cuStreamEndCapture(stream)`: the capture ends for every stream in
    /// it. Returns it, or `None` when `stream` was not known to capture.
    pub(crate) fn end(&mut self, stream: u64) -> Option<Capture> {
        let seq = self.streams.get(&stream).copied()?;
        self.streams.retain(|_, s| *s != seq);
        self.events.retain(|_, s| *s != seq);
        self.captures.remove(&seq)
    }

    /// The driver says `stream` is not capturing: forget a capture the
    /// trace thought it was in (ended or invalidated unseen).
    pub(crate) fn not_capturing(&mut self, stream: u64) {
        if let Some(seq) = self.streams.remove(&stream) {
            self.drop_if_unused(seq);
        }
    }

    fn drop_if_unused(&mut self, seq: u64) {
        if !self.streams.values().any(|s| *s == seq) {
            self.captures.remove(&seq);
            self.events.retain(|_, s| *s != seq);
        }
    }

    #[cfg(test)]
    /// Captures under way.
    pub(crate) fn live(&self) -> usize {
        self.captures.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 0x100;
    const S2: u64 = 0x200;
    const S3: u64 = 0x300;

    #[test]
    fn fork_join_and_end() {
        let mut b = CaptureBook::default();
        let seq = b.begin(S, 77, false, 0);
        assert_eq!(seq, 1);
        assert_eq!(b.of_stream(S).map(|c| c.graph), Some(77));
        assert!(b.of_stream(S2).is_none());
        b.record(0xe1, S);
        b.wait(S2, 0xe1);
        assert_eq!(b.of_stream(S2).map(|c| c.seq), Some(1));
        // An event recorded outside any capture does not pull S3 in.
        b.record(0xe2, S3);
        b.wait(S3, 0xe2);
        assert!(b.of_stream(S3).is_none());
        // Nor a legacy stream.
        b.wait(1, 0xe1);
        assert!(b.of_stream(1).is_none());
        let c = b.end(S).unwrap();
        assert_eq!((c.seq, c.graph), (1, 77));
        assert!(b.of_stream(S).is_none() && b.of_stream(S2).is_none());
        // The event belonged to the ended capture: waiting on it joins nothing.
        b.wait(S3, 0xe1);
        assert!(b.of_stream(S3).is_none());
        assert_eq!(b.live(), 0);
        assert!(b.end(S).is_none());
        assert_eq!(b.begin(S2, 78, false, 0), 2);
    }

    #[test]
    fn re_recorded_event_leaves_the_capture() {
        let mut b = CaptureBook::default();
        b.begin(S, 1, false, 0);
        b.record(0xe1, S);
        b.end(S);
        b.begin(S, 2, false, 0);
        b.record(0xe1, S3);
        b.wait(S2, 0xe1);
        assert!(b.of_stream(S2).is_none());
    }

    #[test]
    fn driver_says_not_capturing() {
        let mut b = CaptureBook::default();
        b.begin(S, 1, false, 0);
        b.record(0xe1, S);
        b.wait(S2, 0xe1);
        b.not_capturing(S);
        // S2 still holds the capture until it too is known to be out.
        assert_eq!(b.live(), 1);
        b.not_capturing(S2);
        assert_eq!(b.live(), 0);
    }
}
