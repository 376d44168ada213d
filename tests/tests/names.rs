//! Root tests: kernel names for launches whose handles were created before
//! gputrace attached (calibration), and the fallbacks when it cannot be done.

use std::time::Duration;

use gputrace_tests::*;
use serde_json::{json, Value};

#[test]
fn handles_created_before_attach_are_named_by_calibration() {
    let dir = scratch("calibrated");
    let out = dir.join("t.jsonl");
    let cache = dir.join("cache");
    // The workload runs for a while, as real ones do: names are read from the
    // target's memory when gputrace first sees a handle, which needs the
    // process to still be there.
    let mut w = Workload::start(&[
        "--duration-ms",
        "300",
        "--launches",
        "6",
        "--launch-ex",
        "2",
        "--coop",
        "1",
        "--threads",
        "2",
    ]);
    let mut t = Tracer::spawn_with_env(
        &[
            "--pid",
            &w.pid.to_string(),
            "--output",
            out.to_str().unwrap(),
        ],
        &[("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())],
    );
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(60));
    w.go();
    assert!(w.finish().0.success());
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success());
    assert!(
        !f.stderr_text()
            .contains("kernel names from handles are off"),
        "{}",
        f.stderr_text()
    );
    let (events, _) = read_jsonl(&out);
    // No name lookup happened while traced: every name came from a handle.
    assert!(of_api(&events, "cuModuleGetFunction").is_empty());
    // Each pass launches 6 × (vector_add, reduce, relu cycling), 2 × gemm, 1 × vector_add.
    let launches = kernels(&events, "cuLaunchKernel");
    assert!(
        launches.len() >= 12 && launches.len().is_multiple_of(6),
        "{}",
        launches.len()
    );
    let count = |name: &str| launches.iter().filter(|k| **k == json!(name)).count();
    let third = launches.len() / 3;
    assert_eq!(
        (count(VECTOR_ADD), count(REDUCE), count(RELU)),
        (third, third, third)
    );
    let ex = kernels(&events, "cuLaunchKernelEx");
    assert_eq!(ex, vec![json!(GEMM); ex.len()]);
    let coop = kernels(&events, "cuLaunchCooperativeKernel");
    assert_eq!(coop, vec![json!(VECTOR_ADD); coop.len()]);
    // The layout found (the simulator keeps the name pointer at +40, not the
    // +8 of driver 580) is cached by the libcuda's content.
    let cached: Value =
        serde_json::from_str(&std::fs::read_to_string(cache.join("calibration-v2.json")).unwrap())
            .unwrap();
    let (key, layout) = cached.as_object().unwrap().iter().next().unwrap();
    assert_eq!(cached.as_object().unwrap().len(), 1, "{cached}");
    assert_eq!(
        key,
        &format!(
            "sha256:{}",
            gputrace_tests::trap::sha256(&sim_dir().join("libcuda.so.1"))
        )
    );
    assert_eq!(layout, &json!([40]));
}

#[test]
fn calibration_helper_reports_the_layout() {
    let out = std::process::Command::new(gputrace_bin())
        .arg("__calibrate")
        .arg(sim_dir().join("libcuda.so.1"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["layout"], json!([40]));
    let out = std::process::Command::new(gputrace_bin())
        .arg("__calibrate")
        .arg(sim_dir().join("nofuncname/libcuda.so.1"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["layout"], Value::Null);
    assert_eq!(v["error"], "it exports no cuFuncGetName");
}

#[test]
fn without_calibration_names_come_from_interception_or_stay_null() {
    let nofuncname = sim_dir().join("nofuncname/gputrace-workload");
    // Handles made before attach: null.
    let r = trace_run("uncalibrated", &nofuncname, &["--launches", "3"], &[]);
    let err = r.gputrace.stderr_text();
    assert!(
        err.contains("kernel names from handles are off for")
            && err.contains("it exports no cuFuncGetName"),
        "{err}"
    );
    assert_eq!(
        err.matches("kernel names from handles are off").count(),
        1,
        "said once"
    );
    assert_eq!(kernels(&r.events, "cuLaunchKernel"), vec![Value::Null; 3]);
    // Handles made while attached: named.
    let r = trace_run(
        "uncalibrated-late",
        &nofuncname,
        &["--launches", "3", "--names-after-wait"],
        &[],
    );
    assert_eq!(
        kernels(&r.events, "cuLaunchKernel"),
        vec![json!(VECTOR_ADD), json!(REDUCE), json!(RELU)]
    );
}

const SCALE: &str = "scale_kernel(float*, float)";
const SAXPY: &str = "sim::saxpy(int, float, float const*, float*)";
const TRANSPOSE: &str = "void transpose<float, 32>(float const*, float*, int, int)";

#[test]
fn runtime_host_stubs_name_launches_when_handles_cannot() {
    // No cuFuncGetName: no calibration, so the runtime family is probed and
    // each cudaLaunchKernel's host stub names the cuLaunchKernel inside it,
    // from .dynsym (scale_kernel, transpose) and from .symtab only (saxpy).
    let nofuncname = sim_dir().join("nofuncname/gputrace-workload");
    let r = trace_run(
        "runtime",
        &nofuncname,
        &["--runtime", "6", "--launches", "2"],
        &[],
    );
    let events = r.events;
    let c = counts(&events);
    assert_eq!((c["cudaLaunchKernel"], c["cudaLaunchKernelExC"]), (6, 1));
    assert_eq!(c["cuLaunchKernel"], 8);
    // Launches made inside a runtime call are named by its stub; the two
    // direct launches of module kernels made before attach stay unnamed.
    let by_grid = |grid: Value| -> Vec<Value> {
        of_api(&events, "cuLaunchKernel")
            .iter()
            .filter(|e| e["args"]["grid"] == grid)
            .map(|e| e["args"]["kernel"].clone())
            .collect()
    };
    assert_eq!(
        by_grid(json!([8, 1, 1])),
        [SCALE, SAXPY, TRANSPOSE, SCALE, SAXPY, TRANSPOSE]
            .map(|s| json!(s))
            .to_vec()
    );
    assert_eq!(by_grid(json!([64, 2, 1])), vec![Value::Null, Value::Null]);
    assert_eq!(kernels(&events, "cuLaunchKernelEx"), vec![json!(SCALE)]);
}

#[test]
fn runtime_is_not_probed_where_handles_name_kernels() {
    let r = trace_workload(
        "runtime-calibrated",
        &["--duration-ms", "200", "--runtime", "3"],
        &[],
    );
    assert!(
        of_api(&r.events, "cudaLaunchKernel").is_empty(),
        "the runtime family is a fallback"
    );
    let names = kernels(&r.events, "cuLaunchKernel");
    assert!(!names.is_empty());
    for n in &names {
        assert!(
            [json!(SCALE), json!(SAXPY), json!(TRANSPOSE)].contains(n),
            "{n}"
        );
    }
}
