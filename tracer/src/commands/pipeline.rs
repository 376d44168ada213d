//! Where the trace command sends each call: print / write / summarise.

use std::io::{BufWriter, Stdout, Write};

use crate::aggregate::enrich::Enriched;
use crate::aggregate::summary::Summary;
use crate::export::print::format_line;
use crate::export::writer::TimelineWriter;
use crate::export::Timeline;

pub struct Pipeline {
    pub summary: Summary,
    timeline: Option<TimelineWriter>,
    print: Option<BufWriter<Stdout>>,
    line: String,
    /// The first write error; the trace stops when one happens.
    pub write_error: Option<std::io::Error>,
}

impl Pipeline {
    pub fn new(timeline: Option<Timeline>, print: bool) -> Self {
        Self {
            summary: Summary::default(),
            timeline: timeline.map(TimelineWriter::start),
            print: print.then(|| BufWriter::with_capacity(1 << 16, std::io::stdout())),
            line: String::with_capacity(512),
            write_error: None,
        }
    }

    /// Handles one call (taken, so the writer thread gets it without a copy).
    pub fn handle(&mut self, enriched: Enriched) {
        self.summary.record(&enriched.call);
        if self.write_error.is_some() {
            return;
        }
        if let Some(p) = &mut self.print {
            let call = &enriched.call;
            self.line.clear();
            format_line(&mut self.line, call);
            self.line.push('\n');
            if let Err(e) = p.write_all(self.line.as_bytes()) {
                self.write_error = Some(e);
            }
        }
        if let Some(t) = &mut self.timeline {
            t.write(enriched.call, enriched.device_bytes);
        }
    }

    /// Hands the batched calls to the writer and flushes printed lines, so
    /// both appear promptly; picks up a write error.
    pub fn flush_print(&mut self) {
        if let Some(t) = &mut self.timeline {
            t.send();
            if let Some(e) = t.take_error() {
                self.write_error.get_or_insert(e);
            }
        }
        if let Some(p) = &mut self.print {
            if let Err(e) = p.flush() {
                self.write_error.get_or_insert(e);
            }
        }
    }

    /// Ends the timeline with the summary.
    pub fn finish_timeline(&mut self, summary: &serde_json::Value) -> std::io::Result<()> {
        self.flush_print();
        match self.timeline.take() {
            Some(t) => t.finish(summary),
            None => Ok(()),
        }
    }
}
