//! Consumers of [`Call`]s: the `--print` stream and the timeline files.

pub mod chrome;
pub mod jsonl;
pub mod jsonl_zst;
pub mod perfetto;
pub mod print;
pub mod prometheus;
pub mod writer;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use crate::events::model::Call;

/// A timeline file, chosen by the output path's extension.
pub enum Timeline {
    Jsonl(jsonl::JsonlWriter),
    Chrome(chrome::ChromeWriter),
    JsonlZst(jsonl_zst::JsonlZstWriter<BufWriter<File>>),
    Perfetto(perfetto::PerfettoWriter<BufWriter<File>>),
}

/// The formats `--output` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    Jsonl,
    Chrome,
    JsonlZst,
    Perfetto,
}

impl TimelineFormat {
    pub fn from_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        match path.extension()?.to_str()? {
            "jsonl" => Some(Self::Jsonl),
            "json" => Some(Self::Chrome),
            "zst" if name.ends_with(".jsonl.zst") => Some(Self::JsonlZst),
            "pftrace" | "perfetto-trace" => Some(Self::Perfetto),
            _ => None,
        }
    }
}

impl Timeline {
    /// `origin_ns`: when tracing began (Unix ns), the Chrome trace's zero.
    pub fn create(path: &Path, origin_ns: u64) -> std::io::Result<Self> {
        match TimelineFormat::from_path(path) {
            Some(TimelineFormat::Jsonl) => Ok(Self::Jsonl(jsonl::JsonlWriter::create(path)?)),
            Some(TimelineFormat::Chrome) => {
                Ok(Self::Chrome(chrome::ChromeWriter::create(path, origin_ns)?))
            }
            Some(TimelineFormat::JsonlZst) => {
                Ok(Self::JsonlZst(jsonl_zst::JsonlZstWriter::create(path)?))
            }
            Some(TimelineFormat::Perfetto) => {
                let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
                Ok(Self::Perfetto(perfetto::PerfettoWriter::new(
                    file, origin_ns, true, true,
                )?))
            }
            None => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output must end in .jsonl, .jsonl.zst, .json or .pftrace",
            )),
        }
    }

    pub fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.write(call),
            Self::Chrome(w) => w.write(call, device_bytes),
            Self::JsonlZst(w) => w.write(call),
            Self::Perfetto(w) => w.write(call, device_bytes),
        }
    }

    /// Writes the ending (the summary) and flushes to disk.
    pub fn finish(self, summary: &serde_json::Value) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.finish(summary),
            Self::Chrome(w) => w.finish(summary),
            Self::JsonlZst(w) => w.finish(summary)?.into_inner()?.sync_all(),
            Self::Perfetto(w) => w.finish(summary)?.into_inner()?.sync_all(),
        }
    }
}
