//! The GPU's side of the summary (`--gpu-time`), in the shape of `nsys
//! stats`' `cuda_gpu_kern_sum` and `cuda_gpu_mem_time_sum`: GPU time per
//! kernel (time %, total, instances, avg, median, min, max, stddev),
//! copies and memsets by direction with GB/s, the share of the traced
//! window each device and stream was busy, how long work waited between
//! its launch and its start on the GPU, and the NCCL kernels' GPU time per
//! collective and rank.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::model::capped::Capped;
use crate::model::gpu::{AgentNote, GpuAgentNote, GpuOp, GpuWork};
use crate::model::types::Direction;
use crate::nccl::hash::format_comm_id;
use crate::summary::ApiStats;
use crate::units::{fmt_bytes, fmt_count, fmt_ns};

/// Distinct kernel names kept per process; the rest are summed in one row
/// (`other kernels`) and counted.
pub const MAX_KERNELS: usize = 4096;
/// NCCL (operation, communicator, rank) rows kept per process; the rest
/// are summed in one row and counted.
pub const MAX_NCCL: usize = 1024;
/// Busy intervals a device keeps open for merging with late records
/// (records come out of order across streams, within a few seconds).
const MAX_OPEN: usize = 1 << 16;
const SETTLE_NS: u64 = 10_000_000_000;

/// The time a device was busy: the union of its work's intervals.
#[derive(Clone, Debug, Default)]
pub struct Busy {
    settled_ns: u64,
    /// Disjoint intervals by start, merged as work comes.
    open: BTreeMap<u64, u64>,
    max_end: u64,
}

impl Busy {
    pub fn add(&mut self, start: u64, end: u64) {
        let (mut s, mut e) = (start, end.max(start));
        let overlapping: Vec<u64> = self
            .open
            .range(..=e)
            .rev()
            .take_while(|(_, &oe)| oe >= s)
            .map(|(&os, _)| os)
            .collect();
        for os in overlapping {
            if let Some(oe) = self.open.remove(&os) {
                s = s.min(os);
                e = e.max(oe);
            }
        }
        self.open.insert(s, e);
        self.max_end = self.max_end.max(e);
        // Intervals long behind the newest cannot be overlapped any more.
        while let Some((&os, &oe)) = self.open.iter().next() {
            if oe.saturating_add(SETTLE_NS) < self.max_end || self.open.len() > MAX_OPEN {
                self.open.remove(&os);
                self.settled_ns += oe - os;
            } else {
                break;
            }
        }
    }

    pub fn total_ns(&self) -> u64 {
        self.settled_ns + self.open.iter().map(|(s, e)| e - s).sum::<u64>()
    }
}

/// Copies or memsets of one direction.
#[derive(Clone, Debug, Default)]
pub struct GpuCopies {
    pub bytes: u64,
    pub time: ApiStats,
}

/// An NCCL kernel's collective: operation, communicator id, rank.
pub type NcclKey = (Option<&'static str>, Option<u64>, Option<u32>);

/// What one process's GPU did.
#[derive(Clone, Debug, Default)]
pub struct GpuProcess {
    /// GPU time by kernel name (`None`: not known); names past
    /// [`MAX_KERNELS`] summed in its `other` row.
    pub kernels: Capped<Option<Arc<str>>, ApiStats, MAX_KERNELS>,
    pub copies: BTreeMap<Direction, GpuCopies>,
    /// Busy time by (device, stream) (a stream runs one thing at a time).
    pub streams: BTreeMap<(u32, u32), u64>,
    pub devices: BTreeMap<u32, Busy>,
    /// From the call's start to the kernel's start on the GPU.
    pub queued: ApiStats,
    /// NCCL kernels' GPU time by (operation, communicator id, rank).
    pub nccl: Capped<NcclKey, ApiStats, MAX_NCCL>,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Work whose launching call CUPTI did not say.
    pub unjoined: u64,
    /// Work with CUPTI's record of its launching call, and of those, the
    /// work joined to the call the probes saw.
    pub with_launch: u64,
    pub joined_calls: u64,
    /// What the agent said last of itself, and its losses.
    pub agent: Option<AgentNote>,
    /// `--gpu-time-share`: (percent of each second, time CUPTI collected).
    pub sampled: Option<(u32, u64)>,
    pub lost: (u64, u64, u64),
}

impl GpuProcess {
    pub fn record(&mut self, w: &GpuWork) {
        let d = w.dur_ns();
        if self.first_ns == 0 || w.start_ns < self.first_ns {
            self.first_ns = w.start_ns;
        }
        self.last_ns = self.last_ns.max(w.end_ns);
        *self.streams.entry((w.device, w.stream)).or_default() += d;
        self.devices
            .entry(w.device)
            .or_default()
            .add(w.start_ns, w.end_ns);
        match &w.launch {
            None => self.unjoined += 1,
            Some(l) => {
                self.with_launch += 1;
                self.joined_calls += l.call.is_some() as u64;
            }
        }
        match &w.op {
            GpuOp::Kernel { name, .. } => {
                self.kernels.slot(name).record(Some(d), false);
                if let Some(q) = w.queued_ns() {
                    self.queued.record(Some(q), false);
                }
                if let Some(n) = w.launch.as_ref().and_then(|l| l.nccl.as_ref()) {
                    let key = (n.op, n.comm_id, n.rank);
                    self.nccl.slot(&key).record(Some(d), false);
                }
            }
            GpuOp::Memcpy {
                bytes, direction, ..
            } => self.copy(*direction, *bytes, d),
            GpuOp::Memset { bytes, .. } => self.copy(Direction::Memset, *bytes, d),
        }
    }

    fn copy(&mut self, direction: Direction, bytes: u64, d: u64) {
        let c = self.copies.entry(direction).or_default();
        c.bytes = c.bytes.saturating_add(bytes);
        c.time.record(Some(d), false);
    }

    pub fn note(&mut self, n: &GpuAgentNote) {
        match &n.what {
            AgentNote::Lost {
                ring_dropped,
                cupti_dropped,
                names_dropped,
            } => self.lost = (*ring_dropped, *cupti_dropped, *names_dropped),
            AgentNote::Sampled { percent, on_ns } => self.sampled = Some((*percent, *on_ns)),
            AgentNote::Detached { .. }
                if matches!(
                    self.agent,
                    Some(AgentNote::Refused { .. } | AgentNote::Stopped { .. })
                ) => {}
            other => self.agent = Some(other.clone()),
        }
    }

    pub fn merge(&mut self, o: &GpuProcess) {
        self.kernels.merge(&o.kernels, |s| s.calls, ApiStats::merge);
        for (d, c) in &o.copies {
            let m = self.copies.entry(*d).or_default();
            m.bytes = m.bytes.saturating_add(c.bytes);
            m.time.merge(&c.time);
        }
        self.queued.merge(&o.queued);
        self.nccl.merge(&o.nccl, |s| s.calls, ApiStats::merge);
        self.unjoined += o.unjoined;
        if let Some((p, on)) = o.sampled {
            let mine = self.sampled.map_or(0, |s| s.1);
            self.sampled = Some((p, mine.saturating_add(on)));
        }
        self.with_launch += o.with_launch;
        self.joined_calls += o.joined_calls;
        self.lost = (
            self.lost.0 + o.lost.0,
            self.lost.1 + o.lost.1,
            self.lost.2 + o.lost.2,
        );
        // Busy time is per process: the total says no share.
    }

    /// Why GPU time stopped mid-trace (`--gpu-time-share`: CUPTI taken by
    /// another tool between two windows), if it did.
    pub fn stopped(&self) -> Option<&str> {
        match &self.agent {
            Some(AgentNote::Stopped { why }) => Some(why),
            _ => None,
        }
    }

    /// GPU time of every kernel.
    pub fn kernel_ns(&self) -> u64 {
        self.kernels.all_values().map(|s| s.total_ns).sum::<u64>()
    }

    /// Kernels by GPU time, then name.
    pub fn kernel_rows(&self) -> Vec<(&Option<Arc<str>>, &ApiStats)> {
        let mut rows: Vec<_> = self.kernels.rows().collect();
        rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(b.0)));
        rows
    }

    /// NCCL kernels by (operation, communicator id, rank).
    pub fn nccl_rows(&self) -> Vec<(&NcclKey, &ApiStats)> {
        let mut rows: Vec<_> = self.nccl.rows().collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        rows
    }
}

/// `window_ns`: the traced window (the process's calls and GPU work).
pub fn render_text(out: &mut String, g: &GpuProcess, window_ns: u64, is_total: bool) {
    if let Some((pct, on)) = g.sampled {
        let _ = writeln!(
            out,
            "\nGPU time sampled (--gpu-time-share {pct}): CUPTI collected during {} ({pct}% of each second); the GPU tables count the work launched then",
            fmt_ns(on as f64)
        );
    }
    if let Some(why) = g.stopped() {
        let _ = writeln!(
            out,
            "GPU time stopped: CUPTI could not be had again after a sampled window ({why}); the GPU tables end there"
        );
    }
    render_kernels(out, g);
    render_copies(out, g);
    if !is_total {
        render_busy(out, g, observed_ns(g, window_ns));
    }
    render_queued(out, g);
    render_nccl(out, g);
    let untraced = g.with_launch.saturating_sub(g.joined_calls);
    if g.unjoined > 0 || untraced > 0 || g.lost != (0, 0, 0) {
        let _ = writeln!(
            out,
            "\nGPU records: {} without their launching call, {} whose call the probes did not see; not recorded: {} (agent's ring full), {} (dropped by CUPTI), {} kernel names",
            g.unjoined, untraced, g.lost.0, g.lost.1, g.lost.2
        );
    }
}

/// Kernels by GPU time, in the shape of `nsys stats`' `cuda_gpu_kern_sum`.
fn render_kernels(out: &mut String, g: &GpuProcess) {
    let all = g.kernel_ns().max(1) as f64;
    if !g.kernels.is_empty() {
        let _ = writeln!(out, "\nGPU kernels (time on the GPU):");
        let _ = writeln!(
            out,
            " {:>8}  {:>10}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  Name",
            "Time (%)", "Total Time", "Instances", "Avg", "Med", "Min", "Max", "StdDev"
        );
        let _ = writeln!(
            out,
            " {:->8}  {:->10}  {:->9}  {:->10}  {:->10}  {:->10}  {:->10}  {:->10}  {:-<4}",
            "", "", "", "", "", "", "", "", ""
        );
        let rows = g.kernel_rows();
        let mut line = |name: &str, s: &ApiStats| {
            let _ = writeln!(
                out,
                " {:>8.1}  {:>10}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {}",
                s.total_ns as f64 * 100.0 / all,
                fmt_ns(s.total_ns as f64),
                s.timed,
                fmt_ns(s.avg_ns().unwrap_or(0.0)),
                fmt_ns(s.median_ns().unwrap_or(0) as f64),
                fmt_ns(s.min_ns as f64),
                fmt_ns(s.max_ns as f64),
                fmt_ns(s.stddev_ns().unwrap_or(0.0)),
                name
            );
        };
        for (name, s) in &rows {
            line(
                &crate::text::printable(name.as_deref().unwrap_or("(name not known)")),
                s,
            );
        }
        if let Some(other) = g.kernels.other() {
            line(
                &format!(
                    "... and {} more kernel names (past the first {}), summed",
                    g.kernels.overflow().keys_text(),
                    fmt_count(MAX_KERNELS as u64)
                ),
                other,
            );
        }
    }
}

/// Copies and memsets by direction, with their GB/s.
fn render_copies(out: &mut String, g: &GpuProcess) {
    if !g.copies.is_empty() {
        let _ = writeln!(out, "\nGPU copies and memsets (time on the GPU):");
        let _ = writeln!(
            out,
            " {:>9}  {:>9}  {:>12}  {:>10}  {:>10}  {:>10}",
            "Direction", "Count", "Total Bytes", "GPU Time", "Avg", "GB/s"
        );
        for (d, c) in &g.copies {
            let gbps = c.bytes as f64 / c.time.total_ns.max(1) as f64;
            let _ = writeln!(
                out,
                " {:>9}  {:>9}  {:>12}  {:>10}  {:>10}  {:>10.2}",
                d.name(),
                c.time.timed,
                fmt_bytes(c.bytes as f64),
                fmt_ns(c.time.total_ns as f64),
                fmt_ns(c.time.avg_ns().unwrap_or(0.0)),
                gbps
            );
        }
    }
}

/// Each device's busy share of the window, and its streams'.
/// What busy shares are of: the traced window, or with
/// `--gpu-time-share` the time CUPTI collected in it.
fn observed_ns(g: &GpuProcess, window_ns: u64) -> u64 {
    match g.sampled {
        Some((_, on)) if on > 0 => on.min(window_ns),
        _ => window_ns,
    }
}

fn render_busy(out: &mut String, g: &GpuProcess, window_ns: u64) {
    if window_ns > 0 && !g.devices.is_empty() {
        let of = if g.sampled.is_some() {
            "the time sampled"
        } else {
            "the traced window"
        };
        let _ = writeln!(out, "\nGPU busy, of {of} ({}):", fmt_ns(window_ns as f64));
        for (dev, busy) in &g.devices {
            let streams: Vec<String> = g
                .streams
                .iter()
                .filter(|((d, _), _)| d == dev)
                .map(|((_, s), ns)| {
                    format!("stream {s} {:.1}%", *ns as f64 * 100.0 / window_ns as f64)
                })
                .collect();
            let _ = writeln!(
                out,
                " device {dev}: {:.1}% ({})",
                busy.total_ns() as f64 * 100.0 / window_ns as f64,
                streams.join(", ")
            );
        }
    }
}

/// The delay from a launch call to its work's start on the GPU.
fn render_queued(out: &mut String, g: &GpuProcess) {
    if g.queued.timed > 0 {
        let q = |p: f64| fmt_ns(g.queued.hist.quantile(p).unwrap_or(0) as f64);
        let p50 = g.queued.median_ns().unwrap_or(0);
        let _ = writeln!(
            out,
            "\nLaunch to GPU start: p50 {}, p90 {}, p99 {}, max {} ({})",
            fmt_ns(p50 as f64),
            q(0.9),
            q(0.99),
            fmt_ns(g.queued.max_ns as f64),
            if p50 < 50_000 {
                "work starts almost as soon as it is launched: the GPU waits for launches (launch-bound)"
            } else {
                "work waits in the queue: the GPU is the bottleneck (GPU-bound)"
            }
        );
    }
}

/// NCCL kernels' GPU time per collective, communicator and rank.
fn render_nccl(out: &mut String, g: &GpuProcess) {
    if !g.nccl.is_empty() {
        let _ = writeln!(out, "\nNCCL kernels (time on the GPU):");
        let _ = writeln!(
            out,
            " {:<14}  {:>18}  {:>5}  {:>9}  {:>10}  {:>10}  {:>10}",
            "Operation", "Comm ID", "Rank", "Kernels", "GPU Time", "Avg", "Max"
        );
        for ((op, comm, rank), s) in g.nccl_rows() {
            let _ = writeln!(
                out,
                " {:<14}  {:>18}  {:>5}  {:>9}  {:>10}  {:>10}  {:>10}",
                op.unwrap_or("(group)"),
                comm.map_or("-".into(), format_comm_id),
                rank.map_or("-".into(), |r| r.to_string()),
                s.timed,
                fmt_ns(s.total_ns as f64),
                fmt_ns(s.avg_ns().unwrap_or(0.0)),
                fmt_ns(s.max_ns as f64)
            );
        }
        if let Some(s) = g.nccl.other() {
            let _ = writeln!(
                out,
                " ... and {} more (operation, communicator, rank) rows (past the first {}), summed: {} kernels, {}",
                g.nccl.overflow().keys_text(),
                fmt_count(MAX_NCCL as u64),
                fmt_count(s.timed),
                fmt_ns(s.total_ns as f64)
            );
        }
    }
}

pub fn render_json(g: &GpuProcess, window_ns: u64) -> Value {
    let all = g.kernel_ns().max(1) as f64;
    let kernels: Vec<Value> = g
        .kernel_rows()
        .iter()
        .map(|(name, s)| {
            let mut v = s.to_json();
            v["name"] = name.as_deref().map_or(Value::Null, Value::from);
            v["time_pct"] = json!(s.total_ns as f64 * 100.0 / all);
            v
        })
        .collect();
    let copies: Vec<Value> = g
        .copies
        .iter()
        .map(|(d, c)| {
            let mut v = c.time.to_json();
            v["direction"] = Value::from(d.name());
            v["bytes"] = Value::from(c.bytes);
            v["gb_per_s"] = json!(c.bytes as f64 / c.time.total_ns.max(1) as f64);
            v
        })
        .collect();
    let observed = observed_ns(g, window_ns);
    let share = |ns: u64| (observed > 0).then(|| ns as f64 / observed as f64);
    let devices: Vec<Value> = g
        .devices
        .iter()
        .map(|(dev, b)| {
            let streams: Vec<Value> = g
                .streams
                .iter()
                .filter(|((d, _), _)| d == dev)
                .map(|((_, s), ns)| json!({"stream": s, "busy_ns": ns, "busy_share": share(*ns)}))
                .collect();
            json!({"device": dev, "busy_ns": b.total_ns(), "busy_share": share(b.total_ns()), "streams": streams})
        })
        .collect();
    let nccl: Vec<Value> = g
        .nccl_rows()
        .into_iter()
        .map(|((op, comm, rank), s)| {
            let mut v = s.to_json();
            v["op"] = op.map_or(Value::Null, Value::from);
            v["comm_id"] = comm.map_or(Value::Null, |c| Value::from(format_comm_id(c)));
            v["rank"] = rank.map_or(Value::Null, Value::from);
            v
        })
        .collect();
    let q = |p: f64| g.queued.hist.quantile(p);
    json!({
        "kernels": kernels,
        "other_kernels": g.kernels.other().map(|s| {
            let mut v = s.to_json();
            v["names"] = Value::from(g.kernels.overflow().keys());
            v["names_exact"] = Value::from(g.kernels.overflow().exact());
            v["time_pct"] = json!(s.total_ns as f64 * 100.0 / all);
            v
        }),
        "copies": copies,
        "window_ns": window_ns,
        "sampled": g.sampled.map(|(p, on)| json!({"percent": p, "on_ns": on})),
        "stopped": g.stopped(),
        "devices": devices,
        "queued_ns": {"p50": g.queued.median_ns(), "p90": q(0.9), "p99": q(0.99), "max": (g.queued.timed > 0).then_some(g.queued.max_ns)},
        "nccl": nccl,
        "nccl_other": g.nccl.other().map(|s| {
            let mut v = s.to_json();
            v["rows"] = Value::from(g.nccl.overflow().keys());
            v["rows_exact"] = Value::from(g.nccl.overflow().exact());
            v
        }),
        "unjoined": g.unjoined,
        "with_launch": g.with_launch,
        "joined_calls": g.joined_calls,
        "lost": {"ring": g.lost.0, "cupti": g.lost.1, "names": g.lost.2},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::gpu_kernel;
    use crate::model::gpu::{GpuLaunch, NcclLaunch};

    fn kernel(name: &str, comm_id: u64) -> GpuWork {
        let mut w = gpu_kernel(name, 1_000, 100);
        w.launch = Some(GpuLaunch {
            tid: 1,
            api: "cuLaunchKernel",
            api_start_ns: 900,
            call: None,
            nccl: Some(NcclLaunch {
                api: "ncclAllReduce",
                op: Some("AllReduce"),
                comm_id: Some(comm_id),
                rank: Some(0),
                seq: Some(1),
            }),
        });
        w
    }

    /// Kernel names and NCCL rows past the bounds: summed, counted, said
    /// (NCCL rows past theirs were dropped before).
    #[test]
    fn kernels_and_nccl_rows_past_the_bounds_are_summed_and_said() {
        let mut g = GpuProcess::default();
        let n = MAX_KERNELS + 9;
        for i in 0..n {
            g.record(&kernel(&format!("k{i}"), i as u64));
        }
        assert_eq!(g.kernels.len(), MAX_KERNELS);
        assert_eq!(g.kernels.overflow().keys(), 9);
        assert_eq!(g.kernel_ns(), 100 * n as u64);
        assert_eq!(g.nccl.len(), MAX_NCCL);
        let nccl: u64 = g.nccl.all_values().map(|s| s.timed).sum();
        assert_eq!(nccl, n as u64);
        let mut text = String::new();
        render_text(&mut text, &g, 1_000, false);
        assert!(text.contains("... and 9 more kernel names (past the first 4,096), summed"));
        let more = format!(
            "... and {} more (operation, communicator, rank) rows",
            fmt_count((n - MAX_NCCL) as u64)
        );
        assert!(text.contains(&more), "{more}");
        // Their launches' calls were not seen by the probes: said.
        assert!(text.contains(&format!(
            "0 without their launching call, {n} whose call the probes did not see"
        )));
        let j = render_json(&g, 1_000);
        assert_eq!(
            (j["with_launch"].as_u64(), j["joined_calls"].as_u64()),
            (Some(n as u64), Some(0))
        );
        assert_eq!(j["other_kernels"]["names"], 9);
        assert_eq!(j["other_kernels"]["count"], 9);
        assert_eq!(j["nccl_other"]["count"], (n - MAX_NCCL) as u64);
        // The total keeps the bounds.
        let mut t = GpuProcess::default();
        t.merge(&g);
        t.merge(&g);
        assert_eq!(t.kernels.len(), MAX_KERNELS);
        assert_eq!(t.kernels.overflow().keys(), 9);
        assert_eq!(t.kernel_ns(), 200 * n as u64);
    }

    #[test]
    fn busy_time_is_the_union_whatever_the_order() {
        let mut b = Busy::default();
        b.add(100, 200);
        b.add(150, 300);
        b.add(500, 600);
        b.add(0, 50);
        b.add(40, 120);
        assert_eq!(b.total_ns(), 300 + 100);
        // Far later work settles the old intervals without changing the sum.
        b.add(SETTLE_NS * 3, SETTLE_NS * 3 + 10);
        assert_eq!(b.total_ns(), 410);
        assert_eq!(b.open.len(), 1);
    }
}
