//! Timelines: the calls written to files as they come, and read back.
//!
//! - [`jsonl`]: one JSON event per line, then a summary line.
//! - [`jsonl_zst`]: the same stream, zstd-compressed as it is written.
//! - [`chrome`]: Chrome Trace Event Format (Perfetto UI, chrome://tracing).
//! - [`perfetto`]: Perfetto's native protobuf trace (`.pftrace`), for
//!   traces too large for JSON.
//! - [`rotate`]: the daemon's JSONL timelines, cut into numbered files.
//! - [`writer`]: the sink that formats and writes any of them on a thread
//!   of its own, so a slow disk never holds up draining.
//! - [`read`]: `gputrace stats FILE` reads every format back.

pub(crate) mod chrome;
pub(crate) mod jsonl;
pub mod jsonl_zst;
pub mod perfetto;
pub mod record;
pub(crate) mod rotate;
pub(crate) mod writer;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use crate::cli::TimelineFormat;
use crate::model::call::Call;
use crate::model::record::Record;
use crate::model::types::LostCounts;

/// Where a timeline sink writes: one file, or the rotated files.
pub trait TimelineFile: Send + 'static {
    /// Writes one call (and device memory in use after it, if it changed).
    fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()>;

    /// Writes one entry that is not a call (`model::record`; how each
    /// format writes it: [`record`]), in order with the calls.
    fn record(&mut self, record: &Record) -> std::io::Result<()>;

    /// What the probes could not record so far (counts since the start).
    fn lost(&mut self, _lost: LostCounts) {}

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
    JsonlZst(jsonl_zst::JsonlZstWriter<BufWriter<File>>),
    Perfetto(perfetto::PerfettoWriter<BufWriter<File>>),
}

impl Timeline {
    /// `origin_ns`: when tracing began (Unix ns), the Chrome trace's zero.
    /// The file is opened as `sinks::files::create_output` allows.
    pub fn create(path: &Path, origin_ns: u64) -> std::io::Result<Self> {
        let Some(format) = TimelineFormat::from_path(path) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output must end in .jsonl, .jsonl.zst, .json or .pftrace",
            ));
        };
        let file = crate::outputs::files::create_output(path)?;
        Ok(match format {
            TimelineFormat::Jsonl => Self::Jsonl(jsonl::JsonlWriter::create(file)),
            TimelineFormat::Chrome => Self::Chrome(chrome::ChromeWriter::new(file, origin_ns)?),
            TimelineFormat::JsonlZst => Self::JsonlZst(jsonl_zst::JsonlZstWriter::new(
                BufWriter::with_capacity(1 << 20, file),
            )?),
            TimelineFormat::Perfetto => Self::Perfetto(perfetto::PerfettoWriter::new(
                BufWriter::with_capacity(1 << 20, file),
                origin_ns,
                true,
                true,
            )?),
        })
    }
}

impl TimelineFile for Timeline {
    fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.write(call),
            Self::Chrome(w) => w.write(call, device_bytes),
            Self::JsonlZst(w) => w.write(call),
            Self::Perfetto(w) => w.write(call, device_bytes),
        }
    }

    fn record(&mut self, r: &Record) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.record(r),
            Self::Chrome(w) => w.record(r),
            Self::JsonlZst(w) => w.record(r),
            Self::Perfetto(w) => w.record(r),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.flush(),
            Self::Chrome(w) => w.flush(),
            Self::JsonlZst(w) => w.flush(),
            Self::Perfetto(w) => w.flush(),
        }
    }

    fn finish(self, summary: Option<&serde_json::Value>) -> std::io::Result<()> {
        let summary = summary.cloned().unwrap_or(serde_json::Value::Null);
        match self {
            Self::Jsonl(w) => w.finish(&summary),
            Self::Chrome(w) => w.finish(&summary),
            Self::JsonlZst(w) => w.finish(&summary)?.into_inner()?.sync_all(),
            Self::Perfetto(w) => w.finish(&summary)?.into_inner()?.sync_all(),
        }
    }
}
