//! `--overhead-budget PCT`: keeps what the probes cost each traced thread
//! under PCT percent of its time, by sampling the busy APIs.
//!
//! The model: a probe hit costs the calling thread a fixed time (measured
//! at start, `probes::hitcost`: `e` for an entry probe, `er` for an entry
//! and a return probe). A thread that makes `n` calls of samplable APIs per
//! second while their probes are attached spends `n × er` of each second
//! in probes (`n × e` entry only): that share of its CPU time, which for a
//! thread that drives a GPU (it launches, then waits) is its slowdown. The
//! budget looks at the busiest thread of all traced processes, every
//! period of the schedule (`probes::sampler::PERIOD`), with its rate
//! smoothed over periods:
//!
//! 1. `n × er ≤ budget`: exact (entry and return probes);
//! 2. else `n × e ≤ budget`: entry probes only (counts exact, no latency
//!    nor return code for the sampled APIs);
//! 3. else entry probes attached for `r = budget / (n × e)` of each period.
//!
//! Going back to a costlier mode needs 20% of headroom, so a rate at the
//! edge does not flip the mode every period. Rare APIs
//! (allocations, frees, synchronisations, NCCL, graph construction,
//! names) are never sampled. The calls of each period are counted per
//! (process, thread, API) and settled when the period ends: estimated
//! calls = seen × period / time on.

use std::collections::{BTreeMap, HashMap};

use crate::events::enrich::Clock;
use crate::events::sampling::{ApiEstimate, ProcessSampling, SamplingReport};
use crate::probes::catalogue::Api;
use crate::probes::hitcost::HitCost;
use crate::probes::sampler::{Mode, Period, Sampler, MIN_RATIO};

/// A process's rare calls seen in sampled periods before its progress is
/// trusted as the scale of its sampled calls.
const MIN_RARE_ON: u64 = 20;

/// The calls of one API by one process.
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    /// Seen in periods traced in full.
    exact: u64,
    /// Seen in sampled periods.
    sampled: u64,
    /// Those, each weighted by its period's time over its time on: the
    /// estimate where the process's progress cannot be used.
    by_time: f64,
}

/// One process's progress: its rare calls (always traced) in sampled
/// periods, and how many of them came while the sampled probes were on.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    total: u64,
    on: u64,
}

/// Calls of the period under way.
#[derive(Default)]
struct Pending {
    /// (pid, tid, API id) → calls of samplable APIs.
    hot: HashMap<(u32, u32, u16), u64>,
    /// Entry times of each process's rare calls.
    rare: HashMap<u32, Vec<u64>>,
}

pub(super) struct Budget {
    /// The budget as a fraction (1% = 0.01).
    fraction: f64,
    cost: HitCost,
    pub(super) sampler: std::sync::Arc<Sampler>,
    clock: Clock,
    pending: Pending,
    /// (pid, API id) → calls.
    counts: HashMap<(u32, u16), Count>,
    progress: HashMap<u32, Progress>,
    /// Smoothed calls per second (while attached) of each thread.
    rates: HashMap<(u32, u32), f64>,
    /// A period was not exact: reports are sent from then on.
    sampled: bool,
    last: Option<Period>,
    verbose: bool,
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
        sampler: std::sync::Arc<Sampler>,
        clock: Clock,
        verbose: bool,
    ) -> Self {
        Self {
            fraction: percent / 100.0,
            cost,
            sampler,
            clock,
            pending: Pending::default(),
            counts: HashMap::new(),
            progress: HashMap::new(),
            rates: HashMap::new(),
            sampled: false,
            last: None,
            verbose,
        }
    }

    /// One call seen (`start_ns`: its entry, CLOCK_MONOTONIC). Calls are
    /// counted into the period under way; one drained just after its
    /// period ended counts into the next (cumulative estimates barely move).
    pub(super) fn observe(&mut self, api: &'static Api, pid: u32, tid: u32, start_ns: u64) {
        if api.samplable() {
            *self.pending.hot.entry((pid, tid, api.id)).or_default() += 1;
        } else {
            self.pending.rare.entry(pid).or_default().push(start_ns);
        }
    }

    /// Settles the periods the sampler has completed and decides the mode
    /// for the next ones; a report per period once sampling has begun.
    pub(super) fn refresh(&mut self, out: &mut Vec<SamplingReport>) {
        let (done, _) = self.sampler.take_periods();
        for p in done {
            self.settle(&p);
            self.decide();
            if self.sampled {
                out.push(self.report(&p));
            }
            self.last = Some(p);
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
        let off_s = p.end_ns.saturating_sub(p.start_ns).saturating_sub(p.on_ns) as f64 / 1e9;
        // Rare calls: the process's progress while on and in all.
        for (pid, times) in pending.rare {
            let (mut now, mut later) = (Vec::new(), Vec::new());
            for t in times {
                if t >= p.end_ns {
                    later.push(t);
                } else {
                    now.push(t);
                }
            }
            if !later.is_empty() {
                self.pending.rare.insert(pid, later);
            }
            if exact {
                continue;
            }
            let g = self.progress.entry(pid).or_default();
            g.total += now.len() as u64;
            g.on += now
                .iter()
                .filter(|t| p.on.iter().any(|(a, b)| **t >= *a && **t < *b))
                .count() as u64;
        }
        let mut per_thread: HashMap<(u32, u32), u64> = HashMap::new();
        for (&(pid, tid, _), n) in &pending.hot {
            *per_thread.entry((pid, tid)).or_default() += n;
        }
        for ((pid, _, api), n) in pending.hot {
            let c = self.counts.entry((pid, api)).or_default();
            if exact {
                c.exact += n;
                continue;
            }
            c.sampled += n;
            // Time: the calls seen, over the share of the period on.
            c.by_time += n as f64 * (on_s + off_s) / on_s.max(1e-9);
        }
        // Periods with almost no time on say little about rates.
        if on_s < 0.005 {
            return;
        }
        for r in self.rates.values_mut() {
            *r *= 0.5;
        }
        for (k, n) in per_thread {
            let new = n as f64 / on_s;
            self.rates
                .entry(k)
                .and_modify(|r| *r += 0.5 * new)
                .or_insert(new);
        }
        self.rates.retain(|_, r| *r > 1.0);
    }

    /// A process's estimated calls of one API.
    fn estimate(&self, pid: u32, c: &Count) -> f64 {
        if c.sampled == 0 {
            return c.exact as f64;
        }
        match self.progress.get(&pid) {
            Some(g) if g.on >= MIN_RARE_ON => {
                c.exact as f64 + c.sampled as f64 * g.total as f64 / g.on as f64
            }
            _ => c.exact as f64 + c.by_time,
        }
    }

    fn decide(&mut self) {
        let busiest = self.rates.values().copied().fold(0.0, f64::max);
        let full = busiest * self.cost.entry_return_ns * 1e-9;
        let entry = busiest * self.cost.entry_ns * 1e-9;
        let now = self.sampler.mode();
        let headroom = if now == Mode::Exact { 1.0 } else { 0.8 };
        let next = if full <= self.fraction * headroom {
            Mode::Exact
        } else if entry
            <= self.fraction
                * if matches!(now, Mode::Duty(_)) {
                    0.8
                } else {
                    1.0
                }
        {
            Mode::EntryOnly
        } else {
            let r = (self.fraction / entry).clamp(MIN_RATIO, 1.0);
            match now {
                // Small changes are not worth a change of schedule.
                Mode::Duty(old) if (old - r).abs() <= 0.1 * old => now,
                _ => Mode::Duty(r),
            }
        };
        if next != now {
            if self.verbose {
                eprintln!(
                    "gputrace: overhead budget {:.2}%: busiest thread {:.0} sampled calls/s, {:.2}% with return probes, {:.2}% entry only: {} ",
                    self.fraction * 100.0,
                    busiest,
                    full * 100.0,
                    entry * 100.0,
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
            let Some(api) = crate::probes::catalogue::api(u32::from(id)) else {
                continue;
            };
            by_pid.entry(pid).or_default().push(ApiEstimate {
                api: api.name,
                family: api.family,
                observed: c.exact + c.sampled,
                estimated: self.estimate(pid, c),
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
        }
    }

    /// A process gone: its counts are dropped (its last report is sent).
    pub(super) fn forget(&mut self, pid: u32) {
        self.counts.retain(|k, _| k.0 != pid);
        self.rates.retain(|k, _| k.0 != pid);
        self.progress.remove(&pid);
    }

    /// At the end: the period under way is closed and settled, and one
    /// last report sent (always, so every output can say whether the
    /// budget was exceeded).
    pub(super) fn finish(&mut self, out: &mut Vec<SamplingReport>) {
        self.sampler.close_now();
        self.refresh(out);
        let last = self.last.clone().unwrap_or(Period {
            start_ns: 0,
            end_ns: 0,
            on_ns: 0,
            on: Vec::new(),
            returns: true,
        });
        out.pop_if(|r| r.start_ns == self.clock.to_unix_ns(last.start_ns));
        out.push(self.report(&last));
    }

    /// The cost model's figures, for `--verbose` and the summary.
    pub(super) fn cost(&self) -> HitCost {
        self.cost
    }
}
