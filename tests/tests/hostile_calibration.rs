//! Root tests: a libcuda whose constructor, in gputrace's calibration
//! helper, leaves a double-forked `setsid` descendant that keeps the
//! helper's output pipe open and sleeps 600 s (tests/sim/holdpipe.c, the
//! `holdpipe/` variant of the simulator) neither stalls gputrace nor
//! outlives the helper: `--pid P --duration 3s` ends after its duration
//! with the calls and a summary, a daemon serves metrics at once and its
//! counts of other processes keep rising (none lost), and no descendant is
//! left.
//!
//! Each run uses a calibration cache of its own (the layout of the hostile
//! build is cached once found: a second run would not start the helper).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use gputrace_tests::node::*;
use gputrace_tests::*;

/// The tests count the descendants left: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn hold_workload() -> PathBuf {
    sim_dir().join("holdpipe").join("gputrace-workload")
}

/// Live processes named `simhold` that this build's gputrace forked (a
/// fork keeps the executable: another gputrace on the machine may trace
/// the same library). Killed, so that a failed run leaves nothing.
fn descendants_left() -> Vec<u32> {
    let ours = std::fs::canonicalize(gputrace_bin()).unwrap();
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'));
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if comm.trim() == "simhold" && !zombie && exe.as_deref() == Some(ours.as_path()) {
            left.push(pid);
        }
    }
    for p in &left {
        // SAFETY: killing what a failed run left behind.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    left
}

fn api_calls(m: &str, pid: u32) -> f64 {
    m.lines()
        .filter(|l| {
            l.starts_with("gputrace_api_calls_total{") && l.contains(&format!("pid=\"{pid}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_library_whose_helper_leaves_a_descendant_holding_the_pipe_does_not_stall_a_trace() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch("hold-trace");
    let out = dir.join("t.jsonl");
    let cache = dir.join("cache");
    let mut w = Workload::start_bin(
        &hold_workload(),
        &[
            "--loop",
            "--launches",
            "2",
            "--syncs",
            "1",
            "--sync-us",
            "200",
        ],
    );
    let mut t = Tracer::spawn_with_env(
        &[
            "--pid",
            &w.pid.to_string(),
            "--duration",
            "3s",
            "--output",
            out.to_str().unwrap(),
        ],
        &[("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())],
    );
    // Before: the helper's pipe was read to its end, which the descendant
    // held for 600 s; nothing was attached meanwhile.
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(30));
    w.go();
    // Before: --duration was not kept either.
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    let launches = counts(&events).get("cuLaunchKernel").copied().unwrap_or(0);
    assert!(launches > 0, "no launch traced: {}", f.stderr_text());
    assert_eq!(summary["events"], calls_in(&events), "{summary}");
    // The helper answered (the hostile constructor does not stop that):
    // launches made before gputrace came are named from their handles.
    assert_eq!(
        kernels(&events, "cuLaunchKernel")[0],
        VECTOR_ADD,
        "{}",
        f.stderr_text()
    );
    assert_eq!(descendants_left(), Vec::<u32>::new(), "descendants left");
    // SAFETY: ending our own child (it loops until SIGTERM).
    unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
    assert!(w.finish().0.success());
}

/// The hostile library's process: a launch every 200 µs, until SIGTERM.
const HOSTILE_LOOP: &[&str] = &["--loop", "--launches", "1", "--pace-us", "200"];

#[test]
fn a_daemon_beside_such_a_library_serves_at_once_and_loses_no_count() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Already there when the daemon starts: before, the daemon served
    // nothing until the descendant ended (the helper's timeout, 60 s, did
    // not cover a pipe a descendant held).
    let dir = scratch("hold-daemon");
    let cache = dir.join("cache");
    let env = [("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())];
    // Paced: a loop launching as fast as it can fills the ring buffer of a
    // debug build's reader, and a lost call of `steady` below is then
    // counted as lost, not as a call.
    let mut hostile = Workload::start_bin(&hold_workload(), HOSTILE_LOOP);
    hostile.go();
    let d = Daemon::start(&[], &env);
    d.wait_metrics(Duration::from_secs(30), |m| api_calls(m, hostile.pid) > 0.0);
    assert_eq!(descendants_left(), Vec::<u32>::new(), "descendants left");
    drop(d);

    // A daemon tracing a process when a new such library is mapped: before,
    // its loop stopped while the helper's pipe was held, the other process's
    // counts froze and its calls meanwhile were lost.
    let cache2 = dir.join("cache2");
    let env = [("GPUTRACE_CACHE_DIR", cache2.to_str().unwrap())];
    let mut steady = Workload::start(&[
        "--loop",
        "--launches",
        "5",
        "--syncs",
        "1",
        "--sync-us",
        "2000",
    ]);
    let d = Daemon::start(&[], &env);
    // Attached before its counted calls: each of them is counted.
    steady.go();
    let (sp, hp) = (steady.pid, hostile.pid);
    d.wait_metrics(Duration::from_secs(30), |m| api_calls(m, sp) > 0.0);
    // A new process of the hostile library: the daemon finds its file and
    // calibrates it (it has not seen that file: the first daemon is gone).
    let mut late = Workload::start_bin(&hold_workload(), HOSTILE_LOOP);
    late.go();
    let lp = late.pid;
    let mut last = api_calls(&d.metrics(), sp);
    for _ in 0..5 {
        let m = d.wait_metrics(Duration::from_secs(20), |m| api_calls(m, sp) > last);
        last = api_calls(&m, sp);
    }
    d.wait_metrics(Duration::from_secs(20), |m| api_calls(m, lp) > 0.0);
    // SAFETY: ending our own children (they loop until SIGTERM).
    unsafe {
        libc::kill(sp as i32, libc::SIGTERM);
        libc::kill(hp as i32, libc::SIGTERM);
        libc::kill(lp as i32, libc::SIGTERM);
    }
    let (status, done) = steady.finish();
    assert!(status.success());
    // Every call of its counted phase is counted: the daemon's counts,
    // but for the teardown after `done`, come to the workload's own count.
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        sample(
            m,
            "gputrace_api_calls_total",
            &[("api", "cuModuleUnload"), ("pid", &sp.to_string())],
        )
        .is_some()
    });
    let teardown: f64 = [
        "cuLibraryUnload",
        "cuModuleUnload",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
    ]
    .iter()
    .filter_map(|api| {
        sample(
            &m,
            "gputrace_api_calls_total",
            &[("api", api), ("pid", &sp.to_string())],
        )
    })
    .sum();
    let lost = sample(&m, "gputrace_events_lost_total", &[("reason", "ring_full")]);
    assert_eq!(
        lost,
        Some(0.0),
        "calls lost: the count below cannot be exact"
    );
    assert_eq!(api_calls(&m, sp) - teardown, done as f64, "{m}");
    assert!(hostile.finish().0.success());
    assert!(late.finish().0.success());
    assert_eq!(descendants_left(), Vec::<u32>::new(), "descendants left");
}
