//! The GPU's side of the calls (`--gpu-time`): what each kernel, copy and
//! memset did on the GPU and when, joined to the call that queued it, and
//! what the agent loaded into a process to read them says of itself.

use std::sync::Arc;

use crate::model::types::Direction;

/// One piece of work the GPU ran for a traced process.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuWork {
    pub pid: u32,
    pub device: u32,
    /// CUPTI's ids of the context and stream (not the handles the calls
    /// pass: CUPTI numbers them).
    pub context: u32,
    pub stream: u32,
    /// CUPTI's correlation id: the same for the API call and its work.
    pub correlation: u32,
    /// The agent's epoch (modulo 256) the correlation id belongs to: CUPTI
    /// may number again after each sampled window's finalize. Not written.
    pub epoch: u8,
    /// On the GPU, Unix ns.
    pub start_ns: u64,
    pub end_ns: u64,
    pub op: GpuOp,
    /// The API call that queued it, where CUPTI recorded one.
    pub launch: Option<GpuLaunch>,
}

impl GpuWork {
    pub fn dur_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// From the call's start to the work's start on the GPU: time queued.
    pub fn queued_ns(&self) -> Option<u64> {
        self.launch
            .as_ref()
            .map(|l| self.start_ns.saturating_sub(l.api_start_ns))
    }
}

/// A CUDA graph's node, as CUPTI numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNodeRef {
    pub graph_id: u32,
    pub node_id: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum GpuOp {
    Kernel {
        /// The kernel's name, demangled; `None` when the agent's name area
        /// was full.
        name: Option<Arc<str>>,
        grid: [u32; 3],
        block: [u32; 3],
        /// Static and dynamic shared memory, bytes.
        shared_mem_bytes: u32,
        registers: u32,
        /// Run as a node of a CUDA graph.
        graph: Option<GraphNodeRef>,
    },
    Memcpy {
        bytes: u64,
        direction: Direction,
        graph: Option<GraphNodeRef>,
    },
    Memset {
        bytes: u64,
        value: u32,
        graph: Option<GraphNodeRef>,
    },
}

impl GpuOp {
    /// `kernel`, `memcpy`, `memset`.
    pub fn kind(&self) -> &'static str {
        match self {
            GpuOp::Kernel { .. } => "kernel",
            GpuOp::Memcpy { .. } => "memcpy",
            GpuOp::Memset { .. } => "memset",
        }
    }

    /// What a timeline shows it as: the kernel's name, `memcpy HtoD`,
    /// `memset`.
    pub fn label(&self) -> Arc<str> {
        match self {
            GpuOp::Kernel { name: Some(n), .. } => n.clone(),
            GpuOp::Kernel { name: None, .. } => Arc::from("kernel (name not known)"),
            GpuOp::Memcpy { direction, .. } => Arc::from(format!("memcpy {}", direction.name())),
            GpuOp::Memset { .. } => Arc::from("memset"),
        }
    }

    pub fn graph(&self) -> Option<GraphNodeRef> {
        match self {
            GpuOp::Kernel { graph, .. }
            | GpuOp::Memcpy { graph, .. }
            | GpuOp::Memset { graph, .. } => *graph,
        }
    }

    pub fn bytes(&self) -> Option<u64> {
        match self {
            GpuOp::Kernel { .. } => None,
            GpuOp::Memcpy { bytes, .. } | GpuOp::Memset { bytes, .. } => Some(*bytes),
        }
    }
}

/// The API call that queued a piece of GPU work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuLaunch {
    pub tid: u32,
    /// The function as CUPTI names it (`cuLaunchKernel`, `cudaLaunchKernel`,
    /// `cudaGraphLaunch`, ...).
    pub api: &'static str,
    /// The call's start as CUPTI recorded it, Unix ns.
    pub api_start_ns: u64,
    /// The libcuda call gputrace's probes saw for it (its start, Unix ns,
    /// and name), when they saw it (not under a budget's off slice).
    pub call: Option<(u64, &'static str)>,
    /// The NCCL call it was made in, when it was made inside one.
    pub nccl: Option<NcclLaunch>,
}

/// The NCCL collective (or group) a kernel was launched for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclLaunch {
    /// The NCCL call it was launched in (`ncclAllReduce`, `ncclGroupEnd`).
    pub api: &'static str,
    /// Its operation (`AllReduce`, ...), where the call says.
    pub op: Option<&'static str>,
    pub comm_id: Option<u64>,
    pub rank: Option<u32>,
    pub seq: Option<u64>,
}

/// What the agent in a process says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuAgentNote {
    pub pid: u32,
    /// When said (Unix ns).
    pub ts_ns: u64,
    pub what: AgentNote,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentNote {
    /// Loaded and collecting: with which libcupti, on which clock (the
    /// probes' own, or CUPTI's with the stated error of the offset).
    Attached {
        cupti: Arc<str>,
        cupti_version: u32,
        clock_error_ns: u64,
    },
    /// Not loaded (the process is untouched), and why (one line).
    Refused { why: Arc<str> },
    /// Detached; `finalized`: CUPTI let go of it and it was unloaded (else
    /// it finalizes at the process's next CUDA call and stays mapped).
    Detached { finalized: bool },
    /// What could not be recorded so far (counts since attach): records the
    /// ring had no room for, records CUPTI dropped, kernel names the name
    /// area had no room for.
    Lost {
        ring_dropped: u64,
        cupti_dropped: u64,
        names_dropped: u64,
    },
    /// `--gpu-time-share`: CUPTI collects during `percent` of each second
    /// only; it collected for `on_ns` since attach (so far).
    Sampled { percent: u32, on_ns: u64 },
    /// `--gpu-time-share`: CUPTI could not be had again for a window
    /// (another tool took it meanwhile): no more GPU records, and why.
    Stopped { why: Arc<str> },
}
