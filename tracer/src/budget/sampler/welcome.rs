//! A new process's own slices under `Duty`: the shared schedule may be off
//! for most of a long period (12.5 s at a 2% share), and a process that
//! lives less than that, or only in the off part, would make busy calls
//! gputrace never sees. So a process seen for the first time while the
//! shared probes are off gets entry-only probes of its own (attached for
//! its PID alone: the kernel writes breakpoints in its code only, so no
//! other process pays for them) for a slice as long as the share the
//! schedule gives every process of a second ([`welcome_len`]), and again
//! every second (while the shared probes are off) until the end of the
//! period after the one it came in: its cost stays within the budget
//! from its first second (twice it, at most, for those two periods), and
//! a process that sets up for a while before its first launch is still
//! seen. The slices' calls tell
//! its rate; the period's estimate scales them over the part of the
//! period the process lived (`budget::settle`).
//!
//! Never both at once: the shared probes go on only after every slice
//! of its own has ended, so no call is recorded twice.

use std::sync::MutexGuard;

use super::{lock, monotonic_ns, Shared, State, MIN_ON};
use crate::budget::period::Mode;
use crate::probes::links::{detach_in_order, Link, Scope};
use crate::probes::multi::{MultiLink, MultiPrograms};

/// New processes that may wait for a slice of their own.
const MAX_ASKED: usize = 256;
/// Slices of their own under way at once.
const MAX_UNDER_WAY: usize = 32;
/// Slices of their own kept per period.
const MAX_DONE: usize = 4096;
/// The shortest slice of its own (ns): a few hundred calls of a busy loop
/// at least, and longer than attaching takes.
pub(crate) const MIN_WELCOME_NS: u64 = 20_000_000;
/// A process's own slices begin this far apart (ns).
const WELCOME_EVERY_NS: u64 = 1_000_000_000;

/// A slice of its own under way.
#[derive(Debug)]
struct Under {
    pid: u32,
    asked: u64,
    links: Vec<MultiLink>,
    since: u64,
    until: u64,
}

/// New processes' slices: asked for, under way, and those of the period.
#[derive(Debug, Default)]
pub(super) struct Welcomes {
    /// Processes, when their next slice of their own may begin, and when
    /// they were asked for.
    asked: Vec<(u32, u64, u64)>,
    under_way: Vec<Under>,
    /// This period's slices: (pid, from, to), CLOCK_MONOTONIC.
    done: Vec<(u32, u64, u64)>,
    /// Slices given, and new processes that got none (too many at once,
    /// or their probes could not be attached).
    pub(super) given: u64,
    pub(super) missed: u64,
    /// The start of the last period closed: processes asked for since
    /// get slices of their own.
    last_start: u64,
}

/// The length of a new process's slice under `Duty(r)`: `r` of a second,
/// the share of its time the schedule lets every process's probes take,
/// from [`MIN_WELCOME_NS`] to `MIN_ON`.
pub(super) fn welcome_len(r: f64) -> u64 {
    ((r.clamp(0.0, 1.0) * 1e9) as u64).clamp(MIN_WELCOME_NS, MIN_ON.as_nanos() as u64)
}

impl Welcomes {
    /// A process seen for the first time.
    pub(super) fn ask(&mut self, pid: u32) {
        if self.asked.iter().any(|a| a.0 == pid) || self.under_way.iter().any(|u| u.pid == pid) {
            return;
        }
        if self.asked.len() >= MAX_ASKED {
            self.missed += 1;
            return;
        }
        self.asked.push((pid, 0, monotonic_ns()));
    }

    /// The period that began at `start` ends at `now`: its slices, those
    /// under way cut there; processes that came before it are left to the
    /// shared schedule.
    pub(super) fn close_period(&mut self, start: u64, now: u64) -> Vec<(u32, u64, u64)> {
        self.asked.retain(|a| a.2 >= start);
        self.last_start = start;
        for u in &mut self.under_way {
            if self.done.len() < MAX_DONE {
                self.done.push((u.pid, u.since, now));
            }
            u.since = now;
        }
        std::mem::take(&mut self.done)
    }

    /// When the next slice under way ends, or the next asked may begin.
    pub(super) fn next_change(&self) -> Option<u64> {
        let ends = self.under_way.iter().map(|u| u.until);
        // (With every place taken, the next to begin waits for an end.)
        let full = self.under_way.len() >= MAX_UNDER_WAY;
        let begins = self.asked.iter().filter(|_| !full).map(|a| a.1);
        ends.chain(begins).min()
    }

    pub(super) fn is_idle(&self) -> bool {
        self.asked.is_empty() && self.under_way.is_empty()
    }
}

/// Starts the slices due, where the shared probes are off under `Duty`
/// (those due while they are on wait for their end; under the other
/// modes every call is traced: the asks are dropped).
pub(super) fn start(st: &mut State, multi: &MultiPrograms, shared_on: bool) {
    let r = match st.wanted {
        Mode::Duty(r) => r,
        _ => {
            st.welcomes.asked.clear();
            return;
        }
    };
    if shared_on {
        return;
    }
    let len = welcome_len(r);
    let now = monotonic_ns();
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut st.welcomes.asked)
        .into_iter()
        .partition(|a| a.1 <= now);
    st.welcomes.asked = later;
    for (pid, at, asked) in due {
        if st.welcomes.under_way.len() >= MAX_UNDER_WAY {
            st.welcomes.asked.push((pid, at, asked)); // when one ends
            continue;
        }
        let mut links = Vec::new();
        for ((scope, _), g) in &st.groups {
            if matches!(scope, Scope::Process(p) if *p != pid) {
                continue;
            }
            // A process gone already, or a file it does not map: no link.
            if let Ok(Some(l)) = g.set.attach_for(multi, pid) {
                links.push(l);
            }
        }
        if links.is_empty() {
            continue; // gone
        }
        st.activity.changes += links.iter().map(|l| l.probes as u64).sum::<u64>();
        st.welcomes.given += 1;
        let since = monotonic_ns();
        st.welcomes.under_way.push(Under {
            pid,
            asked,
            links,
            since,
            until: since + len,
        });
    }
}

/// Ends the slices due by `now` (all with `all`), their links dropped
/// outside the lock (detaching waits for the kernel).
pub(super) fn end<'a>(
    mut st: MutexGuard<'a, State>,
    shared: &'a Shared,
    now: u64,
    all: bool,
) -> MutexGuard<'a, State> {
    let (due, keep): (Vec<Under>, Vec<Under>) = std::mem::take(&mut st.welcomes.under_way)
        .into_iter()
        .partition(|u| all || u.until <= now);
    st.welcomes.under_way = keep;
    if due.is_empty() {
        return st;
    }
    let t_off = monotonic_ns();
    let mut links = Vec::new();
    for u in due {
        st.activity.changes += u.links.iter().map(|l| l.probes as u64).sum::<u64>();
        if st.welcomes.done.len() < MAX_DONE {
            st.welcomes.done.push((u.pid, u.since, t_off));
        }
        // The next slice a second after this one began (while the process
        // came in this period or the last, `close_period`).
        if st.welcomes.asked.len() < MAX_ASKED && u.asked >= st.welcomes.last_start {
            st.welcomes
                .asked
                .push((u.pid, u.since + WELCOME_EVERY_NS, u.asked));
        }
        links.extend(u.links);
    }
    drop(st);
    // Each link waits for a grace period as it closes: in parallel.
    detach_in_order(
        links.into_iter().map(Link::Multi).collect(),
        Vec::new(),
        false,
    );
    lock(shared)
}
