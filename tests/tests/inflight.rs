//! Root tests: calls between entry and return are kept in task storage (the
//! default) or in the eBPF hash map (`GPUTRACE_INFLIGHT=map`); both record
//! every call with its duration, and neither counts calls as lost when
//! gputrace attaches to, or detaches from, threads that are calling all the
//! while (the two links of a file are attached and closed one after the
//! other: calls made in between must be neither recorded half nor counted).

use std::time::Duration;

use gputrace_tests::*;
use serde_json::{json, Value};

const MODES: [&str; 2] = ["task", "map"];

fn trace(w: &Workload, out: &std::path::Path, mode: &str, extra: &[&str]) -> Tracer {
    let pid = w.pid.to_string();
    let mut args = vec![
        "--pid",
        &pid,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "json",
    ];
    args.extend_from_slice(extra);
    let mut t = Tracer::spawn_with_env(&args, &[("GPUTRACE_INFLIGHT", mode)]);
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(60));
    t
}

#[test]
fn every_call_is_paired_in_either_store() {
    for mode in MODES {
        let out = scratch(&format!("inflight-{mode}")).join("t.jsonl");
        // Two threads; a runtime launch calls the driver's, so a thread is
        // inside two traced calls at once (when the runtime is probed).
        let mut w = Workload::start(&[
            "--threads",
            "2",
            "--launches",
            "400",
            "--runtime",
            "50",
            "--nccl",
            "20",
        ]);
        let tids = w.tids.clone();
        let t = trace(&w, &out, mode, &[]);
        w.go();
        let (status, _) = w.finish();
        assert!(status.success());
        let f = t.finish(Duration::from_secs(60));
        assert!(f.status.success(), "{mode}: {}", f.stderr_text());
        let (events, summary) = read_jsonl(&out);
        assert_eq!(
            summary["lost"],
            json!(0),
            "{mode}: {}",
            summary["lost_detail"]
        );
        let launches = of_api(&events, "cuLaunchKernel");
        for tid in &tids {
            let mine: Vec<&&Value> = launches.iter().filter(|e| e["tid"] == json!(tid)).collect();
            assert!(mine.len() >= 450, "{mode}: thread {tid}: {}", mine.len());
        }
        assert_eq!(of_api(&events, "ncclAllReduce").len(), 2 * 20, "{mode}");
        for e in &events {
            assert!(
                e["dur_ns"].is_u64(),
                "{mode}: a call without its return: {e}"
            );
            assert_eq!(e["ret"], json!(0), "{mode}: {e}");
        }
    }
}

#[test]
fn attaching_and_detaching_mid_call_loses_nothing() {
    for mode in MODES {
        let out = scratch(&format!("inflight-mid-{mode}")).join("t.jsonl");
        let mut w = Workload::start(&["--threads", "2", "--loop", "--launches", "50"]);
        w.go();
        let t = trace(&w, &out, mode, &["--duration", "1500ms"]);
        let f = t.finish(Duration::from_secs(60));
        assert!(f.status.success(), "{mode}: {}", f.stderr_text());
        let (events, summary) = read_jsonl(&out);
        assert!(events.len() > 1000, "{mode}: {} events", events.len());
        assert_eq!(
            summary["lost"],
            json!(0),
            "{mode}: {}",
            summary["lost_detail"]
        );
        assert!(
            events.iter().all(|e| e["pid"] == json!(w.pid)),
            "{mode}: only the workload's calls"
        );
    }
}
