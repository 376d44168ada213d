//! Root tests: ways of starting and stopping a trace, several targets,
//! threads, kernel names learned by interception, output formats, and
//! events that could not be recorded.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gputrace_tests::*;
use serde_json::{json, Value};

#[test]
fn command_is_traced_from_its_first_call() {
    let dir = scratch("cmd");
    let out = dir.join("t.jsonl");
    let wl = workload_bin();
    let f = run_gputrace(&[
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "none",
        "--",
        wl.to_str().unwrap(),
        "--launches",
        "4",
        "--launch-ex",
        "1",
    ]);
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    let c = counts(&events);
    // Setup calls made before anything else prove tracing began at exec.
    assert_eq!(c["cuModuleGetFunction"], 3);
    assert_eq!(c["cuLibraryGetKernel"], 1);
    assert_eq!(c["cuKernelGetFunction"], 1);
    assert_eq!(c["cuLaunchKernel"], 4);
    let names: Vec<String> = of_api(&events, "cuModuleGetFunction")
        .iter()
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "_Z10vector_addPKfS0_Pfi",
            "_ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi",
            "_Z4reluPfi"
        ]
    );
    assert_eq!(
        kernels(&events, "cuLaunchKernel"),
        vec![
            json!(VECTOR_ADD),
            json!(REDUCE),
            json!(RELU),
            json!(VECTOR_ADD)
        ]
    );
    assert_eq!(kernels(&events, "cuLaunchKernelEx"), vec![json!(GEMM)]);
    assert_eq!(summary["lost"], 0);
    assert!(f.stderr_text().contains("every traced process has exited"));
}

#[test]
fn names_learned_while_attached() {
    let r = trace_workload(
        "names",
        &[
            "--names-after-wait",
            "--launches",
            "3",
            "--launch-ex",
            "2",
            "--coop",
            "1",
        ],
        &[],
    );
    let events = r.events;
    assert_eq!(
        kernels(&events, "cuLaunchKernel"),
        vec![json!(VECTOR_ADD), json!(REDUCE), json!(RELU)]
    );
    assert_eq!(
        kernels(&events, "cuLaunchKernelEx"),
        vec![json!(GEMM), json!(GEMM)]
    );
    assert_eq!(
        kernels(&events, "cuLaunchCooperativeKernel"),
        vec![json!(VECTOR_ADD)]
    );
    // The handle → name map comes from the intercepted calls themselves.
    let gf = of_api(&events, "cuModuleGetFunction");
    assert_eq!(
        of_api(&events, "cuLaunchKernel")[0]["args"]["function"],
        gf[0]["args"]["function"]
    );
    let kgf = of_api(&events, "cuKernelGetFunction")[0];
    assert_eq!(
        kgf["args"]["kernel"],
        of_api(&events, "cuLibraryGetKernel")[0]["args"]["kernel"]
    );
    assert_eq!(
        of_api(&events, "cuLaunchKernelEx")[0]["args"]["function"],
        kgf["args"]["function"]
    );
}

#[test]
fn two_processes_at_once() {
    let dir = scratch("two");
    let out = dir.join("t.jsonl");
    let mut a = Workload::start(&["--launches", "5"]);
    let mut b = Workload::start(&["--launches", "7", "--nccl", "1"]);
    let mut c = Workload::start(&["--launches", "100"]);
    // Repeated --pid and a comma list; the third process is not traced.
    let pids = format!("{},{}", a.pid, b.pid);
    let t = Tracer::attach(&[
        "--pid",
        &pids,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "json",
    ]);
    a.go();
    b.go();
    c.go();
    let (pa, pb) = (a.pid as u64, b.pid as u64);
    assert!(a.finish().0.success() && b.finish().0.success() && c.finish().0.success());
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    let mut per_pid: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for e in &events {
        *per_pid
            .entry(e["pid"].as_u64().unwrap())
            .or_default()
            .entry(e["api"].as_str().unwrap().into())
            .or_default() += 1;
    }
    assert_eq!(per_pid.keys().copied().collect::<Vec<_>>(), {
        let mut v = vec![pa, pb];
        v.sort();
        v
    });
    assert_eq!(per_pid[&pa]["cuLaunchKernel"], 5);
    assert_eq!(per_pid[&pb]["cuLaunchKernel"], 7);
    assert_eq!(per_pid[&pb]["ncclAllReduce"], 1);
    let summary: Value = serde_json::from_str(f.stdout.trim()).unwrap();
    assert_eq!(summary["processes"].as_array().unwrap().len(), 2);
    let launches: u64 = summary["total"]["apis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["name"] == "cuLaunchKernel")
        .map(|a| a["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(launches, 12);
}

#[test]
fn threads_have_their_own_tids() {
    let r = trace_workload(
        "threads",
        &["--threads", "3", "--launches", "50", "--syncs", "2"],
        &[],
    );
    let mut per_tid: BTreeMap<u64, u64> = BTreeMap::new();
    for e in of_api(&r.events, "cuLaunchKernel") {
        *per_tid.entry(e["tid"].as_u64().unwrap()).or_default() += 1;
    }
    let expected: BTreeMap<u64, u64> = r.tids.iter().map(|t| (*t as u64, 50)).collect();
    assert_eq!(per_tid, expected);
    // Each thread synchronises its own stream.
    let streams: std::collections::BTreeSet<String> = of_api(&r.events, "cuStreamSynchronize")
        .iter()
        .map(|e| e["args"]["stream"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streams.len(), 3);
}

#[test]
fn per_thread_stream_variants() {
    let r = trace_workload(
        "ptsz",
        &[
            "--per-thread-stream",
            "--launches",
            "2",
            "--copies",
            "1",
            "--syncs",
            "1",
            "--allocs",
            "1",
        ],
        &[],
    );
    let c = counts(&r.events);
    assert_eq!(c["cuLaunchKernel_ptsz"], 2);
    assert!(!c.contains_key("cuLaunchKernel"));
    for api in [
        "cuMemcpyHtoD_v2_ptds",
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuMemcpy_ptds",
        "cuMemcpyAsync_ptsz",
        "cuStreamSynchronize_ptsz",
        "cuEventRecord_ptsz",
        "cuMemAllocAsync_ptsz",
    ] {
        assert!(
            c.get(api).copied().unwrap_or(0) >= 1,
            "{api} missing: {c:?}"
        );
    }
    assert_eq!(
        of_api(&r.events, "cuMemcpy_ptds")[0]["args"]["direction"],
        "HtoD"
    );
}

#[test]
fn target_exiting_mid_trace_ends_the_trace() {
    let r = trace_workload(
        "exit",
        &["--duration-ms", "400", "--launches", "20", "--syncs", "1"],
        &[],
    );
    assert!(
        r.gputrace.stdout.contains("gputrace summary: 1 process"),
        "{}",
        r.gputrace.stdout
    );
    // Every call the workload made is in the file (and its teardown calls).
    let counted = r.events.iter().filter(|e| !is_teardown(e)).count();
    assert_eq!(counted as u64, r.done);
    assert_eq!(r.summary["events"], json!(r.events.len()));
    assert_eq!(r.summary["lost"], 0);
}

#[test]
fn duration_stops_while_the_target_runs_on() {
    let dir = scratch("duration");
    let out = dir.join("t.json");
    let mut w = Workload::start(&[
        "--loop",
        "--launches",
        "10",
        "--syncs",
        "1",
        "--sync-us",
        "1000",
    ]);
    let t = Tracer::attach_to(&w, &out, &["--duration", "700ms"]);
    let start = Instant::now();
    w.go();
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(start.elapsed() >= Duration::from_millis(600));
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "the workload keeps running"
    );
    // A Chrome trace: valid JSON, one slice per call with its args and ret,
    // process/thread names, device memory as a counter (none allocated here).
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let slices: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    assert!(slices.len() > 50, "{}", slices.len());
    assert_eq!(v["gputraceSummary"]["events"], json!(slices.len()));
    let launch = slices
        .iter()
        .find(|e| e["name"] == "cuLaunchKernel")
        .unwrap();
    assert_eq!(launch["cat"], "launch");
    assert_eq!(launch["args"]["grid"], json!([64, 2, 1]));
    assert_eq!(launch["args"]["ret"], 0);
    assert_eq!(launch["pid"], json!(w.pid));
    assert!(evs.iter().any(|e| e["ph"] == "M"
        && e["name"] == "process_name"
        && e["args"]["name"] == "gputrace-worklo"));
    let sync = slices
        .iter()
        .find(|e| e["name"] == "cuStreamSynchronize")
        .unwrap();
    assert!(sync["dur"].as_f64().unwrap() >= 1000.0, "µs: {sync}");
}

#[test]
fn interrupt_stops_with_a_summary() {
    let dir = scratch("sigint");
    let out = dir.join("t.jsonl");
    // Calls keep coming while gputrace detaches: return probes must go
    // first, or calls in between return without an entry record.
    let mut w = Workload::start(&[
        "--loop",
        "--threads",
        "2",
        "--launches",
        "100",
        "--syncs",
        "1",
    ]);
    let t = Tracer::attach_to(&w, &out, &[]);
    w.go();
    std::thread::sleep(Duration::from_millis(500));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(10));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(f.stdout.contains("cuLaunchKernel"));
    let (events, summary) = read_jsonl(&out);
    assert!(events.len() > 1000, "{}", events.len());
    assert_eq!(summary["events"], json!(events.len()));
    assert_eq!(summary["lost"], 0, "{}", summary["lost_detail"]);
}

#[test]
fn allocations_chart_device_memory() {
    let r = trace_run_to(
        "memchart",
        "t.json",
        &workload_bin(),
        &["--allocs", "3"],
        &["--summary", "json"],
    );
    let (out, f) = (r.out, r.gputrace);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let counters: Vec<u64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "device memory")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .collect();
    // Per pass: +1 MiB, +2 MiB, +4 MiB, +100 KiB (pitch), +2 MiB (cuMemCreate),
    // -2 MiB (release), -1 MiB, -2 MiB, -4 MiB, -100 KiB.
    let pass = [
        1048576, 3145728, 7340032, 7442432, 9539584, 7442432, 6393856, 4296704, 102400, 0,
    ];
    assert_eq!(counters, [pass, pass, pass].concat());
    let s: Value = serde_json::from_str(f.stdout.trim()).unwrap();
    let m = &s["processes"][0]["memory"];
    assert_eq!(
        (
            m["peak_bytes"].as_u64(),
            m["live_bytes"].as_u64(),
            m["allocations"].as_u64()
        ),
        (Some(9539584), Some(0), Some(21))
    );
}

#[test]
fn args_only_mode_attaches_no_return_probes() {
    let dir = scratch("argsonly");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--launches", "6", "--launch-ex", "1", "--syncs", "1"]);
    let t = Tracer::attach_to(&w, &out, &["--probes", "launch:args,sync"]);
    // launch: 8 entry points, entry probes only; sync: 10 entry points, both.
    let attached = t
        .stderr
        .seen
        .iter()
        .find(|l| l.starts_with("gputrace: attached"))
        .unwrap()
        .clone();
    assert_eq!(attached, "gputrace: attached 28 probes to 1 process");
    w.go();
    assert!(w.finish().0.success());
    assert!(t.finish(Duration::from_secs(30)).status.success());
    let (events, _) = read_jsonl(&out);
    let c = counts(&events);
    assert_eq!(
        (
            c["cuLaunchKernel"],
            c["cuLaunchKernelEx"],
            c["cuStreamSynchronize"]
        ),
        (6, 1, 1)
    );
    assert!(!c.contains_key("cuMemAlloc_v2"));
    for e in of_api(&events, "cuLaunchKernel") {
        assert_eq!((&e["dur_ns"], &e["ret"]), (&Value::Null, &Value::Null));
        assert_eq!(e["args"]["grid"], json!([64, 2, 1]));
    }
    assert_eq!(
        of_api(&events, "cuLaunchKernelEx")[0]["args"]["block"],
        json!([128, 2, 1])
    );
    assert!(of_api(&events, "cuStreamSynchronize")[0]["dur_ns"].is_u64());
}

#[test]
fn events_that_do_not_fit_are_counted_not_hidden() {
    let dir = scratch("lost");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--bench", "launch", "--calls", "20000"]);
    let mut t = Tracer::spawn_with_env(
        &[
            "--pid",
            &w.pid.to_string(),
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "text",
        ],
        &[("GPUTRACE_RING_BYTES", "4096")],
    );
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(30));
    w.go();
    assert!(w.finish().0.success());
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    let lost = summary["lost_detail"]["ring_full"].as_u64().unwrap();
    assert!(lost > 0, "a 4 KiB ring cannot hold 20000 launches");
    let launches = of_api(&events, "cuLaunchKernel").len() as u64;
    // The four teardown calls (unloads, the setup graph's destruction) may
    // have been recorded or lost too.
    let others = events.len() as u64 - launches;
    assert!(others <= 4);
    assert_eq!(launches + others + lost, 20004, "recorded + lost = made");
    assert_eq!(summary["lost"], json!(lost));
    assert!(
        f.stdout.contains(&format!("EVENTS LOST: {lost} calls")),
        "{}",
        f.stdout
    );
    assert!(f.stderr_text().contains("calls were not recorded"));
}

/// More threads than cores, calling as fast as they can: uprobe programs can
/// be preempted mid-run, and nothing may be mixed up or lost (this caught a
/// per-CPU scratch buffer shared between preempted runs).
#[test]
fn busy_threads_on_few_cores_keep_every_record_intact() {
    let dir = scratch("busy");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&[
        "--threads",
        "4",
        "--duration-ms",
        "3000",
        "--launches",
        "100",
        "--copies",
        "5",
        "--syncs",
        "1",
        "--nccl",
        "2",
    ]);
    let tids: Vec<u64> = w.tids.iter().map(|t| *t as u64).collect();
    let t = Tracer::attach_to(&w, &out, &[]);
    w.go();
    let (st, done) = w.finish();
    assert!(st.success());
    let f = t.finish(Duration::from_secs(120));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    assert_eq!(summary["lost"], 0, "{}", summary["lost_detail"]);
    let counted = events.iter().filter(|e| !is_teardown(e)).count() as u64;
    // Each pass also calls ncclGetUniqueId, which is not traced.
    let passes = of_api(&events, "ncclCommInitRank").len() as u64;
    assert_eq!(counted + passes, done, "every call the workload made, once");
    for e in &events {
        let a = &e["args"];
        match e["api"].as_str().unwrap() {
            "cuLaunchKernel" => assert_eq!(
                (&a["grid"], &a["shared_mem_bytes"]),
                (&json!([64, 2, 1]), &json!(4096)),
                "{e}"
            ),
            "ncclAllReduce" => assert_eq!(
                (&a["count"], &a["datatype"]),
                (&json!(1048576), &json!("float32")),
                "{e}"
            ),
            "cuMemcpyHtoD_v2" => assert_eq!(a["bytes"], 4096, "{e}"),
            _ if is_teardown(e) => continue,
            _ => {}
        }
        assert!(tids.contains(&e["tid"].as_u64().unwrap()), "{e}");
    }
}
