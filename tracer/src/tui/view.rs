//! Drawing a frame of `top` from the [`App`]: a pure function of the state,
//! tested with ratatui's `TestBackend`.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::Frame;

use crate::tui::app::App;
use crate::tui::app::Pane;
use crate::tui::columns::api_sort_title;
use crate::tui::columns::dims;
use crate::tui::columns::fitting_columns;
use crate::tui::columns::fmt_bytes_short;
use crate::tui::columns::fmt_opt_ns;
use crate::tui::columns::fmt_rate;
use crate::tui::columns::head;
use crate::tui::columns::num;
use crate::tui::columns::sort_title;
use crate::tui::columns::HEADER;
use crate::tui::gpu::GpuStatus;
use crate::tui::snapshot::ApiRow;
use crate::tui::snapshot::Detail;
use crate::tui::snapshot::DETAIL_WINDOW_SECS;

const TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
const DIM: Style = Style::new().fg(Color::DarkGray);

pub(crate) fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let gpu_lines = gpu_lines(app);
    let gpu_h = (gpu_lines.len() as u16).min((area.height / 4).max(1));
    let rest = area.height.saturating_sub(2 + gpu_h);
    let charts_h = if rest >= 30 { 6 } else { 3 };
    let avail = rest.saturating_sub(charts_h);
    let rows = app.visible_rows().len() as u16;
    let procs_h = (rows.max(1) + 2).min((avail * 2 / 5).max(4)).min(avail);
    let [title, gpus, procs, detail, charts, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(gpu_h),
        Constraint::Length(procs_h),
        Constraint::Min(0),
        Constraint::Length(charts_h),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_title(frame, app, title);
    frame.render_widget(Paragraph::new(gpu_lines), gpus);
    draw_processes(frame, app, procs);
    draw_detail(frame, app, detail);
    draw_charts(frame, app, charts);
    draw_footer(frame, app, footer);
    if app.help {
        draw_help(frame, area);
    }
}

fn draw_title(frame: &mut Frame, app: &App, area: Rect) {
    let s = &app.scope;
    let mut spans = vec![
        Span::styled(" gputrace top", TITLE),
        Span::raw(format!(
            " · {} · {} probes · window {} s · lost {} · {}",
            s.what, s.probes, app.window_secs, s.lost, app.clock
        )),
    ];
    if let Some(r) = app.model.sampling {
        spans.push(Span::raw(if r < 1.0 {
            format!(
                " · sampled: busy APIs traced {:.0}% (their rates are as seen)",
                r * 100.0
            )
        } else {
            " · budget: exact".to_string()
        }));
    }
    if let Some(pct) = app.model.processes.values().find_map(|p| p.gpu_sampled) {
        spans.push(Span::raw(format!(
            " · GPU time sampled {pct}% of each second (GPU shares estimated)"
        )));
    }
    if let Some(line) = app.model.nccl_stalls.values().next_back() {
        let n = app.model.nccl_stalls.len();
        let what = line.trim_start_matches("gputrace: ");
        spans.push(Span::styled(
            format!(
                "  {what}{}",
                if n > 1 {
                    format!(" (+{} more)", n - 1)
                } else {
                    String::new()
                }
            ),
            Style::new().fg(Color::White).bg(Color::Red),
        ));
    }
    if app.paused {
        spans.push(Span::styled(
            "  PAUSED (p resumes)",
            Style::new().fg(Color::Black).bg(Color::Yellow),
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn gpu_lines(app: &App) -> Vec<Line<'static>> {
    match &app.gpus {
        GpuStatus::Pending => vec![Line::styled(" GPU  reading NVML…", DIM)],
        GpuStatus::Unavailable(why) => vec![Line::styled(
            format!(" GPU  NVML not available: {why}"),
            DIM,
        )],
        GpuStatus::Gpus(g) if g.is_empty() => vec![Line::styled(" GPU  NVML sees no GPU", DIM)],
        GpuStatus::Gpus(gpus) => gpus
            .iter()
            .map(|g| {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                let gib = |b: u64| format!("{:.1}", b as f64 / (1u64 << 30) as f64);
                Line::from(vec![
                    Span::styled(format!(" GPU{} ", g.index), HEADER),
                    Span::raw(format!(
                        "{}  util {:>4}  mem {} / {} GiB  power {} / {} W",
                        g.name,
                        opt(g.util_pct.map(|u| format!("{u}%"))),
                        opt(g.mem_used.map(gib)),
                        opt(g.mem_total.map(gib)),
                        opt(g.power_mw.map(|p| (p / 1000).to_string())),
                        opt(g.power_limit_mw.map(|p| (p / 1000).to_string())),
                    )),
                ])
            })
            .collect(),
    }
}

fn pane_block(title: Line<'static>) -> Block<'static> {
    Block::new().borders(Borders::TOP).title(title)
}

fn draw_processes(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.visible_rows();
    let exited = app.snapshot.rows.iter().filter(|r| r.exited).count();
    let focused = app.pane == Pane::Processes;
    let mut title = format!(" Processes: {}", app.snapshot.rows.len());
    if exited > 0 {
        title.push_str(&format!(" ({exited} exited)"));
    }
    title.push_str(&format!(" · sort {}", sort_title(app.sort)));
    if !app.filter.is_empty() {
        title.push_str(&format!(" · filter \"{}\"", app.filter));
    }
    title.push(' ');
    let style = if focused {
        TITLE.fg(Color::Cyan)
    } else {
        TITLE
    };
    let block = pane_block(Line::styled(title, style));
    if rows.is_empty() {
        let text = if app.snapshot.rows.is_empty() {
            " No process maps libcuda or libnccl yet: waiting for one.".to_string()
        } else {
            format!(" No process matches \"{}\".", app.filter)
        };
        frame.render_widget(Paragraph::new(text).style(DIM).block(block), area);
        return;
    }
    let gpu = rows.iter().any(|r| r.rates.gpu_share.is_some());
    let cols = fitting_columns(area.width, gpu);
    let header = Row::new(cols.iter().map(|c| {
        let s = if c.sort == Some(app.sort) {
            HEADER.add_modifier(Modifier::UNDERLINED)
        } else {
            HEADER
        };
        Cell::from(right(c.title, c.width, c.priority < 98)).style(s)
    }));
    let body = rows.iter().map(|r| {
        let row = Row::new(
            cols.iter()
                .map(|c| Cell::from(right(&(c.cell)(r), c.width, c.priority < 98))),
        );
        if r.exited {
            row.style(DIM)
        } else {
            row
        }
    });
    let widths = cols.iter().map(|c| Constraint::Length(c.width));
    let selected = app
        .selected
        .and_then(|pid| rows.iter().position(|r| r.pid == pid));
    let highlight = if focused {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new().add_modifier(Modifier::BOLD)
    };
    let table = Table::new(body, widths)
        .header(header)
        .block(block)
        .row_highlight_style(highlight)
        .highlight_symbol("> ")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
}

/// Right-aligns numbers; text columns stay left-aligned.
fn right(s: &str, width: u16, numeric: bool) -> String {
    if numeric {
        format!("{s:>w$}", w = width as usize)
    } else {
        s.to_string()
    }
}

fn tab_title(app: &App) -> Line<'static> {
    let d = app.snapshot.detail.as_ref();
    let who = d.map_or_else(
        || "no process selected".to_string(),
        |d| format!("{} {}", d.pid, d.comm),
    );
    let mut spans = vec![Span::styled(format!(" {who} · "), TITLE)];
    for (pane, name) in [
        (Pane::Apis, "APIs"),
        (Pane::Kernels, "Kernels"),
        (Pane::Gemms, "GEMMs"),
        (Pane::Nccl, "NCCL"),
    ] {
        let shown = app.detail_pane == pane;
        let text = if shown {
            format!("[{name}]")
        } else {
            format!(" {name} ")
        };
        let style = match (shown, app.pane == pane) {
            (true, true) => TITLE.fg(Color::Cyan),
            (true, false) => TITLE,
            _ => DIM,
        };
        spans.push(Span::styled(text, style));
    }
    let sort = if app.detail_pane == Pane::Apis {
        format!(" · sort {}", api_sort_title(app.api_sort))
    } else {
        String::new()
    };
    spans.push(Span::raw(format!(" · last {DETAIL_WINDOW_SECS} s{sort} ")));
    Line::from(spans)
}

fn draw_detail(frame: &mut Frame, app: &App, area: Rect) {
    let block = pane_block(tab_title(app));
    let Some(d) = &app.snapshot.detail else {
        let p = Paragraph::new(" Select a process (↑↓) to see its calls.").style(DIM);
        frame.render_widget(p.block(block), area);
        return;
    };
    let focused = app.pane != Pane::Processes;
    let mut state = TableState::default().with_offset(app.detail_offset);
    if focused {
        state = state.with_selected(Some(app.detail_offset));
    }
    let (table, empty) = match app.detail_pane {
        Pane::Apis | Pane::Processes => api_table(app),
        Pane::Kernels => kernel_table(d),
        Pane::Gemms => crate::tui::gemm_pane::gemm_table(d),
        Pane::Nccl => nccl_table(d),
    };
    if empty {
        let what = match app.detail_pane {
            Pane::Kernels => "no kernel launch",
            Pane::Gemms => "no cuBLAS GEMM",
            Pane::Nccl => "no NCCL operation",
            _ => "no call",
        };
        let p = Paragraph::new(format!(" {what} in the last {DETAIL_WINDOW_SECS} s")).style(DIM);
        frame.render_widget(p.block(block), area);
        return;
    }
    // `--stacks`: the focused API's top call sites under its table.
    let sites = match app.detail_pane {
        Pane::Apis if focused => app
            .api_rows()
            .get(app.detail_offset)
            .filter(|r| !r.sites.is_empty())
            .map(|r| site_lines(r)),
        _ => None,
    };
    let area = match sites {
        Some(lines) if area.height > lines.len() as u16 + 6 => {
            let [top, bottom] =
                Layout::vertical([Constraint::Min(4), Constraint::Length(lines.len() as u16)])
                    .areas(area);
            frame.render_widget(Paragraph::new(lines), bottom);
            top
        }
        _ => area,
    };
    let table = table
        .block(block)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always);
    frame.render_stateful_widget(table, area, &mut state);
}

/// The APIs pane: calls per second and latency percentiles; and whether
/// it is empty.
fn api_table(app: &App) -> (Table<'static>, bool) {
    let rows = app.api_rows();
    let body = rows.iter().map(|r| {
        let name = if r.failed > 0 {
            format!("{} ({} failed)", r.name, r.failed)
        } else {
            r.name.to_string()
        };
        Row::new(vec![
            Cell::from(name),
            num(fmt_rate(r.calls_per_s), 8),
            num(fmt_opt_ns(r.p50), 9),
            num(fmt_opt_ns(r.p95), 9),
            num(fmt_opt_ns(r.p99), 9),
            num(fmt_opt_ns(r.max), 9),
        ])
    });
    let widths = [
        Constraint::Min(16),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
    ];
    let header = head(&[
        ("API", 0),
        ("CALLS/s", 8),
        ("P50", 9),
        ("P95", 9),
        ("P99", 9),
        ("MAX", 9),
    ]);
    (Table::new(body, widths).header(header), rows.is_empty())
}

/// The kernels pane: launches per second, share, GPU share, grid, block.
fn kernel_table(d: &Detail) -> (Table<'static>, bool) {
    let gpu = d.kernels.iter().any(|k| k.gpu_share.is_some());
    let body = d.kernels.iter().map(|k| {
        let mut cells = vec![
            num(fmt_rate(k.per_s), 8),
            num(format!("{:.1}%", k.share * 100.0), 6),
        ];
        if gpu {
            cells.push(num(
                k.gpu_share
                    .map_or("-".into(), |s| format!("{:.1}%", s * 100.0)),
                6,
            ));
        }
        cells.extend([
            num(dims(k.grid), 11),
            num(dims(k.block), 11),
            Cell::from(format!(
                "{}{}",
                // Run through CUDA graphs (all or some of its runs).
                if k.graph_per_s > 0.0 { "(graph) " } else { "" },
                k.name.as_deref().unwrap_or("(name unknown)")
            )),
        ]);
        Row::new(cells)
    });
    let mut widths = vec![Constraint::Length(8), Constraint::Length(6)];
    let mut titles = vec![("LAUNCH/s", 8), ("SHARE", 6)];
    if gpu {
        // The share of wall time the GPU ran the kernel.
        widths.push(Constraint::Length(6));
        titles.push(("GPU", 6));
    }
    widths.extend([
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Min(10),
    ]);
    titles.extend([("GRID", 11), ("BLOCK", 11), ("KERNEL", 0)]);
    let header = head(&titles);
    (
        Table::new(body, widths).header(header),
        d.kernels.is_empty(),
    )
}

/// The NCCL pane: operations per communicator, rates and sizes.
fn nccl_table(d: &Detail) -> (Table<'static>, bool) {
    let body = d.nccl.iter().map(|n| {
        let ranks = match n.ranks {
            Some((Some(r), n)) => format!("{r}/{n}"),
            Some((None, n)) => format!("?/{n}"),
            None => "-".into(),
        };
        Row::new(vec![
            Cell::from(n.op.name()),
            num(format!("{:#x}", n.comm), 14),
            num(ranks, 6),
            num(fmt_rate(n.per_s), 7),
            num(fmt_bytes_short(n.bytes_per_s), 8),
            num(fmt_bytes_short(n.avg_bytes), 8),
        ])
    });
    let widths = [
        Constraint::Min(13),
        Constraint::Length(14),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(8),
    ];
    let header = head(&[
        ("OPERATION", 0),
        ("COMM", 14),
        ("RANKS", 6),
        ("OPS/s", 7),
        ("B/s", 8),
        ("AVG SIZE", 8),
    ]);
    (Table::new(body, widths).header(header), d.nccl.is_empty())
}

/// The lines of an API's top call sites.
fn site_lines(r: &ApiRow) -> Vec<Line<'static>> {
    let mut lines = vec![Line::styled(
        format!(" Top call sites of {} (host time, calls/s):", r.name),
        HEADER,
    )];
    for s in &r.sites {
        lines.push(Line::raw(format!(
            " {:>5.1}%  {:>8}  {}",
            s.share * 100.0,
            fmt_rate(s.calls_per_s),
            s.site
        )));
    }
    lines
}

fn draw_charts(frame: &mut Frame, app: &App, area: Rect) {
    let Some(d) = &app.snapshot.detail else {
        return;
    };
    let rows = Layout::vertical([Constraint::Ratio(1, 3); 3]).split(area);
    type Chart<'a> = (&'a str, &'a [u64], fn(f64) -> String, Color);
    let charts: [Chart; 3] = [
        ("launch/s", &d.launches, fmt_rate, Color::Green),
        ("copy B/s", &d.copy_bytes, fmt_bytes_short, Color::Blue),
        ("NCCL B/s", &d.nccl_bytes, fmt_bytes_short, Color::Magenta),
    ];
    for ((name, data, fmt, color), row) in charts.into_iter().zip(rows.iter()) {
        let [label, spark] =
            Layout::horizontal([Constraint::Length(28), Constraint::Min(0)]).areas(*row);
        let now = data.last().copied().unwrap_or(0);
        let max = data.iter().copied().max().unwrap_or(0);
        let text = format!(
            " {name:<8} {:>6} max {:>6}",
            fmt(now as f64),
            fmt(max as f64)
        );
        frame.render_widget(Paragraph::new(text), label);
        let take = (spark.width as usize).min(data.len());
        let tail = &data[data.len() - take..];
        frame.render_widget(
            Sparkline::default()
                .data(tail)
                .style(Style::new().fg(color)),
            spark,
        );
    }
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let line = if app.editing_filter {
        Line::from(vec![
            Span::styled(" filter: ", HEADER),
            Span::raw(format!("{}█", app.filter)),
            Span::styled("  (command or PID; Enter keeps it, Esc clears it)", DIM),
        ])
    } else {
        let mut spans = vec![Span::styled(
            " ↑↓/jk select  Tab pane  s sort  / filter  p pause  ? help  q quit",
            DIM,
        )];
        if let Some(m) = &app.message {
            spans.push(Span::styled(format!("  {m}"), Style::new().fg(Color::Red)));
        }
        Line::from(spans)
    };
    frame.render_widget(Paragraph::new(line), area);
}

const HELP: &[(&str, &str)] = &[
    ("↑ ↓  j k", "select a process / move in a table"),
    ("PgUp PgDn g G", "page up/down, first, last"),
    ("Tab  Enter", "next: processes, APIs, kernels, GEMMs, NCCL"),
    ("Shift-Tab", "previous pane"),
    ("s", "sort by the next column of this table"),
    ("/", "filter processes by command or PID"),
    ("p  Space", "pause (the numbers freeze; tracing goes on)"),
    ("?  h", "this help (any key closes it)"),
    ("q  Esc  Ctrl-C", "quit"),
    ("", ""),
    ("LAUNCH/s ...", "per second over the last window"),
    ("SYNC", "time in cu*Synchronize / wall time"),
    ("DEV MEM PEAK", "device memory allocated (seen), peak"),
    ("LOST", "calls the probes could not record"),
    ("✗", "the process exited (removed after 10 s)"),
];

fn draw_help(frame: &mut Frame, area: Rect) {
    let w = area.width.min(64);
    let h = area.height.min(HELP.len() as u16 + 2);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, v)| {
            Line::from(vec![
                Span::styled(format!(" {k:<15}"), HEADER),
                Span::raw(*v),
            ])
        })
        .collect();
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(Line::styled(" Help ", TITLE))),
        r,
    );
}
