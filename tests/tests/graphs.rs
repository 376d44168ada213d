//! Root tests of CUDA graphs and stream capture against the simulated
//! libcuda (tests/sim/README.md, "Stream capture" and "Graphs"): what the
//! simulator says it ran through graph launches, and recorded by captures
//! without running, is what gputrace reports, kernel by kernel, whether it
//! attached before the graphs were made or after they were instantiated
//! (then their nodes are read from the workload's memory with the layout
//! the calibration found in the simulated libcuda).

use std::collections::BTreeMap;
use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

/// What the simulator counted (the workload's `graph …` lines).
#[derive(Debug, Default)]
struct SimCounts {
    /// Demangled kernel name → (runs through graph launches, captured launches).
    kernels: BTreeMap<String, (u64, u64)>,
    graph_launches: u64,
    kernels_run: u64,
    copies: u64,
    copy_bytes: u64,
    memsets: u64,
    memset_bytes: u64,
    captured: u64,
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap()
}

fn demangled(mangled: &str) -> &'static str {
    match mangled {
        "_Z10vector_addPKfS0_Pfi" => VECTOR_ADD,
        "_ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi" => REDUCE,
        "_Z4reluPfi" => RELU,
        "_ZN6cublas4gemmIfEEvPKT_S3_PS1_iii" => GEMM,
        other => panic!("unknown simulated kernel {other}"),
    }
}

fn sim_counts(lines: &[String]) -> SimCounts {
    let mut c = SimCounts::default();
    for l in lines {
        if let Some(rest) = l.strip_prefix("graph kernel=") {
            let name = rest.split_whitespace().next().unwrap();
            c.kernels.insert(
                demangled(name).to_string(),
                (field(l, "runs"), field(l, "captured")),
            );
        } else if l.starts_with("graph launches=") {
            c.graph_launches = field(l, "launches");
            c.kernels_run = field(l, "kernels");
            c.copies = field(l, "copies");
            c.copy_bytes = field(l, "copy_bytes");
            c.memsets = field(l, "memsets");
            c.memset_bytes = field(l, "memset_bytes");
        } else if l.starts_with("captured launches=") {
            c.captured = field(l, "launches") + field(l, "copies") + field(l, "memsets");
        }
    }
    assert!(c.graph_launches > 0, "no graph counts in {lines:?}");
    c
}

struct GraphRun {
    sim: SimCounts,
    events: Vec<Value>,
    /// gputrace's own summary of the workload's process (JSON).
    summary: Value,
    stats: Value,
    pid: u32,
    stderr: String,
}

/// Runs the workload with `args`, gputrace attached by PID before `go`
/// (with `--graphs-before-wait` the graphs are instantiated by then).
fn run(name: &str, args: &[&str]) -> GraphRun {
    let dir = scratch(name);
    let out = dir.join("t.jsonl");
    let summary_file = dir.join("summary.json");
    let mut w = Workload::start(args);
    let pid = w.pid;
    let t = Tracer::attach_to(
        &w,
        &out,
        &[
            "--summary",
            "json",
            "--summary-file",
            summary_file.to_str().unwrap(),
        ],
    );
    w.go();
    let (status, lines) = w.finish_lines();
    assert!(status.success(), "the workload failed: {status}: {lines:?}");
    let g = t.finish(Duration::from_secs(120));
    assert!(g.status.success(), "gputrace failed: {}", g.stderr_text());
    let (events, _) = read_jsonl(&out);
    let live: Value = serde_json::from_slice(&std::fs::read(&summary_file).unwrap()).unwrap();
    let stats = run_gputrace(&["stats", out.to_str().unwrap(), "--format", "json"]);
    assert!(stats.status.success(), "{}", stats.stderr_text());
    let stats: Value = serde_json::from_str(&stats.stdout).unwrap();
    GraphRun {
        sim: sim_counts(&lines),
        events,
        summary: process(&live, pid),
        stats: process(&stats, pid),
        pid,
        stderr: g.stderr_text(),
    }
}

fn process(summary: &Value, pid: u32) -> Value {
    summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} in {summary}"))
        .clone()
}

/// Kernel name → (direct launches, graph launches) of a process summary.
fn kernel_table(p: &Value) -> BTreeMap<String, (u64, u64)> {
    p["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap_or("(unknown)").to_string(),
                (
                    k["launches"].as_u64().unwrap(),
                    k["graph_launches"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

/// (count, bytes) of the copy table's memset row, and of its other rows.
fn copy_rows(p: &Value) -> ((u64, u64), (u64, u64)) {
    let (mut sets, mut copies) = ((0, 0), (0, 0));
    for c in p["copies"].as_array().unwrap() {
        let row = if c["direction"] == "memset" {
            &mut sets
        } else {
            &mut copies
        };
        row.0 += c["count"].as_u64().unwrap();
        row.1 += c["bytes"].as_u64().unwrap();
    }
    (sets, copies)
}

/// Launches of executable graphs whose nodes were read from memory.
fn memory_launches(events: &[Value]) -> u64 {
    let mut source: BTreeMap<String, Value> = BTreeMap::new();
    let mut n = 0;
    for e in events {
        if e["type"] == "graph" {
            source.insert(e["exec"].as_str().unwrap().into(), e["source"].clone());
        } else if e["api"]
            .as_str()
            .is_some_and(|a| a.starts_with("cuGraphLaunch"))
            && source.get(e["args"]["graph_exec"].as_str().unwrap()) == Some(&Value::from("memory"))
        {
            n += 1;
        }
    }
    n
}

/// The summary's kernel table and graph counts are the simulator's: every
/// kernel run through a graph counted under `graph_launches`, none of the
/// captured launches counted anywhere, graph copies and memsets in the copy
/// table; and `gputrace stats` reads the same back from the timeline.
fn check_counts(r: &GraphRun, captured_seen: bool) {
    // The cloned graph loses a node through a handle from cuGraphGetNodes,
    // which is not traced: it is read from memory, kernel nodes only, so
    // each of its launches has one copy (8 KiB) and one memset (4 KiB)
    // fewer than the simulator ran (tests/sim/workload_graphs.c).
    let cloned = memory_launches(&r.events);
    for p in [&r.summary, &r.stats] {
        let table = kernel_table(p);
        for (name, (runs, _captured)) in &r.sim.kernels {
            // The workload launches these kernels only through graphs (or
            // captures, which must not count).
            assert_eq!(
                table.get(name).copied().unwrap_or((0, 0)),
                (0, *runs),
                "{name}: {p}\n{}",
                r.stderr
            );
        }
        assert!(!table.contains_key("(unknown)"), "{p}");
        let g = &p["graphs"];
        assert_eq!(g["launches"], r.sim.graph_launches, "{p}");
        assert_eq!(g["kernels"], r.sim.kernels_run, "{p}");
        assert_eq!(g["opaque_launches"], 0, "{p}");
        let want_captured = if captured_seen { r.sim.captured } else { 0 };
        assert_eq!(g["captured"], want_captured, "{p}");
        // The run's only copies and memsets are graph nodes (the captured
        // ones did not run).
        let (sets, copies) = copy_rows(p);
        assert_eq!(
            sets,
            (r.sim.memsets - cloned, r.sim.memset_bytes - cloned * 4096),
            "{p}"
        );
        assert_eq!(
            copies,
            (r.sim.copies - cloned, r.sim.copy_bytes - cloned * 8192),
            "{p}"
        );
    }
}

/// Every cuGraphLaunch names its executable graph and node count, and a
/// graph record of that executable graph came before it.
fn check_records(r: &GraphRun, sources: &[&str]) {
    let mut said: BTreeMap<String, usize> = BTreeMap::new();
    let mut launches = 0;
    for e in &r.events {
        if e["type"] == "graph" {
            assert_eq!(e["pid"], r.pid);
            assert!(
                sources.iter().any(|s| e["source"] == *s),
                "{e}\n{}",
                r.stderr
            );
            let nodes = e["nodes"].as_array().unwrap_or_else(|| panic!("{e}"));
            said.insert(e["exec"].as_str().unwrap().to_string(), nodes.len());
            continue;
        }
        let api = e["api"].as_str().unwrap_or("");
        if api.starts_with("cuGraphLaunch") && e["args"]["captured"].is_null() {
            launches += 1;
            let exec = e["args"]["graph_exec"].as_str().unwrap();
            let n = said
                .get(exec)
                .unwrap_or_else(|| panic!("launch of {exec} before its graph record"));
            assert_eq!(e["args"]["nodes"], *n as u64, "{e}");
        }
    }
    assert_eq!(launches, r.sim.graph_launches);
}

/// Attached before the graphs exist: captured (across two streams, joined
/// by events) and built node by node, cloned, replayed, then updated by
/// per-node setters, a child-graph swap and a whole-graph update, and
/// replayed again; two threads at once. The workload waits a little after
/// each round of replays, so that the clone (read from memory) is still
/// there when gputrace processes its launches.
#[test]
fn graphs_followed_from_their_calls() {
    let r = run(
        "graphs-traced",
        &[
            "--threads",
            "2",
            "--graph-replays",
            "3",
            "--graph-update",
            "--graph-linger-ms",
            "300",
        ],
    );
    check_counts(&r, true);
    check_records(&r, &["traced", "memory"]);
    // Two of the three executable graphs of each pass are followed from
    // their calls; the clone (launched 3 + 3 times per thread) from memory.
    assert_eq!(memory_launches(&r.events), 2 * 6);
    // Captured launches are in the timeline, marked, never as run.
    let captured: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e["args"]["captured"] == true)
        .collect();
    assert_eq!(captured.len() as u64, r.sim.captured);
    assert!(captured
        .iter()
        .all(|e| e["args"]["capture"].as_u64().is_some()));
    assert!(!r.stderr.contains("opaque"), "{}", r.stderr);
}

/// Attached after the graphs were instantiated: their nodes are read from
/// the workload's memory (the layout calibrated on the simulated libcuda)
/// and named through the handle -> name path. The kernels and their
/// launches match; copies and memsets of such graphs are not read (the
/// layout gives kernel nodes only), so they are not counted.
#[test]
fn graphs_read_from_memory_after_attach() {
    let r = run(
        "graphs-memory",
        &[
            "--threads",
            "2",
            "--graph-replays",
            "3",
            "--graphs-before-wait",
            "--graph-linger-ms",
            "300",
        ],
    );
    check_records(&r, &["memory"]);
    for p in [&r.summary, &r.stats] {
        let table = kernel_table(p);
        for (name, (runs, _)) in &r.sim.kernels {
            assert_eq!(
                table.get(name).copied().unwrap_or((0, 0)),
                (0, *runs),
                "{name}: {p}\n{}",
                r.stderr
            );
        }
        let g = &p["graphs"];
        assert_eq!(g["launches"], r.sim.graph_launches, "{p}");
        assert_eq!(g["kernels"], r.sim.kernels_run, "{p}");
        assert_eq!(g["opaque_launches"], 0, "{p}");
        assert_eq!(g["captured"], 0, "{p}");
        assert_eq!(copy_rows(p), ((0, 0), (0, 0)), "{p}");
    }
}

/// Without calibration the same graphs are opaque: launches counted,
/// `"nodes":null`, said once, no kernel invented.
#[test]
fn graphs_opaque_without_calibration() {
    let dir = scratch("graphs-opaque");
    let out = dir.join("t.jsonl");
    let mut w = Workload::start(&["--graph-replays", "2", "--graphs-before-wait"]);
    let pid = w.pid;
    let pid_arg = pid.to_string();
    let mut t = Tracer::spawn_with_env(
        &[
            "--pid",
            &pid_arg,
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "json",
        ],
        &[("GPUTRACE_NO_CALIBRATION", "1")],
    );
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(60));
    w.go();
    let (status, lines) = w.finish_lines();
    assert!(status.success());
    let sim = sim_counts(&lines);
    let g = t.finish(Duration::from_secs(120));
    assert!(g.status.success(), "{}", g.stderr_text());
    let summary: Value = serde_json::from_str(&g.stdout).unwrap();
    let p = process(&summary, pid);
    assert_eq!(p["graphs"]["launches"], sim.graph_launches, "{p}");
    assert_eq!(p["graphs"]["opaque_launches"], sim.graph_launches, "{p}");
    assert_eq!(p["graphs"]["kernels"], 0, "{p}");
    assert!(kernel_table(&p).is_empty(), "{p}");
    let (events, _) = read_jsonl(&out);
    let records: Vec<&Value> = events.iter().filter(|e| e["type"] == "graph").collect();
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(records.iter().all(|r| r["nodes"].is_null()));
    let said = g.stderr_text();
    assert_eq!(
        said.matches("built before gputrace attached").count(),
        1,
        "{said}"
    );
}
