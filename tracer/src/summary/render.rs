//! Rendering a [`Summary`] as text (human units) or JSON (raw numbers).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::nccl::hash::format_comm_id;
use crate::summary::NcclStats;
use crate::summary::ProcessSummary;
use crate::summary::Summary;
use crate::summary::MAX_KERNEL_NAMES;
use crate::summary::MAX_NCCL_ROWS;
use crate::summary::MAX_PROCESSES;
use crate::units::fmt_bytes;
use crate::units::fmt_count;
use crate::units::fmt_ns;

/// "Top call sites" (`--stacks`): the APIs with the most host time, and
/// each one's top sites.
const SITES_APIS: usize = 8;
const SITES_PER_API: usize = 5;

fn opt_ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), fmt_ns)
}

fn dims(d: [u32; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

fn lost_line(s: &Summary) -> String {
    let l = &s.lost;
    let lost = l.events_lost();
    if lost == 0 {
        "Events lost: 0".to_string()
    } else {
        format!(
            "EVENTS LOST: {lost} calls are missing from this trace (ring buffer full: {}, in-flight map full: {}, entry evicted: {})",
            l.ring_full, l.inflight_full, l.unpaired
        )
    }
}

/// The text summary.
pub fn render_text(s: &Summary) -> String {
    let mut out = String::new();
    let procs = s.processes.len() as u64 + s.processes_over.keys();
    let total = s.total();
    let span = total.last_ts.saturating_sub(total.first_ts);
    let _ = writeln!(
        out,
        "gputrace summary: {} process{}, {} calls in {}, {} lost",
        procs,
        if procs == 1 { "" } else { "es" },
        s.events(),
        fmt_ns(span as f64),
        s.lost.events_lost()
    );
    if s.unreadable > 0 {
        let _ = writeln!(out, "{} lines of the input could not be read", s.unreadable);
    }
    if let Some(sampling) = &s.sampling {
        let _ = writeln!(out, "{}", sampling.line());
    }
    if !s.api_names_over.is_empty() {
        let _ = writeln!(
            out,
            "{} more API names not in gputrace's catalogue (past the first {}) counted as `{}`: {} calls",
            s.api_names_over.keys_text(),
            crate::schema::parse::MAX_UNKNOWN_APIS,
            crate::schema::parse::OTHER_APIS,
            fmt_count(s.api_names_over.entries)
        );
    }
    for p in s.processes.values() {
        let _ = writeln!(out, "\n== Process {} ({}) ==", p.pid, p.comm);
        for (ts, comm) in &p.execs {
            let _ = writeln!(
                out,
                "Ran a new program at {} UTC (exec): {comm}; the calls after are its",
                crate::units::fmt_clock(*ts)
            );
        }
        render_process(&mut out, p);
    }
    if let Some(p) = &s.other_processes {
        let _ = writeln!(
            out,
            "\n== {} other processes (past the first {}), summed ==",
            s.processes_over.keys_text(),
            fmt_count(MAX_PROCESSES as u64)
        );
        render_process(&mut out, p);
    }
    if procs > 1 {
        let _ = writeln!(out, "\n== All processes ==");
        render_process(&mut out, &total);
    }
    s.nccl.render_text(&mut out);
    let _ = writeln!(out, "\n{}", lost_line(s));
    if s.lost.read_failed > 0 {
        let _ = writeln!(
            out,
            "Argument reads that failed (calls kept, arguments zero): {}",
            s.lost.read_failed
        );
    }
    if s.lost.stacks_dropped > 0 {
        let _ = writeln!(
            out,
            "Call stacks not captured (calls kept, without a stack): {}",
            s.lost.stacks_dropped
        );
    }
    out
}

fn render_process(out: &mut String, p: &ProcessSummary) {
    render_api(out, p);
    render_kernels(out, p);
    render_graphs(out, p);
    render_copies(out, p);
    render_memory(out, p);
    render_nccl(out, p);
    crate::summary::gemm::render::render_text(out, &p.gemms);
    crate::summary::collectives::render::render_text(out, &p.collectives);
    if let Some(g) = &p.gpu {
        crate::summary::gpu::render_text(out, g, p.window_ns(), p.is_total);
    }
    p.sites.render_text(out, SITES_APIS, SITES_PER_API, fmt_ns);
}

/// The API table: host-side time per function.
fn render_api(out: &mut String, p: &ProcessSummary) {
    let rows = p.api_rows();
    let all_ns: u64 = rows.iter().map(|r| r.1.total_ns).sum();
    let _ = writeln!(out, "\nCUDA/NCCL API calls (host-side time):");
    let _ = writeln!(
        out,
        " {:>8}  {:>10}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  Name",
        "Time (%)", "Total Time", "Calls", "Avg", "Med", "Min", "Max", "StdDev"
    );
    let _ = writeln!(
        out,
        " {:->8}  {:->10}  {:->9}  {:->10}  {:->10}  {:->10}  {:->10}  {:->10}  {:->4}",
        "", "", "", "", "", "", "", "", ""
    );
    for (name, a) in &rows {
        let pct = if all_ns > 0 {
            a.total_ns as f64 * 100.0 / all_ns as f64
        } else {
            0.0
        };
        let timed = a.timed > 0;
        let failed = if a.failed > 0 {
            format!("  ({} failed)", a.failed)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            " {:>8}  {:>10}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {}{}",
            if timed {
                format!("{pct:.1}")
            } else {
                "-".into()
            },
            if timed {
                fmt_ns(a.total_ns as f64)
            } else {
                "-".into()
            },
            match a.estimated {
                Some(_) => format!("~{}", a.shown_calls()),
                None => a.calls.to_string(),
            },
            opt_ns(a.avg_ns()),
            opt_ns(a.median_ns().map(|v| v as f64)),
            if timed {
                fmt_ns(a.min_ns as f64)
            } else {
                "-".into()
            },
            if timed {
                fmt_ns(a.max_ns as f64)
            } else {
                "-".into()
            },
            opt_ns(a.stddev_ns()),
            name,
            failed
        );
    }
}

/// Kernel launches by name, with graph launches and the commonest grid.
fn render_kernels(out: &mut String, p: &ProcessSummary) {
    let kernels = p.kernel_rows();
    if !p.kernels.is_empty() {
        let runs = p.kernel_runs();
        let _ = writeln!(out, "\nKernel launches:");
        let _ = writeln!(
            out,
            " {:>9}  {:>9}  {:>9}  {:>12}  {:>12}  Name",
            "Launches", "Graph", "Share (%)", "Grid", "Block"
        );
        let _ = writeln!(
            out,
            " {:->9}  {:->9}  {:->9}  {:->12}  {:->12}  {:->4}",
            "", "", "", "", "", ""
        );
        for (name, k) in kernels {
            let (grid, block) = k
                .top_config()
                .map_or(("-".into(), "-".into()), |(g, b)| (dims(g), dims(b)));
            let _ = writeln!(
                out,
                " {:>9}  {:>9}  {:>9.1}  {:>12}  {:>12}  {}",
                k.launches,
                k.graph_launches,
                k.runs() as f64 * 100.0 / runs.max(1) as f64,
                grid,
                block,
                name.as_deref().unwrap_or("(unknown)")
            );
        }
        if let Some(k) = p.kernels.other() {
            let _ = writeln!(
                out,
                " {:>9}  {:>9}  {:>9.1}  {:>12}  {:>12}  ... and {} more kernel names (past the first {}), summed",
                k.launches,
                k.graph_launches,
                k.runs() as f64 * 100.0 / runs.max(1) as f64,
                "-",
                "-",
                p.kernels.overflow().keys_text(),
                fmt_count(MAX_KERNEL_NAMES as u64)
            );
        }
    }
}

/// CUDA graphs: launches, kernels run, graphs not known, captured calls.
fn render_graphs(out: &mut String, p: &ProcessSummary) {
    let g = &p.graphs;
    if g.launches > 0 || g.captured > 0 {
        let _ = write!(
            out,
            "\nCUDA graphs: {} graph launches ran {} kernels",
            g.launches, g.kernels
        );
        if g.opaque > 0 {
            let _ = write!(
                out,
                "; {} launches of graphs whose nodes are not known (built before gputrace attached)",
                g.opaque
            );
        }
        if g.captured > 0 {
            let _ = write!(
                out,
                "; {} calls recorded by stream capture (not run, not counted)",
                g.captured
            );
        }
        out.push('\n');
    }
}

/// Copies and sets by direction (host side).
fn render_copies(out: &mut String, p: &ProcessSummary) {
    if !p.copies.is_empty() {
        let _ = writeln!(out, "\nMemory copies and sets:");
        let _ = writeln!(
            out,
            " {:>9}  {:>9}  {:>12}  {:>12}  {:>10}",
            "Direction", "Count", "Total Bytes", "Avg Size", "Host Time"
        );
        let _ = writeln!(
            out,
            " {:->9}  {:->9}  {:->12}  {:->12}  {:->10}",
            "", "", "", "", ""
        );
        for (d, c) in &p.copies {
            let _ = writeln!(
                out,
                " {:>9}  {:>9}  {:>12}  {:>12}  {:>10}",
                d.name(),
                c.count,
                fmt_bytes(c.bytes as f64),
                fmt_bytes(c.bytes as f64 / c.count.max(1) as f64),
                fmt_ns(c.total_ns as f64)
            );
        }
    }
}

/// Allocations and device memory in use.
fn render_memory(out: &mut String, p: &ProcessSummary) {
    let m = &p.memory;
    if m.allocations > 0 || m.frees > 0 {
        let _ = writeln!(
            out,
            "\nAllocations: {} ({} asked), {} frees; device memory in use at end {}, peak {}",
            m.allocations,
            fmt_bytes(m.allocated_bytes as f64),
            m.frees,
            fmt_bytes(p.live_bytes() as f64),
            fmt_bytes(p.peak_bytes() as f64)
        );
    }
}

/// NCCL by operation and communicator (host side).
fn render_nccl(out: &mut String, p: &ProcessSummary) {
    if p.nccl.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nNCCL:");
    let _ = writeln!(
        out,
        " {:<14}  {:>14}  {:>18}  {:>9}  {:>7}  {:>12}  {:>12}  {:>10}",
        "Operation", "Comm", "Comm ID", "Ranks", "Calls", "Total Bytes", "Avg Size", "Host Time"
    );
    let _ = writeln!(
        out,
        " {:-<14}  {:->14}  {:->18}  {:->9}  {:->7}  {:->12}  {:->12}  {:->10}",
        "", "", "", "", "", "", "", ""
    );
    for ((op, comm), n) in p.nccl_rows() {
        let (nranks, rank) = nccl_ranks(p, *comm, n);
        let ranks = match (nranks, rank) {
            (Some(nranks), Some(rank)) => format!("{rank}/{nranks}"),
            (Some(nranks), None) => format!("{nranks}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            " {:<14}  {:>14}  {:>18}  {:>9}  {:>7}  {:>12}  {:>12}  {:>10}",
            op.name(),
            format!("{comm:#x}"),
            n.comm_id.map_or("-".into(), format_comm_id),
            ranks,
            n.count,
            fmt_bytes(n.bytes as f64),
            fmt_bytes(n.bytes as f64 / n.count.max(1) as f64),
            fmt_ns(n.total_ns as f64)
        );
    }
    if let Some(n) = p.nccl.other() {
        let _ = writeln!(
            out,
            " ... and {} more (operation, communicator) rows (past the first {}), summed: {} calls, {}, host time {}",
            p.nccl.overflow().keys_text(),
            fmt_count(MAX_NCCL_ROWS as u64),
            fmt_count(n.count),
            fmt_bytes(n.bytes as f64),
            fmt_ns(n.total_ns as f64)
        );
    }
}

/// (nranks, rank) of a communicator's row: what its init said, else what
/// its calls said (read from its memory).
fn nccl_ranks(p: &ProcessSummary, comm: u64, n: &NcclStats) -> (Option<i64>, Option<i64>) {
    match p.comms.get(&comm) {
        Some((nranks, rank)) => (Some(*nranks), rank.or(n.rank.map(i64::from))),
        None => (n.nranks.map(i64::from), n.rank.map(i64::from)),
    }
}

fn process_json(p: &ProcessSummary) -> Value {
    let rows = p.api_rows();
    let all_ns: u64 = rows.iter().map(|r| r.1.total_ns).sum();
    let apis: Vec<Value> = rows
        .iter()
        .map(|(name, a)| {
            json!({
                "name": name,
                "calls": a.shown_calls(),
                "calls_estimated": a.estimated.is_some(),
                "calls_seen": a.calls,
                "failed": a.failed,
                "time_pct": if all_ns > 0 { a.total_ns as f64 * 100.0 / all_ns as f64 } else { 0.0 },
                "total_ns": if a.timed > 0 { Some(a.total_ns) } else { None },
                "avg_ns": a.avg_ns(),
                "med_ns": a.median_ns(),
                "min_ns": if a.timed > 0 { Some(a.min_ns) } else { None },
                "max_ns": if a.timed > 0 { Some(a.max_ns) } else { None },
                "stddev_ns": a.stddev_ns(),
            })
        })
        .collect();
    let kernels = p.kernel_rows();
    let runs = p.kernel_runs();
    let kernels: Vec<Value> = kernels
        .iter()
        .map(|(name, k)| {
            let cfg = k.top_config();
            json!({
                "name": name.as_deref(),
                "launches": k.launches,
                "graph_launches": k.graph_launches,
                "share_pct": k.runs() as f64 * 100.0 / runs.max(1) as f64,
                "grid": cfg.map(|c| c.0),
                "block": cfg.map(|c| c.1),
            })
        })
        .collect();
    let copies: Vec<Value> = p
        .copies
        .iter()
        .map(|(d, c)| {
            json!({"direction": d.name(), "count": c.count, "bytes": c.bytes,
                   "avg_bytes": c.bytes as f64 / c.count.max(1) as f64, "host_ns": c.total_ns})
        })
        .collect();
    let kernels_other = p.kernels.other().map(|k| {
        json!({
            "names": p.kernels.overflow().keys(),
            "names_exact": p.kernels.overflow().exact(),
            "launches": k.launches,
            "graph_launches": k.graph_launches,
            "share_pct": k.runs() as f64 * 100.0 / runs.max(1) as f64,
        })
    });
    let nccl_other = p.nccl.other().map(|n| {
        json!({
            "rows": p.nccl.overflow().keys(),
            "rows_exact": p.nccl.overflow().exact(),
            "count": n.count, "bytes": n.bytes, "host_ns": n.total_ns,
        })
    });
    let nccl: Vec<Value> = p
        .nccl_rows()
        .into_iter()
        .map(|((op, comm), n)| {
            let (nranks, rank) = nccl_ranks(p, *comm, n);
            json!({"op": op.name(), "comm": format!("{comm:#x}"),
                   "comm_id": n.comm_id.map(format_comm_id), "nranks": nranks, "rank": rank,
                   "count": n.count, "bytes": n.bytes, "host_ns": n.total_ns})
        })
        .collect();
    json!({
        "pid": if p.is_total || p.pid == 0 { None } else { Some(p.pid) },
        "comm": p.comm,
        "events": p.events,
        "first_ts_ns": p.first_ts,
        "last_ts_ns": p.last_ts,
        "apis": apis,
        "kernels": kernels,
        "kernels_other": kernels_other,
        "copies": copies,
        "graphs": {
            "launches": p.graphs.launches,
            "opaque_launches": p.graphs.opaque,
            "kernels": p.graphs.kernels,
            "captured": p.graphs.captured,
        },
        "memory": {
            "allocations": p.memory.allocations,
            "allocated_bytes": p.memory.allocated_bytes,
            "frees": p.memory.frees,
            "live_bytes": p.live_bytes(),
            "peak_bytes": p.peak_bytes(),
        },
        "nccl": nccl,
        "nccl_other": nccl_other,
        "call_sites": p.sites.to_json(SITES_PER_API),
        "execs": p.execs.iter().map(|(ts, comm)| json!({"ts_ns": ts, "comm": comm})).collect::<Vec<_>>(),
        "gpu": p.gpu.as_ref().map(|g| crate::summary::gpu::render_json(g, if p.is_total { 0 } else { p.window_ns() })),
        "gemms": (!p.gemms.is_empty()).then(|| crate::summary::gemm::render::render_json(&p.gemms)),
        "collectives": (!p.collectives.is_empty()).then(|| crate::summary::collectives::render::render_json(&p.collectives)),
    })
}

/// The JSON summary; also the last line of a `.jsonl` file.
pub fn render_json(s: &Summary) -> Value {
    let procs: Vec<Value> = s.processes.values().map(process_json).collect();
    let other_processes = s.other_processes.as_deref().map(|p| {
        let mut v = process_json(p);
        v["processes"] = Value::from(s.processes_over.keys());
        v["processes_exact"] = Value::from(s.processes_over.exact());
        v
    });
    let api_names_other = (!s.api_names_over.is_empty()).then(|| {
        json!({
            "names": s.api_names_over.keys(),
            "names_exact": s.api_names_over.exact(),
            "calls": s.api_names_over.entries,
        })
    });
    let total = s.total();
    json!({
        "type": "summary",
        "events": s.events(),
        "lost": s.lost.events_lost(),
        "lost_detail": s.lost,
        "unreadable_lines": s.unreadable,
        "duration_ns": total.last_ts.saturating_sub(total.first_ts),
        "processes": procs,
        "other_processes": other_processes,
        "api_names_other": api_names_other,
        "total": process_json(&total),
        "nccl_ranks": s.nccl.ranks_json(),
        "nccl_comms": s.nccl.comms_json(),
        "nccl_stalls": s.nccl.stalls_json(),
        "nccl_unaligned": s.nccl.unaligned_json(),
        "nccl_other": s.nccl.over_json(),
        "sampling": s.sampling.as_ref().map(|x| x.to_json()),
    })
}
