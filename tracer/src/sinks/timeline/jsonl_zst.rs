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

use rustc_hash::FxHashSet;

use super::jsonl::{call_lines, graph_line, put};
use crate::events::graph::GraphRecord;
use crate::events::model::Call;

pub const LEVEL: i32 = 1;

pub struct JsonlZstWriter<W: Write> {
    out: zstd::stream::write::Encoder<'static, W>,
    line: String,
    written: u64,
    /// Stacks whose record the file already holds (as `.jsonl`).
    stacks: FxHashSet<u32>,
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
            out: enc,
            line: String::with_capacity(512),
            written: 0,
            stacks: FxHashSet::default(),
        })
    }

    pub fn write(&mut self, call: &Call) -> std::io::Result<()> {
        let stacks = &mut self.stacks;
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            call_lines(l, stacks, call)
        })
    }

    /// Writes a `{"type":"graph"}` record (as `.jsonl`).
    pub fn graph(&mut self, record: &GraphRecord) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            graph_line(l, record)
        })
    }

    /// An NCCL cross-rank record (as `.jsonl`).
    pub fn cross_rank(&mut self, record: &serde_json::Value) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            l.push_str(&record.to_string());
            l.push('\n');
        })
    }

    /// Writes one non-call entry as its JSONL line.
    pub fn record(&mut self, r: &super::record::Record) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            r.write_jsonl(l);
            l.push('\n');
        })
    }

    /// Makes what was written so far readable: ends the current zstd
    /// block (a reader then decompresses up to here; the frame goes on).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// Bytes of JSONL (before compression) written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Ends the frame after the summary line; hands back the output, flushed.
    pub fn finish(mut self, summary: &serde_json::Value) -> std::io::Result<W> {
        serde_json::to_writer(&mut self.out, summary)?;
        self.out.write_all(b"\n")?;
        let mut out = self.out.finish()?;
        out.flush()?;
        Ok(out)
    }
}
