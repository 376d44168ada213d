//! Events: what the session hands every output ([`Event`]), the probe
//! records and their decoding and enrichment into calls, the plain data
//! types of the model, and the JSON schema.

pub mod call;
pub mod capped;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod gemm;
pub mod gpu;
pub mod graph;
pub mod lt;
pub(crate) mod nccl;
pub(crate) mod raw;
pub mod record;
pub(crate) mod sampling;
pub(crate) mod sink;
pub mod stack;
pub mod types;

use std::sync::Arc;

use crate::model::call::Call;
use crate::model::nccl::Collective;
use crate::model::nccl::NcclStall;
use crate::model::nccl::StallEnded;
use types::LostCounts;

/// What the session tells every output, in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// One traced call, decoded and enriched; `device_bytes` is the device
    /// memory its process has in use after it, when the call changed it.
    Call {
        call: Call,
        device_bytes: Option<u64>,
    },
    /// A process to trace: given by PID, started by gputrace, found mapping
    /// a probed library, or making its first call. It comes before any of
    /// the process's calls; a PID seen again after its process exited is a
    /// new process (the PID was reused).
    ProcessSeen(ProcessInfo),
    /// A process seen before has exited, and its last calls have had time
    /// to be drained (the grace of `session::processes`): no more calls of it
    /// are expected. `exited_ns`: when the exit was noticed (Unix ns).
    ProcessGone { pid: u32, exited_ns: u64 },
    /// What the probes could not record so far (counts since the start),
    /// sent when it changes and once more at the end.
    Lost(LostReport),
    /// What an executable CUDA graph runs: said right before the first
    /// `cuGraphLaunch` of it that the trace sees, and again after it changed.
    Graph(crate::model::graph::GraphRecord),
    /// Every rank of a communicator has entered one collective (matched by
    /// communicator id, function and sequence number across the traced
    /// processes): its arrival skew and the rank that came last.
    NcclCollective(Collective),
    /// Ranks have entered a collective that others have not, or a thread
    /// has been inside an NCCL call, for longer than `--nccl-stall`
    /// (said once per collective or call).
    NcclStall(NcclStall),
    /// A collective stall said before is over: every rank entered.
    NcclStallEnded(StallEnded),
    /// `--overhead-budget`: a period of its schedule ended (sent once
    /// sampling has begun, every period from then on, and once at the end):
    /// the share of it the busy APIs were traced, and per process the calls
    /// of those APIs seen and estimated since the start.
    Sampling(sampling::SamplingReport),
    /// `--gpu-time`: a kernel, copy or memset the GPU ran for a traced
    /// process, joined to the call that queued it (sent when the process's
    /// agent hands it over and its API record has settled: about a second
    /// after it ended).
    Gpu(gpu::GpuWork),
    /// A traced process began a new program (`execve`): the calls before
    /// are the old program's, the calls after the new one's, named by it.
    Exec(Exec),
    /// `--gpu-time`: the agent in a process attached, was refused, detached,
    /// or could not record some work.
    GpuAgent(gpu::GpuAgentNote),
    /// `--probes FAMILY:counts`: calls of one API in one process counted in
    /// the kernel since the last such event (read every second, and a
    /// process's last before its `ProcessGone`).
    Counted(CountedCalls),
}

/// Calls of one API in one process counted in the kernel (`:counts`),
/// since the last report of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedCalls {
    pub pid: u32,
    /// The process's name when they were read.
    pub comm: Arc<str>,
    pub api: &'static str,
    pub calls: u64,
    /// Of them, those timed (every call, or one in `--counts-time-every`
    /// where the kernel has uprobe sessions).
    pub timed: u64,
    /// The host time of those timed, added up.
    pub sum_ns: u64,
    /// Those timed, per bucket of `tracer_common::BUCKETS_NS` (not
    /// cumulative; the last is +Inf).
    pub buckets: [u64; tracer_common::HISTOGRAM_SLOTS],
}

/// Who a process is, read once while it is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Its start time (clock ticks since boot, /proc/PID/stat field 22):
    /// with the PID, what tells it from a later process given the same PID.
    /// `None` when it had exited before it could be read.
    pub start_ticks: Option<u64>,
    /// The kernel's name of the process (15 characters at most).
    pub comm: Arc<str>,
    pub container: Container,
}

impl ProcessInfo {
    /// A process that had exited before it could be read: its name is the
    /// one its calls carried (made printable: another user chose it).
    pub fn exited(pid: u32, comm: &str) -> Self {
        Self {
            pid,
            start_ticks: None,
            comm: Arc::from(crate::text::printable(comm)),
            container: Container::default(),
        }
    }
}

/// A traced process began a new program (`execve`). Its PID stays; what
/// gputrace knew of the old program (kernel names, allocations, graphs,
/// communicators) is dropped, and its calls from here on carry `comm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    pub pid: u32,
    /// When (Unix ns).
    pub ts_ns: u64,
    /// The name its calls carried before.
    pub old_comm: Arc<str>,
    /// The new program's name (the kernel's, from the file executed;
    /// printable).
    pub comm: Arc<str>,
}

impl Exec {
    /// Its timeline record: `{"type":"exec","ts_ns":…,"pid":…,"comm":…,"old_comm":…}`.
    pub fn record(&self) -> record::Record {
        let mut fields = serde_json::Map::new();
        fields.insert("comm".into(), serde_json::Value::from(&*self.comm));
        fields.insert("old_comm".into(), serde_json::Value::from(&*self.old_comm));
        record::Record {
            kind: "exec",
            ts_ns: self.ts_ns,
            dur_ns: None,
            pid: Some(self.pid),
            tid: None,
            fields,
            view: None,
        }
    }
}

/// Calls not recorded: in all, per process, and records that could not be
/// decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LostReport {
    pub total: LostCounts,
    /// Processes with calls not recorded, by PID (ascending).
    pub by_pid: Vec<(u32, u64)>,
    /// Records that could not be decoded (a bug if ever not zero).
    pub undecodable: u64,
}

/// The container and pod of a process, where its cgroup shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// The runtime's container id (64 hex digits for containerd, CRI-O, Docker).
    pub container_id: Option<String>,
    /// The Kubernetes pod's UID, dashed as the API server spells it.
    pub pod_uid: Option<String>,
}
