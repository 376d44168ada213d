//! `.jsonl`: one event per line, then one summary line.

use std::fs::File;
use std::io::{BufWriter, Write};

use rustc_hash::FxHashSet;

use crate::model::call::Call;
use crate::model::record::Record;
use crate::outputs::timeline::record::write_jsonl;
use crate::schema::write::write_call;
use crate::schema::write::write_stack;
use crate::stacks::table::say_once;

/// The lines of one call: its stack's record the first time a file needs
/// it (`stacks`: the ids it holds), then the call.
pub(super) fn call_lines(line: &mut String, stacks: &mut FxHashSet<u32>, call: &Call) {
    if let Some(stack) = &call.stack {
        if say_once(stacks, stack.id) {
            write_stack(line, stack);
            line.push('\n');
        }
    }
    write_call(line, call);
    line.push('\n');
}

/// The lines of a JSONL stream, to any writer: the `.jsonl` file and the
/// `.jsonl.zst` encoder write the same lines.
pub struct JsonlLines<W: Write> {
    out: W,
    line: String,
    written: u64,
    /// Stacks whose record this file already holds (each file stands
    /// alone: a rotated file repeats the stacks it needs).
    stacks: FxHashSet<u32>,
}

impl<W: Write> JsonlLines<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            line: String::with_capacity(512),
            written: 0,
            stacks: FxHashSet::default(),
        }
    }

    /// Builds one entry's line(s) with `build`, then writes them.
    fn put(&mut self, build: impl FnOnce(&mut String, &mut FxHashSet<u32>)) -> std::io::Result<()> {
        self.line.clear();
        build(&mut self.line, &mut self.stacks);
        self.out.write_all(self.line.as_bytes())?;
        self.written += self.line.len() as u64;
        Ok(())
    }

    pub fn write(&mut self, call: &Call) -> std::io::Result<()> {
        self.put(|l, stacks| call_lines(l, stacks, call))
    }

    /// Writes one non-call entry as its JSONL line.
    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        self.put(|l, _| {
            write_jsonl(r, l);
            l.push('\n');
        })
    }

    /// Bytes of JSONL written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Writes the summary line and hands back the writer.
    pub fn end(mut self, summary: &serde_json::Value) -> std::io::Result<W> {
        serde_json::to_writer(&mut self.out, summary)?;
        self.out.write_all(b"\n")?;
        Ok(self.out)
    }

    pub fn out_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

/// A `.jsonl` file.
pub(crate) type JsonlWriter = JsonlLines<BufWriter<File>>;

impl JsonlLines<BufWriter<File>> {
    /// Writes to `file` (opened by `sinks::files`).
    pub fn create(file: File) -> Self {
        Self::new(BufWriter::with_capacity(1 << 20, file))
    }

    /// Hands what is buffered to the file (readable by others at once).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn finish(self, summary: &serde_json::Value) -> std::io::Result<()> {
        let mut out = self.end(summary)?;
        out.flush()?;
        out.get_ref().sync_all()
    }
}
