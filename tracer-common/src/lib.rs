//! Types shared by the eBPF programs and the userspace tracer.
//!
//! Everything here is `#[repr(C)]` with explicit padding so both sides agree
//! on the byte layout. The eBPF side is generic: it knows nothing of CUDA.
//! Each attached probe carries a 64-bit *cookie* ([`ProbeCookie`]) that tells
//! the one entry program and the one return program which API this is and
//! which arguments need extra reads (stack, structs, out-pointers, strings).
#![no_std]

mod comm;
mod counted;
// The GPU-time agent's shared memory: userspace only (the eBPF target has no
// 32-bit atomics).
#[cfg(not(target_arch = "bpf"))]
pub mod gpu;
pub mod stack;
pub use comm::*;
pub use counted::*;

/// Integer arguments passed in registers by the System V x86-64 ABI.
pub const REG_ARGS: usize = 6;
/// Arguments past the sixth are read from the caller's stack.
pub const STACK_ARGS: usize = 5;
/// `args` holds the six register arguments, then up to five stack arguments.
pub const MAX_ARGS: usize = REG_ARGS + STACK_ARGS;
/// Words of extra data: a struct copied at entry, or out-pointer values read at return.
pub const EXTRA_WORDS: usize = 6;
/// Bytes copied from a struct pointer argument at entry (`CUlaunchConfig` up to `attrs`).
pub const DEREF_BYTES: usize = 40;
/// Longest string argument (a kernel name) copied by the probe, NUL included.
pub const NAME_LEN: usize = 512;
/// Most bytes a probe copies at entry into a [`BlobCallEvent`] (a struct
/// behind a pointer argument, or a struct passed by value on the stack).
pub const BLOB_LEN: usize = 256;
/// [`ProbeCookie::blob_source`] value meaning "the caller's stack at
/// `rsp + 8`": where the System V ABI puts an argument passed by value in
/// memory (a struct over 16 bytes, e.g. the 128-byte `ncclUniqueId`), and
/// the seventh and later integer arguments.
pub const BLOB_FROM_STACK: u32 = 15;
/// A blob source: `cublasLtMatmul`'s descriptors, the first
/// [`LT_PART`] bytes of each of its arguments 1 (computeDesc), 4 (Adesc),
/// 6 (Bdesc) and 9 (Cdesc), 0-based, one after the other.
pub const BLOB_LT_MATMUL: u32 = 14;
/// Bytes copied of each `cublasLtMatmul` descriptor.
pub const LT_PART: usize = 64;
/// `cublasLtMatmul`'s descriptor arguments (1-based) a [`BLOB_LT_MATMUL`]
/// copies, in order.
pub const LT_ARGS: [u32; 4] = [2, 5, 7, 10];

/// Where the readability bits of arguments 0 and 1 go in `extra` (copies).
pub const READABLE_SLOT: usize = 5;
/// Where a launch gets the runtime's host stub in `extra` (launches).
pub const RUNTIME_SLOT: usize = 5;

/// `dur_ns` of a call recorded at entry only (no return probe).
pub const NO_RETURN: u64 = u64::MAX;

/// The kind of a ring buffer record. Values never change; gaps stay gaps.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A [`CallEvent`].
    Call = 1,
    /// A [`NamedCallEvent`]: a call with a string argument (kernel name).
    NamedCall = 2,
    /// A [`BlobCallEvent`]: a call with bytes copied at its entry.
    BlobCall = 3,
    /// A [`stack::StackRecord`]: the caller's stack, sent before its call.
    Stack = 4,
    /// An [`ExecEvent`]: a process began a new program.
    Exec = 5,
}

impl EventKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Call),
            2 => Some(Self::NamedCall),
            3 => Some(Self::BlobCall),
            4 => Some(Self::Stack),
            5 => Some(Self::Exec),
            _ => None,
        }
    }
}

/// A process began a new program (`execve`), sent by the
/// `sched_process_exec` tracepoint in order with the calls in the ring
/// buffer: the calls before it are the old program's, the calls after it
/// the new one's. Sent for every exec on the host; userspace keeps those of
/// processes it traces.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecEvent {
    /// [`EventKind::Exec`] as u32.
    pub kind: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// When, `CLOCK_MONOTONIC` nanoseconds (`bpf_ktime_get_ns`).
    pub ts_ns: u64,
    /// The new program's name (the kernel sets it from the file executed).
    pub comm: [u8; 16],
}

impl ExecEvent {
    pub const SIZE: usize = core::mem::size_of::<Self>();
}

/// One traced call: written at entry into the in-flight map, completed and
/// sent at return (or sent at entry when the family is traced `:args` only).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallEvent {
    /// [`EventKind`] as u32.
    pub kind: u32,
    /// Index into the userspace API catalogue (the cookie's low 16 bits).
    pub api: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Entry time, `CLOCK_MONOTONIC` nanoseconds (`bpf_ktime_get_ns`).
    pub start_ns: u64,
    /// Time spent in the call, or [`NO_RETURN`].
    pub dur_ns: u64,
    /// The return register (`rax`), 0 when there is no return probe.
    pub ret: u64,
    /// The calling thread's name.
    pub comm: [u8; 16],
    /// Register arguments, then stack arguments when the cookie asks for them.
    pub args: [u64; MAX_ARGS],
    /// A struct copied at entry, or values behind out-pointers read at return.
    pub extra: [u64; EXTRA_WORDS],
}

impl CallEvent {
    pub const SIZE: usize = core::mem::size_of::<Self>();

    pub const fn zeroed() -> Self {
        Self {
            kind: 0,
            api: 0,
            pid: 0,
            tid: 0,
            start_ns: 0,
            dur_ns: 0,
            ret: 0,
            comm: [0; 16],
            args: [0; MAX_ARGS],
            extra: [0; EXTRA_WORDS],
        }
    }
}

/// A call with a string argument, read with `bpf_probe_read_user_str`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NamedCallEvent {
    pub call: CallEvent,
    /// Bytes in `name` before the NUL; `NAME_LEN - 1` means it may be cut short.
    pub name_len: u32,
    pub _pad: u32,
    pub name: [u8; NAME_LEN],
}

impl NamedCallEvent {
    pub const SIZE: usize = core::mem::size_of::<Self>();
}

/// A call with up to [`BLOB_LEN`] bytes copied at its entry, from where the
/// cookie's blob bits say. For a call with a return probe the bytes wait in
/// a map of their own between entry and return, so in-flight calls without
/// a blob stay [`CallEvent`]-sized.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlobCallEvent {
    pub call: CallEvent,
    /// Bytes of `blob` that were read: the cookie's length, or 0 when the
    /// read failed (counted as [`LostReason::ReadFailed`]).
    pub blob_len: u32,
    pub _pad: u32,
    pub blob: [u8; BLOB_LEN],
}

impl BlobCallEvent {
    pub const SIZE: usize = core::mem::size_of::<Self>();
}

/// The bytes of a [`BlobCallEvent`] between a call's entry and its return.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Blob {
    pub len: u32,
    pub _pad: u32,
    pub data: [u8; BLOB_LEN],
}

impl Blob {
    pub const fn zeroed() -> Self {
        Self {
            len: 0,
            _pad: 0,
            data: [0; BLOB_LEN],
        }
    }
}

/// Counters of what the probes could not record, one slot each in a per-CPU array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The ring buffer was full.
    RingFull = 0,
    /// The in-flight map refused the entry record.
    InflightFull = 1,
    /// A return whose entry record was missing (evicted from the LRU map).
    Unpaired = 2,
    /// A stack or struct read at entry failed (the event is still sent, marked).
    ReadFailed = 3,
    /// A call's stack record could not be sent (ring buffer full, or the
    /// CPU's scratch buffer in use by a preempted probe); the call itself is
    /// recorded, without its stack.
    StackDropped = 4,
    /// A call counted in the kernel (`ProbeCookie::COUNTED`) whose process
    /// and API found no room in the map of counts.
    CountsFull = 5,
}

pub const LOST_SLOTS: u32 = 6;

/// Upper bounds of the latency histogram's buckets, in nanoseconds (a call
/// of `d` ns goes in the first bucket whose bound is at least `d`; past the
/// last, in the +Inf bucket): host-side API latencies run from about a
/// microsecond (a queued launch) to seconds (a synchronisation, a
/// communicator's creation). The daemon's histograms and the calls counted
/// in the kernel use the same.
#[rustfmt::skip]
pub const BUCKETS_NS: [u64; 22] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000,
    100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000,
    5_000_000_000, 10_000_000_000,
];

/// The bucket of a latency of `d` ns: the first bound of [`BUCKETS_NS`] at
/// or above it, else the +Inf slot (a binary search: five halvings cover
/// the 22 bounds, cheap enough for a probe).
#[inline(always)]
pub fn bucket_of(d: u64) -> usize {
    let (mut lo, mut hi) = (0usize, BUCKETS_NS.len());
    for _ in 0..5 {
        if lo < hi {
            let mid = (lo + hi) / 2;
            let b = match BUCKETS_NS.get(mid) {
                Some(b) => *b,
                None => break,
            };
            if b < d {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
    }
    lo
}

/// Slots of a histogram over [`BUCKETS_NS`]: one per bound, then +Inf.
pub const HISTOGRAM_SLOTS: usize = BUCKETS_NS.len() + 1;

/// The attach cookie: which API this probe is, and what the probe must read.
///
/// Bit layout (u64):
/// - 0..16: API id
/// - 16: entry only (no return probe; send at entry)
/// - 17: read the five stack arguments
/// - 18: counted in the kernel ([`Counted`], per process and API): no record
///   and no argument read, so bits 20..36 are free; bits 20..32 then hold
///   `N`, one call in `N` timed at random (`counted` module)
/// - 20..24: argument (1-based) pointing to a struct of [`DEREF_BYTES`] copied to `extra` at entry
/// - 24..28: argument (1-based) that is an out-pointer whose u64 is read at return into `extra[0]`
/// - 28..32: same, into `extra[1]`
/// - 32..36: argument (1-based) that is a C string, read into a [`NamedCallEvent`]
/// - 36: probe whether arguments 0 and 1 point to readable user memory
///   (host memory), bits 0 and 1 of `extra[READABLE_SLOT]`
/// - 37: a launch: copy the host stub the runtime call around it recorded
///   for this thread into `extra[RUNTIME_SLOT]`
/// - 38: capture the caller's stack (`--stacks`): a [`stack::StackRecord`]
///   is sent before the call
/// - 39: ... for one call in `STACK_EVERY` of this API on each CPU only
/// - 40..44: a runtime launch: argument (1-based) holding the host stub, kept
///   per thread from entry to return
/// - 44..48: where to copy a blob from at entry, sent as a [`BlobCallEvent`]:
///   0 none; 1..=11 the argument (1-based) is a pointer to the bytes;
///   [`BLOB_FROM_STACK`] the caller's stack at `rsp + 8` (by-value struct);
///   [`BLOB_LT_MATMUL`] four descriptors of `cublasLtMatmul`
/// - 48..54: the blob's length in 8-byte words (1..=32, so up to
///   [`BLOB_LEN`] bytes; more is cut to [`BLOB_LEN`])
///
/// - 54..64: an NCCL communicator read at entry (`comm` module)
///
/// A blob and a string argument (bits 32..36) are not combined: the blob wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProbeCookie(pub u64);

impl ProbeCookie {
    pub const ENTRY_ONLY: u64 = 1 << 16;
    pub const STACK: u64 = 1 << 17;
    pub const READABLE: u64 = 1 << 36;
    pub const RUNTIME_GET: u64 = 1 << 37;
    pub const STACKS: u64 = 1 << 38;
    pub const STACKS_SAMPLED: u64 = 1 << 39;
    pub const COUNTED: u64 = 1 << 18;

    #[inline(always)]
    pub const fn api(self) -> u32 {
        (self.0 & 0xffff) as u32
    }
    #[inline(always)]
    pub const fn entry_only(self) -> bool {
        self.0 & Self::ENTRY_ONLY != 0
    }
    #[inline(always)]
    pub const fn counted(self) -> bool {
        self.0 & Self::COUNTED != 0
    }
    #[inline(always)]
    pub const fn stack_args(self) -> bool {
        self.0 & Self::STACK != 0
    }
    /// 0 = none, else 1-based argument index.
    #[inline(always)]
    pub const fn deref_arg(self) -> u32 {
        ((self.0 >> 20) & 0xf) as u32
    }
    #[inline(always)]
    pub const fn out_arg(self, slot: u32) -> u32 {
        ((self.0 >> (24 + 4 * slot)) & 0xf) as u32
    }
    #[inline(always)]
    pub const fn str_arg(self) -> u32 {
        ((self.0 >> 32) & 0xf) as u32
    }

    #[inline(always)]
    pub const fn probe_readable(self) -> bool {
        self.0 & Self::READABLE != 0
    }

    #[inline(always)]
    pub const fn runtime_get(self) -> bool {
        self.0 & Self::RUNTIME_GET != 0
    }
    /// 0 = none, else 1-based argument index.
    #[inline(always)]
    pub const fn runtime_set_arg(self) -> u32 {
        ((self.0 >> 40) & 0xf) as u32
    }
    /// 0 = no blob, 1..=11 a pointer argument (1-based), [`BLOB_FROM_STACK`].
    #[inline(always)]
    pub const fn blob_source(self) -> u32 {
        ((self.0 >> 44) & 0xf) as u32
    }
    /// Bytes to copy, a multiple of 8, at most [`BLOB_LEN`].
    #[inline(always)]
    pub const fn blob_len(self) -> usize {
        let words = ((self.0 >> 48) & 0x3f) as usize;
        let bytes = words * 8;
        if bytes > BLOB_LEN {
            BLOB_LEN
        } else {
            bytes
        }
    }

    #[inline(always)]
    pub const fn stacks(self) -> bool {
        self.0 & Self::STACKS != 0
    }
    #[inline(always)]
    pub const fn stacks_sampled(self) -> bool {
        self.0 & Self::STACKS_SAMPLED != 0
    }

    pub const fn new(api: u16) -> Self {
        Self(api as u64)
    }
    pub const fn with_entry_only(self) -> Self {
        Self(self.0 | Self::ENTRY_ONLY)
    }
    /// Counted in the kernel: no record, no argument read.
    pub const fn with_counted(self) -> Self {
        Self(self.0 | Self::COUNTED)
    }
    pub const fn with_stack(self) -> Self {
        Self(self.0 | Self::STACK)
    }
    pub const fn with_readable(self) -> Self {
        Self(self.0 | Self::READABLE)
    }
    pub const fn with_runtime_get(self) -> Self {
        Self(self.0 | Self::RUNTIME_GET)
    }
    /// Capture stacks; `sampled`: one call in `STACK_EVERY` only.
    pub const fn with_stacks(self, sampled: bool) -> Self {
        let s = if sampled { Self::STACKS_SAMPLED } else { 0 };
        Self(self.0 | Self::STACKS | s)
    }
    /// `arg` is 0-based.
    pub const fn with_runtime_set(self, arg: u32) -> Self {
        Self(self.0 | (((arg + 1) as u64 & 0xf) << 40))
    }
    /// `arg` is 0-based.
    pub const fn with_deref(self, arg: u32) -> Self {
        Self(self.0 | (((arg + 1) as u64 & 0xf) << 20))
    }
    /// `arg` is 0-based; `slot` 0 or 1.
    pub const fn with_out(self, slot: u32, arg: u32) -> Self {
        Self(self.0 | (((arg + 1) as u64 & 0xf) << (24 + 4 * slot)))
    }
    /// `arg` is 0-based.
    pub const fn with_str(self, arg: u32) -> Self {
        Self(self.0 | (((arg + 1) as u64 & 0xf) << 32))
    }
    /// Copies `bytes` (rounded up to 8, at most [`BLOB_LEN`]) from where
    /// argument `arg` (0-based) points.
    pub const fn with_blob_arg(self, arg: u32, bytes: usize) -> Self {
        self.with_blob(arg + 1, bytes)
    }
    /// Copies `cublasLtMatmul`'s four descriptors ([`BLOB_LT_MATMUL`]).
    pub const fn with_lt_matmul_blob(self) -> Self {
        self.with_blob(BLOB_LT_MATMUL, 4 * LT_PART)
    }
    /// Copies `bytes` from the caller's stack at `rsp + 8`.
    pub const fn with_blob_stack(self, bytes: usize) -> Self {
        self.with_blob(BLOB_FROM_STACK, bytes)
    }
    const fn with_blob(self, source: u32, bytes: usize) -> Self {
        let bytes = if bytes > BLOB_LEN { BLOB_LEN } else { bytes };
        let words = bytes.div_ceil(8) as u64;
        Self(self.0 | ((source as u64 & 0xf) << 44) | ((words & 0x3f) << 48))
    }
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain old data, `#[repr(C)]`, no padding bytes left implicit.
    unsafe impl aya::Pod for super::CallEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NamedCallEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::BlobCallEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Blob {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CommLayout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Counted {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn layout_has_no_hidden_padding() {
        assert_eq!(
            CallEvent::SIZE,
            4 * 4 + 3 * 8 + 16 + MAX_ARGS * 8 + EXTRA_WORDS * 8
        );
        assert_eq!(NamedCallEvent::SIZE, CallEvent::SIZE + 8 + NAME_LEN);
        assert_eq!(BlobCallEvent::SIZE, CallEvent::SIZE + 8 + BLOB_LEN);
        assert_eq!(core::mem::size_of::<Blob>(), 8 + BLOB_LEN);
        assert_eq!(CallEvent::SIZE % 8, 0);
        assert_eq!(ExecEvent::SIZE, 32);
    }

    #[test]
    fn cookie_round_trip() {
        let c = ProbeCookie::new(513)
            .with_stack()
            .with_deref(0)
            .with_out(0, 0)
            .with_out(1, 1)
            .with_str(2)
            .with_readable()
            .with_runtime_get()
            .with_runtime_set(1)
            .with_stacks(true)
            .with_entry_only();
        assert!(c.stacks() && c.stacks_sampled());
        assert!(ProbeCookie::new(1).with_stacks(false).stacks());
        assert!(!ProbeCookie::new(1).with_stacks(false).stacks_sampled());
        assert_eq!(c.api(), 513);
        assert!(c.stack_args());
        assert!(c.entry_only());
        assert_eq!(c.deref_arg(), 1);
        assert_eq!(c.out_arg(0), 1);
        assert_eq!(c.out_arg(1), 2);
        assert_eq!(c.str_arg(), 3);
        assert!(c.probe_readable());
        assert!(c.runtime_get());
        assert_eq!(c.runtime_set_arg(), 2);
        assert_eq!(ProbeCookie::new(1).runtime_set_arg(), 0);
        let plain = ProbeCookie::new(7);
        assert_eq!(
            (plain.deref_arg(), plain.out_arg(0), plain.str_arg()),
            (0, 0, 0)
        );
        assert!(!plain.entry_only() && !plain.stack_args());
        assert_eq!((plain.blob_source(), plain.blob_len()), (0, 0));
    }

    #[test]
    fn blob_bits() {
        let c = ProbeCookie::new(9).with_out(0, 0).with_blob_arg(4, 72);
        assert_eq!((c.blob_source(), c.blob_len(), c.out_arg(0)), (5, 72, 1));
        let s = ProbeCookie::new(9).with_blob_stack(128).with_runtime_set(5);
        assert_eq!((s.blob_source(), s.blob_len()), (BLOB_FROM_STACK, 128));
        assert_eq!(s.runtime_set_arg(), 6);
        // Rounded up to whole words, cut at BLOB_LEN.
        assert_eq!(ProbeCookie::new(1).with_blob_arg(0, 13).blob_len(), 16);
        assert_eq!(
            ProbeCookie::new(1).with_blob_arg(0, 4096).blob_len(),
            BLOB_LEN
        );
        assert_eq!(ProbeCookie(63 << 48 | 1 << 44).blob_len(), BLOB_LEN);
        assert_eq!(c.api(), 9);
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    #[test]
    fn bucket_of_is_the_first_bound_at_or_above() {
        let mut at = [0u64; 3 * BUCKETS_NS.len() + 3];
        let mut n = 0;
        for b in BUCKETS_NS {
            for d in [b - 1, b, b + 1] {
                at[n] = d;
                n += 1;
            }
        }
        at[n] = 0;
        at[n + 1] = u64::MAX;
        for d in at {
            assert_eq!(bucket_of(d), BUCKETS_NS.partition_point(|b| *b < d), "{d}");
        }
        assert_eq!(bucket_of(u64::MAX), HISTOGRAM_SLOTS - 1);
    }
}
