//! Root tests: gputrace attached to an already running workload records every
//! family's calls with exact counts and argument values.

use std::collections::BTreeMap;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::{json, Value};

/// The `handle NAME=0x…` lines the workload printed.
fn handles(w: &Workload) -> BTreeMap<String, u64> {
    w.stdout
        .seen
        .iter()
        .filter_map(|l| l.strip_prefix("handle "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap(),
            )
        })
        .collect()
}

fn hexs(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

#[test]
fn every_family_with_exact_arguments() {
    let dir = scratch("families");
    let out = dir.join("trace.jsonl");
    let mut w = Workload::start(&[
        "--print-handles",
        "--launches",
        "6",
        "--launch-ex",
        "2",
        "--coop",
        "2",
        "--graphs",
        "2",
        "--allocs",
        "2",
        "--copies",
        "2",
        "--syncs",
        "2",
        "--fail",
        "1",
        "--nccl",
        "2",
        "--sync-us",
        "3000",
    ]);
    let h = handles(&w);
    let pid = w.pid.to_string();
    let worker = w.tids[0] as u64;
    let t = Tracer::attach(&[
        "--pid",
        &pid,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "json",
    ]);
    let before = now_ns();
    w.go();
    let (status, done) = w.finish();
    let after = now_ns();
    assert!(status.success());
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(f.stderr_text().contains("every traced process has exited"));

    let (events, summary) = read_jsonl(&out);
    // Every counted call of the workload is in the trace, and nothing else
    // but the teardown calls it makes after `done` (cuLibraryUnload,
    // cuModuleUnload, and of the setup graph cuGraphExecDestroy and
    // cuGraphDestroy).
    let c = counts(&events);
    let expected: BTreeMap<&str, u64> = [
        ("cuLaunchKernel", 6),
        ("cuLaunchKernelEx", 2),
        ("cuLaunchCooperativeKernel", 2),
        ("cuGraphLaunch", 2),
        // allocs: 2×1, copies: 2, fail: 1, nccl buffers: 2
        ("cuMemAlloc_v2", 2 + 2 + 1 + 2),
        ("cuMemAllocAsync", 2),
        ("cuMemAllocManaged", 2),
        ("cuMemAllocPitch_v2", 2),
        ("cuMemHostAlloc", 2),
        ("cuMemAllocHost_v2", 2 + 1),
        ("cuMemCreate", 2),
        ("cuMemMap", 2),
        ("cuMemUnmap", 2),
        ("cuMemRelease", 2),
        ("cuMemFree_v2", 2 * 3 + 2 + 2),
        ("cuMemFreeAsync", 2),
        ("cuMemFreeHost", 2 * 2 + 1),
        ("cuMemcpyHtoD_v2", 2),
        ("cuMemcpyDtoH_v2", 2),
        ("cuMemcpyDtoD_v2", 2),
        ("cuMemcpyHtoDAsync_v2", 2),
        ("cuMemcpyDtoHAsync_v2", 2),
        ("cuMemcpyDtoDAsync_v2", 2),
        ("cuMemcpy", 4),
        ("cuMemcpyAsync", 4),
        ("cuMemcpyPeer", 2),
        ("cuMemsetD32_v2", 2),
        ("cuEventRecord", 2),
        ("cuStreamWaitEvent", 2),
        ("cuEventSynchronize", 2),
        ("cuStreamSynchronize", 2),
        ("cuCtxSynchronize", 2),
        ("ncclCommInitRank", 1),
        ("ncclAllReduce", 2),
        ("ncclBroadcast", 2),
        ("ncclReduce", 2),
        ("ncclAllGather", 2),
        ("ncclReduceScatter", 2),
        ("ncclGroupStart", 2),
        ("ncclSend", 2),
        ("ncclRecv", 2),
        ("ncclGroupEnd", 2),
        ("ncclCommDestroy", 1),
        ("cuLibraryUnload", 1),
        ("cuModuleUnload", 1),
        ("cuGraphExecDestroy", 1),
        ("cuGraphDestroy", 1),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<&str, u64> = c.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(got, expected);
    // cuMemAddressReserve/Free are not in the catalogue: 2 × 2 calls the workload counts.
    // ncclGetUniqueId (1) is counted by the workload but not traced either.
    let counted: u64 = expected.values().sum::<u64>() - 4 + 4 + 1;
    assert_eq!(done, counted, "the workload's own count");
    // Calls: not the graph record.
    let calls = events.iter().filter(|e| e.get("type").is_none()).count();
    assert_eq!(summary["events"], json!(calls));
    assert_eq!(summary["lost"], json!(0));

    // Common fields: pid, the worker's tid, comm, wall-clock time, return codes.
    for e in events.iter().filter(|e| e.get("type").is_none()) {
        assert_eq!(e["pid"], json!(pid.parse::<u64>().unwrap()));
        assert_eq!(e["comm"], "gputrace-worklo");
        let ts = e["ts_ns"].as_u64().unwrap();
        assert!(
            ts >= before - 5_000_000 && ts <= after,
            "ts {ts} outside [{before}, {after}]"
        );
        assert!(e["dur_ns"].as_u64().is_some());
        // The teardown calls are the main thread's.
        let teardown = [
            "cuLibraryUnload",
            "cuModuleUnload",
            "cuGraphExecDestroy",
            "cuGraphDestroy",
        ];
        if !teardown.iter().any(|a| e["api"] == *a) {
            assert_eq!(e["tid"], json!(worker), "{e}");
        }
    }

    // launch: grids, blocks, shared memory, stream, function handles (stack-passed arguments included).
    let stream = hexs(h["stream[0]"]);
    let launches = of_api(&events, "cuLaunchKernel");
    for (i, e) in launches.iter().enumerate() {
        let a = &e["args"];
        assert_eq!(a["function"], hexs(h[&format!("function[{}]", i % 3)]));
        assert_eq!(
            (&a["grid"], &a["block"]),
            (&json!([64, 2, 1]), &json!([256, 1, 1]))
        );
        assert_eq!(a["shared_mem_bytes"], 4096);
        assert_eq!(a["stream"], stream);
        assert_eq!(e["ret"], 0);
    }
    for e in of_api(&events, "cuLaunchKernelEx") {
        let a = &e["args"];
        assert_eq!(a["function"], hexs(h["kernel_function"]));
        assert_eq!(
            (&a["grid"], &a["block"], &a["shared_mem_bytes"]),
            (&json!([32, 4, 2]), &json!([128, 2, 1]), &json!(8192))
        );
        assert_eq!(a["stream"], stream);
    }
    for e in of_api(&events, "cuLaunchCooperativeKernel") {
        let a = &e["args"];
        assert_eq!(a["function"], hexs(h["function[0]"]));
        assert_eq!(
            (&a["grid"], &a["block"], &a["shared_mem_bytes"]),
            (&json!([16, 1, 1]), &json!([512, 1, 1]), &json!(0))
        );
        assert_eq!(a["stream"], stream);
    }
    // The setup graph is empty and was instantiated before gputrace
    // attached: nothing to read from memory, so its contents are not known.
    for e in of_api(&events, "cuGraphLaunch") {
        assert_eq!(
            e["args"],
            json!({"graph_exec": hexs(h["graph_exec"]), "stream": stream, "nodes": null})
        );
    }
    let records: Vec<&Value> = events.iter().filter(|e| e["type"] == "graph").collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["exec"], hexs(h["graph_exec"]));
    assert!(records[0]["nodes"].is_null());

    // memory: dptr read at return; the failing call's return code.
    let allocs = of_api(&events, "cuMemAlloc_v2");
    let failed: Vec<_> = allocs.iter().filter(|e| e["ret"] != 0).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["ret"], 2);
    assert_eq!(
        failed[0]["args"],
        json!({"dptr": null, "bytes": 137438953472u64, "kind": "device"})
    );
    for e in allocs.iter().filter(|e| e["ret"] == 0) {
        let d = hex(&e["args"]["dptr"]);
        assert!(
            (0x7f0000000000..0x7f1000000000).contains(&d) && d.is_multiple_of(2 << 20),
            "{e}"
        );
    }
    let pitch = of_api(&events, "cuMemAllocPitch_v2");
    assert_eq!(pitch[0]["args"]["pitch"], 1024);
    assert_eq!(pitch[0]["args"]["bytes"], 102400);
    assert_eq!(
        of_api(&events, "cuMemAllocManaged")[0]["args"]["kind"],
        "managed"
    );
    assert_eq!(
        of_api(&events, "cuMemAllocAsync")[0]["args"]["stream"],
        stream
    );
    let host = of_api(&events, "cuMemHostAlloc")[0];
    assert_eq!(host["args"]["kind"], "host");
    assert_eq!(host["args"]["bytes"], 1048576);
    // cuMemCreate handles are 1, 2, ... process-wide.
    let creates: Vec<u64> = of_api(&events, "cuMemCreate")
        .iter()
        .map(|e| hex(&e["args"]["handle"]))
        .collect();
    assert_eq!(creates, vec![1, 2]);
    assert_eq!(of_api(&events, "cuMemMap")[0]["args"]["bytes"], 2097152);

    // memcpy: bytes, fixed directions and inferred ones (cuMemcpy / cuMemcpyAsync).
    let dirs = |api: &str| -> Vec<(String, u64)> {
        of_api(&events, api)
            .iter()
            .map(|e| {
                (
                    e["args"]["direction"].as_str().unwrap().to_string(),
                    e["args"]["bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(dirs("cuMemcpyHtoD_v2")[0], ("HtoD".into(), 4096));
    assert_eq!(dirs("cuMemcpyDtoH_v2")[0], ("DtoH".into(), 8192));
    assert_eq!(dirs("cuMemcpyDtoD_v2")[0], ("DtoD".into(), 16384));
    assert_eq!(dirs("cuMemcpyPeer")[0], ("PtoP".into(), 5000));
    assert_eq!(dirs("cuMemsetD32_v2")[0], ("memset".into(), 1024));
    let inferred = dirs("cuMemcpy");
    assert_eq!(
        inferred[..2],
        [("HtoD".into(), 1000), ("DtoH".into(), 2000)]
    );
    let inferred = dirs("cuMemcpyAsync");
    assert_eq!(
        inferred[..2],
        [("DtoD".into(), 3000), ("HtoH".into(), 4000)]
    );
    assert_eq!(
        of_api(&events, "cuMemcpyHtoDAsync_v2")[0]["args"]["stream"],
        stream
    );
    assert_eq!(
        of_api(&events, "cuMemcpy")[0]["args"]["stream"],
        Value::Null
    );

    // sync: streams, events, and latencies of calls that sleep 3 ms.
    for api in [
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
    ] {
        for e in of_api(&events, api) {
            let d = e["dur_ns"].as_u64().unwrap();
            assert!(d >= 3_000_000, "{api} took {d} ns, it sleeps 3 ms");
        }
    }
    assert_eq!(
        of_api(&events, "cuEventRecord")[0]["args"],
        json!({"stream": stream, "event": hexs(h["event[0]"])})
    );
    assert_eq!(
        of_api(&events, "cuStreamSynchronize")[0]["args"],
        json!({"stream": stream})
    );

    // nccl: ops, counts, datatypes, bytes, reduction ops, root, peer, comm, stream (7th/8th on the stack).
    let comm = of_api(&events, "ncclCommInitRank")[0]["args"]["comm"].clone();
    let comm_id = of_api(&events, "ncclCommInitRank")[0]["args"]["comm_id"].clone();
    assert!(
        comm_id.as_str().is_some_and(|s| s.starts_with("0x")),
        "{comm_id}"
    );
    assert_eq!(of_api(&events, "ncclCommInitRank")[0]["args"]["nranks"], 1);
    assert_eq!(of_api(&events, "ncclCommInitRank")[0]["args"]["rank"], 0);
    let n = |api: &str| of_api(&events, api)[0]["args"].clone();
    let expect = |op: &str,
                  count: u64,
                  dt: &str,
                  bytes: u64,
                  redop: Value,
                  root: Value,
                  peer: Value| {
        let mut v = json!({"op": op, "count": count, "datatype": dt, "bytes": bytes, "redop": redop, "root": root,
               "peer": peer, "comm": comm, "stream": stream,
               // The communicator: its id from the traced init, rank 0 of 1,
               // and for a collective its first sequence number, NCCL's
               // counter read from the communicator at the call's entry.
               "comm_id": comm_id, "rank": 0, "nranks": 1, "cuda_dev": 0, "seq": null});
        if peer.is_null() {
            v["seq"] = json!(0);
            v["seq_from"] = json!("counter");
        }
        v
    };
    assert_eq!(
        n("ncclAllReduce"),
        expect(
            "AllReduce",
            1048576,
            "float32",
            4194304,
            json!("sum"),
            Value::Null,
            Value::Null
        )
    );
    assert_eq!(
        n("ncclBroadcast"),
        expect(
            "Broadcast",
            1000,
            "int8",
            1000,
            Value::Null,
            json!(0),
            Value::Null
        )
    );
    assert_eq!(
        n("ncclReduce"),
        expect(
            "Reduce",
            4096,
            "float64",
            32768,
            json!("max"),
            json!(0),
            Value::Null
        )
    );
    assert_eq!(
        n("ncclAllGather"),
        expect(
            "AllGather",
            2048,
            "bfloat16",
            4096,
            Value::Null,
            Value::Null,
            Value::Null
        )
    );
    assert_eq!(
        n("ncclReduceScatter"),
        expect(
            "ReduceScatter",
            512,
            "int32",
            2048,
            json!("min"),
            Value::Null,
            Value::Null
        )
    );
    assert_eq!(
        n("ncclSend"),
        expect(
            "Send",
            256,
            "float16",
            512,
            Value::Null,
            Value::Null,
            json!(0)
        )
    );
    assert_eq!(
        n("ncclRecv"),
        expect(
            "Recv",
            256,
            "float16",
            512,
            Value::Null,
            Value::Null,
            json!(0)
        )
    );

    // The summary printed on stdout matches the file's last line.
    let printed: Value = serde_json::from_str(f.stdout.trim()).unwrap();
    assert_eq!(printed["events"], summary["events"]);
    let p = &printed["processes"][0];
    let nccl_ops: Vec<&str> = p["nccl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    assert!(nccl_ops.contains(&"AllReduce"));
    assert_eq!(
        p["memory"]["live_bytes"], 0,
        "everything allocated was freed"
    );
}
