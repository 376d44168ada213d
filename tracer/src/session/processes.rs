//! The lifetime of traced processes, decided here and nowhere else.
//!
//! A process is *seen* when it is given by PID, started by gputrace, found
//! by a scan to map a probed library, or makes its first call; what it is
//! (name, start time, container) is read from `/proc` then, while it is
//! alive. It has *exited* when `/proc/PID/stat` is gone, shows a zombie, or
//! shows another start time (the PID was reused). It is *gone*
//! [`GONE_AFTER`] later: calls it made before it exited may still be in the
//! ring buffer, and they are decoded with its state until then. Outputs are
//! told with [`Event::ProcessSeen`] and [`Event::ProcessGone`] and keep
//! their own display or retention windows from there; none reads `/proc`
//! to find out whether a process is alive.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap as HashMap;

use crate::host::cgroup;
use crate::host::clock::Clock;
use crate::host::discover;
use crate::model::Event;
use crate::model::ProcessInfo;

/// How long an exited process's state is kept for its last calls.
pub(super) const GONE_AFTER: Duration = Duration::from_secs(2);

struct Known {
    start_ticks: Option<u64>,
    /// When the exit was noticed, and that moment as Unix ns.
    exited: Option<(Instant, u64)>,
}

pub(super) struct Processes {
    known: HashMap<u32, Known>,
    check_every: Duration,
    last_check: Option<Instant>,
    clock: Clock,
    /// Reads `/proc/PID/stat` (replaced in tests).
    stat: fn(u32) -> Option<discover::ProcStat>,
    /// Exits found since [`Processes::take_exits`]: pid, when (Unix ns),
    /// and its wait status when it was still a zombie.
    exits: Vec<(u32, u64, Option<i32>)>,
}

impl Processes {
    /// `check_every`: how often live processes are looked at.
    pub(super) fn new(check_every: Duration, clock: Clock) -> Self {
        Self {
            known: HashMap::default(),
            check_every,
            last_check: None,
            clock,
            stat: discover::stat,
            exits: Vec::new(),
        }
    }

    fn info(pid: u32, stat: discover::ProcStat) -> ProcessInfo {
        ProcessInfo {
            pid,
            start_ticks: Some(stat.start_ticks),
            comm: stat.comm.into(),
            container: cgroup::container_of(pid),
        }
    }

    fn now_ns(&self) -> u64 {
        self.clock.to_unix_ns(Clock::now_mono_ns())
    }

    /// A live process to trace. Says it is seen unless it already was; a
    /// PID whose process exited and that is alive again is a new process
    /// (the old one is gone at once). False for a process already gone.
    pub(super) fn found(&mut self, pid: u32, out: &mut Vec<Event>) -> bool {
        let old = self.known.get(&pid);
        if old.is_some_and(|k| k.exited.is_none()) {
            return true; // the liveness check looks for reuse
        }
        let Some(stat) = (self.stat)(pid).filter(|s| !s.exited()) else {
            return false;
        };
        if let Some(Known {
            exited: Some((_, exited_ns)),
            ..
        }) = old
        {
            out.push(Event::ProcessGone {
                pid,
                exited_ns: *exited_ns,
            });
        }
        self.known.insert(
            pid,
            Known {
                start_ticks: Some(stat.start_ticks),
                exited: None,
            },
        );
        out.push(Event::ProcessSeen(Self::info(pid, stat)));
        true
    }

    /// The first call of a process not seen yet (or gone already): what it
    /// is, read now; one that has exited already is known by the name its
    /// call carried, and is gone after the grace.
    pub(super) fn first_call(&mut self, pid: u32, thread_comm: &str) -> ProcessInfo {
        let (known, info) = match (self.stat)(pid).filter(|s| !s.exited()) {
            Some(stat) => (
                Known {
                    start_ticks: Some(stat.start_ticks),
                    exited: None,
                },
                Self::info(pid, stat),
            ),
            None => (
                Known {
                    start_ticks: None,
                    exited: Some((Instant::now(), self.now_ns())),
                },
                ProcessInfo::exited(pid, thread_comm),
            ),
        };
        self.known.insert(pid, known);
        info
    }

    /// The exits found since the last call: pid, when it was noticed (Unix
    /// ns), and its wait status when it could still be read (a zombie).
    pub(super) fn take_exits(&mut self) -> Vec<(u32, u64, Option<i32>)> {
        std::mem::take(&mut self.exits)
    }

    /// How long since live processes were last looked at: an exit found
    /// by the next look came within that time before it.
    pub(super) fn since_check(&self, now: Instant) -> Duration {
        self.last_check
            .map_or(self.check_every, |t| now.saturating_duration_since(t))
    }

    /// Whether `pid` is known (alive, or exited and not yet said gone).
    pub(super) fn knows(&self, pid: u32) -> bool {
        self.known.contains_key(&pid)
    }

    /// Whether `pid` is known and has not exited.
    pub(super) fn is_alive(&self, pid: u32) -> bool {
        self.known.get(&pid).is_some_and(|k| k.exited.is_none())
    }

    /// Looks at live processes (every `check_every`): returns those found
    /// to have exited; says `ProcessGone` for those exited longer than the
    /// grace.
    pub(super) fn check(&mut self, now: Instant, out: &mut Vec<Event>) -> Vec<u32> {
        if self
            .last_check
            .is_some_and(|t| now.saturating_duration_since(t) < self.check_every)
        {
            return Vec::new();
        }
        self.last_check = Some(now);
        let now_ns = self.now_ns();
        let stat = self.stat;
        let mut exited = Vec::new();
        for (pid, k) in self.known.iter_mut().filter(|(_, k)| k.exited.is_none()) {
            let st = stat(*pid).filter(|s| Some(s.start_ticks) == k.start_ticks);
            if st.as_ref().is_none_or(|s| s.exited()) {
                k.exited = Some((now, now_ns));
                exited.push(*pid);
                let code = st.and_then(|s| s.exit_code);
                self.exits.push((*pid, now_ns, code));
            }
        }
        let mut gone: Vec<(u32, u64)> = Vec::new();
        self.known.retain(|pid, k| match k.exited {
            Some((at, ns)) if now.saturating_duration_since(at) >= GONE_AFTER => {
                gone.push((*pid, ns));
                false
            }
            _ => true,
        });
        gone.sort_unstable();
        out.extend(
            gone.into_iter()
                .map(|(pid, exited_ns)| Event::ProcessGone { pid, exited_ns }),
        );
        exited.sort_unstable();
        exited
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::host::discover::ProcStat;

    /// The processes the tests pretend exist: pid → (start, zombie).
    static TABLE: Mutex<Vec<(u32, u64, bool)>> = Mutex::new(Vec::new());

    fn fake_stat(pid: u32) -> Option<ProcStat> {
        let t = TABLE.lock().unwrap();
        t.iter().find(|p| p.0 == pid).map(|p| ProcStat {
            comm: format!("p{pid}"),
            state: if p.2 { 'Z' } else { 'S' },
            ppid: 1,
            stime_ticks: 0,
            start_ticks: p.1,
            exit_code: p.2.then_some(9),
        })
    }

    fn set(table: &[(u32, u64, bool)]) {
        *TABLE.lock().unwrap() = table.to_vec();
    }

    fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::ProcessSeen(i) => format!("seen {} {}", i.pid, i.comm),
                Event::ProcessGone { pid, .. } => format!("gone {pid}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    // One test, so the table is not shared between threads.
    #[test]
    fn seen_exited_gone_and_reused() {
        let mut p = Processes::new(Duration::ZERO, Clock::measure());
        p.stat = fake_stat;
        let mut out = Vec::new();
        let t0 = Instant::now();

        set(&[(10, 100, false), (11, 200, false)]);
        assert!(p.found(10, &mut out));
        assert!(p.found(10, &mut out));
        assert!(!p.found(12, &mut out)); // not there: nothing
        assert_eq!(names(&out), ["seen 10 p10"]);
        assert!(p.check(t0, &mut out).is_empty());

        // 10 exits (a zombie); gone only after the grace.
        set(&[(10, 100, true), (11, 200, false)]);
        out.clear();
        assert_eq!(p.check(t0, &mut out), vec![10]);
        assert!(!p.is_alive(10));
        // Its wait status, read while a zombie (SIGKILL).
        let exits = p.take_exits();
        assert_eq!((exits.len(), exits[0].0, exits[0].2), (1, 10, Some(9)));
        assert!(p.check(t0 + GONE_AFTER / 2, &mut out).is_empty());
        assert!(out.is_empty());
        p.check(t0 + GONE_AFTER, &mut out);
        assert_eq!(names(&out), ["gone 10"]);

        // A first call of an unknown process that is alive, and of one
        // that is not: the latter is gone after the grace.
        out.clear();
        assert_eq!(&*p.first_call(11, "t").comm, "p11");
        assert_eq!(&*p.first_call(13, "short").comm, "short");
        assert!(p.is_alive(11) && !p.is_alive(13));
        // Known until said gone (counted calls read for 13 meanwhile do
        // not make it a first call again).
        assert!(p.knows(13));
        let t1 = Instant::now();
        p.check(t1 + GONE_AFTER, &mut out);
        assert_eq!(names(&out), ["gone 13"]);
        assert!(!p.knows(13));

        // 11's PID is reused: another start time is another process.
        set(&[(11, 999, false)]);
        out.clear();
        let t2 = t1 + GONE_AFTER * 2;
        assert_eq!(p.check(t2, &mut out), vec![11]);
        // Another process now: no status of the old one.
        assert_eq!(p.take_exits().last().map(|e| e.2), Some(None));
        // Found again before its grace ended: the old one is gone at once.
        p.found(11, &mut out);
        assert_eq!(names(&out), ["gone 11", "seen 11 p11"]);
        assert!(p.is_alive(11));
        assert!(p.check(t2 + GONE_AFTER * 2, &mut Vec::new()).is_empty());
    }
}
