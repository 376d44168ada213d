//! `.json`: Chrome Trace Event Format (Perfetto UI, chrome://tracing).
//!
//! One complete slice (`ph: X`) per call on its process/thread track, the
//! call's args attached (with `ret`), process and thread names as metadata,
//! and device memory in use as a counter track. Written as a stream, one
//! event per line; timestamps are microseconds since `otherData.origin_unix_ns` (the moment tracing began)
//! (absolute epoch microseconds would lose nanoseconds in a double).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};

use crate::json::string;
use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::graph::GraphLaunch;
use crate::model::record::Record;
use crate::outputs::timeline::record::{chrome_lane_tid, write_chrome};
use crate::schema::write::write_args;
use crate::schema::write::write_frames;

pub struct ChromeWriter {
    out: BufWriter<File>,
    line: String,
    origin_ns: u64,
    first: bool,
    named_pids: HashSet<u32>,
    named_tids: HashSet<u32>,
    /// (pid, lane thread) named so far.
    named_lanes: HashSet<(u32, u32)>,
    /// Flow ids given so far.
    flows: u64,
}

/// `12.345` µs from ns.
fn us(out: &mut String, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

impl ChromeWriter {
    /// `origin_ns` must not be later than any call's start: the moment
    /// before the first probe was attached.
    /// Writes to `file` (opened by `sinks::files`).
    pub fn new(file: File, origin_ns: u64) -> std::io::Result<Self> {
        let mut w = Self {
            out: BufWriter::with_capacity(1 << 20, file),
            line: String::with_capacity(512),
            origin_ns,
            first: true,
            named_pids: HashSet::new(),
            named_tids: HashSet::new(),
            named_lanes: HashSet::new(),
            flows: 0,
        };
        w.header(origin_ns);
        w.out.write_all(w.line.as_bytes())?;
        Ok(w)
    }

    fn begin_event(&mut self) {
        if self.first {
            self.first = false;
        } else {
            self.line.push_str(",\n");
        }
    }

    fn header(&mut self, origin: u64) {
        let _ = write!(
            self.line,
            "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"tool\":\"gputrace\",\"version\":\"{}\",\"origin_unix_ns\":{origin}}},\n\"traceEvents\":[\n",
            env!("CARGO_PKG_VERSION")
        );
    }

    /// Writes one non-call entry (category `gputrace.record`): on its
    /// view's lane (a thread named once by metadata) with its flow, if it
    /// has a view.
    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        self.line.clear();
        if let (Some(v), Some(pid)) = (&r.view, r.pid) {
            let tid = chrome_lane_tid(&v.lane);
            if self.named_lanes.insert((pid, tid)) {
                self.begin_event();
                let _ = write!(
                    self.line,
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":"
                );
                string(&mut self.line, &v.lane);
                self.line.push_str("}}");
            }
        }
        self.flows += 1;
        let mut events = Vec::with_capacity(3);
        write_chrome(r, &mut events, self.origin_ns, self.flows);
        for e in events {
            self.begin_event();
            self.line.push_str(&e);
        }
        self.out.write_all(self.line.as_bytes())
    }

    pub fn write(&mut self, c: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        self.line.clear();
        let origin = self.origin_ns;
        if self.named_pids.insert(c.pid) {
            self.begin_event();
            let _ = write!(self.line, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", c.pid, c.pid);
            string(&mut self.line, &c.comm);
            self.line.push_str("}}");
        }
        if self.named_tids.insert(c.tid) {
            self.begin_event();
            let _ = write!(self.line, "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}", c.pid, c.tid, c.tid);
        }
        self.begin_event();
        self.line.push_str("{\"name\":");
        string(&mut self.line, c.api);
        let cat = c.family.map_or("other", |f| f.name());
        let rel = c.ts_ns.saturating_sub(origin);
        match c.dur_ns {
            Some(d) => {
                let _ = write!(self.line, ",\"cat\":\"{cat}\",\"ph\":\"X\",\"ts\":");
                us(&mut self.line, rel);
                self.line.push_str(",\"dur\":");
                us(&mut self.line, d);
            }
            None => {
                let _ = write!(
                    self.line,
                    ",\"cat\":\"{cat}\",\"ph\":\"i\",\"s\":\"t\",\"ts\":"
                );
                us(&mut self.line, rel);
            }
        }
        let _ = write!(self.line, ",\"pid\":{},\"tid\":{},\"args\":", c.pid, c.tid);
        // The args object with "ret" appended.
        let start = self.line.len();
        write_args(&mut self.line, &c.args);
        if self.line.ends_with('}') {
            self.line.pop();
            if self.line.len() > start + 1 {
                self.line.push(',');
            }
            if let Args::Graph(GraphLaunch {
                contents: Some(contents),
                captured: None,
                ..
            }) = &c.args
            {
                // What the graph launch runs, for whoever reads the slice.
                self.line.push_str("\"kernels\":[");
                for (i, k) in contents.kernels().enumerate() {
                    if i > 0 {
                        self.line.push(',');
                    }
                    match &k.kernel {
                        Some(name) => string(&mut self.line, name),
                        None => self.line.push_str("null"),
                    }
                }
                self.line.push_str("],");
            }
            if let Some(stack) = &c.stack {
                // Inline: a Chrome trace has no place for shared records.
                self.line.push_str("\"stack\":");
                write_frames(&mut self.line, &stack.frames);
                self.line.push(',');
            }
            match c.ret {
                Some(r) => {
                    let _ = write!(self.line, "\"ret\":{r}}}");
                }
                None => self.line.push_str("\"ret\":null}"),
            }
        }
        self.line.push('}');
        if let Some(bytes) = device_bytes {
            self.begin_event();
            let _ = write!(
                self.line,
                "{{\"name\":\"device memory\",\"ph\":\"C\",\"ts\":"
            );
            us(&mut self.line, rel + c.dur_ns.unwrap_or(0));
            let _ = write!(
                self.line,
                ",\"pid\":{},\"args\":{{\"bytes\":{bytes}}}}}",
                c.pid
            );
        }
        self.out.write_all(self.line.as_bytes())
    }

    /// Hands what is buffered to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn finish(mut self, summary: &serde_json::Value) -> std::io::Result<()> {
        self.out.write_all(b"\n],\n\"gputraceSummary\":")?;
        serde_json::to_writer(&mut self.out, summary)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}
