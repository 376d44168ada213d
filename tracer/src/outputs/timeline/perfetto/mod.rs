//! `.pftrace` / `.perfetto-trace`: Perfetto's native protobuf trace, which
//! Perfetto UI and trace_processor open at sizes JSON cannot reach.
//!
//! One slice per call on its thread's track (names and arguments interned
//! per thread), the call's arguments as debug annotations, counter tracks
//! per process for device memory in use and call rates, and gputrace's
//! summary as a trace attribute at the end (so `gputrace stats` gives the
//! live summary again). See `writer.rs` for the layout.

mod args;
mod intern;
pub(crate) mod proto;
mod reader;
mod records;
mod sequences;
mod wire;
mod writer;

pub(crate) use reader::TRUNCATED;
pub use reader::{PerfettoReader, ReadProblem};
pub use writer::PerfettoWriter;

#[cfg(test)]
mod tests;
