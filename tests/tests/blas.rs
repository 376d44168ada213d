//! Root tests: GEMMs through the simulated cuBLAS and cuBLASLt
//! (tests/sim/cublas.c, cublaslt.c; `--gemms N`), traced from outside:
//! the kernels they launch inside those libraries are seen and named.

use std::time::Duration;

use gputrace_tests::*;

/// The node-mode test sees every process on the machine, the other tests'
/// workloads and calibration helpers too: it runs alone.
static NODE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    NODE.read().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn kernels_launched_inside_cublas_are_named() {
    let _g = beside_others();
    let run = trace_workload("blas-kernels", &["--gemms", "3", "--launches", "0"], &[]);
    let names: Vec<String> = kernels(&run.events, "cuLaunchKernel")
        .iter()
        .map(|k| k.as_str().unwrap_or("").to_string())
        .collect();
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
    // A round: Sgemm (fp32 xmma), GemmEx bf16, strided-batched fp16 and
    // the Lt matmul fp16 (nvjet each), whose k of 8192 adds a split-K
    // reduction.
    assert_eq!(count("sm90_xmma_gemm_f32f32"), 3, "{names:?}");
    assert_eq!(count("nvjet_hsh_"), 9, "{names:?}");
    assert_eq!(count("cublasSplitKreduce_kernel"), 3, "{names:?}");
    assert_eq!(names.len(), 15, "{names:?}");
}

/// Issue 28 step 1: each cuBLAS GEMM entry point is probed, and its record
/// carries the problem as the caller passed it: operations, m, n, k, the
/// batch, the types and the compute type (read from the caller's stack
/// for the Ex forms).
#[test]
fn gemm_calls_carry_their_shapes_and_types() {
    let _g = beside_others();
    let run = trace_workload("blas-shapes", &["--gemms", "2", "--launches", "0"], &[]);
    let args_of = |api: &str| -> Vec<serde_json::Value> {
        of_api(&run.events, api)
            .iter()
            .map(|e| e["args"].clone())
            .collect()
    };
    let sgemm = args_of("cublasSgemm_v2");
    assert_eq!(sgemm.len(), 2);
    let want = serde_json::json!({"transa":"N","transb":"N","m":128,"n":256,"k":64,"batch":1,
        "a_type":"fp32","b_type":"fp32","c_type":"fp32","compute":null});
    assert_eq!(sgemm[0], want);
    let ex = args_of("cublasGemmEx");
    assert_eq!(ex.len(), 2);
    let want = serde_json::json!({"transa":"T","transb":"N","m":512,"n":512,"k":1024,"batch":1,
        "a_type":"bf16","b_type":"bf16","c_type":"bf16","compute":"32F"});
    assert_eq!(ex[1], want);
    let strided = args_of("cublasGemmStridedBatchedEx");
    assert_eq!(strided.len(), 2);
    let want = serde_json::json!({"transa":"N","transb":"N","m":64,"n":64,"k":128,"batch":8,
        "a_type":"fp16","b_type":"fp16","c_type":"fp16","compute":"32F"});
    assert_eq!(strided[0], want);
    // The Lt matmul is given the problem its descriptors said.
    let lt = args_of("cublasLtMatmul");
    assert_eq!(lt.len(), 2);
    let want = serde_json::json!({"transa":"T","transb":"N","m":1024,"n":1024,"k":8192,"batch":1,
        "a_type":"fp16","b_type":"fp16","c_type":"fp16","compute":"32F"});
    assert_eq!(lt[0], want);
    let layouts = args_of("cublasLtMatrixLayoutCreate");
    assert_eq!(layouts.len(), 6);
    assert_eq!(layouts[0]["rows"], 8192);
    assert_eq!(layouts[0]["type"], "fp16");
    let set = args_of("cublasLtMatmulDescSetAttribute");
    assert_eq!(set.len(), 4);
    assert_eq!(
        (&set[0]["attr"], &set[0]["value"]),
        (&serde_json::json!(3), &serde_json::json!(1))
    );
    // Every counted call the workload made was traced: 3 GEMMs, 11
    // cuBLASLt calls and 5 launches a round.
    let traced = [
        "cublasSgemm_v2",
        "cublasGemmEx",
        "cublasGemmStridedBatchedEx",
        "cublasLtMatmulDescCreate",
        "cublasLtMatmulDescSetAttribute",
        "cublasLtMatmulDescDestroy",
        "cublasLtMatrixLayoutCreate",
        "cublasLtMatrixLayoutDestroy",
        "cublasLtMatmul",
        "cuLaunchKernel",
    ]
    .iter()
    .map(|api| of_api(&run.events, api).len() as u64)
    .sum::<u64>();
    assert_eq!(traced, run.done);
}

/// The GEMM row of (m, n, k) in `summary`'s process with GEMMs.
fn shape(summary: &serde_json::Value, m: i64, n: i64, k: i64) -> &serde_json::Value {
    let p = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gemms"].is_object())
        .expect("a process with GEMMs");
    p["gemms"]["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["m"] == m && r["n"] == n && r["k"] == k)
        .unwrap_or_else(|| panic!("no shape {m}x{n}x{k} in {}", p["gemms"]))
}

fn launches_of(row: &serde_json::Value) -> Vec<(String, u64)> {
    row["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_string(),
                k["launches"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Issue 28 steps 2 and 3: the summary's GEMMs by shape, each with the
/// kernels launched inside its calls; `stats` of the timeline says the same.
#[test]
fn gemms_by_shape_own_the_kernels_they_launched() {
    let _g = beside_others();
    let run = trace_workload("blas-by-shape", &["--gemms", "3", "--launches", "0"], &[]);
    let lt = shape(&run.summary, 1024, 1024, 8192);
    assert_eq!(lt["calls"], 3);
    assert_eq!(
        (&lt["op"], &lt["transa"], &lt["a_type"]),
        (&"gemm".into(), &"T".into(), &"fp16".into())
    );
    let mut ks = launches_of(lt);
    ks.sort();
    assert_eq!(
        ks,
        [
            ("cublasSplitKreduce_kernel".to_string(), 3),
            ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_TNT".to_string(), 3)
        ]
    );
    let bmm = shape(&run.summary, 64, 64, 128);
    assert_eq!(
        (&bmm["op"], &bmm["batch"], &bmm["calls"]),
        (&"bmm".into(), &8.into(), &3.into())
    );
    assert_eq!(launches_of(bmm).len(), 1);
    let sgemm = shape(&run.summary, 128, 256, 64);
    assert!(launches_of(sgemm)[0].0.starts_with("sm90_xmma_gemm_f32f32"));
    assert_eq!(launches_of(sgemm)[0].1, 3);
    assert!(sgemm["gpu"].is_null(), "no GPU time without --gpu-time");
    // Read back from the file: the same table.
    let out = run_gputrace(&["stats", run.out.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let back: serde_json::Value = serde_json::from_str(&out.stdout).expect("stats json");
    assert_eq!(shape(&back, 1024, 1024, 8192)["kernels"], lt["kernels"]);
    assert_eq!(shape(&back, 64, 64, 128)["calls"], 3);
}

/// With `--gpu-time`: each GEMM call's GPU time is the span of its kernels
/// on the GPU (the simulator runs a kernel for grid × block / 64 ns), and
/// TFLOP/s is 2·b·m·n·k over it.
#[test]
fn with_gpu_time_each_shape_has_its_calls_gpu_spans() {
    let _g = beside_others();
    let out = scratch("blas-gpu").join("t.jsonl");
    let mut w = Workload::start(&[
        "--map-cupti",
        "--gemms",
        "4",
        "--launches",
        "0",
        "--wait-stdin-end",
    ]);
    let t = attach_gpu(&w, &out, &[]);
    w.go_and_hold(GPU_HOLD);
    let (status, _) = w.finish();
    assert!(status.success());
    let f = t.finish(std::time::Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (_, summary) = read_jsonl(&out);
    // One kernel each: Sgemm 128×256 on a 1×2 grid of 256 threads (8 ns),
    // GemmEx 512×512 on 4×4 (64 ns), the batch of 8 64×64 on 1×1×8 (32 ns).
    for ((m, n, k), ns) in [
        ((128, 256, 64), 8u64),
        ((512, 512, 1024), 64),
        ((64, 64, 128), 32),
    ] {
        let row = shape(&summary, m, n, k);
        let gpu = &row["gpu"];
        assert_eq!(gpu["count"], 4, "{row}");
        assert_eq!(
            (gpu["min_ns"].as_u64(), gpu["max_ns"].as_u64()),
            (Some(ns), Some(ns)),
            "{row}"
        );
        let flops = row["flops"].as_f64().unwrap();
        let tflops = row["tflops"].as_f64().unwrap();
        assert!(
            (tflops - flops / ns as f64 / 1e3).abs() < 1e-9 * tflops,
            "{row}"
        );
    }
    // The Lt matmul's two kernels (256 ns, then the 16,384 ns split-K
    // reduction, queued after it): a span of both at least.
    let lt = &shape(&summary, 1024, 1024, 8192)["gpu"];
    assert_eq!(lt["count"], 4, "{lt}");
    assert!(lt["min_ns"].as_u64().unwrap() >= 256 + 16_384, "{lt}");
}

/// A command started by gputrace (`-- CMD`) has cuBLAS and cuBLASLt
/// probed before it loads them: its first GEMMs are traced (it dlopens
/// both and calls them at once, before a check for new mappings could).
#[test]
fn a_command_started_by_gputrace_has_its_first_gemms_traced() {
    let _g = beside_others();
    let out = scratch("blas-cmd").join("t.jsonl");
    let wl = workload_bin();
    let f = run_gputrace(&[
        "--output",
        out.to_str().unwrap(),
        "--",
        wl.to_str().unwrap(),
        "--threads",
        "1",
        "--launches",
        "0",
        "--gemms",
        "2",
    ]);
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(
        !f.stderr_text().contains("after start"),
        "{}",
        f.stderr_text()
    );
    let (_, summary) = read_jsonl(&out);
    for (m, n, k) in [
        (128, 256, 64),
        (512, 512, 1024),
        (64, 64, 128),
        (1024, 1024, 8192),
    ] {
        assert_eq!(shape(&summary, m, n, k)["calls"], 2, "{m}x{n}x{k}");
    }
}

/// Issue 28 step 1: a matmul whose descriptors were made before gputrace
/// attached (`--gemms-lt-plan`: once, in setup, as XLA's cached plans)
/// has its shape from the descriptors' first bytes, which its probe
/// copied, at the offsets a helper found in this libcublasLt (the
/// simulator's packing, not cuBLAS's). Without that calibration
/// (`GPUTRACE_NO_CALIBRATION`) the same matmuls have no shape: counted,
/// never guessed.
#[test]
fn lt_plans_made_before_the_attach_have_their_shapes() {
    let _g = beside_others();
    let args = ["--gemms", "5", "--gemms-lt-plan", "--launches", "0"];
    let run = trace_workload("blas-lt-plan", &args, &[]);
    let rounds = shape(&run.summary, 128, 256, 64)["calls"].clone();
    assert!(rounds.as_u64().unwrap() >= 5, "{rounds}");
    let plan = shape(&run.summary, 256, 512, 2048);
    assert_eq!(
        (
            &plan["op"],
            &plan["transa"],
            &plan["transb"],
            &plan["batch"],
            &plan["a_type"],
            &plan["compute"],
            &plan["calls"]
        ),
        (
            &"bmm".into(),
            &"N".into(),
            &"T".into(),
            &4.into(),
            &"bf16".into(),
            &"32F".into(),
            &rounds
        )
    );
    assert_eq!(launches_of(plan).len(), 1);
    let gemms = |s: &serde_json::Value| -> serde_json::Value {
        s["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["gemms"].is_object())
            .expect("a process with GEMMs")["gemms"]
            .clone()
    };
    assert_eq!(gemms(&run.summary)["lt_without_shape"]["calls"], 0);
    let off = trace_run_with_env(
        "blas-lt-plan-off",
        "t.jsonl",
        &workload_bin(),
        &args,
        &[],
        &[("GPUTRACE_NO_CALIBRATION", "1")],
    );
    let g = gemms(&off.summary);
    assert_eq!(g["lt_without_shape"]["calls"], rounds);
    assert!(
        !g["shapes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["k"] == 2048),
        "{g}"
    );
}

/// Node mode (`--all`): the calibration helpers gputrace starts call the
/// libraries it probes (libcuda's, libcublasLt's); their calls are not a
/// process of the node's. A second workload on the same libcublasLt has
/// its Lt plan's shape from the first call (the file was calibrated once).
#[test]
fn node_mode_leaves_out_its_own_helpers_and_reads_lt_plans() {
    let _alone = NODE.write().unwrap_or_else(|p| p.into_inner());
    let dir = scratch("blas-node");
    let sum = dir.join("s.json");
    let t = Tracer::attach(&[
        "--all",
        "--summary",
        "json",
        "--summary-file",
        sum.to_str().unwrap(),
    ]);
    let args = ["--gemms", "4", "--gemms-lt-plan", "--launches", "0"];
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut w = Workload::start(&args);
        pids.push(w.pid);
        // The node scan finds the libraries a new process maps.
        std::thread::sleep(Duration::from_millis(1500));
        w.go();
        let (status, _) = w.finish();
        assert!(status.success());
    }
    std::thread::sleep(Duration::from_millis(1000));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();
    let procs = summary["processes"].as_array().unwrap();
    let comms: Vec<&str> = procs.iter().filter_map(|p| p["comm"].as_str()).collect();
    assert!(
        !comms
            .iter()
            .any(|c| c.starts_with("gputrace") && !c.starts_with("gputrace-worklo")),
        "{comms:?}"
    );
    let second = procs
        .iter()
        .find(|p| p["pid"] == pids[1])
        .unwrap_or_else(|| panic!("no process {} in {comms:?}", pids[1]));
    let one = serde_json::json!({"processes": [second]});
    let rounds = shape(&one, 128, 256, 64)["calls"].clone();
    assert_eq!(shape(&one, 256, 512, 2048)["calls"], rounds);
}

/// A libcublasLt another user owns is not trusted: its calibration runs in
/// the sandbox (said once), and the plan's shape is still read.
#[test]
fn an_untrusted_libcublaslt_is_calibrated_in_the_sandbox() {
    let _g = beside_others();
    let dir = scratch("blas-untrusted-lt");
    for f in [
        "gputrace-workload",
        "libcuda.so.1",
        "libnccl.so.2",
        "libcudart.so.13",
        "libcublas.so.13",
        "libcublasLt.so.13",
    ] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    let lt = dir.join("libcublasLt.so.13");
    std::os::unix::fs::chown(&lt, Some(65534), Some(65534)).unwrap();
    let args = ["--gemms", "3", "--gemms-lt-plan", "--launches", "0"];
    let run = trace_run(
        "blas-untrusted-run",
        &dir.join("gputrace-workload"),
        &args,
        &[],
    );
    let said = run.gputrace.stderr_text();
    assert_eq!(
        said.lines()
            .filter(|l| l.contains("libcublasLt.so.13 is not trusted") && l.contains("sandbox"))
            .count(),
        1,
        "{said}"
    );
    let rounds = shape(&run.summary, 128, 256, 64)["calls"].clone();
    assert_eq!(
        shape(&run.summary, 256, 512, 2048)["calls"],
        rounds,
        "{said}"
    );
}
