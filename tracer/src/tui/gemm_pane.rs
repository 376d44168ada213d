//! `top`'s GEMMs pane: the selected process's cuBLAS and cuBLASLt GEMMs by
//! shape over the detail window, as the summary's "GEMMs by shape" shows
//! them at the end (calls a second, host median, with `--gpu-time` each
//! call's GPU span and TFLOP/s).

use ratatui::layout::Constraint;
use ratatui::widgets::{Row, Table};

use crate::summary::ProcessSummary;
use crate::tui::columns::{fmt_opt_ns, fmt_rate};
use crate::tui::snapshot::Detail;
use crate::tui::view::{head, num};

/// One shape of the GEMMs pane.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GemmRow {
    /// `bmm N,T 4×256×512×2048`; `cublasLtMatmul (no shape)` for the
    /// matmuls whose descriptors are not known.
    pub shape: String,
    /// `bf16,bf16→bf16 (32F)`.
    pub types: String,
    pub per_s: f64,
    pub host_p50: Option<u64>,
    /// `--gpu-time`: the average span of a call's kernels on the GPU.
    pub gpu_avg_ns: Option<f64>,
    pub tflops: Option<f64>,
}

/// The window's GEMM shapes, most GPU time (then host time) first.
pub(crate) fn gemm_rows(w: &ProcessSummary, secs: f64) -> Vec<GemmRow> {
    let shapes = w.gemms.settled();
    let mut rows: Vec<GemmRow> = crate::summary::gemm::sorted(&shapes)
        .into_iter()
        .map(|(shape, s)| GemmRow {
            shape: format!("{} {}", shape.op(), shape.label()),
            types: shape.types(),
            per_s: s.host.calls as f64 / secs,
            host_p50: s.host.median_ns(),
            gpu_avg_ns: s.gpu.avg_ns(),
            tflops: s.tflops(shape),
        })
        .collect();
    let unknown = &w.gemms.unknown;
    if unknown.calls > 0 {
        rows.push(GemmRow {
            shape: "cublasLtMatmul (no shape)".into(),
            types: String::new(),
            per_s: unknown.calls as f64 / secs,
            host_p50: unknown.median_ns(),
            gpu_avg_ns: None,
            tflops: None,
        });
    }
    rows
}

/// The GEMMs pane; and whether it is empty.
pub(crate) fn gemm_table(d: &Detail) -> (Table<'static>, bool) {
    let gpu = d.gemms.iter().any(|g| g.gpu_avg_ns.is_some());
    let body = d.gemms.iter().map(|g| {
        let mut cells = vec![num(fmt_rate(g.per_s), 8), num(fmt_opt_ns(g.host_p50), 9)];
        if gpu {
            cells.push(num(fmt_opt_ns(g.gpu_avg_ns.map(|v| v as u64)), 9));
            cells.push(num(g.tflops.map_or("-".into(), |t| format!("{t:.1}")), 7));
        }
        cells.push(ratatui::widgets::Cell::from(format!(
            "{}  {}",
            g.shape, g.types
        )));
        Row::new(cells)
    });
    let mut widths = vec![Constraint::Length(8), Constraint::Length(9)];
    let mut titles = vec![("CALLS/s", 8), ("HOST p50", 9)];
    if gpu {
        widths.extend([Constraint::Length(9), Constraint::Length(7)]);
        titles.extend([("GPU avg", 9), ("TFLOP/s", 7)]);
    }
    widths.push(Constraint::Min(10));
    titles.push(("SHAPE b×m×n×k  TYPES", 0));
    (
        Table::new(body, widths).header(head(&titles)),
        d.gemms.is_empty(),
    )
}
