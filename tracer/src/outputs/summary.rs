//! The end-of-trace summary: every call counted into a [`Summary`] as it
//! comes, written at the end in the `--summary` format to stdout or to
//! `--summary-file`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::SummaryFormat;
use crate::error::Failure;
use crate::error::Result;
use crate::model::sink::Sink;
use crate::model::Event;
use crate::summary::render::render_json;
use crate::summary::render::render_text;
use crate::summary::Summary;
use crate::text::{printable_json, printable_lines};

/// Counts every call; the lost counts are the last reported.
#[derive(Default)]
pub(crate) struct SummarySink {
    summary: Summary,
    undecodable: u64,
}

impl SummarySink {
    pub(crate) fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Records that could not be decoded, as last reported.
    pub(crate) fn undecodable(&self) -> u64 {
        self.undecodable
    }
}

impl Sink for SummarySink {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Call { call, .. } => self.summary.record(call),
            Event::Lost(report) => {
                self.summary.lost = report.total;
                self.undecodable = report.undecodable;
            }
            Event::NcclStall(s) => self.summary.nccl.stall(s),
            Event::NcclStallEnded(e) => self.summary.nccl.stall_over(e),
            Event::Sampling(r) => self.summary.sampling(r),
            Event::Gpu(w) => self.summary.record_gpu(w),
            Event::GpuAgent(n) => self.summary.gpu_note(n),
            Event::Exec(x) => self.summary.exec(x.pid, x.ts_ns, &x.comm),
            // The summary matches collectives across ranks from the calls
            // themselves (as `stats` does from a timeline).
            // The launch that follows carries what the graph runs.
            Event::NcclCollective(_)
            | Event::ProcessSeen(_)
            | Event::ProcessGone { .. }
            | Event::Graph(_)
            // `:counts` is the daemon's (refused here).
            | Event::Counted(_) => {}
        }
    }
}

/// Where the summary goes, opened before tracing starts (a file that
/// cannot be written is said at once, not after the trace).
pub(crate) struct SummaryOutput {
    format: SummaryFormat,
    file: Option<(PathBuf, File)>,
}

impl SummaryOutput {
    pub(crate) fn open(format: SummaryFormat, file: Option<&Path>) -> Result<Self> {
        let file = match file {
            None => None,
            Some(_) if format == SummaryFormat::None => {
                return Err(Failure::usage(
                    "--summary-file needs a summary: --summary text or --summary json",
                ))
            }
            Some(path) => {
                // As --output: never through a planted link (it runs as root).
                let f = crate::outputs::files::create_output(path).map_err(|e| {
                    Failure::runtime(format!("cannot write {}: {e}", path.display()))
                })?;
                Some((path.to_path_buf(), f))
            }
        };
        Ok(Self { format, file })
    }

    /// Writes the summary in its format.
    pub(crate) fn write(self, summary: &Summary) -> Result<()> {
        // Names the traced programs chose: no control or bidirectional
        // character reaches a terminal (`text`).
        let text = match self.format {
            SummaryFormat::Text => printable_lines(&render_text(summary)).into_owned(),
            SummaryFormat::Json => {
                printable_json(&format!("{}\n", render_json(summary))).into_owned()
            }
            SummaryFormat::None => return Ok(()),
        };
        match self.file {
            None => write_stdout(&text),
            Some((path, mut f)) => f
                .write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| Failure::runtime(format!("writing {} failed: {e}", path.display()))),
        }
    }
}

/// Writes `text` to stdout. A reader that went away (a closed pipe) is no
/// error: there is no one left to tell. Any other failure is one.
pub(crate) fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::runtime(format!("writing to stdout failed: {e}"))),
    }
}
