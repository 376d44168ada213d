//! `gputrace stats` on the binary timelines: the golden input written as
//! `.jsonl.zst` and `.pftrace` the way gputrace writes them gives the same
//! summary as the `.jsonl`; damaged files are summarised up to the damage
//! and reported with a position; nothing panics.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use gputrace::model::call::Call;
use gputrace::model::record::Record;
use gputrace::outputs::timeline::Timeline;
use gputrace::outputs::timeline::TimelineFile;
use gputrace::read::read_timeline;
use gputrace::summary::render::render_json;
use gputrace::summary::render::render_text;
use proptest::prelude::*;
use serde_json::Value;

fn input() -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/input.jsonl"))
        .unwrap()
}

fn golden_calls() -> Vec<Call> {
    std::str::from_utf8(&input())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("type").is_none())
        .map(|v| gputrace::schema::parse::parse_call(&v).unwrap())
        .collect()
}

/// The golden input written in `ext` through the same Timeline the trace
/// command uses; returns the file's bytes.
fn write_as(ext: &str) -> Vec<u8> {
    write_with_records(ext, &[])
}

/// The same, with `records` written before the call of each one's index.
fn write_with_records(ext: &str, records: &[(usize, Record)]) -> Vec<u8> {
    let s = read_timeline(&input()[..]).unwrap();
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gputrace-fmt-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("t.{ext}"));
    let mut w = Timeline::create(&path, 1_700_000_000_000_000_000 - 1_000_000).unwrap();
    for (i, c) in golden_calls().iter().enumerate() {
        for (_, r) in records.iter().filter(|(at, _)| *at == i) {
            w.record(r).unwrap();
        }
        w.write(c, Some(4096)).unwrap();
    }
    w.finish(Some(&render_json(&s.summary))).unwrap();
    let data = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    data
}

#[test]
fn every_format_gives_the_jsonl_summary() {
    let want = read_timeline(&input()[..]).unwrap();
    for ext in ["jsonl.zst", "pftrace", "perfetto-trace"] {
        let data = write_as(ext);
        let back = read_timeline(&data[..]).unwrap();
        assert_eq!(back.problems.count, 0, "{ext}: {:?}", back.problems.first);
        assert!(back.complete, "{ext}");
        assert_eq!(
            render_text(&back.summary),
            render_text(&want.summary),
            "{ext}"
        );
        assert_eq!(
            render_json(&back.summary),
            render_json(&want.summary),
            "{ext}"
        );
    }
}

/// Entries that are not calls (sampling windows, later graph records...)
/// go through every format and are skipped by the reader, which counts
/// them: the summary stays the calls'.
#[test]
fn every_format_carries_records_and_reads_past_them() {
    let want = read_timeline(&input()[..]).unwrap();
    let calls = golden_calls();
    let mut fields = serde_json::Map::new();
    fields.insert("family".into(), Value::from("launch"));
    fields.insert("ratio".into(), Value::from(0.25));
    fields.insert(
        "stages".into(),
        serde_json::json!(["entry_only", "sampled"]),
    );
    let window = Record {
        kind: "sampling",
        ts_ns: calls[0].ts_ns,
        dur_ns: Some(1_000_000),
        pid: Some(calls[0].pid),
        tid: None,
        fields: fields.clone(),
        view: None,
    };
    // One for a process no call names yet, an instant on a thread.
    let other = Record {
        kind: "marker",
        ts_ns: calls[3].ts_ns,
        dur_ns: None,
        pid: Some(999_999),
        tid: Some(5),
        fields,
        view: None,
    };
    for ext in ["jsonl", "json", "jsonl.zst", "pftrace"] {
        let data = write_with_records(ext, &[(0, window.clone()), (3, other.clone())]);
        // For checking the file with Perfetto's own protos
        // (bench/perfetto/check_trace.py).
        if let Some(dir) = std::env::var_os("GPUTRACE_TEST_KEEP") {
            std::fs::write(PathBuf::from(dir).join(format!("records.{ext}")), &data).unwrap();
        }
        let back = read_timeline(&data[..]).unwrap();
        assert_eq!(back.problems.count, 0, "{ext}: {:?}", back.problems.first);
        assert!(back.complete, "{ext}");
        assert_eq!(back.records, 2, "{ext}");
        assert_eq!(
            render_json(&back.summary),
            render_json(&want.summary),
            "{ext}"
        );
    }
}

#[test]
fn zst_is_the_jsonl_compressed() {
    let data = write_as("jsonl.zst");
    let plain = zstd::stream::decode_all(&data[..]).unwrap();
    let text = String::from_utf8(plain).unwrap();
    // The same lines as gputrace's own .jsonl of the same calls (written
    // now: the fixture's lines predate fields added since, such as
    // `captured` and the NCCL identity).
    let want = String::from_utf8(write_as("jsonl")).unwrap();
    // Event lines are identical; the summary line is gputrace's rendering.
    let events = |t: &str| {
        t.lines()
            .filter(|l| !l.contains("\"summary\""))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(events(&text), events(&want));
    assert!(text
        .lines()
        .last()
        .unwrap()
        .contains("\"type\":\"summary\""));
}

#[test]
fn cut_zst_is_summarised_up_to_the_cut() {
    let data = write_as("jsonl.zst");
    let s = read_timeline(&data[..data.len() - 20]).unwrap();
    assert!(!s.complete);
    // Cut short, not damaged: what came before the cut is read, nothing
    // is counted unreadable.
    assert_eq!(s.problems.count, 0, "{:?}", s.problems.first);
    let cut = s.cut.as_deref().expect("said cut short");
    assert!(cut.contains("zstd frame does not end"), "{cut}");
}

#[test]
fn cut_pftrace_is_reported_with_its_offset() {
    // Packets are deflated in bundles: a cut loses the bundle it falls in.
    let data = write_as("pftrace");
    let s = read_timeline(&data[..data.len() - 10]).unwrap();
    assert!(!s.complete);
    // The last packet (a bundle) ends mid-way: said cut there, with its
    // offset; what the bundle held is lost, nothing counted unreadable.
    assert_eq!(s.problems.count, 0, "{:?}", s.problems.first);
    let cut = s.cut.as_deref().expect("said cut short");
    assert!(
        cut.contains("ends mid-way") && cut.contains("at byte 0"),
        "{cut}"
    );
    assert!(s.summary.events() < 25);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn any_prefix_of_either_format_reads(cut in 0usize..100_000, zst in any::<bool>()) {
        let data = write_as(if zst { "jsonl.zst" } else { "pftrace" });
        let cut = cut % (data.len() + 1);
        let s = read_timeline(&data[..cut]).unwrap();
        prop_assert!(s.summary.events() <= 25);
        if cut < data.len() {
            prop_assert!(!s.complete || s.problems.count == 0);
        }
    }

    #[test]
    fn corrupted_bytes_never_panic(edits in proptest::collection::vec((0usize..100_000, any::<u8>()), 1..10), zst in any::<bool>()) {
        let mut data = write_as(if zst { "jsonl.zst" } else { "pftrace" });
        for (at, b) in edits {
            let n = data.len();
            data[at % n] = b;
        }
        let s = read_timeline(&data[..]).unwrap();
        prop_assert!(s.summary.events() <= 26);
    }
}

/// Every record kind that is not a call goes through every format and is
/// read back into the same summary: what a graph launch runs (from its
/// `graph` record), the stacks calls name (`--folded`), an NCCL stall.
#[test]
fn every_format_carries_graph_records_stacks_and_nccl_records() {
    use gputrace::model::graph::{ExecContents, GraphLaunch, GraphRecord, KernelNode, Node};
    use gputrace::model::stack::CallStack;
    use std::sync::Arc;

    let t0 = 1_700_000_000_000_000_000u64;
    let call = |ts: u64, api: &str, args: Value| {
        let v = serde_json::json!({
            "ts_ns": ts, "dur_ns": 1000, "pid": 7, "tid": 8, "comm": "py",
            "api": api, "ret": 0, "args": args,
        });
        gputrace::schema::parse::parse_call(&v).unwrap()
    };
    let contents = Arc::new(ExecContents {
        nodes: vec![
            Node::Kernel(KernelNode {
                function: 0x10,
                cukernel: 0,
                kernel: Some(Arc::from("k_a")),
                grid: [2, 1, 1],
                block: [32, 1, 1],
                shared_mem_bytes: 0,
            }),
            Node::Memset { bytes: 64 },
        ],
        from_memory: false,
    });
    let graph = gputrace::graphs::json::graph_record(&GraphRecord {
        ts_ns: t0,
        pid: 7,
        comm: Arc::from("py"),
        exec: 0xe0,
        contents: Some(contents.clone()),
    });
    let stack = Arc::new(CallStack {
        id: 3,
        frames: vec![
            Arc::from("step (train.py:9)"),
            Arc::from("main (train.py:20)"),
        ]
        .into(),
    });
    let stall = Record::from_object(
        "nccl_stall",
        "first_ts_ns",
        serde_json::json!({"type":"nccl_stall","kind":"collective","comm_id":"0xab","nranks":2,
            "op":"AllReduce","seq":4,"waiting":[{"rank":0,"pid":7}],"missing":[{"rank":1,"pid":8}],
            "host":"h","first_ts_ns": t0 + 5_000,"waited_ns":2_000_000_000u64}),
    );
    let mut calls = Vec::new();
    for i in 0..3u64 {
        let mut c = call(
            t0 + 1_000 + i * 1_000,
            "cuGraphLaunch",
            serde_json::json!({"graph_exec":"0xe0","stream":"0x5"}),
        );
        if let gputrace::model::call::Args::Graph(g) = &mut c.args {
            *g = GraphLaunch {
                exec: 0xe0,
                stream: 0x5,
                contents: Some(contents.clone()),
                captured: None,
            };
        }
        calls.push(c);
        let mut s = call(
            t0 + 1_500 + i * 1_000,
            "cuStreamSynchronize",
            serde_json::json!({"stream":"0x5"}),
        );
        s.stack = Some(stack.clone());
        calls.push(s);
    }
    let mut results = Vec::new();
    for ext in ["jsonl", "json", "jsonl.zst", "pftrace"] {
        let dir = std::env::temp_dir().join(format!("gputrace-rec-{}-{ext}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("t.{ext}"));
        let mut w = Timeline::create(&path, t0 - 1_000_000).unwrap();
        w.record(&graph).unwrap();
        for (i, c) in calls.iter().enumerate() {
            if i == 3 {
                w.record(&stall).unwrap();
            }
            w.write(c, None).unwrap();
        }
        w.finish(Some(&serde_json::json!({"type":"summary"})))
            .unwrap();
        let data = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let back = gputrace::read::read_timeline_with(&data[..], true).unwrap();
        assert_eq!(back.problems.count, 0, "{ext}: {:?}", back.problems.first);
        let j = render_json(&back.summary);
        let p = &back.summary.processes[&7];
        assert_eq!(
            (p.graphs.launches, p.graphs.kernels, p.graphs.opaque),
            (3, 3, 0),
            "{ext}: each launch runs the graph its record says"
        );
        assert_eq!(j["nccl_stalls"].as_array().map(Vec::len), Some(1), "{ext}");
        let folded = back.folded.expect("asked for").lines();
        assert!(
            folded
                .iter()
                .any(|l| l.contains("main (train.py:20);step (train.py:9)")),
            "{ext}: {folded:?}"
        );
        results.push((ext, j));
    }
    for (ext, j) in &results[1..] {
        assert_eq!(j, &results[0].1, "{ext} against jsonl");
    }
}
