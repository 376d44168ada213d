//! Where gputrace writes, when writing fails: a reader that goes away ends
//! the trace quietly (exit 0, the timeline still finished); a full disk is
//! one line on stderr and exit 1; never a panic. And a duration too long
//! for the clock is no deadline at all, never a panic.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gputrace_tests::*;

/// gputrace with its stdout where the test says.
fn spawn(args: &[&str], stdout: Stdio) -> Child {
    let cache = std::env::temp_dir().join(format!("gputrace-test-cache-{}", std::process::id()));
    Command::new(gputrace_bin())
        .args(args)
        .env("GPUTRACE_CACHE_DIR", cache)
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gputrace")
}

/// Waits at most `timeout` for `child`; its exit code and stderr lines.
fn wait(mut child: Child, stderr: Lines, timeout: Duration) -> (Option<i32>, Vec<String>) {
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "gputrace did not exit within {timeout:?}: {:?}",
                stderr.seen
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), stderr.rest())
}

/// The processes `pid` started (its threads' children).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("children");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        out.extend(text.split_whitespace().map(|p| p.parse::<u32>().unwrap()));
    }
    out
}

/// Kills the processes a test found (should it fail before they end), so
/// a failed run leaves nothing behind.
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            if running(*pid) {
                // SAFETY: a signal to a process this test started (through gputrace).
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
        }
    }
}

/// Whether `pid` is running (a zombie is not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().as_bytes()[0]);
            !matches!(state, Some(b'Z') | Some(b'X') | None)
        }
        Err(_) => false,
    }
}

fn assert_no_panic(stderr: &[String]) {
    let text = stderr.join("\n");
    assert!(!text.contains("panicked"), "{text}");
    assert!(!text.contains("internal error"), "{text}");
    assert!(!text.contains("RUST_BACKTRACE"), "{text}");
}

/// The last line of a `.jsonl` timeline is gputrace's summary.
fn assert_complete(path: &Path) {
    let (events, summary) = read_jsonl(path);
    assert_eq!(summary["events"], calls_in(&events));
}

#[test]
fn print_into_a_closed_pipe_ends_the_trace_quietly() {
    let dir = scratch("epipe");
    let out = dir.join("p.jsonl");
    let w = workload_bin();
    let mut child = spawn(
        &[
            "--print",
            "--output",
            out.to_str().unwrap(),
            "--",
            w.to_str().unwrap(),
            "--loop",
            "--launches",
            "10",
            "--syncs",
            "1",
        ],
        Stdio::piped(),
    );
    let mut stderr = Lines::new(child.stderr.take().unwrap());
    stderr.wait_for("gputrace: attached", Duration::from_secs(60));
    let pid = child.id();
    let workload = children(pid);
    let _reap = Reap(workload.clone());
    assert_eq!(workload.len(), 1, "one command started: {workload:?}");
    // What `| head -2` does: two lines read, then the pipe closed.
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..2 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(!line.is_empty());
    }
    drop(reader);
    let (code, stderr) = wait(child, stderr, Duration::from_secs(30));
    assert_no_panic(&stderr);
    assert_eq!(code, Some(0), "{stderr:?}");
    assert_complete(&out);
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(workload[0]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(workload[0]), "the traced command was left running");
}

#[test]
fn summary_to_a_full_disk_is_one_line_and_exit_1() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let w = workload_bin();
    let mut child = spawn(
        &[
            "--summary",
            "text",
            "--",
            w.to_str().unwrap(),
            "--launches",
            "5",
        ],
        Stdio::from(full),
    );
    let stderr = Lines::new(child.stderr.take().unwrap());
    let (code, stderr) = wait(child, stderr, Duration::from_secs(60));
    assert_no_panic(&stderr);
    assert_eq!(code, Some(1), "{stderr:?}");
    let errors: Vec<&String> = stderr
        .iter()
        .filter(|l| l.starts_with("gputrace: ") && !l.starts_with("gputrace: attached"))
        .filter(|l| !l.starts_with("gputrace: every traced process"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr:?}");
    assert!(errors[0].contains("No space left on device"), "{errors:?}");
}

#[test]
fn stats_to_a_full_disk_is_one_line_and_exit_1() {
    let dir = scratch("stats-full");
    let path = dir.join("t.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"ts_ns":1,"dur_ns":10,"pid":5,"tid":5,"comm":"p","api":"cuStreamSynchronize","ret":0,"args":{"stream":"0x1"}}"#,
            "\n"
        ),
    )
    .unwrap();
    for format in ["text", "json"] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut child = spawn(
            &["stats", path.to_str().unwrap(), "--format", format],
            Stdio::from(full),
        );
        let stderr = Lines::new(child.stderr.take().unwrap());
        let (code, stderr) = wait(child, stderr, Duration::from_secs(30));
        assert_no_panic(&stderr);
        assert_eq!(code, Some(1), "{stderr:?}");
        let errors: Vec<&String> = stderr
            .iter()
            .filter(|l| l.starts_with("gputrace: ") && !l.contains("no summary line"))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr:?}");
        assert!(errors[0].contains("No space left on device"), "{errors:?}");
    }
}

/// `gputrace ARGS --output OUT -- workload --loop ...`, once attached.
fn trace_a_loop(out: &Path, args: &[&str]) -> (Child, Lines) {
    let w = workload_bin();
    let mut all = args.to_vec();
    all.extend([
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "none",
        "--",
        w.to_str().unwrap(),
        "--loop",
        "--launches",
        "10",
        "--syncs",
        "1",
    ]);
    let mut child = spawn(&all, Stdio::null());
    let mut stderr = Lines::new(child.stderr.take().unwrap());
    stderr.wait_for("gputrace: attached", Duration::from_secs(60));
    (child, stderr)
}

#[test]
fn a_duration_too_long_for_the_clock_is_no_deadline() {
    let out = scratch("huge-duration").join("p.jsonl");
    let (mut child, stderr) = trace_a_loop(&out, &["--duration", "9223372036854775807s"]);
    let workload = children(child.id());
    let _reap = Reap(workload.clone());
    assert_eq!(workload.len(), 1, "one command started: {workload:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "gputrace stopped at once: {:?}",
        stderr.seen
    );
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let (code, stderr) = wait(child, stderr, Duration::from_secs(30));
    assert_no_panic(&stderr);
    assert_eq!(code, Some(0), "{stderr:?}");
    let (events, summary) = read_jsonl(&out);
    assert!(!events.is_empty());
    assert_eq!(summary["events"], calls_in(&events));
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(workload[0]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(workload[0]), "the traced command was left running");
}

/// Scripts signal gputrace as soon as they read its `attached` line: the
/// handlers must already be there (they once were installed a few
/// milliseconds later, and such a signal killed gputrace with exit 143 and
/// no summary).
#[test]
fn a_sigterm_right_after_the_attached_line_stops_cleanly() {
    for round in 0..3 {
        let out = scratch(&format!("early-sigterm-{round}")).join("p.jsonl");
        let (child, stderr) = trace_a_loop(&out, &[]);
        let _reap = Reap(children(child.id()));
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let (code, stderr) = wait(child, stderr, Duration::from_secs(30));
        assert_no_panic(&stderr);
        assert_eq!(code, Some(0), "round {round}: {stderr:?}");
        let (events, summary) = read_jsonl(&out);
        assert_eq!(summary["events"], events.len() as u64, "round {round}");
    }
}

#[test]
fn a_panic_is_one_line_and_exit_1() {
    let mut child = spawn(&["__panic"], Stdio::null());
    let stderr = Lines::new(child.stderr.take().unwrap());
    let (code, stderr) = wait(child, stderr, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr:?}");
    assert_eq!(stderr.len(), 1, "{stderr:?}");
    assert!(
        stderr[0].starts_with("gputrace: internal error: "),
        "{stderr:?}"
    );
}

#[test]
fn the_summary_file_is_parseable_next_to_the_commands_output() {
    let dir = scratch("summary-file");
    let path = dir.join("s.json");
    let w = workload_bin();
    let f = run_gputrace(&[
        "--summary",
        "json",
        "--summary-file",
        path.to_str().unwrap(),
        "--",
        w.to_str().unwrap(),
        "--launches",
        "5",
    ]);
    assert!(f.status.success(), "{}", f.stderr_text());
    // stdout is the command's own, and nothing of gputrace's.
    assert!(f.stdout.contains("done calls="), "{}", f.stdout);
    assert!(!f.stdout.contains("\"summary\""), "{}", f.stdout);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(s["type"], "summary");
    let launches = s["total"]["apis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "cuLaunchKernel")
        .unwrap();
    assert_eq!(launches["calls"], 5);

    // Without a summary to write, the file is refused at once.
    let f = run_gputrace(&[
        "--summary",
        "none",
        "--summary-file",
        path.to_str().unwrap(),
        "--",
        w.to_str().unwrap(),
    ]);
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr_text());
    assert!(f.stderr_text().contains("--summary-file needs a summary"));
}
