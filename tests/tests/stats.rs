//! `gputrace stats FILE`: the same summary the live run printed, from the
//! file it wrote; unreadable files said so, with the line.

use gputrace_tests::*;

fn stats(args: &[&str]) -> Finished {
    let mut a = vec!["stats"];
    a.extend_from_slice(args);
    run_gputrace(&a)
}

/// CUDA graphs: the kernels of graph replays (and the captured launches
/// not counted) read back the same from each format that carries them
/// (a Perfetto launch lists its graph's nodes in its arguments).
#[test]
fn stats_of_graph_replays_equals_the_live_summary() {
    for ext in ["jsonl", "jsonl.zst", "pftrace"] {
        let r = trace_run_to(
            &format!("stats-graphs-{ext}"),
            &format!("t.{ext}"),
            &workload_bin(),
            &["--launches", "4", "--graph-replays", "3", "--graph-update"],
            &["--summary", "text"],
        );
        let (out, live) = (r.out, r.gputrace);
        assert!(
            live.stdout.contains("graph launches ran"),
            "{}",
            live.stdout
        );
        let f = stats(&[out.to_str().unwrap()]);
        assert!(f.status.success(), "{}", f.stderr_text());
        assert_eq!(
            f.stdout, live.stdout,
            "stats of the .{ext} file differs from the live summary"
        );
    }
}

#[test]
fn stats_of_a_trace_equals_the_live_summary() {
    for ext in ["jsonl", "json", "jsonl.zst", "pftrace"] {
        let args = [
            "--launches",
            "30",
            "--launch-ex",
            "3",
            "--copies",
            "2",
            "--allocs",
            "2",
            "--syncs",
            "2",
        ];
        let args = [&args[..], &["--nccl", "2", "--fail", "1", "--threads", "2"]].concat();
        let r = trace_run_to(
            &format!("stats-live-{ext}"),
            &format!("t.{ext}"),
            &workload_bin(),
            &args,
            &["--summary", "text"],
        );
        let (out, live) = (r.out, r.gputrace);
        let f = stats(&[out.to_str().unwrap()]);
        assert!(f.status.success(), "{}", f.stderr_text());
        assert_eq!(
            f.stdout, live.stdout,
            "stats of the .{ext} file differs from the live summary"
        );
        let j = stats(&[out.to_str().unwrap(), "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(j.stdout.trim()).unwrap();
        assert_eq!(v["lost"], 0);
        assert!(v["events"].as_u64().unwrap() > 100);
    }
}

#[test]
fn truncated_and_corrupted_files() {
    let dir = scratch("stats-bad");
    let good = [
        r#"{"ts_ns":1,"dur_ns":10,"pid":5,"tid":5,"comm":"p","api":"cuStreamSynchronize","ret":0,"args":{"stream":"0x1"}}"#,
        r#"{"ts_ns":2,"dur_ns":20,"pid":5,"tid":5,"comm":"p","api":"cuStreamSynchronize","ret":0,"args":{"stream":"0x1"}}"#,
    ];
    // Cut inside its last line (gputrace killed as it wrote): what comes
    // before is summarised, the cut said, exit 0.
    let cut = format!("{}\n{}\n{}", good[0], good[1], &good[0][..50]);
    let path = dir.join("cut.jsonl");
    std::fs::write(&path, cut).unwrap();
    let f = stats(&[path.to_str().unwrap()]);
    assert_eq!(f.status.code(), Some(0), "{}", f.stderr_text());
    assert!(
        f.stdout.contains("2 calls"),
        "the readable lines are summarised: {}",
        f.stdout
    );
    let err = f.stderr_text();
    assert!(
        err.contains("cut.jsonl was cut short (its last line, 3, ends mid-way"),
        "{err}"
    );
    // A line cut short in the middle of the file is unreadable.
    let cut = format!("{}\n{}\n{}\n", good[0], &good[0][..50], good[1]);
    let path = dir.join("cut-inside.jsonl");
    std::fs::write(&path, cut).unwrap();
    let f = stats(&[path.to_str().unwrap()]);
    assert_eq!(f.status.code(), Some(1));
    assert!(f.stdout.contains("2 calls"), "{}", f.stdout);
    let err = f.stderr_text();
    assert!(
        err.contains("cut-inside.jsonl has 1 unreadable line(s), first at line 2: truncated JSON"),
        "{err}"
    );

    let path = dir.join("garbage.jsonl");
    std::fs::write(
        &path,
        format!("{}\n\u{0}\u{1}binary\n{}\n", good[0], good[1]),
    )
    .unwrap();
    let f = stats(&[path.to_str().unwrap()]);
    assert_eq!(f.status.code(), Some(1));
    assert!(
        f.stderr_text().contains("first at line 2: invalid JSON"),
        "{}",
        f.stderr_text()
    );

    let f = stats(&["/nonexistent/file.jsonl"]);
    assert_eq!(f.status.code(), Some(1));
    assert!(f
        .stderr_text()
        .contains("cannot open /nonexistent/file.jsonl"));
    let f = stats(&[dir.to_str().unwrap()]);
    assert_eq!(f.status.code(), Some(1));
    assert!(
        f.stderr_text().contains("is a directory"),
        "{}",
        f.stderr_text()
    );
}

/// A crafted file with terminal escapes (`ESC ]0;title BEL`, a C1 CSI) and
/// bidirectional controls in its command and kernel names: `stats` prints
/// none of them, in the text summary or the JSON one (there as `\uXXXX`
/// escapes: the same strings), nor in its messages.
#[test]
fn names_in_a_crafted_file_do_not_reach_the_terminal() {
    let dir = scratch("stats-hostile");
    let comm = "p\u{1b}]0;owned\u{7}\u{202e}gpj.exe";
    let kernel = "k\u{1b}[2J\u{9b}31m\u{2066}x\u{200f}";
    let launch = serde_json::json!({
        "ts_ns": 1, "dur_ns": 10, "pid": 5, "tid": 5, "comm": comm,
        "api": "cuLaunchKernel", "ret": 0,
        "args": {"function": "0x10", "kernel": kernel, "grid": [1, 1, 1],
                 "block": [32, 1, 1], "shared_mem_bytes": 0, "stream": "0x1"}
    });
    let path = dir.join("hostile\u{202e}.jsonl");
    std::fs::write(&path, format!("{launch}\n{{\"ph\u{1b}[31m\n")).unwrap();
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    let text = stats(&[path.to_str().unwrap()]);
    let json = stats(&[path.to_str().unwrap(), "--format", "json"]);
    for f in [&text, &json] {
        assert_eq!(
            f.status.code(),
            Some(1),
            "the bad line: {}",
            f.stderr_text()
        );
        assert!(!f.stdout.contains(unsafe_char), "{:?}", f.stdout);
        assert!(!f.stderr_text().contains(unsafe_char), "{:?}", f.stderr);
    }
    assert!(
        text.stdout.contains("1 calls") || text.stdout.contains("1 call"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("p?]0;owned??gpj.exe"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("k?[2J?31m?x?"), "{}", text.stdout);
    let v: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(v["processes"][0]["comm"], comm, "{}", json.stdout);
    assert_eq!(v["total"]["kernels"][0]["name"], kernel, "{}", json.stdout);
}
