//! Builds the simulated libcuda/libnccl and workload (tests/sim) for the tests.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("sim");
    let sim = manifest.join("sim");
    for f in [
        "Makefile",
        "cuda.c",
        "capture.c",
        "graph.c",
        "exec.c",
        "sim_internal.h",
        "nccl.c",
        "nccl_rdv.c",
        "nccl_comm.h",
        "workload_nccl.c",
        "workload_nccl.h",
        "cudart.c",
        "workload.c",
        "workload_graphs.c",
        "workload.h",
        "stackapp.c",
        "stack_ctypes.py",
        "libcuda.map",
        "include",
    ] {
        println!("cargo:rerun-if-changed={}", sim.join(f).display());
    }
    let status = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&sim)
        .arg(format!("OUT={}", out.display()))
        .status()
        .expect("running make for tests/sim (is make installed? `cargo xtask setup`)");
    assert!(status.success(), "building tests/sim failed");
    println!("cargo:rustc-env=GPUTRACE_SIM_DIR={}", out.display());
}
