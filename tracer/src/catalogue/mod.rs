//! The probe catalogue: every API gputrace knows, which library exports it,
//! which family it belongs to, and what each argument means.
//!
//! The eBPF programs are generic; an API's [`Shape`] is turned into the attach
//! cookie (which extra reads the probe makes) and into the decoder of its
//! arguments. Signatures are those of cuda.h (CUDA 12/13) and nccl.h (2.2x).

pub(crate) mod blas_apis;
pub(crate) mod graph_apis;

use std::sync::OnceLock;

use tracer_common::ProbeCookie;

use crate::catalogue::blas_apis::{Blas, BlasRow};
use crate::catalogue::graph_apis::GraphRow;
use crate::model::gemm::GemmForm;
use crate::model::graph::GraphOp;
use crate::model::lt::LtOp;
use crate::model::types::AllocKind;
use crate::model::types::Direction;
use crate::model::types::Family;
use crate::model::types::NcclOp;

/// Which shared library exports the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lib {
    Cuda,
    Nccl,
    Cudart,
    Cublas,
    CublasLt,
}

impl Lib {
    pub const ALL: [Lib; 5] = [
        Lib::Cuda,
        Lib::Nccl,
        Lib::Cudart,
        Lib::Cublas,
        Lib::CublasLt,
    ];

    /// Basename prefixes that identify the library in `/proc/PID/maps`.
    pub fn file_prefix(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so",
            Lib::Nccl => "libnccl.so",
            Lib::Cudart => "libcudart.so",
            Lib::Cublas => "libcublas.so",
            Lib::CublasLt => "libcublasLt.so",
        }
    }

    /// The names the dynamic loader is asked for, newest first (where a
    /// command started with `-- CMD` would find the library before it
    /// loads it).
    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            Lib::Cuda => &["libcuda.so.1"],
            Lib::Nccl => &["libnccl.so.2"],
            Lib::Cudart => &["libcudart.so.13", "libcudart.so.12"],
            Lib::Cublas => &["libcublas.so.13", "libcublas.so.12"],
            Lib::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12"],
        }
    }

    /// Where the library's probes go in attach order: libcuda's first. A
    /// call of the others (a cuBLAS GEMM, an NCCL collective, a runtime
    /// launch) makes libcuda calls inside it; attached after, each of its
    /// calls seen has the launches it made seen too (attaching hundreds of
    /// probes takes a while).
    pub fn attach_order(self) -> u8 {
        match self {
            Lib::Cuda => 0,
            Lib::Cudart | Lib::Nccl | Lib::Cublas | Lib::CublasLt => 1,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda",
            Lib::Nccl => "libnccl",
            Lib::Cudart => "libcudart",
            Lib::Cublas => "libcublas",
            Lib::CublasLt => "libcublasLt",
        }
    }
}

/// Argument positions are 0-based; 6 and above are on the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// cuLaunchKernel / cuLaunchCooperativeKernel: f, gx, gy, gz, bx, by, bz, shmem, stream, ...
    Launch,
    /// cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**).
    LaunchEx,
    /// cuGraphLaunch(CUgraphExec, CUstream).
    GraphLaunch,
    /// (CUdeviceptr* out, size_t bytes, [stream]).
    Alloc { kind: AllocKind, stream: Option<u8> },
    /// cuMemAllocPitch_v2(CUdeviceptr*, size_t* pitch, width, height, elem).
    AllocPitch,
    /// cuMemCreate(handle*, size, prop*, flags).
    MemCreate,
    /// (ptr, [stream]) for device frees, (ptr) for host frees.
    Free { host: bool, stream: Option<u8> },
    /// cuMemRelease(handle).
    MemRelease,
    /// cuMemMap(ptr, size, offset, handle, flags).
    MemMap,
    /// cuMemUnmap(ptr, size).
    MemUnmap,
    /// A copy: where dst, src, bytes and stream are, and the direction if fixed.
    Memcpy {
        dst: u8,
        src: u8,
        bytes: u8,
        stream: Option<u8>,
        dir: Option<Direction>,
    },
    /// cuMemsetD{8,16,32}: (dst, value, n, [stream]).
    Memset { elem: u8, stream: Option<u8> },
    /// Waits and stream/event bookkeeping.
    Sync {
        stream: Option<u8>,
        event: Option<u8>,
    },
    /// cuModuleGetFunction(CUfunction*, CUmodule, const char*).
    ModuleGetFunction,
    /// cuLibraryGetKernel(CUkernel*, CUlibrary, const char*).
    LibraryGetKernel,
    /// cuKernelGetFunction(CUfunction*, CUkernel).
    KernelGetFunction,
    /// cuModuleUnload(CUmodule) / cuLibraryUnload(CUlibrary).
    Unload,
    /// A collective or point-to-point call.
    Nccl {
        op: NcclOp,
        count: u8,
        dtype: u8,
        redop: Option<u8>,
        root: Option<u8>,
        peer: Option<u8>,
        comm: u8,
        stream: u8,
    },
    /// ncclGroupStart / ncclGroupEnd.
    NcclGroup,
    /// ncclCommInitRank(comm*, nranks, ncclUniqueId by value, rank[, config]):
    /// the 128-byte id goes on the stack, so `rank` is the third register.
    CommInit,
    /// ncclCommInitAll(comm*, ndev, devlist).
    CommInitAll,
    /// ncclCommInitRankScalable(comm*, nranks, rank, nId, ncclUniqueId* ids, config*):
    /// the first id is read through the pointer.
    CommInitScalable,
    /// ncclCommSplit(comm, color, key, newcomm*, config*).
    CommSplit,
    /// ncclCommDestroy / ncclCommAbort(comm).
    CommEnd,
    /// cudaLaunchKernel(func, dim3 grid, dim3 block, args, shmem, stream): each
    /// dim3 takes two registers; shmem and stream are on the stack.
    RuntimeLaunch,
    /// cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void* func, void**).
    RuntimeLaunchEx,
    /// Stream capture, graph construction and executable graphs (`graph_apis`).
    Graph(GraphOp),
    /// A cuBLAS GEMM; `wide`: the `_64` form (int64 sizes).
    Gemm { form: GemmForm, wide: bool },
    /// cublasLtMatmul and its descriptor calls (`blas_apis`).
    Lt(LtOp),
}

impl Shape {
    /// The cookie bits (beyond the API id) this shape needs.
    pub fn cookie(self, api: u16) -> ProbeCookie {
        let c = ProbeCookie::new(api);
        match self {
            Shape::Launch => c.with_stack(),
            Shape::LaunchEx => c.with_deref(0),
            Shape::RuntimeLaunch => c.with_stack().with_runtime_set(0),
            Shape::RuntimeLaunchEx => c.with_deref(0).with_runtime_set(1),
            Shape::Alloc { .. } | Shape::MemCreate | Shape::CommInitAll => c.with_out(0, 0),
            // The ncclUniqueId is passed by value: on the stack at rsp + 8.
            Shape::CommInit => c.with_out(0, 0).with_blob_stack(128),
            Shape::AllocPitch => c.with_out(0, 0).with_out(1, 1),
            Shape::ModuleGetFunction | Shape::LibraryGetKernel => c.with_out(0, 0).with_str(2),
            Shape::KernelGetFunction => c.with_out(0, 0),
            // Every NCCL call reads its communicator at entry (identity,
            // sequence counter); the layout slot is added per library file.
            Shape::Nccl {
                op, comm, stream, ..
            } => {
                let c = if stream >= 6 { c.with_stack() } else { c };
                c.with_comm(u32::from(comm), op.func())
            }
            Shape::Graph(op) => op.cookie(c),
            Shape::Gemm { form, .. } => match form.stack_bytes() {
                0 => c,
                n => c.with_blob_stack(n),
            },
            // Creates: the handle through the out-pointer at return;
            // attributes: the value behind `buf`; the matmul: Bdesc and
            // Cdesc on the stack, and its four descriptors' first bytes
            // (`lt`: for those made before the attach).
            Shape::Lt(LtOp::DescCreate | LtOp::LayoutCreate) => c.with_out(0, 0),
            Shape::Lt(LtOp::DescSet | LtOp::LayoutSet) => c.with_deref(2),
            Shape::Lt(LtOp::Matmul) => c.with_stack().with_lt_matmul_blob(),
            Shape::Lt(LtOp::DescDestroy | LtOp::LayoutDestroy) => c,
            Shape::CommInitScalable => c.with_out(0, 0).with_blob_arg(4, 128),
            Shape::CommSplit => c.with_out(0, 3),
            Shape::Memcpy { dir: None, .. } => c.with_readable(),
            Shape::Memcpy { .. }
            | Shape::Memset { .. }
            | Shape::GraphLaunch
            | Shape::Free { .. }
            | Shape::MemRelease
            | Shape::MemMap
            | Shape::MemUnmap
            | Shape::Sync { .. }
            | Shape::Unload
            | Shape::NcclGroup
            | Shape::CommEnd => c,
        }
    }
}

/// One exported symbol gputrace can probe.
#[derive(Debug, PartialEq, Eq)]
pub struct Api {
    /// Index in [`catalogue()`]; the low 16 bits of the cookie.
    pub id: u16,
    /// The exported symbol name, as called.
    pub name: &'static str,
    pub lib: Lib,
    pub family: Family,
    pub shape: Shape,
}

impl Api {
    pub fn cookie(&self) -> ProbeCookie {
        self.shape.cookie(self.id)
    }

    /// Whether `--overhead-budget` may sample this API: what a busy process
    /// calls tens of thousands of times a second (launches, copies and sets
    /// on a stream, event records, stream waits) and thousands (capture
    /// status queries, GEMMs). Allocations, frees, synchronisations, NCCL, graph
    /// construction and names stay exact.
    pub fn samplable(&self) -> bool {
        match self.shape {
            Shape::Launch
            | Shape::LaunchEx
            | Shape::GraphLaunch
            | Shape::RuntimeLaunch
            | Shape::RuntimeLaunchEx => true,
            Shape::Memcpy { stream, .. } | Shape::Memset { stream, .. } => stream.is_some(),
            // cuEventRecord(WithFlags), cuStreamWaitEvent.
            Shape::Sync {
                stream: Some(_),
                event: Some(_),
            } => true,
            // Queries of a stream's capture status: libraries ask before
            // their work on a stream (cuBLAS, PyTorch's allocator and
            // random numbers), thousands of times a second.
            Shape::Graph(GraphOp::IsCapturing | GraphOp::CaptureInfo) => true,
            // GEMMs and cuBLASLt's descriptor calls: a model makes hundreds
            // a step (11 calls per cublasLtMatmul), too many to trace in
            // full under a budget. A matmul whose descriptors were made
            // while these were off takes its shape from the descriptors'
            // bytes its probe copied (`lt`), where its library is calibrated.
            Shape::Gemm { .. } | Shape::Lt(_) => true,
            _ => false,
        }
    }

    /// Whether `--probes FAMILY:counts` counts this API in the kernel: the
    /// busy calls whose metrics are their count and latency alone (kernel
    /// launches, event records and stream waits, capture status queries).
    /// What carries more (copies' bytes, graph launches' kernels, GEMMs'
    /// shapes, the runtime's host stubs) keeps its records.
    pub fn countable(&self) -> bool {
        matches!(
            self.shape,
            Shape::Launch
                | Shape::LaunchEx
                | Shape::Sync {
                    stream: Some(_),
                    event: Some(_),
                }
                | Shape::Graph(GraphOp::IsCapturing | GraphOp::CaptureInfo)
        )
    }

    /// The cookie as attached with `selection`: launches look up the
    /// runtime's host stub when `runtime_stubs` (the runtime family is
    /// traced and handles cannot be named: the lookup costs a map access per
    /// launch); the runtime family always has a return probe (it clears the stub).
    pub fn cookie_for(
        &self,
        selection: &ProbeSelection,
        runtime_stubs: bool,
    ) -> (ProbeCookie, bool) {
        let mut c = self.cookie();
        if matches!(self.shape, Shape::Launch | Shape::LaunchEx)
            && runtime_stubs
            && selection.mode(Family::Runtime).is_some()
        {
            c = c.with_runtime_get();
        }
        if selection.probe_mode(self.family) == Some(ProbeMode::Counts) && self.countable() {
            // Counted: no record, so no argument read either.
            let c = ProbeCookie::new(self.id).with_counted();
            return (c.with_time_every(selection.time_every), false);
        }
        let args_only = selection.mode(self.family) == Some(true) && self.family != Family::Runtime;
        if args_only {
            c = c.with_entry_only();
        }
        (c, args_only)
    }
}

const PTSZ: &[&str] = &["", "_ptsz"];
const PTDS: &[&str] = &["", "_ptds"];
const PLAIN: &[&str] = &[""];

/// One row of the table: the symbol, its variants' suffixes, the library
/// that exports it, its family, and where its arguments are.
struct Row(&'static str, &'static [&'static str], Lib, Family, Shape);

/// The table. Argument positions are 0-based (6 and above are on the stack).
#[rustfmt::skip]
fn rows() -> Vec<Row> {
    use AllocKind::{Device, Host, Managed};
    use Direction::{DtoD, DtoH, HtoD, PtoP};
    use Family::{Launch, Memcpy, Memory, Names, Runtime, Sync};
    use Lib::{Cuda, Cudart};
    use NcclOp::*;
    use Shape as S;
    let alloc = |kind, stream| S::Alloc { kind, stream };
    let free = |host, stream| S::Free { host, stream };
    let copy = |dst, src, bytes, stream, dir| S::Memcpy { dst, src, bytes, stream, dir };
    let memset = |elem, stream| S::Memset { elem, stream };
    let sync = |stream, event| S::Sync { stream, event };
    // (op, count, datatype, redop, root, peer, comm, stream)
    let nccl = |op, count, dtype, redop, root, peer, comm, stream| {
        S::Nccl { op, count, dtype, redop, root, peer, comm, stream }
    };
    let (libnccl, collective) = (Lib::Nccl, Family::Nccl);
    vec![
        Row("cuLaunchKernel",            PTSZ,  Cuda, Launch, S::Launch),
        Row("cuLaunchKernelEx",          PTSZ,  Cuda, Launch, S::LaunchEx),
        Row("cuLaunchCooperativeKernel", PTSZ,  Cuda, Launch, S::Launch),
        Row("cuGraphLaunch",             PTSZ,  Cuda, Launch, S::GraphLaunch),

        Row("cuMemAlloc_v2",       PLAIN, Cuda, Memory, alloc(Device, None)),
        Row("cuMemAllocAsync",     PTSZ,  Cuda, Memory, alloc(Device, Some(2))),
        Row("cuMemAllocManaged",   PLAIN, Cuda, Memory, alloc(Managed, None)),
        Row("cuMemAllocPitch_v2",  PLAIN, Cuda, Memory, S::AllocPitch),
        Row("cuMemHostAlloc",      PLAIN, Cuda, Memory, alloc(Host, None)),
        Row("cuMemAllocHost_v2",   PLAIN, Cuda, Memory, alloc(Host, None)),
        Row("cuMemFree_v2",        PLAIN, Cuda, Memory, free(false, None)),
        Row("cuMemFreeAsync",      PTSZ,  Cuda, Memory, free(false, Some(1))),
        Row("cuMemFreeHost",       PLAIN, Cuda, Memory, free(true, None)),
        Row("cuMemCreate",         PLAIN, Cuda, Memory, S::MemCreate),
        Row("cuMemRelease",        PLAIN, Cuda, Memory, S::MemRelease),
        Row("cuMemMap",            PLAIN, Cuda, Memory, S::MemMap),
        Row("cuMemUnmap",          PLAIN, Cuda, Memory, S::MemUnmap),

        Row("cuMemcpy",             PTDS, Cuda, Memcpy, copy(0, 1, 2, None, None)),
        Row("cuMemcpyAsync",        PTSZ, Cuda, Memcpy, copy(0, 1, 2, Some(3), None)),
        Row("cuMemcpyHtoD_v2",      PTDS, Cuda, Memcpy, copy(0, 1, 2, None, Some(HtoD))),
        Row("cuMemcpyDtoH_v2",      PTDS, Cuda, Memcpy, copy(0, 1, 2, None, Some(DtoH))),
        Row("cuMemcpyDtoD_v2",      PTDS, Cuda, Memcpy, copy(0, 1, 2, None, Some(DtoD))),
        Row("cuMemcpyHtoDAsync_v2", PTSZ, Cuda, Memcpy, copy(0, 1, 2, Some(3), Some(HtoD))),
        Row("cuMemcpyDtoHAsync_v2", PTSZ, Cuda, Memcpy, copy(0, 1, 2, Some(3), Some(DtoH))),
        Row("cuMemcpyDtoDAsync_v2", PTSZ, Cuda, Memcpy, copy(0, 1, 2, Some(3), Some(DtoD))),
        Row("cuMemcpyPeer",         PTDS, Cuda, Memcpy, copy(0, 2, 4, None, Some(PtoP))),
        Row("cuMemcpyPeerAsync",    PTSZ, Cuda, Memcpy, copy(0, 2, 4, Some(5), Some(PtoP))),
        Row("cuMemsetD8_v2",        PTDS, Cuda, Memcpy, memset(1, None)),
        Row("cuMemsetD16_v2",       PTDS, Cuda, Memcpy, memset(2, None)),
        Row("cuMemsetD32_v2",       PTDS, Cuda, Memcpy, memset(4, None)),
        Row("cuMemsetD8Async",      PTSZ, Cuda, Memcpy, memset(1, Some(3))),
        Row("cuMemsetD16Async",     PTSZ, Cuda, Memcpy, memset(2, Some(3))),
        Row("cuMemsetD32Async",     PTSZ, Cuda, Memcpy, memset(4, Some(3))),

        Row("cuStreamSynchronize", PTSZ,  Cuda, Sync, sync(Some(0), None)),
        Row("cuCtxSynchronize",    PLAIN, Cuda, Sync, sync(None, None)),
        Row("cuEventSynchronize",  PLAIN, Cuda, Sync, sync(None, Some(0))),
        Row("cuStreamWaitEvent",   PTSZ,  Cuda, Sync, sync(Some(0), Some(1))),
        Row("cuEventRecord",       PTSZ,  Cuda, Sync, sync(Some(1), Some(0))),
        Row("cuEventRecordWithFlags", PTSZ, Cuda, Sync, sync(Some(1), Some(0))),

        Row("cuModuleGetFunction", PLAIN, Cuda, Names, S::ModuleGetFunction),
        Row("cuLibraryGetKernel",  PLAIN, Cuda, Names, S::LibraryGetKernel),
        Row("cuKernelGetFunction", PLAIN, Cuda, Names, S::KernelGetFunction),
        Row("cuModuleUnload",      PLAIN, Cuda, Names, S::Unload),
        Row("cuLibraryUnload",     PLAIN, Cuda, Names, S::Unload),

        // The runtime: a fallback for kernel names (see names/).
        Row("cudaLaunchKernel",    PTSZ, Cudart, Runtime, S::RuntimeLaunch),
        Row("cudaLaunchKernelExC", PTSZ, Cudart, Runtime, S::RuntimeLaunchEx),

        // ncclBcast is left out: NCCL implements it by calling ncclBroadcast,
        // which is probed, so one broadcast would count twice.
        Row("ncclAllReduce",     PLAIN, libnccl, collective, nccl(AllReduce, 2, 3, Some(4), None, None, 5, 6)),
        Row("ncclBroadcast",     PLAIN, libnccl, collective, nccl(Broadcast, 2, 3, None, Some(4), None, 5, 6)),
        Row("ncclReduce",        PLAIN, libnccl, collective, nccl(Reduce, 2, 3, Some(4), Some(5), None, 6, 7)),
        Row("ncclAllGather",     PLAIN, libnccl, collective, nccl(AllGather, 2, 3, None, None, None, 4, 5)),
        Row("ncclReduceScatter", PLAIN, libnccl, collective, nccl(ReduceScatter, 2, 3, Some(4), None, None, 5, 6)),
        Row("ncclSend",          PLAIN, libnccl, collective, nccl(Send, 1, 2, None, None, Some(3), 4, 5)),
        Row("ncclRecv",          PLAIN, libnccl, collective, nccl(Recv, 1, 2, None, None, Some(3), 4, 5)),
        Row("ncclGroupStart",         PLAIN, libnccl, collective, S::NcclGroup),
        Row("ncclGroupEnd",           PLAIN, libnccl, collective, S::NcclGroup),
        Row("ncclCommInitRank",       PLAIN, libnccl, collective, S::CommInit),
        Row("ncclCommInitRankConfig", PLAIN, libnccl, collective, S::CommInit),
        Row("ncclCommInitAll",        PLAIN, libnccl, collective, S::CommInitAll),
        Row("ncclCommInitRankScalable", PLAIN, libnccl, collective, S::CommInitScalable),
        Row("ncclCommSplit",          PLAIN, libnccl, collective, S::CommSplit),
        Row("ncclCommDestroy",        PLAIN, libnccl, collective, S::CommEnd),
        Row("ncclCommAbort",          PLAIN, libnccl, collective, S::CommEnd),
    ]
}

/// Every API, each variant its own entry, indexed by id.
pub fn catalogue() -> &'static [Api] {
    static CATALOGUE: OnceLock<Vec<Api>> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let mut out = Vec::new();
        let graphs = graph_apis::rows()
            .into_iter()
            .map(|GraphRow(base, suffixes, op)| {
                Row(base, suffixes, Lib::Cuda, Family::Graphs, Shape::Graph(op))
            });
        let blas = blas_apis::rows().into_iter().map(|BlasRow(name, api)| {
            let (lib, shape) = match api {
                Blas::Gemm { form, wide } => (Lib::Cublas, Shape::Gemm { form, wide }),
                Blas::Lt(op) => (Lib::CublasLt, Shape::Lt(op)),
            };
            Row(name, PLAIN, lib, Family::Blas, shape)
        });
        for Row(base, suffixes, lib, family, shape) in rows().into_iter().chain(graphs).chain(blas)
        {
            for suffix in suffixes {
                let name: &'static str = if suffix.is_empty() {
                    base
                } else {
                    Box::leak(format!("{base}{suffix}").into_boxed_str())
                };
                let id = u16::try_from(out.len()).expect("catalogue fits u16");
                out.push(Api {
                    id,
                    name,
                    lib,
                    family,
                    shape,
                });
            }
        }
        out
    })
}

pub fn api(id: u32) -> Option<&'static Api> {
    catalogue().get(id as usize)
}

pub fn api_by_name(name: &str) -> Option<&'static Api> {
    catalogue().iter().find(|a| a.name == name)
}

/// How a family's calls are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeMode {
    /// Each call recorded at its return: arguments, result, latency.
    Full,
    /// `:args`: each call recorded at its entry, no return probe.
    Args,
    /// `:counts`: its busy calls ([`Api::countable`]) counted in the kernel
    /// per process and API (calls and a latency histogram), with no
    /// record of each; its other calls as `Full`. For the daemon's metrics.
    Counts,
}

/// Which families to attach, and how each is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSelection {
    families: Vec<(Family, ProbeMode)>,
    /// `:counts`: one call in this many timed where the kernel has uprobe
    /// sessions (`--counts-time-every`).
    time_every: u16,
}

/// `--counts-time-every`'s default: one counted call in 16 timed.
pub const COUNTS_TIME_EVERY: u16 = 16;

impl Default for ProbeSelection {
    fn default() -> Self {
        Self {
            families: Family::ALL.iter().map(|f| (*f, ProbeMode::Full)).collect(),
            time_every: COUNTS_TIME_EVERY,
        }
    }
}

impl ProbeSelection {
    /// Parses `launch,memory:args,sync:counts,...`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut families: Vec<(Family, ProbeMode)> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, mode) = match item.split_once(':') {
                Some((n, "args")) => (n, ProbeMode::Args),
                Some((n, "counts")) => (n, ProbeMode::Counts),
                Some((_, mode)) => {
                    return Err(format!(
                        "unknown probe mode `{mode}` in `{item}` (`:args` or `:counts`)"
                    ))
                }
                None => (item, ProbeMode::Full),
            };
            let family = Family::parse(name).ok_or_else(|| {
                let known: Vec<_> = Family::ALL.iter().map(|f| f.name()).collect();
                format!("unknown probe family `{name}` (known: {})", known.join(","))
            })?;
            match families.iter().find(|(f, _)| *f == family) {
                // The same twice is harmless; two modes at once is a contradiction.
                Some((_, m)) if *m != mode => {
                    return Err(format!(
                        "`{name}` is given in two modes (plain, `:args`, `:counts`): choose one"
                    ))
                }
                Some(_) => {}
                None => families.push((family, mode)),
            }
        }
        if families.is_empty() {
            return Err("no probe family given".into());
        }
        Ok(Self {
            families,
            time_every: COUNTS_TIME_EVERY,
        })
    }

    /// `:counts`: time one call in `n` (1: every call).
    pub fn with_time_every(mut self, n: u16) -> Self {
        self.time_every = n.max(1);
        self
    }

    /// `None` when the family is not selected, else whether it is args-only.
    pub fn mode(&self, family: Family) -> Option<bool> {
        self.probe_mode(family).map(|m| m == ProbeMode::Args)
    }

    /// How the family is recorded; `None` when it is not selected.
    pub fn probe_mode(&self, family: Family) -> Option<ProbeMode> {
        self.families
            .iter()
            .find(|(f, _)| *f == family)
            .map(|(_, m)| *m)
    }

    /// Whether some family is counted in the kernel (`:counts`).
    pub fn counts_any(&self) -> bool {
        self.families.iter().any(|(_, m)| *m == ProbeMode::Counts)
    }

    pub fn wants_lib(&self, lib: Lib) -> bool {
        catalogue()
            .iter()
            .any(|a| a.lib == lib && self.mode(a.family).is_some())
    }
}

#[cfg(test)]
mod tests;
