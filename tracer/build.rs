//! Builds what the `gputrace` binary carries inside it: the eBPF programs
//! (`tracer-ebpf`, with aya-build) and the GPU-time agent (`tracer-agent`,
//! a shared library loaded into traced processes by `--gpu-time`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};

fn main() -> anyhow::Result<()> {
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir: "../tracer-ebpf",
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )?;
    build_agent()
}

/// `cargo build --release -p tracer-agent` into a target directory of its
/// own (the outer build holds the workspace's), the library copied to
/// `OUT_DIR/libgputrace_agent.so` for `include_bytes!`.
fn build_agent() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent().context("workspace root")?.to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    for p in [
        "tracer-agent/src",
        "tracer-agent/Cargo.toml",
        "tracer-agent/build.rs",
        "tracer-common/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let target = out.join("agent-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "--package",
            "tracer-agent",
            "--lib",
        ])
        .arg("--target-dir")
        .arg(&target);
    // The outer build's flags and wrappers are for the tracer, not for a
    // library loaded into other programs.
    for v in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        c.env_remove(v);
    }
    let status = c.status().context("running cargo for tracer-agent")?;
    if !status.success() {
        bail!("building tracer-agent failed: {status}");
    }
    std::fs::copy(
        target.join("release/libgputrace_agent.so"),
        out.join("libgputrace_agent.so"),
    )
    .context("copying libgputrace_agent.so")?;
    Ok(())
}
