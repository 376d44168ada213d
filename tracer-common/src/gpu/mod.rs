//! `--gpu-time`: the protocol between gputrace and the agent library
//! (`tracer-agent`) it loads into a running CUDA process.
//!
//! The agent collects CUPTI activity records and hands them over through a
//! shared-memory region (a memfd the agent creates; gputrace maps it by
//! opening `/proc/PID/fd/N`):
//!
//! ```text
//! offset 0            header page (HEADER_SIZE bytes; [`Header`], then zeros)
//! offset HEADER_SIZE  ring: ring_capacity records of RECORD_SIZE bytes
//! names_offset        string area: kernel names, append-only
//! ```
//!
//! Everything is little-endian x86-64. The header is made of atomics only
//! (another process writes it); records are plain bytes with the layout in
//! [`record`]. The single-producer single-consumer ring has `head` written
//! by the agent and `tail` by gputrace (both release stores, read with
//! acquire loads).
//!
//! Control goes the other way through a pipe: gputrace writes [`HELLO`]
//! once, then [`STOP`] to ask the agent to detach; closing its end (or
//! dying) detaches the agent too.
//!
//! Userspace only: not built for the eBPF target (nothing there uses it).
#![cfg(not(target_arch = "bpf"))]

pub mod args;
pub mod cbids;
pub mod header;
pub mod record;
pub mod writer;

#[cfg(feature = "user")]
pub mod reader;

pub use args::*;
pub use cbids::{cbid_name, runtime_cbid_name, API_CBIDS, RUNTIME_API_CBIDS};
pub use header::*;
pub use record::*;
pub use writer::RingWriter;

/// `Header::magic`: "GPTRGPU\x01" little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GPTRGPU\x01");
/// Bumped on any incompatible change of the header, the records or [`AgentArgs`].
pub const PROTOCOL_VERSION: u32 = 2;
/// The period of GPU-time sampling: CUPTI collects during one window of
/// `sample_percent` of each period, placed at random in it.
pub const SAMPLE_PERIOD_MS: u64 = 1000;
/// Bytes before the ring: the header page.
pub const HEADER_SIZE: usize = 4096;
/// Bytes of one ring record.
pub const RECORD_SIZE: usize = 96;
/// Bytes of the refusal/error message in the header (NUL-padded UTF-8).
pub const MESSAGE_LEN: usize = 256;
/// Longest libcupti path in [`AgentArgs`], NUL included.
pub const PATH_LEN: usize = 4096;

/// Ring capacity (records) when [`AgentArgs::ring_capacity`] is 0.
pub const DEFAULT_RING_CAPACITY: u64 = 1 << 16;
/// Smallest and largest ring capacity accepted (records, powers of two).
pub const MIN_RING_CAPACITY: u64 = 2;
pub const MAX_RING_CAPACITY: u64 = 1 << 22;
/// Name-area size when [`AgentArgs::names_size`] is 0.
pub const DEFAULT_NAMES_SIZE: u64 = 1 << 20;
/// Smallest and largest name area accepted (bytes).
pub const MIN_NAMES_SIZE: u64 = 64;
pub const MAX_NAMES_SIZE: u64 = 64 << 20;
/// The first bytes of the name area are never a name, so that name id 0
/// means "no name".
pub const NAMES_RESERVED: u64 = 8;
/// Longest kernel name stored (bytes, without the NUL); longer ones are cut.
pub const MAX_NAME_LEN: usize = 4096;

/// Pipe byte: gputrace has opened the pipe (the agent then closes its own
/// write end, so the pipe's end-of-file tells it that gputrace is gone).
pub const HELLO: u8 = b'H';
/// Pipe byte: detach now.
pub const STOP: u8 = b'S';

/// Activity kinds the agent can collect ([`AgentArgs::kinds`], [`Header`]'s `kinds`).
pub const KIND_KERNEL: u32 = 1 << 0;
pub const KIND_MEMCPY: u32 = 1 << 1;
pub const KIND_MEMSET: u32 = 1 << 2;
/// API records (driver and runtime) of the launch, copy, memset and
/// graph-launch calls.
pub const KIND_API: u32 = 1 << 3;
pub const KIND_ALL: u32 = KIND_KERNEL | KIND_MEMCPY | KIND_MEMSET | KIND_API;

#[cfg(test)]
mod tests;
