//! Series for the keys of a process that weigh the most (kernels by GPU
//! time, GEMM shapes by time), bounded.
//!
//! The first `TOP` keys of a process get a series at their first call (a
//! short job's few kernels or shapes are counted whole, with no ranking
//! to wait for). Past them, what a key does counts into an unexported
//! tally, and in the `other` series; every ten seconds the keys that
//! weighed more since the last ranking than the series that weighed the
//! least get a series of their own, up to `MAX`. Time counted before a key
//! got its series stays in `other`: no counter ever goes down, no series
//! is removed while the process lives.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::ops::{Add, Sub};
use std::time::{Duration, Instant};

/// Keys tallied for ranking, per process (past it, new keys only count in
/// `other`).
const MAX_TALLIED: usize = 4096;
pub(super) const RANK_EVERY: Duration = Duration::from_secs(10);

/// What keys are ranked by: ordered, summed, and differenced (what a
/// series added since the last ranking).
pub(super) trait Weight:
    Copy + Ord + Default + Add<Output = Self> + Sub<Output = Self>
{
}

impl<T: Copy + Ord + Default + Add<Output = T> + Sub<Output = T>> Weight for T {}

#[derive(Clone, Debug)]
pub(super) struct Ranked<K, V, W, const TOP: usize, const MAX: usize> {
    /// Keys with a series: its value, its weight, and its weight at the
    /// last ranking.
    series: BTreeMap<K, (V, W, W)>,
    other: V,
    /// What each key without a series weighed since the last ranking.
    tally: HashMap<K, W>,
    ranked_at: Option<Instant>,
}

impl<K, V: Default, W, const TOP: usize, const MAX: usize> Default for Ranked<K, V, W, TOP, MAX> {
    fn default() -> Self {
        Self {
            series: BTreeMap::new(),
            other: V::default(),
            tally: HashMap::new(),
            ranked_at: None,
        }
    }
}

impl<K: Ord + Hash + Clone, V: Default, W: Weight, const TOP: usize, const MAX: usize>
    Ranked<K, V, W, TOP, MAX>
{
    /// Where what `key` did, weighing `w`, counts: its series (made now
    /// while fewer than `TOP` exist), else `other` (and `key`'s tally, for
    /// the next ranking).
    pub(super) fn slot(&mut self, key: &K, w: W) -> &mut V {
        if !self.series.contains_key(key) && self.series.len() < TOP {
            self.tally.remove(key);
            self.series
                .insert(key.clone(), (V::default(), W::default(), W::default()));
        }
        if let Some(s) = self.series.get_mut(key) {
            s.1 = s.1 + w;
            return &mut s.0;
        }
        if self.tally.len() < MAX_TALLIED || self.tally.contains_key(key) {
            let t = self.tally.entry(key.clone()).or_default();
            *t = *t + w;
        }
        &mut self.other
    }

    /// Every ten seconds (called more often, it waits): the keys that
    /// weighed the most get series (past the first `TOP`, made at once).
    pub(super) fn rank(&mut self, now: Instant) {
        if self
            .ranked_at
            .is_some_and(|t| now.saturating_duration_since(t) < RANK_EVERY)
        {
            return;
        }
        self.ranked_at = Some(now);
        let mut ranked: Vec<(K, W)> = self.tally.drain().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        // What the least series added since the last ranking: past the
        // first TOP, a key must have done more than it (the tally holds
        // what each key without a series did since).
        let full = self.series.len() >= TOP;
        let least = self
            .series
            .values()
            .map(|(_, w, at)| *w - *at)
            .min()
            .unwrap_or_default();
        for (key, w) in ranked {
            let n = self.series.len();
            if n < TOP || (full && n < MAX && w > least) {
                // Its weight so far stays in `other`; the series counts on.
                self.series
                    .insert(key, (V::default(), W::default(), W::default()));
            }
        }
        for s in self.series.values_mut() {
            s.2 = s.1;
        }
    }

    /// The keys with a series, in order, and their values.
    pub(super) fn series(&self) -> impl Iterator<Item = (&K, &V)> {
        self.series.iter().map(|(k, s)| (k, &s.0))
    }

    pub(super) fn other(&self) -> &V {
        &self.other
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.series.len()
    }

    #[cfg(test)]
    pub(super) fn has(&self, key: &K) -> bool {
        self.series.contains_key(key)
    }
}
