//! `--stacks` end to end: gputrace starts a program with known call chains
//! into the simulated libraries (a C program built without frame pointers,
//! and Python calling through ctypes from known lines), and every output
//! must carry the exact frames: the JSONL stack records and `stack_id`s,
//! the Chrome trace's args, the summary's "Top call sites" (live and from
//! `gputrace stats`), and `stats --folded`. `--stacks-every` samples
//! launches only. The programs are `tests/sim/stackapp.c` and
//! `tests/sim/stack_ctypes.py` (tests/sim/README.md).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

const APP: &str = "gputrace-stackapp";

/// Kills a process the test started, should the test fail first.
struct Reap(u32);

impl Drop for Reap {
    fn drop(&mut self) {
        // SAFETY: a signal to the test's own child (reaped only by the test).
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// Runs `gputrace ARGS -- CMD` to the end; it must succeed.
fn trace(args: &[&str], cmd: &[&str]) -> Finished {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--");
    all.extend_from_slice(cmd);
    let done = Tracer::spawn(&all).finish(Duration::from_secs(120));
    assert!(
        done.status.success(),
        "gputrace failed: {}",
        done.stderr_text()
    );
    done
}

/// The stacks of a JSONL file by id, and each event's frames (`None`
/// without a stack). Every `stack_id` must name a record written before it.
fn stacks_of(events: &[Value]) -> Vec<(Value, Option<Vec<String>>)> {
    let mut by_id: HashMap<u64, Vec<String>> = HashMap::new();
    let mut out = Vec::new();
    for e in events {
        if e["type"] == "stack" {
            let frames = e["frames"]
                .as_array()
                .expect("frames")
                .iter()
                .map(|f| f.as_str().expect("a frame string").to_string())
                .collect();
            let id = e["id"].as_u64().expect("an id");
            assert!(
                by_id.insert(id, frames).is_none(),
                "stack {id} written twice"
            );
            continue;
        }
        let frames = e.get("stack_id").map(|id| {
            by_id
                .get(&id.as_u64().expect("a numeric stack_id"))
                .unwrap_or_else(|| panic!("stack_id {id} before its record"))
                .clone()
        });
        out.push((e.clone(), frames));
    }
    out
}

fn frames_of_api(calls: &[(Value, Option<Vec<String>>)], api: &str) -> Vec<Option<Vec<String>>> {
    calls
        .iter()
        .filter(|(e, _)| e["api"] == api)
        .map(|(_, f)| f.clone())
        .collect()
}

/// `gputrace stats FILE ARGS`: its stdout; it must succeed.
fn stats(file: &Path, args: &[&str]) -> String {
    let out = Command::new(gputrace_bin())
        .arg("stats")
        .arg(file)
        .args(args)
        .output()
        .expect("run gputrace stats");
    assert!(
        out.status.success(),
        "stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn stacks_of_a_c_program_without_frame_pointers_in_every_output() {
    let dir = scratch("stacks-native");
    let app = sim_dir().join(APP);
    let out = dir.join("t.jsonl");
    let done = trace(
        &[
            "--stacks",
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "text",
        ],
        &[app.to_str().unwrap(), "4", "--linger", "300"],
    );
    let (events, summary) = read_jsonl(&out);
    let calls = stacks_of(&events);
    let f = |s: &str| format!("{s} ({APP})");
    // Every call of the chain has its stack (nothing sampled by default).
    let syncs = frames_of_api(&calls, "cuStreamSynchronize");
    assert_eq!(syncs.len(), 4);
    for s in &syncs {
        let s = s.as_ref().expect("a sync without a stack");
        assert_eq!(
            s[..4],
            [
                "cuStreamSynchronize (libcuda.so.1)".to_string(),
                f("app_sync"),
                f("app_step"),
                f("main")
            ],
            "{s:#?}"
        );
        assert_eq!(s.last(), Some(&f("_start")), "{s:#?}");
    }
    let launches = frames_of_api(&calls, "cuLaunchKernel");
    assert_eq!(launches.len(), 8);
    let direct = launches
        .iter()
        .filter(|s| s.as_ref().expect("a launch without a stack")[1] == f("app_launch"))
        .count();
    // The runtime's launches: inside cudaLaunchKernel, across the return
    // address its uretprobe replaced.
    let nested: Vec<&Vec<String>> = launches
        .iter()
        .flatten()
        .filter(|s| s[1].ends_with("(libcudart.so.13)"))
        .collect();
    assert_eq!((direct, nested.len()), (4, 4), "{launches:#?}");
    let at = nested[0].iter().position(|x| *x == f("app_runtime"));
    assert!(
        at.is_some_and(|i| nested[0][i + 1..i + 3] == [f("app_step"), f("main")]),
        "{:#?}",
        nested[0]
    );
    // Each distinct stack is written once, before its first call.
    let records = events.iter().filter(|e| e["type"] == "stack").count();
    let distinct: std::collections::HashSet<&Value> =
        events.iter().filter_map(|e| e.get("stack_id")).collect();
    assert_eq!(records, distinct.len());

    // The summary: live (stdout) and from the file, text and JSON.
    for text in [done.stdout.clone(), stats(&out, &[])] {
        let at = text
            .find("Top call sites")
            .unwrap_or_else(|| panic!("no call sites in {text}"));
        let section = &text[at..];
        let sync = section
            .lines()
            .position(|l| l.ends_with(" cuStreamSynchronize"))
            .unwrap_or_else(|| panic!("{section}"));
        let site = section.lines().nth(sync + 1).unwrap();
        assert!(
            site.trim_start().starts_with("4 ") && site.ends_with(&f("app_sync")),
            "{section}"
        );
    }
    let json: Value = serde_json::from_str(&stats(&out, &["--format", "json"])).unwrap();
    for s in [&json, &summary] {
        let sites = &s["total"]["call_sites"];
        assert_eq!(
            sites["cuStreamSynchronize"][0]["site"],
            f("app_sync"),
            "{sites}"
        );
        assert_eq!(sites["cuStreamSynchronize"][0]["calls"], 4, "{sites}");
        assert!(sites["cuStreamSynchronize"][0]["host_ns"].as_u64().unwrap() > 0);
        let launch: Vec<&str> = sites["cuLaunchKernel"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["site"].as_str().unwrap())
            .collect();
        assert!(
            launch.contains(&f("app_launch").as_str())
                && launch.contains(&f("app_runtime").as_str()),
            "{sites}"
        );
    }

    // Folded stacks: outermost first, weighted by host time.
    let folded = stats(&out, &["--folded"]);
    let chain = format!(
        "{};{};{};cuStreamSynchronize (libcuda.so.1) ",
        f("main"),
        f("app_step"),
        f("app_sync")
    );
    let line = folded
        .lines()
        .find(|l| l.contains(&chain))
        .unwrap_or_else(|| panic!("no {chain} in {folded}"));
    assert!(line.starts_with(&f("_start")), "{line}");
    let weight: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let sync_ns: u64 = of_api(&events, "cuStreamSynchronize")
        .iter()
        .map(|e| e["dur_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(weight, sync_ns, "{folded}");

    // The Chrome trace carries each call's frames in its args, and reads
    // back into the same call sites.
    let chrome = dir.join("t.json");
    trace(
        &[
            "--stacks",
            "--output",
            chrome.to_str().unwrap(),
            "--summary",
            "none",
        ],
        &[app.to_str().unwrap(), "2", "--linger", "300"],
    );
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let sync = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "cuStreamSynchronize")
        .expect("a sync slice");
    assert_eq!(sync["args"]["stack"][1], f("app_sync"), "{sync}");
    let json: Value = serde_json::from_str(&stats(&chrome, &["--format", "json"])).unwrap();
    assert_eq!(
        json["total"]["call_sites"]["cuStreamSynchronize"][0]["site"],
        f("app_sync")
    );
    assert!(stats(&chrome, &["--folded"]).contains(&chain));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The line of `source` marked `# line: NAME`.
fn line_of(source: &str, name: &str) -> usize {
    let tag = format!("# line: {name}");
    source
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .unwrap_or_else(|| panic!("no `{tag}` in the script"))
        + 1
}

/// A CPython 3.10-3.13 here (the CI machine has the system's 3.11; pyenv
/// versions are used where there is no system one).
fn python() -> Option<(String, u32)> {
    let mut candidates = vec!["/usr/bin/python3".to_string()];
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    if let Ok(dir) = std::fs::read_dir(Path::new(&home).join(".pyenv/versions")) {
        let mut v: Vec<String> = dir
            .flatten()
            .map(|e| e.path().join("bin/python3").display().to_string())
            .collect();
        v.sort();
        candidates.extend(v);
    }
    candidates.into_iter().find_map(|p| {
        let out = Command::new(&p)
            .args([
                "-c",
                "import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else 0)",
            ])
            .output()
            .ok()?;
        let minor: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        (10..=13).contains(&minor).then_some((p, minor))
    })
}

#[test]
fn stacks_of_python_calling_through_ctypes_name_the_lines() {
    let (python, minor) = python().expect("no CPython 3.10-3.13 on this machine");
    let dir = scratch("stacks-python");
    let sim = sim_dir();
    let script = sim.join("stack_ctypes.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let path = script.display().to_string();
    let at = |func: &str, mark: &str| format!("{func} ({path}:{})", line_of(&source, mark));
    let step = if minor >= 11 { "Trainer.step" } else { "step" };
    let out = dir.join("t.jsonl");
    // Attached by PID, as to a running training job: it waits at "ready".
    let mut app = Command::new(&python)
        .args([
            &path,
            sim.to_str().unwrap(),
            "3",
            "--wait",
            "--linger",
            "300",
        ])
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the Python program");
    let reap = Reap(app.id());
    let mut lines = Lines::new(app.stdout.take().unwrap());
    lines.wait_for("ready", Duration::from_secs(30));
    let pid = app.id().to_string();
    let tracer = Tracer::attach(&[
        "--stacks",
        "--pid",
        &pid,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "text",
    ]);
    let mut stdin = app.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    lines.wait_for("done", Duration::from_secs(30));
    drop(stdin); // its last wait ends; it lingers, then exits
    assert!(app.wait().unwrap().success());
    std::mem::forget(reap); // reaped: its PID is no longer its own
    let done = tracer.finish(Duration::from_secs(60));
    assert!(done.status.success(), "{}", done.stderr_text());
    let (events, _) = read_jsonl(&out);
    let calls = stacks_of(&events);
    for (api, leaf, step_mark) in [
        (
            "cuLaunchKernel",
            at("launch_kernel", "launch"),
            "step-launch",
        ),
        (
            "cuStreamSynchronize",
            at("synchronize", "sync"),
            "step-sync",
        ),
    ] {
        let stacks = frames_of_api(&calls, api);
        assert_eq!(stacks.len(), 3, "{python} {api}");
        for s in &stacks {
            let s = s
                .as_ref()
                .unwrap_or_else(|| panic!("{python}: {api} without a stack"));
            assert_eq!(s[0], format!("{api} (libcuda.so.1)"), "{s:#?}");
            let py: Vec<&String> = s.iter().filter(|f| f.contains(".py:")).collect();
            assert_eq!(
                py,
                [
                    &leaf,
                    &at(step, step_mark),
                    &at("main", "main-step"),
                    &at("<module>", "module")
                ],
                "{python} {api}: {s:#?}"
            );
            assert!(!s.contains(&"[...]".to_string()), "{s:#?}");
        }
    }
    // The call sites name the lines, live and read back.
    for text in [done.stdout.clone(), stats(&out, &[])] {
        let section = &text[text.find("Top call sites").expect("call sites")..];
        for (api, leaf) in [
            ("cuStreamSynchronize", at("synchronize", "sync")),
            ("cuLaunchKernel", at("launch_kernel", "launch")),
        ] {
            let i = section
                .lines()
                .position(|l| l.ends_with(&format!(" {api}")))
                .unwrap_or_else(|| panic!("{api} in {section}"));
            let site = section.lines().nth(i + 1).unwrap();
            assert!(
                site.trim_start().starts_with("3 ") && site.ends_with(&leaf),
                "{section}"
            );
        }
    }
    let folded = stats(&out, &["--folded"]);
    let chain = format!(
        "{};{};{}",
        at("main", "main-step"),
        at(step, "step-sync"),
        at("synchronize", "sync")
    );
    assert!(folded.contains(&chain), "{chain} not in {folded}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program that exits right after its calls (no `--linger`): its stacks
/// are read from the ring buffer after it is gone, and resolve all the
/// same, with its functions named (before: 0 of 5 resolved, or raw
/// addresses only, in about half the runs). Several runs: it was a race.
#[test]
fn stacks_of_a_program_that_exits_right_after_its_calls_resolve() {
    let dir = scratch("stacks-short-lived");
    let app = sim_dir().join(APP);
    let f = |s: &str| format!("{s} ({APP})");
    for run in 0..6 {
        let out = dir.join(format!("t{run}.jsonl"));
        let done = trace(
            &[
                "--stacks",
                "--output",
                out.to_str().unwrap(),
                "--summary",
                "none",
            ],
            &[app.to_str().unwrap(), "5"],
        );
        let (events, _) = read_jsonl(&out);
        let calls = stacks_of(&events);
        let syncs = frames_of_api(&calls, "cuStreamSynchronize");
        assert_eq!(syncs.len(), 5, "run {run}");
        for s in &syncs {
            let s = s.as_ref().unwrap_or_else(|| {
                panic!("run {run}: a sync without a stack: {}", done.stderr_text())
            });
            assert_eq!(
                s[..4],
                [
                    "cuStreamSynchronize (libcuda.so.1)".to_string(),
                    f("app_sync"),
                    f("app_step"),
                    f("main")
                ],
                "run {run}: {s:#?}"
            );
            assert_eq!(s.last(), Some(&f("_start")), "run {run}: {s:#?}");
        }
        let launches = frames_of_api(&calls, "cuLaunchKernel");
        assert_eq!(launches.len(), 10, "run {run}");
        assert!(
            launches.iter().all(|s| s
                .as_ref()
                .is_some_and(|s| s.iter().any(|x| *x == f("app_step")))),
            "run {run}: {launches:#?}"
        );
        assert!(
            done.stderr_text()
                .contains("of processes gone before they could be read: 0;"),
            "run {run}: {}",
            done.stderr_text()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stacks_every_samples_launches_and_keeps_every_sync() {
    let dir = scratch("stacks-every");
    let app = sim_dir().join(APP);
    let out = dir.join("t.jsonl");
    trace(
        &[
            "--stacks",
            "--stacks-every",
            "4",
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "none",
        ],
        &[app.to_str().unwrap(), "40", "--linger", "300"],
    );
    let (events, _) = read_jsonl(&out);
    let calls = stacks_of(&events);
    let syncs = frames_of_api(&calls, "cuStreamSynchronize");
    assert_eq!(syncs.len(), 40);
    assert!(
        syncs.iter().all(Option::is_some),
        "every sync has its stack"
    );
    let launches = frames_of_api(&calls, "cuLaunchKernel");
    assert_eq!(launches.len(), 80);
    let with = launches.iter().filter(|s| s.is_some()).count();
    // One in 4 per CPU: at most a quarter plus one per CPU the thread ran on.
    let cpus = std::thread::available_parallelism().map_or(64, |n| n.get());
    assert!(
        with >= 1 && with <= 20 + cpus && with < 80,
        "{with} of 80 launches with a stack"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stacks_options_are_checked() {
    for (args, what) in [
        (&["--stacks-every", "2", "--pid", "1"][..], "--stacks"),
        (&["--stacks", "--stacks-every", "0", "--pid", "1"][..], "0"),
        (
            &["--stacks", "--stack-bytes", "100", "--pid", "1"][..],
            "--stack-bytes",
        ),
        (
            &["--stacks", "--stack-bytes", "1048576", "--pid", "1"][..],
            "--stack-bytes",
        ),
    ] {
        let done = run_gputrace(args);
        assert_eq!(
            done.status.code(),
            Some(2),
            "{args:?}: {}",
            done.stderr_text()
        );
        let text = done.stderr_text();
        assert!(text.contains(what), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{text}");
    }
    // A timeline without stacks has nothing to fold.
    let dir = scratch("stacks-nofold");
    let out = dir.join("t.jsonl");
    let app = sim_dir().join(APP);
    trace(
        &["--output", out.to_str().unwrap(), "--summary", "none"],
        &[app.to_str().unwrap(), "1"],
    );
    let o = Command::new(gputrace_bin())
        .args(["stats", out.to_str().unwrap(), "--folded"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--stacks") && err.lines().count() == 1,
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
