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
