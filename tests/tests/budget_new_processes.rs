//! Root test: new processes under the daemon's `--overhead-budget` get
//! slices of their own while the shared busy probes are off, so a short
//! busy process has its launches estimated, never a missing series.

#![allow(clippy::print_stderr)] // the test says what it measured

use gputrace_tests::*;

/// Short busy processes under the daemon's default budget, started while
/// a busy one holds the shared probes off for most of each period (a 2%
/// share: 250 ms on in 12.5 s). Each is traced for slices of its own from
/// its first call (`budget::sampler::welcome`), so each gets a series,
/// sampled, and its launches are estimated from those slices over the
/// part of the period it lived: one launching at once, one that waits
/// 1.5 s after its setup first. Without the slices, such a process,
/// living in the off part, made no launch gputrace saw: no series.
#[test]
fn short_busy_processes_are_estimated_from_slices_of_their_own() {
    use gputrace_tests::node::*;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    const LAUNCHES: u64 = 600_000;
    let d = Daemon::start(&["--overhead-budget", "1", "--verbose"], &[]);
    // The budget tests' pass, 2 ms in each synchronisation, for two
    // minutes: its capture checks (single-stepped) make it costly enough
    // for the smallest share.
    let mut args = gputrace_tests::budget::PASS.to_vec();
    args.extend(["--sync-us", "2000", "--duration-ms", "120000"]);
    let mut busy = Workload::start(&args);
    busy.go();
    let pid = busy.pid.to_string();
    d.wait_metrics(Duration::from_secs(60), |m| {
        sample(
            m,
            "gputrace_sampling_ratio",
            &[("pid", &pid), ("family", "launch")],
        )
        .is_some_and(|r| r < 0.1)
    });
    let launches = LAUNCHES.to_string();
    for wait_ms in [0u64, 1500] {
        // About 3 µs of work per launch: 1.8 s of launches.
        let mut w = Workload::start(&["--launches", &launches, "--spin-ns", "3000"]);
        std::thread::sleep(Duration::from_millis(wait_ms));
        w.go();
        let wpid = w.pid;
        let (status, _) = w.finish();
        assert!(status.success());
        let end_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Settled once its estimates run past its end (a period: 13 s).
        let p = wpid.to_string();
        let m = d.wait_metrics(Duration::from_secs(45), |m| {
            sample(
                m,
                "gputrace_sampling_estimated_until_seconds",
                &[("pid", &p)],
            )
            .is_some_and(|t| t >= end_s)
        });
        let got = api_calls(&m, wpid, "cuLaunchKernel");
        let ratio = sample(
            &m,
            "gputrace_sampling_ratio",
            &[("pid", &p), ("family", "launch")],
        );
        eprintln!(
            "short process waiting {wait_ms} ms: {got:?} launches estimated of {LAUNCHES}, sampling ratio {ratio:?}"
        );
        let got = got.unwrap_or_else(|| panic!("no cuLaunchKernel series for pid {wpid}"));
        assert!(ratio.is_some_and(|r| r > 0.0 && r < 0.5), "{ratio:?}");
        let err = got / LAUNCHES as f64 - 1.0;
        assert!(
            err.abs() < 0.4,
            "estimated {got} of {LAUNCHES} ({:+.1}%)",
            err * 100.0
        );
    }
    drop(busy);
    d.tracer.signal(libc::SIGTERM);
    let Daemon { tracer, .. } = d;
    let f = tracer.finish(Duration::from_secs(30));
    let stderr = f.stderr_text();
    // Slices of their own: one a second of each process's life at least.
    let slices: Option<u64> = stderr.lines().find_map(|l| {
        let t = l.split("slices of their own: ").nth(1)?;
        t.split(' ').next()?.parse().ok()
    });
    assert!(slices.is_some_and(|n| n >= 4), "{slices:?}: {stderr}");
}
