//! Issue 14: a panic while tracing (forced with the tests' fault switch
//! `GPUTRACE_FAULT_PANIC_AFTER=N`, a sink that panics at the Nth call) is
//! one line and exit 1, every output still ends with what was recorded
//! (the N-1 calls before it), and a command gputrace started is not left
//! running untraced.

use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

fn run_with_fault(out: &std::path::Path, summary: &std::path::Path) -> (Finished, u32) {
    let wl = workload_bin();
    let f = Tracer::spawn_with_env(
        &[
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "json",
            "--summary-file",
            summary.to_str().unwrap(),
            "--",
            wl.to_str().unwrap(),
            "--loop",
            "--launches",
            "10",
        ],
        &[("GPUTRACE_FAULT_PANIC_AFTER", "50")],
    )
    .finish(Duration::from_secs(60));
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    let errors: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| !l.starts_with("gputrace: attached"))
        .collect();
    assert_eq!(errors.len(), 1, "{:?}", f.stderr);
    assert!(
        errors[0].starts_with("gputrace: internal error: fault injected at call 50")
            && errors[0].contains(" at tracer/src/"),
        "{errors:?}"
    );
    let pid: u32 = f
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ready pid="))
        .expect("the workload's ready line")
        .parse()
        .unwrap();
    // Ended with gputrace, and reaped by it.
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the command runs on untraced after gputrace's panic"
    );
    (f, pid)
}

#[test]
fn a_panic_while_tracing_still_ends_the_jsonl_and_the_summary() {
    let dir = scratch("panic-jsonl");
    let (out, summary) = (dir.join("t.jsonl"), dir.join("s.json"));
    let (_, pid) = run_with_fault(&out, &summary);
    let (events, last) = read_jsonl(&out);
    assert_eq!(events.len(), 49);
    assert!(events.iter().all(|e| e["pid"] == pid));
    assert_eq!(last["events"], 49);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["events"], 49);
}

#[test]
fn a_panic_while_tracing_still_ends_the_chrome_trace() {
    let dir = scratch("panic-chrome");
    let (out, summary) = (dir.join("t.json"), dir.join("s.json"));
    run_with_fault(&out, &summary);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap())
        .expect("the Chrome trace is whole JSON");
    let slices = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" || e["ph"] == "i")
        .count();
    assert_eq!(slices, 49);
    assert_eq!(v["gputraceSummary"]["events"], 49);
}

/// The daemon too: a panic ends the rotated timeline being written with
/// the calls before it and its summary line, in one line and exit 1.
#[test]
fn a_panic_in_the_daemon_still_ends_its_timeline() {
    let dir = scratch("panic-daemon");
    let out = dir.join("timelines");
    let d = gputrace_tests::node::Daemon::start(
        &["--output-dir", out.to_str().unwrap()],
        &[("GPUTRACE_FAULT_PANIC_AFTER", "50")],
    );
    let mut w = Workload::start(&["--launches", "200"]);
    d.wait_probed(&sim_dir());
    w.go();
    let _ = w.finish();
    let gputrace_tests::node::Daemon { tracer, .. } = d;
    let f = tracer.finish(Duration::from_secs(60));
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    let errors: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| l.contains("internal error"))
        .collect();
    assert_eq!(errors.len(), 1, "{:?}", f.stderr);
    assert!(
        errors[0].starts_with("gputrace: internal error: fault injected at call 50"),
        "{errors:?}"
    );
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let (events, last) = read_jsonl(&files[0]);
    assert_eq!(calls_in(&events), 49);
    assert_eq!(last["events"], 49);
}
