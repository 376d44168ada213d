//! Calls and GPU work for unit tests, in one place.

use std::sync::Arc;

use crate::model::call::{Args, Call, Launch, Nccl};
use crate::model::gpu::{GpuLaunch, GpuOp, GpuWork};
use crate::model::nccl::Identity;
use crate::model::types::{Family, NcclOp};

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
        epoch: 0,
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

/// An NCCL call's arguments on communicator 0x10: `count` elements of
/// `datatype` (`ncclDataType_t`), the communicator's size as the call
/// read it (`None`: not read).
pub(crate) fn nccl_args(op: NcclOp, count: u64, datatype: i64, nranks: Option<u32>) -> Args {
    Args::Nccl(Nccl {
        op,
        count,
        datatype,
        redop: Some(0),
        root: None,
        peer: None,
        comm: 0x10,
        stream: 2,
        ident: Identity {
            nranks,
            ..Default::default()
        },
        unaligned: None,
    })
}

/// cublasGemmStridedBatchedEx N,N 8×`m`×64×128 fp16 (32F), as decoded.
pub(crate) fn gemm_args(m: i64) -> Args {
    use crate::model::gemm::{Gemm, GemmForm};
    let regs = [1, 0, 0, m as u64, 64, 128];
    let mut stack = vec![0u8; GemmForm::StridedEx.stack_bytes()];
    for (pos, v) in [(8usize, 2u64), (12, 2), (17, 2), (20, 8), (21, 68)] {
        stack[(pos - 6) * 8..(pos - 5) * 8].copy_from_slice(&v.to_le_bytes());
    }
    Args::Gemm(Gemm::decode(GemmForm::StridedEx, &regs, &stack, false))
}
