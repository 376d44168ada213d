//! The graph APIs' arguments decoded from a probe record: a node from the
//! parameter struct the probe copied at entry, the handles made and used.

use crate::model::graph::*;
use crate::model::raw::RawCall;
use crate::model::types::Direction;

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn dims_at(b: &[u8], off: usize) -> Option<[u32; 3]> {
    Some([u32_at(b, off)?, u32_at(b, off + 4)?, u32_at(b, off + 8)?])
}

/// `CUDA_KERNEL_NODE_PARAMS` (v1 when `v2` is false) at `b`.
fn kernel_at(b: &[u8], v2: bool) -> Option<Node> {
    Some(Node::Kernel(KernelNode {
        function: u64_at(b, 0)?,
        cukernel: if v2 { u64_at(b, 56)? } else { 0 },
        kernel: None,
        grid: dims_at(b, 8)?,
        block: dims_at(b, 20)?,
        shared_mem_bytes: u32_at(b, 32)?,
    }))
}

/// `CUmemorytype` of a copy's side → whether it is device memory
/// (HOST 1, DEVICE 2, ARRAY 3; UNIFIED 4 could be either).
fn on_device(memory_type: u32) -> Option<bool> {
    match memory_type {
        1 => Some(false),
        2 | 3 => Some(true),
        _ => None,
    }
}

/// `CUDA_MEMCPY3D` at `b`.
fn memcpy_at(b: &[u8]) -> Option<Node> {
    let (src, dst) = (u32_at(b, 32)?, u32_at(b, 120)?);
    let (w, h, d) = (u64_at(b, 176)?, u64_at(b, 184)?, u64_at(b, 192)?);
    let direction = match (on_device(src), on_device(dst)) {
        (Some(false), Some(true)) => Direction::HtoD,
        (Some(true), Some(false)) => Direction::DtoH,
        (Some(true), Some(true)) => Direction::DtoD,
        (Some(false), Some(false)) => Direction::HtoH,
        _ => Direction::Unknown,
    };
    Some(Node::Memcpy {
        bytes: w.saturating_mul(h.max(1)).saturating_mul(d.max(1)),
        direction,
    })
}

/// `CUDA_MEMSET_NODE_PARAMS` at `b`.
fn memset_at(b: &[u8]) -> Option<Node> {
    let elem = u64::from(u32_at(b, 20)?);
    let (width, height) = (u64_at(b, 24)?, u64_at(b, 32)?);
    Some(Node::Memset {
        bytes: elem.saturating_mul(width).saturating_mul(height.max(1)),
    })
}

/// `CUgraphNodeParams`: the type at 0, its union at 16.
fn generic_at(b: &[u8]) -> Option<Node> {
    let u = b.get(16..)?;
    Some(match u32_at(b, 0)? {
        node_type::KERNEL => kernel_at(u, true)?,
        // CUDA_MEMCPY_NODE_PARAMS: flags, reserved, copyCtx, then CUDA_MEMCPY3D.
        node_type::MEMCPY => memcpy_at(u.get(16..)?)?,
        node_type::MEMSET => memset_at(u)?,
        node_type::GRAPH => Node::Child {
            graph: u64_at(u, 0)?,
            moved: u32_at(u, 8)? == 1,
        },
        node_type::EMPTY => Node::Empty,
        node_type::WAIT_EVENT => Node::EventWait {
            event: u64_at(u, 0)?,
        },
        node_type::EVENT_RECORD => Node::EventRecord {
            event: u64_at(u, 0)?,
        },
        node_type::CONDITIONAL => Node::Conditional,
        t => Node::Other { node_type: t },
    })
}

/// The node an argument describes: `value` is the argument itself (a
/// handle passed by value), the blob what it pointed to.
pub(crate) fn node_of(params: Params, value: u64, blob: Option<&[u8]>) -> Node {
    let b = blob.unwrap_or(&[]);
    let node = match params {
        Params::KernelV1 => kernel_at(b, false),
        Params::KernelV2 => kernel_at(b, true),
        Params::Memcpy => memcpy_at(b),
        Params::Memset => memset_at(b),
        Params::Generic => generic_at(b),
        Params::Child => Some(Node::Child {
            graph: value,
            moved: false,
        }),
        Params::EventRecord => Some(Node::EventRecord { event: value }),
        Params::EventWait => Some(Node::EventWait { event: value }),
        Params::Empty => Some(Node::Empty),
        Params::Opaque(o) => Some(Node::Other {
            node_type: match o {
                OpaqueNode::Host => node_type::HOST,
                OpaqueNode::MemAlloc => node_type::MEM_ALLOC,
                OpaqueNode::MemFree => node_type::MEM_FREE,
                OpaqueNode::SemaphoresSignal => node_type::EXT_SEMAS_SIGNAL,
                OpaqueNode::SemaphoresWait => node_type::EXT_SEMAS_WAIT,
                OpaqueNode::BatchMemOp => node_type::BATCH_MEM_OP,
            },
        }),
    };
    node.unwrap_or(Node::Unread)
}

/// Decodes a graph API call. `out(i)` is the value read through out-pointer
/// slot `i` at return, `None` when the call failed or had no return probe.
pub(crate) fn decode(
    op: GraphOp,
    raw: &RawCall<'_>,
    out: impl Fn(usize) -> Option<u64>,
) -> GraphCall {
    let a = |i: usize| raw.event.args[i];
    let out32 = |i: usize| out(i).map(|v| v as u32);
    match op {
        GraphOp::BeginCapture { mode, to_graph } => GraphCall::BeginCapture {
            stream: a(0),
            mode: mode.map(|i| a(i as usize) as u32),
            graph: to_graph.then(|| a(1)),
        },
        GraphOp::EndCapture => GraphCall::EndCapture {
            stream: a(0),
            graph: out(0).filter(|g| *g != 0),
        },
        GraphOp::IsCapturing => GraphCall::CaptureStatus {
            stream: a(0),
            status: out32(0),
            id: None,
        },
        GraphOp::CaptureInfo => GraphCall::CaptureStatus {
            stream: a(0),
            status: out32(0),
            // Written only while the capture is active.
            id: out(1).filter(|_| out32(0) == Some(1)),
        },
        GraphOp::Create => GraphCall::Create { graph: out(0) },
        GraphOp::AddNode { params, at } => GraphCall::AddNode {
            graph: a(1),
            node: out(0),
            spec: node_of(params, a(at as usize), raw.blob),
        },
        GraphOp::SetNode { params } => GraphCall::SetNode {
            node: a(0),
            spec: node_of(params, a(1), raw.blob),
        },
        GraphOp::Clone => GraphCall::Clone {
            original: a(1),
            clone: out(0),
        },
        GraphOp::FindInClone => GraphCall::FindInClone {
            original: a(1),
            clone: a(2),
            node: out(0),
        },
        GraphOp::ChildGraph => GraphCall::ChildGraph {
            node: a(0),
            graph: out(0),
        },
        GraphOp::DestroyNode => GraphCall::DestroyNode { node: a(0) },
        GraphOp::Destroy => GraphCall::Destroy { graph: a(0) },
        GraphOp::Instantiate => GraphCall::Instantiate {
            graph: a(1),
            exec: out(0),
        },
        GraphOp::ExecUpdate => GraphCall::ExecUpdate {
            exec: a(0),
            graph: a(1),
        },
        GraphOp::ExecSetNode { params } => GraphCall::ExecSetNode {
            exec: a(0),
            node: a(1),
            spec: node_of(params, a(2), raw.blob),
        },
        GraphOp::ExecSetEnabled => GraphCall::ExecSetEnabled {
            exec: a(0),
            node: a(1),
            enabled: a(2) as u32 != 0,
        },
        GraphOp::Upload => GraphCall::Upload {
            exec: a(0),
            stream: a(1),
        },
        GraphOp::ExecDestroy => GraphCall::ExecDestroy { exec: a(0) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    fn kernel_params(b: &mut [u8], f: u64, k: u64) {
        put64(b, 0, f);
        for (i, v) in [32, 4, 2, 128, 2, 1, 8192].into_iter().enumerate() {
            put32(b, 8 + 4 * i, v);
        }
        if b.len() >= 72 {
            put64(b, 56, k);
        }
    }

    #[test]
    fn kernel_parameters_v1_v2_and_generic() {
        let mut v1 = [0u8; 56];
        kernel_params(&mut v1, 0xf00, 0);
        let Node::Kernel(k) = node_of(Params::KernelV1, 0, Some(&v1)) else {
            panic!()
        };
        assert_eq!(
            (k.function, k.grid, k.block, k.shared_mem_bytes, k.cukernel),
            (0xf00, [32, 4, 2], [128, 2, 1], 8192, 0)
        );
        let mut v2 = [0u8; 72];
        kernel_params(&mut v2, 0, 0xcafe);
        let Node::Kernel(k) = node_of(Params::KernelV2, 0, Some(&v2)) else {
            panic!()
        };
        assert_eq!((k.function, k.cukernel, k.handle()), (0, 0xcafe, 0xcafe));
        let mut g = [0u8; 256];
        put32(&mut g, 0, node_type::KERNEL);
        kernel_params(&mut g[16..88], 0xf1, 0);
        let Node::Kernel(k) = node_of(Params::Generic, 0, Some(&g)) else {
            panic!()
        };
        assert_eq!((k.function, k.grid), (0xf1, [32, 4, 2]));
        // A failed copy (empty blob) is not a guess.
        assert_eq!(node_of(Params::KernelV2, 0, Some(&[])), Node::Unread);
        assert_eq!(node_of(Params::KernelV2, 0, None), Node::Unread);
    }

    #[test]
    fn copies_and_memsets() {
        let mut m = [0u8; 200];
        put32(&mut m, 32, 2); // src device
        put32(&mut m, 120, 1); // dst host
        put64(&mut m, 176, 8192);
        put64(&mut m, 184, 1);
        put64(&mut m, 192, 0);
        assert_eq!(
            node_of(Params::Memcpy, 0, Some(&m)),
            Node::Memcpy {
                bytes: 8192,
                direction: Direction::DtoH
            }
        );
        put32(&mut m, 32, 4); // unified: not known
        let Node::Memcpy { direction, .. } = node_of(Params::Memcpy, 0, Some(&m)) else {
            panic!()
        };
        assert_eq!(direction, Direction::Unknown);
        let mut g = [0u8; 256];
        put32(&mut g, 0, node_type::MEMCPY);
        g[32..232].copy_from_slice(&m);
        put32(&mut g, 32 + 32, 1);
        put32(&mut g, 32 + 120, 2);
        assert_eq!(
            node_of(Params::Generic, 0, Some(&g)),
            Node::Memcpy {
                bytes: 8192,
                direction: Direction::HtoD
            }
        );
        let mut s = [0u8; 40];
        put32(&mut s, 20, 4);
        put64(&mut s, 24, 2048);
        put64(&mut s, 32, 1);
        assert_eq!(
            node_of(Params::Memset, 0, Some(&s)),
            Node::Memset { bytes: 8192 }
        );
    }

    #[test]
    fn generic_child_event_and_other_types() {
        let mut g = [0u8; 256];
        put32(&mut g, 0, node_type::GRAPH);
        put64(&mut g, 16, 0x9000);
        put32(&mut g, 24, 1);
        assert_eq!(
            node_of(Params::Generic, 0, Some(&g)),
            Node::Child {
                graph: 0x9000,
                moved: true
            }
        );
        put32(&mut g, 0, node_type::CONDITIONAL);
        assert_eq!(node_of(Params::Generic, 0, Some(&g)), Node::Conditional);
        put32(&mut g, 0, node_type::HOST);
        let host = node_of(Params::Generic, 0, Some(&g));
        assert_eq!(host.kind(), "host");
        assert_eq!(Node::other_type("host"), Some(node_type::HOST));
        assert_eq!(
            node_of(Params::Child, 0x77, None),
            Node::Child {
                graph: 0x77,
                moved: false
            }
        );
        assert_eq!(
            node_of(Params::Opaque(OpaqueNode::MemFree), 0, None).kind(),
            "mem_free"
        );
    }
}
