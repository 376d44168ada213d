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
