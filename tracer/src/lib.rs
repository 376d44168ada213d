//! gputrace: an eBPF uprobe tracer for the CUDA driver API and NCCL.

pub mod aggregate;
pub mod cli;
pub mod commands;
pub mod error;
pub mod events;
pub mod export;
pub mod names;
pub mod nccl;
pub mod probes;
pub mod stacks;

/// The eBPF object built from `tracer-ebpf` by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));
