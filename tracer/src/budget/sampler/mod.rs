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
//!   period, none for the rest. The period is stretched so that the on
//!   slice lasts at least [`MIN_ON`] (up to [`MAX_PERIOD`]): a slice must
//!   span several steps of a training loop, whose calls come in bursts
//!   (launches in the forward and backward passes, none while it waits),
//!   for the calls seen in it to stand for the period.
//!
//! Every change detaches first and attaches after (never both at once,
//! which would record calls twice), so a change leaves a short gap.
//!
//! Attaching and detaching is not free for the traced processes: each
//! probe written or removed takes the process's memory map lock for
//! writing and replaces a page of its code. So `Duty` attaches only the
//! symbols of APIs that have been called (`Sampler::mark_called`, learned
//! while the probes were on), and the whole set only every
//! [`DISCOVER_EVERY`] periods, to see APIs a process starts calling later.
//! The period itself is `GPUTRACE_SAMPLE_PERIOD` (1 s by default). The
//! thread measures when the probes were really attached in each period
//! (CLOCK_MONOTONIC, the probes' clock) and hands the session a
//! [`Period`] each: the calls seen in it, scaled by its length over its
//! time on, estimate the calls made. The schedule is one for the session:
//! every hot set follows it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::budget::period::kernel_ticks;
use crate::budget::period::Activity;
use crate::budget::period::KernelTime;
use crate::budget::period::Mark;
use crate::budget::period::Mode;
use crate::budget::period::Period;
use crate::probes::hot::HotSet;
use crate::probes::links::detach_in_order;
use crate::probes::links::Link;
use crate::probes::links::Scope;
use crate::probes::multi::MultiLink;
use crate::probes::multi::MultiPrograms;

mod untraced;
mod welcome;

use untraced::Untraced;

/// The shortest on slice under `Duty` (unless the period would pass
/// [`MAX_PERIOD`]).
pub(crate) const MIN_ON: Duration = Duration::from_millis(250);
/// The longest period.
pub(crate) const MAX_PERIOD: Duration = Duration::from_secs(30);
/// Under `Duty`, every this many periods the on slice attaches the
/// symbols of every samplable API, not only those called so far.
pub(crate) const DISCOVER_EVERY: u64 = 10;
/// The smallest share of a period the probes are attached for.
pub(crate) const MIN_RATIO: f64 = 0.02;

/// A file in a scope, as the attacher keys it.
pub(crate) type GroupKey = (Scope, (u64, u64));

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
    period_ns: u64,
    /// Periods closed so far.
    periods: u64,
    /// APIs seen called: what `Duty` attaches between discoveries.
    called: HashSet<u32>,
    /// The on slice under way attaches every API.
    discovering: bool,
    /// What was attached and detached so far, and how long it takes (the
    /// probes fire meanwhile).
    activity: Activity,
    /// The processes whose kernel time is read as the probes go on and off.
    watch: Vec<u32>,
    /// The last reading, taken once the probes were attached or detached.
    mark: Option<Mark>,
    /// Kernel time read so far in the period under way.
    kernel: KernelTime,
    /// When the busy APIs were not all traced.
    untraced: Untraced,
    /// New processes' slices of their own.
    welcomes: welcome::Welcomes,
}

impl State {
    /// The length of the period under way, as the mode wants it now.
    fn period_len(&self) -> u64 {
        match self.wanted {
            Mode::Duty(r) if r > 0.0 => {
                // The probes are live while they are attached and detached
                // too: that time is paid from the slice.
                let live = MIN_ON.as_nanos() as u64 + self.activity.transition_ns();
                let stretched = (live as f64 / r) as u64;
                stretched.clamp(
                    self.period_ns,
                    (MAX_PERIOD.as_nanos() as u64).max(self.period_ns),
                )
            }
            _ => self.period_ns,
        }
    }

    /// The APIs an on slice attaches: all while discovering, else those
    /// called so far.
    fn only(&self) -> Option<&HashSet<u32>> {
        (!self.discovering).then_some(&self.called)
    }

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
                kernel: std::mem::take(&mut self.kernel),
                welcomed: self.welcomes.close_period(self.period_start, now),
            });
        } else {
            self.welcomes.close_period(self.period_start, now);
        }
        self.periods += 1;
        self.period_start = now;
        self.on_acc = 0;
        self.returns = self.applied != Some(true);
    }

    /// Ends the reading under way (as the probes are about to change).
    fn read_kernel(&mut self, now: u64) {
        let Some(m) = self.mark.take() else {
            return;
        };
        let ticks = kernel_ticks(&self.watch);
        let spent: u64 = ticks
            .iter()
            .filter_map(|(pid, t)| Some(t.saturating_sub(*m.ticks.get(pid)?)))
            .sum();
        let ns = now.saturating_sub(m.at_ns);
        if m.on {
            self.kernel.on_ticks += spent;
            self.kernel.on_ns += ns;
        } else {
            self.kernel.off_ticks += spent;
            self.kernel.off_ns += ns;
        }
    }

    /// Starts a reading, the probes now fully on or off (duty slices only:
    /// other modes have no off time to set against).
    fn mark_kernel(&mut self, now: u64, on: bool) {
        self.mark =
            (matches!(self.wanted, Mode::Duty(_)) && !self.watch.is_empty()).then(|| Mark {
                on,
                at_ns: now,
                ticks: kernel_ticks(&self.watch),
            });
    }

    fn set_off(&mut self, now: u64) {
        if let Some(s) = self.on_since.take() {
            self.on_acc += now.saturating_sub(s);
            self.on.push((s, now));
        }
        self.untraced.off(now);
    }
}

/// CLOCK_MONOTONIC in nanoseconds: what `bpf_ktime_get_ns` returns.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// A duration smoothed over the last few (the first taken as it is).
fn smoothed(old: u64, new: u64) -> u64 {
    if old == 0 {
        new
    } else {
        (old + new) / 2
    }
}

/// The thread that attaches the hot sets, and what it measured.
pub(crate) struct Sampler {
    shared: Shared,
    multi: Arc<MultiPrograms>,
    per_task: bool,
    thread: Option<JoinHandle<()>>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sampler {
    pub(crate) fn start(multi: Arc<MultiPrograms>, per_task: bool, period: Duration) -> Self {
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
                period_ns: period.as_nanos().max(1) as u64,
                periods: 0,
                called: HashSet::new(),
                discovering: true,
                activity: Activity::default(),
                watch: Vec::new(),
                mark: None,
                kernel: KernelTime::default(),
                untraced: Untraced::default(),
                welcomes: welcome::Welcomes::default(),
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
    pub(crate) fn add(&self, key: GroupKey, set: HotSet) -> std::io::Result<()> {
        let mut st = lock(&self.shared);
        let mut g = Group {
            set,
            entry: None,
            ret: None,
        };
        if let Some(entry_only) = st.applied {
            let only = st.only();
            st.activity.changes +=
                attach_group(&mut g, &self.multi, entry_only, self.per_task, only)?;
        }
        st.groups.insert(key, g);
        let symbols = st.groups.values().map(|g| g.set.offsets.len()).sum();
        st.activity.symbols = st.activity.symbols.max(symbols);
        Ok(())
    }

    /// Takes a file's links out (the caller detaches them) and forgets it.
    pub(crate) fn remove(&self, key: &GroupKey) -> (Option<MultiLink>, Option<MultiLink>) {
        let mut st = lock(&self.shared);
        match st.groups.remove(key) {
            Some(g) => (g.entry, g.ret),
            None => (None, None),
        }
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        let mut st = lock(&self.shared);
        if st.wanted != mode {
            st.wanted = mode;
            self.shared.1.notify_all();
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        lock(&self.shared).wanted
    }

    /// The processes whose kernel time to read as the probes go on and
    /// off (`Period::kernel`).
    pub(crate) fn watch(&self, pids: Vec<u32>) {
        let mut st = lock(&self.shared);
        if st.watch != pids {
            st.watch = pids;
            st.mark = None;
        }
    }

    /// A process seen for the first time: under `Duty`, while the shared
    /// probes are off, it gets a slice of its own (`welcome`).
    pub(crate) fn welcome(&self, pid: u32) {
        let mut st = lock(&self.shared);
        if matches!(st.wanted, Mode::Duty(_)) {
            st.welcomes.ask(pid);
            self.shared.1.notify_all();
        }
    }

    /// A new process that gets no slices of its own (too many known).
    pub(crate) fn welcome_missed(&self) {
        lock(&self.shared).welcomes.missed += 1;
    }

    /// Slices of their own given to new processes, and new processes that
    /// got none.
    pub(crate) fn welcomes(&self) -> (u64, u64) {
        let st = lock(&self.shared);
        (st.welcomes.given, st.welcomes.missed)
    }

    /// APIs seen called: `Duty` attaches them in every on slice.
    pub(crate) fn mark_called(&self, apis: impl IntoIterator<Item = u32>) {
        let mut st = lock(&self.shared);
        st.called.extend(apis);
    }

    /// Whether every call of the samplable APIs made from `from_ns` to
    /// `to_ns` (CLOCK_MONOTONIC) was traced: their probes were surely on
    /// throughout (false where that is not known any more).
    pub(crate) fn busy_traced(&self, from_ns: u64, to_ns: u64) -> bool {
        lock(&self.shared).untraced.traced(from_ns, to_ns)
    }

    /// The periods completed since the last call, and the start of the
    /// one under way.
    pub(crate) fn take_periods(&self) -> (Vec<Period>, u64) {
        let mut st = lock(&self.shared);
        (std::mem::take(&mut st.done), st.period_start)
    }

    /// Ends the period under way now (at the end of a trace).
    pub(crate) fn close_now(&self) {
        let mut st = lock(&self.shared);
        st.close_period(monotonic_ns());
    }

    /// What the sampler has done so far.
    pub(crate) fn activity(&self) -> Activity {
        lock(&self.shared).activity
    }

    /// Probes attached now by the hot sets.
    pub(crate) fn probes(&self) -> usize {
        let st = lock(&self.shared);
        st.groups.values().map(Group::probes).sum()
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
/// storage, as `Probes::attach` does); entry-only probes of the APIs in
/// `only` when given. Returns the probes attached.
fn attach_group(
    g: &mut Group,
    multi: &MultiPrograms,
    entry_only: bool,
    per_task: bool,
    only: Option<&HashSet<u32>>,
) -> std::io::Result<u64> {
    if entry_only {
        g.entry = g.set.attach_entry(multi, true, only)?;
    } else if per_task {
        g.ret = g.set.attach_ret(multi)?;
        g.entry = g.set.attach_entry(multi, false, None)?;
    } else {
        g.entry = g.set.attach_entry(multi, false, None)?;
        g.ret = g.set.attach_ret(multi)?;
    }
    Ok(g.probes() as u64)
}

impl Group {
    fn probes(&self) -> usize {
        self.entry.as_ref().map_or(0, |l| l.probes) + self.ret.as_ref().map_or(0, |l| l.probes)
    }
}

/// Detaches in the order `attach::detach_many` explains.
fn drop_links(links: Vec<(Option<MultiLink>, Option<MultiLink>)>, per_task: bool) {
    let (mut entries, mut rets) = (Vec::new(), Vec::new());
    for (e, r) in links {
        entries.extend(e.map(Link::Multi));
        rets.extend(r.map(Link::Multi));
    }
    detach_in_order(entries, rets, per_task);
}

/// The schedule: each pass puts the groups in the state the mode wants at
/// this point of the period, then sleeps until the next change.
fn run(shared: &Shared, multi: &MultiPrograms, per_task: bool) {
    let mut st = lock(shared);
    loop {
        if st.stop {
            drop(welcome::end(st, shared, 0, true));
            return;
        }
        let now = monotonic_ns();
        let period_ns = st.period_len();
        let end = st.period_start + period_ns;
        if now >= end {
            st.close_period(now);
            continue;
        }
        let (want, next) = wanted(&st, now, period_ns, end);
        if want != st.applied {
            // Off first (outside the lock: detaching waits for the kernel),
            // then on: never both sets of links at once, nor the shared
            // ones with a new process's own.
            if want.is_some() {
                st = welcome::end(st, shared, now, true);
            }
            st = switch_off(st, shared, per_task);
            if want.is_none() {
                st.mark_kernel(monotonic_ns(), false);
            }
            if let Some(entry_only) = want {
                switch_on(&mut st, multi, entry_only, per_task);
            }
            continue;
        }
        let mut next = next;
        if !st.welcomes.is_idle() {
            let shared_on = st.applied.is_some();
            welcome::start(&mut st, multi, shared_on);
            st = welcome::end(st, shared, monotonic_ns(), false);
            next = next.min(st.welcomes.next_change().unwrap_or(u64::MAX));
        }
        let wait = Duration::from_nanos(next.saturating_sub(now).max(100_000));
        st = shared
            .1
            .wait_timeout(st, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// What the mode wants now (`None`: off; `Some(entry_only)`: on), and
/// until when.
fn wanted(st: &State, now: u64, period_ns: u64, end: u64) -> (Option<bool>, u64) {
    match st.wanted {
        Mode::Exact => (Some(false), end),
        Mode::EntryOnly => (Some(true), end),
        Mode::Duty(r) => {
            // The share of the period the probes may be live, less the
            // time they take to attach and detach (at most half of it).
            let live = (period_ns as f64 * r.clamp(0.0, 1.0)) as u64;
            let on_until =
                st.period_start + live.saturating_sub(st.activity.transition_ns().min(live / 2));
            if now < on_until {
                (Some(true), on_until)
            } else {
                (None, end)
            }
        }
    }
}

/// Detaches every group's links (outside the lock) and times it.
fn switch_off<'a>(
    mut st: MutexGuard<'a, State>,
    shared: &'a Shared,
    per_task: bool,
) -> MutexGuard<'a, State> {
    let t_off = monotonic_ns();
    st.read_kernel(t_off);
    st.set_off(t_off);
    st.activity.changes += st.groups.values().map(|g| g.probes() as u64).sum::<u64>();
    let links: Vec<_> = st
        .groups
        .values_mut()
        .map(|g| (g.entry.take(), g.ret.take()))
        .collect();
    let had = !links.is_empty() && st.applied.is_some();
    st.applied = None;
    drop(st);
    drop_links(links, per_task);
    st = lock(shared);
    if had {
        let took = monotonic_ns().saturating_sub(t_off);
        st.activity.detach_ns = smoothed(st.activity.detach_ns, took);
    }
    st
}

/// Attaches the groups, entry only or with returns; a duty slice attaches
/// the APIs called so far, and all of them every `DISCOVER_EVERY` periods
/// (and until one was seen).
fn switch_on(st: &mut State, multi: &MultiPrograms, entry_only: bool, per_task: bool) {
    let t_attach = monotonic_ns();
    let mut ok = true;
    // A duty slice attaches the APIs called so far, and all of
    // them every DISCOVER_EVERY periods (and until one was seen).
    st.discovering = !matches!(st.wanted, Mode::Duty(_))
        || st.called.is_empty()
        || st.periods.is_multiple_of(DISCOVER_EVERY);
    let only = st.only().cloned();
    let keys: Vec<GroupKey> = st.groups.keys().copied().collect();
    for k in keys {
        let Some(g) = st.groups.get_mut(&k) else {
            continue;
        };
        match attach_group(g, multi, entry_only, per_task, only.as_ref()) {
            Ok(n) => {
                st.activity.changes += n;
                if matches!(st.wanted, Mode::Duty(_)) {
                    st.activity.slice_probes += n;
                }
            }
            Err(e) => {
                ok = false;
                if !st.failed {
                    st.failed = true;
                    crate::say!("--overhead-budget: cannot attach sampled probes again: {e}");
                }
            }
        }
    }
    st.applied = Some(entry_only);
    if matches!(st.wanted, Mode::Duty(_)) {
        st.activity.slices += 1;
        let took = monotonic_ns().saturating_sub(t_attach);
        st.activity.attach_ns = smoothed(st.activity.attach_ns, took);
    }
    if ok || !st.groups.is_empty() {
        let now = monotonic_ns();
        st.on_since = Some(now);
        let whole = ok && st.discovering;
        st.untraced.on(now, whole);
        st.mark_kernel(now, true);
    }
    if entry_only {
        st.returns = false;
    }
}

#[cfg(test)]
mod tests;
