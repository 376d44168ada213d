//! Consumers of [`Call`]s: the `--print` stream and the timeline files.

pub mod chrome;
pub mod files;
pub mod jsonl;
pub mod print;
pub mod prometheus;
pub mod writer;

use std::path::Path;

use crate::events::model::Call;

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
    /// The file is opened as `files::create_output` allows.
    pub fn create(path: &Path, origin_ns: u64) -> std::io::Result<Self> {
        let Some(format) = TimelineFormat::from_path(path) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output must end in .jsonl or .json",
            ));
        };
        let file = files::create_output(path)?;
        Ok(match format {
            TimelineFormat::Jsonl => Self::Jsonl(jsonl::JsonlWriter::new(file)),
            TimelineFormat::Chrome => Self::Chrome(chrome::ChromeWriter::new(file, origin_ns)?),
        })
    }

    pub fn write(&mut self, call: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.write(call),
            Self::Chrome(w) => w.write(call, device_bytes),
        }
    }

    /// Writes the ending (the summary) and flushes to disk.
    pub fn finish(self, summary: &serde_json::Value) -> std::io::Result<()> {
        match self {
            Self::Jsonl(w) => w.finish(summary),
            Self::Chrome(w) => w.finish(summary),
        }
    }
}
