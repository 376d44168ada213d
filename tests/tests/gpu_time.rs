//! `--gpu-time` against the simulated CUDA and CUPTI (tests/sim): the agent
//! loaded into a running workload, its records exact and joined to the
//! calls that queued them, in every output; detach, re-attach, gputrace
//! killed, a target blocked in a system call or forking, CUPTI already
//! taken, ptrace not allowed. Root: the probes and ptrace.

use std::path::Path;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

/// The simulated kernel's time on the GPU: one nanosecond per 64 threads
/// (tests/sim/README.md, the simulated CUPTI).
fn sim_kernel_ns(grid: [u64; 3], block: [u64; 3]) -> u64 {
    (grid.iter().product::<u64>() * block.iter().product::<u64>() / 64).max(1)
}

fn dims(v: &Value) -> [u64; 3] {
    let a = v.as_array().expect("dims");
    [
        a[0].as_u64().unwrap(),
        a[1].as_u64().unwrap(),
        a[2].as_u64().unwrap(),
    ]
}

fn gpu_records(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("gpu"))
        .collect()
}

/// Whether `pid` maps a copy of the agent (its memfd shows in the maps).
fn maps_agent(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.contains("gputrace-agent"))
        .unwrap_or(false)
}

#[test]
fn gpu_records_of_a_process_attached_mid_run_are_exact_and_joined_to_their_calls() {
    let out = scratch("gpu_exact").join("t.jsonl");
    let mut w = Workload::start(&[
        "--map-cupti",
        "--threads",
        "2",
        "--launches",
        "300",
        "--copies",
        "4",
        "--wait-stdin-end",
    ]);
    let t = attach_gpu(&w, &out, &[]);
    w.go_and_hold(GPU_HOLD);
    let (status, _) = w.finish();
    assert!(status.success());
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    let launches: Vec<&Value> = of_api(&events, "cuLaunchKernel");
    assert_eq!(launches.len(), 600, "every counted launch traced");
    let gpu = gpu_records(&events);
    let kernels: Vec<&&Value> = gpu.iter().filter(|g| g["op"] == "kernel").collect();
    assert_eq!(kernels.len(), 600, "one kernel record per launch");
    for k in &kernels {
        let want = sim_kernel_ns(dims(&k["grid"]), dims(&k["block"]));
        assert_eq!(k["dur_ns"].as_u64().unwrap(), want, "{k}");
        // Joined: the probed cuLaunchKernel of that thread, which holds
        // CUPTI's record of the call.
        let l = &k["launch"];
        let call_ts = l["call_ts_ns"].as_u64().expect("joined to its call");
        assert_eq!(l["call_api"], "cuLaunchKernel");
        // (Two threads' calls can start in the same nanosecond: the call
        // is the one of that time on that thread.)
        let call = launches
            .iter()
            .find(|c| c["ts_ns"].as_u64() == Some(call_ts) && c["tid"] == l["tid"])
            .expect("the call it names is in the trace, on its thread");
        assert_eq!(call["args"]["kernel"], k["name"], "{k}");
        assert!(w_tids_contains(&events, l["tid"].as_u64().unwrap()));
        // Queued 2 µs after the call at least (the simulator's rule).
        let start = k["ts_ns"].as_u64().unwrap();
        assert!(start >= l["api_ts_ns"].as_u64().unwrap() + 2_000, "{k}");
    }
    let copies = gpu.iter().filter(|g| g["op"] != "kernel").count();
    assert!(copies >= 8, "copies and memsets have GPU records: {copies}");
    // The summary says the same.
    let p = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gpu"].is_object())
        .expect("a process with GPU time");
    let total: u64 = p["gpu"]["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 600);
    assert_eq!(p["gpu"]["unjoined"], 0);
    assert_eq!(p["gpu"]["lost"]["ring"], 0);
    // Unloaded at the end: nothing of the agent is left in the process
    // (the process has exited here; its last maps were checked by the
    // detach test).
    assert!(f.stderr_text().contains("GPU time from its CUPTI"));
}

fn w_tids_contains(events: &[Value], tid: u64) -> bool {
    events
        .iter()
        .any(|e| e["tid"].as_u64() == Some(tid) && e.get("api").is_some())
}

#[test]
fn every_timeline_format_carries_the_gpu_records_and_stats_reads_them_back() {
    let mut summaries = Vec::new();
    for ext in ["jsonl", "json", "pftrace", "jsonl.zst"] {
        let out = scratch(&format!("gpu_fmt_{}", ext.replace('.', "_"))).join(format!("t.{ext}"));
        let mut w = Workload::start(&[
            "--map-cupti",
            "--threads",
            "1",
            "--launches",
            "90",
            "--wait-stdin-end",
        ]);
        let t = attach_gpu(&w, &out, &[]);
        w.go_and_hold(GPU_HOLD);
        assert!(w.finish().0.success());
        let f = t.finish(Duration::from_secs(60));
        assert!(f.status.success(), "{}", f.stderr_text());
        let s = run_gputrace(&["stats", "--format", "json", out.to_str().unwrap()]);
        assert!(s.status.success(), "{ext}: {}", s.stderr_text());
        let v: Value = serde_json::from_str(&s.stdout).unwrap();
        let p = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["gpu"].is_object())
            .unwrap_or_else(|| panic!("{ext}: no GPU time read back"))
            .clone();
        let counts: Vec<(String, u64)> = p["gpu"]["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["name"].as_str().unwrap().to_string(),
                    k["count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 90, "{ext}");
        summaries.push((ext, counts, p["gpu"]["kernels"][0]["total_ns"].clone()));
    }
    for (ext, counts, total) in &summaries[1..] {
        assert_eq!(counts, &summaries[0].1, "{ext}");
        assert_eq!(total, &summaries[0].2, "{ext}");
    }
}

/// 4,000 launches 1 ms apart (4 s) with `flag`, traced with
/// `--gpu-time-share 25` into `out`: the workload's pid and lines after
/// its ready lines, and gputrace's end (both checked successful).
fn sampled_run(out: &Path, flag: &str) -> (u32, Vec<String>, Finished) {
    let mut w = Workload::start(&[
        "--map-cupti",
        flag,
        "--threads",
        "1",
        "--launches",
        "4000",
        "--pace-us",
        "1000",
        "--wait-stdin-end",
    ]);
    let t = attach_gpu(&w, out, &["--gpu-time-share", "25"]);
    let pid = w.pid;
    w.go_and_hold(GPU_HOLD);
    let (status, lines) = w.finish_lines();
    assert!(status.success(), "{lines:?}");
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    // The process ended first: its agent went with it, nothing waits.
    assert!(
        !f.stderr_text().contains("waits for the process"),
        "{}",
        f.stderr_text()
    );
    (pid, lines, f)
}

#[test]
fn gpu_time_share_collects_in_windows_and_says_so() {
    // 4,000 launches 1 ms apart (4 s); CUPTI on 25% of each second, and
    // finalized between windows.
    let out = scratch("gpu_share").join("t.jsonl");
    let (_, lines, _) = sampled_run(&out, "--cupti-report");
    // CUPTI was let go between windows (at a driver API exit, as CUPTI
    // asks) and had again for the next: every subscribe but the one of a
    // window still open at the process's exit was finalized.
    let report = lines
        .iter()
        .find(|l| l.starts_with("cupti "))
        .expect("cupti report");
    let field = |k: &str| -> u64 {
        report
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {report}"))
    };
    assert!(field("subscribes") >= 3, "{report}");
    assert!(field("finalizes") + 1 >= field("subscribes"), "{report}");
    assert_eq!(field("finalize_site"), 3, "at an API exit: {report}");
    let (events, summary) = read_jsonl(&out);
    assert_eq!(
        of_api(&events, "cuLaunchKernel").len(),
        4000,
        "the probes see every launch"
    );
    let gpu = gpu_records(&events);
    let kernels: Vec<&&Value> = gpu.iter().filter(|g| g["op"] == "kernel").collect();
    // Windows after the first pauses collect too: kernels in 3 seconds
    // or more of the run.
    let seconds: std::collections::BTreeSet<u64> = kernels
        .iter()
        .map(|k| k["ts_ns"].as_u64().unwrap() / 1_000_000_000)
        .collect();
    assert!(seconds.len() >= 3, "kernels only in seconds {seconds:?}");
    // About a quarter (the windows' places are random; the launches take
    // a little over 4 s): far from none and from all.
    assert!(
        (200..=2400).contains(&kernels.len()),
        "{} kernel records of 4,000 launches",
        kernels.len()
    );
    // The API callbacks come back with the kinds: every record is joined.
    for k in &kernels {
        assert!(k["launch"]["call_ts_ns"].as_u64().is_some(), "{k}");
    }
    // Said in the timeline and the summary.
    let sampled: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "gpu_agent" && e["state"] == "sampled")
        .collect();
    assert!(!sampled.is_empty());
    assert!(sampled.iter().all(|e| e["percent"] == 25));
    let p = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gpu"].is_object())
        .expect("a process with GPU time");
    assert_eq!(p["gpu"]["sampled"]["percent"], 25);
    let on = p["gpu"]["sampled"]["on_ns"].as_u64().unwrap();
    // The agent ran some 4.6 s: about 1.15 s collected.
    assert!((500_000_000..3_000_000_000).contains(&on), "on {on} ns");
    let s = run_gputrace(&["stats", out.to_str().unwrap()]);
    assert!(s.status.success(), "{}", s.stderr_text());
    assert!(
        s.stdout.contains("GPU time sampled (--gpu-time-share 25)"),
        "{}",
        s.stdout
    );
}

#[test]
fn twenty_attaches_and_detaches_leave_the_target_running_and_unloaded() {
    let mut w = Workload::start(&[
        "--map-cupti",
        "--threads",
        "1",
        "--launches",
        "20",
        "--loop",
        "--cupti-report",
    ]);
    w.go();
    for i in 0..20 {
        let out = scratch("gpu_cycles").join(format!("t{i}.jsonl"));
        let pid = w.pid.to_string();
        let f = run_gputrace(&[
            "--pid",
            &pid,
            "--gpu-time",
            "--duration",
            "400ms",
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(f.status.success(), "cycle {i}: {}", f.stderr_text());
        let text = f.stderr_text();
        assert!(
            text.contains("GPU time from its CUPTI"),
            "cycle {i}: {text}"
        );
        assert!(
            !text.contains("waits for the process's next CUDA call"),
            "cycle {i}: {text}"
        );
        let (events, _) = read_jsonl(&out);
        assert!(!gpu_records(&events).is_empty(), "cycle {i}: GPU records");
        assert!(!maps_agent(w.pid), "cycle {i}: the agent was unloaded");
    }
    // SIGTERM ends the loop; the workload reports CUPTI's state.
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
    let (status, lines) = w.finish_lines();
    assert!(status.success(), "{lines:?}");
    let report = lines
        .iter()
        .find(|l| l.starts_with("cupti "))
        .expect("cupti report");
    assert!(report.contains("subscribes=20"), "{report}");
    assert!(report.contains("finalizes=20"), "{report}");
    assert!(report.contains("subscribed=0"), "{report}");
}

#[test]
fn killed_gputrace_leaves_the_target_running_and_the_agent_detaches_itself() {
    let out = scratch("gpu_kill").join("t.jsonl");
    let mut w = Workload::start(&[
        "--map-cupti",
        "--threads",
        "1",
        "--launches",
        "20",
        "--duration-ms",
        "3000",
        "--cupti-report",
    ]);
    let t = attach_gpu(&w, &out, &[]);
    w.go();
    std::thread::sleep(Duration::from_millis(500));
    t.signal(libc::SIGKILL);
    let f = t.finish(Duration::from_secs(10));
    assert!(!f.status.success());
    let (status, lines) = w.finish_lines();
    assert!(status.success(), "the target ran on: {lines:?}");
    let report = lines
        .iter()
        .find(|l| l.starts_with("cupti "))
        .expect("cupti report");
    // The agent saw its pipe close, let go of CUPTI at the next API exit.
    assert!(report.contains("finalizes=1"), "{report}");
    assert!(report.contains("subscribed=0"), "{report}");
}

#[test]
fn a_target_blocked_in_a_system_call_is_attached() {
    // The workload waits in read() on its stdin until `go`.
    let out = scratch("gpu_blocked").join("t.jsonl");
    let mut w = Workload::start(&[
        "--map-cupti",
        "--threads",
        "1",
        "--launches",
        "30",
        "--wait-stdin-end",
    ]);
    let t = attach_gpu(&w, &out, &[]);
    std::thread::sleep(Duration::from_millis(300));
    w.go_and_hold(GPU_HOLD);
    assert!(w.finish().0.success(), "its read() restarted and got `go`");
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    assert_eq!(gpu_records(&events).len(), 30);
}

#[test]
fn a_target_that_forks_keeps_the_agent_out_of_its_child() {
    let out = scratch("gpu_fork").join("t.jsonl");
    let mut w = Workload::start(&[
        "--map-cupti",
        "--threads",
        "1",
        "--launches",
        "10",
        "--fork-child",
        "--wait-stdin-end",
    ]);
    let t = attach_gpu(&w, &out, &[]);
    w.go_and_hold(GPU_HOLD);
    let (status, lines) = w.finish_lines();
    assert!(status.success(), "{lines:?}");
    assert!(
        lines.iter().any(|l| l == "fork child_status=0"),
        "{lines:?}"
    );
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    let pids: std::collections::BTreeSet<u64> = gpu_records(&events)
        .iter()
        .map(|g| g["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "only the traced process's work");
}

#[test]
fn cupti_taken_by_another_tool_is_said_and_the_target_left_alone() {
    let out = scratch("gpu_taken").join("t.jsonl");
    let mut w = Workload::start(&["--subscribe-cupti", "--threads", "1", "--launches", "20"]);
    let mut t = Tracer::attach_to(&w, &out, &["--gpu-time"]);
    let line = t.stderr.wait_for(
        &format!("gputrace: process {}: no GPU time", w.pid),
        Duration::from_secs(30),
    );
    assert!(line.contains("already in use"), "{line}");
    assert!(!maps_agent(w.pid), "the agent was unloaded again");
    w.go();
    assert!(w.finish().0.success());
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    assert_eq!(
        of_api(&events, "cuLaunchKernel").len(),
        20,
        "calls are still traced"
    );
    assert!(gpu_records(&events).is_empty());
}

#[test]
fn cupti_taken_between_sampled_windows_stops_gpu_time_and_says_so() {
    // A tool subscribes to CUPTI mid-run (as torch.profiler would): it gets
    // it while the agent has let go between two windows, and the next
    // window cannot have it back.
    let out = scratch("gpu_share_taken").join("t.jsonl");
    let (pid, lines, f) = sampled_run(&out, "--take-cupti");
    assert!(
        lines.iter().any(|l| l.starts_with("own cupti subscribed")),
        "{lines:?}"
    );
    let said = format!("gputrace: process {pid}: GPU time stopped: ");
    let text = f.stderr_text();
    let line = text
        .lines()
        .find(|l| l.starts_with(&said))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("cuptiSubscribe") && line.contains("(39)"),
        "{line}"
    );
    let (events, summary) = read_jsonl(&out);
    // The summary says it (JSON and text, `stats` of the timeline too).
    let p = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .expect("the process in the summary");
    let why = p["gpu"]["stopped"].as_str().unwrap_or_default();
    assert!(why.contains("cuptiSubscribe"), "{}", p["gpu"]);
    let s = run_gputrace(&["stats", out.to_str().unwrap()]);
    assert!(s.status.success(), "{}", s.stderr_text());
    assert!(s.stdout.contains("GPU time stopped: "), "{}", s.stdout);
    let stopped: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "gpu_agent" && e["state"] == "stopped")
        .collect();
    assert_eq!(stopped.len(), 1, "one `stopped` entry");
    // Nothing recorded after it; the calls are all still traced.
    let at = stopped[0]["ts_ns"].as_u64().unwrap();
    assert!(gpu_records(&events)
        .iter()
        .all(|g| g["launch"]["api_ts_ns"].as_u64().is_none_or(|t| t < at)));
    assert_eq!(of_api(&events, "cuLaunchKernel").len(), 4000);
}

#[test]
fn no_cupti_to_be_found_is_said() {
    // The nofuncname copy of the simulator has no libcupti beside its runtime.
    let out = scratch("gpu_none").join("t.jsonl");
    let bin = sim_dir().join("nofuncname/gputrace-workload");
    let mut w = Workload::start_bin(&bin, &["--threads", "1", "--launches", "5"]);
    let mut t = Tracer::attach_to(&w, &out, &["--gpu-time"]);
    let line = t.stderr.wait_for(
        &format!("gputrace: process {}: no GPU time", w.pid),
        Duration::from_secs(30),
    );
    assert!(line.contains("no libcupti"), "{line}");
    w.go();
    assert!(w.finish().0.success());
    assert!(t.finish(Duration::from_secs(60)).status.success());
}

#[test]
fn without_cap_sys_ptrace_gpu_time_is_refused_in_one_line() {
    let mut w = Workload::start(&["--map-cupti", "--threads", "1", "--launches", "5"]);
    let pid = w.pid.to_string();
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace"])
        .arg(gputrace_bin())
        .args(["--pid", &pid, "--gpu-time", "--duration", "1s"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_SYS_PTRACE"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!maps_agent(w.pid));
    w.go();
    assert!(w.finish().0.success());
}
