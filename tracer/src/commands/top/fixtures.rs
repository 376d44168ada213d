//! Calls made up for the tests of `top` (the model's and the frames').

use std::sync::Arc;

use crate::aggregate::enrich::Enriched;
use crate::events::model::{Args, Call, Launch, Memcpy};
use crate::probes::catalogue::{Direction, Family};

pub(crate) fn call(
    pid: u32,
    comm: &str,
    api: &'static str,
    ts_ns: u64,
    dur_ns: u64,
    args: Args,
) -> Enriched {
    Enriched {
        call: Call {
            ts_ns,
            dur_ns: Some(dur_ns),
            pid,
            tid: pid,
            comm: Arc::from(comm),
            api,
            family: Some(Family::Launch),
            ret: Some(0),
            args,
        },
        device_bytes: None,
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
