use super::*;
use crate::model::fixtures::{call, gemm_args as gemm, gpu_kernel, launch_args, launched_by};

fn only_row(b: &GemmBook) -> (GemmShape, GemmStats) {
    let t = b.settled();
    let rows = sorted(&t);
    assert_eq!(rows.len(), 1, "{rows:?}");
    (rows[0].0.clone(), rows[0].1.clone())
}

#[test]
fn a_gemm_owns_the_launches_inside_it_in_either_order() {
    // Return order (live, JSONL): the launches come before their GEMM.
    let mut b = GemmBook::default();
    b.record(&call(5, "cuLaunchKernel", 900, 10, launch_args("before")));
    b.record(&call(
        5,
        "cuLaunchKernel",
        1_100,
        50,
        launch_args("nvjet_a"),
    ));
    b.record(&call(
        6,
        "cuLaunchKernel",
        1_200,
        50,
        launch_args("other_thread"),
    ));
    b.record(&call(5, "cuLaunchKernel", 1_300, 50, launch_args("splitk")));
    b.record(&call(
        5,
        "cublasGemmStridedBatchedEx",
        1_000,
        1_000,
        gemm(64),
    ));
    b.record(&call(5, "cuLaunchKernel", 2_100, 10, launch_args("after")));
    let (shape, s) = only_row(&b);
    assert_eq!(shape.label(), "N,N 8×64×64×128");
    assert_eq!(shape.types(), "fp16,fp16→fp16 (32F)");
    assert_eq!(shape.op(), "bmm");
    assert_eq!(s.host.calls, 1);
    let names: Vec<_> = s
        .kernel_rows()
        .iter()
        .map(|(k, n)| (k.as_deref().unwrap().to_string(), *n))
        .collect();
    assert_eq!(
        names,
        [("nvjet_a".to_string(), 1), ("splitk".to_string(), 1)]
    );

    // Start order (Perfetto): the GEMM first.
    let mut b = GemmBook::default();
    b.record(&call(
        5,
        "cublasGemmStridedBatchedEx",
        1_000,
        1_000,
        gemm(64),
    ));
    b.record(&call(
        5,
        "cuLaunchKernel",
        1_100,
        50,
        launch_args("nvjet_a"),
    ));
    b.record(&call(5, "cuLaunchKernel", 2_100, 10, launch_args("after")));
    let (_, s) = only_row(&b);
    assert_eq!(s.kernel_rows().len(), 1);
}

#[test]
fn a_gemms_gpu_time_is_the_span_of_its_kernels() {
    let mut b = GemmBook::default();
    for (i, start) in [10_000u64, 20_000].into_iter().enumerate() {
        b.record(&call(
            5,
            "cuLaunchKernel",
            start + 100,
            50,
            launch_args("nvjet"),
        ));
        b.record(&call(
            5,
            "cuLaunchKernel",
            start + 200,
            50,
            launch_args("splitk"),
        ));
        b.record(&call(
            5,
            "cublasGemmStridedBatchedEx",
            start,
            1_000,
            gemm(64),
        ));
        // Each call's two kernels: 4 µs then 1 µs after a 0.5 µs gap
        // (the second call's 10% slower).
        let k0 = 1_000_000 + i as u64 * 100_000;
        let slow = 1 + i as u64;
        b.record_gpu(&launched_by(
            gpu_kernel("nvjet", k0, 4_000 * slow),
            5,
            start + 100,
        ));
        let k1 = k0 + 4_000 * slow + 500;
        b.record_gpu(&launched_by(
            gpu_kernel("splitk", k1, 1_000),
            5,
            start + 200,
        ));
    }
    // A kernel whose launch no GEMM owns adds nothing.
    b.record_gpu(&launched_by(gpu_kernel("x", 5_000_000, 7_000), 5, 99));
    let (shape, s) = only_row(&b);
    assert_eq!(s.gpu.timed, 2, "one span per call");
    assert_eq!((s.gpu.min_ns, s.gpu.max_ns), (5_500, 9_500));
    let flops = 2.0 * 8.0 * 64.0 * 64.0 * 128.0;
    let want = flops * 2.0 / 15_000.0 / 1e3;
    assert!((s.tflops(&shape).unwrap() - want).abs() < 1e-12);
    // The summary says the same, text and JSON.
    let mut out = String::new();
    render::render_text(&mut out, &b);
    assert!(out.contains("N,N 8×64×64×128"), "{out}");
    assert!(out.contains("kernels: nvjet ×2, splitk ×2"), "{out}");
    let j = render::render_json(&b);
    let row = &j["shapes"][0];
    assert_eq!(row["m"], 64);
    assert_eq!(row["batch"], 8);
    assert_eq!(row["a_type"], "fp16");
    assert_eq!(row["gpu"]["total_ns"], 15_000);
    assert_eq!(row["kernels"][0]["launches"], 2);
}

#[test]
fn shapes_past_the_bound_are_summed_and_said() {
    let mut b = GemmBook::default();
    let extra = 5;
    for m in 0..(MAX_SHAPES + extra) as i64 {
        b.record(&call(
            5,
            "cublasGemmStridedBatchedEx",
            1_000,
            100,
            gemm(m + 1),
        ));
    }
    let t = b.settled();
    assert_eq!(t.len(), MAX_SHAPES);
    assert_eq!(t.overflow().keys(), extra as u64);
    assert_eq!(t.other().unwrap().host.calls, extra as u64);
    let mut out = String::new();
    render::render_text(&mut out, &b);
    assert!(
        out.contains("... and 5 more shapes (past the first 1,000), summed"),
        "{out}"
    );
}

#[test]
fn a_kernel_the_launch_could_not_name_is_named_by_its_gpu_record() {
    let mut b = GemmBook::default();
    let mut unnamed = call(5, "cuLaunchKernel", 1_100, 50, launch_args("x"));
    if let Args::Launch(l) = &mut unnamed.args {
        l.kernel = None;
    }
    b.record(&unnamed);
    b.record(&call(
        5,
        "cublasGemmStridedBatchedEx",
        1_000,
        1_000,
        gemm(64),
    ));
    let (_, s) = only_row(&b);
    assert_eq!(s.kernel_rows(), [(&None, 1)]);
    let k = launched_by(gpu_kernel("nvjet_sm90", 50_000, 1_000), 5, 1_100);
    b.record_gpu(&k);
    // The same record again (a graph replays nodes): named once.
    b.record_gpu(&k);
    let (_, s) = only_row(&b);
    let rows: Vec<_> = s
        .kernel_rows()
        .into_iter()
        .map(|(k, n)| (k.as_deref().map(str::to_string), n))
        .collect();
    assert_eq!(rows, [(Some("nvjet_sm90".to_string()), 1)]);
}
