//! Settling a period of the budget's schedule, once, when it ends: the
//! rare calls counted per thread and process (and the whole steps a slice
//! held), the samplable calls seen while the probes were surely on, the
//! estimate of each (process, API), and the rates the next decision uses.

use std::collections::HashMap;

use crate::budget::estimate::{estimate_by, Pending, Rare, Rule, Steps};
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

/// The part of a period a process lived in and when its calls were traced:
/// the shared on slices, and its own slice where it was new
/// (`sampler::welcome`). A process that began or ended inside the period
/// lived only part of it, and that part is what its calls seen scale to.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) on: Vec<(u64, u64)>,
    /// It had a slice of its own in the period.
    pub(super) own: bool,
}

impl Window {
    fn whole(p: &Period) -> Self {
        Self {
            from: p.start_ns,
            to: p.end_ns,
            on: p.on.clone(),
            own: false,
        }
    }

    pub(super) fn is_on(&self, t: u64) -> bool {
        self.on.iter().any(|(a, b)| t >= *a && t < *b)
    }

    pub(super) fn on_s(&self) -> f64 {
        self.on
            .iter()
            .map(|(a, b)| b.saturating_sub(*a))
            .sum::<u64>() as f64
            / 1e9
    }

    pub(super) fn len_s(&self) -> f64 {
        self.to.saturating_sub(self.from) as f64 / 1e9
    }

    /// The calls of the window from those seen in each on interval
    /// (`per`): a short life changes pace (setting up, then launching), so
    /// each interval stands for the time from halfway to the one before to
    /// halfway to the one after, at its own rate: the mean of the rate seen
    /// and the rate with the probes' time (`cost` a call) taken out (see
    /// `Budget::settle`).
    pub(super) fn stratified(&self, per: &[u64], cost: f64) -> f64 {
        let last = self.on.len().saturating_sub(1);
        let mut total = 0.0;
        for (i, (&(a, b), &calls)) in self.on.iter().zip(per).enumerate() {
            let lo = if i == 0 {
                self.from
            } else {
                (self.on[i - 1].1 + a) / 2
            };
            let hi = if i == last {
                self.to
            } else {
                (b + self.on[i + 1].0) / 2
            };
            let len = b.saturating_sub(a) as f64 / 1e9;
            if len <= 0.0 {
                continue;
            }
            let calls = calls as f64;
            let rate = calls * pace(len, calls * cost);
            total += rate * hi.saturating_sub(lo) as f64 / 1e9;
        }
        total
    }

    /// The window's length over its time on.
    fn by_time(&self) -> f64 {
        self.len_s() / self.on_s().max(1e-9)
    }
}

/// Calls a second per call seen in `on_s` seconds of a new process's own
/// probes that took `probe_s` of them: the mean of the rate seen and the
/// rate with the probes' time taken out (at least 5% of the time left).
fn pace(on_s: f64, probe_s: f64) -> f64 {
    let unprobed = (on_s - probe_s).max(on_s * 0.05);
    (1.0 / on_s + 1.0 / unprobed) / 2.0
}

/// Each process's window of period `p` that differs from the whole period:
/// one that began in it (`first`: its first call seen), ended in it
/// (`exited`: when), or had a slice of its own. `last`: each process's
/// last call seen in the period (an exit is noticed up to a check later,
/// never before its last call).
pub(super) fn windows(
    p: &Period,
    first: &HashMap<u32, u64>,
    exited: &HashMap<u32, u64>,
    last: &HashMap<u32, u64>,
) -> HashMap<u32, Window> {
    let mut pids: Vec<u32> = p.welcomed.iter().map(|w| w.0).collect();
    pids.extend(
        first
            .iter()
            .filter(|(_, t)| **t > p.start_ns)
            .map(|(pid, _)| *pid),
    );
    pids.extend(exited.keys().copied());
    pids.sort_unstable();
    pids.dedup();
    let mut out = HashMap::new();
    for pid in pids {
        let from = first.get(&pid).copied().unwrap_or(0).max(p.start_ns);
        let to = exited
            .get(&pid)
            .map_or(p.end_ns, |&t| {
                t.max(last.get(&pid).copied().unwrap_or(0) + 1)
            })
            .min(p.end_ns);
        if from >= to {
            continue;
        }
        let clip = |&(a, b): &(u64, u64)| {
            let (a, b) = (a.max(from), b.min(to));
            (a < b).then_some((a, b))
        };
        let mut on: Vec<(u64, u64)> = p.on.iter().filter_map(clip).collect();
        let own: Vec<(u64, u64)> = p
            .welcomed
            .iter()
            .filter(|w| w.0 == pid)
            .filter_map(|w| clip(&(w.1, w.2)))
            .collect();
        let is_own = !own.is_empty();
        on.extend(own);
        on.sort_unstable();
        out.insert(
            pid,
            Window {
                from,
                to,
                on,
                own: is_own,
            },
        );
    }
    out
}

impl Budget {
    pub(super) fn settle(&mut self, p: &Period) {
        let pending = std::mem::take(&mut self.pending);
        let exact = p.on_fraction() >= 0.9999;
        if !exact || !p.returns {
            self.sampled = true;
        }
        let on_s = p.on_ns as f64 / 1e9;
        self.sampler
            .mark_called(pending.hot.keys().map(|&(_, _, api)| u32::from(api)));
        let Pending { hot, rare } = pending;
        let windows = self.windows_of(p, &hot, &rare);
        let whole = Window::whole(p);
        let window = |pid: u32| windows.get(&pid).unwrap_or(&whole);
        let rare = self.settle_rare(rare, p, exact, &window);
        if !exact {
            for (&pid, r) in &rare.procs {
                let g = self.progress.entry(pid).or_default();
                g.total += r.all;
                g.on += r.on;
                g.by_time += r.on as f64 * window(pid).by_time();
            }
        }
        let (hot, stratified) = self.settle_hot(hot, p, exact, &rare.steps, &window);
        let per_thread = self.per_thread(&hot);
        // The kernel time read while the probes were on and off, and what
        // the model makes of the calls seen on.
        let k = &p.kernel;
        if !exact && k.on_ns > 0 && k.off_ns > 0 && on_s > 0.0 {
            // (A new process's own slice is not in the kernel time read.)
            let modeled: f64 = per_thread
                .iter()
                .filter(|(k, _)| !window(k.0).own)
                .map(|(_, &(_, e, er))| if p.returns { er } else { e })
                .sum();
            self.in_place.modeled_s += modeled / on_s * (k.on_ns as f64 / 1e9);
            self.in_place.kernel += *k;
        }
        let ratio = self.cost_ratio();
        let by_time = |pid: u32, tid: u32| {
            let w = window(pid);
            if !w.own {
                return w.by_time();
            }
            // A new process's own slice: its calls there came slower than
            // in the rest of its life by as much as the probes' time (a
            // loop on the CPU), or not at all (one paced by the GPU). The
            // model tells that time (entry only) only roughly: where the
            // traps are cheap it overstates it (2× on the CPU VM). So the
            // rate is the mean of the rate seen and the rate with the
            // probes' time taken out, within half their difference
            // (docs/performance.md#short-processes-under-a-budget).
            let (on, len) = (w.on_s(), w.len_s());
            let spent = per_thread.get(&(pid, tid)).map_or(0.0, |t| t.1 * ratio);
            1.0 + (len - on).max(0.0) * pace(on.max(1e-9), spent)
        };
        self.settle_estimates(hot, &rare, exact, by_time, &stratified);
        self.update_rates(&rare, per_thread, &window);
        self.settle_gone();
    }

    /// The windows of the processes of the period's calls that began or
    /// ended in it or had a slice of their own.
    fn windows_of(
        &self,
        p: &Period,
        hot: &HashMap<(u32, u32, u16), Vec<u64>>,
        rare: &HashMap<(u32, u32), Vec<(u64, u16)>>,
    ) -> HashMap<u32, Window> {
        let mut last: HashMap<u32, u64> = HashMap::new();
        let mut note = |pid: u32, t: u64| {
            if t < p.end_ns {
                let l = last.entry(pid).or_default();
                *l = (*l).max(t);
            }
        };
        for (k, v) in hot {
            v.iter().for_each(|&t| note(k.0, t));
        }
        for (k, v) in rare {
            v.iter().for_each(|&(t, _)| note(k.0, t));
        }
        let exited: HashMap<u32, u64> = self.gone.iter().map(|(p, g)| (*p, g.exit_ns)).collect();
        windows(p, &self.first_seen, &exited, &last)
    }

    /// Processes found exited: the counts of their last periods are added
    /// to what they counted before and reported (once more each settle,
    /// for calls drained late), and after two settles they are dropped.
    fn settle_gone(&mut self) {
        let gone: Vec<u32> = self.gone.keys().copied().collect();
        for pid in gone {
            self.fold_gone(pid);
            if let Some(g) = self.gone.get_mut(&pid) {
                g.settles_left = g.settles_left.saturating_sub(1);
                if g.settles_left == 0 && !self.finishing {
                    self.gone.remove(&pid);
                    self.first_seen.remove(&pid);
                }
            }
        }
    }

    /// Rare calls: each thread's and process's while on and in all; calls
    /// drained after the period's end wait for the next one.
    fn settle_rare<'w>(
        &mut self,
        pending: HashMap<(u32, u32), Vec<(u64, u16)>>,
        p: &Period,
        exact: bool,
        window: &impl Fn(u32) -> &'w Window,
    ) -> RareSeen {
        let mut seen = RareSeen::default();
        for (k, calls) in pending {
            let w = window(k.0);
            let is_on = |t: u64| w.is_on(t);
            if !exact {
                let before = |api| self.last_rare.get(&(k.0, k.1, api)).copied();
                if let Some(s) = Steps::find(&calls, &w.on, w.from, w.to, before) {
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
    fn settle_hot<'w>(
        &mut self,
        pending: HashMap<(u32, u32, u16), Vec<u64>>,
        p: &Period,
        exact: bool,
        steps: &HashMap<(u32, u32), Steps>,
        window: &impl Fn(u32) -> &'w Window,
    ) -> (Hot, HashMap<(u32, u32, u16), f64>) {
        let mut hot = Hot::new();
        let mut stratified = HashMap::new();
        let ratio = self.cost_ratio();
        for (k, times) in pending {
            let w = window(k.0);
            let span = steps.get(&(k.0, k.1));
            let (mut n, mut between, mut seen, mut later) = (0, 0, 0, Vec::new());
            let mut per = vec![0u64; w.on.len()];
            for t in times {
                if t >= p.end_ns {
                    later.push(t);
                    continue;
                }
                seen += 1;
                let on = w.on.iter().position(|(a, b)| t >= *a && t < *b);
                if let Some(i) = on {
                    per[i] += 1;
                }
                if exact || on.is_some() {
                    n += 1;
                    between += u64::from(span.is_some_and(|s| t >= s.from && t < s.to));
                }
            }
            if !later.is_empty() {
                self.pending.hot.insert(k, later);
            }
            if w.own && !exact {
                stratified.insert(k, w.stratified(&per, self.seconds(k.2).0 * ratio));
            }
            hot.insert(k, (n, between, seen));
        }
        (hot, stratified)
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
    fn settle_estimates(
        &mut self,
        hot: Hot,
        rare: &RareSeen,
        exact: bool,
        by_time: impl Fn(u32, u32) -> f64,
        stratified: &HashMap<(u32, u32, u16), f64>,
    ) {
        for ((pid, tid, api), (n, between, seen)) in hot {
            let by_time = by_time(pid, tid);
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
            // A new process's own slices: each scaled over its part of
            // the process's life (`Window::stratified`).
            let estimate = match (rule, stratified.get(&(pid, tid, api))) {
                (Rule::Time, Some(&e)) => e,
                _ => estimate,
            };
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
    fn update_rates<'w>(
        &mut self,
        rare: &RareSeen,
        mut per_thread: PerThread,
        window: &impl Fn(u32) -> &'w Window,
    ) {
        let mut seen: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
        for (k, r) in &rare.threads {
            let len_s = window(k.0).len_s();
            if len_s > 0.0 {
                let cost = rare.cost.get(k).copied().unwrap_or(0.0);
                seen.insert(*k, (r.all as f64 / len_s, cost / len_s));
            }
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
        for (k, r) in self.rates.iter_mut() {
            let on_s = window(k.0).on_s();
            if on_s >= 0.005 {
                let (n, e, er) = per_thread.remove(k).unwrap_or_default();
                r.hot = smooth(r.hot, n as f64 / on_s);
                r.hot_e = smooth(r.hot_e, e / on_s);
                r.hot_er = smooth(r.hot_er, er / on_s);
            }
        }
        for (k, (n, e, er)) in per_thread {
            let on_s = window(k.0).on_s();
            if on_s >= 0.005 {
                let r = self.rates.entry(k).or_default();
                (r.hot, r.hot_e, r.hot_er) = (n as f64 / on_s, e / on_s, er / on_s);
            }
        }
        self.rates.retain(|_, r| r.hot + r.rare > 1.0);
    }
}
