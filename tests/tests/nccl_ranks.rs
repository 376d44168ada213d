//! NCCL across ranks (issue 11): several simulated ranks, each its own
//! process, share a communicator (tests/sim "Several ranks"); the simulated
//! libnccl returns a collective only once every rank entered it. gputrace
//! traces them by PID and matches their collectives by (communicator id,
//! function, sequence number): a rank late by a known delay is named with
//! that delay, a rank that stops is named in the stall line.

use std::path::Path;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

const LATE_MS: u64 = 200;

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// The `nccl_ranks` entry of a pid.
fn rank_of(summary: &Value, pid: u32) -> &Value {
    summary["nccl_ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("no nccl_ranks entry for pid {pid}: {summary}"))
}

#[test]
fn a_late_rank_is_named_with_the_delay_it_caused() {
    let dir = scratch("nccl-late");
    // 3 ranks, 12 AllReduces; rank 2 sleeps LATE_MS before collectives
    // 2, 5, 8 and 11 ((s+1) mod 3 = 0).
    let late = LATE_MS.to_string();
    let common = ["--nccl", "12"];
    let r2 = [&common[..], &["--late-ms", &late, "--late-every", "3"]].concat();
    let ws = nccl_ranks(3, &dir.join("id"), &[&common, &common, &r2]);
    let out = dir.join("t.jsonl");
    let sum = dir.join("s.json");
    let t = attach_ranks(&ws, &out, &sum, &[]);
    let (p, f) = ranks_to_the_end(ws, t);
    assert!(
        !f.stderr_text().contains("NCCL stall"),
        "{}",
        f.stderr_text()
    );
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();

    // One communicator, the same id in every rank's rows and calls.
    let comms = summary["nccl_comms"].as_array().unwrap();
    assert_eq!(comms.len(), 1, "{summary}");
    let comm_id = comms[0]["comm_id"].as_str().unwrap().to_string();
    assert_eq!(comms[0]["nranks"], 3);
    assert_eq!(comms[0]["ranks_traced"], 3);
    assert_eq!(comms[0]["collectives_complete"], 12);
    assert_eq!(comms[0]["collectives_incomplete"], 0);
    assert_eq!(comms[0]["sequence_conflicts"], 0);
    for (r, pid) in p.iter().enumerate() {
        let proc_ = summary["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["pid"] == *pid)
            .unwrap();
        let row = &proc_["nccl"][0];
        assert_eq!(
            (
                row["comm_id"].as_str(),
                &row["rank"],
                &row["nranks"],
                &row["count"]
            ),
            (
                Some(comm_id.as_str()),
                &Value::from(r),
                &Value::from(3),
                &Value::from(12)
            ),
            "{proc_}"
        );
        let e = rank_of(&summary, *pid);
        assert_eq!(
            (&e["rank"], &e["collectives"]),
            (&Value::from(r), &Value::from(12))
        );
    }

    // Per collective: the late ones have rank 2 last, by LATE_MS.
    let (events, _) = read_jsonl(&out);
    let colls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "nccl_collective")
        .collect();
    assert_eq!(colls.len(), 12, "one record per collective");
    let ms = 1_000_000u64;
    let mut late_total = 0;
    for c in &colls {
        assert_eq!(
            (c["comm_id"].as_str(), c["op"].as_str()),
            (Some(comm_id.as_str()), Some("AllReduce"))
        );
        let seq = c["seq"].as_u64().unwrap();
        let delay = c["delay_ns"].as_u64().unwrap();
        if (seq + 1) % 3 == 0 {
            assert_eq!(
                (c["last_rank"].as_u64(), c["last_pid"].as_u64()),
                (Some(2), Some(u64::from(p[2]))),
                "{c}"
            );
            // Most of the sleep: the others enter a little after the late
            // rank began sleeping (a few ms on a busy machine).
            assert!(
                (LATE_MS * 3 / 4 * ms..(LATE_MS + 100) * ms).contains(&delay),
                "seq {seq}: delay {delay} ns for a {LATE_MS} ms sleep"
            );
            assert!(c["skew_ns"].as_u64().unwrap() >= delay);
            late_total += delay;
        } else {
            assert!(
                delay < 100 * ms,
                "seq {seq}: delay {delay} ns without a sleep"
            );
        }
    }
    // Every call's sequence number is NCCL's counter, read from the
    // communicator's memory at the call's entry (offsets decoded from the
    // library's machine code), and it agrees with the traced init.
    let calls = of_api(&events, "ncclAllReduce");
    assert_eq!(calls.len(), 36);
    for c in &calls {
        assert_eq!(c["args"]["seq_from"], "counter", "{c}");
        assert_eq!(c["args"]["comm_id"], comm_id.as_str(), "{c}");
    }
    assert!(!f.stderr_text().contains("differs"), "{}", f.stderr_text());
    // The sequence numbers are 0..11.
    let mut seqs: Vec<u64> = colls.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    seqs.sort();
    assert_eq!(seqs, (0..12).collect::<Vec<_>>());
    let r2 = rank_of(&summary, p[2]);
    assert!(r2["times_last"].as_u64().unwrap() >= 4, "{r2}");
    let total = r2["delay_ns_total"].as_u64().unwrap();
    assert!(
        total >= late_total && total < late_total + 8 * 100 * ms,
        "{r2}"
    );
    let on_time: u64 = p[..2]
        .iter()
        .map(|pid| rank_of(&summary, *pid)["delay_ns_total"].as_u64().unwrap())
        .sum();
    assert!(on_time < 8 * 100 * ms, "ranks 0 and 1 caused {on_time} ns");

    // `gputrace stats` finds the same from the file.
    let s = run_gputrace(&["stats", out.to_str().unwrap(), "--format", "json"]);
    assert!(s.status.success(), "{}", s.stderr_text());
    let again: Value = serde_json::from_str(s.stdout.trim()).unwrap();
    assert_eq!(again["nccl_ranks"], summary["nccl_ranks"]);
    assert_eq!(again["nccl_comms"], summary["nccl_comms"]);
    let text = run_gputrace(&["stats", out.to_str().unwrap()]).stdout;
    assert!(
        text.contains(&format!(
            "== NCCL communicator {comm_id} (3 ranks, 3 traced) =="
        )),
        "{text}"
    );
}

#[test]
fn a_stopping_rank_is_named_in_the_stall_line() {
    let dir = scratch("nccl-stop");
    let mut ws = nccl_ranks(
        2,
        &dir.join("id"),
        &[&["--nccl", "10"], &["--nccl", "10", "--stop-after", "3"]],
    );
    let out = dir.join("t.jsonl");
    let mut t = Tracer::attach(&[
        "--pid",
        &pids_of(&ws),
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "text",
        "--nccl-stall",
        "1s",
    ]);
    for w in ws.iter_mut() {
        w.go();
    }
    let stopped = ws[1]
        .stdout
        .wait_for("nccl stopped after=", Duration::from_secs(20));
    assert_eq!(stopped, format!("nccl stopped after=3 pid={}", ws[1].pid));
    let line = t
        .stderr
        .wait_for("gputrace: NCCL stall", Duration::from_secs(20));
    // Rank 0 entered collective 3 and waits; rank 1 never came.
    let summary_id = {
        let prefix = "gputrace: NCCL stall: communicator ";
        assert!(line.starts_with(prefix), "{line}");
        line[prefix.len()..].split(' ').next().unwrap().to_string()
    };
    let want = format!(
        "gputrace: NCCL stall: communicator {summary_id} (2 ranks) AllReduce seq 3: rank 1 (pid {} on {}) \
         has not entered it; rank 0 (pid {}) has waited ",
        ws[1].pid,
        hostname(),
        ws[0].pid
    );
    assert!(line.starts_with(&want), "{line}\nwanted {want}");
    let waited: f64 = line[want.len()..].trim_end_matches(" s").parse().unwrap();
    assert!((1.0..5.0).contains(&waited), "{line}");
    // Said once: wait a few more checks.
    std::thread::sleep(Duration::from_millis(1500));
    // Rank 0 (waiting) ends first: rank 1's exit is then not said (no one
    // waits for it any more).
    for w in ws.into_iter() {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
        let _ = w.finish();
    }
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let all = f.stderr_text();
    assert_eq!(all.matches("gputrace: NCCL stall:").count(), 1, "{all}");
    assert!(f.stdout.contains("\nNCCL stalls:\n"), "{}", f.stdout);
    assert!(
        f.stdout.contains(&want["gputrace: NCCL stall: ".len()..]),
        "{}",
        f.stdout
    );
    let (events, summary) = read_jsonl(&out);
    let stalls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "nccl_stall")
        .collect();
    assert_eq!(stalls.len(), 1);
    assert_eq!(
        (
            &stalls[0]["seq"],
            &stalls[0]["missing"][0]["rank"],
            &stalls[0]["comm_id"]
        ),
        (
            &Value::from(3),
            &Value::from(1),
            &Value::from(summary_id.as_str())
        )
    );
    assert_eq!(summary["nccl_stalls"].as_array().unwrap().len(), 1);
    // Three collectives complete, the fourth not.
    assert_eq!(summary["nccl_comms"][0]["collectives_complete"], 3);
}

/// The daemon's per-(communicator, rank) series: rank 1 is late by
/// LATE_MS before collective 3, then stops before collective 6.
#[test]
fn the_daemon_serves_per_rank_series_and_the_stall() {
    use gputrace_tests::node::{sample, Daemon};
    let dir = scratch("nccl-daemon");
    let late = LATE_MS.to_string();
    let mut ws = nccl_ranks(
        2,
        &dir.join("id"),
        &[
            &["--nccl", "10"],
            &[
                "--nccl",
                "10",
                "--late-ms",
                &late,
                "--late-every",
                "4",
                "--stop-after",
                "6",
            ],
        ],
    );
    let d = Daemon::start(&["--nccl-stall", "1s"], &[]);
    for w in ws.iter_mut() {
        w.go();
    }
    let (p0, p1) = (ws[0].pid.to_string(), ws[1].pid.to_string());
    // Our communicator: the one whose rank 1 is our process (the daemon
    // may see other tests' ranks too).
    let our_comm = |m: &str| -> Option<String> {
        let info = m.lines().find(|l| {
            l.starts_with("gputrace_nccl_rank_info{")
                && l.contains("rank=\"1\"")
                && l.contains(&format!("pid=\"{p1}\""))
        })?;
        Some(
            info.split("comm_id=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_string(),
        )
    };
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        our_comm(m).is_some_and(|c| {
            sample(
                m,
                "gputrace_nccl_stalls_total",
                &[("comm_id", &c), ("rank", "1")],
            )
            .is_some_and(|v| v >= 1.0)
        })
    });
    let comm_id = &our_comm(&m).unwrap()[..];
    let id = |rank: &'static str| [("comm_id", comm_id), ("rank", rank), ("nranks", "2")];
    assert!(
        sample(
            &m,
            "gputrace_nccl_rank_info",
            &[("comm_id", comm_id), ("rank", "0"), ("pid", &p0)]
        )
        .is_some(),
        "{m}"
    );
    let op = ("op", "AllReduce");
    for rank in ["0", "1"] {
        let l = [&id(rank)[..], &[op]].concat();
        assert_eq!(
            sample(&m, "gputrace_nccl_collectives_total", &l),
            Some(6.0),
            "rank {rank}\n{m}"
        );
        assert_eq!(
            sample(&m, "gputrace_nccl_last_seq", &l),
            Some(5.0),
            "rank {rank}"
        );
    }
    let sk = [("comm_id", comm_id), ("nranks", "2")];
    assert_eq!(
        sample(&m, "gputrace_nccl_arrival_skew_seconds_count", &sk),
        Some(6.0)
    );
    assert!(
        sample(&m, "gputrace_nccl_arrival_skew_seconds_sum", &sk).unwrap() >= LATE_MS as f64 / 1e3
    );
    assert!(sample(&m, "gputrace_nccl_last_arrivals_total", &id("1")).unwrap() >= 1.0);
    let delay = sample(&m, "gputrace_nccl_delay_caused_seconds_total", &id("1")).unwrap();
    assert!(
        (LATE_MS as f64 / 1e3..LATE_MS as f64 / 1e3 + 0.5).contains(&delay),
        "{delay}"
    );
    assert_eq!(
        sample(&m, "gputrace_nccl_stalls_total", &id("1")),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "gputrace_nccl_stalls_total", &id("0")),
        Some(0.0)
    );
    assert!(sample(&m, "gputrace_nccl_stalled_seconds", &id("1")).unwrap() >= 1.0);
    assert_eq!(
        sample(&m, "gputrace_nccl_stalled_seconds", &id("0")),
        Some(0.0)
    );
    for w in &ws {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
    }
    for w in ws {
        let _ = w.finish();
    }
}

/// Ranks whose communicator is made during setup (`--nccl-init-early`),
/// started at once (the init waits for every rank), on CUDA devices 0, 3...
fn early_ranks(id_file: &Path, extra: &[&[&str]]) -> Vec<Workload> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..extra.len())
            .map(|r| {
                let (n, id_file) = (extra.len().to_string(), id_file.to_str().unwrap());
                s.spawn(move || {
                    let (rank, dev) = (r.to_string(), (r * 3).to_string());
                    let mut cmd = std::process::Command::new(workload_bin());
                    cmd.env("NCCL_DEBUG", "INFO");
                    let args = [
                        "--ranks",
                        &n,
                        "--rank",
                        &rank,
                        "--id-file",
                        id_file,
                        "--threads",
                        "1",
                        "--nccl-allreduce-only",
                        "--nccl-init-early",
                        "--cuda-dev",
                        &dev,
                    ];
                    Workload::start_with(cmd, &[&args[..], extra[r]].concat())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank 1 ran 5 collectives ahead (entered, not returned: `--nccl-ahead`)
/// before gputrace attached, as a rank attached after another one did in
/// a real run: collectives 0..4 are traced on rank 0 only. They are not
/// stalls, nor incomplete; 5..11 are compared as usual.
#[test]
fn collectives_a_rank_entered_before_attach_are_not_stalls() {
    let dir = scratch("nccl-ahead");
    // 12 collectives, then both ranks stay (traced) until SIGTERM.
    let n = ["--nccl", "13", "--stop-after", "12"];
    let mut ws = early_ranks(
        &dir.join("id"),
        &[&n, &[&n[..], &["--nccl-ahead", "5"]].concat()],
    );
    assert!(ws[1]
        .stdout
        .seen
        .iter()
        .any(|l| l.starts_with("nccl ahead=5 ")));
    let (out, sum) = (dir.join("t.jsonl"), dir.join("s.json"));
    let t = attach_ranks(&ws, &out, &sum, &["--nccl-stall", "1s"]);
    for w in ws.iter_mut() {
        w.go();
    }
    let p: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    for w in ws.iter_mut() {
        w.stdout
            .wait_for("nccl stopped after=12", Duration::from_secs(20));
    }
    // Past the threshold and a few checks, with rank 0's 0..4 unmatched.
    std::thread::sleep(Duration::from_millis(2500));
    // Calls: rank 0 its 12 AllReduces; rank 1 7, and 5 in a group.
    for (w, calls) in ws.into_iter().zip([12, 7 + 5 + 2]) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
        let (status, done) = w.finish();
        assert!(status.success(), "a rank failed: {status}");
        assert_eq!(done, calls);
    }
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(
        !f.stderr_text().contains("NCCL stall"),
        "{}",
        f.stderr_text()
    );
    let (events, _) = read_jsonl(&out);
    assert!(!events.iter().any(|e| e["type"] == "nccl_stall"));
    let mut seqs: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "nccl_collective")
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    seqs.sort();
    assert_eq!(seqs, (5..12).collect::<Vec<_>>());
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();
    let c = &summary["nccl_comms"][0];
    assert_eq!(
        summary["nccl_comms"].as_array().unwrap().len(),
        1,
        "{summary}"
    );
    assert_eq!(
        (
            &c["collectives_complete"],
            &c["collectives_incomplete"],
            &c["collectives_before_trace"],
            &c["sequence_conflicts"]
        ),
        (
            &Value::from(7),
            &Value::from(0),
            &Value::from(5),
            &Value::from(0)
        ),
        "{c}"
    );
    assert_eq!(summary["nccl_stalls"].as_array().unwrap().len(), 0);
    assert_eq!(rank_of(&summary, p[0])["collectives"], 12);
    assert_eq!(rank_of(&summary, p[1])["collectives"], 7);
    // `gputrace stats` reads the same back from the file.
    let s = run_gputrace(&["stats", out.to_str().unwrap(), "--format", "json"]);
    let again: Value = serde_json::from_str(s.stdout.trim()).unwrap();
    assert_eq!(again["nccl_comms"], summary["nccl_comms"]);
}

/// Communicators made before gputrace attached (`--nccl-init-early`): no
/// init is traced, so the id, rank, size, device and sequence numbers come
/// from the communicator's memory, at offsets decoded from the simulated
/// libnccl's machine code. The id is the one the library itself logs.
#[test]
fn communicators_created_before_attach_are_read_from_memory() {
    let dir = scratch("nccl-early");
    let ws = early_ranks(&dir.join("id"), &[&["--nccl", "5"], &["--nccl", "5"]]);
    // `... NCCL INFO ncclCommInitRank comm 0x… rank 0 nranks 2 ... commId 0x… - Init COMPLETE`
    let logged = ws[0]
        .stdout
        .seen
        .iter()
        .find(|l| l.contains("Init COMPLETE"))
        .and_then(|l| l.split("commId ").nth(1))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no Init COMPLETE line: {:?}", ws[0].stdout.seen))
        .to_string();
    let out = dir.join("t.jsonl");
    let pids = pids_of(&ws);
    let t = Tracer::attach(&[
        "--pid",
        &pids,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "none",
    ]);
    let (p, _) = ranks_to_the_end(ws, t);
    let (events, summary) = read_jsonl(&out);
    assert!(
        of_api(&events, "ncclCommInitRank").is_empty(),
        "the init was before the attach"
    );
    for (r, pid) in p.iter().enumerate() {
        let calls: Vec<&Value> = events
            .iter()
            .filter(|c| c["api"] == "ncclAllReduce" && c["pid"] == *pid)
            .collect();
        assert_eq!(calls.len(), 5);
        let mut seqs = Vec::new();
        for c in calls {
            let a = &c["args"];
            assert_eq!(a["comm_id"], logged.as_str(), "{c}");
            assert_eq!(
                (&a["rank"], &a["nranks"], &a["cuda_dev"]),
                (&Value::from(r), &Value::from(2), &Value::from(r * 3)),
                "{c}"
            );
            assert_eq!(a["seq_from"], "counter");
            seqs.push(a["seq"].as_u64().unwrap());
        }
        seqs.sort();
        assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    }
    assert_eq!(summary["nccl_comms"][0]["comm_id"], logged.as_str());
    assert_eq!(summary["nccl_comms"][0]["collectives_complete"], 5);
}
