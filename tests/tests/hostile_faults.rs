//! Issue 14, faults while tracing: the target killed, gputrace killed and
//! started again, the target stopped and continued, a command that starts
//! GPU children, a library replaced on disk while probed. Assertions name
//! this test's own processes (other tests run workloads at the same time).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

fn signal(pid: u32, sig: i32) {
    // SAFETY: a signal to a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Whether `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// User+system CPU ticks of `pid` (it is making calls when this grows).
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
}

fn of_pid(events: &[Value], pid: u32) -> Vec<&Value> {
    events.iter().filter(|e| e["pid"] == pid).collect()
}

/// The target SIGKILLed mid-trace: gputrace notices, ends, and the file is
/// complete (it ends with its summary line), every call in it.
#[test]
fn target_killed_mid_trace_leaves_a_complete_file() {
    let dir = scratch("killtarget");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--loop", "--launches", "10"]);
    let pid = w.pid;
    let t = Tracer::attach_to(&w, &out, &[]);
    w.go();
    std::thread::sleep(Duration::from_millis(400));
    signal(pid, libc::SIGKILL);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(
        f.stderr
            .iter()
            .any(|l| l == "gputrace: every traced process has exited"),
        "{:?}",
        f.stderr
    );
    let (events, summary) = read_jsonl(&out);
    let mine = of_pid(&events, pid);
    assert!(mine.len() > 10, "{} events", mine.len());
    assert_eq!(summary["events"], events.len());
    assert!(
        f.stdout.contains("gputrace summary: 1 process"),
        "{}",
        f.stdout
    );
}

/// gputrace itself SIGKILLed: the target runs on (its probes went with
/// gputrace's descriptors), and a second gputrace attaches and counts
/// exactly, nothing twice.
#[test]
fn gputrace_killed_then_attached_again() {
    // A running target, traced and then the tracer killed under it.
    let mut w = Workload::start(&["--loop", "--launches", "10"]);
    let pid = w.pid;
    let first = Tracer::attach(&["--pid", &pid.to_string(), "--summary", "none"]);
    w.go();
    std::thread::sleep(Duration::from_millis(300));
    first.signal(libc::SIGKILL);
    let f = first.finish(Duration::from_secs(10));
    assert_eq!(f.status.code(), None, "killed by a signal");
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(pid), "the target died with gputrace");
    assert!(cpu_ticks(pid) > before, "the target stopped running");
    // A second gputrace on the same target gets calls and loses none.
    let dir = scratch("killtracer");
    let out = dir.join("t.jsonl");
    let second = Tracer::attach_to(&w, &out, &["--duration", "500ms"]);
    let f = second.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    assert!(of_pid(&events, pid).len() > 10);
    // Attached mid-run, a call in flight may return without its entry
    // seen (`unpaired`); nothing may be lost to a full ring or table.
    let d = &summary["lost_detail"];
    assert_eq!(
        (d["ring_full"].as_u64(), d["inflight_full"].as_u64()),
        (Some(0), Some(0)),
        "{summary}"
    );
    assert!(d["unpaired"].as_u64().unwrap() <= 2, "{summary}");
    drop(w);

    // Counted: a target that a killed gputrace had attached to makes N
    // launches under a second one, which records exactly N.
    let mut w = Workload::start(&["--launches", "300"]);
    let first = Tracer::attach(&["--pid", &w.pid.to_string(), "--summary", "none"]);
    first.signal(libc::SIGKILL);
    let _ = first.finish(Duration::from_secs(10));
    let out = dir.join("counted.jsonl");
    let second = Tracer::attach_to(&w, &out, &[]);
    w.go();
    let (status, _) = w.finish();
    assert!(status.success());
    let f = second.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    assert_eq!(counts(&events)["cuLaunchKernel"], 300);
}

/// A stopped target is not an exited one: tracing waits through SIGSTOP and
/// goes on after SIGCONT.
#[test]
fn target_stopped_and_continued() {
    let dir = scratch("stopcont");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--loop", "--launches", "10"]);
    let pid = w.pid;
    let t = Tracer::attach_to(&w, &out, &["--duration", "2500ms"]);
    w.go();
    std::thread::sleep(Duration::from_millis(400));
    signal(pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1200));
    signal(pid, libc::SIGCONT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(
        !f.stderr_text().contains("every traced process has exited"),
        "{:?}",
        f.stderr
    );
    let (events, _) = read_jsonl(&out);
    let ts: Vec<u64> = of_pid(&events, pid)
        .iter()
        .map(|e| e["ts_ns"].as_u64().unwrap())
        .collect();
    // A gap of about the stop, with calls on both sides of it.
    let gap = ts
        .windows(2)
        .map(|p| p[1].saturating_sub(p[0]))
        .max()
        .unwrap_or(0);
    assert!(gap > 1_000_000_000, "largest gap {gap} ns");
    let at = ts.windows(2).position(|p| p[1] - p[0] == gap).unwrap();
    assert!(
        at > 5 && ts.len() - at > 5,
        "calls before and after the stop"
    );
}

/// `-- CMD` where CMD is a shell starting GPU children: the shell is what
/// is traced (docs/cli.md), said with a warning, and `--all` follows the
/// children from their first calls.
#[test]
fn command_with_gpu_children() {
    let dir = scratch("children");
    let script = format!(
        "{w} --launches 5 & {w} --launches 7; wait",
        w = workload_bin().display()
    );
    let out = dir.join("cmd.jsonl");
    let f = Tracer::spawn(&["--output", out.to_str().unwrap(), "--", "sh", "-c", &script])
        .finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(
        f.stderr.iter().any(
            |l| l.starts_with("gputrace: WARNING: `sh` would load neither libcuda nor libnccl")
        ),
        "{:?}",
        f.stderr
    );

    // --all: both children, every launch, whatever else runs on the host.
    let out = dir.join("all.jsonl");
    let marker = dir.join("go");
    let script = format!(
        "while [ ! -e {m} ]; do sleep 0.05; done; {w} --launches 5 & echo $! > {d}/a; {w} --launches 7 & echo $! > {d}/b; wait",
        m = marker.display(),
        w = workload_bin().display(),
        d = dir.display()
    );
    let t = Tracer::attach(&["--all", "--output", out.to_str().unwrap()]);
    let mut sh = Command::new("sh")
        .args(["-c", &script])
        .env_remove("LD_LIBRARY_PATH")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(&marker, b"").unwrap();
    assert!(sh.wait().unwrap().success());
    // The node scan finds a new library file within 0.5 s; the children
    // map the one already probed (they start after gputrace attached).
    std::thread::sleep(Duration::from_millis(1500));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    for (file, n) in [("a", 5), ("b", 7)] {
        let pid: u32 = std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let launches = of_pid(&events, pid)
            .iter()
            .filter(|e| e["api"] == "cuLaunchKernel")
            .count();
        assert_eq!(launches, n, "child {pid}");
    }
}

/// A copy of the simulated libraries and workload in `dir` (the workload
/// finds its libraries through $ORIGIN).
fn copy_sim(dir: &Path) -> PathBuf {
    for f in [
        "gputrace-workload",
        "libcuda.so.1",
        "libnccl.so.2",
        "libcudart.so.13",
    ] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    dir.join("gputrace-workload")
}

/// The probed libcuda replaced on disk (a new file renamed over it, as a
/// package upgrade does) while a process runs on the old one: tracing goes
/// on for it, and a process started afterwards on the new file is traced
/// too under --all.
#[test]
fn library_replaced_on_disk_while_probed() {
    let dir = scratch("replaced");
    let bin = copy_sim(&dir);
    let out = dir.join("t.jsonl");
    let mut old = Workload::start_bin(&bin, &["--loop", "--launches", "10"]);
    let t = Tracer::attach(&["--all", "--output", out.to_str().unwrap()]);
    old.go();
    std::thread::sleep(Duration::from_millis(300));
    let lib = dir.join("libcuda.so.1");
    let fresh = dir.join("libcuda.so.1.new");
    std::fs::copy(sim_dir().join("libcuda.so.1"), &fresh).unwrap();
    std::fs::rename(&fresh, &lib).unwrap();
    let replaced_at = now_ns();
    let mut new = Workload::start_bin(&bin, &["--launches", "40"]);
    // The node scan (every 0.5 s) probes the new file.
    std::thread::sleep(Duration::from_millis(1500));
    new.go();
    let new_pid = new.pid;
    let (status, _) = new.finish();
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(300));
    let old_pid = old.pid;
    assert!(alive(old_pid));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    let old_after = of_pid(&events, old_pid)
        .iter()
        .filter(|e| e["ts_ns"].as_u64().unwrap() > replaced_at)
        .count();
    assert!(
        old_after > 10,
        "the old process's calls after the swap: {old_after}"
    );
    let new_launches = of_pid(&events, new_pid)
        .iter()
        .filter(|e| e["api"] == "cuLaunchKernel")
        .count();
    assert_eq!(new_launches, 40);
}
