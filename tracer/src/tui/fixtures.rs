//! Calls made up for the tests of `top` (the model's and the frames').

use std::sync::Arc;

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::call::Launch;
use crate::model::call::Memcpy;
use crate::model::types::Direction;
use crate::model::types::Family;
use crate::tui::model::Model;

pub(crate) fn call(
    pid: u32,
    comm: &str,
    api: &'static str,
    ts_ns: u64,
    dur_ns: u64,
    args: Args,
) -> Traced {
    Traced {
        call: Call {
            ts_ns,
            dur_ns: Some(dur_ns),
            pid,
            tid: pid,
            comm: Arc::from(comm),
            api,
            family: Some(Family::Launch),
            ret: Some(0),
            stack: None,
            args,
        },
        device_bytes: None,
    }
}

/// A call as the session hands it on: with device memory in use after it.
pub(crate) struct Traced {
    pub call: Call,
    pub device_bytes: Option<u64>,
}

impl Model {
    /// Counts a made-up call at `now_ns`.
    pub(crate) fn feed(&mut self, e: &Traced, now_ns: u64) {
        self.record(&e.call, e.device_bytes, now_ns);
    }
}

pub(crate) fn launch(kernel: Option<&str>, grid: u32) -> Args {
    Args::Launch(Launch {
        function: 0x10,
        stub: 0,
        kernel: kernel.map(Arc::from),
        grid: [grid, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        stream: 0,
        captured: None,
    })
}

pub(crate) fn copy(direction: Direction, bytes: u64) -> Args {
    Args::Memcpy(Memcpy {
        dst: 1,
        src: Some(2),
        bytes,
        direction,
        stream: None,
        value: None,
        readable: (false, false),
        captured: None,
    })
}
