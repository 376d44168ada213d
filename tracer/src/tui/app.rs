//! The state of the `top` screen and what each action does to it. The
//! numbers shown come from a [`Snapshot`] taken from the [`Model`] at each
//! refresh (not while paused), so a frame is a pure function of the App.

use crate::tui::gpu::GpuStatus;
use crate::tui::model::settled_sec;
use crate::tui::model::Model;
pub(crate) use crate::tui::snapshot::detail;
pub(crate) use crate::tui::snapshot::process_rows;
pub(crate) use crate::tui::snapshot::ApiRow;
pub(crate) use crate::tui::snapshot::ProcessRow;
pub(crate) use crate::tui::snapshot::Snapshot;

/// What a key (or the clock) asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    NextPane,
    PrevPane,
    CycleSort,
    StartFilter,
    FilterChar(char),
    FilterBackspace,
    /// Keep the filter typed and leave the filter line.
    FilterKeep,
    /// Drop the filter and leave the filter line.
    FilterClear,
    TogglePause,
    ToggleHelp,
    CloseHelp,
    Quit,
}

/// Which table has the keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pane {
    Processes,
    Apis,
    Kernels,
    Gemms,
    Nccl,
}

impl Pane {
    fn next(self) -> Pane {
        match self {
            Pane::Processes => Pane::Apis,
            Pane::Apis => Pane::Kernels,
            Pane::Kernels => Pane::Gemms,
            Pane::Gemms => Pane::Nccl,
            Pane::Nccl => Pane::Processes,
        }
    }

    fn prev(self) -> Pane {
        match self {
            Pane::Processes => Pane::Nccl,
            Pane::Apis => Pane::Processes,
            Pane::Kernels => Pane::Apis,
            Pane::Gemms => Pane::Kernels,
            Pane::Nccl => Pane::Gemms,
        }
    }
}

/// Process table columns, in the order `s` cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcessSort {
    Launches,
    Copies,
    HtoD,
    DtoH,
    DtoD,
    Memory,
    Peak,
    NcclOps,
    NcclBytes,
    Sync,
    Lost,
    Pid,
    Command,
}

impl ProcessSort {
    const ORDER: [ProcessSort; 13] = [
        ProcessSort::Launches,
        ProcessSort::Copies,
        ProcessSort::HtoD,
        ProcessSort::DtoH,
        ProcessSort::DtoD,
        ProcessSort::Memory,
        ProcessSort::Peak,
        ProcessSort::NcclOps,
        ProcessSort::NcclBytes,
        ProcessSort::Sync,
        ProcessSort::Lost,
        ProcessSort::Pid,
        ProcessSort::Command,
    ];

    fn next(self) -> Self {
        let i = Self::ORDER.iter().position(|s| *s == self).unwrap_or(0);
        Self::ORDER[(i + 1) % Self::ORDER.len()]
    }
}

/// Latency table columns, in the order `s` cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiSort {
    Calls,
    P50,
    P95,
    P99,
    Max,
    Name,
}

impl ApiSort {
    fn next(self) -> Self {
        match self {
            ApiSort::Calls => ApiSort::P50,
            ApiSort::P50 => ApiSort::P95,
            ApiSort::P95 => ApiSort::P99,
            ApiSort::P99 => ApiSort::Max,
            ApiSort::Max => ApiSort::Name,
            ApiSort::Name => ApiSort::Calls,
        }
    }
}

/// What is being traced, for the title line.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Scope {
    /// `every process` or `PID 12, 34`.
    pub what: String,
    pub probes: usize,
    /// Calls not recorded, all processes.
    pub lost: u64,
}

#[derive(Debug)]
pub(crate) struct App {
    pub model: Model,
    pub snapshot: Snapshot,
    pub scope: Scope,
    pub gpus: GpuStatus,
    /// The process table's window (the refresh interval, whole seconds).
    pub window_secs: u64,
    /// Wall-clock time of the snapshot, as the title shows it.
    pub clock: String,
    pub selected: Option<u32>,
    pub pane: Pane,
    /// The detail table shown while the process table has the keys.
    pub detail_pane: Pane,
    /// First row shown of each detail table.
    pub detail_offset: usize,
    pub sort: ProcessSort,
    pub api_sort: ApiSort,
    pub filter: String,
    pub editing_filter: bool,
    pub paused: bool,
    pub help: bool,
    pub quit: bool,
    /// The last thing gputrace had to say (it would otherwise go to stderr).
    pub message: Option<String>,
}

impl App {
    pub(crate) fn new(scope: Scope, gpus: GpuStatus, window_secs: u64) -> Self {
        Self {
            model: Model::default(),
            snapshot: Snapshot::default(),
            scope,
            gpus,
            window_secs: window_secs.max(1),
            clock: String::new(),
            selected: None,
            pane: Pane::Processes,
            detail_pane: Pane::Apis,
            detail_offset: 0,
            sort: ProcessSort::Launches,
            api_sort: ApiSort::Calls,
            filter: String::new(),
            editing_filter: false,
            paused: false,
            help: false,
            quit: false,
            message: None,
        }
    }

    /// Takes a new snapshot of the model at `now_ns` (unless paused).
    pub(crate) fn refresh(&mut self, now_ns: u64, clock: String) {
        if self.paused {
            return;
        }
        self.clock = clock;
        let end = settled_sec(now_ns);
        self.snapshot.end_sec = end;
        self.snapshot.rows = process_rows(&self.model, end, self.window_secs);
        self.fix_selection();
        self.refresh_detail();
    }

    /// Recomputes the selected process's detail at the snapshot's time.
    fn refresh_detail(&mut self) {
        let end = self.snapshot.end_sec;
        self.snapshot.detail = self
            .selected
            .and_then(|pid| self.model.processes.get(&pid))
            .map(|p| detail(p, end));
    }

    /// The process rows the table shows: filtered, sorted.
    pub(crate) fn visible_rows(&self) -> Vec<&ProcessRow> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&ProcessRow> = self
            .snapshot
            .rows
            .iter()
            .filter(|r| {
                needle.is_empty()
                    || r.comm.to_lowercase().contains(&needle)
                    || r.pid.to_string().contains(&needle)
            })
            .collect();
        let key = |r: &ProcessRow| -> f64 {
            use crate::model::types::Direction as D;
            match self.sort {
                ProcessSort::Launches => r.rates.launches,
                ProcessSort::Copies => r.rates.copies,
                ProcessSort::HtoD => r.rates.bytes(D::HtoD),
                ProcessSort::DtoH => r.rates.bytes(D::DtoH),
                ProcessSort::DtoD => r.rates.bytes(D::DtoD),
                ProcessSort::Memory => r.device_bytes as f64,
                ProcessSort::Peak => r.peak_bytes as f64,
                ProcessSort::NcclOps => r.rates.nccl_ops,
                ProcessSort::NcclBytes => r.rates.nccl_bytes,
                ProcessSort::Sync => r.rates.sync_share,
                ProcessSort::Lost => r.lost as f64,
                ProcessSort::Pid | ProcessSort::Command => 0.0,
            }
        };
        rows.sort_by(|a, b| match self.sort {
            ProcessSort::Pid => a.pid.cmp(&b.pid),
            ProcessSort::Command => a.comm.cmp(&b.comm).then(a.pid.cmp(&b.pid)),
            _ => key(b).total_cmp(&key(a)).then(a.pid.cmp(&b.pid)),
        });
        rows
    }

    /// The latency rows of the detail, sorted.
    pub(crate) fn api_rows(&self) -> Vec<&ApiRow> {
        let Some(d) = &self.snapshot.detail else {
            return Vec::new();
        };
        let mut rows: Vec<&ApiRow> = d.apis.iter().collect();
        let key = |r: &ApiRow| -> f64 {
            match self.api_sort {
                ApiSort::Calls | ApiSort::Name => r.calls_per_s,
                ApiSort::P50 => r.p50.unwrap_or(0) as f64,
                ApiSort::P95 => r.p95.unwrap_or(0) as f64,
                ApiSort::P99 => r.p99.unwrap_or(0) as f64,
                ApiSort::Max => r.max.unwrap_or(0) as f64,
            }
        };
        rows.sort_by(|a, b| match self.api_sort {
            ApiSort::Name => a.name.cmp(b.name),
            _ => key(b).total_cmp(&key(a)).then(a.name.cmp(b.name)),
        });
        rows
    }

    /// Keeps the selection on a visible process (the first, when it went).
    fn fix_selection(&mut self) {
        let rows = self.visible_rows();
        let keep = self
            .selected
            .is_some_and(|pid| rows.iter().any(|r| r.pid == pid));
        if !keep {
            self.selected = rows.first().map(|r| r.pid);
            self.detail_offset = 0;
        }
    }

    fn move_selection(&mut self, delta: isize) {
        let rows = self.visible_rows();
        if rows.is_empty() {
            return;
        }
        let at = self
            .selected
            .and_then(|pid| rows.iter().position(|r| r.pid == pid))
            .unwrap_or(0) as isize;
        let to = (at + delta).clamp(0, rows.len() as isize - 1) as usize;
        let pid = rows[to].pid;
        if self.selected != Some(pid) {
            self.selected = Some(pid);
            self.detail_offset = 0;
            self.refresh_detail();
        }
    }

    fn detail_len(&self) -> usize {
        let Some(d) = &self.snapshot.detail else {
            return 0;
        };
        match self.detail_pane {
            Pane::Apis | Pane::Processes => d.apis.len(),
            Pane::Kernels => d.kernels.len(),
            Pane::Gemms => d.gemms.len(),
            Pane::Nccl => d.nccl.len(),
        }
    }

    fn scroll_detail(&mut self, delta: isize) {
        let max = self.detail_len().saturating_sub(1) as isize;
        self.detail_offset = (self.detail_offset as isize + delta).clamp(0, max.max(0)) as usize;
    }

    fn step(&mut self, delta: isize) {
        if self.pane == Pane::Processes {
            self.move_selection(delta);
        } else {
            self.scroll_detail(delta);
        }
    }

    pub(crate) fn apply(&mut self, action: Action) {
        match action {
            Action::Up => self.step(-1),
            Action::Down => self.step(1),
            Action::PageUp => self.step(-10),
            Action::PageDown => self.step(10),
            Action::Top => self.step(isize::MIN / 2),
            Action::Bottom => self.step(isize::MAX / 2),
            Action::NextPane | Action::PrevPane => {
                self.pane = if action == Action::NextPane {
                    self.pane.next()
                } else {
                    self.pane.prev()
                };
                if self.pane != Pane::Processes {
                    self.detail_pane = self.pane;
                }
                self.detail_offset = 0;
            }
            Action::CycleSort => match self.pane {
                Pane::Processes => self.sort = self.sort.next(),
                Pane::Apis => self.api_sort = self.api_sort.next(),
                Pane::Kernels | Pane::Gemms | Pane::Nccl => {}
            },
            Action::StartFilter => {
                // `/` types a new filter, as in less and vim.
                self.editing_filter = true;
                self.filter.clear();
                self.after_filter_change();
            }
            Action::FilterChar(c) => {
                self.filter.push(c);
                self.after_filter_change();
            }
            Action::FilterBackspace => {
                self.filter.pop();
                self.after_filter_change();
            }
            Action::FilterKeep => self.editing_filter = false,
            Action::FilterClear => {
                self.editing_filter = false;
                self.filter.clear();
                self.after_filter_change();
            }
            Action::TogglePause => self.paused = !self.paused,
            Action::ToggleHelp => self.help = !self.help,
            Action::CloseHelp => self.help = false,
            Action::Quit => self.quit = true,
        }
    }

    fn after_filter_change(&mut self) {
        let before = self.selected;
        self.fix_selection();
        if self.selected != before {
            self.refresh_detail();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::call::Args;
    use crate::model::call::Call;
    use crate::model::call::Launch;
    use crate::tui::model::SETTLE_NS;

    const NS: u64 = 1_000_000_000;
    const T0: u64 = 1_700_000_000 * NS;

    fn launches(app: &mut App, pid: u32, comm: &str, per_sec: u64, secs: u64) {
        for s in 0..secs {
            for i in 0..per_sec {
                let call = Call {
                    ts_ns: T0 + s * NS + i,
                    dur_ns: Some(1_000),
                    pid,
                    tid: pid,
                    comm: Arc::from(comm),
                    api: "cuLaunchKernel",
                    family: None,
                    ret: Some(0),
                    stack: None,
                    args: Args::Launch(Launch {
                        function: 1,
                        stub: 0,
                        kernel: None,
                        grid: [1; 3],
                        block: [1; 3],
                        shared_mem_bytes: 0,
                        stream: 0,
                        captured: None,
                    }),
                };
                app.model.record(&call, None, T0);
            }
        }
    }

    fn app_with(rates: &[(u32, &str, u64)]) -> App {
        let mut app = App::new(Scope::default(), GpuStatus::Pending, 1);
        for (pid, comm, n) in rates {
            launches(&mut app, *pid, comm, *n, 3);
        }
        let now = T0 + 3 * NS + SETTLE_NS;
        app.model.advance(now);
        app.refresh(now, String::new());
        app
    }

    fn order(app: &App) -> Vec<u32> {
        app.visible_rows().iter().map(|r| r.pid).collect()
    }

    #[test]
    fn sorting_keeps_the_selection_on_its_process() {
        let mut app = app_with(&[(1, "b", 10), (2, "a", 30), (3, "c", 20)]);
        assert_eq!(order(&app), [2, 3, 1]);
        assert_eq!(app.selected, Some(2));
        app.apply(Action::Down);
        assert_eq!(app.selected, Some(3));
        assert_eq!(app.snapshot.detail.as_ref().unwrap().pid, 3);
        // Cycle to PID, then COMMAND.
        while app.sort != ProcessSort::Pid {
            app.apply(Action::CycleSort);
        }
        assert_eq!(order(&app), [1, 2, 3]);
        app.apply(Action::CycleSort);
        assert_eq!(order(&app), [2, 1, 3]);
        assert_eq!(app.selected, Some(3));
        app.apply(Action::Bottom);
        app.apply(Action::Down);
        assert_eq!(app.selected, Some(3));
    }

    #[test]
    fn filter_moves_the_selection_into_what_is_shown() {
        let mut app = app_with(&[(10, "python3", 5), (11, "nccl-tests", 9)]);
        assert_eq!(app.selected, Some(11));
        app.apply(Action::StartFilter);
        for c in "PYTH".chars() {
            app.apply(Action::FilterChar(c));
        }
        assert_eq!(order(&app), [10]);
        assert_eq!(app.selected, Some(10));
        app.apply(Action::FilterKeep);
        assert!(!app.editing_filter);
        assert_eq!(app.filter, "PYTH");
        app.apply(Action::StartFilter);
        app.apply(Action::FilterChar('1'));
        assert_eq!(order(&app), [11, 10], "PIDs match too");
        app.apply(Action::FilterClear);
        assert_eq!(app.filter, "");
    }

    #[test]
    fn pause_freezes_the_numbers_not_the_counting() {
        let mut app = app_with(&[(1, "a", 10)]);
        let before = app.snapshot.clone();
        app.apply(Action::TogglePause);
        launches(&mut app, 2, "b", 50, 3);
        app.refresh(T0 + 4 * NS + SETTLE_NS, "later".into());
        assert_eq!(app.snapshot, before);
        assert!(app.model.processes.contains_key(&2));
        app.apply(Action::TogglePause);
        app.refresh(T0 + 4 * NS + SETTLE_NS, "later".into());
        assert_eq!(app.snapshot.rows.len(), 2);
    }

    #[test]
    fn panes_cycle_and_remember_the_detail_table() {
        let mut app = app_with(&[(1, "a", 10)]);
        app.apply(Action::NextPane);
        assert_eq!((app.pane, app.detail_pane), (Pane::Apis, Pane::Apis));
        app.apply(Action::CycleSort);
        assert_eq!(app.api_sort, ApiSort::P50);
        app.apply(Action::NextPane);
        app.apply(Action::NextPane);
        assert_eq!(app.pane, Pane::Gemms);
        app.apply(Action::NextPane);
        assert_eq!(app.pane, Pane::Nccl);
        app.apply(Action::NextPane);
        assert_eq!((app.pane, app.detail_pane), (Pane::Processes, Pane::Nccl));
        app.apply(Action::PrevPane);
        assert_eq!(app.pane, Pane::Nccl);
    }
}
