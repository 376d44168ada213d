//! Outputs. Each one is a [`Sink`]: it is handed every [`Event`] of the
//! session in order and keeps what it needs (the summary, the `--print`
//! stream, timeline files, rotated timelines, Prometheus metrics, `top`'s
//! model). A command chooses its sinks and runs the session into them;
//! ending a sink (writing a summary, closing a file) is the command's, with
//! each sink's own `finish`.
//!
//! A new kind of event is one variant of [`Event`] plus, in each sink that
//! shows it, one arm of its `event` match (sinks match exhaustively, so the
//! compiler lists every sink to look at).

pub(crate) mod fault;
pub(crate) mod files;
pub(crate) mod metrics;
pub(crate) mod print;
pub(crate) mod summary;
pub mod timeline;

pub use crate::model::sink::Halt;
pub use crate::model::sink::Sink;
pub use crate::model::sink::Status;
