//! Plain data of the event model, shared by the probes (the catalogue
//! names them), decoding and every output: what a call is about (its
//! family, a copy's direction, an allocation's kind, an NCCL operation) and
//! what could not be recorded.

use std::fmt;

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
    Graphs,
    /// cuBLAS and cuBLASLt GEMMs.
    Blas,
}

impl Family {
    pub const ALL: [Family; 9] = [
        Family::Launch,
        Family::Memory,
        Family::Memcpy,
        Family::Sync,
        Family::Names,
        Family::Runtime,
        Family::Nccl,
        Family::Graphs,
        Family::Blas,
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
            Family::Graphs => "graphs",
            Family::Blas => "blas",
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

    /// NCCL's `ncclFunc_t` (the index of its `seqNumber` counter); `None`
    /// for point-to-point calls, which have no counter.
    pub fn func(self) -> Option<u32> {
        match self {
            NcclOp::Broadcast => Some(0),
            NcclOp::Reduce => Some(1),
            NcclOp::AllGather => Some(2),
            NcclOp::ReduceScatter => Some(3),
            NcclOp::AllReduce => Some(4),
            NcclOp::Send | NcclOp::Recv => None,
        }
    }
}

/// Counts of what the probes could not record, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LostCounts {
    /// The ring buffer was full.
    pub ring_full: u64,
    /// The in-flight map could not take an entry record.
    pub inflight_full: u64,
    /// Returns whose entry record had been evicted.
    pub unpaired: u64,
    /// Stack/struct reads that failed (the call was still recorded).
    pub read_failed: u64,
    /// Call stacks (`--stacks`) the probes could not send: ring buffer
    /// full, or the CPU's scratch buffer in use (the call was still
    /// recorded, without its stack).
    pub stacks_dropped: u64,
    /// Calls counted in the kernel (`--probes FAMILY:counts`) whose process
    /// found no room in the map of counts (absent from the JSON when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub counts_full: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LostCounts {
    /// Calls that were made but are missing from the trace.
    pub fn events_lost(&self) -> u64 {
        self.ring_full + self.inflight_full + self.unpaired + self.counts_full
    }

    /// What was lost since `then` (each count only grows).
    pub fn since(self, then: LostCounts) -> LostCounts {
        LostCounts {
            ring_full: self.ring_full.saturating_sub(then.ring_full),
            inflight_full: self.inflight_full.saturating_sub(then.inflight_full),
            unpaired: self.unpaired.saturating_sub(then.unpaired),
            read_failed: self.read_failed.saturating_sub(then.read_failed),
            stacks_dropped: self.stacks_dropped.saturating_sub(then.stacks_dropped),
            counts_full: self.counts_full.saturating_sub(then.counts_full),
        }
    }
}
