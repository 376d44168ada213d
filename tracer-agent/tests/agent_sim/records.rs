//! What the records say: exact counts, GPU durations, correlation to the
//! API records, graph kernels, copies and memsets.

use std::collections::HashMap;

use tracer_common::gpu::{
    ClockKind, API_DOMAIN_DRIVER, FEATURE_API_BY_CBID, FEATURE_CUPTI_PRELOADED,
    FEATURE_RUNTIME_API_BY_CBID, FEATURE_SYSTEM_TID, KIND_ALL,
};

use crate::harness::{start_with_agent, windows};
use crate::*;

const CB_LAUNCH: u32 = 307;
const CB_LAUNCH_EX: u32 = 652;
const CB_COOP: u32 = 477;
const CB_GRAPH: u32 = 514;

/// Every launch gets one kernel record and one API record; durations are
/// the simulator's formula; each kernel joins its API record by correlation
/// id, and that record's tid and times lie inside the workload's own launch
/// window of that thread.
#[test]
fn every_launch_has_a_kernel_and_an_api_record() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--threads",
            "2",
            "--launches",
            "30",
            "--launch-ex",
            "4",
            "--coop",
            "3",
            "--varied",
            "25",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    let per_thread = 30 + 4 + 3 + 25;
    ag.poll_until(20, "all records", |r, _| r.len() >= 2 * 2 * per_thread);
    let s = ag.snap();
    assert_eq!(s.records_written, 4 * per_thread as u64);
    assert_eq!(
        (
            s.ring_dropped,
            s.cupti_dropped,
            s.names_dropped,
            s.records_skipped
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(s.clock_kind(), Some(ClockKind::Monotonic));
    assert_eq!(s.kinds, KIND_ALL);
    let f = FEATURE_API_BY_CBID | FEATURE_RUNTIME_API_BY_CBID | FEATURE_SYSTEM_TID;
    assert_eq!(s.features & f, f);
    assert_eq!((s.pid, s.cupti_version), (wl.pid as u32, 130001));
    assert_eq!(
        s.features & FEATURE_CUPTI_PRELOADED,
        0,
        "the agent loaded libcupti itself"
    );
    let sp = split(&ag.records);
    assert_eq!(
        (sp.kernels.len(), sp.apis.len()),
        (2 * per_thread, 2 * per_thread)
    );
    assert!(sp.memcpys.is_empty() && sp.memsets.is_empty());
    let apis = sp.api_by_corr();
    let kernels: HashMap<u32, KernelRecord> = sp
        .kernels
        .iter()
        .map(|k| (k.common.correlation, *k))
        .collect();
    assert_eq!(
        kernels.len(),
        sp.kernels.len(),
        "one kernel per correlation id"
    );
    for k in &sp.kernels {
        let a = apis[&k.common.correlation];
        assert_eq!(k.common.end - k.common.start, kernel_ns(k.grid, k.block));
        assert!(k.common.start >= a.common.start + 2000);
        assert_eq!(
            (k.graph_id, k.graph_node_id, k.registers, k.static_shared),
            (0, 0, 32, 0)
        );
        assert_eq!(k.launch_type, (a.cbid == CB_COOP) as u32);
    }
    sp.check_stream_timelines();

    // Per thread, in call order (correlation ids grow with each call).
    let mut by_tid: HashMap<u32, Vec<ApiRecord>> = HashMap::new();
    for a in &sp.apis {
        assert_eq!(
            (a.pid, a.result, a.domain),
            (wl.pid as u32, 0, API_DOMAIN_DRIVER)
        );
        by_tid.entry(a.tid).or_default().push(*a);
    }
    assert_eq!(by_tid.len(), 2);
    let streams: Vec<u32> = by_tid
        .values_mut()
        .map(|v| {
            v.sort_by_key(|a| a.common.correlation);
            let mut expect = Vec::new();
            for i in 0..30u32 {
                let name = [VECTOR_ADD, REDUCE, RELU][i as usize % 3];
                expect.push((CB_LAUNCH, name, [64, 2, 1], [256, 1, 1], 4096));
            }
            expect.extend([(CB_LAUNCH_EX, GEMM, [32, 4, 2], [128, 2, 1], 8192); 4]);
            expect.extend([(CB_COOP, VECTOR_ADD, [16, 1, 1], [512, 1, 1], 0); 3]);
            for i in 0..25u32 {
                let name = [VECTOR_ADD, REDUCE, RELU][i as usize % 3];
                let grid = [1 + i % 5, 1 + i % 3, 1 + i % 2];
                expect.push((CB_LAUNCH, name, grid, [32 * (1 + i % 4), 1 + i % 2, 1], 0));
            }
            assert_eq!(v.len(), expect.len());
            for (a, (cbid, name, grid, block, shmem)) in v.iter().zip(expect) {
                let k = kernels[&a.common.correlation];
                assert_eq!(
                    (a.cbid, k.grid, k.block, k.dynamic_shared),
                    (cbid, grid, block, shmem)
                );
                assert_eq!(ag.name(k.name_id), name);
            }
            kernels[&v[0].common.correlation].common.stream
        })
        .collect();
    assert_ne!(
        streams[0], streams[1],
        "each worker launches on its own stream"
    );
    assert!(
        s.names_used < 4 * 64,
        "each name stored once: {} bytes",
        s.names_used
    );

    wl.release();
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    assert_eq!(
        lines.last().unwrap(),
        &format!("done calls={}", 2 * per_thread)
    );
    let win = windows(&lines);
    for a in &sp.apis {
        let (lo, hi) = win[&a.tid];
        assert!(
            lo <= a.common.start && a.common.start <= a.common.end && a.common.end <= hi,
            "API record outside its thread's window"
        );
    }
}

/// Replays of graphs instantiated before the agent started, in a process
/// that maps libcupti itself (as PyTorch does): one kernel, memcpy or memset
/// record per node, each with the graph launch's correlation id, the
/// graph's id and a node id of its own.
#[test]
fn graph_replays_report_every_node() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--map-cupti",
            "--graph-replays",
            "2",
            "--graphs-before-wait",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    // 6 launches: 2 x (4 kernels, memcpy, memset) + 4 x (5 kernels, memcpy, memset) + 6 API records.
    ag.poll_until(20, "graph records", |r, _| r.len() >= 2 * 6 + 4 * 7 + 6);
    assert_ne!(
        ag.snap().features & FEATURE_CUPTI_PRELOADED,
        0,
        "the mapped libcupti was used"
    );
    let sp = split(&ag.records);
    assert_eq!(
        (
            sp.kernels.len(),
            sp.memcpys.len(),
            sp.memsets.len(),
            sp.apis.len()
        ),
        (28, 6, 6, 6)
    );
    let mut captured = 0;
    let mut graph_ids = Vec::new();
    for a in &sp.apis {
        assert_eq!(a.cbid, CB_GRAPH);
        let corr = a.common.correlation;
        let ks: Vec<&KernelRecord> = sp
            .kernels
            .iter()
            .filter(|k| k.common.correlation == corr)
            .collect();
        let cs: Vec<&MemcpyRecord> = sp
            .memcpys
            .iter()
            .filter(|m| m.common.correlation == corr)
            .collect();
        let ms: Vec<&MemsetRecord> = sp
            .memsets
            .iter()
            .filter(|m| m.common.correlation == corr)
            .collect();
        assert_eq!((cs.len(), ms.len()), (1, 1));
        let gid = ks[0].graph_id;
        assert_ne!(gid, 0);
        let mut nodes: Vec<u64> = ks.iter().map(|k| k.graph_node_id).collect();
        nodes.push(cs[0].graph_node_id);
        nodes.push(ms[0].graph_node_id);
        assert!(
            ks.iter().all(|k| k.graph_id == gid) && cs[0].graph_id == gid && ms[0].graph_id == gid
        );
        assert!(nodes
            .iter()
            .all(|n| n >> 32 == gid as u64 && n & 0xffff_ffff != 0));
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), ks.len() + 2, "distinct node ids");
        let mut got: Vec<(String, [u32; 3], [u32; 3])> = ks
            .iter()
            .map(|k| (ag.name(k.name_id), k.grid, k.block))
            .collect();
        got.sort();
        let mut want: Vec<(String, [u32; 3], [u32; 3])> = if ks.len() == 4 {
            captured += 1;
            assert_eq!(
                (cs[0].bytes, cs[0].copy_kind, cs[0].src_kind, cs[0].dst_kind),
                (4096, 1, 2, 3)
            );
            assert_eq!((ms[0].bytes, ms[0].value), (1024, 0));
            vec![
                (VECTOR_ADD.into(), [64, 2, 1], [256, 1, 1]),
                (GEMM.into(), [32, 4, 2], [128, 2, 1]),
                (REDUCE.into(), [16, 1, 1], [512, 1, 1]),
                (RELU.into(), [8, 1, 1], [128, 1, 1]),
            ]
        } else {
            assert_eq!(
                (cs[0].bytes, cs[0].copy_kind, cs[0].src_kind, cs[0].dst_kind),
                (8192, 2, 3, 2)
            );
            assert_eq!((ms[0].bytes, ms[0].value), (4096, 7));
            vec![
                (VECTOR_ADD.into(), [12, 1, 1], [64, 1, 1]),
                (GEMM.into(), [32, 4, 2], [128, 2, 1]),
                (RELU.into(), [4, 1, 1], [64, 1, 1]),
                (RELU.into(), [2, 2, 1], [32, 4, 1]),
                (REDUCE.into(), [6, 1, 1], [256, 1, 1]),
            ]
        };
        want.sort();
        assert_eq!(got, want);
        for k in &ks {
            assert_eq!(k.common.end - k.common.start, kernel_ns(k.grid, k.block));
        }
        assert_eq!(
            cs[0].common.end - cs[0].common.start,
            cs[0].bytes / 10 + 1000
        );
        assert_eq!(
            ms[0].common.end - ms[0].common.start,
            ms[0].bytes / 40 + 500
        );
        graph_ids.push(gid);
    }
    assert_eq!(captured, 2);
    graph_ids.sort();
    graph_ids.dedup();
    assert_eq!(graph_ids.len(), 3, "three executable graphs");
    sp.check_stream_timelines();
    wl.release();
    assert!(wl.wait(30).0.success());
}

/// Copies and memsets: bytes, direction and memory kinds of each call of
/// the workload's copy section, and their durations.
#[test]
fn copies_and_memsets_have_bytes_and_direction() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--copies",
            "2",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    ag.poll_until(20, "copy records", |r, _| r.len() >= 2 * 2 * 12);
    let sp = split(&ag.records);
    assert_eq!(
        (
            sp.memcpys.len(),
            sp.memsets.len(),
            sp.apis.len(),
            sp.kernels.len()
        ),
        (22, 2, 24, 0)
    );
    let (pageable, pinned, device) = (1u8, 2u8, 3u8);
    // (cbid, bytes, copy kind, src kind, dst kind, async) in call order.
    let copies = [
        (276, 4096, 1, pageable, device, false),
        (278, 8192, 2, device, pageable, false),
        (280, 16384, 8, device, device, false),
        (277, 4096, 1, pinned, device, true),
        (279, 8192, 2, device, pinned, true),
        (281, 16384, 8, device, device, true),
        (305, 1000, 1, pageable, device, false),
        (305, 2000, 2, device, pageable, false),
        (306, 3000, 8, device, device, true),
        (306, 4000, 9, pinned, pageable, true),
        (318, 5000, 8, device, device, false),
    ];
    let mut apis = sp.apis.clone();
    apis.sort_by_key(|a| a.common.correlation);
    for (i, a) in apis.iter().enumerate() {
        let corr = a.common.correlation;
        if i % 12 == 11 {
            assert_eq!(a.cbid, 251, "cuMemsetD32_v2");
            let m = sp
                .memsets
                .iter()
                .find(|m| m.common.correlation == corr)
                .unwrap();
            assert_eq!(
                (m.bytes, m.value, m.memory_kind, m.common.stream),
                (1024, 0, 3, 0)
            );
            assert_eq!(m.common.end - m.common.start, 1024 / 40 + 500);
            continue;
        }
        let (cbid, bytes, kind, src, dst, is_async) = copies[i % 12];
        let m = sp
            .memcpys
            .iter()
            .find(|m| m.common.correlation == corr)
            .unwrap();
        assert_eq!(
            (a.cbid, m.bytes, m.copy_kind, m.src_kind, m.dst_kind),
            (cbid, bytes, kind, src, dst),
            "call {i}"
        );
        assert_eq!(m.common.stream != 0, is_async, "call {i}: stream");
        assert_eq!(m.common.end - m.common.start, bytes / 10 + 1000);
        assert_eq!(m.graph_id, 0);
    }
    sp.check_stream_timelines();
    wl.release();
    assert!(wl.wait(30).0.success());
}
