//! Root tests: `--overhead-budget` samples the busy APIs of a workload
//! whose launches cost it more than the budget, keeps every rare call, and
//! estimates the launches from what it saw; a budget not exceeded changes
//! nothing; bad values are usage errors.

#![allow(clippy::print_stderr)] // tests say what they measured

use std::collections::BTreeMap;

use gputrace_tests::budget::PASS;
use gputrace_tests::*;
use serde_json::Value;

const LAUNCHES_PER_PASS: u64 = 200;
const CAPTURE_CHECKS_PER_PASS: u64 = 20;

/// Counts per API of the summary's process `pid`: (shown, seen, estimated).
fn api_rows(summary: &Value, pid: u32) -> BTreeMap<String, (u64, u64, bool)> {
    let p = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("process {pid} not in the summary: {summary}"));
    p["apis"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                (
                    a["calls"].as_u64().unwrap(),
                    a["calls_seen"].as_u64().unwrap(),
                    a["calls_estimated"].as_bool().unwrap(),
                ),
            )
        })
        .collect()
}

/// The line of gputrace's stderr that contains `marker`.
fn line_with<'a>(stderr: &'a str, marker: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no line with {marker:?}: {stderr}"))
}

/// The workload under a 1% budget (`--verbose`), gputrace keeping its
/// calibrations in `cache` when given: the run and gputrace's stderr.
fn budget_run(name: &str, args: &[&str], cache: Option<&std::path::Path>) -> (Run, String) {
    let env: Vec<(&str, &str)> = cache
        .map(|c| ("GPUTRACE_CACHE_DIR", c.to_str().unwrap()))
        .into_iter()
        .collect();
    let run = trace_run_with_env(
        name,
        "t.jsonl",
        &workload_bin(),
        args,
        &["--overhead-budget", "1", "--verbose"],
        &env,
    );
    let stderr = run.gputrace.stderr_text();
    (run, stderr)
}

/// The number in `line` between `after` and the next `until`.
fn figure(line: &str, after: &str, until: &str) -> f64 {
    line.split(after)
        .nth(1)
        .and_then(|t| t.split(until).next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure after {after:?} in {line}"))
}

/// Rare calls made once per pass: allocations, frees, synchronous copies
/// and synchronisations (names, graphs and teardown are made once).
fn per_pass_rare(api: &str) -> bool {
    (api.starts_with("cuMem") || api.contains("Synchronize")) && !api.contains("Async")
}

#[test]
fn busy_launches_are_sampled_and_rare_calls_stay_exact() {
    // The pass the budgeted run repeats, traced exactly once: what one
    // pass calls.
    let one = trace_workload("budget-one-pass", PASS, &[]);
    let one_counts = counts(&one.events);

    let mut args = PASS.to_vec();
    // Each pass waits 2 ms in each synchronisation, as a training step
    // waits for its GPU: about 25,000 launches a second.
    args.extend(["--sync-us", "2000", "--duration-ms", "8000"]);
    let (run, stderr) = budget_run("budget-sampled", &args, None);
    let sampling = &run.summary["sampling"];
    eprintln!("sampling: {sampling}");
    eprintln!("{stderr}");
    // Both classes of prologue were measured (what a hit costs depends on
    // whether the kernel emulates the function's first instruction).
    let line = line_with(&stderr, "a probe hit costs");
    let ns: Vec<f64> = line
        .split_whitespace()
        .zip(line.split_whitespace().skip(1))
        .filter(|(_, unit)| *unit == "ns")
        .map(|(v, _)| v.parse().unwrap())
        .collect();
    assert_eq!(ns.len(), 4, "{line}");
    assert!(ns.iter().all(|v| *v > 0.0), "{line}");
    assert!(
        line.contains("single-stepped") && line.contains("emulated"),
        "{line}"
    );
    assert_eq!(sampling["sampled"], true, "{sampling}");
    let share = sampling["traced_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 0.9, "traced share {share}");
    let ratio = sampling["probe_cost_ratio"].as_f64().unwrap();
    assert!((1.0..=4.0).contains(&ratio), "{sampling}");

    // Rare calls: all of them, pass for pass.
    assert_eq!(
        run.done % one.done,
        0,
        "{} calls, {} a pass",
        run.done,
        one.done
    );
    let passes = run.done / one.done;
    let seen = counts(&run.events);
    let mut checked = 0;
    for (api, n) in one_counts.iter().filter(|(a, _)| per_pass_rare(a)) {
        assert_eq!(
            seen.get(api).copied().unwrap_or(0),
            n * passes,
            "{api} ({passes} passes)"
        );
        checked += 1;
    }
    assert!(checked >= 8, "rare APIs checked: {checked}");

    // Between discoveries an on slice attaches only the APIs called (here
    // launches, event records and stream waits), not every samplable
    // symbol: each attach and detach writes to the process's code.
    let line = line_with(&stderr, "samplable probes on average");
    // "...; N on slices attached A of S samplable probes on average"
    let tail = line.rsplit_once(';').unwrap().1;
    let n: Vec<f64> = tail
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (slices, attached, symbols) = (n[0], n[1], n[2]);
    assert!(
        symbols >= 10.0 && slices >= 1.0 && attached < symbols / 2.0,
        "{line}"
    );

    // --verbose names the always-traced APIs that set the budget's floor,
    // at their rate: "... over S s, P% of one CPU by the model: API N/s (x%), ...".
    let line = line_with(&stderr, "always-traced calls of pid");
    let span = figure(line, " over ", " s,");
    let rate = figure(line, "cuStreamSynchronize ", "/s");
    let syncs = seen["cuStreamSynchronize"] as f64;
    assert!(
        (rate * span / syncs - 1.0).abs() < 0.05,
        "{syncs} stream synchronisations seen: {line}"
    );
    assert!(!line.contains("cuLaunchKernel"), "{line}");

    // Launches: fewer seen, the estimate near the known count.
    let rows = api_rows(&run.summary, run.pid);
    let (shown, seen_launches, estimated) = rows["cuLaunchKernel"];
    let known = passes * LAUNCHES_PER_PASS;
    let error = shown as f64 / known as f64 - 1.0;
    eprintln!(
        "launches: {known} made, {seen_launches} seen, {shown} estimated ({:+.1}%), traced share {:.1}%",
        error * 100.0,
        share * 100.0
    );
    assert!(estimated);
    assert!(
        seen_launches < known * 9 / 10,
        "{seen_launches} of {known} seen"
    );
    assert!(error.abs() < 0.10, "estimate {shown} vs {known}");
    // Capture status queries are sampled and estimated like launches.
    for api in ["cuStreamIsCapturing", "cuStreamGetCaptureInfo_v3"] {
        let (shown, seen, estimated) = rows[api];
        let known = passes * CAPTURE_CHECKS_PER_PASS;
        assert!(estimated, "{api} not estimated");
        assert!(seen < known * 9 / 10, "{api}: {seen} of {known} seen");
        let error = shown as f64 / known as f64 - 1.0;
        assert!(error.abs() < 0.10, "{api}: estimate {shown} vs {known}");
    }
    // Rare APIs are never estimates.
    for (api, (_, _, est)) in &rows {
        if per_pass_rare(api) {
            assert!(!est, "{api} marked estimated");
        }
    }

    // The timeline marks the sampled windows of this process.
    let records: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "sampling" && e["pid"] == run.pid)
        .collect();
    assert!(!records.is_empty(), "no sampling records");
    assert!(records
        .iter()
        .all(|r| r["on_fraction"].as_f64().unwrap() < 1.0 || r["returns"] == false));
    assert!(records
        .iter()
        .any(|r| r["apis"]["cuLaunchKernel"]["estimated"].as_f64().is_some()));

    // `gputrace stats` of the timeline says so and scales the same way.
    let stats = run_gputrace(&["stats", run.out.to_str().unwrap(), "--format", "json"]);
    assert!(stats.status.success(), "{}", stats.stderr_text());
    let s: Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(s["sampling"]["sampled"], true);
    assert_eq!(
        s["sampling"]["probe_cost_ratio"],
        sampling["probe_cost_ratio"]
    );
    let (stats_shown, stats_seen, stats_est) = api_rows(&s, run.pid)["cuLaunchKernel"];
    assert_eq!(stats_seen, seen_launches);
    assert!(stats_est);
    assert!(
        (stats_shown as f64 / shown as f64 - 1.0).abs() < 0.01,
        "{stats_shown} vs {shown}"
    );
}

/// A loop with few rare calls whose launches come in bursts (1,000
/// launches, then a synchronisation sequence that waits 30 ms: 3 rare
/// calls a step): a slice holds a varying share of bursts, so time scales
/// it badly (single runs erred by −9% to +6%); the calls seen between two
/// synchronisations of the same kind in one slice are whole steps.
#[test]
fn bursty_launches_with_few_rare_calls_are_estimated_from_whole_steps() {
    const LAUNCHES: u64 = 1_000;
    let args = [
        "--launches",
        "1000",
        "--syncs",
        "1",
        "--sync-us",
        "10000",
        "--duration-ms",
        "8000",
    ];
    let (run, stderr) = budget_run("budget-bursty", &args, None);
    assert_eq!(run.summary["sampling"]["sampled"], true, "{stderr}");
    // The pass: the launches, then 5 sync calls.
    assert_eq!(run.done % (LAUNCHES + 5), 0, "{} calls", run.done);
    let known = run.done / (LAUNCHES + 5) * LAUNCHES;
    let line = line_with(&stderr, "by whole steps seen while on:");
    let by_steps = figure(line, "by whole steps seen while on: ", ",");
    assert!(by_steps >= 1.0, "{line}");
    let (shown, seen, estimated) = api_rows(&run.summary, run.pid)["cuLaunchKernel"];
    assert!(estimated);
    assert!(seen < known / 2, "{seen} of {known} seen");
    let error = shown as f64 / known as f64 - 1.0;
    eprintln!(
        "{line}\nlaunches: {known} made, {seen} seen, {shown} estimated ({:+.1}%)",
        error * 100.0
    );
    assert!(error.abs() < 0.05, "estimate {shown} vs {known}: {line}");
    // The last sampling record observed every launch the timeline holds,
    // those seen while a slice's probes were being attached or detached
    // too: the summary scales the calls it saw by estimated over observed
    // (counting only those seen while on put up to +4% on the estimate).
    let last = run
        .events
        .iter()
        .filter(|e| e["type"] == "sampling" && e["pid"] == run.pid)
        .max_by_key(|e| e["ts_ns"].as_u64())
        .expect("no sampling record");
    assert_eq!(
        last["apis"]["cuLaunchKernel"]["observed"].as_u64(),
        Some(seen),
        "{last}"
    );
}

/// A Perfetto or Chrome trace made under a budget carries its sampling records:
/// `stats` of it marks the launches estimated and scales them as the live
/// summary does.
#[test]
fn stats_of_sampled_perfetto_and_chrome_traces_scale() {
    for ext in ["pftrace", "json"] {
        stats_of_a_sampled_trace_scales(ext);
    }
}

fn stats_of_a_sampled_trace_scales(ext: &str) {
    let mut args = PASS.to_vec();
    args.extend(["--sync-us", "2000", "--duration-ms", "4000"]);
    let run = trace_run_to(
        &format!("budget-{ext}"),
        &format!("t.{ext}"),
        &workload_bin(),
        &args,
        &["--overhead-budget", "1", "--summary", "json"],
    );
    let live: Value = serde_json::from_str(run.gputrace.stdout.trim()).unwrap();
    let stats = run_gputrace(&["stats", run.out.to_str().unwrap(), "--format", "json"]);
    assert!(stats.status.success(), "{}", stats.stderr_text());
    let s: Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(live["sampling"]["sampled"], true, "{}", live["sampling"]);
    assert_eq!(s["sampling"]["sampled"], true, "{}", s["sampling"]);
    let ratio = s["sampling"]["probe_cost_ratio"].as_f64();
    assert!(
        ratio.is_some_and(|k| (1.0..=4.0).contains(&k)),
        "{ext}: {}",
        s["sampling"]
    );
    let (live_shown, live_seen, _) = api_rows(&live, run.pid)["cuLaunchKernel"];
    let (shown, seen, estimated) = api_rows(&s, run.pid)["cuLaunchKernel"];
    assert!(estimated);
    assert_eq!(seen, live_seen);
    assert!(
        (shown as f64 / live_shown as f64 - 1.0).abs() < 0.01,
        "{ext}: {shown} vs {live_shown}"
    );
}

#[test]
fn a_budget_not_exceeded_leaves_everything_exact() {
    let mut args = PASS.to_vec();
    args.extend(["--sync-us", "2000", "--duration-ms", "3000"]);
    let run = trace_workload("budget-exact", &args, &["--overhead-budget", "100"]);
    let sampling = &run.summary["sampling"];
    assert_eq!(sampling["sampled"], false, "{sampling}");
    assert_eq!(sampling["traced_share"], 1.0);
    assert!(run.events.iter().all(|e| e["type"] != "sampling"));
    let rows = api_rows(&run.summary, run.pid);
    assert!(rows.values().all(|r| !r.2), "{rows:?}");
    let seen = counts(&run.events);
    let passes = seen["cuMemAllocAsync"];
    assert!(passes > 10);
    assert_eq!(seen["cuLaunchKernel"], passes * LAUNCHES_PER_PASS);
    // Latencies are measured (return probes stayed).
    assert!(of_api(&run.events, "cuLaunchKernel")
        .iter()
        .all(|e| e["dur_ns"].as_u64().is_some()));
}

#[test]
fn bad_budgets_are_usage_errors() {
    for (args, bad) in [
        (vec!["--pid", "1", "--overhead-budget", "-1"], "-1"),
        (vec!["--pid", "1", "--overhead-budget", "abc"], "abc"),
        (vec!["--pid", "1", "--overhead-budget", "101"], "101"),
        (vec!["daemon", "--overhead-budget", "-1"], "-1"),
        (vec!["top", "--overhead-budget", "200"], "200"),
    ] {
        let f = run_gputrace(&args);
        assert_eq!(f.status.code(), Some(2), "{args:?}: {}", f.stderr_text());
        let text = f.stderr_text();
        assert_eq!(text.trim().lines().count(), 1, "{text}");
        assert!(
            text.contains(&format!("`{bad}` is not a percentage from 0 to 100")),
            "{text}"
        );
    }
}

/// The daemon's default budget: a busy process is sampled, its gauge says
/// so, and the hit cost of both prologue classes and the in-place ratio
/// are exported.
#[test]
fn the_daemon_samples_a_busy_process_and_exports_its_costs() {
    use gputrace_tests::node::*;
    use std::time::Duration;

    let d = Daemon::start(&["--overhead-budget", "1"], &[]);
    let mut args = PASS.to_vec();
    args.extend(["--sync-us", "2000", "--duration-ms", "8000"]);
    let mut w = Workload::start(&args);
    w.go();
    let pid = w.pid.to_string();
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        sample(
            m,
            "gputrace_sampling_ratio",
            &[("pid", &pid), ("family", "launch")],
        )
        .is_some_and(|r| r < 1.0)
    });
    let (status, _) = w.finish();
    assert!(status.success());
    let ratio = sample(
        &m,
        "gputrace_sampling_ratio",
        &[("pid", &pid), ("family", "launch")],
    )
    .unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    for probes in ["entry", "entry_return"] {
        for prologue in ["stepped", "emulated"] {
            let s = sample(
                &m,
                "gputrace_probe_hit_cost_seconds",
                &[("probes", probes), ("prologue", prologue)],
            );
            assert!(
                s.is_some_and(|v| v > 0.0 && v < 1e-3),
                "{probes} {prologue}: {s:?}"
            );
        }
    }
    // The in-place ratio the hits are charged at: 1× to 4×.
    let k = sample(&m, "gputrace_probe_cost_ratio", &[]);
    assert!(k.is_some_and(|k| (1.0..=4.0).contains(&k)), "{k:?}");
}

/// Kernel nodes of each graph record: exec handle → (source, count).
fn graph_records(events: &[Value]) -> Vec<(String, String, usize)> {
    events
        .iter()
        .filter(|e| e["type"] == "graph")
        .map(|e| {
            let kernels = e["nodes"]
                .as_array()
                .map_or(0, |n| n.iter().filter(|k| k["kind"] == "kernel").count());
            (
                e["exec"].as_str().unwrap_or("").to_string(),
                e["source"].as_str().unwrap_or("").to_string(),
                kernels,
            )
        })
        .collect()
}

/// Stream captures made while the budget has the launch probes off record
/// launches gputrace never sees: such a graph is not followed short from
/// the calls seen; its executable graph is read from the workload's memory
/// (the four kernels of the simulated capture), and that is said once.
/// Each capture sleeps 40 ms after its first launch, so that the probes go
/// off or on during many of them.
#[test]
fn graphs_captured_while_sampling_are_read_from_memory() {
    let mut args = PASS.to_vec();
    args.extend([
        "--graph-replays",
        "1",
        "--capture-sleep-ms",
        "40",
        "--graph-linger-ms",
        "60",
        "--sync-us",
        "2000",
        "--duration-ms",
        "6000",
    ]);
    let (run, stderr) = budget_run("budget-graphs", &args, None);
    assert_eq!(run.summary["sampling"]["sampled"], true, "{stderr}");
    let records = graph_records(&run.events);
    let mut by: BTreeMap<(String, usize), usize> = BTreeMap::new();
    for (_, source, k) in &records {
        *by.entry((source.clone(), *k)).or_default() += 1;
    }
    eprintln!("graph records (source, kernel nodes) -> count: {by:?}");
    // The workload's three executable graphs have 4 (captured) and 5
    // kernels (built node by node, and its clone).
    for ((source, k), n) in &by {
        assert!(
            *k >= 4 && (source == "traced" || source == "memory"),
            "{n} records from {source:?} with {k} kernels: {by:?}\n{stderr}"
        );
    }
    assert!(
        by.get(&("memory".to_string(), 4)).is_some_and(|n| *n > 0),
        "no captured graph read from memory: {by:?}"
    );
    assert_eq!(
        stderr
            .matches("while the overhead budget had the launch probes off or not all attached")
            .count(),
        1,
        "{stderr}"
    );
}

/// A budget starts from the in-place cost ratio a budget before read on
/// this machine (kept in the cache directory beside the hit cost), until
/// it has read enough itself; the ratio is shown as such.
#[test]
fn a_budget_starts_from_the_ratio_read_before_on_this_machine() {
    use std::os::unix::fs::PermissionsExt;
    let cache = scratch("budget-cache").join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut args = PASS.to_vec();
    args.extend(["--sync-us", "2000", "--duration-ms", "3000"]);
    // The first run measures the hit cost and keeps it under this
    // machine's key.
    let (_, first) = budget_run("budget-cache-first", &args, Some(&cache));
    let costs: Value =
        serde_json::from_slice(&std::fs::read(cache.join("probe-hit-cost-v1.json")).unwrap())
            .unwrap();
    let key = costs.as_object().unwrap().keys().next().unwrap().clone();
    let line = line_with(&first, "costliest process");
    assert!(
        !line.contains("as last read in place on this machine"),
        "{line}"
    );
    // A ratio a budget before read on this machine.
    let kept = cache.join("probe-cost-in-place-v1.json");
    std::fs::write(&kept, serde_json::json!({ key: 2.5 }).to_string()).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_, second) = budget_run("budget-cache-second", &args, Some(&cache));
    let line = line_with(&second, "costliest process");
    assert!(
        line.contains("hits cost 2.50× the measured figure as last read in place on this machine"),
        "{line}"
    );
    // Each always-traced call is charged 2.5× what the first run's were
    // (the same calls of the same workload: a share of one CPU a second,
    // over their rate).
    let charge =
        |l: &str| figure(l, "entry only (", "%") / figure(l, "sampled calls/s and", "other");
    let (a, b) = (charge(line_with(&first, "costliest process")), charge(line));
    assert!(
        (b / a / 2.5 - 1.0).abs() < 0.15,
        "{a} then {b} per call: {line}"
    );
}
