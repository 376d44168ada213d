//! What the probes count beside the ring buffer, read into events: calls
//! counted in the kernel (`--probes FAMILY:counts`) and calls the probes
//! could not record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Event;
use crate::model::LostReport;
use crate::session::Session;

/// Per-process lost counts are read at most this often (reading them walks
/// a per-CPU hash map).
const LOST_BY_PID_EVERY: Duration = Duration::from_secs(1);

/// Calls counted in the kernel (`:counts`) are read this often (and
/// before a process is said gone, and at the end).
const COUNTS_EVERY: Duration = Duration::from_secs(1);

impl Session {
    /// `:counts`: the calls counted since the last read, every
    /// [`COUNTS_EVERY`], at the `end`, and before processes are said
    /// `gone` (whose entries then go).
    pub(super) fn read_counts(
        &mut self,
        now: Instant,
        end: bool,
        gone: &[Event],
        out: &mut Vec<Event>,
    ) {
        let Some((counts, last)) = &mut self.counts else {
            return;
        };
        let gone: Vec<u32> = gone
            .iter()
            .filter_map(|e| match e {
                Event::ProcessGone { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
        let due = last.is_none_or(|t| now.saturating_duration_since(t) >= COUNTS_EVERY);
        if !(end || due || !gone.is_empty()) {
            return;
        }
        *last = Some(now);
        let mut comm = |pid| Arc::from(crate::host::discover::comm(pid).unwrap_or_default());
        let news = counts.read(&mut comm);
        counts.forget(&gone);
        for c in news {
            // A process whose only calls were counted is seen by them; one
            // gone before anything saw it is known by them, and said gone
            // after the grace (its entries then deleted, not left to fill
            // the map).
            if !self.processes.knows(c.pid) && !self.processes.found(c.pid, out) {
                out.push(Event::ProcessSeen(
                    self.processes.first_call(c.pid, &c.comm),
                ));
            }
            out.push(Event::Counted(c));
        }
    }

    /// Reads the lost counters; says [`Event::Lost`] when they changed
    /// (or always, at the `end`).
    pub(super) fn read_lost(&mut self, now: Instant, end: bool, out: &mut Vec<Event>) {
        let total = self.lost.read();
        let changed = total != self.reported.total || self.undecodable != self.reported.undecodable;
        let by_pid_due = self
            .by_pid_read
            .is_none_or(|t| now.saturating_duration_since(t) >= LOST_BY_PID_EVERY);
        let due = end || (changed && by_pid_due);
        if !due {
            return;
        }
        let mut by_pid: Vec<(u32, u64)> = self.lost_by_pid.read().into_iter().collect();
        by_pid.sort_unstable();
        self.by_pid_read = Some(now);
        self.reported = LostReport {
            total,
            by_pid,
            undecodable: self.undecodable,
        };
        out.push(Event::Lost(self.reported.clone()));
    }
}
