//! Calls and GPU work for unit tests, in one place.

use std::sync::Arc;

use crate::model::call::{Args, Call, Launch};
use crate::model::gpu::{GpuLaunch, GpuOp, GpuWork};
use crate::model::types::Family;

/// A successful call of process 1 on thread `tid`.
pub(crate) fn call(tid: u32, api: &'static str, ts: u64, dur: u64, args: Args) -> Call {
    let family = match &args {
        Args::Launch(_) => Some(Family::Launch),
        Args::Gemm(_) => Some(Family::Blas),
        Args::Nccl(_) => Some(Family::Nccl),
        _ => None,
    };
    Call {
        ts_ns: ts,
        dur_ns: Some(dur),
        pid: 1,
        tid,
        comm: Arc::from("p"),
        api,
        family,
        ret: Some(0),
        args,
        stack: None,
    }
}

/// A kernel launch's arguments (run, not captured).
pub(crate) fn launch_args(kernel: &str) -> Args {
    Args::Launch(Launch {
        function: 0x1000,
        stub: 0,
        kernel: Some(Arc::from(kernel)),
        grid: [1, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        stream: 0,
        captured: None,
    })
}

/// A kernel of process 1 that ran `dur` ns from `start` on device 0,
/// stream 7, with no launch call known.
pub(crate) fn gpu_kernel(name: &str, start: u64, dur: u64) -> GpuWork {
    GpuWork {
        pid: 1,
        device: 0,
        context: 1,
        stream: 7,
        correlation: 1,
        start_ns: start,
        end_ns: start + dur,
        op: GpuOp::Kernel {
            name: Some(Arc::from(name)),
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
            registers: 0,
            graph: None,
        },
        launch: None,
    }
}

/// `w` launched by the libcuda call that started at `call_start` on `tid`.
pub(crate) fn launched_by(mut w: GpuWork, tid: u32, call_start: u64) -> GpuWork {
    w.launch = Some(GpuLaunch {
        tid,
        api: "cuLaunchKernel",
        api_start_ns: call_start,
        call: Some((call_start, "cuLaunchKernel")),
        nccl: None,
    });
    w
}
