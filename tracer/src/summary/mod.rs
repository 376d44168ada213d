//! The end-of-trace summary, modelled on `nsys stats`: per process and in
//! total, an API table, kernels by name, copies by direction, allocations,
//! NCCL by operation and communicator, GEMMs by shape, collectives by
//! size, and events lost. The live run and `gputrace stats FILE` feed the
//! same [`Summary`] with the same calls.

mod api;
pub mod collectives;
pub mod enclosing;
pub mod gemm;
pub mod gpu;
pub(crate) mod histogram;
pub mod render;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::decode::memory::MemoryBook;
use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::capped::Capped;
use crate::model::capped::Overflow;
use crate::model::graph::Node;
use crate::model::types::Direction;
use crate::model::types::LostCounts;
use crate::model::types::NcclOp;
use crate::nccl::summary::NcclSummary;
use crate::stacks::sites::CallSites;

/// Programs a process ran kept for its summary, at most.
const MAX_EXECS: usize = 64;

pub use api::{ApiStats, EXACT_SAMPLES};

/// Distinct kernel names kept per process (and in the total); launches of
/// others are summed in one row and counted.
pub const MAX_KERNEL_NAMES: usize = 10_000;
/// (grid, block) configurations tallied per kernel name: past it the
/// rarest is replaced (the space-saving algorithm: a configuration run by
/// more than 1/32 of the kernel's launches is always among them).
pub const MAX_CONFIGS: usize = 32;
/// (operation, communicator) rows of NCCL calls kept per process.
pub const MAX_NCCL_ROWS: usize = 4096;
/// Communicators whose init is remembered per process (for the ranks of
/// their rows; past it, rows show what their calls said).
pub const MAX_COMMS: usize = 4096;
/// Processes summarised one by one; calls of processes past it are summed
/// in one "other processes" summary, and counted.
pub const MAX_PROCESSES: usize = 1024;

type Config = ([u32; 3], [u32; 3]);

#[derive(Clone, Debug, Default)]
pub struct KernelStats {
    /// Direct launches (captured ones excluded: they did not run).
    pub launches: u64,
    /// Runs as a node of an executable graph (one per graph launch).
    pub graph_launches: u64,
    configs: HashMap<Config, u64>,
}

impl KernelStats {
    /// Runs in all: direct and through graphs.
    pub fn runs(&self) -> u64 {
        self.launches + self.graph_launches
    }

    /// The most frequent (grid, block); ties go to the smallest.
    pub fn top_config(&self) -> Option<Config> {
        self.configs
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(k, _)| *k)
    }

    /// Counts `n` runs with a configuration.
    fn config(&mut self, cfg: Config, n: u64) {
        if let Some(c) = self.configs.get_mut(&cfg) {
            *c += n;
            return;
        }
        let mut base = 0;
        if self.configs.len() >= MAX_CONFIGS {
            let rarest = self
                .configs
                .iter()
                .min_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(k, v)| (*k, *v));
            if let Some((k, v)) = rarest {
                self.configs.remove(&k);
                base = v;
            }
        }
        self.configs.insert(cfg, base + n);
    }

    fn merge(&mut self, o: &KernelStats) {
        self.launches += o.launches;
        self.graph_launches += o.graph_launches;
        for (cfg, n) in &o.configs {
            self.config(*cfg, *n);
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct CopyStats {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// `cuGraphLaunch` calls that ran (not launched into a capture).
    pub launches: u64,
    /// Of those, launches of executable graphs whose nodes are not known.
    pub opaque: u64,
    /// Kernel nodes run through graph launches.
    pub kernels: u64,
    /// Launches, copies and graph launches recorded by a stream capture.
    pub captured: u64,
}

impl GraphStats {
    fn merge(&mut self, o: &GraphStats) {
        self.launches += o.launches;
        self.opaque += o.opaque;
        self.kernels += o.kernels;
        self.captured += o.captured;
    }
}

#[derive(Clone, Debug, Default)]
pub struct NcclStats {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    /// The communicator as its calls named it (id, this rank, the size).
    pub comm_id: Option<u64>,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
}

impl NcclStats {
    fn merge(&mut self, o: &NcclStats) {
        self.count += o.count;
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.total_ns = self.total_ns.saturating_add(o.total_ns);
        self.comm_id = self.comm_id.or(o.comm_id);
        self.rank = self.rank.or(o.rank);
        self.nranks = self.nranks.or(o.nranks);
    }
}

/// Everything summarised for one process.
#[derive(Clone, Debug, Default)]
pub struct ProcessSummary {
    pub pid: u32,
    pub comm: String,
    pub events: u64,
    pub apis: HashMap<&'static str, ApiStats>,
    /// Kernel name (`None` when it is not known) → launches.
    pub kernels: Capped<Option<Arc<str>>, KernelStats, MAX_KERNEL_NAMES>,
    pub copies: BTreeMap<Direction, CopyStats>,
    pub memory: MemoryBook,
    pub nccl: Capped<(NcclOp, u64), NcclStats, MAX_NCCL_ROWS>,
    /// Graphs: launches (run, not captured), launches whose contents are
    /// not known, and work recorded by captures (not run, not counted).
    pub graphs: GraphStats,
    /// Communicator → (nranks, rank) from comm init (at most
    /// [`MAX_COMMS`]).
    pub comms: HashMap<u64, (i64, Option<i64>)>,
    pub first_ts: u64,
    pub last_ts: u64,
    /// For the total: (live, peak) summed over processes.
    total_memory: Option<(u64, u64)>,
    /// This is the sum over processes, not one process.
    pub is_total: bool,
    /// Calls with a stack (`--stacks`) by API and call site.
    pub sites: CallSites,
    /// `--gpu-time`: what its GPU did (`None` without GPU records).
    pub gpu: Option<gpu::GpuProcess>,
    /// cuBLAS GEMMs by shape, with the kernels they launched.
    pub gemms: gemm::GemmBook,
    /// NCCL collectives by operation, datatype and size.
    pub collectives: collectives::CollBook,
    /// The programs it ran after the first (`execve`), in order: (when,
    /// Unix ns; the new program's name). `comm` is the first program's.
    pub execs: Vec<(u64, String)>,
}

impl ProcessSummary {
    /// The traced window: its first call or GPU work to its last.
    pub fn window_ns(&self) -> u64 {
        let (mut first, mut last) = (self.first_ts, self.last_ts);
        if let Some(g) = &self.gpu {
            if g.first_ns != 0 && (first == 0 || g.first_ns < first) {
                first = g.first_ns;
            }
            last = last.max(g.last_ns);
        }
        last.saturating_sub(first)
    }

    pub fn live_bytes(&self) -> u64 {
        self.total_memory.map_or(self.memory.in_use(), |m| m.0)
    }

    pub fn peak_bytes(&self) -> u64 {
        self.total_memory.map_or(self.memory.peak(), |m| m.1)
    }

    /// Adds one call (the summary and `top`'s per-second windows use this).
    pub fn record(&mut self, c: &Call) {
        if self.events == 0 || c.ts_ns < self.first_ts {
            self.first_ts = c.ts_ns;
        }
        // Saturating: a timeline read back may carry any numbers.
        self.last_ts = self
            .last_ts
            .max(c.ts_ns.saturating_add(c.dur_ns.unwrap_or(0)));
        self.events += 1;
        if self.comm.is_empty() {
            self.comm = c.comm.to_string();
        }
        self.apis
            .entry(c.api)
            .or_default()
            .record(c.dur_ns, c.failed());
        if let Some(stack) = &c.stack {
            self.sites.add(c.api, &stack.frames, c.dur_ns);
        }
        let ok = !c.failed();
        self.gemms.record(c);
        self.collectives.record(c, &self.comms);
        match &c.args {
            Args::Launch(l) if ok && l.captured.is_some() => self.graphs.captured += 1,
            Args::Memcpy(m) if ok && m.captured.is_some() => self.graphs.captured += 1,
            Args::Graph(g) if ok && g.captured.is_some() => self.graphs.captured += 1,
            Args::Launch(l) if ok => {
                let k = self.kernels.slot(&l.kernel);
                k.launches += 1;
                k.config((l.grid, l.block), 1);
            }
            Args::Graph(g) if ok => {
                self.graphs.launches += 1;
                let Some(contents) = &g.contents else {
                    self.graphs.opaque += 1;
                    return;
                };
                for node in &contents.nodes {
                    match node {
                        Node::Kernel(n) => {
                            self.graphs.kernels += 1;
                            let k = self.kernels.slot(&n.kernel);
                            k.graph_launches += 1;
                            k.config((n.grid, n.block), 1);
                        }
                        Node::Memcpy { bytes, direction } => self.graph_copy(*direction, *bytes),
                        Node::Memset { bytes } => self.graph_copy(Direction::Memset, *bytes),
                        _ => {}
                    }
                }
            }
            Args::Memcpy(m) if ok => {
                let s = self.copies.entry(m.direction).or_default();
                s.count += 1;
                s.bytes = s.bytes.saturating_add(m.bytes);
                s.total_ns = s.total_ns.saturating_add(c.dur_ns.unwrap_or(0));
            }
            Args::Nccl(n) if ok => {
                let s = self.nccl.slot(&(n.op, n.comm));
                s.count += 1;
                s.bytes = s.bytes.saturating_add(n.bytes().unwrap_or(0));
                s.total_ns = s.total_ns.saturating_add(c.dur_ns.unwrap_or(0));
                s.comm_id = n.ident.comm_id.or(s.comm_id);
                s.rank = n.ident.rank.or(s.rank);
                s.nranks = n.ident.nranks.or(s.nranks);
            }
            Args::CommInit {
                comm: Some(comm),
                nranks,
                rank,
                ..
            } if ok => self.comm_init(*comm, (*nranks, *rank)),
            args => {
                self.memory.apply(args, ok);
            }
        }
    }

    /// A communicator's init: its (nranks, rank), while there is room.
    fn comm_init(&mut self, comm: u64, ranks: (i64, Option<i64>)) {
        if self.comms.len() < MAX_COMMS || self.comms.contains_key(&comm) {
            self.comms.insert(comm, ranks);
        }
    }

    /// Kernel runs in all (those over the bound of names included).
    pub fn kernel_runs(&self) -> u64 {
        self.kernels.all_values().map(KernelStats::runs).sum()
    }

    /// A copy or memset run as a node of a graph (no host time of its own).
    fn graph_copy(&mut self, direction: Direction, bytes: u64) {
        let s = self.copies.entry(direction).or_default();
        s.count += 1;
        s.bytes = s.bytes.saturating_add(bytes);
    }

    /// Adds another summary's calls; memory in use is not merged (it is a
    /// state, not a count).
    pub fn merge(&mut self, o: &ProcessSummary) {
        if self.events == 0 || (o.events > 0 && o.first_ts < self.first_ts) {
            self.first_ts = o.first_ts;
        }
        self.last_ts = self.last_ts.max(o.last_ts);
        self.events += o.events;
        for (api, s) in &o.apis {
            self.apis.entry(api).or_default().merge(s);
        }
        self.kernels
            .merge(&o.kernels, KernelStats::runs, KernelStats::merge);
        for (d, s) in &o.copies {
            let mine = self.copies.entry(*d).or_default();
            mine.count += s.count;
            mine.bytes += s.bytes;
            mine.total_ns += s.total_ns;
        }
        self.nccl.merge(&o.nccl, |n| n.count, NcclStats::merge);
        for (k, v) in &o.comms {
            self.comm_init(*k, *v);
        }
        self.graphs.merge(&o.graphs);
        self.sites.merge(&o.sites);
        self.gemms.merge(&o.gemms);
        self.collectives.merge(&o.collectives);
        if let Some(g) = &o.gpu {
            self.gpu.get_or_insert_with(Default::default).merge(g);
        }
    }

    /// APIs sorted by total time, then calls, then name.
    pub fn api_rows(&self) -> Vec<(&'static str, &ApiStats)> {
        let mut rows: Vec<_> = self.apis.iter().map(|(n, s)| (*n, s)).collect();
        rows.sort_by(|a, b| {
            b.1.total_ns
                .cmp(&a.1.total_ns)
                .then(b.1.calls.cmp(&a.1.calls))
                .then(a.0.cmp(b.0))
        });
        rows
    }

    /// Kernels by runs, then name (at most [`MAX_KERNEL_NAMES`]; the
    /// rest are in `kernels.other()`).
    pub fn kernel_rows(&self) -> Vec<(&Option<Arc<str>>, &KernelStats)> {
        let mut rows: Vec<_> = self.kernels.rows().collect();
        rows.sort_by(|a, b| b.1.runs().cmp(&a.1.runs()).then(a.0.cmp(b.0)));
        rows
    }

    /// NCCL rows by (operation, communicator).
    pub fn nccl_rows(&self) -> Vec<(&(NcclOp, u64), &NcclStats)> {
        let mut rows: Vec<_> = self.nccl.rows().collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        rows
    }
}

/// The whole summary.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// The first [`MAX_PROCESSES`] processes.
    pub processes: BTreeMap<u32, ProcessSummary>,
    /// The calls of processes past [`MAX_PROCESSES`], summed.
    pub other_processes: Option<Box<ProcessSummary>>,
    /// Those processes (distinct PIDs) and their calls.
    pub processes_over: Overflow,
    /// API names read back that are not in the catalogue, past the
    /// reader's bound (`gputrace stats`): counted under one row.
    pub api_names_over: Overflow,
    pub lost: LostCounts,
    /// Lines that could not be read (from `stats FILE`).
    pub unreadable: u64,
    /// Across ranks: communicators, stalls.
    pub nccl: NcclSummary,
    /// `--overhead-budget`: what it did (`None` without one).
    pub sampling: Option<crate::budget::summary::SamplingSummary>,
}

impl Summary {
    /// A period of `--overhead-budget`'s schedule.
    pub fn sampling(&mut self, r: &crate::model::sampling::SamplingReport) {
        self.sampling.get_or_insert_with(Default::default).add(r);
        self.apply_estimates();
    }

    /// Puts the estimates of sampled APIs on the API rows: each process's
    /// count times its estimated over seen (the same calls in a live
    /// trace; a file of a rotated timeline may hold part of them).
    pub fn apply_estimates(&mut self) {
        let Some(s) = &self.sampling else { return };
        if !s.sampled {
            return;
        }
        for (&(pid, api), &(seen, est)) in &s.estimates {
            let Some(a) = self
                .processes
                .get_mut(&pid)
                .and_then(|p| p.apis.get_mut(api))
            else {
                continue;
            };
            if seen > 0 {
                a.estimated = Some(a.calls as f64 * est / seen as f64);
            }
        }
    }

    pub fn record(&mut self, c: &Call) {
        self.nccl.record(c);
        self.process(c.pid).record(c);
    }

    /// `--gpu-time`: a piece of work a process's GPU ran.
    pub fn record_gpu(&mut self, w: &crate::model::gpu::GpuWork) {
        let p = self.process(w.pid);
        p.gemms.record_gpu(w);
        p.collectives.record_gpu(w);
        p.gpu.get_or_insert_with(Default::default).record(w);
    }

    /// `--gpu-time`: what a process's agent said.
    pub fn gpu_note(&mut self, n: &crate::model::gpu::GpuAgentNote) {
        self.process(n.pid)
            .gpu
            .get_or_insert_with(Default::default)
            .note(n);
    }

    /// A process began a new program named `comm` at `ts_ns`.
    pub fn exec(&mut self, pid: u32, ts_ns: u64, comm: &str) {
        let p = self.process(pid);
        // Bounded: a file read back may hold any number of them.
        if p.execs.len() < MAX_EXECS {
            p.execs.push((ts_ns, comm.to_string()));
        }
    }

    /// The summary of `pid`, or of the other processes once
    /// [`MAX_PROCESSES`] have one.
    fn process(&mut self, pid: u32) -> &mut ProcessSummary {
        if self.processes.len() < MAX_PROCESSES || self.processes.contains_key(&pid) {
            return self.processes.entry(pid).or_insert_with(|| ProcessSummary {
                pid,
                ..Default::default()
            });
        }
        self.processes_over.add(&pid);
        self.other_processes.get_or_insert_with(|| {
            Box::new(ProcessSummary {
                comm: "other processes".into(),
                ..Default::default()
            })
        })
    }

    /// Every process's summary, the other processes' last.
    pub fn all_processes(&self) -> impl Iterator<Item = &ProcessSummary> {
        self.processes
            .values()
            .chain(self.other_processes.as_deref())
    }

    pub fn events(&self) -> u64 {
        self.all_processes().map(|p| p.events).sum()
    }

    pub fn total(&self) -> ProcessSummary {
        let mut t = ProcessSummary {
            comm: "all".into(),
            ..Default::default()
        };
        t.is_total = true;
        for p in self.all_processes() {
            t.merge(p);
        }
        // Live and peak memory of the total are sums over processes.
        let live = self.all_processes().map(|p| p.live_bytes()).sum();
        let peak = self.all_processes().map(|p| p.peak_bytes()).sum();
        t.memory.allocations = self.all_processes().map(|p| p.memory.allocations).sum();
        t.memory.allocated_bytes = self.all_processes().map(|p| p.memory.allocated_bytes).sum();
        t.memory.frees = self.all_processes().map(|p| p.memory.frees).sum();
        t.total_memory = Some((live, peak));
        t
    }
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod bounds_tests;
