//! Tables that a traced process (or a file read back) can grow, bounded:
//! a [`Capped`] table keeps its first `CAP` distinct keys; what comes for
//! any other key is summed in one `other` row, and [`Overflow`] counts
//! those entries and how many distinct keys they had (exactly up to
//! [`EXACT_KEYS`] of them, estimated past that with a HyperLogLog sketch
//! of 4 KiB, within about 2%). Nothing is dropped: totals over the rows
//! and `other` are the totals of everything added.

use std::hash::{Hash, Hasher};

use rustc_hash::FxHashMap as HashMap;
use rustc_hash::FxHashSet as HashSet;
use rustc_hash::FxHasher;

/// Distinct keys past the bound counted exactly (by their 64-bit hash).
pub const EXACT_KEYS: usize = 4096;
/// log2 of the sketch's registers.
const SKETCH_BITS: u32 = 12;
const REGISTERS: usize = 1 << SKETCH_BITS;

/// A key's 64-bit hash, well mixed (the sketch reads its bits).
fn hash_of<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    // splitmix64's finalizer: FxHash's low bits are weak.
    let mut z = h.finish().wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Clone, Debug)]
enum Keys {
    Exact(HashSet<u64>),
    Sketch(Box<[u8; REGISTERS]>),
}

impl Keys {
    fn add(&mut self, h: u64) {
        match self {
            Keys::Exact(set) => {
                set.insert(h);
                if set.len() > EXACT_KEYS {
                    let mut s = Box::new([0u8; REGISTERS]);
                    for &h in set.iter() {
                        sketch_add(&mut s, h);
                    }
                    *self = Keys::Sketch(s);
                }
            }
            Keys::Sketch(s) => sketch_add(s, h),
        }
    }

    fn count(&self) -> u64 {
        match self {
            Keys::Exact(set) => set.len() as u64,
            Keys::Sketch(s) => sketch_count(s),
        }
    }
}

fn sketch_add(s: &mut [u8; REGISTERS], h: u64) {
    let i = (h >> (64 - SKETCH_BITS)) as usize;
    let rest = h << SKETCH_BITS;
    let rank = (rest.leading_zeros() + 1).min(64 - SKETCH_BITS + 1) as u8;
    s[i] = s[i].max(rank);
}

/// HyperLogLog's estimate, with linear counting where it is small.
fn sketch_count(s: &[u8; REGISTERS]) -> u64 {
    let m = REGISTERS as f64;
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let sum: f64 = s.iter().map(|&r| 2f64.powi(-i32::from(r))).sum();
    let raw = alpha * m * m / sum;
    let zeros = s.iter().filter(|&&r| r == 0).count();
    let est = if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    };
    est.round() as u64
}

/// What fell over a table's bound: entries and distinct keys.
#[derive(Clone, Debug, Default)]
pub struct Overflow {
    /// Entries added under keys past the bound.
    pub entries: u64,
    keys: Option<Keys>,
}

impl Overflow {
    /// One entry under a key past the bound.
    pub fn add<K: Hash + ?Sized>(&mut self, key: &K) {
        self.add_n(key, 1);
    }

    /// `n` entries under a key past the bound.
    pub fn add_n<K: Hash + ?Sized>(&mut self, key: &K, n: u64) {
        self.entries += n;
        self.add_hash(hash_of(key));
    }

    fn add_hash(&mut self, h: u64) {
        self.keys
            .get_or_insert_with(|| Keys::Exact(HashSet::default()))
            .add(h);
    }

    /// Whether anything fell over the bound.
    pub fn is_empty(&self) -> bool {
        self.keys.is_none()
    }

    /// Distinct keys past the bound (estimated past [`EXACT_KEYS`]).
    pub fn keys(&self) -> u64 {
        self.keys.as_ref().map_or(0, Keys::count)
    }

    /// Whether [`Overflow::keys`] is exact.
    pub fn exact(&self) -> bool {
        !matches!(self.keys, Some(Keys::Sketch(_)))
    }

    /// "912,004" or "about 912,000": the distinct keys, as said.
    pub fn keys_text(&self) -> String {
        let n = self.keys();
        if self.exact() {
            crate::units::fmt_count(n)
        } else {
            format!("about {}", crate::units::fmt_count(n))
        }
    }

    /// Adds another table's overflow (the same keys are counted once).
    pub fn merge(&mut self, o: &Overflow) {
        self.entries += o.entries;
        match (&mut self.keys, &o.keys) {
            (_, None) => {}
            (None, Some(k)) => self.keys = Some(k.clone()),
            (Some(mine), Some(Keys::Exact(theirs))) => {
                for &h in theirs {
                    mine.add(h);
                }
            }
            (Some(mine), Some(Keys::Sketch(theirs))) => {
                let mut s = match mine {
                    Keys::Sketch(s) => std::mem::replace(s, Box::new([0u8; REGISTERS])),
                    Keys::Exact(set) => {
                        let mut s = Box::new([0u8; REGISTERS]);
                        for &h in set.iter() {
                            sketch_add(&mut s, h);
                        }
                        s
                    }
                };
                for (a, b) in s.iter_mut().zip(theirs.iter()) {
                    *a = (*a).max(*b);
                }
                *mine = Keys::Sketch(s);
            }
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "keys": self.keys(),
            "keys_exact": self.exact(),
            "entries": self.entries,
        })
    }
}

/// A table of at most `CAP` keys; the rest summed in `other`.
#[derive(Clone, Debug)]
pub struct Capped<K, V, const CAP: usize> {
    rows: HashMap<K, V>,
    other: V,
    over: Overflow,
}

impl<K, V: Default, const CAP: usize> Default for Capped<K, V, CAP> {
    fn default() -> Self {
        Self {
            rows: HashMap::default(),
            other: V::default(),
            over: Overflow::default(),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Default, const CAP: usize> Capped<K, V, CAP> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The row of `key`: its own while the table has room for it, else
    /// the `other` row (the entry is counted as over the bound).
    pub fn slot(&mut self, key: &K) -> &mut V {
        self.slot_n(key, 1)
    }

    /// As [`Capped::slot`], for `n` entries at once.
    pub fn slot_n(&mut self, key: &K, n: u64) -> &mut V {
        if self.rows.contains_key(key) {
            return self.rows.get_mut(key).expect("just found");
        }
        if self.rows.len() < CAP {
            return self.rows.entry(key.clone()).or_default();
        }
        self.over.add_n(key, n);
        &mut self.other
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.rows.get(key)
    }

    /// The kept rows, in no order.
    pub fn rows(&self) -> impl Iterator<Item = (&K, &V)> {
        self.rows.iter()
    }

    pub fn rows_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.rows.iter_mut()
    }

    /// Kept rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No row kept and nothing over the bound.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.over.is_empty()
    }

    /// The row of everything over the bound (`None` when nothing was).
    pub fn other(&self) -> Option<&V> {
        (!self.over.is_empty()).then_some(&self.other)
    }

    pub fn overflow(&self) -> &Overflow {
        &self.over
    }

    /// Every row's value, `other`'s last (for totals).
    pub fn all_values(&self) -> impl Iterator<Item = &V> {
        self.rows.values().chain(self.other())
    }

    /// Adds another table: its rows by key (over this one's bound they go
    /// to `other`), its `other` to `other`. `weight` says how many entries
    /// a row stands for (for the count over the bound); `add` sums rows.
    pub fn merge<const C: usize>(
        &mut self,
        o: &Capped<K, V, C>,
        weight: impl Fn(&V) -> u64,
        add: impl Fn(&mut V, &V),
    ) {
        for (k, v) in &o.rows {
            add(self.slot_n(k, weight(v)), v);
        }
        if !o.over.is_empty() {
            add(&mut self.other, &o.other);
            self.over.merge(&o.over);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_over_the_bound_go_to_other_and_are_counted() {
        let mut t: Capped<String, u64, 10> = Capped::new();
        for i in 0..15u64 {
            *t.slot(&format!("k{i}")) += i;
            *t.slot(&format!("k{i}")) += 1;
        }
        assert_eq!(t.len(), 10);
        assert_eq!(t.overflow().keys(), 5);
        assert!(t.overflow().exact());
        assert_eq!(t.overflow().entries, 10);
        let kept: u64 = t.rows().map(|(_, v)| *v).sum();
        let all: u64 = (0..15u64).map(|i| i + 1).sum();
        assert_eq!(kept + t.other().copied().unwrap(), all);
        assert_eq!(t.overflow().keys_text(), "5");
        assert_eq!(crate::units::fmt_count(912_004), "912,004");
        assert_eq!(crate::units::fmt_count(12), "12");
        assert_eq!(crate::units::fmt_count(1_000), "1,000");
    }

    #[test]
    fn nothing_over_the_bound_says_nothing() {
        let mut t: Capped<u32, u64, 10> = Capped::new();
        *t.slot(&1) += 1;
        assert!(t.other().is_none());
        assert!(t.overflow().is_empty());
        assert_eq!(t.overflow().keys(), 0);
    }

    #[test]
    fn many_keys_are_estimated_within_a_few_percent() {
        let mut o = Overflow::default();
        let n = 200_000u64;
        for i in 0..n {
            o.add(&i);
            o.add(&i);
        }
        assert!(!o.exact());
        assert_eq!(o.entries, 2 * n);
        let k = o.keys() as f64;
        assert!((k - n as f64).abs() / (n as f64) < 0.05, "{k}");
        assert!(o.keys_text().starts_with("about "), "{}", o.keys_text());
    }

    #[test]
    fn merging_counts_shared_keys_once() {
        let (mut a, mut b) = (Overflow::default(), Overflow::default());
        for i in 0..100u64 {
            a.add(&i);
            b.add(&(i + 50));
        }
        a.merge(&b);
        assert_eq!(a.keys(), 150);
        assert_eq!(a.entries, 200);
        // Sketches merge too.
        let (mut c, mut d) = (Overflow::default(), Overflow::default());
        for i in 0..20_000u64 {
            c.add(&i);
            d.add(&(i + 10_000));
        }
        c.merge(&d);
        let k = c.keys() as f64;
        assert!((k - 30_000.0).abs() / 30_000.0 < 0.05, "{k}");
        // An exact set merged with a sketch.
        let mut e = Overflow::default();
        e.add(&"x");
        e.merge(&c);
        assert!(!e.exact());
    }

    #[test]
    fn merged_tables_keep_the_bound_and_the_totals() {
        let mut a: Capped<u32, u64, 4> = Capped::new();
        let mut b: Capped<u32, u64, 4> = Capped::new();
        for k in 0..6 {
            *a.slot(&k) += 1;
            *b.slot(&(k + 3)) += 10;
        }
        let mut t: Capped<u32, u64, 4> = Capped::new();
        t.merge(&a, |v| *v, |m, v| *m += v);
        t.merge(&b, |v| *v, |m, v| *m += v);
        assert_eq!(t.len(), 4);
        let all: u64 = t.rows().map(|(_, v)| *v).sum::<u64>() + t.other().unwrap();
        assert_eq!(all, 6 + 60);
        // Keys 0..9 were seen; 4 kept.
        assert_eq!(t.overflow().keys(), 5);
    }
}
