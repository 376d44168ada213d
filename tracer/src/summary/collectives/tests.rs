use super::*;
use crate::model::fixtures::{call, gpu_kernel, launch_args, launched_by, nccl_args};

const FLOAT32: i64 = 7;
const BF16: i64 = 9;
const INT8: i64 = 0;

fn no_comms() -> HashMap<u64, (i64, Option<i64>)> {
    HashMap::default()
}

/// The rows as (op, datatype, size label, calls, bytes).
fn rows(b: &CollBook) -> Vec<(&'static str, String, String, u64, u64)> {
    let t = b.settled();
    sorted(&t)
        .into_iter()
        .map(|(k, s)| {
            (
                k.op.name(),
                k.datatype_name(),
                k.bucket.label(),
                s.host.calls,
                s.bytes,
            )
        })
        .collect()
}

#[test]
fn sizes_are_nccl_tests_sizes() {
    let mut b = CollBook::default();
    let comms = no_comms();
    let mut add = |api, op, count, ty, nranks| {
        b.record(
            &call(5, api, 1_000, 100, nccl_args(op, count, ty, nranks)),
            &comms,
        );
    };
    // One rank's buffer: 1024 × 4 B.
    add("ncclAllReduce", NcclOp::AllReduce, 1024, FLOAT32, Some(2));
    // The gathered buffer: 1024 × 2 B × 8 ranks.
    add("ncclAllGather", NcclOp::AllGather, 1024, BF16, Some(8));
    // The scattered buffer: 1000 × 4 B × 4 ranks = 16,000 B.
    add(
        "ncclReduceScatter",
        NcclOp::ReduceScatter,
        1000,
        FLOAT32,
        Some(4),
    );
    add("ncclSend", NcclOp::Send, 3, INT8, None);
    add("ncclBroadcast", NcclOp::Broadcast, 0, INT8, None);
    // The size needs nranks, not known: never guessed.
    add("ncclAllGather", NcclOp::AllGather, 1024, FLOAT32, None);
    // A datatype NCCL does not define.
    add("ncclAllReduce", NcclOp::AllReduce, 1024, 99, Some(2));
    let s = |op, ty: &str, size: &str, bytes| (op, ty.to_string(), size.to_string(), 1, bytes);
    assert_eq!(
        rows(&b),
        [
            s("AllReduce", "float32", "4 KiB–8 KiB", 4096),
            s("AllReduce", "type 99", "size unknown", 0),
            s("Broadcast", "int8", "0 B", 0),
            s("AllGather", "float32", "size unknown", 0),
            s("AllGather", "bfloat16", "16 KiB–32 KiB", 16_384),
            s("ReduceScatter", "float32", "8 KiB–16 KiB", 16_000),
            s("Send", "int8", "2 B–4 B", 3),
        ]
    );
    // nranks from the communicator's init where the call does not say.
    let mut b = CollBook::default();
    let mut comms = no_comms();
    comms.insert(0x10, (4, Some(1)));
    let c = call(
        5,
        "ncclAllGather",
        1_000,
        100,
        nccl_args(NcclOp::AllGather, 1024, FLOAT32, None),
    );
    b.record(&c, &comms);
    assert_eq!(rows(&b)[0].2, "16 KiB–32 KiB");
    assert_eq!(rows(&b)[0].4, 16_384);
}

#[test]
fn buckets_are_powers_of_two() {
    let label = |s: u64| SizeBucket::of(Some(s)).label();
    assert_eq!(label(1), "1 B–2 B");
    assert_eq!(label(1023), "512 B–1 KiB");
    assert_eq!(label(1024), "1 KiB–2 KiB");
    assert_eq!(label((1 << 20) - 1), "512 KiB–1 MiB");
    assert_eq!(label(1 << 20), "1 MiB–2 MiB");
    assert_eq!(label((2 << 20) - 1), "1 MiB–2 MiB");
    assert_eq!(label(3 << 30), "2 GiB–4 GiB");
    assert_eq!(label(u64::MAX), "8 EiB–16 EiB");
    assert_eq!(
        SizeBucket::of(Some(1 << 20)).range(),
        Some((1 << 20, 2 << 20))
    );
    assert_eq!(
        SizeBucket::of(Some(u64::MAX)).range(),
        Some((1 << 63, 1 << 64))
    );
    assert_eq!(SizeBucket::of(None).range(), None);
}

/// A collective of `count` float32 on thread 5 at `start` (1 ms on the
/// host) that launched one kernel, and that kernel's GPU record.
fn timed(b: &mut CollBook, op: NcclOp, count: u64, nranks: u32, start: u64, gpu: (u64, u64)) {
    let comms = no_comms();
    let args = nccl_args(op, count, FLOAT32, Some(nranks));
    b.record(
        &call(
            5,
            "cuLaunchKernel",
            start + 100,
            50,
            launch_args("ncclKernel"),
        ),
        &comms,
    );
    b.record(&call(5, "ncclColl", start, 1_000_000, args), &comms);
    b.record_gpu(&launched_by(
        gpu_kernel("ncclKernel", gpu.0, gpu.1),
        5,
        start + 100,
    ));
}

#[test]
fn bandwidths_from_gpu_spans() {
    let mut b = CollBook::default();
    // 2 ranks, AllReduce of 64 MiB in 1 ms: algbw 67.108864 GB/s, busbw
    // the same (2(n-1)/n = 1).
    timed(
        &mut b,
        NcclOp::AllReduce,
        16 << 20,
        2,
        10_000_000,
        (50_000_000, 1_000_000),
    );
    // 8 ranks, AllGather of 8 MiB in all: two calls, 0.5 ms and 1.5 ms.
    timed(
        &mut b,
        NcclOp::AllGather,
        256 << 10,
        8,
        20_000_000,
        (60_000_000, 500_000),
    );
    timed(
        &mut b,
        NcclOp::AllGather,
        256 << 10,
        8,
        30_000_000,
        (70_000_000, 1_500_000),
    );
    // A call with no GPU record counts on the host only.
    let comms = no_comms();
    let args = nccl_args(NcclOp::AllGather, 256 << 10, FLOAT32, Some(8));
    b.record(&call(5, "ncclAllGather", 40_000_000, 1_000, args), &comms);
    let t = b.settled();
    let rows = sorted(&t);
    let (k, ar) = rows[0];
    assert_eq!(
        (k.op, k.bucket.label().as_str()),
        (NcclOp::AllReduce, "64 MiB–128 MiB")
    );
    assert_eq!(ar.gpu.total_ns, 1_000_000);
    assert!((ar.algbw_gbps().unwrap() - 67.108864).abs() < 1e-9);
    assert!((ar.busbw_gbps().unwrap() - 67.108864).abs() < 1e-9);
    let (k, ag) = rows[1];
    assert_eq!(
        (k.op, k.bucket.label().as_str()),
        (NcclOp::AllGather, "8 MiB–16 MiB")
    );
    assert_eq!(
        (ag.host.calls, ag.gpu.timed, ag.gpu.total_ns),
        (3, 2, 2_000_000)
    );
    // 2 × 8 MiB over 2 ms; the bus carries 7/8 of it.
    let algbw = 2.0 * 8.0 * 1_048_576.0 / 2e6;
    assert!((ag.algbw_gbps().unwrap() - algbw).abs() < 1e-9);
    assert!((ag.busbw_gbps().unwrap() - algbw * 7.0 / 8.0).abs() < 1e-9);
    // The summary says the same, text and JSON.
    let mut out = String::new();
    render::render_text(&mut out, &b);
    let line = out.lines().find(|l| l.contains("AllReduce")).unwrap();
    assert!(
        line.contains("64 MiB–128 MiB") && line.ends_with("67.11       67.11"),
        "{out}"
    );
    let j = render::render_json(&b);
    let row = &j["rows"][1];
    assert_eq!(row["op"], "AllGather");
    assert_eq!(row["datatype"], "float32");
    assert_eq!(row["size_min"], 8 << 20);
    assert_eq!(row["size_max"], 16 << 20);
    assert_eq!(row["bytes"], 3 * (8 << 20));
    assert_eq!(row["gpu"]["count"], 2);
    assert_eq!(row["gpu"]["max_ns"], 1_500_000);
    assert_eq!(j["other"], serde_json::Value::Null);
}

#[test]
fn grouped_collectives_get_no_gpu_time() {
    let mut b = CollBook::default();
    let comms = no_comms();
    let args = nccl_args(NcclOp::AllReduce, 1024, FLOAT32, Some(2));
    // In a group the call only queues; ncclGroupEnd launches the kernel.
    b.record(&call(5, "ncclAllReduce", 1_000, 100, args), &comms);
    b.record(
        &call(5, "cuLaunchKernel", 2_100, 50, launch_args("ncclKernel")),
        &comms,
    );
    b.record(
        &call(5, "ncclGroupEnd", 2_000, 500, Args::NcclGroup),
        &comms,
    );
    b.record_gpu(&launched_by(gpu_kernel("ncclKernel", 9_000, 700), 5, 2_100));
    let t = b.settled();
    let s = sorted(&t)[0].1;
    assert_eq!((s.host.calls, s.gpu.timed), (1, 0));
    assert_eq!(s.algbw_gbps(), None);
}

#[test]
fn rows_past_the_bound_are_summed_and_said() {
    let mut b = CollBook::default();
    let comms = no_comms();
    // 12 datatypes × 60 sizes × 2 operations: 1,440 distinct rows.
    for op in [NcclOp::AllReduce, NcclOp::Broadcast] {
        for ty in 0..12 {
            for k in 0..60 {
                let args = nccl_args(op, 1 << k, ty, Some(2));
                b.record(&call(5, "ncclColl", 1_000, 10, args), &comms);
            }
        }
    }
    let t = b.settled();
    let extra = 1440 - MAX_COLL_ROWS as u64;
    assert_eq!(t.len(), MAX_COLL_ROWS);
    assert_eq!(t.overflow().keys(), extra);
    assert_eq!(t.other().unwrap().host.calls, extra);
    let mut out = String::new();
    render::render_text(&mut out, &b);
    assert!(
        out.contains("... and 440 more rows (past the first 1,000), summed"),
        "{out}"
    );
    let j = render::render_json(&b);
    assert_eq!(j["other"]["rows"], 440);
    assert_eq!(j["other"]["calls"], 440);
}

/// Per process and in the total, through the summary; nranks from the
/// communicator's init.
#[test]
fn the_total_adds_the_processes() {
    use crate::summary::Summary;
    let mut s = Summary::default();
    for pid in [1u32, 2] {
        let mut init = call(
            5,
            "ncclCommInitRank",
            1_000,
            10,
            Args::Other(Default::default()),
        );
        init.args = Args::CommInit {
            comm: Some(0x10),
            nranks: 2,
            rank: Some(i64::from(pid) - 1),
            unique_id: None,
            comm_id: None,
            own_id: false,
        };
        init.pid = pid;
        s.record(&init);
        let mut launch = call(5, "cuLaunchKernel", 10_100, 50, launch_args("ncclKernel"));
        launch.pid = pid;
        s.record(&launch);
        let mut ar = call(
            5,
            "ncclAllReduce",
            10_000,
            1_000_000,
            nccl_args(NcclOp::AllReduce, 16 << 20, FLOAT32, None),
        );
        ar.pid = pid;
        s.record(&ar);
        let mut k = launched_by(
            gpu_kernel("ncclKernel", 50_000_000, 1_000_000 * u64::from(pid)),
            5,
            10_100,
        );
        k.pid = pid;
        s.record_gpu(&k);
    }
    let t = s.total();
    let rows = t.collectives.settled();
    let (k, r) = sorted(&rows)[0];
    assert_eq!(k.bucket.label(), "64 MiB–128 MiB");
    assert_eq!(
        (r.host.calls, r.gpu.timed, r.gpu.total_ns),
        (2, 2, 3_000_000)
    );
    // 2 × 64 MiB in 3 ms; busbw × 2(2-1)/2 = 1.
    let algbw = 2.0 * 67_108_864.0 / 3e6;
    assert!((r.algbw_gbps().unwrap() - algbw).abs() < 1e-9);
    assert!((r.busbw_gbps().unwrap() - algbw).abs() < 1e-9);
    let j = crate::summary::render::render_json(&s);
    assert_eq!(
        j["processes"][1]["collectives"]["rows"][0]["gpu"]["total_ns"],
        2_000_000
    );
    assert_eq!(j["total"]["collectives"]["rows"][0]["calls"], 2);
    assert_eq!(j["total"]["gemms"], serde_json::Value::Null);
    let text = crate::summary::render::render_text(&s);
    assert_eq!(text.matches("Collectives by size").count(), 3, "{text}");
}
