//! Settling a period of the budget's schedule, once, when it ends: the
//! rare calls counted per thread and process (and the whole steps a slice
//! held), the samplable calls seen while the probes were surely on, the
//! estimate of each (process, API), and the rates the next decision uses.

use std::collections::HashMap;

use crate::budget::estimate::{estimate_by, Pending, Rare, Steps};
use crate::budget::period::Period;
use crate::budget::rates::smooth;
use crate::budget::Budget;

/// What a period's rare calls tell.
#[derive(Default)]
struct RareSeen {
    /// (pid, tid) and pid → rare calls in all and while on.
    threads: HashMap<(u32, u32), Rare>,
    procs: HashMap<u32, Rare>,
    /// (pid, tid) → the period's rare calls' cost, in seconds.
    cost: HashMap<(u32, u32), f64>,
    /// (pid, tid) → whole steps seen while on.
    steps: HashMap<(u32, u32), Steps>,
}

/// (pid, tid, API) → calls seen while on, within the thread's whole steps,
/// and in all.
type Hot = HashMap<(u32, u32, u16), (u64, u64, u64)>;
/// (pid, tid) → calls, their cost with entry probes, with returns.
type PerThread = HashMap<(u32, u32), (u64, f64, f64)>;

impl Budget {
    pub(super) fn settle(&mut self, p: &Period) {
        let pending = std::mem::take(&mut self.pending);
        let exact = p.on_fraction() >= 0.9999;
        if !exact || !p.returns {
            self.sampled = true;
        }
        let on_s = p.on_ns as f64 / 1e9;
        let len_s = p.end_ns.saturating_sub(p.start_ns) as f64 / 1e9;
        let off_s = (len_s - on_s).max(0.0);
        self.sampler
            .mark_called(pending.hot.keys().map(|&(_, _, api)| u32::from(api)));
        let Pending { hot, rare } = pending;
        let rare = self.settle_rare(rare, p, exact);
        if !exact {
            for (&pid, r) in &rare.procs {
                let g = self.progress.entry(pid).or_default();
                g.total += r.all;
                g.on += r.on;
                g.by_time += r.on as f64 * len_s / on_s.max(1e-9);
            }
        }
        let hot = self.settle_hot(hot, p, exact, &rare.steps);
        let per_thread = self.per_thread(&hot);
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
        self.settle_estimates(hot, &rare, exact, (on_s + off_s) / on_s.max(1e-9));
        self.update_rates(&rare, per_thread, len_s, on_s);
    }

    /// Rare calls: each thread's and process's while on and in all; calls
    /// drained after the period's end wait for the next one.
    fn settle_rare(
        &mut self,
        pending: HashMap<(u32, u32), Vec<(u64, u16)>>,
        p: &Period,
        exact: bool,
    ) -> RareSeen {
        let is_on = |t: u64| p.on.iter().any(|(a, b)| t >= *a && t < *b);
        let mut seen = RareSeen::default();
        for (k, calls) in pending {
            if !exact {
                let before = |api| self.last_rare.get(&(k.0, k.1, api)).copied();
                if let Some(s) = Steps::find(&calls, &p.on, p.start_ns, p.end_ns, before) {
                    seen.steps.insert(k, s);
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
                    *seen.cost.entry(k).or_default() += self.seconds(api).1;
                }
            }
            if !later.is_empty() {
                self.pending.rare.insert(k, later);
            }
            let g = seen.procs.entry(k.0).or_default();
            g.all += r.all;
            g.on += r.on;
            seen.threads.insert(k, r);
        }
        seen
    }

    /// Samplable calls: those made while the probes were surely on.
    /// Probes fire while they are being attached and detached too (a
    /// detach can take a few hundred ms), outside the time counted on:
    /// such calls are seen, not counted into the estimate. Calls drained
    /// after the period's end count into the next one.
    /// The calls seen all count as observed, as the summary counts
    /// them: its rows scale the calls it saw by estimated over
    /// observed, and a slice's attach and detach often see a burst.
    fn settle_hot(
        &mut self,
        pending: HashMap<(u32, u32, u16), Vec<u64>>,
        p: &Period,
        exact: bool,
        steps: &HashMap<(u32, u32), Steps>,
    ) -> Hot {
        let is_on = |t: u64| p.on.iter().any(|(a, b)| t >= *a && t < *b);
        let mut hot = Hot::new();
        for (k, times) in pending {
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
        hot
    }

    /// Each thread's samplable calls seen on, and what they cost.
    fn per_thread(&self, hot: &Hot) -> PerThread {
        let mut per_thread = PerThread::new();
        for (&(pid, tid, api), &(n, _, _)) in hot {
            let (e, er) = self.seconds(api);
            let t = per_thread.entry((pid, tid)).or_default();
            t.0 += n;
            t.1 += n as f64 * e;
            t.2 += n as f64 * er;
        }
        per_thread
    }

    /// The estimate of each (process, API) from the calls seen on.
    fn settle_estimates(&mut self, hot: Hot, rare: &RareSeen, exact: bool, by_time: f64) {
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
                rare.threads.get(&(pid, tid)),
                rare.procs.get(&pid),
                rare.steps.get(&(pid, tid)).map(|s| (s, between)),
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
    }

    /// Rates (`smooth`): rare calls are always traced, their rate is over
    /// the whole period. Periods with almost no time on say little about
    /// the samplable ones.
    fn update_rates(&mut self, rare: &RareSeen, mut per_thread: PerThread, len_s: f64, on_s: f64) {
        if len_s > 0.0 {
            let mut seen: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
            for (k, r) in &rare.threads {
                let cost = rare.cost.get(k).copied().unwrap_or(0.0);
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
}
