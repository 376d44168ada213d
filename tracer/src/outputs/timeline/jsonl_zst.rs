//! `.jsonl.zst`: exactly the `.jsonl` stream (events, then the summary
//! line), compressed with zstd as it is written: `zstd -d` gives the
//! `.jsonl` back, `gputrace stats` reads it as is.
//!
//! One zstd frame with a content checksum, so a damaged file is told from
//! a valid one. Level 1: on a launch-heavy trace (`cargo xtask bench
//! --formats`) it wrote smaller files than level 3, zstd's default (21.8
//! against 22.6 bytes per event), and faster (1.3x to 2.9x in runs on a
//! loaded machine); level 9 saves a quarter more at a sixth of the speed.

use std::io::Write;

use crate::model::call::Call;
use crate::outputs::timeline::jsonl::JsonlLines;

pub const LEVEL: i32 = 1;

pub struct JsonlZstWriter<W: Write> {
    lines: JsonlLines<zstd::stream::write::Encoder<'static, W>>,
}

impl<W: Write> JsonlZstWriter<W> {
    pub fn new(out: W) -> std::io::Result<Self> {
        Self::with_level(out, LEVEL)
    }

    /// zstd level 1 (fastest) to 22.
    pub fn with_level(out: W, level: i32) -> std::io::Result<Self> {
        let mut enc = zstd::stream::write::Encoder::new(out, level)?;
        enc.include_checksum(true)?;
        Ok(Self {
            lines: JsonlLines::new(enc),
        })
    }

    pub fn write(&mut self, call: &Call) -> std::io::Result<()> {
        self.lines.write(call)
    }

    /// Writes one non-call entry as its JSONL line.
    pub fn record(&mut self, r: &crate::model::record::Record) -> std::io::Result<()> {
        self.lines.record(r)
    }

    /// Makes what was written so far readable: ends the current zstd
    /// block (a reader then decompresses up to here; the frame goes on).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.lines.out_mut().flush()
    }

    /// Bytes of JSONL (before compression) written so far.
    pub fn bytes_written(&self) -> u64 {
        self.lines.bytes_written()
    }

    /// Ends the frame after the summary line; hands back the output, flushed.
    pub fn finish(self, summary: &serde_json::Value) -> std::io::Result<W> {
        let enc = self.lines.end(summary)?;
        let mut out = enc.finish()?;
        out.flush()?;
        Ok(out)
    }
}
