//! The daemon's metrics: what the calls add up to, per process, for
//! Prometheus (rendered by [`exposition`]).
//!
//! One label set per traced process (`pid`, `comm`, and `container_id` /
//! `pod_uid` where its cgroup shows them), read when the session saw the
//! process. Once the session says a process is gone, its series are kept
//! `--keep-exited` (so the last values are scraped), then dropped, which
//! keeps the number of series bounded on a busy node.

mod exposition;
mod gemm;
mod gpu;
mod nccl;
mod ranked;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use exposition::Cursor;

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::sink::Sink;
use crate::model::sink::Status;
use crate::model::types::Direction;
use crate::model::types::LostCounts;
use crate::model::types::NcclOp;
use crate::model::Container;
use crate::model::Event;
use crate::model::ProcessInfo;

pub(crate) use tracer_common::BUCKETS_NS;

#[derive(Clone, Debug, Default)]
struct ApiSeries {
    calls: u64,
    /// Per bucket (not cumulative); the last slot is +Inf.
    buckets: [u64; BUCKETS_NS.len() + 1],
    timed: u64,
    sum_ns: u128,
}

impl ApiSeries {
    fn record(&mut self, dur_ns: Option<u64>) {
        self.calls += 1;
        if let Some(d) = dur_ns {
            let i = BUCKETS_NS.partition_point(|b| *b < d);
            self.buckets[i] += 1;
            self.timed += 1;
            self.sum_ns += u128::from(d);
        }
    }

    /// Adds calls counted in the kernel (those timed in the same buckets).
    fn add(&mut self, c: &crate::model::CountedCalls) {
        self.calls += c.calls;
        self.timed += c.timed;
        self.sum_ns += u128::from(c.sum_ns);
        for (mine, theirs) in self.buckets.iter_mut().zip(c.buckets.iter()) {
            *mine += theirs;
        }
    }
}

/// The series of one process.
#[derive(Clone, Debug)]
struct ProcessSeries {
    /// `pid="…",comm="…"[,container_id="…"][,pod_uid="…"]`, rendered once.
    labels: String,
    apis: BTreeMap<&'static str, ApiSeries>,
    memcpy: BTreeMap<Direction, u64>,
    nccl: BTreeMap<NcclOp, u64>,
    device_bytes: u64,
    /// Kernels run as nodes of graph launches; `None` until it launched a
    /// graph (so processes without graphs have no such series).
    graph_kernels: Option<u64>,
    /// When the session said the process is gone.
    gone_at: Option<Instant>,
    /// `--overhead-budget`: estimated calls of its sampled APIs, and the
    /// share of time each family was traced (absent: exact).
    estimated: BTreeMap<&'static str, f64>,
    ratios: BTreeMap<&'static str, f64>,
    /// The end of the last period settled (Unix ns): the estimates count
    /// the calls made up to then.
    estimated_until_ns: Option<u64>,
    /// `--gpu-time`: what its GPU did (`None`: no GPU records).
    gpu: Option<gpu::GpuSeries>,
    /// cuBLAS GEMMs per shape (and the launches they may own).
    gemm: gemm::GemmSeries,
    /// Its container, for the series of a program it execs.
    container: Container,
}

impl ProcessSeries {
    fn new(pid: u32, comm: &str, container: &Container) -> Self {
        let mut labels = format!("pid=\"{pid}\",comm=\"");
        escape_into(&mut labels, comm);
        labels.push('"');
        for (name, value) in [
            ("container_id", &container.container_id),
            ("pod_uid", &container.pod_uid),
        ] {
            if let Some(v) = value {
                let _ = write!(labels, ",{name}=\"");
                escape_into(&mut labels, v);
                labels.push('"');
            }
        }
        Self {
            labels,
            apis: BTreeMap::new(),
            memcpy: BTreeMap::new(),
            nccl: BTreeMap::new(),
            device_bytes: 0,
            graph_kernels: None,
            gone_at: None,
            estimated: BTreeMap::new(),
            ratios: BTreeMap::new(),
            estimated_until_ns: None,
            gpu: None,
            gemm: gemm::GemmSeries::default(),
            container: container.clone(),
        }
    }
}

/// Writes a label value with `\`, `"` and newlines escaped.
pub(super) fn escape_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// What the tracer itself reports alongside the calls.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TracerGauges {
    pub probes: usize,
    pub library_files: usize,
    /// Processes whose decoding state (allocations, kernel names) is held.
    pub process_states: usize,
}

/// Every metric the daemon serves.
pub(crate) struct Metrics {
    /// Per (pid, program): a process that execs a new program starts new
    /// series under its new name (the old ones end like a gone process's).
    procs: BTreeMap<(u32, u32), ProcessSeries>,
    /// Each process's program now (0 until it execs), for those that did.
    programs: HashMap<u32, u32>,
    /// Processes seen, by PID, that have no series yet (or whose series
    /// are an earlier process's, gone since): their first call starts them.
    seen: HashMap<u32, ProcessInfo>,
    lost: LostCounts,
    gauges: TracerGauges,
    keep_exited: Duration,
    /// Per (communicator, rank), across processes.
    nccl: nccl::NcclMetrics,
    /// `--overhead-budget`: what a probe hit costs here.
    pub hit_cost: Option<crate::model::sampling::HitCost>,
    /// The budget's in-place ratio (`SamplingReport::cost_ratio`).
    pub cost_ratio: Option<f64>,
}

impl Metrics {
    /// `keep_exited`: how long the series of a gone process are kept.
    pub(crate) fn new(keep_exited: Duration) -> Self {
        Self {
            procs: BTreeMap::new(),
            programs: HashMap::new(),
            seen: HashMap::new(),
            lost: LostCounts::default(),
            gauges: TracerGauges::default(),
            keep_exited,
            nccl: nccl::NcclMetrics::default(),
            hit_cost: None,
            cost_ratio: None,
        }
    }

    /// A period of the `--overhead-budget` schedule: each process's
    /// estimates replace its counts of the sampled APIs, and its families'
    /// ratios are the period's.
    pub(crate) fn sampling(&mut self, r: &crate::model::sampling::SamplingReport) {
        self.hit_cost = Some(r.hit_cost);
        self.cost_ratio = Some(r.cost_ratio);
        for p in &r.processes {
            let key = self.key(p.pid);
            let Some(series) = self.procs.get_mut(&key) else {
                continue;
            };
            for a in &p.apis {
                series.estimated.insert(a.api, a.estimated);
            }
            series.estimated_until_ns = Some(r.end_ns);
            for f in p.families() {
                series.ratios.insert(f.name(), r.ratio());
            }
        }
    }

    /// A process the session saw: its series are labelled with what was
    /// read of it then (a short-lived process may be gone from /proc by
    /// the time its calls are counted).
    pub(crate) fn seen(&mut self, info: &ProcessInfo) {
        self.seen.insert(info.pid, info.clone());
    }

    /// The series of `pid`, begun at its first call (`comm`: the name
    /// its calls carry, where the session did not say who it is).
    fn series(&mut self, pid: u32, comm: &str) -> &mut ProcessSeries {
        let info = self.seen.remove(&pid);
        let fresh = || match &info {
            Some(i) => ProcessSeries::new(pid, &i.comm, &i.container),
            None => ProcessSeries::new(pid, comm, &Container::default()),
        };
        let key = self.key(pid);
        match self.procs.entry(key) {
            std::collections::btree_map::Entry::Vacant(v) => v.insert(fresh()),
            std::collections::btree_map::Entry::Occupied(o) => {
                let p = o.into_mut();
                // A new process was given a gone one's PID.
                if p.gone_at.is_some() && info.is_some() {
                    *p = fresh();
                }
                p
            }
        }
    }

    /// Adds calls counted in the kernel (`:counts`).
    pub(crate) fn counted(&mut self, c: &crate::model::CountedCalls) {
        let p = self.series(c.pid, &c.comm);
        p.apis.entry(c.api).or_default().add(c);
    }

    /// Counts one call.
    pub(crate) fn record(&mut self, c: &Call, device_bytes: Option<u64>) {
        let p = self.series(c.pid, &c.comm);
        p.apis.entry(c.api).or_default().record(c.dur_ns);
        if let Some(b) = device_bytes {
            p.device_bytes = b;
        }
        if c.failed() {
            return;
        }
        p.gemm.record(c);
        match &c.args {
            // Recorded by a stream capture: it did not run.
            Args::Memcpy(m) if m.captured.is_some() => {}
            Args::Graph(g) if g.captured.is_none() => {
                let n = g
                    .contents
                    .as_ref()
                    .map_or(0, |c| c.kernels().count() as u64);
                let k = p.graph_kernels.get_or_insert(0);
                *k = k.saturating_add(n);
            }
            Args::Memcpy(m) => {
                let b = p.memcpy.entry(m.direction).or_default();
                *b = b.saturating_add(m.bytes);
            }
            Args::Nccl(n) => {
                let b = p.nccl.entry(n.op).or_default();
                *b = b.saturating_add(n.bytes().unwrap_or(0));
                self.nccl.record(c);
            }
            _ => {}
        }
    }

    /// The session says `pid` is gone: its series stay `keep_exited` from
    /// `now`.
    pub(crate) fn gone(&mut self, pid: u32, now: Instant) {
        self.seen.remove(&pid);
        let key = self.key(pid);
        if let Some(p) = self.procs.get_mut(&key) {
            p.gone_at.get_or_insert(now);
        }
    }

    pub(crate) fn set_lost(&mut self, lost: LostCounts) {
        self.lost = lost;
    }

    pub(crate) fn set_gauges(&mut self, g: TracerGauges) {
        self.gauges = g;
    }

    /// `--gpu-time`: a piece of GPU work of a process (one with series:
    /// work comes after the calls that queued it).
    pub(crate) fn gpu(&mut self, w: &crate::model::gpu::GpuWork) {
        let key = self.key(w.pid);
        if let Some(p) = self.procs.get_mut(&key) {
            p.gpu.get_or_insert_with(Default::default).record(w);
            p.gemm.gpu(w);
        }
    }

    /// `--gpu-time-share`: how long a process's CUPTI collected, and
    /// whether its GPU time stopped (CUPTI taken between two windows).
    pub(crate) fn gpu_note(&mut self, n: &crate::model::gpu::GpuAgentNote) {
        use crate::model::gpu::AgentNote;
        if !matches!(
            n.what,
            AgentNote::Sampled { .. } | AgentNote::Stopped { .. }
        ) {
            return;
        }
        let key = self.key(n.pid);
        if let Some(p) = self.procs.get_mut(&key) {
            p.gpu.get_or_insert_with(Default::default).note(&n.what);
        }
    }

    /// Drops the series of processes gone longer than `keep_exited`; ranks
    /// kernels and GEMM shapes (every ten seconds).
    pub(crate) fn sweep(&mut self, now: Instant) {
        for p in self.procs.values_mut() {
            if let Some(g) = &mut p.gpu {
                g.sweep(now);
            }
            p.gemm.sweep(now);
        }
        let keep = self.keep_exited;
        self.procs.retain(|_, p| {
            p.gone_at
                .is_none_or(|t| now.saturating_duration_since(t) < keep)
        });
        let procs = &self.procs;
        self.programs
            .retain(|pid, n| procs.contains_key(&(*pid, *n)));
    }

    /// The key of `pid`'s series now.
    fn key(&self, pid: u32) -> (u32, u32) {
        (pid, self.programs.get(&pid).copied().unwrap_or(0))
    }

    /// `pid` began a new program named `comm`: its series so far end (kept
    /// `keep_exited` like a gone process's) and its calls from here on
    /// count in new series labelled `comm`.
    pub(crate) fn exec(&mut self, pid: u32, comm: &str, now: Instant) {
        let key = self.key(pid);
        let Some(old) = self.procs.get_mut(&key) else {
            if let Some(i) = self.seen.get_mut(&pid) {
                i.comm = comm.into();
            }
            return;
        };
        old.gone_at.get_or_insert(now);
        let container = old.container.clone();
        let next = (pid, key.1.wrapping_add(1));
        self.procs.remove(&next);
        self.procs
            .insert(next, ProcessSeries::new(pid, comm, &container));
        self.programs.insert(pid, next.1);
    }

    #[cfg(test)]
    /// Processes with series (gone ones within `keep_exited` included).
    pub(crate) fn processes(&self) -> usize {
        self.procs.len()
    }
}

/// How often gone processes' series are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The metrics as a sink: shared with the HTTP server, which renders them
/// for each scrape.
pub(crate) struct MetricsSink {
    metrics: Arc<Mutex<Metrics>>,
    last_sweep: Instant,
    /// Calls counted, of them those counted in the kernel (`:counts`), and
    /// the last lost counts (for the daemon's last line).
    pub calls: u64,
    pub counted: u64,
    pub lost: LostCounts,
}

/// The metrics, locked (a panic elsewhere does not take them down).
pub(crate) fn lock(m: &Mutex<Metrics>) -> MutexGuard<'_, Metrics> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MetricsSink {
    pub(crate) fn new(metrics: Arc<Mutex<Metrics>>) -> Self {
        Self {
            metrics,
            last_sweep: Instant::now(),
            calls: 0,
            counted: 0,
            lost: LostCounts::default(),
        }
    }
}

impl Sink for MetricsSink {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Call { call, device_bytes } => {
                self.calls += 1;
                lock(&self.metrics).record(call, *device_bytes);
            }
            Event::ProcessSeen(info) => lock(&self.metrics).seen(info),
            // The launch that follows carries what the graph runs.
            Event::Graph(_) => {}
            Event::ProcessGone { pid, .. } => lock(&self.metrics).gone(*pid, Instant::now()),
            Event::Lost(report) => {
                self.lost = report.total;
                lock(&self.metrics).set_lost(report.total);
            }
            Event::NcclCollective(c) => lock(&self.metrics).nccl.collective(c),
            Event::NcclStall(s) => lock(&self.metrics).nccl.stall(s),
            Event::NcclStallEnded(e) => lock(&self.metrics).nccl.stall_over(e),
            Event::Sampling(r) => lock(&self.metrics).sampling(r),
            Event::Gpu(w) => lock(&self.metrics).gpu(w),
            // The agents' news go to stderr, their losses to the summary;
            // sampling and a stop to series of their own.
            Event::GpuAgent(n) => lock(&self.metrics).gpu_note(n),
            Event::Exec(x) => lock(&self.metrics).exec(x.pid, &x.comm, Instant::now()),
            Event::Counted(c) => {
                self.calls += c.calls;
                self.counted += c.calls;
                lock(&self.metrics).counted(c);
            }
        }
    }

    fn tick(&mut self, status: &Status) {
        lock(&self.metrics).set_gauges(TracerGauges {
            probes: status.probes,
            library_files: status.library_files,
            process_states: status.process_states,
        });
        if let Some(c) = status.hit_cost {
            lock(&self.metrics).hit_cost = Some(c);
        }
        if status.now.saturating_duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = status.now;
            lock(&self.metrics).sweep(status.now);
            release_free_memory();
        }
    }
}

/// Hands memory freed since (series of exited processes, large /metrics
/// bodies built on the HTTP threads) back to the system. glibc keeps freed
/// memory in its per-thread arenas otherwise, so a burst of short-lived
/// processes would leave the daemon's RSS at its peak for good.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests;

/// Nanoseconds as decimal seconds, exactly (no float rounding: `0.0000025`).
fn seconds(ns: u128) -> String {
    let whole = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A latency histogram's samples: `NAME_bucket{LABELS,le="…"}` (over
/// [`BUCKETS_NS`] and +Inf), `NAME_sum` and `NAME_count`.
fn histogram(o: &mut String, name: &str, labels: &str, s: &ApiSeries) {
    let mut cumulative = 0;
    for (i, bound) in BUCKETS_NS.iter().enumerate() {
        cumulative += s.buckets[i];
        let le = seconds(*bound as u128);
        let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", s.timed);
    let _ = writeln!(o, "{name}_sum{{{labels}}} {}", seconds(s.sum_ns));
    let _ = writeln!(o, "{name}_count{{{labels}}} {}", s.timed);
}
