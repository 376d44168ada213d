//! The probe catalogue: every API gputrace knows, which library exports it,
//! which family it belongs to, and what each argument means.
//!
//! The eBPF programs are generic; an API's [`Shape`] is turned into the attach
//! cookie (which extra reads the probe makes) and into the decoder of its
//! arguments. Signatures are those of cuda.h (CUDA 12/13) and nccl.h (2.2x).

use std::fmt;
use std::sync::OnceLock;

use tracer_common::ProbeCookie;

/// Which shared library exports the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lib {
    Cuda,
    Nccl,
    Cudart,
}

impl Lib {
    pub const ALL: [Lib; 3] = [Lib::Cuda, Lib::Nccl, Lib::Cudart];

    /// Basename prefixes that identify the library in `/proc/PID/maps`.
    pub fn file_prefix(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so",
            Lib::Nccl => "libnccl.so",
            Lib::Cudart => "libcudart.so",
        }
    }

    /// The name the dynamic loader looks for.
    pub fn soname(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so.1",
            Lib::Nccl => "libnccl.so.2",
            Lib::Cudart => "libcudart.so",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda",
            Lib::Nccl => "libnccl",
            Lib::Cudart => "libcudart",
        }
    }
}

/// Probe groups, as named on the command line (`--probes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Launch,
    Memory,
    Memcpy,
    Sync,
    Names,
    Runtime,
    Nccl,
}

impl Family {
    pub const ALL: [Family; 7] = [
        Family::Launch,
        Family::Memory,
        Family::Memcpy,
        Family::Sync,
        Family::Names,
        Family::Runtime,
        Family::Nccl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Launch => "launch",
            Family::Memory => "memory",
            Family::Memcpy => "memcpy",
            Family::Sync => "sync",
            Family::Names => "names",
            Family::Runtime => "runtime",
            Family::Nccl => "nccl",
        }
    }

    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Copy direction, as the event schema spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    HtoD,
    DtoH,
    DtoD,
    HtoH,
    PtoP,
    Memset,
    Unknown,
}

impl Direction {
    pub const ALL: [Direction; 7] = [
        Direction::HtoD,
        Direction::DtoH,
        Direction::DtoD,
        Direction::HtoH,
        Direction::PtoP,
        Direction::Memset,
        Direction::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Direction::HtoD => "HtoD",
            Direction::DtoH => "DtoH",
            Direction::DtoD => "DtoD",
            Direction::HtoH => "HtoH",
            Direction::PtoP => "PtoP",
            Direction::Memset => "memset",
            Direction::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Direction> {
        Direction::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// What kind of memory an allocation API hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocKind {
    /// Device memory (counts toward device memory in use).
    Device,
    /// Managed (unified) memory: device memory too.
    Managed,
    /// Page-locked host memory.
    Host,
    /// Physical device memory from cuMemCreate (a handle, not an address).
    Physical,
}

impl AllocKind {
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::Device => "device",
            AllocKind::Managed => "managed",
            AllocKind::Host => "host",
            AllocKind::Physical => "physical",
        }
    }
    pub fn parse(s: &str) -> Option<AllocKind> {
        [
            AllocKind::Device,
            AllocKind::Managed,
            AllocKind::Host,
            AllocKind::Physical,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
    /// Whether it occupies GPU memory.
    pub fn on_device(self) -> bool {
        !matches!(self, AllocKind::Host)
    }
}

/// NCCL operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NcclOp {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    Send,
    Recv,
}

impl NcclOp {
    pub fn name(self) -> &'static str {
        match self {
            NcclOp::AllReduce => "AllReduce",
            NcclOp::Broadcast => "Broadcast",
            NcclOp::Reduce => "Reduce",
            NcclOp::AllGather => "AllGather",
            NcclOp::ReduceScatter => "ReduceScatter",
            NcclOp::Send => "Send",
            NcclOp::Recv => "Recv",
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
    /// ncclCommDestroy / ncclCommAbort(comm).
    CommEnd,
    /// cudaLaunchKernel(func, dim3 grid, dim3 block, args, shmem, stream): each
    /// dim3 takes two registers; shmem and stream are on the stack.
    RuntimeLaunch,
    /// cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void* func, void**).
    RuntimeLaunchEx,
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
            Shape::Nccl { stream, .. } if stream >= 6 => c.with_stack(),
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
            | Shape::Nccl { .. }
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

struct Entry(&'static str, &'static [&'static str], Lib, Family, Shape);

fn entries() -> Vec<Entry> {
    use AllocKind::*;
    use Direction::*;
    use Family::*;
    use Lib::*;
    let mc = |dst, src, bytes, stream, dir| Shape::Memcpy {
        dst,
        src,
        bytes,
        stream,
        dir,
    };
    #[allow(clippy::too_many_arguments)]
    let nccl = |op, count, dtype, redop, root, peer, comm, stream| Shape::Nccl {
        op,
        count,
        dtype,
        redop,
        root,
        peer,
        comm,
        stream,
    };
    vec![
        // launch
        Entry("cuLaunchKernel", PTSZ, Cuda, Launch, Shape::Launch),
        Entry("cuLaunchKernelEx", PTSZ, Cuda, Launch, Shape::LaunchEx),
        Entry(
            "cuLaunchCooperativeKernel",
            PTSZ,
            Cuda,
            Launch,
            Shape::Launch,
        ),
        Entry("cuGraphLaunch", PTSZ, Cuda, Launch, Shape::GraphLaunch),
        // memory
        Entry(
            "cuMemAlloc_v2",
            PLAIN,
            Cuda,
            Memory,
            Shape::Alloc {
                kind: Device,
                stream: None,
            },
        ),
        Entry(
            "cuMemAllocAsync",
            PTSZ,
            Cuda,
            Memory,
            Shape::Alloc {
                kind: Device,
                stream: Some(2),
            },
        ),
        Entry(
            "cuMemAllocManaged",
            PLAIN,
            Cuda,
            Memory,
            Shape::Alloc {
                kind: Managed,
                stream: None,
            },
        ),
        Entry("cuMemAllocPitch_v2", PLAIN, Cuda, Memory, Shape::AllocPitch),
        Entry(
            "cuMemHostAlloc",
            PLAIN,
            Cuda,
            Memory,
            Shape::Alloc {
                kind: Host,
                stream: None,
            },
        ),
        Entry(
            "cuMemAllocHost_v2",
            PLAIN,
            Cuda,
            Memory,
            Shape::Alloc {
                kind: Host,
                stream: None,
            },
        ),
        Entry(
            "cuMemFree_v2",
            PLAIN,
            Cuda,
            Memory,
            Shape::Free {
                host: false,
                stream: None,
            },
        ),
        Entry(
            "cuMemFreeAsync",
            PTSZ,
            Cuda,
            Memory,
            Shape::Free {
                host: false,
                stream: Some(1),
            },
        ),
        Entry(
            "cuMemFreeHost",
            PLAIN,
            Cuda,
            Memory,
            Shape::Free {
                host: true,
                stream: None,
            },
        ),
        Entry("cuMemCreate", PLAIN, Cuda, Memory, Shape::MemCreate),
        Entry("cuMemRelease", PLAIN, Cuda, Memory, Shape::MemRelease),
        Entry("cuMemMap", PLAIN, Cuda, Memory, Shape::MemMap),
        Entry("cuMemUnmap", PLAIN, Cuda, Memory, Shape::MemUnmap),
        // memcpy
        Entry("cuMemcpy", PTDS, Cuda, Memcpy, mc(0, 1, 2, None, None)),
        Entry(
            "cuMemcpyAsync",
            PTSZ,
            Cuda,
            Memcpy,
            mc(0, 1, 2, Some(3), None),
        ),
        Entry(
            "cuMemcpyHtoD_v2",
            PTDS,
            Cuda,
            Memcpy,
            mc(0, 1, 2, None, Some(HtoD)),
        ),
        Entry(
            "cuMemcpyDtoH_v2",
            PTDS,
            Cuda,
            Memcpy,
            mc(0, 1, 2, None, Some(DtoH)),
        ),
        Entry(
            "cuMemcpyDtoD_v2",
            PTDS,
            Cuda,
            Memcpy,
            mc(0, 1, 2, None, Some(DtoD)),
        ),
        Entry(
            "cuMemcpyHtoDAsync_v2",
            PTSZ,
            Cuda,
            Memcpy,
            mc(0, 1, 2, Some(3), Some(HtoD)),
        ),
        Entry(
            "cuMemcpyDtoHAsync_v2",
            PTSZ,
            Cuda,
            Memcpy,
            mc(0, 1, 2, Some(3), Some(DtoH)),
        ),
        Entry(
            "cuMemcpyDtoDAsync_v2",
            PTSZ,
            Cuda,
            Memcpy,
            mc(0, 1, 2, Some(3), Some(DtoD)),
        ),
        Entry(
            "cuMemcpyPeer",
            PTDS,
            Cuda,
            Memcpy,
            mc(0, 2, 4, None, Some(PtoP)),
        ),
        Entry(
            "cuMemcpyPeerAsync",
            PTSZ,
            Cuda,
            Memcpy,
            mc(0, 2, 4, Some(5), Some(PtoP)),
        ),
        Entry(
            "cuMemsetD8_v2",
            PTDS,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 1,
                stream: None,
            },
        ),
        Entry(
            "cuMemsetD16_v2",
            PTDS,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 2,
                stream: None,
            },
        ),
        Entry(
            "cuMemsetD32_v2",
            PTDS,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 4,
                stream: None,
            },
        ),
        Entry(
            "cuMemsetD8Async",
            PTSZ,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 1,
                stream: Some(3),
            },
        ),
        Entry(
            "cuMemsetD16Async",
            PTSZ,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 2,
                stream: Some(3),
            },
        ),
        Entry(
            "cuMemsetD32Async",
            PTSZ,
            Cuda,
            Memcpy,
            Shape::Memset {
                elem: 4,
                stream: Some(3),
            },
        ),
        // sync
        Entry(
            "cuStreamSynchronize",
            PTSZ,
            Cuda,
            Sync,
            Shape::Sync {
                stream: Some(0),
                event: None,
            },
        ),
        Entry(
            "cuCtxSynchronize",
            PLAIN,
            Cuda,
            Sync,
            Shape::Sync {
                stream: None,
                event: None,
            },
        ),
        Entry(
            "cuEventSynchronize",
            PLAIN,
            Cuda,
            Sync,
            Shape::Sync {
                stream: None,
                event: Some(0),
            },
        ),
        Entry(
            "cuStreamWaitEvent",
            PTSZ,
            Cuda,
            Sync,
            Shape::Sync {
                stream: Some(0),
                event: Some(1),
            },
        ),
        Entry(
            "cuEventRecord",
            PTSZ,
            Cuda,
            Sync,
            Shape::Sync {
                stream: Some(1),
                event: Some(0),
            },
        ),
        // names
        Entry(
            "cuModuleGetFunction",
            PLAIN,
            Cuda,
            Names,
            Shape::ModuleGetFunction,
        ),
        Entry(
            "cuLibraryGetKernel",
            PLAIN,
            Cuda,
            Names,
            Shape::LibraryGetKernel,
        ),
        Entry(
            "cuKernelGetFunction",
            PLAIN,
            Cuda,
            Names,
            Shape::KernelGetFunction,
        ),
        Entry("cuModuleUnload", PLAIN, Cuda, Names, Shape::Unload),
        Entry("cuLibraryUnload", PLAIN, Cuda, Names, Shape::Unload),
        // runtime (fallback for kernel names)
        Entry(
            "cudaLaunchKernel",
            PTSZ,
            Cudart,
            Runtime,
            Shape::RuntimeLaunch,
        ),
        Entry(
            "cudaLaunchKernelExC",
            PTSZ,
            Cudart,
            Runtime,
            Shape::RuntimeLaunchEx,
        ),
        // nccl (ncclBcast is left out: NCCL implements it by calling
        // ncclBroadcast, which is probed, so one broadcast would count twice)
        Entry(
            "ncclAllReduce",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::AllReduce, 2, 3, Some(4), None, None, 5, 6),
        ),
        Entry(
            "ncclBroadcast",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::Broadcast, 2, 3, None, Some(4), None, 5, 6),
        ),
        Entry(
            "ncclReduce",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::Reduce, 2, 3, Some(4), Some(5), None, 6, 7),
        ),
        Entry(
            "ncclAllGather",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::AllGather, 2, 3, None, None, None, 4, 5),
        ),
        Entry(
            "ncclReduceScatter",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::ReduceScatter, 2, 3, Some(4), None, None, 5, 6),
        ),
        Entry(
            "ncclSend",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::Send, 1, 2, None, None, Some(3), 4, 5),
        ),
        Entry(
            "ncclRecv",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            nccl(NcclOp::Recv, 1, 2, None, None, Some(3), 4, 5),
        ),
        Entry(
            "ncclGroupStart",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::NcclGroup,
        ),
        Entry(
            "ncclGroupEnd",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::NcclGroup,
        ),
        Entry(
            "ncclCommInitRank",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::CommInit,
        ),
        Entry(
            "ncclCommInitRankConfig",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::CommInit,
        ),
        Entry(
            "ncclCommInitAll",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::CommInitAll,
        ),
        Entry(
            "ncclCommDestroy",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::CommEnd,
        ),
        Entry(
            "ncclCommAbort",
            PLAIN,
            Lib::Nccl,
            Family::Nccl,
            Shape::CommEnd,
        ),
    ]
}

/// Every API, each variant its own entry, indexed by id.
pub fn catalogue() -> &'static [Api] {
    static CATALOGUE: OnceLock<Vec<Api>> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let mut out = Vec::new();
        for Entry(base, suffixes, lib, family, shape) in entries() {
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

/// Which families to attach, and whether each gets a return probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSelection {
    /// (family, args only)
    families: Vec<(Family, bool)>,
}

impl Default for ProbeSelection {
    fn default() -> Self {
        Self {
            families: Family::ALL.iter().map(|f| (*f, false)).collect(),
        }
    }
}

impl ProbeSelection {
    /// Parses `launch,memory:args,...`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut families: Vec<(Family, bool)> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, args_only) = match item.split_once(':') {
                Some((n, "args")) => (n, true),
                Some((_, mode)) => {
                    return Err(format!(
                        "unknown probe mode `{mode}` in `{item}` (only `:args`)"
                    ))
                }
                None => (item, false),
            };
            let family = Family::parse(name).ok_or_else(|| {
                let known: Vec<_> = Family::ALL.iter().map(|f| f.name()).collect();
                format!("unknown probe family `{name}` (known: {})", known.join(","))
            })?;
            families.retain(|(f, _)| *f != family);
            families.push((family, args_only));
        }
        if families.is_empty() {
            return Err("no probe family given".into());
        }
        Ok(Self { families })
    }

    /// `None` when the family is not selected, else whether it is args-only.
    pub fn mode(&self, family: Family) -> Option<bool> {
        self.families
            .iter()
            .find(|(f, _)| *f == family)
            .map(|(_, a)| *a)
    }

    pub fn wants_lib(&self, lib: Lib) -> bool {
        catalogue()
            .iter()
            .any(|a| a.lib == lib && self.mode(a.family).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_ids_match() {
        let cat = catalogue();
        for (i, a) in cat.iter().enumerate() {
            assert_eq!(a.id as usize, i);
            assert_eq!(
                cat.iter().filter(|b| b.name == a.name).count(),
                1,
                "{}",
                a.name
            );
        }
        assert!(api_by_name("cuMemcpyHtoDAsync_v2_ptsz").is_some());
        assert!(api_by_name("cuLaunchKernel_ptsz").is_some());
    }

    #[test]
    fn stack_args_are_flagged() {
        assert!(api_by_name("cuLaunchKernel").unwrap().cookie().stack_args());
        assert!(api_by_name("ncclAllReduce").unwrap().cookie().stack_args());
        assert!(api_by_name("ncclReduce").unwrap().cookie().stack_args());
        assert!(!api_by_name("ncclAllGather").unwrap().cookie().stack_args());
        assert!(!api_by_name("ncclSend").unwrap().cookie().stack_args());
        let ex = api_by_name("cuLaunchKernelEx").unwrap().cookie();
        assert_eq!(ex.deref_arg(), 1);
        let pitch = api_by_name("cuMemAllocPitch_v2").unwrap().cookie();
        assert_eq!((pitch.out_arg(0), pitch.out_arg(1)), (1, 2));
        assert_eq!(
            api_by_name("cuModuleGetFunction")
                .unwrap()
                .cookie()
                .str_arg(),
            3
        );
    }

    #[test]
    fn probe_selection_parses() {
        let s = ProbeSelection::parse("launch:args,nccl").unwrap();
        assert_eq!(s.mode(Family::Launch), Some(true));
        assert_eq!(s.mode(Family::Nccl), Some(false));
        assert_eq!(s.mode(Family::Memory), None);
        assert!(ProbeSelection::parse("bogus")
            .unwrap_err()
            .contains("unknown probe family"));
        assert!(ProbeSelection::parse("launch:ret").is_err());
        assert!(!s.wants_lib(Lib::Cudart));
    }
}
