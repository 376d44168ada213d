//! What `top` knows of each process over time. Every call goes into a
//! [`ProcessSummary`] for the second it returned in (the summary's own
//! aggregation, histograms included); those are kept [`DETAIL_SECS`] and
//! merged for the latency window, and each complete second is also reduced
//! to a few [`Totals`] kept [`HISTORY_SECS`] for the rates and the charts.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::types::Direction;
use crate::summary::ProcessSummary;
use crate::summary::MAX_COMMS;

const NS: u64 = 1_000_000_000;
/// NCCL stalls held for the screen at once.
const MAX_STALLS_SHOWN: usize = 256;
/// Per-second summaries (with histograms) kept for the latency window.
pub(crate) const DETAIL_SECS: u64 = 30;
/// Per-second totals kept for rates and charts.
pub(crate) const HISTORY_SECS: u64 = 600;
/// A second counts as complete this long after it ended: calls are
/// recorded when they return and reach us through the ring buffer.
pub(crate) const SETTLE_NS: u64 = 300_000_000;
/// An exited process stays on screen (marked) this long after its exit
/// was noticed.
pub(crate) const EXIT_GRACE_NS: u64 = 10 * NS;

/// Host calls that wait for the GPU (sync wait share).
pub(crate) fn waits_for_gpu(api: &str) -> bool {
    matches!(
        api,
        "cuStreamSynchronize"
            | "cuStreamSynchronize_ptsz"
            | "cuCtxSynchronize"
            | "cuEventSynchronize"
    )
}

/// The counts of one or more seconds of one process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    pub calls: u64,
    /// Kernels run: launched directly (any cuLaunchKernel*, captured ones
    /// excluded) or as nodes of graph launches; a launch of a graph whose
    /// nodes are not known counts as one.
    pub launches: u64,
    /// Copies and memsets.
    pub copies: u64,
    /// Bytes by [`Direction`] (indexed by `Direction as usize`).
    pub copy_bytes: [u64; Direction::ALL.len()],
    pub nccl_ops: u64,
    pub nccl_bytes: u64,
    /// Host time in calls that wait for the GPU, summed over threads.
    pub sync_wait_ns: u64,
    /// `--gpu-time`: time the GPUs ran the process's work (each device's
    /// union of spans, added over devices), and whether any came.
    pub gpu_busy_ns: u64,
    pub gpu: bool,
}

impl Totals {
    /// The counts of a summary of calls.
    pub(crate) fn of(s: &ProcessSummary) -> Totals {
        let mut t = Totals {
            calls: s.events,
            launches: s.kernel_runs() + s.graphs.opaque,
            ..Totals::default()
        };
        for (api, a) in &s.apis {
            if waits_for_gpu(api) {
                t.sync_wait_ns += a.total_ns;
            }
        }
        for (d, c) in &s.copies {
            t.copies += c.count;
            t.copy_bytes[*d as usize] += c.bytes;
        }
        for n in s.nccl.all_values() {
            t.nccl_ops += n.count;
            t.nccl_bytes += n.bytes;
        }
        if let Some(g) = &s.gpu {
            t.gpu = true;
            t.gpu_busy_ns = g.devices.values().map(|b| b.total_ns()).sum();
        }
        t
    }

    pub(crate) fn add(&mut self, o: &Totals) {
        self.calls += o.calls;
        self.launches += o.launches;
        self.copies += o.copies;
        for (a, b) in self.copy_bytes.iter_mut().zip(o.copy_bytes) {
            *a += b;
        }
        self.nccl_ops += o.nccl_ops;
        self.nccl_bytes += o.nccl_bytes;
        self.sync_wait_ns += o.sync_wait_ns;
        self.gpu_busy_ns += o.gpu_busy_ns;
        self.gpu |= o.gpu;
    }

    /// Per second, over `secs` seconds.
    pub(crate) fn per_sec(&self, secs: u64) -> Rates {
        let s = secs.max(1) as f64;
        Rates {
            calls: self.calls as f64 / s,
            launches: self.launches as f64 / s,
            copies: self.copies as f64 / s,
            copy_bytes: self.copy_bytes.map(|b| b as f64 / s),
            nccl_ops: self.nccl_ops as f64 / s,
            nccl_bytes: self.nccl_bytes as f64 / s,
            sync_share: self.sync_wait_ns as f64 / (s * NS as f64),
            gpu_share: self.gpu.then(|| self.gpu_busy_ns as f64 / (s * NS as f64)),
        }
    }
}

/// [`Totals`] per second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Rates {
    pub calls: f64,
    pub launches: f64,
    pub copies: f64,
    pub copy_bytes: [f64; Direction::ALL.len()],
    pub nccl_ops: f64,
    pub nccl_bytes: f64,
    /// Fraction of wall time spent waiting for the GPU, summed over the
    /// process's threads (two threads always waiting: 2.0).
    pub sync_share: f64,
    /// `--gpu-time`: fraction of wall time its GPUs ran its work (added
    /// over devices); `None` without GPU records.
    pub gpu_share: Option<f64>,
}

impl Rates {
    pub(crate) fn bytes(&self, d: Direction) -> f64 {
        self.copy_bytes[d as usize]
    }
}

/// One process as `top` has seen it.
#[derive(Debug)]
pub(crate) struct ProcessActivity {
    pub pid: u32,
    pub comm: String,
    /// Per-second summaries, oldest first, by Unix second.
    seconds: VecDeque<(u64, ProcessSummary)>,
    /// Totals of complete seconds, oldest first (seconds with no call are absent).
    history: VecDeque<(u64, Totals)>,
    /// Seconds before this one are complete and in `history`.
    complete_before: u64,
    /// Device memory in use (allocations seen) and its peak.
    pub device_bytes: u64,
    pub peak_bytes: u64,
    /// Calls the probes could not record for this process.
    pub lost: u64,
    pub exited_at_ns: Option<u64>,
    /// The first second this process was seen in.
    pub first_sec: u64,
    /// Communicator → (nranks, rank), from the init calls seen.
    comms: HashMap<u64, (i64, Option<i64>)>,
    /// `--gpu-time-share`: the percent of each second its CUPTI collects.
    pub gpu_sampled: Option<u32>,
}

impl ProcessActivity {
    pub(crate) fn new(pid: u32, comm: String, now_ns: u64) -> Self {
        Self {
            pid,
            comm,
            seconds: VecDeque::new(),
            history: VecDeque::new(),
            complete_before: settled_sec(now_ns),
            device_bytes: 0,
            peak_bytes: 0,
            gpu_sampled: None,
            lost: 0,
            exited_at_ns: None,
            first_sec: now_ns / NS,
            comms: HashMap::new(),
        }
    }

    /// The summary of second `sec`, made if need be; `None` when it is
    /// far too late for any window.
    fn second(&mut self, sec: u64) -> Option<&mut ProcessSummary> {
        // Calls arrive about in order: the second is the last one or close to it.
        let i = self.seconds.partition_point(|(s, _)| *s < sec);
        if self.seconds.get(i).is_none_or(|(s, _)| *s != sec) {
            if self
                .seconds
                .front()
                .is_some_and(|(s, _)| sec + DETAIL_SECS < *s)
            {
                return None;
            }
            let mut summary = ProcessSummary::default();
            summary.pid = self.pid;
            self.seconds.insert(i, (sec, summary));
        }
        Some(&mut self.seconds[i].1)
    }

    fn record(&mut self, c: &Call, device_bytes: Option<u64>) {
        self.first_sec = self.first_sec.min(c.ts_ns / NS);
        if let Some(b) = device_bytes {
            self.device_bytes = b;
            self.peak_bytes = self.peak_bytes.max(b);
        }
        let sec = (c.ts_ns + c.dur_ns.unwrap_or(0)) / NS;
        if matches!(c.args, Args::CommInit { .. }) {
            let mut one = ProcessSummary::default();
            one.record(c);
            for (comm, ranks) in one.comms {
                if self.comms.len() < MAX_COMMS || self.comms.contains_key(&comm) {
                    self.comms.insert(comm, ranks);
                }
            }
        }
        if let Some(summary) = self.second(sec) {
            summary.record(c);
        }
    }

    /// `--gpu-time`: a piece of work its GPU ran, in the second it ended;
    /// and to the GEMMs of the second of the call that queued it (where
    /// that call's GEMM is).
    fn gpu(&mut self, w: &crate::model::gpu::GpuWork) {
        if let Some(summary) = w
            .launch
            .as_ref()
            .and_then(|l| self.second(l.api_start_ns / NS))
        {
            summary.gemms.record_gpu(w);
        }
        let Some(summary) = self.second(w.end_ns / NS) else {
            return;
        };
        summary.gpu.get_or_insert_with(Default::default).record(w);
    }

    /// Moves complete seconds into the history and forgets old ones.
    fn advance(&mut self, settled: u64) {
        for (sec, s) in &self.seconds {
            if *sec >= self.complete_before && *sec < settled {
                self.history.push_back((*sec, Totals::of(s)));
            }
        }
        self.complete_before = self.complete_before.max(settled);
        while self
            .seconds
            .front()
            .is_some_and(|(s, _)| s + DETAIL_SECS < settled)
        {
            self.seconds.pop_front();
        }
        while self
            .history
            .front()
            .is_some_and(|(s, _)| s + HISTORY_SECS < settled)
        {
            self.history.pop_front();
        }
    }

    /// (rank, nranks) of a communicator whose init this process was seen to call.
    pub(crate) fn comm_ranks(&self, comm: u64) -> Option<(Option<i64>, i64)> {
        self.comms.get(&comm).map(|(n, r)| (*r, *n))
    }

    /// How many of the `secs` seconds before `end` the process was seen
    /// in (a process that appeared 3 s ago has a 3 s window), at least 1.
    pub(crate) fn covered(&self, end: u64, secs: u64) -> u64 {
        secs.min(end.saturating_sub(self.first_sec)).max(1)
    }

    /// The totals of the `secs` complete seconds before `end`.
    pub(crate) fn totals(&self, end: u64, secs: u64) -> Totals {
        let mut t = Totals::default();
        for (s, x) in self.history.iter().rev() {
            if *s >= end {
                continue;
            }
            if *s + secs < end {
                break;
            }
            t.add(x);
        }
        t
    }

    /// The calls of the `secs` complete seconds before `end`, merged.
    pub(crate) fn window(&self, end: u64, secs: u64) -> ProcessSummary {
        let mut w = ProcessSummary::default();
        w.pid = self.pid;
        w.comm = self.comm.clone();
        for (s, x) in &self.seconds {
            if *s < end && *s + secs >= end {
                w.merge(x);
            }
        }
        w
    }

    /// One value per second for the `len` seconds before `end` (0 where
    /// nothing happened), oldest first.
    pub(crate) fn series(&self, end: u64, len: u64, f: impl Fn(&Totals) -> u64) -> Vec<u64> {
        let start = end.saturating_sub(len);
        let mut out = vec![0; (end - start) as usize];
        for (s, x) in &self.history {
            if *s >= start && *s < end {
                out[(s - start) as usize] = f(x);
            }
        }
        out
    }
}

/// The last complete second at `now_ns`, exclusive: seconds before it are complete.
pub(crate) fn settled_sec(now_ns: u64) -> u64 {
    now_ns.saturating_sub(SETTLE_NS) / NS
}

/// Every process `top` shows, and the tracer's own state.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub processes: BTreeMap<u32, ProcessActivity>,
    /// Calls not recorded, all processes.
    pub lost: u64,
    /// Probes attached.
    pub probes: usize,
    /// `--overhead-budget`: the share of the last period the busy APIs
    /// were traced (`None` without a budget).
    pub sampling: Option<f64>,
    /// NCCL collectives stalled now (communicator id, op, sequence), with
    /// the stall's line; stuck calls stay until the process is gone.
    pub nccl_stalls: BTreeMap<(u64, &'static str, u64), String>,
}

impl Model {
    /// `--gpu-time-share`: a process's agent collects a share of the time.
    pub(crate) fn gpu_note(&mut self, n: &crate::model::gpu::GpuAgentNote) {
        if let crate::model::gpu::AgentNote::Sampled { percent, .. } = n.what {
            if let Some(p) = self.processes.get_mut(&n.pid) {
                p.gpu_sampled = Some(percent);
            }
        }
    }

    /// `--gpu-time`: a piece of work a process's GPU ran.
    pub(crate) fn gpu(&mut self, w: &crate::model::gpu::GpuWork, _now_ns: u64) {
        if let Some(p) = self.processes.get_mut(&w.pid) {
            p.gpu(w);
        }
    }

    /// Counts a call. A call of an exited process is one it made before
    /// it exited (a new process with its PID is seen first).
    pub(crate) fn record(&mut self, c: &Call, device_bytes: Option<u64>, now_ns: u64) {
        let p = self
            .processes
            .entry(c.pid)
            .or_insert_with(|| ProcessActivity::new(c.pid, c.comm.to_string(), now_ns));
        if p.comm.is_empty() {
            p.comm = c.comm.to_string();
        }
        p.record(c, device_bytes);
    }

    /// Shows a process the session saw (it may have made no call yet); a
    /// PID seen again after its process exited is a new process.
    pub(crate) fn seen(&mut self, pid: u32, comm: &str, now_ns: u64) {
        match self.processes.get_mut(&pid) {
            Some(p) if p.exited_at_ns.is_none() => {}
            _ => {
                self.processes
                    .insert(pid, ProcessActivity::new(pid, comm.to_string(), now_ns));
            }
        }
    }

    /// `pid` began a new program: its row shows the new name (top shows
    /// what a process runs now, as `top` does).
    pub(crate) fn exec(&mut self, pid: u32, comm: &str) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.comm = comm.to_string();
        }
    }

    /// A stall said by the session.
    pub(crate) fn nccl_stall(&mut self, s: &crate::model::nccl::NcclStall) {
        use crate::model::nccl::NcclStall;
        let key = match s {
            NcclStall::Collective { stall, .. } => (stall.comm_id, stall.func.name(), stall.seq),
            // Said again when its rank's process exited: the same key.
            // Keyed by the process: a stuck call is shown until it exits.
            NcclStall::Stuck(c) => (u64::from(c.pid), "stuck", c.entered_ns),
        };
        // Collective stalls go when they end; stuck calls with their
        // process. A flood of them is not all shown.
        if self.nccl_stalls.len() < MAX_STALLS_SHOWN || self.nccl_stalls.contains_key(&key) {
            self.nccl_stalls.insert(key, s.line());
        }
    }

    /// A collective stall is over.
    pub(crate) fn nccl_stall_over(&mut self, e: &crate::model::nccl::StallEnded) {
        self.nccl_stalls.remove(&(e.comm_id, e.func.name(), e.seq));
    }

    /// Marks a process the session says is gone (exited at `exited_ns`).
    pub(crate) fn gone(&mut self, pid: u32, exited_ns: u64) {
        self.nccl_stalls
            .retain(|k, _| k.1 != "stuck" || k.0 != u64::from(pid));
        if let Some(p) = self.processes.get_mut(&pid) {
            p.exited_at_ns.get_or_insert(exited_ns);
        }
    }

    pub(crate) fn set_lost(&mut self, by_pid: &[(u32, u64)]) {
        for (pid, n) in by_pid {
            if let Some(p) = self.processes.get_mut(pid) {
                p.lost = *n;
            }
        }
    }

    /// Moves complete seconds into the history, and takes exited
    /// processes off the screen [`EXIT_GRACE_NS`] after they exited.
    pub(crate) fn advance(&mut self, now_ns: u64) {
        let settled = settled_sec(now_ns);
        for p in self.processes.values_mut() {
            p.advance(settled);
        }
        self.processes
            .retain(|_, p| p.exited_at_ns.is_none_or(|t| now_ns < t + EXIT_GRACE_NS));
    }
}

#[cfg(test)]
mod tests;
