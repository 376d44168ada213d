//! What `--overhead-budget` did in one period of its schedule: the share of
//! the period the sampled APIs' probes were attached, and per process the
//! calls of those APIs seen and estimated (since the start of the trace).

use serde::{Deserialize, Serialize};

use crate::model::types::Family;

/// One settled period of the sampling schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingReport {
    /// The period, Unix ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The share of it the sampled APIs' entry probes were attached.
    pub on_fraction: f64,
    /// Whether their return probes were attached too (latency and return
    /// codes measured); false: entry probes only.
    pub returns: bool,
    /// `exact`, `entry-only` or `duty`: what the schedule does now.
    pub mode: &'static str,
    /// Processes that called a sampled API, with their estimates.
    pub processes: Vec<ProcessSampling>,
    /// The budget asked for, in percent.
    pub budget_percent: f64,
    /// What a probe hit costs on this machine.
    pub hit_cost: crate::model::sampling::HitCost,
    /// How many times `hit_cost` the probes were read to cost in place
    /// (1 until enough was read; the budget charges hits at it).
    pub cost_ratio: f64,
}

impl SamplingReport {
    /// Whether the period was traced in full (counts and latencies exact).
    pub fn exact(&self) -> bool {
        self.returns && self.on_fraction >= 0.9999
    }
}

/// One process's calls of sampled APIs, since the start of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessSampling {
    pub pid: u32,
    pub apis: Vec<ApiEstimate>,
}

impl ProcessSampling {
    /// The families of its sampled APIs (each once).
    pub fn families(&self) -> Vec<Family> {
        let mut f: Vec<Family> = self.apis.iter().map(|a| a.family).collect();
        f.sort_by_key(|f| f.name());
        f.dedup();
        f
    }
}

/// The calls of one API by one process: seen, and estimated (each seen
/// call weighted by its period's length over the time its probes were on).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiEstimate {
    pub api: &'static str,
    pub family: Family,
    pub observed: u64,
    pub estimated: f64,
}

impl SamplingReport {
    /// The share of the period each family of `p`'s sampled APIs was
    /// traced (one schedule for all: the same figure, 1 when exact).
    pub fn ratio(&self) -> f64 {
        if self.exact() {
            1.0
        } else {
            self.on_fraction
        }
    }

    /// The estimates of every API, summed over processes.
    pub fn totals(&self) -> std::collections::BTreeMap<&'static str, (u64, f64)> {
        let mut t = std::collections::BTreeMap::new();
        for p in &self.processes {
            for a in &p.apis {
                let e: &mut (u64, f64) = t.entry(a.api).or_default();
                e.0 += a.observed;
                e.1 += a.estimated;
            }
        }
        t
    }

    /// The fields of a timeline `sampling` record of one process (the
    /// record's span is the period).
    pub fn record_fields(&self, p: &ProcessSampling) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::{json, Value};
        let mut f = serde_json::Map::new();
        f.insert("mode".into(), Value::from(self.mode));
        f.insert("on_fraction".into(), json!(self.on_fraction));
        f.insert("returns".into(), Value::from(self.returns));
        f.insert("budget_percent".into(), json!(self.budget_percent));
        f.insert(
            "hit_cost_ns".into(),
            json!({"entry": self.hit_cost.entry_ns, "entry_return": self.hit_cost.entry_return_ns}),
        );
        f.insert("cost_ratio".into(), json!(self.cost_ratio));
        let apis: serde_json::Map<String, Value> = p
            .apis
            .iter()
            .map(|a| {
                (
                    a.api.to_string(),
                    json!({"family": a.family.name(), "observed": a.observed, "estimated": a.estimated}),
                )
            })
            .collect();
        f.insert("apis".into(), Value::Object(apis));
        f
    }
}

/// Nanoseconds one traced call costs its thread, on a function whose
/// first instruction the kernel single-steps (`entry_ns`,
/// `entry_return_ns`) and on one whose first instruction it emulates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitCost {
    /// An entry probe only (what `:args` and sampled families pay).
    pub entry_ns: f64,
    /// An entry and a return probe.
    pub entry_return_ns: f64,
    /// The same on an emulated first instruction (absent from caches
    /// written before it was measured: such an entry is measured again).
    #[serde(default)]
    pub emulated_entry_ns: f64,
    #[serde(default)]
    pub emulated_entry_return_ns: f64,
}
