//! `daemon --probes FAMILY:counts`: the busy calls of a family counted in
//! the kernel (per process and API: calls and a latency histogram, no record
//! of each) give the same metrics, exactly, as calls recorded one by one;
//! the family's other calls keep their records.

use std::time::Duration;

use gputrace_tests::node::*;
use gputrace_tests::*;

fn timed(m: &str, pid: u32, api: &str) -> Option<f64> {
    sample(
        m,
        "gputrace_api_duration_seconds_count",
        &[("api", api), ("pid", &pid.to_string())],
    )
}

#[test]
fn counted_calls_are_exact_in_the_metrics() {
    // Where the kernel has uprobe sessions (Linux 6.13+), one program runs
    // at each call's entry, and at the return of one call in 16 (the
    // default), timed; the others have no return probe.
    counted_exactly(&[], &[], 16);
}

#[test]
fn counted_calls_are_all_timed_when_asked() {
    counted_exactly(&[], &["--counts-time-every", "1"], 1);
}

#[test]
fn counted_calls_are_exact_without_uprobe_sessions() {
    // One perf event per probe: no sessions, each call's start kept in
    // task storage from its entry to its return, so every call is timed.
    counted_exactly(&[("GPUTRACE_ATTACH", "perf")], &[], 1);
}

/// The counted calls' series, with one in `every` timed.
fn counted_exactly(env: &[(&str, &str)], flags: &[&str], every: u32) {
    // Started first: the daemon attaches to it at its start.
    let mut w = Workload::start(&[
        "--threads",
        "2",
        "--launches",
        "3000",
        "--launch-ex",
        "7",
        "--syncs",
        "40",
        "--capture-checks",
        "25",
        "--copies",
        "2",
    ]);
    let mut args = vec![
        "--probes",
        "launch:counts,memory,memcpy,sync:counts,names,graphs:counts",
    ];
    args.extend_from_slice(flags);
    let d = Daemon::start(&args, env);
    w.go();
    let pid = w.pid;
    let (status, _) = w.finish();
    assert!(status.success());
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        api_calls(m, pid, "cuModuleUnload").is_some()
            && api_calls(m, pid, "cuLaunchKernel").is_some_and(|n| n >= 6000.0)
    });
    // Counted in the kernel: every call, and those timed in the histogram.
    for (api, n) in [
        ("cuLaunchKernel", 6000.0),
        ("cuLaunchKernelEx", 14.0),
        ("cuEventRecord", 80.0),
        ("cuStreamWaitEvent", 80.0),
        ("cuStreamIsCapturing", 50.0),
        ("cuStreamGetCaptureInfo_v3", 50.0),
    ] {
        assert_eq!(api_calls(&m, pid, api), Some(n), "{api}:\n{m}");
        let t = timed(&m, pid, api).unwrap_or(0.0);
        if every == 1 {
            assert_eq!(t, n, "{api}: every call timed:\n{m}");
        } else {
            assert!(t <= n, "{api}: {t} timed of {n}");
        }
        let inf = sample(
            &m,
            "gputrace_api_duration_seconds_bucket",
            &[("api", api), ("pid", &pid.to_string()), ("le", "+Inf")],
        );
        assert_eq!(inf.unwrap_or(0.0), t, "{api}");
        let sum = sample(
            &m,
            "gputrace_api_duration_seconds_sum",
            &[("api", api), ("pid", &pid.to_string())],
        )
        .unwrap_or(0.0);
        // Real times: a return timed from no start would add the clock
        // since boot.
        assert!(
            t == 0.0 || (sum > 0.0 && sum / t < 0.1),
            "{api}: {sum} s over {t}"
        );
    }
    if every > 1 {
        // One launch in 16 at random: 375 expected of 6,000 (a standard
        // deviation of 19).
        let t = timed(&m, pid, "cuLaunchKernel").unwrap_or(0.0);
        assert!((250.0..=500.0).contains(&t), "{t} launches timed of 6,000");
    }
    // Recorded one by one: the synchronisations of the same family, and
    // copies with their bytes.
    assert_eq!(api_calls(&m, pid, "cuEventSynchronize"), Some(80.0));
    assert_eq!(api_calls(&m, pid, "cuCtxSynchronize"), Some(80.0));
    assert_eq!(api_calls(&m, pid, "cuMemcpyHtoD_v2"), Some(4.0));
    assert_eq!(
        sample(
            &m,
            "gputrace_events_lost_total",
            &[("reason", "counts_full")]
        ),
        Some(0.0)
    );
    // They were counted in the kernel, not recorded one by one (other
    // tests' workloads may add to the count, never take from it).
    let Daemon { tracer, .. } = d;
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let text = f.stderr_text();
    let counted: u64 = text
        .split(" of them counted in the kernel")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of calls counted in the kernel: {text}"));
    assert!(counted >= 6000 + 14 + 80 + 80 + 50 + 50, "{text}");
}

#[test]
fn a_process_seen_only_by_its_counted_calls_is_said_gone() {
    // Only launches are probed, and counted: a process that runs and exits
    // between two reads of the counts is known by them alone. It is said
    // gone after the grace, so its series go after --keep-exited (and its
    // entries leave the map), never kept for ever.
    let mut a = Workload::start(&["--loop", "--launches", "10", "--sync-us", "2000"]);
    a.go();
    let d = Daemon::start(&["--probes", "launch:counts", "--keep-exited", "1s"], &[]);
    let mut b = Workload::start(&["--launches", "1000"]);
    b.go();
    let pid = b.pid;
    let (status, _) = b.finish();
    assert!(status.success());
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        api_calls(m, pid, "cuLaunchKernel").is_some()
    });
    assert_eq!(api_calls(&m, pid, "cuLaunchKernel"), Some(1000.0), "{m}");
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        api_calls(m, pid, "cuLaunchKernel").is_none()
    });
    assert!(!m.contains(&format!("pid=\"{pid}\"")), "{m}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(a.pid as i32, libc::SIGTERM) };
    let _ = a.finish();
}
