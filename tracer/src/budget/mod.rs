//! `--overhead-budget PCT`: keeps what the probes cost each traced process
//! under PCT percent of one CPU's time (its threads' probe time added up),
//! by sampling the busy APIs.
//!
//! The model: a probe hit costs the calling thread a fixed time (measured
//! at start, `probes::hitcost`: `e` for an entry probe, `er` for an entry
//! and a return probe, each for the class of the function's first
//! instruction, `probes::symbols::Prologue`; below, one class for short).
//! A thread that makes `n` calls of samplable APIs per
//! second while their probes are attached, and `m` calls of the others
//! (always traced), spends `n × er + m × er` of each second in probes
//! (`n × e + m × er` with the samplable ones entry only): that share of its
//! CPU time. A process's cost is its threads' added up: the threads that
//! drive a GPU take turns on a step's path (PyTorch's main thread issues
//! the forward pass, its autograd thread the backward), so the sum bounds
//! the step's slowdown, where a per-thread budget let two threads each
//! spend it (measured on the DDP benchmark: 2.4% of one CPU for a 1%
//! budget). Every period of the schedule (`GPUTRACE_SAMPLE_PERIOD`, 1 s),
//! with rates smoothed over periods, the mode is the costliest that keeps
//! every traced process within the budget:
//!
//! 1. `(n + m) × er ≤ budget`: exact (entry and return probes);
//! 2. else `n × e + m × er ≤ budget`: entry probes only (counts exact, no
//!    latency nor return code for the sampled APIs);
//! 3. else entry probes attached for `r = (budget − m × er) / (n × e)` of
//!    each period, the smallest `r` of all processes (at least
//!    `sampler::MIN_RATIO`, even where the always-traced calls alone spend
//!    the budget).
//!
//! Going back to a costlier mode needs 20% of headroom, so a rate at the
//! edge does not flip the mode every period. Rare APIs
//! (allocations, frees, synchronisations, NCCL, graph construction,
//! names) are never sampled. The calls of each period are counted per
//! (process, thread, API) and settled when the period ends, once: the
//! calls seen while the probes were surely on × the thread's rare calls in
//! the period / those of them made while on (50 at least, and within half
//! to twice the period / its time on; else the process's), or, for a
//! thread and process with too few rare calls, from the whole steps a
//! slice held (`Steps`: a bursty loop's launches between two of its
//! synchronisations), else × the period / its time on
//! × the process's progress correction (its rare
//! calls in sampled periods over what time alone tells of them, once 20
//! came while on). Rare calls keep pace with a training step's work, so
//! they tell the share of it seen far better than time does (on a DDP
//! step's trace: 0.6% against 4.8% per 250 ms slice), and they take out
//! the slowdown the probes cause while on.

pub mod hitcost;
pub mod sampler;
pub mod summary;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::budget::hitcost::InPlaceStore;
use crate::budget::sampler::KernelTime;
use crate::budget::sampler::Mode;
use crate::budget::sampler::Period;
use crate::budget::sampler::Sampler;
use crate::budget::sampler::MIN_RATIO;
use crate::catalogue::Api;
use crate::host::clock::Clock;
use crate::model::sampling::ApiEstimate;
use crate::model::sampling::HitCost;
use crate::model::sampling::ProcessSampling;
use crate::model::sampling::SamplingReport;
use crate::probes::symbols::Prologue;
use crate::probes::symbols::Prologues;

/// A process's rare calls seen in sampled periods before its progress is
/// trusted as the scale of its sampled calls.
const MIN_RARE_ON: u64 = 20;

/// A thread's (or process's) rare calls while on in one period before they
/// scale its sampled calls of that period.
const MIN_RARE_ON_PERIOD: u64 = 50;

/// The calls of one API by one process.
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    /// Seen in periods traced in full.
    exact: u64,
    /// Seen in sampled periods.
    sampled: u64,
    /// The calls made in the sampled periods, estimated period by period
    /// as each ends and never revised (so the exported counter only grows).
    estimated: f64,
}

/// One process's progress: its rare calls (always traced) in sampled
/// periods, and how many of them came while the sampled probes were on.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    total: u64,
    on: u64,
    /// Each period's rare calls while on, times its length over its time
    /// on: what `total` would be if time alone told the calls made.
    by_time: f64,
}

/// One process's always-traced calls over the session, for `--verbose`
/// (kept after it exits, when its counts are dropped).
#[derive(Clone, Debug, Default)]
struct RareTally {
    first_ns: u64,
    last_ns: u64,
    /// API id → calls.
    calls: BTreeMap<u16, u64>,
}

/// Calls of the period under way.
#[derive(Default)]
struct Pending {
    /// (pid, tid, API id) → calls of samplable APIs.
    hot: HashMap<(u32, u32, u16), Vec<u64>>,
    /// (pid, tid) → entry times and API ids of rare calls.
    rare: HashMap<(u32, u32), Vec<(u64, u16)>>,
}

/// Rare calls of one thread or process in one sampled period: in all, and
/// while the sampled probes were surely on.
#[derive(Clone, Copy, Debug, Default)]
struct Rare {
    all: u64,
    on: u64,
}

impl Rare {
    /// The period's calls per call seen while on, where enough rare calls
    /// came while on to tell it.
    fn ratio(&self) -> Option<f64> {
        (self.on >= MIN_RARE_ON_PERIOD).then(|| self.all as f64 / self.on as f64)
    }
}

/// Whole steps of a thread seen while on: from where a step's rare calls
/// of one API begin to where a later step's begin, within one on slice.
/// A loop that makes that call at one point of each step (a
/// synchronisation, once or a few times together) made `calls` of them in
/// whole steps in between, and `period` in the period: the busy calls seen
/// in between, × `period / calls`, estimate the period's. For a job with
/// few rare calls, whose busy calls come in bursts (a burst of launches,
/// then a wait), this takes out how many bursts a slice happened to hold,
/// which scaling by time cannot.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Steps {
    from: u64,
    to: u64,
    /// Steps in between.
    steps: u64,
    /// The API's calls in between (`to` not included).
    calls: u64,
    /// The API's calls in the period.
    period: u64,
}

impl Steps {
    /// The span of a thread's rare calls of one period (`calls`: entry
    /// times and API ids) that holds the most steps (then the longest), if
    /// one holds a step. `before`: the thread's last call of an API before
    /// the period, if any.
    fn find(
        calls: &[(u64, u16)],
        on: &[(u64, u64)],
        start: u64,
        end: u64,
        before: impl Fn(u16) -> Option<u64>,
    ) -> Option<Self> {
        let mut by_api: BTreeMap<u16, Vec<u64>> = BTreeMap::new();
        for &(t, api) in calls {
            if t >= start && t < end {
                by_api.entry(api).or_default().push(t);
            }
        }
        let changes: Vec<u64> = std::iter::once(start)
            .chain(on.iter().flat_map(|&(a, b)| [a, b]))
            .collect();
        let mut best: Option<Steps> = None;
        for (&api, times) in &mut by_api {
            times.sort_unstable();
            let period = times.len() as u64;
            if let Some(t) = before(api).filter(|t| *t < start) {
                times.insert(0, t);
            }
            // A step's calls begin after a gap of at least half the
            // longest between two calls: every call of one made once a
            // step, the first of each group of a few made together. A gap
            // across a change of the probes (the period's start, a slice's
            // attach or detach) is left out where others are known:
            // attaching and detaching stall the process (they write its
            // code under its memory map lock), and such a gap, twice a
            // step's, hid every step of the slice after it.
            let longest = longest_gap(times, &changes);
            let begins: Vec<usize> = (1..times.len())
                .filter(|&i| {
                    times[i] >= start && times[i] - times[i - 1] >= longest.div_ceil(2).max(1)
                })
                .collect();
            for &(a, b) in on {
                let inside: Vec<usize> = begins
                    .iter()
                    .copied()
                    .filter(|&i| times[i] >= a && times[i] < b)
                    .collect();
                let (Some(&i), Some(&j)) = (inside.first(), inside.last()) else {
                    continue;
                };
                let steps = inside.len() as u64 - 1;
                let (from, to) = (times[i], times[j]);
                if steps == 0
                    || best.is_some_and(|s| (s.steps, s.to - s.from) >= (steps, to - from))
                {
                    continue;
                }
                best = Some(Steps {
                    from,
                    to,
                    steps,
                    calls: (j - i) as u64,
                    period,
                });
            }
        }
        best
    }

    /// The period's calls, from those seen in the span.
    fn estimate(&self, between: u64) -> f64 {
        between as f64 * self.period as f64 / self.calls as f64
    }
}

/// The longest gap between two of `times` (sorted) that spans none of
/// `changes`, else the longest of all.
fn longest_gap(times: &[u64], changes: &[u64]) -> u64 {
    let gaps = || times.windows(2).map(|w| (w[0], w[1]));
    let spans_none = |&(a, b): &(u64, u64)| !changes.iter().any(|&c| c > a && c <= b);
    gaps()
        .filter(spans_none)
        .map(|(a, b)| b - a)
        .max()
        .or_else(|| gaps().map(|(a, b)| b - a).max())
        .unwrap_or(0)
}

/// A thread's smoothed rates: calls per second, and what they cost per
/// second (each call at the hit cost of its function's prologue class).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rates {
    /// Samplable calls while their probes were on.
    hot: f64,
    /// The others (always traced).
    rare: f64,
    /// The samplable calls' cost with entry probes only, and with return
    /// probes too.
    hot_e: f64,
    hot_er: f64,
    /// The other calls' cost (entry and return probes).
    rare_er: f64,
}

/// What the probes cost a thread (or a process) at its rates, as
/// fractions of its time (of one CPU's).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Costs {
    exact: f64,
    entry_only: f64,
    /// Of the rare calls alone.
    rare: f64,
}

impl Rates {
    fn costs(&self) -> Costs {
        Costs {
            exact: self.hot_er + self.rare_er,
            entry_only: self.hot_e + self.rare_er,
            rare: self.rare_er,
        }
    }

    /// The share of each period the samplable probes can be on within
    /// `budget` (entry only); `None` without samplable calls.
    fn duty(&self, budget: f64) -> Option<f64> {
        (self.hot_e > 0.0).then(|| (budget - self.rare_er) / self.hot_e)
    }
}

pub(super) struct Budget {
    /// The budget as a fraction (1% = 0.01).
    fraction: f64,
    cost: HitCost,
    /// The prologue class of each API's function (what its hits cost).
    prologues: Arc<Prologues>,
    pub(super) sampler: std::sync::Arc<Sampler>,
    clock: Clock,
    pending: Pending,
    /// (pid, API id) → calls.
    counts: HashMap<(u32, u16), Count>,
    progress: HashMap<u32, Progress>,
    /// Smoothed calls per second of each thread.
    rates: HashMap<(u32, u32), Rates>,
    /// A period was not exact: reports are sent from then on.
    sampled: bool,
    /// Periods settled.
    periods: u64,
    /// With `--verbose`: each process's always-traced calls.
    rare_tally: HashMap<u32, RareTally>,
    /// (pid, tid, API) → the thread's last rare call of the API in a
    /// settled period (where its steps begin, `Steps`).
    last_rare: HashMap<(u32, u32, u16), u64>,
    /// Estimates made (per thread, API and sampled period) by each
    /// [`Rule`].
    rules: [u64; 3],
    last: Option<Period>,
    verbose: bool,
    /// The hot probes' cost as read in place, against the model's.
    in_place: InPlace,
    /// Where the ratio read in place is kept for the next budget.
    store: InPlaceStore,
}

/// How often (in periods) a ratio read in place is kept.
const KEEP_EVERY: u64 = 20;

/// What the hot probes cost the processes in place: their kernel time
/// while the probes were on, beyond what the same time off shows, set
/// against what the model makes of the calls seen on, over every duty
/// period so far. The hit cost is measured on gputrace's own loop; in a
/// real program a hit can cost more (on the GPU host, a PyTorch DDP step's
/// hits cost 1.1–1.7× the figure measured cold).
#[derive(Clone, Copy, Debug, Default)]
struct InPlace {
    kernel: KernelTime,
    /// The model's cost of the calls seen on, over the time read on.
    modeled_s: f64,
    /// The ratio last read on this machine (a budget before this one):
    /// in force until enough is read here.
    prior: Option<f64>,
}

/// Kernel time read on before a ratio is taken (clock ticks: 0.3 s at
/// 100 Hz, a minute or so of a busy process sampled at 1%; the ticks are
/// counts of a sampled clock, and a ratio of a few is noise).
const MIN_IN_PLACE_TICKS: u64 = 30;

/// Standard deviations above its estimate that a one-sided 95% bound
/// lies (normal).
const ONE_SIDED_95: f64 = 1.645;

impl InPlace {
    /// How many times the model's cost the probes cost in place, at least
    /// 1 (the model is never lowered below its measured figure) and at
    /// most 4; until enough has been read, the ratio a budget before read
    /// on this machine, else 1.
    fn ratio(&self, ticks_per_s: f64) -> f64 {
        self.current(ticks_per_s).0
    }

    /// [`Self::ratio`], and where it comes from (for `--verbose`).
    fn current(&self, ticks_per_s: f64) -> (f64, &'static str) {
        match (self.read(ticks_per_s), self.prior) {
            (Some(r), _) => (r, "in place"),
            (None, Some(r)) => (
                r,
                "as last read in place on this machine (not enough read yet)",
            ),
            (None, None) => (1.0, "(nothing read in place yet)"),
        }
    }

    /// The ratio read here, once enough has been: the bound it stays
    /// under with 95% confidence. Kernel time is read in clock ticks,
    /// counts of a sampled clock (Poisson: a count `n` is known to about
    /// `√n`), and the budget is a ceiling: the probes are charged at what
    /// they may cost, which nears what they cost as ticks add up.
    fn read(&self, ticks_per_s: f64) -> Option<f64> {
        let k = &self.kernel;
        if k.on_ticks < MIN_IN_PLACE_TICKS || k.off_ns == 0 || self.modeled_s <= 0.0 {
            return None;
        }
        let scale = k.on_ns as f64 / k.off_ns as f64;
        let on_s = k.on_ticks as f64 / ticks_per_s;
        let off_s = k.off_ticks as f64 / ticks_per_s * scale;
        let spread_s =
            (k.on_ticks as f64 + k.off_ticks as f64 * scale * scale).sqrt() / ticks_per_s;
        Some(((on_s - off_s + ONE_SIDED_95 * spread_s) / self.modeled_s).clamp(1.0, 4.0))
    }
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Exact => "exact",
        Mode::EntryOnly => "entry-only",
        Mode::Duty(_) => "duty",
    }
}

impl Budget {
    pub(super) fn new(
        percent: f64,
        cost: HitCost,
        prologues: Arc<Prologues>,
        sampler: std::sync::Arc<Sampler>,
        clock: Clock,
        verbose: bool,
        store: InPlaceStore,
    ) -> Self {
        Self {
            fraction: percent / 100.0,
            cost,
            prologues,
            sampler,
            clock,
            pending: Pending::default(),
            counts: HashMap::new(),
            progress: HashMap::new(),
            rates: HashMap::new(),
            sampled: false,
            periods: 0,
            rare_tally: HashMap::new(),
            last_rare: HashMap::new(),
            rules: [0; 3],
            last: None,
            verbose,
            in_place: InPlace {
                prior: store.last,
                ..InPlace::default()
            },
            store,
        }
    }

    /// Keeps the ratio read in place so far, if enough was.
    fn keep_ratio(&self) {
        if let Some(r) = self.in_place.read(ticks_per_s()) {
            self.store.save(r);
        }
    }

    /// One call seen (`start_ns`: its entry, CLOCK_MONOTONIC). Calls are
    /// counted into the period under way; one drained just after its
    /// period ended counts into the next (cumulative estimates barely move).
    pub(super) fn observe(&mut self, api: &'static Api, pid: u32, tid: u32, start_ns: u64) {
        if api.samplable() {
            self.pending
                .hot
                .entry((pid, tid, api.id))
                .or_default()
                .push(start_ns);
        } else {
            self.pending
                .rare
                .entry((pid, tid))
                .or_default()
                .push((start_ns, api.id));
            if self.verbose {
                let t = self.rare_tally.entry(pid).or_insert_with(|| RareTally {
                    first_ns: start_ns,
                    ..RareTally::default()
                });
                t.first_ns = t.first_ns.min(start_ns);
                t.last_ns = t.last_ns.max(start_ns);
                *t.calls.entry(api.id).or_default() += 1;
            }
        }
    }

    /// Settles the periods the sampler has completed and decides the mode
    /// for the next ones; a report per period once sampling has begun.
    pub(super) fn refresh(&mut self, out: &mut Vec<SamplingReport>) {
        let (done, _) = self.sampler.take_periods();
        for p in done {
            self.periods += 1;
            self.settle(&p);
            self.decide();
            if self.sampled {
                out.push(self.report(&p));
            }
            self.last = Some(p);
            if self.periods.is_multiple_of(KEEP_EVERY) {
                self.keep_ratio();
            }
        }
    }

    fn settle(&mut self, p: &Period) {
        let pending = std::mem::take(&mut self.pending);
        let frac = p.on_fraction();
        let exact = frac >= 0.9999;
        if !exact || !p.returns {
            self.sampled = true;
        }
        let on_s = p.on_ns as f64 / 1e9;
        let len_s = p.end_ns.saturating_sub(p.start_ns) as f64 / 1e9;
        let off_s = (len_s - on_s).max(0.0);
        self.sampler
            .mark_called(pending.hot.keys().map(|&(_, _, api)| u32::from(api)));
        // Rare calls: each thread's and process's while on and in all.
        let is_on = |t: u64| p.on.iter().any(|(a, b)| t >= *a && t < *b);
        let mut rare_threads: HashMap<(u32, u32), Rare> = HashMap::new();
        let mut rare_procs: HashMap<u32, Rare> = HashMap::new();
        // (pid, tid) → the period's rare calls' cost, in seconds.
        let mut rare_cost: HashMap<(u32, u32), f64> = HashMap::new();
        // (pid, tid) → whole steps seen while on.
        let mut steps: HashMap<(u32, u32), Steps> = HashMap::new();
        for (k, calls) in pending.rare {
            if !exact {
                let before = |api| self.last_rare.get(&(k.0, k.1, api)).copied();
                if let Some(s) = Steps::find(&calls, &p.on, p.start_ns, p.end_ns, before) {
                    steps.insert(k, s);
                }
            }
            for &(t, api) in &calls {
                if t >= p.start_ns && t < p.end_ns {
                    let last = self.last_rare.entry((k.0, k.1, api)).or_default();
                    *last = (*last).max(t);
                }
            }
            let mut r = Rare::default();
            let mut later = Vec::new();
            for (t, api) in calls {
                if t >= p.end_ns {
                    later.push((t, api));
                } else if t >= p.start_ns {
                    // (One drained after its own period was settled is
                    // in neither.)
                    r.all += 1;
                    r.on += u64::from(!exact && is_on(t));
                    *rare_cost.entry(k).or_default() += self.seconds(api).1;
                }
            }
            if !later.is_empty() {
                self.pending.rare.insert(k, later);
            }
            let g = rare_procs.entry(k.0).or_default();
            g.all += r.all;
            g.on += r.on;
            rare_threads.insert(k, r);
        }
        if !exact {
            for (&pid, r) in &rare_procs {
                let g = self.progress.entry(pid).or_default();
                g.total += r.all;
                g.on += r.on;
                g.by_time += r.on as f64 * len_s / on_s.max(1e-9);
            }
        }
        // Samplable calls: those made while the probes were surely on.
        // Probes fire while they are being attached and detached too (a
        // detach can take a few hundred ms), outside the time counted on:
        // such calls are seen, not counted into the estimate. Calls drained
        // after the period's end count into the next one.
        // The calls seen all count as observed, as the summary counts
        // them: its rows scale the calls it saw by estimated over
        // observed, and a slice's attach and detach often see a burst.
        // (pid, tid, API) → calls seen while on, within the thread's whole
        // steps, and in all.
        let mut hot: HashMap<(u32, u32, u16), (u64, u64, u64)> = HashMap::new();
        for (k, times) in pending.hot {
            let span = steps.get(&(k.0, k.1));
            let (mut n, mut between, mut seen, mut later) = (0, 0, 0, Vec::new());
            for t in times {
                if t >= p.end_ns {
                    later.push(t);
                    continue;
                }
                seen += 1;
                if exact || is_on(t) {
                    n += 1;
                    between += u64::from(span.is_some_and(|s| t >= s.from && t < s.to));
                }
            }
            if !later.is_empty() {
                self.pending.hot.insert(k, later);
            }
            hot.insert(k, (n, between, seen));
        }
        // (pid, tid) → calls, their cost with entry probes, with returns.
        let mut per_thread: HashMap<(u32, u32), (u64, f64, f64)> = HashMap::new();
        for (&(pid, tid, api), &(n, _, _)) in &hot {
            let (e, er) = self.seconds(api);
            let t = per_thread.entry((pid, tid)).or_default();
            t.0 += n;
            t.1 += n as f64 * e;
            t.2 += n as f64 * er;
        }
        // The kernel time read while the probes were on and off, and what
        // the model makes of the calls seen on.
        let k = &p.kernel;
        if !exact && k.on_ns > 0 && k.off_ns > 0 && on_s > 0.0 {
            let modeled: f64 = per_thread
                .values()
                .map(|&(_, e, er)| if p.returns { er } else { e })
                .sum();
            self.in_place.modeled_s += modeled / on_s * (k.on_ns as f64 / 1e9);
            self.in_place.kernel += *k;
        }
        let by_time = (on_s + off_s) / on_s.max(1e-9);
        for ((pid, tid, api), (n, between, seen)) in hot {
            // The thread's rare calls of this period over those made while
            // on (a training step's launches come with its kernel lookups,
            // synchronisations and collectives, so this tells the share of
            // the period's work seen far better than time does, and takes
            // out the slowdown the probes cause while on); else the
            // process's; else the whole steps the slice held (`Steps`);
            // else the period's time over its time on, corrected by the
            // process's progress so far (its rare calls in sampled
            // periods over what time alone tells of them).
            // Periods differ in length (the schedule stretches them, the
            // last one is cut short): so ratios of this period, or the
            // correction, not a ratio of calls, carry over.
            let (estimate, rule) = estimate_by(
                n,
                rare_threads.get(&(pid, tid)),
                rare_procs.get(&pid),
                steps.get(&(pid, tid)).map(|s| (s, between)),
                self.progress.get(&pid),
                by_time,
            );
            let c = self.counts.entry((pid, api)).or_default();
            if exact {
                c.exact += seen;
                continue;
            }
            c.sampled += seen;
            c.estimated += estimate;
            if n > 0 {
                self.rules[rule as usize] += 1;
            }
        }
        // Rates (`smooth`): rare calls are always traced, their rate is
        // over the whole period. Periods with almost no time on say little
        // about the samplable ones.
        if len_s > 0.0 {
            let mut seen: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
            for (k, r) in &rare_threads {
                let cost = rare_cost.get(k).copied().unwrap_or(0.0);
                seen.insert(*k, (r.all as f64 / len_s, cost / len_s));
            }
            for (k, r) in self.rates.iter_mut() {
                let (n, c) = seen.remove(k).unwrap_or((0.0, 0.0));
                r.rare = smooth(r.rare, n);
                r.rare_er = smooth(r.rare_er, c);
            }
            for (k, (n, c)) in seen {
                let r = self.rates.entry(k).or_default();
                (r.rare, r.rare_er) = (n, c);
            }
        }
        if on_s >= 0.005 {
            for (k, r) in self.rates.iter_mut() {
                let (n, e, er) = per_thread.remove(k).unwrap_or_default();
                r.hot = smooth(r.hot, n as f64 / on_s);
                r.hot_e = smooth(r.hot_e, e / on_s);
                r.hot_er = smooth(r.hot_er, er / on_s);
            }
            for (k, (n, e, er)) in per_thread {
                let r = self.rates.entry(k).or_default();
                (r.hot, r.hot_e, r.hot_er) = (n as f64 / on_s, e / on_s, er / on_s);
            }
        }
        self.rates.retain(|_, r| r.hot + r.rare > 1.0);
    }

    /// What a hit of `api` costs, (entry, entry and return), in seconds.
    fn seconds(&self, api: u16) -> (f64, f64) {
        self.cost.seconds(self.prologues.of(api))
    }

    /// A process's estimated calls of one API.
    fn estimate(c: &Count) -> f64 {
        c.exact as f64 + c.estimated
    }

    fn decide(&mut self) {
        let now = self.sampler.mode();
        // The processes whose kernel time the sampler reads.
        let mut pids: Vec<u32> = self.rates.keys().map(|k| k.0).collect();
        pids.sort_unstable();
        pids.dedup();
        self.sampler.watch(pids);
        // Costs × the ratio read in place: the budget ÷ it.
        let ratio = self.cost_ratio();
        let next = choose(now, &self.rates, self.fraction / ratio);
        if next != now {
            if self.verbose {
                // The process the probes cost most.
                let busiest = per_process(&self.rates)
                    .into_values()
                    .max_by(|a, b| {
                        let (a, b) = (a.costs(), b.costs());
                        a.exact.total_cmp(&b.exact)
                    })
                    .unwrap_or_default();
                let c = busiest.costs();
                eprintln!(
                    "gputrace: overhead budget {:.2}%: costliest process {:.0} sampled calls/s and {:.0} other calls/s, {:.2}% with return probes, {:.2}% entry only ({:.2}% the other calls; hits cost {:.2}× the measured figure {}): {} ",
                    self.fraction * 100.0,
                    busiest.hot,
                    busiest.rare,
                    c.exact * 100.0 * ratio,
                    c.entry_only * 100.0 * ratio,
                    c.rare * 100.0 * ratio,
                    ratio,
                    self.ratio_source(),
                    match next {
                        Mode::Exact => "exact".to_string(),
                        Mode::EntryOnly => "entry probes only".to_string(),
                        Mode::Duty(r) => format!("attached {:.0}% of each period", r * 100.0),
                    }
                );
            }
            self.sampler.set_mode(next);
        }
    }

    fn report(&self, p: &Period) -> SamplingReport {
        let mut by_pid: BTreeMap<u32, Vec<ApiEstimate>> = BTreeMap::new();
        for (&(pid, id), c) in &self.counts {
            let Some(api) = crate::catalogue::api(u32::from(id)) else {
                continue;
            };
            by_pid.entry(pid).or_default().push(ApiEstimate {
                api: api.name,
                family: api.family,
                observed: c.exact + c.sampled,
                estimated: Self::estimate(c),
            });
        }
        SamplingReport {
            start_ns: self.clock.to_unix_ns(p.start_ns),
            end_ns: self.clock.to_unix_ns(p.end_ns),
            on_fraction: p.on_fraction(),
            returns: p.returns,
            mode: mode_name(self.sampler.mode()),
            processes: by_pid
                .into_iter()
                .map(|(pid, mut apis)| {
                    apis.sort_by_key(|a| a.api);
                    ProcessSampling { pid, apis }
                })
                .collect(),
            budget_percent: self.fraction * 100.0,
            hit_cost: self.cost,
            cost_ratio: self.cost_ratio(),
        }
    }

    /// A process gone: its counts are dropped (its last report is sent).
    pub(super) fn forget(&mut self, pid: u32) {
        self.counts.retain(|k, _| k.0 != pid);
        self.rates.retain(|k, _| k.0 != pid);
        self.last_rare.retain(|k, _| k.0 != pid);
        self.progress.remove(&pid);
    }

    /// At the end: the period under way is closed and settled, and one
    /// last report sent (always, so every output can say whether the
    /// budget was exceeded).
    pub(super) fn finish(&mut self, out: &mut Vec<SamplingReport>) {
        self.sampler.close_now();
        self.refresh(out);
        self.keep_ratio();
        let last = self.last.clone().unwrap_or(Period {
            start_ns: 0,
            end_ns: 0,
            on_ns: 0,
            on: Vec::new(),
            returns: true,
            kernel: Default::default(),
        });
        out.pop_if(|r| r.start_ns == self.clock.to_unix_ns(last.start_ns));
        out.push(self.report(&last));
        if self.verbose {
            let a = self.sampler.activity();
            eprintln!(
                "gputrace: overhead budget: {} periods, {} sampled probes attached or detached (attaching takes {:.1} ms, detaching {:.1} ms); {} on slices attached {:.1} of {} samplable probes on average",
                self.periods,
                a.changes,
                a.attach_ns as f64 / 1e6,
                a.detach_ns as f64 / 1e6,
                a.slices,
                a.slice_probes as f64 / a.slices.max(1) as f64,
                a.symbols
            );
            eprintln!(
                "gputrace: overhead budget: estimates (per thread, API and sampled period) scaled by the thread's or process's rare calls: {}, by whole steps seen while on: {}, by time: {}",
                self.rules[Rule::RareCalls as usize],
                self.rules[Rule::Steps as usize],
                self.rules[Rule::Time as usize]
            );
            let k = &self.in_place.kernel;
            eprintln!(
                "gputrace: overhead budget: in place, the traced processes spent {} clock ticks in the kernel over {:.1} s with the sampled probes on and {} over {:.1} s off; the model makes {:.3} s of the calls seen on: hits cost {:.2}× the measured figure {}",
                k.on_ticks,
                k.on_ns as f64 / 1e9,
                k.off_ticks,
                k.off_ns as f64 / 1e9,
                self.in_place.modeled_s,
                self.cost_ratio(),
                self.ratio_source()
            );
            eprintln!("gputrace: overhead budget: {}", self.prologue_line());
            if let Some(line) = self.rare_line() {
                eprintln!("gputrace: overhead budget: {line}");
            }
        }
    }

    /// The always-traced APIs of the process they cost most, costliest
    /// first, at their rate between its first and last such call (what
    /// sets the floor the budget cannot go under), for `--verbose`.
    fn rare_line(&self) -> Option<String> {
        let ratio = self.cost_ratio();
        // (pid, span, [(API, calls a second, share of one CPU)])
        let costed = self.rare_tally.iter().filter_map(|(&pid, t)| {
            let span_s = t.last_ns.saturating_sub(t.first_ns) as f64 / 1e9;
            (span_s >= 0.5).then(|| {
                let apis: Vec<(&'static str, f64, f64)> = t
                    .calls
                    .iter()
                    .filter_map(|(&id, &n)| {
                        let api = crate::catalogue::api(u32::from(id))?;
                        let rate = n as f64 / span_s;
                        Some((api.name, rate, rate * self.seconds(id).1 * ratio))
                    })
                    .collect();
                (pid, span_s, apis)
            })
        });
        let total = |v: &[(&str, f64, f64)]| v.iter().map(|x| x.2).sum::<f64>();
        let (pid, span_s, mut apis) = costed.max_by(|a, b| total(&a.2).total_cmp(&total(&b.2)))?;
        apis.sort_by(|a, b| b.2.total_cmp(&a.2));
        let shown: Vec<String> = apis
            .iter()
            .take(8)
            .map(|(name, rate, share)| format!("{name} {rate:.0}/s ({:.2}%)", share * 100.0))
            .collect();
        Some(format!(
            "always-traced calls of pid {pid} over {span_s:.1} s, {:.2}% of one CPU by the model: {}",
            total(&apis) * 100.0,
            shown.join(", ")
        ))
    }

    /// Which probed functions' hits are emulated and which single-stepped
    /// (the samplable ones by name), for `--verbose`.
    fn prologue_line(&self) -> String {
        let (mut emulated, mut stepped) = (Vec::new(), Vec::new());
        let (mut rare_e, mut rare_s) = (0, 0);
        for (id, p) in self.prologues.all() {
            let Some(api) = crate::catalogue::api(u32::from(id)) else {
                continue;
            };
            match (api.samplable(), p) {
                (true, Prologue::Emulated) => emulated.push(api.name),
                (true, Prologue::Stepped) => stepped.push(api.name),
                (false, Prologue::Emulated) => rare_e += 1,
                (false, Prologue::Stepped) => rare_s += 1,
            }
        }
        let (e, s) = (
            self.cost.seconds(Prologue::Emulated).0,
            self.cost.seconds(Prologue::Stepped).0,
        );
        format!(
            "samplable functions that begin with a push (emulated, {:.0} ns a hit): {}; single-stepped ({:.0} ns): {}; the other functions: {rare_e} emulated, {rare_s} single-stepped",
            e * 1e9,
            if emulated.is_empty() { "none".to_string() } else { emulated.join(" ") },
            s * 1e9,
            if stepped.is_empty() { "none".to_string() } else { stepped.join(" ") },
        )
    }

    /// Where [`Self::cost_ratio`] comes from, for `--verbose`.
    fn ratio_source(&self) -> &'static str {
        self.in_place.current(ticks_per_s()).1
    }

    /// How many times the measured hit cost the probes cost in place (as
    /// read before on this machine, else 1, until enough was read).
    pub(super) fn cost_ratio(&self) -> f64 {
        self.in_place.ratio(ticks_per_s())
    }

    /// The cost model's figures, for `--verbose` and the summary.
    pub(super) fn cost(&self) -> HitCost {
        self.cost
    }
}

/// A smoothed rate and a period's: a higher rate is taken at once (a job
/// speeding up, or the first periods, which see the probes being attached,
/// must not be paid for above the budget while the average catches up); a
/// lower one halves the gap (a pause of one period does not bring the
/// probes back on at full cost).
fn smooth(old: f64, new: f64) -> f64 {
    if new >= old {
        new
    } else {
        0.5 * old + 0.5 * new
    }
}

/// Which rule made an estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    RareCalls,
    Steps,
    Time,
}

/// A thread's calls of one API in a period, from the `n` seen while on:
/// scaled by the thread's rare calls of the period over those while on,
/// else the process's; else, where the thread's rare calls hold whole
/// steps, the calls seen in them × the period's steps over theirs; else by
/// the period's time over its time on, × the process's progress correction.
/// Also says which rule made it.
fn estimate_by(
    n: u64,
    thread: Option<&Rare>,
    process: Option<&Rare>,
    steps: Option<(&Steps, u64)>,
    progress: Option<&Progress>,
    by_time: f64,
) -> (f64, Rule) {
    // Rare calls that do not keep pace with the sampled ones (a burst of
    // allocations while off, a thread that only synchronises while on) say
    // nothing of them: a ratio more than twice or less than half of time's
    // is not taken.
    let paced = |r: f64| (by_time / 2.0..=by_time * 2.0).contains(&r);
    let ratio = thread
        .and_then(Rare::ratio)
        .filter(|r| paced(*r))
        .or_else(|| process.and_then(Rare::ratio).filter(|r| paced(*r)));
    if let Some(r) = ratio {
        return (n as f64 * r, Rule::RareCalls);
    }
    if let Some((s, between)) = steps {
        let e = s.estimate(between);
        if n > 0 && between > 0 && paced(e / n as f64) {
            return (e, Rule::Steps);
        }
    }
    let scale = match progress {
        Some(g) if g.on >= MIN_RARE_ON && g.by_time > 0.0 => by_time * g.total as f64 / g.by_time,
        _ => by_time,
    };
    (n as f64 * scale, Rule::Time)
}

/// Each process's rates: the sums of its threads'. A process's probes cost
/// it their time summed over its threads: the threads that issue a step's
/// work (PyTorch's main thread for the forward pass, its autograd thread
/// for the backward) take turns, so their costs add up on the step's path.
fn per_process(rates: &HashMap<(u32, u32), Rates>) -> HashMap<u32, Rates> {
    let mut out: HashMap<u32, Rates> = HashMap::new();
    for (&(pid, _), r) in rates {
        let p = out.entry(pid).or_default();
        p.hot += r.hot;
        p.rare += r.rare;
        p.hot_e += r.hot_e;
        p.hot_er += r.hot_er;
        p.rare_er += r.rare_er;
    }
    out
}

/// The mode for the next periods, from the mode `now` and each thread's
/// rates: the costliest that keeps every process (its threads' costs
/// added up) within `budget`. Going back to a costlier mode needs 20% of
/// headroom, and a duty ratio in force is kept while it is at most 10%
/// under the one the rates allow (never over it), so a rate at an edge
/// does not change the schedule every period.
fn choose(now: Mode, threads: &HashMap<(u32, u32), Rates>, budget: f64) -> Mode {
    let rates = per_process(threads);
    let worst = |f: fn(&Costs) -> f64| rates.values().map(|r| f(&r.costs())).fold(0.0, f64::max);
    let headroom = |costlier: bool| if costlier { 0.8 } else { 1.0 };
    if worst(|c| c.exact) <= budget * headroom(now != Mode::Exact) {
        return Mode::Exact;
    }
    if worst(|c| c.entry_only) <= budget * headroom(matches!(now, Mode::Duty(_))) {
        return Mode::EntryOnly;
    }
    let r = rates
        .values()
        .filter_map(|t| t.duty(budget))
        .fold(1.0, f64::min)
        .clamp(MIN_RATIO, 1.0);
    match now {
        // Small changes are not worth a change of schedule, but a share
        // over the budget's is never kept.
        Mode::Duty(old) if old <= r && r - old <= 0.1 * old => now,
        _ => Mode::Duty(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes of one thread each, calling functions whose first
    /// instruction is single-stepped: an entry probe costs 4 µs, with its
    /// return probe 5 µs.
    fn rates(processes: &[(f64, f64)]) -> HashMap<(u32, u32), Rates> {
        processes
            .iter()
            .enumerate()
            .map(|(i, &(hot, rare))| {
                let r = Rates {
                    hot,
                    rare,
                    hot_e: hot * 4e-6,
                    hot_er: hot * 5e-6,
                    rare_er: rare * 5e-6,
                };
                ((i as u32 + 1, 1), r)
            })
            .collect()
    }

    #[test]
    fn the_always_traced_calls_are_paid_from_the_budget() {
        // 30k samplable calls/s: 12% entry only. Alone, 1% leaves 1/12 of
        // each period; 1,000 other calls/s (0.5%) leave half of that.
        let alone = choose(Mode::Exact, &rates(&[(30_000.0, 0.0)]), 0.01);
        let with_rare = choose(Mode::Exact, &rates(&[(30_000.0, 1000.0)]), 0.01);
        match (alone, with_rare) {
            (Mode::Duty(a), Mode::Duty(b)) => {
                assert!((a - 1.0 / 12.0).abs() < 1e-9, "{a}");
                assert!((b - 0.5 / 12.0).abs() < 1e-9, "{b}");
            }
            other => panic!("{other:?}"),
        }
        // The other calls alone over the budget: the smallest share.
        assert_eq!(
            choose(Mode::Exact, &rates(&[(30_000.0, 3000.0)]), 0.01),
            Mode::Duty(MIN_RATIO)
        );
    }

    #[test]
    fn every_process_is_kept_within_the_budget() {
        // Process 1 calls more samplable APIs, process 2 makes more other
        // calls: process 2 bounds the share (0.2% left over 0.4% entry only).
        let m = choose(
            Mode::Exact,
            &rates(&[(2000.0, 0.0), (1000.0, 1600.0)]),
            0.01,
        );
        assert_eq!(m, Mode::Duty(0.5));
        // Both cheap enough for entry probes only, one not for returns.
        assert_eq!(
            choose(
                Mode::Exact,
                &rates(&[(2000.0, 100.0), (100.0, 100.0)]),
                0.01
            ),
            Mode::EntryOnly
        );
        assert_eq!(
            choose(Mode::Exact, &rates(&[(2000.0, 100.0)]), 0.02),
            Mode::Exact
        );
    }

    #[test]
    fn a_processs_threads_costs_add_up() {
        // Two threads of one process, each within the budget with return
        // probes (0.6%), together not (1.2%); entry only they are (0.96%).
        let one = rates(&[(1200.0, 0.0)])[&(1, 1)];
        let process: HashMap<_, _> = [((7, 1), one), ((7, 2), one)].into();
        assert_eq!(choose(Mode::Exact, &process, 0.01), Mode::EntryOnly);
        // The same threads in two processes: each process is within it.
        let apart: HashMap<_, _> = [((7, 1), one), ((8, 1), one)].into();
        assert_eq!(choose(Mode::Exact, &apart, 0.01), Mode::Exact);
        assert_eq!(per_process(&process)[&7].hot, 2400.0);
    }

    #[test]
    fn a_period_is_scaled_by_the_threads_rare_calls_else_the_processs_else_time() {
        let r = |all, on| Rare { all, on };
        // One call seen: the estimate is the scale.
        fn scale(t: Option<&Rare>, p: Option<&Rare>, g: Option<&Progress>, by_time: f64) -> f64 {
            estimate_by(1, t, p, None, g, by_time).0
        }
        let g = Progress {
            total: 1_000,
            on: 100,
            by_time: 800.0,
        };
        // The thread's own pace: 9,000 rare calls, 250 of them while on.
        assert_eq!(
            scale(Some(&r(9_000, 250)), Some(&r(9_000, 300)), Some(&g), 40.0),
            36.0
        );
        // Too few of the thread's while on: the process's.
        assert_eq!(
            scale(Some(&r(400, 49)), Some(&r(9_000, 300)), Some(&g), 40.0),
            30.0
        );
        assert_eq!(scale(None, Some(&r(2_250, 50)), None, 40.0), 45.0);
        // Neither: time, corrected by the progress once 20 came while on.
        assert_eq!(
            scale(Some(&r(40, 5)), Some(&r(60, 8)), Some(&g), 40.0),
            50.0
        );
        // A ratio far from time's (rare calls not keeping pace): the next.
        assert_eq!(
            scale(Some(&r(100_000, 50)), Some(&r(9_000, 300)), None, 40.0),
            30.0
        );
        assert_eq!(
            scale(Some(&r(100_000, 50)), Some(&r(90_000, 300)), None, 40.0),
            40.0
        );
        assert_eq!(scale(Some(&r(500, 50)), None, None, 40.0), 40.0);
        let young = Progress { on: 19, ..g };
        assert_eq!(scale(None, None, Some(&young), 40.0), 40.0);
        assert_eq!(scale(None, None, None, 40.0), 40.0);
    }

    #[test]
    fn whole_steps_seen_while_on_scale_a_bursty_thread() {
        const SYNC: u16 = 40;
        const FREE: u16 = 41;
        let none = |_| None;
        // A period of 1,000..2,000 (ms, as ns here), on 1,100..1,400: a
        // synchronisation every 100 (at 1,050, 1,150, ...), a free at
        // 1,120 and 1,380 (one step: fewer).
        let mut calls: Vec<(u64, u16)> = (0..10).map(|i| (1_050 + i * 100, SYNC)).collect();
        calls.extend([(1_120, FREE), (1_380, FREE), (2_050, SYNC)]);
        let on = [(1_100, 1_400)];
        let s = Steps::find(&calls, &on, 1_000, 2_000, none).unwrap();
        // 1,150, 1,250, 1,350: two whole steps, two calls in them; ten in
        // the period (2,050 is the next period's).
        assert_eq!(
            s,
            Steps {
                from: 1_150,
                to: 1_350,
                steps: 2,
                calls: 2,
                period: 10,
            }
        );
        // Bursts of 500 launches a step: 1,000 seen between them → 5,000
        // in the period, whatever else the slice held (1,200 seen).
        assert_eq!(
            estimate_by(1_200, None, None, Some((&s, 1_000)), None, 3.33),
            (5_000.0, Rule::Steps)
        );
        // Rare calls enough for their ratio: that first.
        let many = Rare { all: 900, on: 300 };
        assert_eq!(
            estimate_by(1_200, Some(&many), None, Some((&s, 1_000)), None, 3.33),
            (3_600.0, Rule::RareCalls)
        );
        // A span that does not keep pace (none seen in it, or an estimate
        // under half or over twice time's): time.
        assert_eq!(
            estimate_by(1_200, None, None, Some((&s, 0)), None, 3.0),
            (3_600.0, Rule::Time)
        );
        assert_eq!(
            estimate_by(100, None, None, Some((&s, 20)), None, 3.0),
            (300.0, Rule::Time)
        );
        // One call of each API while on: no span.
        let one = [(1_150, SYNC), (1_120, FREE)];
        assert_eq!(Steps::find(&one, &on, 1_000, 2_000, none), None);
        // Two of one API in different slices: no span either.
        let apart = [(1_150, SYNC), (1_650, SYNC)];
        let slices = [(1_100, 1_400), (1_600, 1_700)];
        assert_eq!(Steps::find(&apart, &slices, 1_000, 2_000, none), None);
        // Three together at the end of each step (1,090, 1,091, 1,092,
        // 1,190, ...): a step is from one group's first call to the
        // next's, three calls.
        let grouped: Vec<(u64, u16)> = (0..10)
            .flat_map(|i| (0..3).map(move |k| (1_090 + i * 100 + k, SYNC)))
            .collect();
        let early = [(1_000, 1_300)];
        let s = Steps::find(&grouped, &early, 1_000, 2_000, none).unwrap();
        let all = |s: &Steps| (s.from, s.to, s.steps, s.calls, s.period);
        assert_eq!(all(&s), (1_190, 1_290, 1, 3, 30));
        assert_eq!(s.estimate(500), 5_000.0);
        // Where the thread's last call before the period is known (the
        // previous period's group at 992), the period's first group
        // begins a step too.
        let s = Steps::find(&grouped, &early, 1_000, 2_000, |_| Some(992)).unwrap();
        assert_eq!((s.from, s.steps, s.calls), (1_090, 2, 6));
        // The probes' change at the period's start stalled the process:
        // the last call before it came 62 before the start and the
        // period's first at 1,010, a gap of 72, more than twice a step's
        // 30. Gaps across a change are not taken for the longest, so the
        // slice's steps are found.
        let stalled: Vec<(u64, u16)> = (0..33).map(|i| (1_010 + i * 30, SYNC)).collect();
        let late = [(1_112, 1_250)];
        let s = Steps::find(&stalled, &late, 1_000, 2_000, |_| Some(938)).unwrap();
        assert_eq!(all(&s), (1_130, 1_220, 3, 3, 33));
        // Where every gap spans a change, the longest of all is taken.
        assert_eq!(longest_gap(&[0, 10, 40], &[5, 20]), 30);
        assert_eq!(longest_gap(&[0, 10, 40], &[20]), 10);
    }

    #[test]
    fn the_in_place_ratio_sets_kernel_time_on_against_off_and_the_model() {
        let read = |on_ticks, off_ticks, modeled_s| InPlace {
            kernel: KernelTime {
                on_ticks,
                on_ns: 10_000_000_000,
                off_ticks,
                off_ns: 40_000_000_000,
            },
            modeled_s,
            prior: None,
        };
        // 10 s on: 1.2 s of kernel time; 40 s off: 0.8 s, so 0.2 s in 10 s
        // of it is not the sampled probes'. The model made 0.5 s of them:
        // 2×, read from 120 and 80 ticks, so known to √(120 + 80/16) ticks
        // (0.11 s); 1.645 of that above: 2.37×.
        let bound = (1.0 + 1.645 * 125f64.sqrt() / 100.0) / 0.5;
        assert!((read(120, 80, 0.5).ratio(100.0) - bound).abs() < 1e-12);
        // Ten times the ticks: nearer 2×.
        let more = read(1200, 800, 5.0).ratio(100.0);
        assert!(more > 2.0 && more < 2.13, "{more}");
        // Never below the measured figure, nor above 4×.
        assert_eq!(read(120, 80, 5.0).ratio(100.0), 1.0);
        assert_eq!(read(120, 80, 0.1).ratio(100.0), 4.0);
        // Too little read on: 1, or the ratio a budget before read here.
        assert_eq!(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1).ratio(100.0), 1.0);
        assert_eq!(InPlace::default().ratio(100.0), 1.0);
        let before = |r: InPlace| InPlace {
            prior: Some(1.5),
            ..r
        };
        assert_eq!(
            before(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1)).ratio(100.0),
            1.5
        );
        assert_eq!(
            before(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1)).read(100.0),
            None
        );
        assert!((before(read(120, 80, 0.5)).ratio(100.0) - bound).abs() < 1e-12);
    }

    #[test]
    fn rates_rise_at_once_and_fall_by_halves() {
        assert_eq!(smooth(2_000.0, 28_000.0), 28_000.0);
        assert_eq!(smooth(28_000.0, 2_000.0), 15_000.0);
        assert_eq!(smooth(15_000.0, 15_000.0), 15_000.0);
    }

    #[test]
    fn a_rate_at_an_edge_does_not_flip_the_mode() {
        // Exactly at the budget with returns: stays exact, but coming back
        // from entry-only needs 20% of headroom.
        let r = rates(&[(1000.0, 1000.0)]);
        assert_eq!(choose(Mode::Exact, &r, 0.01), Mode::Exact);
        assert_eq!(choose(Mode::EntryOnly, &r, 0.01), Mode::EntryOnly);
        // A duty ratio up to 10% under the one the rates allow (1/12) is
        // kept; one over it, or further under, is not.
        let r = rates(&[(30_000.0, 0.0)]);
        assert_eq!(choose(Mode::Duty(0.08), &r, 0.01), Mode::Duty(0.08));
        for old in [0.05, 0.085, 0.09] {
            match choose(Mode::Duty(old), &r, 0.01) {
                Mode::Duty(d) => assert!((d - 1.0 / 12.0).abs() < 1e-12, "{old}: {d}"),
                m => panic!("{m:?}"),
            }
        }
    }
}
