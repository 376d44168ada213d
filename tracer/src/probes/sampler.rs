//! `--overhead-budget`: the probes of the samplable APIs (launches, async
//! copies and sets, event records, stream waits: `Api::samplable`) are
//! attached on links of their own, one set per library file and scope
//! ([`HotSet`]), which a thread of their own attaches in one of three ways
//! ([`Mode`]), as the session's budget (`session::budget`) asks:
//!
//! - `Exact`: entry and return probes, as without a budget;
//! - `EntryOnly`: entry probes whose cookies say "entry only": the record
//!   is sent at entry (counts stay exact; no latency, no return code);
//! - `Duty(r)`: entry-only probes attached for the first `r` of each
//!   [`PERIOD`], none for the rest.
//!
//! Every change detaches first and attaches after (never both at once,
//! which would record calls twice), so a change leaves a short gap. The
//! thread measures when the probes were really attached in each period
//! (CLOCK_MONOTONIC, the probes' clock) and hands the session a
//! [`Period`] each: the calls seen in it, scaled by its length over its
//! time on, estimate the calls made. The schedule is one for the session:
//! every hot set follows it.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracer_common::ProbeCookie;

use super::attach::Scope;
use super::multi::{MultiLink, MultiPrograms};

/// The length of one period of the schedule.
pub const PERIOD: Duration = Duration::from_millis(1000);
/// The smallest share of a period the probes are attached for.
pub const MIN_RATIO: f64 = 0.02;

/// The samplable symbols of one library file in one scope.
#[derive(Debug)]
pub struct HotSet {
    /// Held open, attached through `/proc/self/fd/N`.
    file: Option<File>,
    path: PathBuf,
    pid: Option<u32>,
    offsets: Vec<u64>,
    cookies: Vec<u64>,
    /// Whether each symbol gets a return probe in `Exact` mode.
    with_ret: Vec<bool>,
}

impl HotSet {
    pub(crate) fn new(pid: Option<u32>) -> Self {
        Self {
            file: None,
            path: PathBuf::new(),
            pid,
            offsets: Vec::new(),
            cookies: Vec::new(),
            with_ret: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, offset: u64, cookie: ProbeCookie, with_ret: bool) {
        self.offsets.push(offset);
        self.cookies.push(cookie.0);
        self.with_ret.push(with_ret);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Opens `path` and keeps it open for the set's lifetime.
    pub(crate) fn open(mut self, path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        self.path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        self.file = Some(file);
        Ok(self)
    }

    fn attach_entry(&self, multi: &MultiPrograms, entry_only: bool) -> std::io::Result<MultiLink> {
        let cookies: Vec<u64> = if entry_only {
            self.cookies
                .iter()
                .map(|c| c | ProbeCookie::ENTRY_ONLY)
                .collect()
        } else {
            self.cookies.clone()
        };
        multi.attach(&self.path, &self.offsets, &cookies, self.pid, false)
    }

    fn attach_ret(&self, multi: &MultiPrograms) -> std::io::Result<Option<MultiLink>> {
        let (mut o, mut c) = (Vec::new(), Vec::new());
        for i in 0..self.offsets.len() {
            if self.with_ret[i] {
                o.push(self.offsets[i]);
                c.push(self.cookies[i]);
            }
        }
        if o.is_empty() {
            return Ok(None);
        }
        multi.attach(&self.path, &o, &c, self.pid, true).map(Some)
    }
}

/// How the hot sets are attached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Exact,
    EntryOnly,
    /// Entry-only, attached for this share of each period.
    Duty(f64),
}

/// One period of the schedule, in CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    pub start_ns: u64,
    pub end_ns: u64,
    /// How long the hot probes were attached in it.
    pub on_ns: u64,
    /// When they were attached: (from, to) intervals.
    pub on: Vec<(u64, u64)>,
    /// Return probes were attached whenever the entries were.
    pub returns: bool,
}

impl Period {
    /// The share of the period the hot probes were attached.
    pub fn on_fraction(&self) -> f64 {
        let len = self.end_ns.saturating_sub(self.start_ns);
        if len == 0 {
            return 1.0;
        }
        (self.on_ns as f64 / len as f64).min(1.0)
    }
}

/// A file in a scope, as the attacher keys it.
pub type GroupKey = (Scope, (u64, u64));

#[derive(Debug)]
struct Group {
    set: HotSet,
    entry: Option<MultiLink>,
    ret: Option<MultiLink>,
}

struct State {
    groups: HashMap<GroupKey, Group>,
    wanted: Mode,
    stop: bool,
    /// How the groups are attached now: `None` off, else entry-only or not.
    applied: Option<bool>,
    period_start: u64,
    on_since: Option<u64>,
    on_acc: u64,
    on: Vec<(u64, u64)>,
    returns: bool,
    done: Vec<Period>,
    /// Attach failures (said once).
    failed: bool,
}

impl State {
    fn close_period(&mut self, now: u64) {
        if let Some(s) = self.on_since {
            self.on_acc += now.saturating_sub(s);
            self.on.push((s, now));
            self.on_since = Some(now);
        }
        let on = std::mem::take(&mut self.on);
        if self.done.len() < 1000 {
            self.done.push(Period {
                start_ns: self.period_start,
                end_ns: now,
                on_ns: self.on_acc,
                on,
                returns: self.returns,
            });
        }
        self.period_start = now;
        self.on_acc = 0;
        self.returns = self.applied != Some(true);
    }

    fn set_off(&mut self, now: u64) {
        if let Some(s) = self.on_since.take() {
            self.on_acc += now.saturating_sub(s);
            self.on.push((s, now));
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: what `bpf_ktime_get_ns` returns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// The thread that attaches the hot sets, and what it measured.
pub struct Sampler {
    shared: Shared,
    multi: Arc<MultiPrograms>,
    per_task: bool,
    thread: Option<JoinHandle<()>>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sampler {
    pub fn start(multi: Arc<MultiPrograms>, per_task: bool) -> Self {
        let shared: Shared = Arc::new((
            Mutex::new(State {
                groups: HashMap::new(),
                wanted: Mode::Exact,
                stop: false,
                applied: Some(false),
                period_start: monotonic_ns(),
                on_since: Some(monotonic_ns()),
                on_acc: 0,
                on: Vec::new(),
                returns: true,
                done: Vec::new(),
                failed: false,
            }),
            Condvar::new(),
        ));
        let thread = {
            let (shared, multi) = (shared.clone(), multi.clone());
            std::thread::Builder::new()
                .name("gputrace-sampler".into())
                .spawn(move || run(&shared, &multi, per_task))
                .ok()
        };
        Self {
            shared,
            multi,
            per_task,
            thread,
        }
    }

    /// Adds a file's hot set, attached at once as the schedule has it now.
    pub fn add(&self, key: GroupKey, set: HotSet) -> std::io::Result<()> {
        let mut st = lock(&self.shared);
        let mut g = Group {
            set,
            entry: None,
            ret: None,
        };
        if let Some(entry_only) = st.applied {
            attach_group(&mut g, &self.multi, entry_only, self.per_task)?;
        }
        st.groups.insert(key, g);
        Ok(())
    }

    /// Takes a file's links out (the caller detaches them) and forgets it.
    pub fn remove(&self, key: &GroupKey) -> (Option<MultiLink>, Option<MultiLink>) {
        let mut st = lock(&self.shared);
        match st.groups.remove(key) {
            Some(g) => (g.entry, g.ret),
            None => (None, None),
        }
    }

    pub fn set_mode(&self, mode: Mode) {
        let mut st = lock(&self.shared);
        if st.wanted != mode {
            st.wanted = mode;
            self.shared.1.notify_all();
        }
    }

    pub fn mode(&self) -> Mode {
        lock(&self.shared).wanted
    }

    /// The periods completed since the last call, and the start of the
    /// one under way.
    pub fn take_periods(&self) -> (Vec<Period>, u64) {
        let mut st = lock(&self.shared);
        (std::mem::take(&mut st.done), st.period_start)
    }

    /// Ends the period under way now (at the end of a trace).
    pub fn close_now(&self) {
        let mut st = lock(&self.shared);
        st.close_period(monotonic_ns());
    }

    /// Probes attached now by the hot sets.
    pub fn probes(&self) -> usize {
        let st = lock(&self.shared);
        st.groups
            .values()
            .map(|g| {
                g.entry.as_ref().map_or(0, |l| l.probes) + g.ret.as_ref().map_or(0, |l| l.probes)
            })
            .sum()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Attaches a group as `entry_only` says (returns first with task
/// storage, as `Probes::attach` does).
fn attach_group(
    g: &mut Group,
    multi: &MultiPrograms,
    entry_only: bool,
    per_task: bool,
) -> std::io::Result<()> {
    if entry_only {
        g.entry = Some(g.set.attach_entry(multi, true)?);
        return Ok(());
    }
    if per_task {
        g.ret = g.set.attach_ret(multi)?;
        g.entry = Some(g.set.attach_entry(multi, false)?);
    } else {
        g.entry = Some(g.set.attach_entry(multi, false)?);
        g.ret = g.set.attach_ret(multi)?;
    }
    Ok(())
}

/// Detaches in the order `attach::detach_many` explains.
fn drop_links(links: Vec<(Option<MultiLink>, Option<MultiLink>)>, per_task: bool) {
    let (mut entries, mut rets) = (Vec::new(), Vec::new());
    for (e, r) in links {
        entries.extend(e);
        rets.extend(r);
    }
    if per_task {
        drop(entries);
        drop(rets);
    } else {
        drop(rets);
        drop(entries);
    }
}

/// The schedule: each pass puts the groups in the state the mode wants at
/// this point of the period, then sleeps until the next change.
fn run(shared: &Shared, multi: &MultiPrograms, per_task: bool) {
    let period_ns = PERIOD.as_nanos() as u64;
    let mut st = lock(shared);
    loop {
        if st.stop {
            return;
        }
        let now = monotonic_ns();
        let end = st.period_start + period_ns;
        if now >= end {
            st.close_period(now);
            continue;
        }
        let (want, next) = match st.wanted {
            Mode::Exact => (Some(false), end),
            Mode::EntryOnly => (Some(true), end),
            Mode::Duty(r) => {
                let on_until = st.period_start + (period_ns as f64 * r.clamp(0.0, 1.0)) as u64;
                if now < on_until {
                    (Some(true), on_until)
                } else {
                    (None, end)
                }
            }
        };
        if want != st.applied {
            // Off first (outside the lock: detaching waits for the kernel),
            // then on: never both sets of links at once.
            let t_off = monotonic_ns();
            st.set_off(t_off);
            let links: Vec<_> = st
                .groups
                .values_mut()
                .map(|g| (g.entry.take(), g.ret.take()))
                .collect();
            st.applied = None;
            drop(st);
            drop_links(links, per_task);
            st = lock(shared);
            if let Some(entry_only) = want {
                let mut ok = true;
                let keys: Vec<GroupKey> = st.groups.keys().copied().collect();
                for k in keys {
                    if let Some(g) = st.groups.get_mut(&k) {
                        if let Err(e) = attach_group(g, multi, entry_only, per_task) {
                            ok = false;
                            if !st.failed {
                                st.failed = true;
                                eprintln!("gputrace: --overhead-budget: cannot attach sampled probes again: {e}");
                            }
                        }
                    }
                }
                st.applied = Some(entry_only);
                if ok || !st.groups.is_empty() {
                    st.on_since = Some(monotonic_ns());
                }
                if entry_only {
                    st.returns = false;
                }
            }
            continue;
        }
        let wait = Duration::from_nanos(next.saturating_sub(now).max(100_000));
        st = shared
            .1
            .wait_timeout(st, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}
