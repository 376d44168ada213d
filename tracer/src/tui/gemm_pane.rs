//! `top`'s GEMMs pane: the selected process's cuBLAS and cuBLASLt GEMMs by
//! shape over the detail window (`snapshot::GemmRow`), as the summary's
//! "GEMMs by shape" shows them at the end (calls a second, host median,
//! with `--gpu-time` each call's GPU span and TFLOP/s).

use ratatui::layout::Constraint;
use ratatui::widgets::{Row, Table};

use crate::tui::columns::{fmt_opt_ns, fmt_rate, head, num};
use crate::tui::snapshot::Detail;

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
