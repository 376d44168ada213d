//! The summary's bounded tables: past each bound the rest is summed in
//! one row, counted, and said in the text and JSON summaries; totals
//! still add up.

use std::sync::Arc;

use super::*;
use crate::model::call::{Launch, Nccl};
use crate::summary::render::{render_json, render_text};

fn call(pid: u32, api: &'static str, args: Args) -> Call {
    Call {
        ts_ns: 1_000,
        dur_ns: Some(10),
        pid,
        tid: pid,
        comm: Arc::from("job"),
        api,
        family: None,
        ret: Some(0),
        stack: None,
        args,
    }
}

fn launch(pid: u32, name: &str, grid: u32) -> Call {
    call(
        pid,
        "cuLaunchKernel",
        Args::Launch(Launch {
            function: 1,
            stub: 0,
            kernel: Some(Arc::from(name)),
            grid: [grid, 1, 1],
            block: [128, 1, 1],
            shared_mem_bytes: 0,
            stream: 0,
            captured: None,
        }),
    )
}

fn allreduce(pid: u32, comm: u64) -> Call {
    call(
        pid,
        "ncclAllReduce",
        Args::Nccl(Nccl {
            op: NcclOp::AllReduce,
            count: 4,
            datatype: 7,
            redop: Some(0),
            root: None,
            peer: None,
            comm,
            stream: 0,
            ident: Default::default(),
            unaligned: None,
        }),
    )
}

#[test]
fn kernel_names_past_the_bound_are_summed_and_said() {
    let mut s = Summary::default();
    let extra = 25;
    for i in 0..MAX_KERNEL_NAMES + extra {
        s.record(&launch(1, &format!("k{i}"), 1));
        if i < 10 {
            // The first names run twice: the kept rows.
            s.record(&launch(1, &format!("k{i}"), 1));
        }
    }
    let p = &s.processes[&1];
    assert_eq!(p.kernels.len(), MAX_KERNEL_NAMES);
    assert_eq!(p.kernels.overflow().keys(), extra as u64);
    assert_eq!(p.kernels.other().unwrap().launches, extra as u64);
    let all = (MAX_KERNEL_NAMES + extra + 10) as u64;
    assert_eq!(p.kernel_runs(), all);
    assert_eq!(s.total().kernel_runs(), all);

    let text = render_text(&s);
    let line = format!("... and {extra} more kernel names (past the first 10,000), summed");
    assert!(text.contains(&line), "{}", &text[..2000]);
    let j = render_json(&s);
    let other = &j["processes"][0]["kernels_other"];
    assert_eq!(other["names"], extra as u64);
    assert_eq!(other["names_exact"], true);
    assert_eq!(other["launches"], extra as u64);
    assert_eq!(j["total"]["kernels_other"]["launches"], extra as u64);
    assert_eq!(
        j["processes"][0]["kernels"].as_array().unwrap().len(),
        MAX_KERNEL_NAMES
    );
}

#[test]
fn the_total_of_many_processes_keeps_the_bound() {
    let mut s = Summary::default();
    // Two processes, each within the bound; together past it.
    let half = MAX_KERNEL_NAMES / 2 + 10;
    for pid in [1, 2] {
        for i in 0..half {
            s.record(&launch(pid, &format!("p{pid}k{i}"), 1));
        }
    }
    assert!(s.processes.values().all(|p| p.kernels.other().is_none()));
    let t = s.total();
    assert_eq!(t.kernels.len(), MAX_KERNEL_NAMES);
    assert_eq!(t.kernels.overflow().keys(), 20);
    assert_eq!(t.kernel_runs(), 2 * half as u64);
}

#[test]
fn kernel_configurations_are_bounded_and_the_frequent_one_stays() {
    let mut s = Summary::default();
    for i in 0..10_000u32 {
        // Grid 7 in every fourth launch; every other launch a new grid.
        let grid = if i % 4 == 0 { 7 } else { 1_000 + i };
        s.record(&launch(1, "k", grid));
    }
    let k = s.processes[&1].kernels.get(&Some(Arc::from("k"))).unwrap();
    assert!(k.configs.len() <= MAX_CONFIGS);
    assert_eq!(k.top_config(), Some(([7, 1, 1], [128, 1, 1])));
    assert_eq!(k.launches, 10_000);
}

#[test]
fn nccl_rows_past_the_bound_are_summed_and_said() {
    let mut s = Summary::default();
    let extra = 3;
    for comm in 0..(MAX_NCCL_ROWS + extra) as u64 {
        s.record(&allreduce(1, comm + 1));
    }
    let p = &s.processes[&1];
    assert_eq!(p.nccl.len(), MAX_NCCL_ROWS);
    assert_eq!(p.nccl.overflow().keys(), extra as u64);
    let calls: u64 = p.nccl.all_values().map(|n| n.count).sum();
    assert_eq!(calls, (MAX_NCCL_ROWS + extra) as u64);
    let text = render_text(&s);
    assert!(
        text.contains(
            "... and 3 more (operation, communicator) rows (past the first 4,096), summed: 3 calls"
        ),
        "{}",
        &text[..2000]
    );
    let j = render_json(&s);
    assert_eq!(j["processes"][0]["nccl_other"]["rows"], 3);
    assert_eq!(j["processes"][0]["nccl_other"]["count"], 3);
}

#[test]
fn processes_past_the_bound_are_summed_and_said() {
    let mut s = Summary::default();
    let extra = 5u32;
    for pid in 1..=MAX_PROCESSES as u32 + extra {
        s.record(&launch(pid, "k", 1));
        s.record(&launch(pid, "k", 1));
    }
    assert_eq!(s.processes.len(), MAX_PROCESSES);
    let other = s.other_processes.as_deref().unwrap();
    assert_eq!(other.events, 2 * u64::from(extra));
    assert_eq!(s.processes_over.keys(), u64::from(extra));
    let all = 2 * (MAX_PROCESSES as u64 + u64::from(extra));
    assert_eq!(s.events(), all);
    assert_eq!(s.total().kernel_runs(), all);
    let text = render_text(&s);
    assert!(
        text.starts_with("gputrace summary: 1029 processes"),
        "{}",
        &text[..200]
    );
    assert!(
        text.contains("== 5 other processes (past the first 1,024), summed =="),
        "no other processes section"
    );
    let j = render_json(&s);
    assert_eq!(j["other_processes"]["processes"], 5);
    assert_eq!(j["other_processes"]["events"], 10);
    assert!(j["other_processes"]["pid"].is_null());
    assert_eq!(j["events"], all);
}

#[test]
fn a_normal_summary_says_no_overflow() {
    let mut s = Summary::default();
    s.record(&launch(1, "k", 1));
    s.record(&allreduce(1, 9));
    let text = render_text(&s);
    assert!(!text.contains("more kernel names") && !text.contains("other processes"));
    let j = render_json(&s);
    for f in ["kernels_other", "nccl_other"] {
        assert!(j["processes"][0][f].is_null(), "{f}");
    }
    assert!(j["other_processes"].is_null());
    assert!(j["api_names_other"].is_null());
}
