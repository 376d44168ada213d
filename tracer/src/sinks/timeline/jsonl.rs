//! `.jsonl`: one event per line, then one summary line.

use std::fs::File;
use std::io::{BufWriter, Write};

use crate::events::json::write_call;
use crate::events::model::Call;

pub struct JsonlWriter {
    out: BufWriter<File>,
    line: String,
    written: u64,
}

impl JsonlWriter {
    /// Writes to `file` (opened by `sinks::files`).
    pub fn new(file: File) -> Self {
        Self {
            out: BufWriter::with_capacity(1 << 20, file),
            line: String::with_capacity(512),
            written: 0,
        }
    }

    pub fn write(&mut self, call: &Call) -> std::io::Result<()> {
        self.line.clear();
        write_call(&mut self.line, call);
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())?;
        self.written += self.line.len() as u64;
        Ok(())
    }

    /// A record other than a call, on a line of its own.
    pub fn record(&mut self, record: &serde_json::Value) -> std::io::Result<()> {
        self.line.clear();
        self.line.push_str(&record.to_string());
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())?;
        self.written += self.line.len() as u64;
        Ok(())
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
