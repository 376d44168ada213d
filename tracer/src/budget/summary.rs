//! What `--overhead-budget` did, for the summary: the budget, the probe
//! hit cost, the share of time the sampled APIs were traced, and per
//! process and API the calls seen and estimated.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::model::sampling::SamplingReport;

/// (process, API) estimates read back, at most.
const MAX_ESTIMATES: usize = 1 << 15;
/// Periods remembered to count each once while reading (their records
/// come together); past it the set starts again.
const MAX_PERIODS_READ: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct SamplingSummary {
    pub budget_percent: f64,
    /// (entry, entry and return) ns per hit.
    pub hit_cost_ns: (f64, f64),
    /// How many times that the probes cost in place, as last read (1
    /// until enough was read; `None` from a timeline written before it
    /// was recorded).
    pub cost_ratio: Option<f64>,
    /// Some period was sampled: counts of the sampled APIs are estimates.
    pub sampled: bool,
    /// Some period had the sampled APIs' return probes off.
    pub entry_only: bool,
    /// Time the sampled APIs were traced, over the periods' time.
    traced_ns: f64,
    period_ns: f64,
    /// (pid, api) → (seen, estimated), as the last report had them.
    pub estimates: BTreeMap<(u32, &'static str), (u64, f64)>,
    /// Periods read back from a timeline (its records are per process).
    periods_read: std::collections::HashSet<u64>,
}

impl SamplingSummary {
    pub fn add(&mut self, r: &SamplingReport) {
        self.budget_percent = r.budget_percent;
        self.hit_cost_ns = (r.hit_cost.entry_ns, r.hit_cost.entry_return_ns);
        self.cost_ratio = Some(r.cost_ratio);
        let len = r.end_ns.saturating_sub(r.start_ns) as f64;
        self.period_ns += len;
        self.traced_ns += len * r.on_fraction;
        self.sampled |= !r.exact();
        self.entry_only |= !r.returns;
        for p in &r.processes {
            for a in &p.apis {
                self.estimates
                    .insert((p.pid, a.api), (a.observed, a.estimated));
            }
        }
    }

    /// A timeline's `sampling` record (one process, one sampled period),
    /// read back (`gputrace stats`). Estimates are kept
    /// for [`MAX_ESTIMATES`] (process, API) pairs at most (the summary
    /// shows at most 1,024 processes, each a few sampled APIs; a file that
    /// names more gets its calls shown as seen).
    pub fn add_record(&mut self, v: &Value) {
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        self.budget_percent = f("budget_percent").unwrap_or(self.budget_percent);
        if let Some(c) = v.get("hit_cost_ns") {
            self.hit_cost_ns = (
                c["entry"].as_f64().unwrap_or(0.0),
                c["entry_return"].as_f64().unwrap_or(0.0),
            );
        }
        self.cost_ratio = f("cost_ratio").or(self.cost_ratio);
        let on = f("on_fraction").unwrap_or(1.0);
        let returns = v.get("returns").and_then(Value::as_bool).unwrap_or(true);
        self.sampled |= on < 0.9999 || !returns;
        self.entry_only |= !returns;
        let ts = v.get("ts_ns").and_then(Value::as_u64).unwrap_or(0);
        // A period's records (one per process) come together: the set
        // needs only the recent ones.
        if self.periods_read.len() >= MAX_PERIODS_READ && !self.periods_read.contains(&ts) {
            self.periods_read.clear();
        }
        if self.periods_read.insert(ts) {
            let len = f("dur_ns").unwrap_or(0.0);
            self.period_ns += len;
            self.traced_ns += len * on;
        }
        let Some(pid) = v.get("pid").and_then(Value::as_u64) else {
            return;
        };
        if let Some(apis) = v.get("apis").and_then(Value::as_object) {
            for (name, a) in apis {
                let Some(api) = crate::catalogue::api_by_name(name) else {
                    continue;
                };
                let key = (pid as u32, api.name);
                let room =
                    self.estimates.len() < MAX_ESTIMATES || self.estimates.contains_key(&key);
                if let (Some(o), Some(e), true) =
                    (a["observed"].as_u64(), a["estimated"].as_f64(), room)
                {
                    self.estimates.insert(key, (o, e));
                }
            }
        }
    }

    /// The share of time the sampled APIs were traced (1 when exact).
    pub fn traced_share(&self) -> f64 {
        if !self.sampled || self.period_ns <= 0.0 {
            return 1.0;
        }
        (self.traced_ns / self.period_ns).min(1.0)
    }

    /// One line for the text summary.
    pub fn line(&self) -> String {
        if !self.sampled {
            return format!(
                "Overhead budget {}%: not exceeded, every call traced (a probe hit costs {:.0} ns, {:.0} ns with its return).",
                self.budget_percent, self.hit_cost_ns.0, self.hit_cost_ns.1
            );
        }
        format!(
            "Overhead budget {}%: launches, copies and sets on a stream, event records, stream waits and capture status queries were traced {:.1}% of the time{}; their counts (marked ~) are estimates (calls seen / share of time traced). Other calls were all traced. A probe hit costs {:.0} ns, {:.0} ns with its return{}.",
            self.budget_percent,
            self.traced_share() * 100.0,
            if self.entry_only {
                ", with entry probes only at times (no latency, no return code for those calls)"
            } else {
                ""
            },
            self.hit_cost_ns.0,
            self.hit_cost_ns.1,
            match self.cost_ratio {
                Some(k) if k > 1.0 => format!("; in place {k:.2}× that"),
                _ => String::new(),
            }
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "budget_percent": self.budget_percent,
            "sampled": self.sampled,
            "entry_only": self.entry_only,
            "traced_share": self.traced_share(),
            "probe_hit_cost_ns": {"entry": self.hit_cost_ns.0, "entry_return": self.hit_cost_ns.1},
            "probe_cost_ratio": self.cost_ratio,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_are_bounded() {
        let mut s = SamplingSummary::default();
        let n = MAX_ESTIMATES as u64 + 5;
        for pid in 0..n {
            s.add_record(
                &json!({"type": "sampling", "ts_ns": pid, "dur_ns": 10, "pid": pid,
                "on_fraction": 0.5, "apis": {"cuLaunchKernel": {"observed": 1, "estimated": 2.0}}}),
            );
        }
        assert_eq!(s.estimates.len(), MAX_ESTIMATES);
        assert!(s.periods_read.len() <= MAX_PERIODS_READ);
        // Every period counted once.
        assert_eq!(s.period_ns, 10.0 * n as f64);
        assert!((s.traced_share() - 0.5).abs() < 1e-9);
    }
}
