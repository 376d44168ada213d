//! The header at offset 0 of the shared region.
//!
//! Every field is an atomic: the region is shared between two processes and
//! either may write any byte at any time (gputrace must treat the agent's
//! writes as untrusted, and vice versa). The agent writes everything except
//! `tail`; gputrace writes only `tail`.

use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8};

use super::{HEADER_SIZE, MESSAGE_LEN};

/// The agent's state (`Header::state`). Values never change.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    /// Setting up (not yet subscribed).
    Starting = 1,
    /// Collecting.
    Running = 2,
    /// Start failed; `error_code`, `cupti_result` and `message` say why. The
    /// agent undid everything (this state is only seen by a reader that
    /// mapped the region before the agent unmapped it, e.g. in tests).
    Refused = 3,
    /// Kinds disabled and buffers flushed; waiting for an API exit to
    /// finalize CUPTI.
    Detaching = 4,
    /// CUPTI finalized from an API-exit callback; cleaning up.
    Finalized = 5,
    /// The agent released everything; no agent code will run again. The
    /// records already in the ring stay readable through gputrace's mapping.
    Stopped = 6,
}

impl AgentState {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Starting,
            2 => Self::Running,
            3 => Self::Refused,
            4 => Self::Detaching,
            5 => Self::Finalized,
            6 => Self::Stopped,
            _ => return None,
        })
    }
}

/// Which clock the record timestamps are on (`Header::clock`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockKind {
    /// Not known yet.
    Unset = 0,
    /// `CLOCK_MONOTONIC` nanoseconds (the agent's timestamp callback is in
    /// use): the clock of `bpf_ktime_get_ns`. Offset and error are 0.
    Monotonic = 1,
    /// CUPTI's own clock (`CLOCK_REALTIME` on Linux): registering the
    /// timestamp callback failed. `CLOCK_MONOTONIC` = timestamp +
    /// `clock_offset_ns`, to within `clock_error_ns`.
    Cupti = 2,
}

impl ClockKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Unset,
            1 => Self::Monotonic,
            2 => Self::Cupti,
            _ => return None,
        })
    }
}

/// Why the agent detached (`Header::detach_reason`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetachReason {
    None = 0,
    /// gputrace wrote `STOP`.
    Requested = 1,
    /// The pipe reached end-of-file after the hello: gputrace is gone.
    ReaderGone = 2,
    /// No hello within the hello timeout.
    NoHello = 3,
    /// A pipe read or poll failed.
    PipeError = 4,
}

impl DetachReason {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Requested,
            2 => Self::ReaderGone,
            3 => Self::NoHello,
            4 => Self::PipeError,
            _ => return None,
        })
    }
}

/// `Header::features` bits.
/// Driver-API records are on, for the cbids of `API_CBIDS` only
/// (`CUPTI_ACTIVITY_KIND_DRIVER`, every other cbid switched off with
/// `cuptiActivityEnableDriverApi`).
pub const FEATURE_API_BY_CBID: u32 = 1 << 0;
/// `threadId` in API records is the Linux tid (`cuptiSetThreadIdType` worked).
pub const FEATURE_SYSTEM_TID: u32 = 1 << 1;
/// The libcupti was already mapped (opened with `RTLD_NOLOAD`).
pub const FEATURE_CUPTI_PRELOADED: u32 = 1 << 2;
/// Runtime-API records are on, for the cbids of `RUNTIME_API_CBIDS` only
/// (`CUPTI_ACTIVITY_KIND_RUNTIME` narrowed with `cuptiActivityEnableRuntimeApi`).
pub const FEATURE_RUNTIME_API_BY_CBID: u32 = 1 << 3;

/// The header. Offsets are part of the protocol (asserted below).
#[repr(C)]
pub struct Header {
    /// [`super::MAGIC`].
    pub magic: AtomicU64,
    /// [`super::PROTOCOL_VERSION`].
    pub version: AtomicU32,
    /// [`HEADER_SIZE`]: where the ring starts.
    pub header_size: AtomicU32,
    /// [`super::RECORD_SIZE`].
    pub record_size: AtomicU32,
    /// [`AgentState`].
    pub state: AtomicU32,
    /// The process the agent runs in.
    pub pid: AtomicU32,
    /// The pipe's write end, a descriptor number in that process.
    pub pipe_fd: AtomicI32,
    /// Ring position (bytes from the start of the region; = `header_size`).
    pub ring_offset: AtomicU64,
    /// Ring capacity in records (a power of two).
    pub ring_capacity: AtomicU64,
    /// Name area position and size (bytes).
    pub names_offset: AtomicU64,
    pub names_size: AtomicU64,
    /// Bytes of the whole region (a multiple of the page size).
    pub region_size: AtomicU64,
    /// [`ClockKind`].
    pub clock: AtomicU32,
    /// [`super::AgentError`] of a refusal (0: none).
    pub error_code: AtomicU32,
    /// See [`ClockKind::Cupti`].
    pub clock_offset_ns: AtomicI64,
    pub clock_error_ns: AtomicU64,
    /// `cuptiGetVersion` (0 if it failed).
    pub cupti_version: AtomicU32,
    /// The CUptiResult behind `error_code` (0: none).
    pub cupti_result: AtomicU32,
    /// `KIND_*` bits actually enabled.
    pub kinds: AtomicU32,
    /// `FEATURE_*` bits.
    pub features: AtomicU32,
    /// `CLOCK_MONOTONIC` ns when the agent started.
    pub started_ns: AtomicU64,
    /// [`DetachReason`].
    pub detach_reason: AtomicU32,
    /// `AgentArgs::sample_percent` in force (100: not sampled).
    pub sample_percent: AtomicU32,
    // --- written by the agent, its own cache lines (offset 128) ---
    /// Records published: slot `i % capacity` holds record `i` for `i < head`.
    pub head: AtomicU64,
    /// Records the agent put into the ring (= `head`).
    pub records_written: AtomicU64,
    /// Records the agent converted but dropped because the ring was full.
    pub ring_dropped: AtomicU64,
    /// CUPTI's dropped records (`cuptiActivityGetNumDroppedRecords`, summed),
    /// and the work records it handed back without timing (still queued
    /// when a forced flush took their buffer).
    pub cupti_dropped: AtomicU64,
    /// Kernel records whose name did not fit the name area (name id 0).
    pub names_dropped: AtomicU64,
    /// Bytes of the name area in use (names below this are complete).
    pub names_used: AtomicU64,
    /// Buffers CUPTI handed back (completed).
    pub buffers_completed: AtomicU64,
    /// Buffer requests refused because every pool buffer was in use.
    pub buffers_refused: AtomicU64,
    /// CUPTI records of kinds the agent does not convert (skipped).
    pub records_skipped: AtomicU64,
    /// `CLOCK_MONOTONIC` ns of the agent thread's last wake-up.
    pub heartbeat_ns: AtomicU64,
    /// Time CUPTI collected since the start (ns; all of it unless sampled),
    /// up to the agent thread's last wake-up.
    pub sampled_on_ns: AtomicU64,
    /// Sampled: the times CUPTI was finalized between two windows (and
    /// subscribed again for the next).
    pub pauses: AtomicU64,
    /// Sampled: CUPTI could not be switched on again for a window (1 +
    /// the CUptiResult; 0: never). The agent then collects no more and
    /// `message` says why.
    pub resume_error: AtomicU64,
    pub _reserved1: [AtomicU64; 3],
    // --- written by gputrace (offset 256) ---
    /// Records consumed: gputrace stores it (release) after reading them.
    pub tail: AtomicU64,
    pub _reserved2: [AtomicU64; 31],
    // --- offset 512 ---
    /// Why the agent refused or what went wrong, NUL-padded UTF-8.
    pub message: [AtomicU8; MESSAGE_LEN],
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<Header>() == 768);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, state) == 20);
    assert!(offset_of!(Header, pipe_fd) == 28);
    assert!(offset_of!(Header, ring_offset) == 32);
    assert!(offset_of!(Header, ring_capacity) == 40);
    assert!(offset_of!(Header, names_offset) == 48);
    assert!(offset_of!(Header, region_size) == 64);
    assert!(offset_of!(Header, clock) == 72);
    assert!(offset_of!(Header, clock_offset_ns) == 80);
    assert!(offset_of!(Header, clock_error_ns) == 88);
    assert!(offset_of!(Header, cupti_version) == 96);
    assert!(offset_of!(Header, started_ns) == 112);
    assert!(offset_of!(Header, detach_reason) == 120);
    assert!(offset_of!(Header, head) == 128);
    assert!(offset_of!(Header, ring_dropped) == 144);
    assert!(offset_of!(Header, cupti_dropped) == 152);
    assert!(offset_of!(Header, names_dropped) == 160);
    assert!(offset_of!(Header, names_used) == 168);
    assert!(offset_of!(Header, heartbeat_ns) == 200);
    assert!(offset_of!(Header, pauses) == 216);
    assert!(offset_of!(Header, tail) == 256);
    assert!(offset_of!(Header, message) == 512);
};

/// Region geometry for a ring of `capacity` records and a name area of
/// `names_size` bytes: (names offset, region size), region size rounded up
/// to `page`. `None` on overflow.
pub const fn region_layout(capacity: u64, names_size: u64, page: u64) -> Option<(u64, u64)> {
    let ring = match capacity.checked_mul(super::RECORD_SIZE as u64) {
        Some(r) => r,
        None => return None,
    };
    let names_offset = match (HEADER_SIZE as u64).checked_add(ring) {
        Some(o) => o,
        None => return None,
    };
    let end = match names_offset.checked_add(names_size) {
        Some(e) => e,
        None => return None,
    };
    if page == 0 {
        return None;
    }
    match end.checked_add(page - 1) {
        Some(v) => Some((names_offset, v / page * page)),
        None => None,
    }
}
