//! Host-side latency statistics of one API (also the GPU time of a
//! kernel): count, exact mean/min/max/stddev, a histogram for quantiles,
//! and exact samples while there are few.

use crate::summary::histogram::Histogram;

/// Host-side latency statistics of one API.
#[derive(Clone, Debug, Default)]
pub struct ApiStats {
    pub calls: u64,
    pub failed: u64,
    /// Calls with a measured duration.
    pub timed: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    mean: f64,
    m2: f64,
    pub hist: Histogram,
    /// The durations themselves while there are few (exact medians for
    /// rare APIs); dropped past [`EXACT_SAMPLES`], the histogram goes on.
    samples: Option<Vec<u64>>,
    /// `--overhead-budget` sampled this API: the calls estimated.
    pub estimated: Option<f64>,
}

/// Up to this many calls an API's median is exact.
pub const EXACT_SAMPLES: usize = 1024;

impl ApiStats {
    pub(crate) fn record(&mut self, dur: Option<u64>, failed: bool) {
        self.calls += 1;
        self.failed += failed as u64;
        let Some(d) = dur else { return };
        self.timed += 1;
        self.total_ns = self.total_ns.saturating_add(d);
        self.min_ns = if self.timed == 1 {
            d
        } else {
            self.min_ns.min(d)
        };
        self.max_ns = self.max_ns.max(d);
        // Welford's running mean and variance.
        let x = d as f64;
        let delta = x - self.mean;
        self.mean += delta / self.timed as f64;
        self.m2 += delta * (x - self.mean);
        self.hist.record(d);
        self.keep_sample(d);
    }

    fn keep_sample(&mut self, d: u64) {
        if self.timed == 1 {
            self.samples = Some(Vec::new());
        }
        if let Some(s) = &mut self.samples {
            if s.len() < EXACT_SAMPLES {
                s.push(d);
            } else {
                self.samples = None;
            }
        }
    }

    pub(crate) fn merge(&mut self, o: &ApiStats) {
        if o.timed > 0 {
            self.samples = match (self.timed, self.samples.take(), &o.samples) {
                (0, _, theirs) => theirs.clone(),
                (_, Some(mut mine), Some(theirs)) if mine.len() + theirs.len() <= EXACT_SAMPLES => {
                    mine.extend_from_slice(theirs);
                    Some(mine)
                }
                _ => None,
            };
            let n = self.timed + o.timed;
            let delta = o.mean - self.mean;
            let mean = self.mean + delta * o.timed as f64 / n as f64;
            self.m2 += o.m2 + delta * delta * self.timed as f64 * o.timed as f64 / n as f64;
            self.mean = mean;
            self.min_ns = if self.timed == 0 {
                o.min_ns
            } else {
                self.min_ns.min(o.min_ns)
            };
            self.max_ns = self.max_ns.max(o.max_ns);
            self.timed = n;
            self.total_ns = self.total_ns.saturating_add(o.total_ns);
            self.hist.merge(&o.hist);
        }
        if self.estimated.is_some() || o.estimated.is_some() {
            let mine = self.estimated.unwrap_or(self.calls as f64);
            self.estimated = Some(mine + o.estimated.unwrap_or(o.calls as f64));
        }
        self.calls += o.calls;
        self.failed += o.failed;
    }

    /// The calls to show: the estimate where sampled.
    pub fn shown_calls(&self) -> u64 {
        self.estimated
            .map_or(self.calls, |e| (e.round() as u64).max(self.calls))
    }

    /// The median: exact while few calls were timed (the lower middle value
    /// of an even count, as the histogram's nearest rank does), else from the
    /// histogram, kept within the exact min and max.
    pub fn median_ns(&self) -> Option<u64> {
        if let Some(s) = self
            .samples
            .as_ref()
            .filter(|s| !s.is_empty() && s.len() as u64 == self.timed)
        {
            let mut v = s.clone();
            let mid = (v.len() - 1) / 2;
            return Some(*v.select_nth_unstable(mid).1);
        }
        self.hist
            .quantile(0.5)
            .map(|m| m.clamp(self.min_ns, self.max_ns))
    }

    pub fn avg_ns(&self) -> Option<f64> {
        (self.timed > 0).then_some(self.total_ns as f64 / self.timed as f64)
    }

    /// Sample standard deviation, as `nsys stats` reports it.
    pub fn stddev_ns(&self) -> Option<f64> {
        match self.timed {
            0 => None,
            1 => Some(0.0),
            n => Some((self.m2 / (n - 1) as f64).max(0.0).sqrt()),
        }
    }

    /// The 99th percentile, from the histogram, kept within min and max.
    pub fn p99_ns(&self) -> Option<u64> {
        self.hist
            .quantile(0.99)
            .map(|v| v.clamp(self.min_ns, self.max_ns))
    }

    /// `{"count","total_ns","avg_ns","med_ns","p99_ns","min_ns","max_ns","stddev_ns"}`
    /// of the timed calls (the summary's STATS: GPU kernels, copies, NCCL
    /// kernels, GEMMs and collectives).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "count": self.timed,
            "total_ns": self.total_ns,
            "avg_ns": self.avg_ns(),
            "med_ns": self.median_ns(),
            "p99_ns": self.p99_ns(),
            "min_ns": (self.timed > 0).then_some(self.min_ns),
            "max_ns": (self.timed > 0).then_some(self.max_ns),
            "stddev_ns": self.stddev_ns(),
        })
    }
}
