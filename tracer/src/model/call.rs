//! The userspace event: one traced call, decoded, as every output sees it.

use std::sync::Arc;

use crate::model::graph::GraphCall;
use crate::model::graph::GraphLaunch;
use crate::model::nccl::Identity;
use crate::model::nccl::Unaligned;
use crate::model::stack::CallStack;
use crate::model::types::AllocKind;
use crate::model::types::Direction;
use crate::model::types::Family;
use crate::model::types::NcclOp;

/// One traced call.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// Start of the call, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Time in the call, `None` when traced `:args` only.
    pub dur_ns: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    /// The process's command name.
    pub comm: Arc<str>,
    /// The exported symbol as called.
    pub api: &'static str,
    pub family: Option<Family>,
    /// The return code, `None` when traced `:args` only.
    pub ret: Option<i64>,
    pub args: Args,
    /// The caller's stack (`--stacks`), interned: calls from one place
    /// share it. `None` without `--stacks`, for calls not sampled, and when
    /// the probe could not send it (counted as `stacks_dropped`).
    pub stack: Option<Arc<CallStack>>,
}

impl Call {
    /// Whether the call failed (a non-zero CUresult / ncclResult_t).
    pub fn failed(&self) -> bool {
        matches!(self.ret, Some(r) if r != 0)
    }
}

/// Arguments, by what the call does.
#[derive(Clone, Debug, PartialEq)]
pub enum Args {
    Launch(Launch),
    /// cuGraphLaunch: an executable graph, and what it runs when known.
    Graph(GraphLaunch),
    /// Stream capture, graph construction, instantiation, updates.
    GraphApi(GraphCall),
    Alloc(Alloc),
    Free {
        dptr: u64,
        stream: Option<u64>,
    },
    MemCreate {
        handle: Option<u64>,
        bytes: u64,
    },
    MemRelease {
        handle: u64,
    },
    MemMap {
        ptr: u64,
        bytes: u64,
        handle: u64,
    },
    MemUnmap {
        ptr: u64,
        bytes: u64,
    },
    Memcpy(Memcpy),
    Sync {
        stream: Option<u64>,
        event: Option<u64>,
    },
    /// cuModuleGetFunction / cuLibraryGetKernel: a handle learned with its name.
    GetFunction {
        handle: Option<u64>,
        name: Option<String>,
        parent: u64,
        kind: HandleKind,
    },
    /// cuKernelGetFunction: a CUfunction for a CUkernel.
    KernelGetFunction {
        function: Option<u64>,
        kernel: u64,
    },
    /// cuModuleUnload / cuLibraryUnload.
    Unload {
        handle: u64,
    },
    Nccl(Nccl),
    NcclGroup,
    /// A cuBLAS GEMM: its problem, operations and types (a cublasLtMatmul
    /// whose descriptors were seen made, too).
    Gemm(crate::model::gemm::Gemm),
    /// cuBLASLt's descriptor calls, and a matmul whose descriptors were not seen.
    Lt(crate::model::lt::LtCall),
    CommInit {
        comm: Option<u64>,
        nranks: i64,
        rank: Option<i64>,
        /// The 128-byte `ncclUniqueId` passed by value (InitRank,
        /// InitRankConfig), or the first of InitRankScalable's ids.
        unique_id: Option<Box<[u8]>>,
        /// The communicator's id (its `commHash`, as NCCL prints it), when
        /// known: from `unique_id` and the library's release.
        comm_id: Option<u64>,
        /// `comm_id` is gputrace's own (the release is unknown): see
        /// [`crate::model::nccl::Identity::own_id`].
        own_id: bool,
    },
    /// ncclCommSplit(comm, color, key, &newcomm, config).
    CommSplit {
        comm: u64,
        color: i64,
        key: i64,
        /// The new communicator, read at return (`None`: the call failed or
        /// this rank asked for none).
        newcomm: Option<u64>,
        /// Its id, when the parent's init was traced (NCCL 2.26+ derive it
        /// from the parent's id, its split count and the color).
        comm_id: Option<u64>,
        /// `comm_id` is gputrace's own (so was the parent's).
        own_id: bool,
    },
    CommEnd {
        comm: u64,
    },
    /// cudaLaunchKernel: the host stub (or handle) the runtime was given.
    RuntimeLaunch {
        func: u64,
        stream: Option<u64>,
    },
    /// Arguments not decoded (an API this build does not know).
    Other(serde_json::Map<String, serde_json::Value>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleKind {
    Function,
    Kernel,
}

impl HandleKind {
    /// The names of the handle and of what it came from, in every output.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            HandleKind::Function => ("function", "module"),
            HandleKind::Kernel => ("kernel", "library"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub function: u64,
    /// The runtime's host stub for this launch, when a traced
    /// cudaLaunchKernel made it (not written out).
    pub stub: u64,
    pub kernel: Option<Arc<str>>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub stream: u64,
    /// Made on a stream under capture: recorded into a graph (the
    /// capture's number in its process), not run.
    pub captured: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Alloc {
    /// The address handed out, read at return; `None` if the call failed or
    /// was traced without a return probe.
    pub dptr: Option<u64>,
    pub bytes: u64,
    pub kind: AllocKind,
    pub stream: Option<u64>,
    pub pitch: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Memcpy {
    pub dst: u64,
    /// `None` for memsets.
    pub src: Option<u64>,
    pub bytes: u64,
    pub direction: Direction,
    pub stream: Option<u64>,
    /// The fill value of a memset.
    pub value: Option<u64>,
    /// Whether the probe could read (dst, src) as host memory at the call.
    pub readable: (bool, bool),
    /// Made on a stream under capture: recorded into a graph, not run.
    pub captured: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Nccl {
    pub op: NcclOp,
    pub count: u64,
    pub datatype: i64,
    pub redop: Option<i64>,
    pub root: Option<i64>,
    pub peer: Option<i64>,
    pub comm: u64,
    pub stream: u64,
    /// The communicator as known at this call: id, rank, size, device, and
    /// for a collective its sequence number (what names it on every rank).
    pub ident: Identity,
    /// Why a collective has no sequence number (`None` when it has one,
    /// and for point-to-point calls).
    pub unaligned: Option<Unaligned>,
}

impl Nccl {
    /// Bytes moved by this rank: count × element size (`None` for an unknown datatype).
    pub fn bytes(&self) -> Option<u64> {
        nccl_type_size(self.datatype).map(|s| self.count.saturating_mul(s))
    }
}

/// ncclDataType_t → name.
pub fn nccl_type_name(t: i64) -> Option<&'static str> {
    Some(match t {
        0 => "int8",
        1 => "uint8",
        2 => "int32",
        3 => "uint32",
        4 => "int64",
        5 => "uint64",
        6 => "float16",
        7 => "float32",
        8 => "float64",
        9 => "bfloat16",
        10 => "float8e4m3",
        11 => "float8e5m2",
        _ => return None,
    })
}

pub fn nccl_type_from_name(name: &str) -> Option<i64> {
    (0..12).find(|t| nccl_type_name(*t) == Some(name))
}

/// ncclDataType_t → element size in bytes.
pub fn nccl_type_size(t: i64) -> Option<u64> {
    Some(match t {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 => 4,
        4 | 5 | 8 => 8,
        7 => 4,
        _ => return None,
    })
}

/// ncclRedOp_t → name.
pub fn nccl_redop_name(op: i64) -> Option<&'static str> {
    Some(match op {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        _ => return None,
    })
}

pub fn nccl_redop_from_name(name: &str) -> Option<i64> {
    (0..5).find(|op| nccl_redop_name(*op) == Some(name))
}
