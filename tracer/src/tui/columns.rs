//! The process table's columns (what each shows, how wide, which go first
//! when the terminal is narrow) and how `top` writes its numbers.

use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Cell, Row};

use crate::model::types::Direction;
use crate::tui::app::ApiSort;
use crate::tui::app::ProcessRow;
use crate::tui::app::ProcessSort;
use crate::units::fmt_ns;

/// Table headers' style.
pub(super) const HEADER: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);

/// A right-aligned cell `w` wide.
pub(super) fn num(s: String, w: usize) -> Cell<'static> {
    Cell::from(format!("{s:>w$}"))
}

/// A header row: titles right-aligned to their width (0: left, free).
pub(super) fn head(cells: &[(&'static str, usize)]) -> Row<'static> {
    Row::new(cells.iter().map(|(t, w)| {
        if *w == 0 {
            Cell::from(*t)
        } else {
            Cell::from(format!("{t:>w$}", w = *w))
        }
    }))
    .style(HEADER)
}

/// `15.0k`, `1.50M`, `950`, `2.5`: at most 5 characters.
pub(super) fn fmt_rate(x: f64) -> String {
    let x = x.max(0.0);
    let three = |v: f64, unit: &str| {
        if v < 9.995 {
            format!("{v:.2}{unit}")
        } else if v < 99.95 {
            format!("{v:.1}{unit}")
        } else {
            format!("{v:.0}{unit}")
        }
    };
    if x == 0.0 {
        "0".into()
    } else if x < 9.95 && x.fract() != 0.0 {
        format!("{x:.1}")
    } else if x < 999.5 {
        format!("{x:.0}")
    } else if x < 999_500.0 {
        three(x / 1e3, "k")
    } else if x < 999_500_000.0 {
        three(x / 1e6, "M")
    } else {
        three(x / 1e9, "G")
    }
}

/// `9.00Ki`, `13.4Mi`, `512`: binary units, at most 6 characters.
pub(super) fn fmt_bytes_short(b: f64) -> String {
    const UNITS: [&str; 5] = ["Ki", "Mi", "Gi", "Ti", "Pi"];
    let b = b.max(0.0);
    if b < 1023.5 {
        return format!("{b:.0}");
    }
    let mut v = b / 1024.0;
    let mut u = 0;
    while v >= 1023.5 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v < 9.995 {
        format!("{v:.2}{}", UNITS[u])
    } else if v < 99.95 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

pub(super) fn fmt_opt_ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |n| fmt_ns(n as f64))
}

pub(super) fn dims(d: Option<[u32; 3]>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{}x{}x{}", d[0], d[1], d[2]))
}

pub(super) struct Column {
    pub title: &'static str,
    pub width: u16,
    /// Columns of lower priority go first when the terminal is narrow.
    pub priority: u8,
    pub sort: Option<ProcessSort>,
    pub cell: fn(&ProcessRow) -> String,
}

/// Shown only when some process has GPU records (`--gpu-time`).
const GPU_COLUMN: Column = Column {
    title: "GPU",
    width: 5,
    priority: 89,
    sort: None,
    cell: |r| {
        r.rates
            .gpu_share
            .map_or("-".into(), |s| format!("{:.0}%", s * 100.0))
    },
};

const COLUMNS: [Column; 14] = [
    Column {
        title: "PID",
        width: 7,
        priority: 100,
        sort: Some(ProcessSort::Pid),
        cell: |r| r.pid.to_string(),
    },
    Column {
        title: "",
        width: 1,
        priority: 99,
        sort: None,
        cell: |r| {
            if r.exited {
                "✗".into()
            } else {
                String::new()
            }
        },
    },
    Column {
        title: "COMMAND",
        width: 15,
        priority: 98,
        sort: Some(ProcessSort::Command),
        cell: |r| r.comm.clone(),
    },
    Column {
        title: "LAUNCH/s",
        width: 8,
        priority: 90,
        sort: Some(ProcessSort::Launches),
        cell: |r| fmt_rate(r.rates.launches),
    },
    Column {
        title: "COPY/s",
        width: 6,
        priority: 60,
        sort: Some(ProcessSort::Copies),
        cell: |r| fmt_rate(r.rates.copies),
    },
    Column {
        title: "HtoD B/s",
        width: 8,
        priority: 80,
        sort: Some(ProcessSort::HtoD),
        cell: |r| fmt_bytes_short(r.rates.bytes(Direction::HtoD)),
    },
    Column {
        title: "DtoH B/s",
        width: 8,
        priority: 74,
        sort: Some(ProcessSort::DtoH),
        cell: |r| fmt_bytes_short(r.rates.bytes(Direction::DtoH)),
    },
    Column {
        title: "DtoD B/s",
        width: 8,
        priority: 50,
        sort: Some(ProcessSort::DtoD),
        cell: |r| fmt_bytes_short(r.rates.bytes(Direction::DtoD)),
    },
    Column {
        title: "DEV MEM",
        width: 7,
        priority: 78,
        sort: Some(ProcessSort::Memory),
        cell: |r| fmt_bytes_short(r.device_bytes as f64),
    },
    Column {
        title: "PEAK",
        width: 6,
        priority: 55,
        sort: Some(ProcessSort::Peak),
        cell: |r| fmt_bytes_short(r.peak_bytes as f64),
    },
    Column {
        title: "NCCL/s",
        width: 6,
        priority: 66,
        sort: Some(ProcessSort::NcclOps),
        cell: |r| fmt_rate(r.rates.nccl_ops),
    },
    Column {
        title: "NCCL B/s",
        width: 8,
        priority: 76,
        sort: Some(ProcessSort::NcclBytes),
        cell: |r| fmt_bytes_short(r.rates.nccl_bytes),
    },
    Column {
        title: "SYNC",
        width: 5,
        priority: 85,
        sort: Some(ProcessSort::Sync),
        cell: |r| format!("{:.0}%", r.rates.sync_share * 100.0),
    },
    Column {
        title: "LOST",
        width: 5,
        priority: 72,
        sort: Some(ProcessSort::Lost),
        cell: |r| fmt_rate(r.lost as f64),
    },
];

pub(super) fn sort_title(s: ProcessSort) -> &'static str {
    COLUMNS
        .iter()
        .find(|c| c.sort == Some(s))
        .map_or("?", |c| c.title)
}

pub(super) fn api_sort_title(s: ApiSort) -> &'static str {
    match s {
        ApiSort::Calls => "CALLS/s",
        ApiSort::P50 => "P50",
        ApiSort::P95 => "P95",
        ApiSort::P99 => "P99",
        ApiSort::Max => "MAX",
        ApiSort::Name => "API",
    }
}

/// The columns that fit in `width` (after the 2-column selection mark);
/// `gpu`: with the GPU busy column (after the launch rate).
pub(super) fn fitting_columns(width: u16, gpu: bool) -> Vec<&'static Column> {
    let mut keep: Vec<&Column> = COLUMNS.iter().collect();
    if gpu {
        keep.insert(4, &GPU_COLUMN);
    }
    let need = |cols: &[&Column]| -> u16 { cols.iter().map(|c| c.width + 1).sum::<u16>() + 2 };
    while need(&keep) > width && keep.len() > 1 {
        let lowest = keep
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.priority)
            .map(|(i, _)| i)
            .unwrap_or(0);
        keep.remove(lowest);
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(2.5), "2.5");
        assert_eq!(fmt_rate(950.0), "950");
        assert_eq!(fmt_rate(1000.0), "1.00k");
        assert_eq!(fmt_rate(14_321.0), "14.3k");
        assert_eq!(fmt_rate(126_000.0), "126k");
        assert_eq!(fmt_rate(1_500_000.0), "1.50M");
        assert_eq!(fmt_bytes_short(512.0), "512");
        assert_eq!(fmt_bytes_short(40960.0), "40.0Ki");
        assert_eq!(fmt_bytes_short(1000.0 * 1024.0), "1000Ki");
        assert_eq!(fmt_bytes_short(1023.9 * 1024.0), "1.00Mi");
        assert_eq!(fmt_bytes_short((1u64 << 30) as f64), "1.00Gi");
    }
}
