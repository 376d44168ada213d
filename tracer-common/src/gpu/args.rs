//! What gputrace passes to `gputrace_agent_start`, and what the agent's
//! entry points return.

use super::{KIND_ALL, PATH_LEN, PROTOCOL_VERSION};

/// The argument of `int64_t gputrace_agent_start(const struct AgentArgs *)`.
/// gputrace writes it into the target's memory and passes its address.
/// Zero in any numeric field means "the default".
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AgentArgs {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// `KIND_*` bits: what to collect.
    pub kinds: u32,
    /// Ring capacity in records: a power of two in
    /// `MIN_RING_CAPACITY..=MAX_RING_CAPACITY` (0: `DEFAULT_RING_CAPACITY`).
    pub ring_capacity: u64,
    /// Name-area bytes, `MIN_NAMES_SIZE..=MAX_NAMES_SIZE` (0: `DEFAULT_NAMES_SIZE`).
    pub names_size: u64,
    /// How often the agent thread asks CUPTI for completed buffers (ms; 0: 100).
    pub flush_period_ms: u32,
    /// How long the agent waits for gputrace's hello before detaching (ms; 0: 10000).
    pub hello_timeout_ms: u32,
    /// How long the agent thread waits for an API exit to finalize CUPTI
    /// before it leaves that to the callback (ms; 0: 5000).
    pub finalize_timeout_ms: u32,
    /// CUPTI buffer pool: buffers (0: 8, at most 64) ...
    pub buffer_count: u32,
    /// ... of this many bytes each (0: 4 MiB; 4 KiB..=64 MiB, a multiple of 8).
    pub buffer_size: u32,
    /// GPU time sampled: CUPTI collects during this share of each
    /// [`SAMPLE_PERIOD_MS`](super::SAMPLE_PERIOD_MS) (percent, 1..=99; 0 or
    /// 100 and over: all the time).
    pub sample_percent: u32,
    /// The libcupti to use, NUL-terminated (e.g. the path of the copy the
    /// process already maps).
    pub cupti_path: [u8; PATH_LEN],
}

const _: () = assert!(core::mem::size_of::<AgentArgs>() == 48 + PATH_LEN);
const _: () = assert!(core::mem::offset_of!(AgentArgs, ring_capacity) == 8);
const _: () = assert!(core::mem::offset_of!(AgentArgs, flush_period_ms) == 24);
const _: () = assert!(core::mem::offset_of!(AgentArgs, buffer_size) == 40);
const _: () = assert!(core::mem::offset_of!(AgentArgs, cupti_path) == 48);

impl AgentArgs {
    /// Defaults for everything, all kinds, the given libcupti path (cut to
    /// `PATH_LEN - 1` bytes).
    pub fn new(cupti_path: &[u8]) -> Self {
        let mut p = [0u8; PATH_LEN];
        let n = cupti_path.len().min(PATH_LEN - 1);
        p[..n].copy_from_slice(&cupti_path[..n]);
        Self {
            version: PROTOCOL_VERSION,
            kinds: KIND_ALL,
            ring_capacity: 0,
            names_size: 0,
            flush_period_ms: 0,
            hello_timeout_ms: 0,
            finalize_timeout_ms: 0,
            buffer_count: 0,
            buffer_size: 0,
            sample_percent: 0,
            cupti_path: p,
        }
    }

    /// The path up to its NUL, or `None` when there is no NUL.
    pub fn path(&self) -> Option<&[u8]> {
        let n = self.cupti_path.iter().position(|&b| b == 0)?;
        Some(&self.cupti_path[..n])
    }

    /// The struct's bytes, to write into the target.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `AgentArgs` is `#[repr(C)]` plain data without padding
        // (the const asserts above pin every offset), so all its bytes are
        // initialised.
        unsafe {
            core::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                core::mem::size_of::<Self>(),
            )
        }
    }
}

/// Why `gputrace_agent_start` failed, or what `gputrace_agent_join` found.
/// The entry points return `-(reason | detail << 16)` (see [`encode_error`]);
/// `detail` is the CUPTI result or the errno behind it, 0 if none.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentError {
    /// Bad [`AgentArgs`] (path without NUL, capacity not a power of two, ...).
    BadArgs = 1,
    /// [`AgentArgs::version`] is not this agent's [`PROTOCOL_VERSION`].
    BadVersion = 2,
    /// An agent is already running (or still detaching) in this process.
    Busy = 3,
    /// dlopen of the libcupti failed.
    CuptiLoad = 4,
    /// A CUPTI function the agent needs is missing from that libcupti.
    CuptiSymbol = 5,
    /// Another CUPTI subscriber exists (e.g. torch.profiler, Nsight):
    /// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`.
    MultipleSubscribers = 6,
    /// cuptiSubscribe failed for another reason (detail: the CUptiResult).
    Subscribe = 7,
    /// Registering the buffer callbacks or enabling a kind failed (detail: the CUptiResult).
    Enable = 8,
    /// memfd_create/ftruncate/mmap of the shared region failed (detail: errno).
    SharedMemory = 9,
    /// pipe2 failed (detail: errno).
    Pipe = 10,
    /// pthread_create failed (detail: its error number).
    Thread = 11,
    /// The agent panicked (caught; the process goes on).
    Panic = 12,
    /// The CUPTI buffer pool could not be allocated (detail: errno).
    NoMemory = 13,
    /// Called in a child forked from the process the agent started in.
    ForkedChild = 14,
    /// join: no agent was started.
    NotStarted = 15,
    /// join: the agent thread has ended but CUPTI is not finalized yet (no
    /// API exit since the detach began); the library must stay loaded.
    NotFinalized = 16,
    /// The libcupti is older than CUPTI 13 (`cuptiGetVersion` < 130000,
    /// detail: that version), whose record layouts the agent does not read.
    CuptiVersion = 17,
}

/// The oldest `cuptiGetVersion` the agent accepts (CUDA 13's CUPTI reports
/// 130001; CUDA 12's reported small integers and other record layouts).
pub const MIN_CUPTI_VERSION: u32 = 130_000;

impl AgentError {
    pub const fn from_u16(v: u16) -> Option<Self> {
        use AgentError::*;
        Some(match v {
            1 => BadArgs,
            2 => BadVersion,
            3 => Busy,
            4 => CuptiLoad,
            5 => CuptiSymbol,
            6 => MultipleSubscribers,
            7 => Subscribe,
            8 => Enable,
            9 => SharedMemory,
            10 => Pipe,
            11 => Thread,
            12 => Panic,
            13 => NoMemory,
            14 => ForkedChild,
            15 => NotStarted,
            16 => NotFinalized,
            17 => CuptiVersion,
            _ => return None,
        })
    }
}

/// The negative return value for `reason` with `detail` (a CUptiResult or
/// errno; only its low 32 bits are kept).
pub const fn encode_error(reason: AgentError, detail: u32) -> i64 {
    -((reason as i64) | ((detail as i64) << 16))
}

/// Splits a negative return value into its reason (`None` if unknown) and
/// detail; `None` altogether for a value ≥ 0 (success) or one that no agent
/// returns.
pub const fn decode_error(ret: i64) -> Option<(Option<AgentError>, u32)> {
    if ret >= 0 || ret < -((0xffffi64) | (0xffff_ffffi64 << 16)) {
        return None;
    }
    let v = -ret;
    Some((AgentError::from_u16((v & 0xffff) as u16), (v >> 16) as u32))
}
