//! Timelines: the calls written to files as they come, and read back.
//!
//! - [`jsonl`]: one JSON event per line, then a summary line.
//! - [`chrome`]: Chrome Trace Event Format (Perfetto UI, chrome://tracing).
//! - [`rotate`]: the daemon's JSONL timelines, cut into numbered files.
//! - [`writer`]: the sink that formats and writes any of them on a thread
//!   of its own, so a slow disk never holds up draining.
//! - [`read`]: `gputrace stats FILE` reads `.jsonl` and `.json` back.

pub mod chrome;
pub mod jsonl;
pub mod read;
pub mod rotate;
pub mod writer;

use std::path::Path;

use crate::events::model::Call;
use crate::events::types::LostCounts;

/// Where a timeline sink writes: one file, or the rotated files.
pub trait TimelineFile: Send + 'static {
    /// Writes one call (and device memory in use after it, if it changed).
    fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()>;

    /// What the probes could not record so far (counts since the start).
    fn lost(&mut self, _lost: LostCounts) {}

    /// A record that is not a call: the cross-rank NCCL records
    /// (`nccl_collective`, `nccl_stall`, `nccl_stall_over`; docs/events.md).
    fn record(&mut self, record: &serde_json::Value) -> std::io::Result<()>;

    /// Makes what was written readable in the file now.
    fn flush(&mut self) -> std::io::Result<()>;

    /// Writes the ending and syncs to disk. `summary`: the summary of the
    /// whole trace, where the file ends with it.
    fn finish(self, summary: Option<&serde_json::Value>) -> std::io::Result<()>;
}

/// A timeline file, chosen by the output path's extension.
pub enum Timeline {
    Jsonl(jsonl::JsonlWriter),
    Chrome(chrome::ChromeWriter),
}

/// The formats `--output` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    Jsonl,
    Chrome,
}

impl TimelineFormat {
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "jsonl" => Some(Self::Jsonl),
            "json" => Some(Self::Chrome),
            _ => None,
        }
    }
}

impl Timeline {
    /// `origin_ns`: when tracing began (Unix ns), the Chrome trace's zero.
    /// The file is opened as `sinks::files::create_output` allows.
    pub fn create(path: &Path, origin_ns: u64) -> std::io::Result<Self> {
        let Some(format) = TimelineFormat::from_path(path) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output must end in .jsonl or .json",
            ));
        };
        let file = super::files::create_output(path)?;
        Ok(match format {
            TimelineFormat::Jsonl => Self::Jsonl(jsonl::JsonlWriter::new(file)),
            TimelineFormat::Chrome => Self::Chrome(chrome::ChromeWriter::new(file, origin_ns)?),
        })
    }
}

impl TimelineFile for Timeline {
    fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.write(call),
            Self::Chrome(w) => w.write(call, device_bytes),
        }
    }

    fn record(&mut self, record: &serde_json::Value) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.record(record),
            Self::Chrome(w) => w.record(record),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.flush(),
            Self::Chrome(w) => w.flush(),
        }
    }

    fn finish(self, summary: Option<&serde_json::Value>) -> std::io::Result<()> {
        let summary = summary.cloned().unwrap_or(serde_json::Value::Null);
        match self {
            Self::Jsonl(w) => w.finish(&summary),
            Self::Chrome(w) => w.finish(&summary),
        }
    }
}
