//! The `graphs` probe family: stream capture, graph construction,
//! instantiation, updates of executable graphs, and destruction. Every
//! symbol libcuda 580 exports for these (tests/sim mirrors them), each under
//! its own name; prototypes as in cuda.h (CUDA 12.x/13.0), argument
//! positions 0-based. `cuGraphLaunch` stays in the `launch` family.
//!
//! Structures behind pointers are copied at entry (the probes' blob) and
//! decoded in `events::graph`; the handles a call creates (graph, node,
//! executable graph) are read through its out-pointer at return.

use crate::model::graph::GraphOp;
use crate::model::graph::OpaqueNode;
use crate::model::graph::Params;

/// One row: the symbol, its suffixes, what it does.
pub(crate) struct GraphRow(pub &'static str, pub &'static [&'static str], pub GraphOp);

/// Every graph API gputrace probes.
#[rustfmt::skip]
pub(crate) fn rows() -> Vec<GraphRow> {
    use GraphOp as G;
    use OpaqueNode::*;
    use Params as P;
    const PTSZ: &[&str] = &["", "_ptsz"];
    const PLAIN: &[&str] = &[""];
    let add = |params, at| G::AddNode { params, at };
    let set = |params| G::SetNode { params };
    let exec_set = |params| G::ExecSetNode { params };
    vec![
        GraphRow("cuStreamBeginCapture",        PTSZ, G::BeginCapture { mode: None, to_graph: false }),
        GraphRow("cuStreamBeginCapture_v2",     PTSZ, G::BeginCapture { mode: Some(1), to_graph: false }),
        GraphRow("cuStreamBeginCaptureToGraph", PTSZ, G::BeginCapture { mode: Some(5), to_graph: true }),
        GraphRow("cuStreamEndCapture",          PTSZ, G::EndCapture),
        GraphRow("cuStreamIsCapturing",         PTSZ, G::IsCapturing),
        GraphRow("cuStreamGetCaptureInfo",      PTSZ, G::CaptureInfo),
        GraphRow("cuStreamGetCaptureInfo_v2",   PTSZ, G::CaptureInfo),
        GraphRow("cuStreamGetCaptureInfo_v3",   PTSZ, G::CaptureInfo),

        GraphRow("cuGraphCreate",                          PLAIN, G::Create),
        GraphRow("cuGraphAddKernelNode",                   PLAIN, add(P::KernelV1, 4)),
        GraphRow("cuGraphAddKernelNode_v2",                PLAIN, add(P::KernelV2, 4)),
        GraphRow("cuGraphAddMemcpyNode",                   PLAIN, add(P::Memcpy, 4)),
        GraphRow("cuGraphAddMemsetNode",                   PLAIN, add(P::Memset, 4)),
        GraphRow("cuGraphAddChildGraphNode",               PLAIN, add(P::Child, 4)),
        GraphRow("cuGraphAddEmptyNode",                    PLAIN, add(P::Empty, 4)),
        GraphRow("cuGraphAddEventRecordNode",              PLAIN, add(P::EventRecord, 4)),
        GraphRow("cuGraphAddEventWaitNode",                PLAIN, add(P::EventWait, 4)),
        GraphRow("cuGraphAddHostNode",                     PLAIN, add(P::Opaque(Host), 4)),
        GraphRow("cuGraphAddMemAllocNode",                 PLAIN, add(P::Opaque(MemAlloc), 4)),
        GraphRow("cuGraphAddMemFreeNode",                  PLAIN, add(P::Opaque(MemFree), 4)),
        GraphRow("cuGraphAddExternalSemaphoresSignalNode", PLAIN, add(P::Opaque(SemaphoresSignal), 4)),
        GraphRow("cuGraphAddExternalSemaphoresWaitNode",   PLAIN, add(P::Opaque(SemaphoresWait), 4)),
        GraphRow("cuGraphAddBatchMemOpNode",               PLAIN, add(P::Opaque(BatchMemOp), 4)),
        // 12.2 form (5 arguments), then 13.0's with edge data (params 6th).
        GraphRow("cuGraphAddNode",                         PLAIN, add(P::Generic, 4)),
        GraphRow("cuGraphAddNode_v2",                      PLAIN, add(P::Generic, 5)),
        GraphRow("cuGraphKernelNodeSetParams",             PLAIN, set(P::KernelV1)),
        GraphRow("cuGraphKernelNodeSetParams_v2",          PLAIN, set(P::KernelV2)),
        GraphRow("cuGraphMemcpyNodeSetParams",             PLAIN, set(P::Memcpy)),
        GraphRow("cuGraphMemsetNodeSetParams",             PLAIN, set(P::Memset)),
        GraphRow("cuGraphNodeSetParams",                   PLAIN, set(P::Generic)),
        GraphRow("cuGraphClone",                           PLAIN, G::Clone),
        GraphRow("cuGraphNodeFindInClone",                 PLAIN, G::FindInClone),
        GraphRow("cuGraphChildGraphNodeGetGraph",          PLAIN, G::ChildGraph),
        GraphRow("cuGraphDestroyNode",                     PLAIN, G::DestroyNode),
        GraphRow("cuGraphDestroy",                         PLAIN, G::Destroy),

        GraphRow("cuGraphInstantiate",                     PLAIN, G::Instantiate),
        GraphRow("cuGraphInstantiate_v2",                  PLAIN, G::Instantiate),
        GraphRow("cuGraphInstantiateWithFlags",            PLAIN, G::Instantiate),
        GraphRow("cuGraphInstantiateWithParams",           PTSZ,  G::Instantiate),
        GraphRow("cuGraphExecUpdate",                      PLAIN, G::ExecUpdate),
        GraphRow("cuGraphExecUpdate_v2",                   PLAIN, G::ExecUpdate),
        GraphRow("cuGraphExecKernelNodeSetParams",         PLAIN, exec_set(P::KernelV1)),
        GraphRow("cuGraphExecKernelNodeSetParams_v2",      PLAIN, exec_set(P::KernelV2)),
        GraphRow("cuGraphExecMemcpyNodeSetParams",         PLAIN, exec_set(P::Memcpy)),
        GraphRow("cuGraphExecMemsetNodeSetParams",         PLAIN, exec_set(P::Memset)),
        GraphRow("cuGraphExecNodeSetParams",               PLAIN, exec_set(P::Generic)),
        GraphRow("cuGraphExecChildGraphNodeSetParams",     PLAIN, exec_set(P::Child)),
        GraphRow("cuGraphNodeSetEnabled",                  PLAIN, G::ExecSetEnabled),
        GraphRow("cuGraphUpload",                          PTSZ,  G::Upload),
        GraphRow("cuGraphExecDestroy",                     PLAIN, G::ExecDestroy),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::ProbeCookie;

    #[test]
    fn cookies_point_at_the_right_arguments() {
        let c = ProbeCookie::new(3);
        let add = GraphOp::AddNode {
            params: Params::KernelV2,
            at: 4,
        }
        .cookie(c);
        assert_eq!(
            (add.out_arg(0), add.blob_source(), add.blob_len()),
            (1, 5, 72)
        );
        let add6 = GraphOp::AddNode {
            params: Params::Generic,
            at: 5,
        }
        .cookie(c);
        assert_eq!((add6.blob_source(), add6.blob_len()), (6, 256));
        let child = GraphOp::AddNode {
            params: Params::Child,
            at: 4,
        }
        .cookie(c);
        assert_eq!((child.out_arg(0), child.blob_source()), (1, 0));
        let exec = GraphOp::ExecSetNode {
            params: Params::Memcpy,
        }
        .cookie(c);
        assert_eq!((exec.blob_source(), exec.blob_len()), (3, 200));
        let info = GraphOp::CaptureInfo.cookie(c);
        assert_eq!((info.out_arg(0), info.out_arg(1)), (2, 3));
        assert_eq!(GraphOp::EndCapture.cookie(c).out_arg(0), 2);
        assert!(!GraphOp::Destroy.cookie(c).stack_args());
    }
}
