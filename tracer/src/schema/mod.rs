//! The JSONL schema of a call (docs/events.md): written by the timelines
//! ([`write`]) and read back by `gputrace stats` ([`parse`]), each feature's
//! arguments (graphs, NCCL) by that feature's own piece.

pub(crate) mod fields;
pub mod parse;
pub(crate) mod write;
