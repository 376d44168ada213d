//! Root tests of the probes' blob capture: bytes copied at a call's entry,
//! from the caller's stack (a struct passed by value) or from behind a
//! pointer argument, carried to the return probe or sent at entry.

use gputrace_tests::*;
use serde_json::Value;

/// The simulated `ncclGetUniqueId`'s id number `seq` (tests/sim/README.md):
/// "gpusimid", the sequence number as a little-endian u64, then byte i = i.
fn sim_unique_id(seq: u64) -> String {
    let mut id = b"gpusimid".to_vec();
    id.extend_from_slice(&seq.to_le_bytes());
    id.extend(16..128u8);
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn unique_ids(events: &[Value], api: &str) -> Vec<String> {
    let mut ids: Vec<String> = of_api(events, api)
        .iter()
        .map(|e| {
            e["args"]["unique_id"]
                .as_str()
                .unwrap_or_else(|| panic!("no unique_id in {e}"))
                .to_string()
        })
        .collect();
    ids.sort();
    ids
}

/// ncclCommInitRank gets its 128-byte id by value, on the stack at rsp+8:
/// the entry copies it and the return (which reads the new communicator)
/// sends it, for two threads at once.
#[test]
fn stack_blob_carried_to_the_return() {
    let run = trace_workload(
        "blob-stack",
        &["--threads", "2", "--nccl", "1"],
        &["--probes", "nccl"],
    );
    let inits = of_api(&run.events, "ncclCommInitRank");
    assert_eq!(inits.len(), 2, "{inits:?}");
    for e in &inits {
        assert!(e["dur_ns"].as_u64().is_some(), "{e}");
        assert_eq!(e["ret"], 0);
        assert!(e["args"]["comm"].as_str().is_some(), "{e}");
        assert_eq!(e["args"]["rank"], 0);
    }
    assert_eq!(
        unique_ids(&run.events, "ncclCommInitRank"),
        vec![sim_unique_id(1), sim_unique_id(2)]
    );
    assert_eq!(run.summary["lost"], 0, "{}", run.summary);
}

/// Traced `:args` only (no return probe): the record and its blob are built
/// at entry, straight in the ring buffer.
#[test]
fn stack_blob_at_entry_only() {
    let run = trace_workload(
        "blob-entry",
        &["--nccl", "1", "--nccl-config"],
        &["--probes", "nccl:args"],
    );
    let inits = of_api(&run.events, "ncclCommInitRankConfig");
    assert_eq!(inits.len(), 1, "{inits:?}");
    assert_eq!(inits[0]["dur_ns"], Value::Null);
    assert_eq!(inits[0]["args"]["nranks"], 1);
    assert_eq!(
        unique_ids(&run.events, "ncclCommInitRankConfig"),
        vec![sim_unique_id(1)]
    );
}
