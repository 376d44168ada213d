//! The toolchain recipe of TOOLCHAIN.md, each step skipped when its result
//! is already there.

use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
];
const BPF_LINKER_VERSION: &str = "0.13.0";

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn apt_missing(packages: &[&str]) -> Vec<String> {
    packages
        .iter()
        .filter(|p| {
            output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_none_or(|s| !s.contains("install ok installed"))
        })
        .map(|p| p.to_string())
        .collect()
}

/// Installs Debian packages that are missing (one `apt-get update` at most).
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    let missing = apt_missing(packages);
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-qq"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn cargo_bin(name: &str) -> std::path::PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    home.join("bin").join(name)
}

pub(crate) fn ensure() -> Result<()> {
    apt_install(APT_PACKAGES)?;
    // Extra tools the tests use (tmux: top's end-to-end test; prometheus:
    // the daemon's scrape test).
    apt_install(&["make", "gcc", "util-linux", "tmux", "prometheus"])?;

    let have_linker = output(Command::new(cargo_bin("bpf-linker")).arg("--version"))
        .is_some_and(|v| v.contains(BPF_LINKER_VERSION));
    if !have_linker {
        eprintln!("setup: installing bpf-linker {BPF_LINKER_VERSION} (a few minutes)");
        run(Command::new("cargo")
            .args([
                "install",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--locked",
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22"))
        .context("installing bpf-linker")?;
    }

    let toolchains = output(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("setup: installing the nightly toolchain");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))
    .unwrap_or_default();
    if !components.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: adding rust-src to nightly");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}
