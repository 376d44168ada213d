//! Root tests: GEMMs through the simulated cuBLAS and cuBLASLt
//! (tests/sim/cublas.c, cublaslt.c; `--gemms N`), traced from outside:
//! the kernels they launch inside those libraries are seen and named.

use gputrace_tests::*;

#[test]
fn kernels_launched_inside_cublas_are_named() {
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
    // Every counted call the workload made was traced: 3 GEMMs and 5
    // launches a round (its 11 cuBLASLt calls are not probed yet).
    let traced = [
        "cublasSgemm_v2",
        "cublasGemmEx",
        "cublasGemmStridedBatchedEx",
        "cuLaunchKernel",
    ]
    .iter()
    .map(|api| of_api(&run.events, api).len() as u64)
    .sum::<u64>();
    assert_eq!(traced + 2 * 11, run.done);
}
