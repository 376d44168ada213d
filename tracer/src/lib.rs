//! gputrace: an eBPF uprobe tracer for the CUDA driver API and NCCL.
//!
//! The layers, each using only those above it: `probes` (the catalogue,
//! finding libraries and symbols, attaching), `events` (the records, their
//! decoding into calls, the event model), `names` (kernel names),
//! `session` (the engine: probes, ring buffer, processes, the loop),
//! `aggregate` (the summary), `sinks` (every output), `tui` (`top`'s
//! screen), `commands` (one per subcommand); `stacks` (call stacks, native
//! and Python; not wired into the probes yet). docs/architecture.md has the map.

#![cfg_attr(test, allow(clippy::print_stderr))]

pub(crate) mod budget;
pub(crate) mod cache;
pub mod catalogue;
pub mod cli;
pub mod commands;
pub mod config;
pub mod decode;
pub mod error;
pub mod gpu;
pub mod graphs;
pub mod host;
pub(crate) mod json;
pub mod log;
pub(crate) mod lt;
pub mod model;
pub(crate) mod names;
pub mod nccl;
pub mod outputs;
pub mod probes;
pub mod read;
pub mod schema;
pub(crate) mod session;
pub mod stacks;
pub mod summary;
pub(crate) mod text;
pub(crate) mod tui;
pub mod units;

/// The eBPF object built from `tracer-ebpf` by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));
