//! Bad input: one clear line on stderr and the documented exit code
//! (1 runtime failure, 2 bad arguments), never a panic or a hang.

use std::process::Command;
use std::time::Duration;

use gputrace_tests::*;

fn assert_one_line_error(f: &Finished, code: i32, needle: &str) {
    assert_eq!(f.status.code(), Some(code), "stderr: {}", f.stderr_text());
    let text = f.stderr_text();
    assert!(text.contains(needle), "expected {needle:?} in {text:?}");
    assert!(!text.contains("panicked"), "{text}");
}

fn runtime_error(f: &Finished, needle: &str) {
    assert_one_line_error(f, 1, needle);
    let errors: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| {
            l.starts_with("gputrace: ")
                && !l.starts_with("gputrace: attached")
                && !l.starts_with("gputrace: WARNING")
        })
        .collect();
    assert_eq!(errors.len(), 1, "one line: {:?}", f.stderr);
}

#[test]
fn usage_errors_exit_2() {
    assert_one_line_error(&run_gputrace(&[]), 2, "nothing to trace");
    assert_one_line_error(
        &run_gputrace(&["--pid", "1", "--probes", "launch,bogus"]),
        2,
        "unknown probe family `bogus`",
    );
    assert_one_line_error(
        &run_gputrace(&["--pid", "1", "--probes", "launch:ret"]),
        2,
        "unknown probe mode",
    );
    assert_one_line_error(
        &run_gputrace(&["--pid", "1", "--output", "trace.txt"]),
        2,
        "must end in .jsonl",
    );
    assert_one_line_error(
        &run_gputrace(&["--pid", "1", "--duration", "soon"]),
        2,
        "not a duration",
    );
    assert_one_line_error(&run_gputrace(&["--pid", "abc"]), 2, "invalid value 'abc'");
    assert_one_line_error(&run_gputrace(&["--pid", "0"]), 2, "not a process id");
    assert_one_line_error(&run_gputrace(&["stats"]), 2, "required");
}

#[test]
fn no_such_pid() {
    runtime_error(
        &run_gputrace(&["--pid", "4000000"]),
        "no process with PID 4000000",
    );
}

#[test]
fn process_without_cuda() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let f = run_gputrace(&["--pid", &sleeper.id().to_string()]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    runtime_error(
        &f,
        "maps neither libcuda nor libnccl (looked for libcuda.so*, libnccl.so* in /proc/",
    );
}

#[test]
fn override_library_that_does_not_exist() {
    let w = Workload::start(&[]);
    let f = run_gputrace(&[
        "--pid",
        &w.pid.to_string(),
        "--libcuda",
        "/nonexistent/libcuda.so.1",
    ]);
    runtime_error(
        &f,
        "--libcuda /nonexistent/libcuda.so.1: No such file or directory",
    );
}

#[test]
fn override_library_for_a_process_that_maps_none() {
    // NCCL linked into another library: the override names the file to probe.
    let dir = scratch("override");
    let out = dir.join("t.jsonl");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let lib = sim_dir().join("libnccl.so.2");
    let t = Tracer::attach(&[
        "--pid",
        &sleeper.id().to_string(),
        "--libnccl",
        lib.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
}

#[test]
fn not_root() {
    let bin = gputrace_bin();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&bin)
        .args(["--pid", "1"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing CAP_BPF and CAP_PERFMON")
            && err.contains("not running as root")
            && err.contains("sudo"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn root_without_cap_bpf() {
    let out = Command::new("setpriv")
        .args([
            "--bounding-set=-bpf,-sys_admin",
            "--inh-caps=-bpf,-sys_admin",
        ])
        .arg(gputrace_bin())
        .args(["--pid", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing CAP_BPF to load eBPF")
            && err.contains("running as root, but without them"),
        "{err}"
    );
}

#[test]
fn output_that_cannot_be_written() {
    let w = Workload::start(&[]);
    let f = run_gputrace(&[
        "--pid",
        &w.pid.to_string(),
        "--output",
        "/nonexistent/dir/t.jsonl",
    ]);
    runtime_error(
        &f,
        "cannot write /nonexistent/dir/t.jsonl: No such file or directory",
    );
}

#[test]
fn command_that_cannot_run() {
    runtime_error(
        &run_gputrace(&["--", "/nonexistent/program"]),
        "cannot run `/nonexistent/program`",
    );
    runtime_error(
        &run_gputrace(&["--", "no-such-command-anywhere"]),
        "not found in PATH",
    );
}

/// A tiny tmpfs fills up mid-trace: the trace stops with a clear error.
#[test]
fn full_disk_mid_trace() {
    let dir = scratch("fulldisk");
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success(), "mounting a tmpfs needs root");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(dir.clone());
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--loop", "--launches", "100"]);
    let t = Tracer::attach_to(&w, &out, &[]);
    w.go();
    let f = t.finish(Duration::from_secs(30));
    runtime_error(&f, "No space left on device");
    assert!(f
        .stderr_text()
        .contains(&format!("writing {} failed", out.display())));
    // The summary of what was seen is still printed.
    assert!(f.stdout.contains("cuLaunchKernel"), "{}", f.stdout);
}
