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

mod estimate;
pub(crate) mod hitcost;
mod in_place;
pub(crate) mod period;
mod rates;
pub(crate) mod sampler;
mod settle;
pub(crate) mod summary;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::budget::estimate::*;
use crate::budget::hitcost::InPlaceStore;
use crate::budget::in_place::*;
use crate::budget::period::Mode;
use crate::budget::period::Period;
use crate::budget::rates::*;
use crate::budget::sampler::Sampler;
use crate::catalogue::Api;
use crate::host::clock::Clock;
use crate::model::sampling::ApiEstimate;
use crate::model::sampling::HitCost;
use crate::model::sampling::ProcessSampling;
use crate::model::sampling::SamplingReport;
use crate::probes::symbols::Prologue;
use crate::probes::symbols::Prologues;

/// The counts a report carries: every live process's, and those of the
/// processes gone since the last report (but where a new process was given
/// a gone one's PID since: the new one's).
fn reported(
    counts: &HashMap<(u32, u16), Count>,
    departed: &HashMap<u32, Vec<(u16, Count)>>,
) -> Vec<((u32, u16), Count)> {
    let mut out: Vec<((u32, u16), Count)> = counts.iter().map(|(k, c)| (*k, *c)).collect();
    let live: std::collections::HashSet<u32> = counts.keys().map(|k| k.0).collect();
    for (pid, v) in departed {
        if !live.contains(pid) {
            out.extend(v.iter().map(|(id, c)| ((*pid, *id), *c)));
        }
    }
    out
}

/// Gone processes whose counts wait for the next report, at most.
const MAX_DEPARTED: usize = 4096;
/// Processes whose first call is kept (live ones and those gone, until
/// their last counts are reported), at most.
const MAX_PROCESSES: usize = 65_536;

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
    /// Processes gone since the last period settled, with their counts:
    /// the next report carries them once, with that period's share traced
    /// (a process that lived into a period the probes were mostly off for
    /// must not be reported as traced in full).
    departed: HashMap<u32, Vec<(u16, Count)>>,
    /// Each process's first call seen (CLOCK_MONOTONIC): where its life
    /// in a period begins (`settle::windows`).
    first_seen: HashMap<u32, u64>,
    /// Processes found exited, until their last counts are reported.
    gone: HashMap<u32, Gone>,
    /// The last report is being made: gone processes are kept for it.
    finishing: bool,
}

/// A process found exited.
#[derive(Debug, Default)]
struct Gone {
    /// When it exited (CLOCK_MONOTONIC, as told, see [`Budget::exited`]).
    exit_ns: u64,
    /// Settles before it is dropped.
    settles_left: u8,
    /// Its counts so far.
    totals: Vec<(u16, Count)>,
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
            departed: HashMap::new(),
            first_seen: HashMap::new(),
            gone: HashMap::new(),
            finishing: false,
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
        let known = self.first_seen.len();
        match self.first_seen.get_mut(&pid) {
            Some(t) => *t = (*t).min(start_ns),
            None if known < MAX_PROCESSES => {
                // A new process: a slice of its own where the shared
                // probes are off.
                self.first_seen.insert(pid, start_ns);
                self.sampler.welcome(pid);
            }
            // Too many processes known: no slices of its own, counted.
            None => self.sampler.welcome_missed(),
        }
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
            self.departed.clear();
            self.last = Some(p);
            if self.periods.is_multiple_of(KEEP_EVERY) {
                self.keep_ratio();
            }
        }
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
                crate::say!(
                    "overhead budget {:.2}%: costliest process {:.0} sampled calls/s and {:.0} other calls/s, {:.2}% with return probes, {:.2}% entry only ({:.2}% the other calls; hits cost {:.2}× the measured figure {}): {} ",
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
        // Gone processes: what the last settles added, and what they
        // counted before (until they are dropped).
        let mut departed = self.departed.clone();
        for (pid, g) in &self.gone {
            if !g.totals.is_empty() {
                departed.entry(*pid).or_insert_with(|| g.totals.clone());
            }
        }
        for ((pid, id), c) in reported(&self.counts, &departed) {
            let Some(api) = crate::catalogue::api(u32::from(id)) else {
                continue;
            };
            by_pid.entry(pid).or_default().push(ApiEstimate {
                api: api.name,
                family: api.family,
                observed: c.exact + c.sampled,
                estimated: Self::estimate(&c),
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

    /// A process found exited `ago_ns` ago at most (the check that
    /// noticed it runs every `ago_ns`): its life in the period ends about
    /// half of that ago, never before its last call seen.
    pub(super) fn exited(&mut self, pid: u32, ago_ns: u64) {
        if self.first_seen.contains_key(&pid) {
            self.mark_gone(pid, sampler::monotonic_ns().saturating_sub(ago_ns / 2));
        }
    }

    /// A process gone (said so, a grace after its exit): its counts are
    /// dropped; the next reports carry them, with the share of that
    /// period traced (the process may have called while the probes were
    /// off), and with those of calls that settle after this.
    pub(super) fn forget(&mut self, pid: u32) {
        if !self.gone.contains_key(&pid) && !self.mark_gone(pid, sampler::monotonic_ns()) {
            self.first_seen.remove(&pid);
        }
        self.fold_gone(pid);
    }

    /// Keeps `pid` as gone at `exit_ns`, for two settles; false where no
    /// more gone processes can be kept.
    fn mark_gone(&mut self, pid: u32, exit_ns: u64) -> bool {
        if self.gone.len() >= MAX_DEPARTED && !self.gone.contains_key(&pid) {
            return false;
        }
        let g = self.gone.entry(pid).or_default();
        g.exit_ns = exit_ns;
        g.settles_left = 2;
        true
    }

    /// Moves a gone process's counts into its totals, to be reported by
    /// the next report.
    fn fold_gone(&mut self, pid: u32) {
        let mine: Vec<(u16, Count)> = self
            .counts
            .iter()
            .filter(|(k, _)| k.0 == pid)
            .map(|(k, c)| (k.1, *c))
            .collect();
        self.counts.retain(|k, _| k.0 != pid);
        self.rates.retain(|k, _| k.0 != pid);
        self.last_rare.retain(|k, _| k.0 != pid);
        self.progress.remove(&pid);
        let Some(g) = self.gone.get_mut(&pid) else {
            return;
        };
        for (api, c) in mine {
            match g.totals.iter_mut().find(|(a, _)| *a == api) {
                Some((_, t)) => {
                    t.exact += c.exact;
                    t.sampled += c.sampled;
                    t.estimated += c.estimated;
                }
                None => g.totals.push((api, c)),
            }
        }
        if !g.totals.is_empty() {
            self.departed.insert(pid, g.totals.clone());
        }
    }

    /// At the end: the period under way is closed and settled, and one
    /// last report sent (always, so every output can say whether the
    /// budget was exceeded).
    pub(super) fn finish(&mut self, out: &mut Vec<SamplingReport>) {
        // The last report carries every gone process still kept.
        self.finishing = true;
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
            welcomed: Vec::new(),
        });
        out.pop_if(|r| r.start_ns == self.clock.to_unix_ns(last.start_ns));
        out.push(self.report(&last));
        if self.verbose {
            let a = self.sampler.activity();
            crate::say!(
                "overhead budget: {} periods, {} sampled probes attached or detached (attaching takes {:.1} ms, detaching {:.1} ms); {} on slices attached {:.1} of {} samplable probes on average",
                self.periods,
                a.changes,
                a.attach_ns as f64 / 1e6,
                a.detach_ns as f64 / 1e6,
                a.slices,
                a.slice_probes as f64 / a.slices.max(1) as f64,
                a.symbols
            );
            let (given, missed) = self.sampler.welcomes();
            crate::say!(
                "overhead budget: new processes traced while the shared probes were off, slices of their own: {given} (new processes left without: {missed})"
            );
            crate::say!(
                "overhead budget: estimates (per thread, API and sampled period) scaled by the thread's or process's rare calls: {}, by whole steps seen while on: {}, by time: {}",
                self.rules[Rule::RareCalls as usize],
                self.rules[Rule::Steps as usize],
                self.rules[Rule::Time as usize]
            );
            let k = &self.in_place.kernel;
            crate::say!(
                "overhead budget: in place, the traced processes spent {} clock ticks in the kernel over {:.1} s with the sampled probes on and {} over {:.1} s off; the model makes {:.3} s of the calls seen on: hits cost {:.2}× the measured figure {}",
                k.on_ticks,
                k.on_ns as f64 / 1e9,
                k.off_ticks,
                k.off_ns as f64 / 1e9,
                self.in_place.modeled_s,
                self.cost_ratio(),
                self.ratio_source()
            );
            crate::say!("overhead budget: {}", self.prologue_line());
            if let Some(line) = self.rare_line() {
                crate::say!("overhead budget: {line}");
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

#[cfg(test)]
mod tests;
