//! Issue 26 item 10: an NCCL build gputrace does not know (no version
//! string, `commHash` nowhere it can find: the simulator's `foreign/`
//! copy) keeps the cross-rank view. The communicator's id is then
//! gputrace's own, a hash of the `ncclUniqueId` every rank was given, marked
//! `comm_id_from: "unique_id"`; ranks and sizes come from the init calls.

use std::path::PathBuf;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

fn foreign() -> PathBuf {
    sim_dir().join("foreign/gputrace-workload")
}

#[test]
fn ranks_of_an_unknown_build_are_matched_by_their_unique_id() {
    let dir = scratch("nccl-foreign");
    // 3 ranks, 12 AllReduces; rank 2 sleeps 100 ms before collectives 2,
    // 5, 8 and 11.
    let common: &[&str] = &["--nccl", "12"];
    let late: &[&str] = &["--nccl", "12", "--late-ms", "100", "--late-every", "3"];
    let ws = nccl_ranks_bin(&foreign(), 3, &dir.join("id"), &[common, common, late]);
    let out = dir.join("t.jsonl");
    let sum = dir.join("s.json");
    let t = attach_ranks(&ws, &out, &sum, &[]);
    let (pids, _) = ranks_to_the_end(ws, t);

    let (events, _) = read_jsonl(&out);
    // Every init and every AllReduce carries the same id, marked as ours.
    let calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["api"] == "ncclAllReduce" || e["api"] == "ncclCommInitRank")
        .collect();
    assert_eq!(calls.len(), 3 * 13, "3 inits and 36 all-reduces");
    let id = calls[0]["args"]["comm_id"]
        .as_str()
        .expect("an id")
        .to_string();
    for c in &calls {
        assert_eq!(c["args"]["comm_id"].as_str(), Some(id.as_str()), "{c}");
        assert_eq!(c["args"]["comm_id_from"], "unique_id", "{c}");
    }
    for (r, pid) in pids.iter().enumerate() {
        let mine: Vec<&&Value> = calls
            .iter()
            .filter(|c| c["pid"] == *pid && c["api"] == "ncclAllReduce")
            .collect();
        assert_eq!(mine.len(), 12);
        for c in mine {
            assert_eq!(
                (&c["args"]["rank"], &c["args"]["nranks"]),
                (&Value::from(r), &Value::from(3))
            );
        }
    }
    // Each collective matched across ranks; the late rank named.
    let colls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "nccl_collective")
        .collect();
    assert_eq!(colls.len(), 12, "one record per collective");
    for c in &colls {
        assert_eq!(c["comm_id"].as_str(), Some(id.as_str()));
        let seq = c["seq"].as_u64().unwrap();
        if (seq + 1) % 3 == 0 {
            assert_eq!(c["last_rank"], 2, "{c}");
            assert!(c["delay_ns"].as_u64().unwrap() > 50_000_000, "{c}");
        }
    }
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();
    let comms = summary["nccl_comms"].as_array().unwrap();
    assert_eq!(comms.len(), 1, "{summary}");
    assert_eq!(comms[0]["comm_id"].as_str(), Some(id.as_str()));
    assert_eq!(comms[0]["ranks_traced"], 3);
    assert_eq!(comms[0]["collectives_complete"], 12);
}

#[test]
fn a_stopped_rank_of_an_unknown_build_is_named() {
    let dir = scratch("nccl-foreign-stop");
    let r0: &[&str] = &["--nccl", "100000"];
    // Rank 1 stops itself outside every NCCL call (see nccl_stalls.rs).
    let r1: &[&str] = &["--nccl", "100000", "--late-ms", "10", "--sigstop-at", "20"];
    let mut ws = nccl_ranks_bin(&foreign(), 2, &dir.join("id"), &[r0, r1]);
    let mut t = Tracer::attach(&["--pid", &pids_of(&ws), "--nccl-stall", "1s"]);
    for w in ws.iter_mut() {
        w.go();
    }
    ws[1]
        .stdout
        .wait_for("nccl sigstop seq=20 ", Duration::from_secs(20));
    let line = t.stderr.wait_for(
        "gputrace: NCCL stall: communicator ",
        Duration::from_secs(20),
    );
    assert!(
        line.contains(&format!("rank 1 (pid {} on ", ws[1].pid)),
        "{line}"
    );
    for w in &ws {
        // SAFETY: signals to our own children.
        unsafe {
            libc::kill(w.pid as i32, libc::SIGTERM);
            libc::kill(w.pid as i32, libc::SIGCONT);
        }
    }
    for w in ws {
        let _ = w.finish();
    }
    let f = t.finish(Duration::from_secs(60));
    assert!(
        !f.stderr_text().contains("communicator not identified"),
        "{}",
        f.stderr_text()
    );
}

/// Issue 28: "Collectives by size" from real probe records: each rank's
/// 12 AllReduces of 1,048,576 float32 (4 MiB, nccl-tests' size) in one
/// row; `stats` of the timeline says the same.
#[test]
fn collectives_are_grouped_by_operation_type_and_size() {
    let dir = scratch("nccl-by-size");
    let common: &[&str] = &["--nccl", "12"];
    let ws = nccl_ranks_bin(&foreign(), 2, &dir.join("id"), &[common, common]);
    let out = dir.join("t.jsonl");
    let sum = dir.join("s.json");
    let t = attach_ranks(&ws, &out, &sum, &[]);
    let (pids, _) = ranks_to_the_end(ws, t);
    let rows_of = |summary: &Value, pid: u32| -> Vec<Value> {
        let p = summary["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no process {pid}"));
        p["collectives"]["rows"]
            .as_array()
            .expect("collectives rows")
            .clone()
    };
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();
    let back = run_gputrace(&["stats", out.to_str().unwrap(), "--format", "json"]);
    assert!(back.status.success(), "{}", back.stderr_text());
    let back: Value = serde_json::from_str(&back.stdout).unwrap();
    for s in [&summary, &back] {
        for pid in &pids {
            let rows = rows_of(s, *pid);
            assert_eq!(rows.len(), 1, "{rows:?}");
            let r = &rows[0];
            assert_eq!(
                (&r["op"], &r["datatype"]),
                (&"AllReduce".into(), &"float32".into()),
                "{r}"
            );
            assert_eq!(r["size_label"], "4 MiB–8 MiB", "{r}");
            assert_eq!(
                (&r["calls"], &r["bytes"]),
                (&12.into(), &(12u64 << 22).into()),
                "{r}"
            );
            assert!(r["gpu"].is_null(), "no GPU time without --gpu-time");
        }
    }
}
