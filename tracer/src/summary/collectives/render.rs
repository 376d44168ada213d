//! "Collectives by size" as text and JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::summary::collectives::{
    sorted, CollBook, CollKey, CollStats, SizeBucket, MAX_COLL_ROWS,
};
use crate::summary::gemm::render::gpu_cell;
use crate::units::{fmt_bytes, fmt_count, fmt_ns};

fn gbps(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

pub fn render_text(out: &mut String, book: &CollBook) {
    if book.is_empty() {
        return;
    }
    let t = book.settled();
    let _ = writeln!(
        out,
        "\nCollectives by size (NCCL; size as nccl-tests counts it; GPU time: the span of each call's kernels, with --gpu-time; grouped calls have none):"
    );
    let _ = writeln!(
        out,
        " {:<13}  {:<10}  {:<17}  {:>8}  {:>10}  {:>10}  {:>9}  {:>10}  {:>9}  {:>9}  {:>9}  {:>10}  {:>10}",
        "Op", "Type", "Size", "Calls", "Bytes", "Host Total", "Host Avg", "GPU Total",
        "GPU Avg", "GPU Med", "GPU Max", "algbw GB/s", "busbw GB/s"
    );
    let mut line = |op: &str, ty: &str, size: &str, s: &CollStats| {
        let (h, g) = (&s.host, &s.gpu);
        let _ = writeln!(
            out,
            " {:<13}  {:<10}  {:<17}  {:>8}  {:>10}  {:>10}  {:>9}  {:>10}  {:>9}  {:>9}  {:>9}  {:>10}  {:>10}",
            op,
            ty,
            size,
            h.calls,
            fmt_bytes(s.bytes as f64),
            fmt_ns(h.total_ns as f64),
            h.avg_ns().map_or_else(|| "-".into(), fmt_ns),
            gpu_cell(g, Some(g.total_ns as f64)),
            gpu_cell(g, g.avg_ns()),
            gpu_cell(g, g.median_ns().map(|v| v as f64)),
            gpu_cell(g, Some(g.max_ns as f64)),
            gbps(s.algbw_gbps()),
            gbps(s.busbw_gbps()),
        );
    };
    for (k, s) in sorted(&t) {
        line(k.op.name(), &k.datatype_name(), &k.bucket.label(), s);
    }
    if let Some(other) = t.other() {
        let label = format!(
            "... and {} more rows (past the first {}), summed",
            t.overflow().keys_text(),
            fmt_count(MAX_COLL_ROWS as u64)
        );
        line(&label, "", "", other);
    }
}

fn row_json(key: Option<&CollKey>, s: &CollStats) -> Value {
    let mut v = json!({
        "calls": s.host.calls,
        "bytes": s.bytes,
        "host": s.host.to_json(),
        "gpu": (s.gpu.timed > 0).then(|| s.gpu.to_json()),
        "algbw_gbps": s.algbw_gbps(),
        "busbw_gbps": s.busbw_gbps(),
    });
    if let Some(k) = key {
        let range = k.bucket.range();
        v["op"] = Value::from(k.op.name());
        v["datatype"] = Value::from(k.datatype_name());
        v["size_label"] = Value::from(k.bucket.label());
        v["size_min"] = json!(range.map(|r| r.0));
        // The top bucket's end (2^64) is past what JSON integers carry.
        v["size_max"] = json!(range.and_then(|r| u64::try_from(r.1).ok()));
        if k.bucket == SizeBucket::Unknown {
            v["bytes"] = Value::Null;
        }
    }
    v
}

pub fn render_json(book: &CollBook) -> Value {
    let t = book.settled();
    let rows: Vec<Value> = sorted(&t)
        .into_iter()
        .map(|(k, s)| row_json(Some(k), s))
        .collect();
    json!({
        "rows": rows,
        "other": t.other().map(|s| {
            let mut v = row_json(None, s);
            v["rows"] = Value::from(t.overflow().keys());
            v["rows_exact"] = Value::from(t.overflow().exact());
            v
        }),
    })
}
