//! Builds the simulated libcuda/libnccl and workload (tests/sim) for the tests.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("sim");
    let sim = manifest.join("sim");
    // The whole directory (sources, headers, Makefile): a file added there
    // needs no line here.
    println!("cargo:rerun-if-changed={}", sim.display());
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
