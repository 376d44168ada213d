//! Calls seen while sampling, turned into estimates of the calls made:
//! by the rare calls seen while on (per thread, else per process), by whole
//! steps (a bursty loop between two of its synchronisations), else by time.

use std::collections::{BTreeMap, HashMap};

/// A process's rare calls seen in sampled periods before its progress is
/// trusted as the scale of its sampled calls.
pub(super) const MIN_RARE_ON: u64 = 20;

/// A thread's (or process's) rare calls while on in one period before they
/// scale its sampled calls of that period.
pub(super) const MIN_RARE_ON_PERIOD: u64 = 50;

/// The calls of one API by one process.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Count {
    /// Seen in periods traced in full.
    pub(super) exact: u64,
    /// Seen in sampled periods.
    pub(super) sampled: u64,
    /// The calls made in the sampled periods, estimated period by period
    /// as each ends and never revised (so the exported counter only grows).
    pub(super) estimated: f64,
}

/// One process's progress: its rare calls (always traced) in sampled
/// periods, and how many of them came while the sampled probes were on.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Progress {
    pub(super) total: u64,
    pub(super) on: u64,
    /// Each period's rare calls while on, times its length over its time
    /// on: what `total` would be if time alone told the calls made.
    pub(super) by_time: f64,
}

/// One process's always-traced calls over the session, for `--verbose`
/// (kept after it exits, when its counts are dropped).
#[derive(Clone, Debug, Default)]
pub(super) struct RareTally {
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
    /// API id → calls.
    pub(super) calls: BTreeMap<u16, u64>,
}

/// Calls of the period under way.
#[derive(Default)]
pub(super) struct Pending {
    /// (pid, tid, API id) → calls of samplable APIs.
    pub(super) hot: HashMap<(u32, u32, u16), Vec<u64>>,
    /// (pid, tid) → entry times and API ids of rare calls.
    pub(super) rare: HashMap<(u32, u32), Vec<(u64, u16)>>,
}

/// Rare calls of one thread or process in one sampled period: in all, and
/// while the sampled probes were surely on.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Rare {
    pub(super) all: u64,
    pub(super) on: u64,
}

impl Rare {
    /// The period's calls per call seen while on, where enough rare calls
    /// came while on to tell it.
    pub(super) fn ratio(&self) -> Option<f64> {
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
pub(super) struct Steps {
    pub(super) from: u64,
    pub(super) to: u64,
    /// Steps in between.
    pub(super) steps: u64,
    /// The API's calls in between (`to` not included).
    pub(super) calls: u64,
    /// The API's calls in the period.
    pub(super) period: u64,
}

impl Steps {
    /// The span of a thread's rare calls of one period (`calls`: entry
    /// times and API ids) that holds the most steps (then the longest), if
    /// one holds a step. `before`: the thread's last call of an API before
    /// the period, if any.
    pub(super) fn find(
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
    pub(super) fn estimate(&self, between: u64) -> f64 {
        between as f64 * self.period as f64 / self.calls as f64
    }
}

/// The longest gap between two of `times` (sorted) that spans none of
/// `changes`, else the longest of all.
pub(super) fn longest_gap(times: &[u64], changes: &[u64]) -> u64 {
    let gaps = || times.windows(2).map(|w| (w[0], w[1]));
    let spans_none = |&(a, b): &(u64, u64)| !changes.iter().any(|&c| c > a && c <= b);
    gaps()
        .filter(spans_none)
        .map(|(a, b)| b - a)
        .max()
        .or_else(|| gaps().map(|(a, b)| b - a).max())
        .unwrap_or(0)
}

/// Which rule made an estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
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
pub(super) fn estimate_by(
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
