//! `--print`: one line per call on stdout, as calls come.

use std::fmt::Write as _;
use std::io::{BufWriter, Stdout, Write};

use crate::error::Failure;
use crate::model::call::Call;
use crate::model::sink::Halt;
use crate::model::sink::Sink;
use crate::model::Event;
use crate::schema::write::write_args;
use crate::units::fmt_ns;

/// Prints each call; the lines are flushed after each bite of calls, so
/// they appear promptly. A reader that goes away (`| head`) stops the
/// trace quietly; any other write error stops it with a failure.
pub(crate) struct PrintSink {
    out: BufWriter<Stdout>,
    line: String,
    error: Option<std::io::Error>,
}

impl PrintSink {
    pub(crate) fn stdout() -> Self {
        Self {
            out: BufWriter::with_capacity(1 << 16, std::io::stdout()),
            line: String::with_capacity(512),
            error: None,
        }
    }
}

impl PrintSink {
    /// Writes the line built, safe for a terminal: the names in it were
    /// chosen by the traced programs (`text::printable`: no control or
    /// bidirectional character gets through, whichever way it came).
    fn write_line(&mut self) {
        let safe = crate::text::printable(&self.line);
        let r = self
            .out
            .write_all(safe.as_bytes())
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }
}

fn halt(e: &std::io::Error) -> Halt {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Halt::ReaderGone
    } else {
        Halt::Failed(Failure::runtime(format!(
            "writing to stdout failed: {e}; tracing stopped"
        )))
    }
}

impl Sink for PrintSink {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Call { call, .. } if self.error.is_none() => {
                self.line.clear();
                format_line(&mut self.line, call);
                self.write_line();
            }
            Event::Gpu(w) if self.error.is_none() => {
                self.line.clear();
                format_gpu_line(&mut self.line, w);
                self.write_line();
            }
            // A new program: the lines after it carry its name.
            Event::Exec(x) if self.error.is_none() => {
                self.line.clear();
                clock_time(&mut self.line, x.ts_ns);
                let _ = write!(
                    self.line,
                    "{}[{}] exec: runs {} from here",
                    x.old_comm, x.pid, x.comm
                );
                self.write_line();
            }
            // One line per call, per GPU work and per exec only: stalls and
            // the GPU agents' news go to stderr (trace, daemon).
            Event::Call { .. }
            | Event::Gpu(_)
            | Event::Exec(_)
            | Event::GpuAgent(_)
            | Event::ProcessSeen(_)
            | Event::ProcessGone { .. }
            | Event::Graph(_)
            | Event::Lost(_)
            | Event::NcclCollective(_)
            | Event::NcclStall(_)
            | Event::NcclStallEnded(_)
            | Event::Sampling(_)
            // `:counts` is the daemon's (refused here).
            | Event::Counted(_) => {}
        }
    }

    fn flush(&mut self) -> Result<(), Halt> {
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
        self.error.as_ref().map_or(Ok(()), |e| Err(halt(e)))
    }
}

/// Names of common CUresult / ncclResult_t codes, for the printed line.
pub(crate) fn result_name(api: &str, ret: i64) -> Option<&'static str> {
    if api.starts_with("nccl") {
        return Some(match ret {
            0 => "ncclSuccess",
            1 => "ncclUnhandledCudaError",
            2 => "ncclSystemError",
            3 => "ncclInternalError",
            4 => "ncclInvalidArgument",
            5 => "ncclInvalidUsage",
            6 => "ncclRemoteError",
            7 => "ncclInProgress",
            _ => return None,
        });
    }
    Some(match ret {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}

/// Formats one call: `HH:MM:SS.uuuuuu comm[pid/tid] api dur ret {args}`.
fn clock_time(out: &mut String, ts_ns: u64) {
    out.push_str(&crate::units::fmt_clock(ts_ns));
    out.push(' ');
}

/// `--gpu-time`: one line per piece of GPU work, at its start on the GPU:
/// `HH:MM:SS.us [PID] GPU D stream S kernel NAME 12.3 us (queued 4.5 us
/// after cuLaunchKernel on thread T)`.
pub(crate) fn format_gpu_line(out: &mut String, w: &crate::model::gpu::GpuWork) {
    clock_time(out, w.start_ns);
    let _ = write!(
        out,
        "[{}] GPU {} stream {} {} {} {}",
        w.pid,
        w.device,
        w.stream,
        w.op.kind(),
        crate::text::printable(&w.op.label()),
        fmt_ns(w.dur_ns() as f64)
    );
    if let Some(b) = w.op.bytes() {
        let _ = write!(out, " {b} bytes");
    }
    if let (Some(l), Some(q)) = (&w.launch, w.queued_ns()) {
        let _ = write!(
            out,
            " (queued {} after {} on thread {})",
            fmt_ns(q as f64),
            l.api,
            l.tid
        );
    }
}

pub(crate) fn format_line(out: &mut String, c: &Call) {
    clock_time(out, c.ts_ns);
    let _ = write!(out, "{}[{}/{}] {} ", c.comm, c.pid, c.tid, c.api);
    match c.dur_ns {
        Some(d) => out.push_str(&fmt_ns(d as f64)),
        None => out.push('-'),
    }
    match c.ret {
        Some(r) => match result_name(c.api, r) {
            Some(n) if r != 0 => {
                let _ = write!(out, " ret={r} ({n}) ");
            }
            _ => {
                let _ = write!(out, " ret={r} ");
            }
        },
        None => out.push(' '),
    }
    write_args(out, &c.args);
}
