//! `gputrace stats`: golden summaries for a fixed input, hand-checked
//! figures, and the reader on truncated and corrupted input.

use std::path::PathBuf;

use gputrace::outputs::timeline::TimelineFile;
use gputrace::read::read_timeline;
use gputrace::summary::render::render_json;
use gputrace::summary::render::render_text;
use proptest::prelude::*;
use serde_json::Value;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn input() -> Vec<u8> {
    std::fs::read(golden("input.jsonl")).unwrap()
}

/// Compares with the golden file; `UPDATE_GOLDEN=1` rewrites it.
fn check_golden(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(got, want, "{name} differs from the golden file");
}

#[test]
fn golden_text_and_json_summaries() {
    let s = read_timeline(&input()[..]).unwrap();
    assert_eq!(s.problems.count, 0);
    assert!(s.complete);
    check_golden("summary.txt", &render_text(&s.summary));
    check_golden(
        "summary.json",
        &(serde_json::to_string_pretty(&render_json(&s.summary)).unwrap() + "\n"),
    );
}

/// The figures of the golden input, worked out by hand from make_input.py.
#[test]
fn summary_arithmetic_by_hand() {
    let s = read_timeline(&input()[..]).unwrap();
    let j = render_json(&s.summary);
    assert_eq!(j["events"], 25);
    assert_eq!(j["lost"], 3);
    let a = &j["processes"][0];
    assert_eq!(
        (a["pid"].as_u64(), a["comm"].as_str()),
        (Some(100), Some("trainer"))
    );
    let api = |p: &Value, n: &str| {
        p["apis"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .unwrap()
            .clone()
    };
    // cuLaunchKernel in A: 1, 2, 3, 4, 5, 6 and 2 µs.
    let l = api(a, "cuLaunchKernel");
    assert_eq!(
        (
            l["calls"].as_u64(),
            l["total_ns"].as_u64(),
            l["min_ns"].as_u64(),
            l["max_ns"].as_u64()
        ),
        (Some(7), Some(23000), Some(1000), Some(6000))
    );
    assert!((l["avg_ns"].as_f64().unwrap() - 23000.0 / 7.0).abs() < 1e-6);
    // Sample standard deviation of those seven values.
    let v = [1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 2000.0f64];
    let mean = v.iter().sum::<f64>() / 7.0;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 6.0).sqrt();
    assert!((l["stddev_ns"].as_f64().unwrap() - sd).abs() < 1e-6);
    let med = l["med_ns"].as_u64().unwrap();
    assert_eq!(med, 3000, "exact for few calls");
    // The failed allocation is counted as a call, failed, and allocates nothing.
    let alloc = api(a, "cuMemAlloc_v2");
    assert_eq!(
        (alloc["calls"].as_u64(), alloc["failed"].as_u64()),
        (Some(3), Some(1))
    );
    let m = &a["memory"];
    assert_eq!(
        (m["allocations"].as_u64(), m["allocated_bytes"].as_u64()),
        (Some(3), Some(1048576 + 2097152 + 4096))
    );
    assert_eq!(
        (
            m["live_bytes"].as_u64(),
            m["peak_bytes"].as_u64(),
            m["frees"].as_u64()
        ),
        (Some(2097152), Some(3145728), Some(1))
    );
    // Time shares: the 500 µs wait dominates A.
    let sync = api(a, "cuStreamSynchronize");
    let total_a: f64 = a["apis"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["total_ns"].as_f64())
        .sum();
    assert!((sync["time_pct"].as_f64().unwrap() - 500000.0 * 100.0 / total_a).abs() < 1e-9);
    // Kernels: names, shares, most common configuration; the unknown one is null.
    let k = a["kernels"].as_array().unwrap();
    assert_eq!(k[0]["name"], "relu(float*, int)");
    assert_eq!(
        (k[0]["launches"].as_u64(), k[1]["launches"].as_u64()),
        (Some(3), Some(3))
    );
    assert!((k[0]["share_pct"].as_f64().unwrap() - 37.5).abs() < 1e-9);
    assert!(k.iter().any(|r| r["name"].is_null() && r["launches"] == 1));
    let gemm = k
        .iter()
        .find(|r| r["name"].as_str().is_some_and(|n| n.contains("gemm")))
        .unwrap();
    assert_eq!(
        (gemm["grid"].clone(), gemm["block"].clone()),
        (
            serde_json::json!([32, 4, 2]),
            serde_json::json!([128, 2, 1])
        )
    );
    // Copies by direction.
    let copies = a["copies"].as_array().unwrap();
    let dir = |d: &str| copies.iter().find(|r| r["direction"] == d).unwrap().clone();
    assert_eq!(
        (dir("HtoD")["count"].as_u64(), dir("HtoD")["bytes"].as_u64()),
        (Some(1), Some(4096))
    );
    assert_eq!(
        (
            dir("DtoH")["count"].as_u64(),
            dir("DtoH")["bytes"].as_u64(),
            dir("DtoH")["host_ns"].as_u64()
        ),
        (Some(2), Some(4096), Some(16000))
    );
    assert_eq!(dir("DtoH")["avg_bytes"].as_f64(), Some(2048.0));
    assert_eq!(dir("memset")["bytes"].as_u64(), Some(1024));
    // NCCL on one communicator: ranks from its init.
    let b = &j["processes"][1];
    let nccl = b["nccl"].as_array().unwrap();
    let ar = nccl.iter().find(|r| r["op"] == "AllReduce").unwrap();
    assert_eq!(
        (
            ar["count"].as_u64(),
            ar["bytes"].as_u64(),
            ar["nranks"].as_i64(),
            ar["rank"].as_i64(),
            ar["host_ns"].as_u64()
        ),
        (Some(3), Some(12582912), Some(4), Some(2), Some(6000))
    );
    // The args-only launch counts as a call with no time.
    let bl = api(b, "cuLaunchKernel");
    assert_eq!(
        (bl["calls"].as_u64(), bl["total_ns"].as_u64()),
        (Some(2), Some(500))
    );
    // Totals over both processes.
    let t = &j["total"];
    assert_eq!(api(t, "cuLaunchKernel")["calls"], 9);
    assert_eq!(t["memory"]["peak_bytes"], 3145728);
}

#[test]
fn chrome_trace_gives_the_same_summary() {
    // Write the golden input as a Chrome trace the way gputrace does, read it back.
    let s = read_timeline(&input()[..]).unwrap();
    let dir = std::env::temp_dir().join(format!("gputrace-chrome-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let mut w =
        gputrace::outputs::timeline::Timeline::create(&path, 1_700_000_000_000_000_000 - 1_000_000)
            .unwrap();
    for line in std::str::from_utf8(&input()).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v.get("type").is_some() {
            continue;
        }
        let call = gputrace::schema::parse::parse_call(&v).unwrap();
        w.write(&call, None).unwrap();
    }
    w.finish(Some(&render_json(&s.summary))).unwrap();
    let back = read_timeline(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(back.problems.count, 0, "{:?}", back.problems.first);
    assert_eq!(render_text(&back.summary), render_text(&s.summary));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn truncated_file_is_summarised_up_to_the_cut() {
    let data = input();
    let text = std::str::from_utf8(&data).unwrap();
    // Cut in the middle of line 10.
    let cut = text.lines().take(9).map(|l| l.len() + 1).sum::<usize>() + 40;
    let s = read_timeline(&data[..cut]).unwrap();
    assert_eq!(s.summary.events(), 9);
    // Its last line ends mid-way: the file was cut there (gputrace killed,
    // a full disk), said so, not counted unreadable.
    assert_eq!(s.problems.count, 0, "{:?}", s.problems.first);
    assert_eq!(
        s.cut.as_deref(),
        Some("its last line, 10, ends mid-way"),
        "{:?}",
        s.cut
    );
    assert!(!s.complete);
}

#[test]
fn corrupted_lines_are_reported_with_their_numbers() {
    let mut text = String::from_utf8(input()).unwrap();
    text = text.replacen("\"pid\":100", "\"pid\":\"x\"", 1);
    text.insert_str(0, "not json at all\n");
    let s = read_timeline(text.as_bytes()).unwrap();
    assert_eq!(s.problems.count, 2);
    assert_eq!(
        s.problems.first[0],
        (
            1,
            "invalid JSON (expected ident at line 1 column 2)".to_string()
        )
    );
    assert_eq!(
        s.problems.first[1],
        (
            2,
            "field `pid` is missing or has the wrong type".to_string()
        )
    );
    assert_eq!(s.summary.events(), 24);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any prefix of a valid file: no panic, and every complete line before
    /// the cut is counted.
    #[test]
    fn any_prefix_reads(cut in 0usize..4000) {
        let data = input();
        let cut = cut.min(data.len());
        let s = read_timeline(&data[..cut]).unwrap();
        let whole_lines = data[..cut].iter().filter(|b| **b == b'\n').count() as u64;
        prop_assert!(s.summary.events() + s.problems.count <= whole_lines + 1);
        prop_assert!(s.summary.events() >= whole_lines.min(25).saturating_sub(1));
    }

    /// Random bytes overwritten anywhere: no panic, line numbers in range.
    #[test]
    fn corrupted_bytes_never_panic(edits in proptest::collection::vec((0usize..6000, any::<u8>()), 1..20)) {
        let mut data = input();
        for (at, b) in edits {
            let n = data.len();
            data[at % n] = b;
        }
        let lines = data.split(|b| *b == b'\n').count() as u64;
        let s = read_timeline(&data[..]).unwrap();
        for (line, _) in &s.problems.first {
            prop_assert!(*line >= 1 && *line <= lines);
        }
        prop_assert!(s.summary.events() <= 25);
    }

    /// Arbitrary input, valid or not.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = read_timeline(&data[..]).unwrap();
    }
}

/// Two ranks' collectives and a stall, as JSONL and as a Chrome trace:
/// `stats` matches the collectives again and keeps the stall.
#[test]
fn cross_rank_analysis_from_jsonl_and_chrome() {
    let call = |ts: u64, pid: u32, rank: u32, seq: u64| {
        format!(
            r#"{{"ts_ns":{ts},"dur_ns":1000,"pid":{pid},"tid":{pid},"comm":"py","api":"ncclAllReduce","ret":0,"args":{{"op":"AllReduce","count":1,"datatype":"float32","bytes":4,"redop":"sum","root":null,"peer":null,"comm":"0x10","stream":"0x0","comm_id":"0xab","rank":{rank},"nranks":2,"cuda_dev":null,"seq":{seq},"seq_from":"counter"}}}}"#
        )
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let ms = 1_000_000;
    let mut lines = Vec::new();
    for seq in 0..4 {
        let t = t0 + seq * 100 * ms;
        lines.push(call(t, 7, 0, seq));
        // Rank 1 is 30 ms late on collective 2.
        lines.push(call(t + if seq == 2 { 30 * ms } else { ms }, 8, 1, seq));
    }
    lines.push(call(t0 + 400 * ms, 7, 0, 4));
    let stall = format!(
        r#"{{"type":"nccl_stall","kind":"collective","comm_id":"0xab","nranks":2,"op":"AllReduce","seq":4,"waiting":[{{"rank":0,"pid":7}}],"missing":[{{"rank":1,"pid":8}}],"host":"h","first_ts_ns":{},"waited_ns":2000000000}}"#,
        t0 + 400 * ms
    );
    lines.push(stall.clone());
    let jsonl = lines.join("\n") + "\n";
    let s = read_timeline(jsonl.as_bytes()).unwrap();
    assert_eq!(s.problems.count, 0, "{:?}", s.problems.first);
    let j = render_json(&s.summary);
    let r1 = j["nccl_ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 1)
        .unwrap();
    assert_eq!(
        (&r1["pid"], &r1["collectives"]),
        (&Value::from(8), &Value::from(4))
    );
    assert_eq!(r1["times_last"], 4);
    assert_eq!(r1["delay_ns_total"], 3 * ms + 30 * ms);
    assert_eq!(j["nccl_comms"][0]["collectives_complete"], 4);
    assert_eq!(j["nccl_comms"][0]["collectives_incomplete"], 1);
    assert_eq!(j["nccl_stalls"][0]["seq"], 4);
    let text = render_text(&s.summary);
    assert!(
        text.contains("== NCCL communicator 0xab (2 ranks, 2 traced) =="),
        "{text}"
    );
    assert!(
        text.contains("rank 1 (pid 8 on h) has not entered it"),
        "{text}"
    );

    let dir = std::env::temp_dir().join(format!("gputrace-chrome-nccl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let mut w = gputrace::outputs::timeline::Timeline::create(&path, t0 - ms).unwrap();
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap();
        if v.get("type").is_some() {
            w.record(&gputrace::model::record::Record::from_object(
                "nccl_stall",
                "first_ts_ns",
                v,
            ))
            .unwrap();
        } else {
            w.write(&gputrace::schema::parse::parse_call(&v).unwrap(), None)
                .unwrap();
        }
    }
    w.finish(Some(&j)).unwrap();
    let back = read_timeline(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(back.problems.count, 0, "{:?}", back.problems.first);
    assert_eq!(render_text(&back.summary), text);
    let _ = std::fs::remove_dir_all(&dir);
}
