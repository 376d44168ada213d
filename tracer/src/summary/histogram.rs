//! A log-linear latency histogram: exact below 64 ns, then 64 buckets per
//! power of two (relative error under 1.6%, quantiles reported at the bucket
//! middle). Mergeable, and small: it grows only to the largest value seen.

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // ≥ SUB_BITS
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) & (SUB - 1);
    ((shift as u64 + 1) * SUB + sub) as usize
}

/// The smallest and largest value of bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, i);
    }
    let shift = i / SUB - 1;
    let sub = i % SUB;
    let low = (SUB | sub) << shift;
    (low, low + (1u64 << shift) - 1)
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// The value at quantile `q` (0..=1), `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        // The rank of the q-th value, 1-based, as nearest-rank does.
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds(i);
                return Some(lo + (hi - lo) / 2);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values() {
        for v in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            123_456_789,
            u64::MAX / 3,
        ] {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && v <= hi, "{v} not in [{lo}, {hi}]");
            assert!((hi - lo) as f64 <= v as f64 / 60.0 + 1.0);
        }
    }

    #[test]
    fn quantiles_within_error() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        let med = h.quantile(0.5).unwrap() as f64;
        assert!((med - 500_000.0).abs() / 500_000.0 < 0.016, "{med}");
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.016, "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), None);
        let mut one = Histogram::default();
        one.record(42);
        assert_eq!(one.quantile(0.5), Some(42));
        let mut m = Histogram::default();
        m.merge(&h);
        m.merge(&one);
        assert_eq!(m.count(), 10_001);
    }
}
