//! `top`'s terminal interface: the model of what each process does over
//! time (a sink of the session's events), the screen's state and actions,
//! the drawing, the keys, the terminal, and the GPUs' own figures (NVML).
//! The command and its loop are `commands::top`.

pub(crate) mod app;
mod columns;
#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod frames;
mod gemm_pane;
pub(crate) mod gpu;
pub(crate) mod input;
pub(crate) mod model;
pub(crate) mod snapshot;
pub(crate) mod terminal;
pub(crate) mod view;

use crate::model::sink::Sink;
use crate::model::sink::Status;
use crate::model::Event;
use model::Model;

/// The model as a sink, for one bite of events at `now_ns`.
pub(crate) struct ModelSink<'a> {
    pub model: &'a mut Model,
    pub now_ns: u64,
}

impl Sink for ModelSink<'_> {
    fn event(&mut self, event: &Event) {
        match event {
            // (gputrace's own calibration helpers are left out by the
            // session.)
            Event::Call { call, device_bytes } => {
                self.model.record(call, *device_bytes, self.now_ns)
            }
            Event::ProcessSeen(info) => self.model.seen(info.pid, &info.comm, self.now_ns),
            Event::ProcessGone { pid, exited_ns } => self.model.gone(*pid, *exited_ns),
            // The launch that follows carries what the graph runs.
            Event::Graph(_) => {}
            Event::Lost(report) => {
                self.model.set_lost(&report.by_pid);
                self.model.lost = report.total.events_lost();
            }
            Event::NcclStall(s) => self.model.nccl_stall(s),
            Event::NcclStallEnded(e) => self.model.nccl_stall_over(e),
            // The process table counts calls; skew is in the summary.
            Event::NcclCollective(_) => {}
            Event::Sampling(r) => self.model.sampling = Some(r.ratio()),
            Event::Gpu(w) => self.model.gpu(w, self.now_ns),
            Event::GpuAgent(n) => self.model.gpu_note(n),
            Event::Exec(x) => self.model.exec(x.pid, &x.comm),
            // `:counts` is the daemon's (refused here).
            Event::Counted(_) => {}
        }
    }

    fn tick(&mut self, status: &Status) {
        self.model.probes = status.probes;
    }
}
