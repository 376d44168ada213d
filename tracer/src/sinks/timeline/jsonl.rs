//! `.jsonl`: one event per line, then one summary line.

use std::fs::File;
use std::io::{BufWriter, Write};

use rustc_hash::FxHashSet;

use crate::events::graph::GraphRecord;
use crate::events::graph_json::write_record;
use crate::events::json::{write_call, write_stack};
use crate::events::model::Call;

/// The lines of one call: its stack's record the first time a file needs
/// it (`stacks`: the ids it holds), then the call.
pub(super) fn call_lines(line: &mut String, stacks: &mut FxHashSet<u32>, call: &Call) {
    if let Some(stack) = &call.stack {
        if stacks.insert(stack.id) {
            write_stack(line, stack);
            line.push('\n');
        }
    }
    write_call(line, call);
    line.push('\n');
}

/// Builds one entry's line(s) in `line` with `build`, then writes them
/// to `out`, counting the bytes in `written`.
pub(super) fn put<W: Write>(
    out: &mut W,
    line: &mut String,
    written: &mut u64,
    build: impl FnOnce(&mut String),
) -> std::io::Result<()> {
    line.clear();
    build(line);
    out.write_all(line.as_bytes())?;
    *written += line.len() as u64;
    Ok(())
}

/// The `{"type":"graph"}` line of an executable graph.
pub(super) fn graph_line(line: &mut String, record: &GraphRecord) {
    write_record(line, record);
    line.push('\n');
}

pub struct JsonlWriter {
    out: BufWriter<File>,
    line: String,
    written: u64,
    /// Stacks whose record this file already holds (each file stands
    /// alone: a rotated file repeats the stacks it needs).
    stacks: FxHashSet<u32>,
}

impl JsonlWriter {
    /// Writes to `file` (opened by `sinks::files`).
    pub fn new(file: File) -> Self {
        Self {
            out: BufWriter::with_capacity(1 << 20, file),
            line: String::with_capacity(512),
            written: 0,
            stacks: FxHashSet::default(),
        }
    }

    pub fn write(&mut self, call: &Call) -> std::io::Result<()> {
        let stacks = &mut self.stacks;
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            call_lines(l, stacks, call)
        })
    }

    /// Writes a `{"type":"graph"}` record.
    pub fn graph(&mut self, record: &GraphRecord) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            graph_line(l, record)
        })
    }

    /// Writes one non-call entry as its JSONL line.
    pub fn record(&mut self, r: &super::record::Record) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            r.write_jsonl(l);
            l.push('\n');
        })
    }

    /// A record other than a call, on a line of its own.
    pub fn cross_rank(&mut self, record: &serde_json::Value) -> std::io::Result<()> {
        put(&mut self.out, &mut self.line, &mut self.written, |l| {
            l.push_str(&record.to_string());
            l.push('\n');
        })
    }

    /// Bytes of events written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Hands what is buffered to the file (readable by others at once).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn finish(mut self, summary: &serde_json::Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, summary)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}
