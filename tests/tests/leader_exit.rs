//! Root tests: a process is alive while any of its threads is. A program
//! whose main thread ends with `pthread_exit` while its workers go on
//! calling (the thread-group leader is then a zombie, its `/proc/PID/maps`
//! empty) is traced to its last call: by `--pid`, by `-- CMD` and by the
//! daemon.

use std::path::Path;
use std::time::{Duration, Instant};

use gputrace_tests::node::{sample, Daemon};
use gputrace_tests::*;

const THREADS: usize = 4;
const LAUNCHES: usize = 500;

/// The workload's arguments: each worker launches for about 2.5 s, most
/// of it after the main thread has exited.
fn args() -> Vec<String> {
    [
        "--threads",
        &THREADS.to_string(),
        "--launches",
        &LAUNCHES.to_string(),
        "--pace-us",
        "5000",
        "--exit-main",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn launches_of(path: &Path, pid: u32) -> usize {
    let (events, _) = read_jsonl(path);
    of_api(&events, "cuLaunchKernel")
        .iter()
        .filter(|e| e["pid"] == pid)
        .count()
}

#[test]
fn pid_traces_a_process_until_its_last_thread_ends() {
    let out = scratch("leader-exit-pid").join("t.jsonl");
    let a = args();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut w = Workload::start(&a);
    let t = Tracer::attach_to(&w, &out, &["--summary", "none"]);
    w.go();
    let pid = w.pid;
    let (status, lines) = w.finish_lines();
    assert!(status.success());
    assert!(lines.iter().any(|l| l == "main exits"), "{lines:?}");
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert_eq!(
        launches_of(&out, pid),
        THREADS * LAUNCHES,
        "{}",
        f.stderr_text()
    );
}

#[test]
fn a_command_is_traced_until_its_last_thread_ends() {
    let dir = scratch("leader-exit-cmd");
    let out = dir.join("t.jsonl");
    let bin = workload_bin();
    let mut all = vec![
        "--output".to_string(),
        out.to_str().unwrap().to_string(),
        "--summary".into(),
        "none".into(),
        "--".into(),
        bin.to_str().unwrap().to_string(),
    ];
    all.extend(args());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let f = run_gputrace(&all);
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    assert_eq!(
        of_api(&events, "cuLaunchKernel").len(),
        THREADS * LAUNCHES,
        "{}",
        f.stderr_text()
    );
}

/// The daemon reads which processes map libcuda from `/proc/PID/maps`:
/// the zombie leader's are empty, and probes no process maps are detached
/// (after 1 s here) while the workers still call.
#[test]
fn the_daemon_records_every_call_of_a_process_whose_main_thread_exits() {
    let dir = scratch("leader-exit-daemon").join("timelines");
    let d = Daemon::start(
        &["--output-dir", dir.to_str().unwrap()],
        &[("GPUTRACE_DETACH_AFTER", "1s")],
    );
    let a = args();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut w = Workload::start(&a);
    d.wait_probed(&sim_dir());
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    // Its series counts every launch once the ring is drained.
    let counted = || {
        sample(
            &d.metrics(),
            "gputrace_api_calls_total",
            &[("pid", &pid.to_string()), ("api", "cuLaunchKernel")],
        )
    };
    let want = (THREADS * LAUNCHES) as f64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while counted() != Some(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(counted(), Some(want));
    let Daemon { tracer, .. } = d;
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        n += launches_of(&e.unwrap().path(), pid);
    }
    assert_eq!(n, THREADS * LAUNCHES, "{}", f.stderr_text());
}
