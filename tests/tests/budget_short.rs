//! Issue 26 item 3: under the daemon's default budget, a busy process
//! shorter than the budget's warm-up (a test, a warm-up, an inference
//! burst) is counted exactly, or estimated within the budget's stated
//! error: never a missing series, never a multiple of what ran.

#![allow(clippy::print_stderr)] // tests say what they measured

use std::time::{Duration, Instant};

use gputrace_tests::node::*;
use gputrace_tests::*;

#[test]
fn short_busy_processes_get_their_launches_counted() {
    let d = Daemon::start(&["--overhead-budget", "1"], &[]);
    let mut report = Vec::new();
    for calls in [20_000u64, 100_000, 300_000] {
        let n = calls.to_string();
        let mut w = Workload::start(&["--bench", "launch", "--calls", &n]);
        let pid = w.pid.to_string();
        let t0 = Instant::now();
        w.go();
        let (status, lines) = w.finish_lines();
        assert!(status.success());
        let secs = t0.elapsed().as_secs_f64();
        assert!(
            lines.iter().any(|l| l.contains(&format!("calls={n} "))),
            "{lines:?}"
        );
        // Its last period settles within a second or two of its end.
        let m = d.wait_metrics(Duration::from_secs(20), |m| {
            sample(
                m,
                "gputrace_api_calls_total",
                &[("pid", &pid), ("api", "cuLaunchKernel")],
            )
            .is_some_and(|v| v >= calls as f64 * 0.5)
        });
        let got = sample(
            &m,
            "gputrace_api_calls_total",
            &[("pid", &pid), ("api", "cuLaunchKernel")],
        )
        .unwrap();
        let ratio = sample(
            &m,
            "gputrace_sampling_ratio",
            &[("pid", &pid), ("family", "launch")],
        );
        eprintln!(
            "{calls} launches in {secs:.1} s: exported {got}, sampling ratio {ratio:?}"
        );
        report.push((calls, got));
    }
    for (calls, got) in report {
        let err = (got - calls as f64) / calls as f64;
        assert!(err.abs() <= 0.10, "{calls} launches exported as {got}");
    }
}
