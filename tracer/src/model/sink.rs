//! The interface between the session and its outputs: a [`Sink`] is handed
//! every [`Event`] in order; [`Status`] is the tracer's own state, given
//! about every 100 ms; [`Halt`] is why a sink asks the trace to stop.

use std::time::Instant;

use crate::error::Failure;
use crate::model::Event;

/// The tracer's own state, given to sinks about every 100 ms.
#[derive(Clone, Copy, Debug)]
pub struct Status {
    pub now: Instant,
    /// Uprobes and uretprobes attached.
    pub probes: usize,
    /// Library files probed for every process (node mode).
    pub library_files: usize,
    /// Processes whose decoding state (allocations, kernel names) is held.
    pub process_states: usize,
    /// `--overhead-budget`: what a probe hit costs on this machine.
    pub hit_cost: Option<crate::model::sampling::HitCost>,
}

/// Why a sink asks the trace to stop.
#[derive(Debug)]
pub enum Halt {
    /// Whoever read the output went away (a closed pipe): stop quietly.
    ReaderGone,
    /// Writing failed: stop, and end with this failure.
    Failed(Failure),
}

/// An output of the session.
pub trait Sink {
    /// One event, in the session's order.
    fn event(&mut self, event: &Event);

    /// The same event, handed over: a sink that keeps events (to format
    /// them on a thread of its own) takes it without a copy. Where several
    /// sinks share the events, only the last is handed them.
    fn take(&mut self, event: Event) {
        self.event(&event);
    }

    /// After each bite of events: hand on what is batched and flush what
    /// someone waits to read. An error stops the trace.
    fn flush(&mut self) -> Result<(), Halt> {
        Ok(())
    }

    /// About every 100 ms, with the tracer's own state.
    fn tick(&mut self, _status: &Status) {}
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn event(&mut self, event: &Event) {
        (**self).event(event);
    }
    fn take(&mut self, event: Event) {
        (**self).take(event);
    }
    fn flush(&mut self) -> Result<(), Halt> {
        (**self).flush()
    }
    fn tick(&mut self, status: &Status) {
        (**self).tick(status);
    }
}

/// A sink the command may or may not have chosen.
impl<S: Sink> Sink for Option<S> {
    fn event(&mut self, event: &Event) {
        if let Some(s) = self {
            s.event(event);
        }
    }
    fn take(&mut self, event: Event) {
        if let Some(s) = self {
            s.take(event);
        }
    }
    fn flush(&mut self) -> Result<(), Halt> {
        self.as_mut().map_or(Ok(()), Sink::flush)
    }
    fn tick(&mut self, status: &Status) {
        if let Some(s) = self {
            s.tick(status);
        }
    }
}

/// Keeps the worse of two halts: a failure over a reader gone.
fn worse(a: Result<(), Halt>, b: Result<(), Halt>) -> Result<(), Halt> {
    match (a, b) {
        (Err(Halt::Failed(f)), _) | (_, Err(Halt::Failed(f))) => Err(Halt::Failed(f)),
        (Err(h), _) | (_, Err(h)) => Err(h),
        _ => Ok(()),
    }
}

/// Several sinks, each handed every event; the last one is handed them
/// (put the one that keeps events there).
macro_rules! sink_tuple {
    ($($s:ident),+; $last:ident) => {
        #[allow(non_snake_case)]
        impl<$($s: Sink,)+ $last: Sink> Sink for ($($s,)+ $last) {
            fn event(&mut self, event: &Event) {
                let ($($s,)+ $last) = self;
                $($s.event(event);)+
                $last.event(event);
            }
            fn take(&mut self, event: Event) {
                let ($($s,)+ $last) = self;
                $($s.event(&event);)+
                $last.take(event);
            }
            fn flush(&mut self) -> Result<(), Halt> {
                let ($($s,)+ $last) = self;
                let r = Ok(());
                $(let r = worse(r, $s.flush());)+
                worse(r, $last.flush())
            }
            fn tick(&mut self, status: &Status) {
                let ($($s,)+ $last) = self;
                $($s.tick(status);)+
                $last.tick(status);
            }
        }
    };
}

sink_tuple!(A; B);
sink_tuple!(A, B; C);
sink_tuple!(A, B, C; D);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessInfo;

    /// Counts what it is given, and how.
    #[derive(Default)]
    struct Counter {
        borrowed: usize,
        taken: usize,
        halt: Option<fn() -> Halt>,
    }

    impl Sink for Counter {
        fn event(&mut self, _: &Event) {
            self.borrowed += 1;
        }
        fn take(&mut self, _: Event) {
            self.taken += 1;
        }
        fn flush(&mut self) -> Result<(), Halt> {
            self.halt.map_or(Ok(()), |h| Err(h()))
        }
    }

    fn seen() -> Event {
        Event::ProcessSeen(ProcessInfo::exited(7, "w"))
    }

    #[test]
    fn the_last_sink_is_handed_the_events() {
        let mut sinks = (Counter::default(), None::<Counter>, Counter::default());
        sinks.take(seen());
        sinks.event(&seen());
        assert_eq!((sinks.0.borrowed, sinks.0.taken), (2, 0));
        assert_eq!((sinks.2.borrowed, sinks.2.taken), (1, 1));
    }

    #[test]
    fn a_failure_outweighs_a_reader_gone() {
        let gone = || Halt::ReaderGone;
        let failed = || Halt::Failed(Failure::runtime("disk full"));
        let mut sinks = (
            Counter {
                halt: Some(gone),
                ..Default::default()
            },
            Counter {
                halt: Some(failed),
                ..Default::default()
            },
        );
        assert!(matches!(sinks.flush(), Err(Halt::Failed(f)) if f.message == "disk full"));
        sinks.1.halt = None;
        assert!(matches!(sinks.flush(), Err(Halt::ReaderGone)));
    }
}
