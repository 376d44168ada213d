//! Issue 14: PID reuse. A traced process exits and a new one gets its PID
//! at once (forced through /proc/sys/kernel/ns_last_pid, root): under
//! `--all` the calls of each are theirs, named by their own command, none
//! of the second's given to the first.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gputrace_tests::*;

/// A copy of the simulated workload named `name` (its command name), with
/// the libraries beside it (found through $ORIGIN).
fn renamed_workload(dir: &Path, name: &str) -> std::path::PathBuf {
    for f in ["libcuda.so.1", "libnccl.so.2", "libcudart.so.13"] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    let bin = dir.join(name);
    std::fs::copy(workload_bin(), &bin).unwrap();
    bin
}

/// Starts `bin` with `args` so that it gets PID `pid` (free now).
fn start_with_pid(bin: &Path, args: &[&str], pid: u32) -> Workload {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("writing ns_last_pid needs root in the initial PID namespace");
        let w = Workload::start_with(Command::new(bin), args);
        if w.pid == pid {
            return w;
        }
        drop(w); // another process took it first: again
    }
    panic!("could not start a process with PID {pid} in 200 tries");
}

/// Waits until gputrace holds probes on a library file under `dir`.
fn probed(t: &Tracer, dir: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while node::kernel_probes_under(t.child.id(), dir) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "gputrace put no probe on {} within 30 s",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_reused_pid_is_a_new_process() {
    let dir = scratch("pidreuse");
    let second = renamed_workload(&dir, "reuse-second");
    let out = dir.join("t.jsonl");
    let t = Tracer::attach(&["--all", "--output", out.to_str().unwrap()]);
    let mut a = Workload::start(&["--launches", "5"]);
    let pid = a.pid;
    // The node scan finds the library it maps (a loaded machine may take
    // longer than the scan period).
    probed(&t, &sim_dir());
    std::thread::sleep(Duration::from_millis(1500)); // and sees the process
    a.go();
    let (status, _) = a.finish();
    assert!(status.success());
    // Within the 2 s a gone process's state is kept: the PID again.
    let mut b = start_with_pid(&second, &["--launches", "7"], pid);
    probed(&t, &dir);
    std::thread::sleep(Duration::from_millis(1500));
    b.go();
    let (status, _) = b.finish();
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    let launches = |comm: &str| {
        events
            .iter()
            .filter(|e| e["pid"] == pid && e["api"] == "cuLaunchKernel" && e["comm"] == comm)
            .count()
    };
    assert_eq!(launches("gputrace-worklo"), 5);
    assert_eq!(launches("reuse-second"), 7);
    let others: Vec<_> = events
        .iter()
        .filter(|e| {
            e["pid"] == pid && e["comm"] != "gputrace-worklo" && e["comm"] != "reuse-second"
        })
        .collect();
    assert!(others.is_empty(), "{others:?}");
}
