//! The loop of `trace` and `daemon`: drain the ring buffer when the probes
//! wake us or a tick comes, in bounded bites so a signal or a tick never
//! waits behind a flood of calls; maintain on its own tick; stop at a
//! signal, a deadline, when every target has exited, or when an output
//! asks to.

use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::MissedTickBehavior;

use crate::error::Failure;
use crate::error::Result;
use crate::model::sink::Halt;
use crate::model::sink::Sink;
use crate::session::Session;
use crate::session::CHECK_EVERY;
use crate::session::DRAIN_EVERY;

/// How a session is run.
#[derive(Clone, Debug)]
pub(crate) struct RunOptions {
    /// Stop after this long. One too long for the clock to count (say
    /// `9223372036854775807s`) is no deadline at all.
    pub deadline: Option<Duration>,
    /// Stop once every process given by PID or started has exited.
    pub stop_when_targets_exit: bool,
}

/// Records decoded per bite of the ring buffer before the loop looks at
/// its other sources again (a few milliseconds of work).
pub(super) const BITE: usize = 4096;

/// SIGINT and SIGTERM, caught from the moment they are installed: before
/// the `attached` line, so a script that signals as soon as it reads that
/// line stops the trace cleanly instead of killing it (exit 143).
pub(super) struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub(super) fn install() -> Result<Signals> {
        let sig = |k| signal(k).map_err(|e| Failure::runtime(format!("signal handler: {e}")));
        Ok(Signals {
            int: sig(SignalKind::interrupt())?,
            term: sig(SignalKind::terminate())?,
        })
    }
}

/// The longest single timer the loop sets.
const LONGEST_SLEEP: Duration = Duration::from_secs(86400);

/// Why tracing stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    Deadline,
    /// SIGINT or SIGTERM (named).
    Signal(&'static str),
    TargetsExited,
    /// The reader of an output went away (a closed pipe).
    ReaderGone,
    /// An output could not be written.
    Failed(Failure),
}

impl Session {
    /// Runs until one of the [`Stop`] reasons; events go to `sink`. The
    /// caller then calls [`Session::stop`].
    pub(crate) async fn run<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        opts: &RunOptions,
    ) -> Result<Stop> {
        let Signals {
            int: mut sigint,
            term: mut sigterm,
        } = match self.signals.take() {
            Some(s) => s,
            None => Signals::install()?,
        };
        let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
        drain_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut check_tick = tokio::time::interval(CHECK_EVERY);
        check_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // A deadline past what the clock can count is none; a far one is
        // slept towards a day at a time (timers do not hold years).
        let deadline = opts
            .deadline
            .and_then(|d| tokio::time::Instant::now().checked_add(d));
        let step = |now: tokio::time::Instant| match deadline {
            Some(d) => now + d.saturating_duration_since(now).min(LONGEST_SLEEP),
            None => now,
        };
        let sleep = tokio::time::sleep_until(step(tokio::time::Instant::now()));
        tokio::pin!(sleep);
        // Records are waiting in the ring (it woke us, or a tick says so).
        let mut draining = false;
        loop {
            let stop = tokio::select! {
                r = self.readable(), if !draining => {
                    r?;
                    draining = true;
                    None
                }
                _ = drain_tick.tick() => {
                    draining = true;
                    None
                }
                _ = check_tick.tick() => {
                    (self.maintain(sink) && opts.stop_when_targets_exit).then_some(Stop::TargetsExited)
                }
                _ = &mut sleep, if deadline.is_some() => {
                    let now = tokio::time::Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        Some(Stop::Deadline)
                    } else {
                        sleep.as_mut().reset(step(now));
                        None
                    }
                }
                _ = sigint.recv() => Some(Stop::Signal("SIGINT")),
                _ = sigterm.recv() => Some(Stop::Signal("SIGTERM")),
                // Last: one bite, once everything above had its chance.
                _ = tokio::task::yield_now(), if draining => {
                    draining = self.drain(sink, BITE) == BITE;
                    None
                }
            };
            if let Some(stop) = stop {
                return Ok(stop);
            }
            match sink.flush() {
                Ok(()) => {}
                Err(Halt::ReaderGone) => return Ok(Stop::ReaderGone),
                Err(Halt::Failed(f)) => return Ok(Stop::Failed(f)),
            }
        }
    }
}
