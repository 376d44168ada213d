//! Project tasks cargo cannot do alone: toolchain setup, the demo, the
//! test run (as root, with the simulated libraries), benchmarks.

#![allow(clippy::print_stderr)] // a developer's command line: it reports on stderr

mod bench;
mod setup;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building the eBPF programs needs (idempotent).
    Setup,
    /// Build the simulated libcuda/libnccl and workload into target/sim.
    Sim,
    /// Run gputrace on the simulated CUDA workload and print its summary.
    Demo {
        /// Extra arguments for gputrace (before `--`).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Measure gputrace's cost per traced call against a bare uprobe, and its event rate.
    Bench {
        /// Runs of each row (median and spread are reported).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Calls per thread in each traced run.
        #[arg(long, default_value_t = 200_000)]
        calls: u64,
        /// Workload kinds (launch, memcpy, nccl).
        #[arg(long, value_delimiter = ',', default_value = "launch,memcpy,nccl")]
        kinds: Vec<String>,
        /// Thread counts.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Rows (none, bare, bare-ret, gputrace, args, stacks, stacks64, map; default all).
        #[arg(long, value_delimiter = ',')]
        modes: Vec<String>,
        /// Seconds of the all-cores throughput run (0: skip).
        #[arg(long, default_value_t = 3.0)]
        throughput: f64,
        /// Instead: a long trace written to disk, reporting gputrace's RSS.
        #[arg(long)]
        soak: Option<u64>,
        /// Instead: `gputrace stats` on a synthetic file of this many GiB.
        #[arg(long)]
        stats_gib: Option<f64>,
        /// Instead: bytes per event and write/read speed of each timeline
        /// format, on this many synthetic DDP-like calls.
        #[arg(long, value_name = "CALLS", num_args = 0..=1, default_missing_value = "1000000")]
        formats: Option<u64>,
        /// With --formats: the calls of this .jsonl file instead.
        #[arg(long, requires = "formats")]
        input: Option<PathBuf>,
        /// Where to write the JSON results (default bench/results/HOST-DATE.json).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Use this copied build (DIR/gputrace, DIR/sim/) instead of building.
        #[arg(long, value_name = "DIR")]
        prebuilt: Option<PathBuf>,
    },
    /// Fuzz the timeline reader (`gputrace stats`) for longer than the test run does.
    Fuzz {
        /// How long to fuzz.
        #[arg(long, default_value_t = 300.0)]
        seconds: f64,
        /// Start from this seed (printed by every run) to repeat one.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Run every test (unit, and the root eBPF integration tests).
    Test {
        /// Passed to `cargo test` after `--` (a test name filter, say).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Builds the simulator into `target/sim` and returns that directory.
fn build_sim() -> Result<PathBuf> {
    let out = root().join("target/sim");
    run(Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(root().join("tests/sim"))
        .arg(format!("OUT={}", out.display())))?;
    Ok(out)
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::ensure(),
        Task::Sim => build_sim().map(|_| ()),
        Task::Demo { args } => demo(&args),
        Task::Bench {
            reps,
            calls,
            kinds,
            threads,
            modes,
            throughput,
            soak,
            stats_gib,
            formats,
            input,
            out,
            prebuilt,
        } => {
            if let Some(calls) = formats {
                // Formats need no eBPF, no root and no simulator.
                let mut c = cargo();
                c.args([
                    "run",
                    "--release",
                    "-p",
                    "tracer",
                    "--example",
                    "timeline_formats",
                    "--",
                ]);
                c.args(["--events", &calls.to_string()]);
                if let Some(i) = input {
                    c.arg("--input").arg(i);
                }
                return run(&mut c);
            }
            // --prebuilt DIR: a copied build (gputrace and the simulator
            // beside it), for a machine without cargo.
            let (sim, gputrace, scratch) = match prebuilt {
                Some(dir) => (
                    dir.join("sim"),
                    dir.join("gputrace"),
                    std::env::temp_dir().join("gputrace-bench"),
                ),
                None => {
                    setup::ensure()?;
                    let sim = build_sim()?;
                    run(cargo().args(["build", "--release", "--package", "tracer"]))?;
                    (
                        sim,
                        root().join("target/release/gputrace"),
                        root().join("target/bench"),
                    )
                }
            };
            std::fs::create_dir_all(&scratch)?;
            let b = bench::Bench {
                sim,
                gputrace,
                scratch,
            };
            if let Some(secs) = soak {
                return bench::soak(&b, secs);
            }
            if let Some(gib) = stats_gib {
                return bench::stats_file(&b, gib, &root());
            }
            let o = bench::Options {
                reps,
                calls,
                kinds,
                threads,
                modes: if modes.is_empty() {
                    bench::Mode::ALL.to_vec()
                } else {
                    modes
                        .iter()
                        .map(|k| bench::Mode::from_key(k))
                        .collect::<Result<_>>()?
                },
                throughput_secs: throughput,
                out: out.unwrap_or_else(|| bench::default_out(&root())),
            };
            bench::run(&b, &o)
        }
        Task::Fuzz { seconds, seed } => fuzz(seconds, seed),
        Task::Test { args } => test(&args),
    }
}

/// The Prometheus rules in deploy/prometheus: valid, and their unit tests
/// (`*.test.yml`) pass (promtool is installed by `cargo xtask setup`).
fn promtool_rules() -> Result<()> {
    let dir = root().join("deploy/prometheus");
    let mut rules = Vec::new();
    let mut tests = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".test.yml") {
            tests.push(name);
        } else if name.ends_with(".rules.yml") {
            rules.push(name);
        }
    }
    rules.sort();
    tests.sort();
    if tests.is_empty() {
        bail!("no rule tests (*.test.yml) in {}", dir.display());
    }
    run(Command::new("promtool")
        .current_dir(&dir)
        .args(["check", "rules"])
        .args(&rules))?;
    run(Command::new("promtool")
        .current_dir(&dir)
        .args(["test", "rules"])
        .args(&tests))
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// `cargo xtask demo`: gputrace on the simulated workload, its summary.
fn demo(args: &[String]) -> Result<()> {
    setup::ensure()?;
    let sim = build_sim()?;
    run(cargo().args(["build", "--release", "--package", "tracer"]))?;
    let bin = root().join("target/release/gputrace");
    let workload = [
        "--threads",
        "2",
        "--launches",
        "5000",
        "--launch-ex",
        "500",
        "--copies",
        "200",
        "--allocs",
        "50",
        "--syncs",
        "20",
        "--sync-us",
        "500",
        "--nccl",
        "100",
        "--gemms",
        "20",
    ];
    println!(
        "$ sudo gputrace {}-- gputrace-workload {}",
        args.iter().map(|a| format!("{a} ")).collect::<String>(),
        workload.join(" ")
    );
    run(Command::new(bin)
        .args(args)
        .arg("--")
        .arg(sim.join("gputrace-workload"))
        .args(workload))
}

/// `cargo xtask fuzz`: the timeline readers on mutated inputs.
fn fuzz(seconds: f64, seed: Option<u64>) -> Result<()> {
    // Debug build: overflow checks turn wrong arithmetic into findings.
    let mut c = cargo();
    c.args([
        "test",
        "--package",
        "tracer",
        "--test",
        "reader_fuzz",
        "--",
        "--nocapture",
    ])
    .env("GPUTRACE_FUZZ_SECONDS", seconds.to_string());
    if let Some(s) = seed {
        c.env("GPUTRACE_FUZZ_SEED", s.to_string());
    }
    run(&mut c)
}

/// `cargo xtask test`: the rule tests, clippy as errors, then every test.
fn test(args: &[String]) -> Result<()> {
    setup::ensure()?;
    build_sim()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        bail!("the eBPF integration tests load programs and attach uprobes: run `cargo xtask test` as root");
    }
    promtool_rules()?;
    // The workspace lints (Cargo.toml) as errors: visibility, SAFETY
    // notes, output through the places made for it.
    run(cargo().args([
        "clippy",
        "--workspace",
        "--exclude",
        "tracer-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(cargo().args(["build", "--package", "tracer"]))?;
    run(cargo()
        .args(["test", "--workspace", "--exclude", "tracer-ebpf", "--"])
        .args(args))
}
