//! CUDA graphs in the event model: the arguments of the graph APIs (a node
//! decoded from the parameter struct the probe copied at entry), and what
//! an executable graph runs at each launch.

use std::sync::Arc;

use tracer_common::ProbeCookie;

use crate::model::types::Direction;

/// `CUgraphNodeType` values (cuda.h).
pub(crate) mod node_type {
    pub(crate) const KERNEL: u32 = 0;
    pub(crate) const MEMCPY: u32 = 1;
    pub(crate) const MEMSET: u32 = 2;
    pub(crate) const HOST: u32 = 3;
    pub(crate) const GRAPH: u32 = 4;
    pub(crate) const EMPTY: u32 = 5;
    pub(crate) const WAIT_EVENT: u32 = 6;
    pub(crate) const EVENT_RECORD: u32 = 7;
    pub(crate) const EXT_SEMAS_SIGNAL: u32 = 8;
    pub(crate) const EXT_SEMAS_WAIT: u32 = 9;
    pub(crate) const MEM_ALLOC: u32 = 10;
    pub(crate) const MEM_FREE: u32 = 11;
    pub(crate) const BATCH_MEM_OP: u32 = 12;
    pub(crate) const CONDITIONAL: u32 = 13;
}

/// A kernel node: what it launches and how.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelNode {
    /// The CUfunction (0 when the node was made from a CUkernel).
    pub function: u64,
    /// The CUkernel of a node made from one (`kern`, v2 parameters), else 0.
    pub cukernel: u64,
    /// The kernel's name, demangled, when known.
    pub kernel: Option<Arc<str>>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

impl KernelNode {
    /// The handle to name it by: the function, else the CUkernel.
    pub fn handle(&self) -> u64 {
        if self.function != 0 {
            self.function
        } else {
            self.cukernel
        }
    }
}

/// One node of a graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Kernel(KernelNode),
    Memcpy {
        bytes: u64,
        direction: Direction,
    },
    Memset {
        bytes: u64,
    },
    /// A child graph: cloned into the node when added (or, with CUDA 13's
    /// ownership MOVE, the graph itself handed over).
    Child {
        graph: u64,
        moved: bool,
    },
    Empty,
    EventRecord {
        event: u64,
    },
    EventWait {
        event: u64,
    },
    /// A conditional node: its bodies run 0..n times, decided on the GPU.
    Conditional,
    /// A node gputrace does not look into, by `CUgraphNodeType`.
    Other {
        node_type: u32,
    },
    /// Its parameters could not be read (the probe's copy failed).
    Unread,
}

impl Node {
    /// The kind, as the JSON schema names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Kernel(_) => "kernel",
            Node::Memcpy { .. } => "memcpy",
            Node::Memset { .. } => "memset",
            Node::Child { .. } => "graph",
            Node::Empty => "empty",
            Node::EventRecord { .. } => "event_record",
            Node::EventWait { .. } => "event_wait",
            Node::Conditional => "conditional",
            Node::Other { node_type } => match *node_type {
                node_type::HOST => "host",
                node_type::MEM_ALLOC => "mem_alloc",
                node_type::MEM_FREE => "mem_free",
                node_type::EXT_SEMAS_SIGNAL => "semaphores_signal",
                node_type::EXT_SEMAS_WAIT => "semaphores_wait",
                node_type::BATCH_MEM_OP => "batch_mem_op",
                _ => "other",
            },
            Node::Unread => "unread",
        }
    }

    /// `CUgraphNodeType` of a kind name written by [`Node::kind`] for
    /// [`Node::Other`].
    pub fn other_type(kind: &str) -> Option<u32> {
        Some(match kind {
            "host" => node_type::HOST,
            "mem_alloc" => node_type::MEM_ALLOC,
            "mem_free" => node_type::MEM_FREE,
            "semaphores_signal" => node_type::EXT_SEMAS_SIGNAL,
            "semaphores_wait" => node_type::EXT_SEMAS_WAIT,
            "batch_mem_op" => node_type::BATCH_MEM_OP,
            _ => return None,
        })
    }
}

/// The arguments of a graph API call.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphCall {
    BeginCapture {
        stream: u64,
        /// `CUstreamCaptureMode`; `None` for the legacy entry point (global).
        mode: Option<u32>,
        /// The graph captured into (cuStreamBeginCaptureToGraph).
        graph: Option<u64>,
    },
    EndCapture {
        stream: u64,
        graph: Option<u64>,
    },
    /// cuStreamIsCapturing / cuStreamGetCaptureInfo: what the driver says.
    CaptureStatus {
        stream: u64,
        /// NONE 0, ACTIVE 1, INVALIDATED 2.
        status: Option<u32>,
        /// The driver's capture id (GetCaptureInfo, while active).
        id: Option<u64>,
    },
    Create {
        graph: Option<u64>,
    },
    AddNode {
        graph: u64,
        node: Option<u64>,
        spec: Node,
    },
    SetNode {
        node: u64,
        spec: Node,
    },
    Clone {
        original: u64,
        clone: Option<u64>,
    },
    FindInClone {
        original: u64,
        clone: u64,
        node: Option<u64>,
    },
    ChildGraph {
        node: u64,
        graph: Option<u64>,
    },
    DestroyNode {
        node: u64,
    },
    Destroy {
        graph: u64,
    },
    Instantiate {
        graph: u64,
        exec: Option<u64>,
    },
    ExecUpdate {
        exec: u64,
        graph: u64,
    },
    ExecSetNode {
        exec: u64,
        node: u64,
        spec: Node,
    },
    ExecSetEnabled {
        exec: u64,
        node: u64,
        enabled: bool,
    },
    Upload {
        exec: u64,
        stream: u64,
    },
    ExecDestroy {
        exec: u64,
    },
}

/// What an executable graph runs at each launch, in order: child graphs
/// expanded in place, disabled nodes left out.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecContents {
    pub nodes: Vec<Node>,
    /// Read from the process's memory (built before gputrace attached),
    /// rather than followed from the calls that built it.
    pub from_memory: bool,
}

impl ExecContents {
    pub fn kernels(&self) -> impl Iterator<Item = &KernelNode> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Kernel(k) => Some(k),
            _ => None,
        })
    }

    /// Whether it holds conditional nodes (their bodies are not counted).
    pub fn has_conditional(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n, Node::Conditional))
    }
}

/// What an executable graph of a process runs, said once before the first
/// launch that runs it (again after it changed): the `{"type":"graph"}`
/// record of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphRecord {
    /// When it became known (the launch's start), Unix nanoseconds.
    pub ts_ns: u64,
    pub pid: u32,
    pub comm: Arc<str>,
    pub exec: u64,
    /// `None`: not known (`"nodes":null`).
    pub contents: Option<Arc<ExecContents>>,
}

/// A `cuGraphLaunch`: the executable graph, and what it runs when known.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphLaunch {
    pub exec: u64,
    pub stream: u64,
    /// `None`: not known (built before gputrace attached, and not readable).
    pub contents: Option<Arc<ExecContents>>,
    /// Launched into a stream under capture: recorded, not run.
    pub captured: Option<u64>,
}

/// What a node-parameter argument points to (or holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Params {
    /// `CUDA_KERNEL_NODE_PARAMS_v1` (56 bytes).
    KernelV1,
    /// `CUDA_KERNEL_NODE_PARAMS_v2` (72 bytes: + `kern`, `ctx`).
    KernelV2,
    /// `CUDA_MEMCPY3D` (200 bytes).
    Memcpy,
    /// `CUDA_MEMSET_NODE_PARAMS` (40 bytes).
    Memset,
    /// `CUgraphNodeParams` (256 bytes: the type, then a union at 16).
    Generic,
    /// A `CUgraph` passed by value: a child graph, cloned into the node.
    Child,
    /// A `CUevent` by value (event record / wait nodes).
    EventRecord,
    EventWait,
    /// No parameters the trace needs.
    Empty,
    /// A node type gputrace does not look into (host function, memory
    /// allocation or free, external semaphores, batch memory operations).
    Opaque(OpaqueNode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpaqueNode {
    Host,
    MemAlloc,
    MemFree,
    SemaphoresSignal,
    SemaphoresWait,
    BatchMemOp,
}

impl Params {
    /// Bytes to copy at entry from the argument, when it is a pointer.
    pub fn blob_bytes(self) -> Option<usize> {
        Some(match self {
            Params::KernelV1 => 56,
            Params::KernelV2 => 72,
            Params::Memcpy => 200,
            Params::Memset => 40,
            Params::Generic => 256,
            _ => return None,
        })
    }
}

/// What a graph API does; where its arguments are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GraphOp {
    /// cuStreamBeginCapture(stream[, mode]) / cuStreamBeginCaptureToGraph
    /// (stream, graph, deps, depData, numDeps, mode).
    BeginCapture { mode: Option<u8>, to_graph: bool },
    /// cuStreamEndCapture(stream, CUgraph *out).
    EndCapture,
    /// cuStreamIsCapturing(stream, status *out).
    IsCapturing,
    /// cuStreamGetCaptureInfo*(stream, status *out, id *out, ...).
    CaptureInfo,
    /// cuGraphCreate(CUgraph *out, flags).
    Create,
    /// cuGraphAdd*Node(CUgraphNode *out, graph, deps, ..., params at `at`).
    AddNode { params: Params, at: u8 },
    /// cuGraph*NodeSetParams(node, params).
    SetNode { params: Params },
    /// cuGraphClone(CUgraph *out, original).
    Clone,
    /// cuGraphNodeFindInClone(CUgraphNode *out, original node, clone).
    FindInClone,
    /// cuGraphChildGraphNodeGetGraph(node, CUgraph *out).
    ChildGraph,
    /// cuGraphDestroyNode(node).
    DestroyNode,
    /// cuGraphDestroy(graph).
    Destroy,
    /// cuGraphInstantiate*(CUgraphExec *out, graph, ...).
    Instantiate,
    /// cuGraphExecUpdate*(exec, graph, ...).
    ExecUpdate,
    /// cuGraphExec*NodeSetParams(exec, node, params).
    ExecSetNode { params: Params },
    /// cuGraphNodeSetEnabled(exec, node, enabled).
    ExecSetEnabled,
    /// cuGraphUpload(exec, stream).
    Upload,
    /// cuGraphExecDestroy(exec).
    ExecDestroy,
}

impl GraphOp {
    /// The cookie bits this operation needs beyond `c` (the API id).
    pub fn cookie(self, c: ProbeCookie) -> ProbeCookie {
        let blob = |c: ProbeCookie, params: Params, arg: u32| match params.blob_bytes() {
            Some(n) => c.with_blob_arg(arg, n),
            None => c,
        };
        match self {
            GraphOp::BeginCapture { .. }
            | GraphOp::DestroyNode
            | GraphOp::Destroy
            | GraphOp::ExecUpdate
            | GraphOp::ExecSetEnabled
            | GraphOp::Upload
            | GraphOp::ExecDestroy => c,
            GraphOp::EndCapture | GraphOp::IsCapturing | GraphOp::ChildGraph => c.with_out(0, 1),
            GraphOp::CaptureInfo => c.with_out(0, 1).with_out(1, 2),
            GraphOp::Create | GraphOp::Clone | GraphOp::FindInClone | GraphOp::Instantiate => {
                c.with_out(0, 0)
            }
            GraphOp::AddNode { params, at } => blob(c.with_out(0, 0), params, at as u32),
            GraphOp::SetNode { params } => blob(c, params, 1),
            GraphOp::ExecSetNode { params } => blob(c, params, 2),
        }
    }
}
