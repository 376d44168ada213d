//! Call rates per thread and process, smoothed over periods, and the mode
//! they allow: the costliest that keeps every process within the budget.

use std::collections::HashMap;

use crate::budget::period::Mode;
use crate::budget::sampler::MIN_RATIO;

/// A thread's smoothed rates: calls per second, and what they cost per
/// second (each call at the hit cost of its function's prologue class).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Rates {
    /// Samplable calls while their probes were on.
    pub(super) hot: f64,
    /// The others (always traced).
    pub(super) rare: f64,
    /// The samplable calls' cost with entry probes only, and with return
    /// probes too.
    pub(super) hot_e: f64,
    pub(super) hot_er: f64,
    /// The other calls' cost (entry and return probes).
    pub(super) rare_er: f64,
}

/// What the probes cost a thread (or a process) at its rates, as
/// fractions of its time (of one CPU's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Costs {
    pub(super) exact: f64,
    pub(super) entry_only: f64,
    /// Of the rare calls alone.
    pub(super) rare: f64,
}

impl Rates {
    pub(super) fn costs(&self) -> Costs {
        Costs {
            exact: self.hot_er + self.rare_er,
            entry_only: self.hot_e + self.rare_er,
            rare: self.rare_er,
        }
    }

    /// The share of each period the samplable probes can be on within
    /// `budget` (entry only); `None` without samplable calls.
    pub(super) fn duty(&self, budget: f64) -> Option<f64> {
        (self.hot_e > 0.0).then(|| (budget - self.rare_er) / self.hot_e)
    }
}

pub(super) fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Exact => "exact",
        Mode::EntryOnly => "entry-only",
        Mode::Duty(_) => "duty",
    }
}

/// A smoothed rate and a period's: a higher rate is taken at once (a job
/// speeding up, or the first periods, which see the probes being attached,
/// must not be paid for above the budget while the average catches up); a
/// lower one halves the gap (a pause of one period does not bring the
/// probes back on at full cost).
pub(super) fn smooth(old: f64, new: f64) -> f64 {
    if new >= old {
        new
    } else {
        0.5 * old + 0.5 * new
    }
}

/// Each process's rates: the sums of its threads'. A process's probes cost
/// it their time summed over its threads: the threads that issue a step's
/// work (PyTorch's main thread for the forward pass, its autograd thread
/// for the backward) take turns, so their costs add up on the step's path.
pub(super) fn per_process(rates: &HashMap<(u32, u32), Rates>) -> HashMap<u32, Rates> {
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
pub(super) fn choose(now: Mode, threads: &HashMap<(u32, u32), Rates>, budget: f64) -> Mode {
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
