//! "GEMMs by shape" as text and JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::summary::api::ApiStats;
use crate::summary::gemm::{sorted, GemmBook, GemmShape, GemmStats, MAX_SHAPES};
use crate::units::{fmt_count, fmt_ns};

/// Kernel names shown under a shape in the text summary.
const KERNELS_SHOWN: usize = 4;

/// A GPU time, or `-` where no call was timed on the GPU.
pub(crate) fn gpu_cell(s: &ApiStats, v: Option<f64>) -> String {
    if s.timed == 0 {
        return "-".into();
    }
    v.map_or_else(|| "-".into(), fmt_ns)
}

pub fn render_text(out: &mut String, book: &GemmBook) {
    if book.is_empty() {
        return;
    }
    let t = book.settled();
    let rows = sorted(&t);
    let _ = writeln!(
        out,
        "\nGEMMs by shape (cuBLAS; GPU time: the span of each call's kernels, with --gpu-time):"
    );
    let _ = writeln!(
        out,
        " {:<4}  {:<24}  {:<26}  {:>8}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}",
        "Op",
        "Shape (ops b×m×n×k)",
        "Types (A,B→C compute)",
        "Calls",
        "Host Total",
        "GPU Total",
        "GPU Avg",
        "GPU Med",
        "GPU p99",
        "GPU Max",
        "TFLOP/s"
    );
    let mut line = |op: &str, label: &str, types: &str, s: &GemmStats, tflops: Option<f64>| {
        let g = &s.gpu;
        let _ = writeln!(
            out,
            " {:<4}  {:<24}  {:<26}  {:>8}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}",
            op,
            label,
            types,
            s.host.calls,
            fmt_ns(s.host.total_ns as f64),
            gpu_cell(g, Some(g.total_ns as f64)),
            gpu_cell(g, g.avg_ns()),
            gpu_cell(g, g.median_ns().map(|v| v as f64)),
            gpu_cell(g, g.p99_ns().map(|v| v as f64)),
            gpu_cell(g, Some(g.max_ns as f64)),
            tflops.map_or_else(|| "-".into(), |t| format!("{t:.1}")),
        );
        let kernels = s.kernel_rows();
        if !kernels.is_empty() {
            let mut names: Vec<String> = kernels
                .iter()
                .take(KERNELS_SHOWN)
                .map(|(k, n)| {
                    let name = crate::text::printable(k.as_deref().unwrap_or("(name not known)"));
                    format!("{name} ×{n}")
                })
                .collect();
            if kernels.len() > KERNELS_SHOWN {
                names.push(format!("and {} more", kernels.len() - KERNELS_SHOWN));
            }
            let _ = writeln!(out, "       kernels: {}", names.join(", "));
        }
    };
    for (shape, s) in &rows {
        line(
            shape.op(),
            &shape.label(),
            &shape.types(),
            s,
            s.tflops(shape),
        );
    }
    if let Some(other) = t.other() {
        line(
            "",
            &format!(
                "... and {} more shapes (past the first {}), summed",
                t.overflow().keys_text(),
                fmt_count(MAX_SHAPES as u64)
            ),
            "",
            other,
            None,
        );
    }
    if book.unknown.calls > 0 {
        let _ = writeln!(
            out,
            " {} cublasLtMatmul calls ({} on the host) without a shape: their descriptors were made before gputrace attached or in place (cublasLt*Init)",
            fmt_count(book.unknown.calls),
            fmt_ns(book.unknown.total_ns as f64)
        );
    }
}

fn row_json(shape: Option<&GemmShape>, s: &GemmStats) -> Value {
    let kernels: Vec<Value> = s
        .kernel_rows()
        .iter()
        .map(|(k, n)| json!({"name": k.as_deref(), "launches": n}))
        .collect();
    let mut v = json!({
        "calls": s.host.calls,
        "host": s.host.to_json(),
        "gpu": (s.gpu.timed > 0).then(|| s.gpu.to_json()),
        "kernels": kernels,
    });
    if let Some(shape) = shape {
        use crate::model::gemm::{compute_name, dtype_name, op_name};
        let ty = |t: Option<u32>| t.and_then(dtype_name);
        for (key, val) in [
            ("transa", json!(shape.transa.and_then(op_name))),
            ("transb", json!(shape.transb.and_then(op_name))),
            ("batch", json!(shape.batch)),
            ("m", json!(shape.m)),
            ("n", json!(shape.n)),
            ("k", json!(shape.k)),
            ("a_type", json!(ty(shape.a_type))),
            ("b_type", json!(ty(shape.b_type))),
            ("c_type", json!(ty(shape.c_type))),
            ("compute", json!(shape.compute.and_then(compute_name))),
        ] {
            v[key] = val;
        }
        v["op"] = Value::from(shape.op());
        v["flops"] = json!(shape.flops());
        v["tflops"] = json!(s.tflops(shape));
    }
    v
}

pub fn render_json(book: &GemmBook) -> Value {
    let t = book.settled();
    let rows: Vec<Value> = sorted(&t)
        .into_iter()
        .map(|(shape, s)| row_json(Some(shape), s))
        .collect();
    json!({
        "shapes": rows,
        "other": t.other().map(|s| {
            let mut v = row_json(None, s);
            v["shapes"] = Value::from(t.overflow().keys());
            v["shapes_exact"] = Value::from(t.overflow().exact());
            v
        }),
        "lt_without_shape": {"calls": book.unknown.calls, "host_ns": book.unknown.total_ns},
    })
}
