//! Root tests of the probes' blob capture: bytes copied at a call's entry,
//! from the caller's stack (a struct passed by value) or from behind a
//! pointer argument, carried to the return probe or sent at entry.

use gputrace_tests::*;
use serde_json::Value;

/// Runs the workload with `NCCL_DEBUG=INFO` (the simulated libnccl then
/// logs each init's `commId`, the hash of the id it was given), traced with
/// `extra`; returns the events and the logged ids. The simulated
/// `ncclGetUniqueId` gives random ids, as NCCL does (concurrent tests must
/// not share a communicator), so a captured id is checked through its hash.
fn traced(name: &str, args: &[&str], extra: &[&str], inits: usize) -> (Vec<Value>, Vec<String>) {
    let out = scratch(name).join("t.jsonl");
    let mut cmd = std::process::Command::new(workload_bin());
    cmd.env("NCCL_DEBUG", "INFO");
    let mut w = Workload::start_with(cmd, args);
    let t = Tracer::attach_to(&w, &out, extra);
    w.go();
    let complete = |seen: &[String]| -> Vec<String> {
        seen.iter()
            .filter(|l| l.contains("Init COMPLETE"))
            .filter_map(|l| {
                l.split("commId ")
                    .nth(1)?
                    .split(' ')
                    .next()
                    .map(str::to_string)
            })
            .collect()
    };
    while complete(&w.stdout.seen).len() < inits {
        w.stdout.wait_for("", std::time::Duration::from_secs(20));
    }
    let mut logged = complete(&w.stdout.seen);
    logged.sort();
    let (status, _) = w.finish();
    assert!(status.success());
    let f = t.finish(std::time::Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, summary) = read_jsonl(&out);
    assert_eq!(summary["lost"], 0, "{summary}");
    (events, logged)
}

/// The inits' captured ids (128 bytes, distinct) and their `comm_id`s.
fn unique_ids(events: &[Value], api: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut comm_ids: Vec<String> = of_api(events, api)
        .iter()
        .map(|e| {
            let id = e["args"]["unique_id"]
                .as_str()
                .unwrap_or_else(|| panic!("no unique_id in {e}"));
            assert_eq!(id.len(), 256, "{e}");
            ids.push(id.to_string());
            e["args"]["comm_id"]
                .as_str()
                .unwrap_or_else(|| panic!("no comm_id in {e}"))
                .to_string()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), comm_ids.len(), "ids repeat");
    comm_ids.sort();
    comm_ids
}

/// ncclCommInitRank gets its 128-byte id by value, on the stack at rsp+8:
/// the entry copies it and the return (which reads the new communicator)
/// sends it, for two threads at once.
#[test]
fn stack_blob_carried_to_the_return() {
    let (events, logged) = traced(
        "blob-stack",
        &["--threads", "2", "--nccl", "1"],
        &["--probes", "nccl"],
        2,
    );
    let inits = of_api(&events, "ncclCommInitRank");
    assert_eq!(inits.len(), 2, "{inits:?}");
    for e in &inits {
        assert!(e["dur_ns"].as_u64().is_some(), "{e}");
        assert_eq!(e["ret"], 0);
        assert!(e["args"]["comm"].as_str().is_some(), "{e}");
        assert_eq!(e["args"]["rank"], 0);
    }
    assert_eq!(unique_ids(&events, "ncclCommInitRank"), logged);
}

/// Traced `:args` only (no return probe): the record and its blob are built
/// at entry, straight in the ring buffer.
#[test]
fn stack_blob_at_entry_only() {
    let (events, logged) = traced(
        "blob-entry",
        &["--nccl", "1", "--nccl-config"],
        &["--probes", "nccl:args"],
        1,
    );
    let inits = of_api(&events, "ncclCommInitRankConfig");
    assert_eq!(inits.len(), 1, "{inits:?}");
    assert_eq!(inits[0]["dur_ns"], Value::Null);
    assert_eq!(inits[0]["args"]["nranks"], 1);
    assert_eq!(unique_ids(&events, "ncclCommInitRankConfig"), logged);
}
