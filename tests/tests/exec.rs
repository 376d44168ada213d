//! Root tests: a traced process that runs a new program (`execve`) keeps
//! its PID, but what it runs is another program: an `exec` record says so
//! in the timeline (and a line in `--print` and the summary), and the calls
//! after it carry the new program's name.

use std::path::Path;

use serde_json::Value;

use gputrace_tests::*;

/// The workload makes 3 launches, then execs itself under another name
/// (a link `wl-second` to it), which makes 5.
fn trace_exec(name: &str, ext: &str) -> (Finished, std::path::PathBuf) {
    let dir = scratch(name);
    let second = dir.join("wl-second");
    std::os::unix::fs::symlink(workload_bin(), &second).unwrap();
    let out = dir.join(format!("t.{ext}"));
    let bin = workload_bin();
    let f = run_gputrace(&[
        "--output",
        out.to_str().unwrap(),
        "--print",
        "--summary",
        "text",
        "--",
        bin.to_str().unwrap(),
        "--launches",
        "3",
        "--exec-then",
        second.to_str().unwrap(),
        "--launches",
        "5",
    ]);
    assert!(f.status.success(), "{}", f.stderr_text());
    (f, out)
}

fn stats_json(path: &Path) -> Value {
    let f = run_gputrace(&["stats", "--format", "json", path.to_str().unwrap()]);
    assert!(f.status.success(), "{}", f.stderr_text());
    serde_json::from_str(f.stdout.trim()).unwrap()
}

#[test]
fn calls_after_an_exec_carry_the_new_programs_name() {
    let (f, out) = trace_exec("exec-jsonl", "jsonl");
    let (events, _) = read_jsonl(&out);
    // In order: the first program's launches, the exec, the second's.
    let seq: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["api"] == "cuLaunchKernel" || e["type"] == "exec")
        .map(|e| {
            let what = if e["type"] == "exec" {
                "exec"
            } else {
                "launch"
            };
            (
                what.to_string(),
                e["comm"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let first = "gputrace-worklo"; // the kernel's 15 characters
    let mut want = vec![("launch".to_string(), first.to_string()); 3];
    want.push(("exec".into(), "wl-second".into()));
    want.extend(vec![("launch".to_string(), "wl-second".to_string()); 5]);
    assert_eq!(seq, want, "{}", f.stderr_text());
    let exec = events.iter().find(|e| e["type"] == "exec").unwrap();
    assert_eq!(exec["old_comm"], first);
    let pids: std::collections::BTreeSet<u64> =
        events.iter().filter_map(|e| e["pid"].as_u64()).collect();
    assert_eq!(pids.len(), 1, "one process: {pids:?}");
    // Every call after the exec is the new program's, setup included.
    let at = events.iter().position(|e| e["type"] == "exec").unwrap();
    assert!(events[at + 1..]
        .iter()
        .filter(|e| e.get("type").is_none())
        .all(|e| e["comm"] == "wl-second"));

    // --print: a line at the exec, the lines after with the new name.
    let printed: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.contains("] cuLaunchKernel ") || l.contains("exec: runs"))
        .collect();
    assert_eq!(printed.len(), 9, "{}", f.stdout);
    assert!(
        printed[3].ends_with(&format!(
            "{first}[{}] exec: runs wl-second from here",
            exec["pid"]
        )),
        "{}",
        printed[3]
    );
    assert!(
        printed[4..].iter().all(|l| l.contains(" wl-second[")),
        "{printed:?}"
    );
    // The summary says it, and so does stats from the file.
    assert!(
        f.stdout
            .contains("(exec): wl-second; the calls after are its"),
        "{}",
        f.stdout
    );
    let v = stats_json(&out);
    assert_eq!(v["processes"][0]["execs"][0]["comm"], "wl-second", "{v}");
    assert_eq!(v["processes"][0]["execs"][0]["ts_ns"], exec["ts_ns"]);
}

/// Every format carries the record, and `stats` reads it back from each.
#[test]
fn every_format_carries_the_exec() {
    for ext in ["jsonl.zst", "json", "pftrace"] {
        let (_, out) = trace_exec(&format!("exec-{}", ext.replace('.', "-")), ext);
        let v = stats_json(&out);
        let p = &v["processes"][0];
        assert_eq!(p["execs"][0]["comm"], "wl-second", ".{ext}: {v}");
        assert_eq!(p["execs"].as_array().unwrap().len(), 1, ".{ext}");
    }
}

/// The daemon's series follow the exec: the old program's calls under its
/// name, the new program's under the new name (issue 26 item 6).
#[test]
fn the_daemons_series_take_the_new_programs_name() {
    use gputrace_tests::node::*;
    use std::time::Duration;
    let dir = scratch("exec-daemon");
    let second = dir.join("wl-renamed");
    std::os::unix::fs::symlink(workload_bin(), &second).unwrap();
    // Started before the daemon: a daemon attaches at its start to the
    // processes already there (one started after is found by a later scan
    // of /proc, which may come after its calls).
    let mut w = Workload::start(&[
        "--launches",
        "3",
        "--exec-then",
        second.to_str().unwrap(),
        "--launches",
        "5",
    ]);
    let d = Daemon::start(&[], &[]);
    let pid = w.pid.to_string();
    w.go();
    let launches = |m: &str, comm: &str| {
        sample(
            m,
            "gputrace_api_calls_total",
            &[("pid", &pid), ("api", "cuLaunchKernel"), ("comm", comm)],
        )
    };
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        launches(m, "wl-renamed") == Some(5.0)
    });
    assert_eq!(launches(&m, "gputrace-worklo"), Some(3.0), "{m}");
    let _ = w.finish();
}
