//! One period of the sampling schedule as the sampler measured it: the mode
//! it ran in, when the probes were on, and the traced processes' kernel time
//! with the probes on and off.

use std::collections::HashMap;

/// How the hot sets are attached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Mode {
    Exact,
    EntryOnly,
    /// Entry-only, attached for this share of each period.
    Duty(f64),
}

/// One period of the schedule, in CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Period {
    pub start_ns: u64,
    pub end_ns: u64,
    /// How long the hot probes were attached in it.
    pub on_ns: u64,
    /// When they were attached: (from, to) intervals.
    pub on: Vec<(u64, u64)>,
    /// Return probes were attached whenever the entries were.
    pub returns: bool,
    /// The watched processes' kernel time while the hot probes were fully
    /// attached, and while they were detached (`Sampler::watch`).
    pub kernel: KernelTime,
    /// New processes' slices of their own: (pid, from, to)
    /// (`sampler::welcome`).
    pub welcomed: Vec<(u32, u64, u64)>,
}

/// Kernel time of the watched processes (`/proc/PID/stat` stime, clock
/// ticks) over the time it was read across, with the hot probes on and off.
/// Their difference per second is what the hot probes cost those
/// processes in place, against which the model's figure is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KernelTime {
    pub on_ticks: u64,
    pub on_ns: u64,
    pub off_ticks: u64,
    pub off_ns: u64,
}

impl std::ops::AddAssign for KernelTime {
    fn add_assign(&mut self, o: Self) {
        self.on_ticks += o.on_ticks;
        self.on_ns += o.on_ns;
        self.off_ticks += o.off_ticks;
        self.off_ns += o.off_ns;
    }
}

/// Each process's kernel time so far, in clock ticks (processes that are
/// gone are left out).
pub(crate) fn kernel_ticks(pids: &[u32]) -> HashMap<u32, u64> {
    pids.iter()
        .filter_map(|&pid| Some((pid, crate::host::discover::stat(pid)?.stime_ticks)))
        .collect()
}

#[cfg(test)]
#[test]
fn a_processs_kernel_time_is_read_and_a_gone_one_left_out() {
    let me = std::process::id();
    let before = kernel_ticks(&[me, u32::MAX])[&me];
    // Kernel work (system calls) until a tick is charged to it, 10 s at most.
    let start = std::time::Instant::now();
    let mut now = before;
    while now == before && start.elapsed() < std::time::Duration::from_secs(10) {
        for _ in 0..1_000 {
            let _ = std::fs::metadata("/proc/self/stat");
        }
        now = kernel_ticks(&[me])[&me];
    }
    assert_eq!(kernel_ticks(&[me, u32::MAX]).len(), 1);
    assert!(now > before, "no kernel time in 10 s of system calls");
}

/// A reading of the watched processes' kernel time: when, with the hot
/// probes on or off, and each one's ticks.
#[derive(Debug)]
pub(crate) struct Mark {
    pub(crate) on: bool,
    pub(crate) at_ns: u64,
    pub(crate) ticks: HashMap<u32, u64>,
}

/// What the sampler has done so far (for `--verbose`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Activity {
    /// Probes attached or detached (each one a write to the code of every
    /// process that maps the file).
    pub changes: u64,
    /// Duty on slices, and the entry probes they attached.
    pub slices: u64,
    pub slice_probes: u64,
    /// How long attaching and detaching the sampled probes takes (ns,
    /// smoothed).
    pub attach_ns: u64,
    pub detach_ns: u64,
    /// The most entry probes the hot sets held at once.
    pub symbols: usize,
}

impl Activity {
    /// How long a slice's probes fire while being attached and detached.
    pub(crate) fn transition_ns(&self) -> u64 {
        self.attach_ns + self.detach_ns
    }
}

impl Period {
    /// The share of the period the hot probes were attached.
    pub(crate) fn on_fraction(&self) -> f64 {
        let len = self.end_ns.saturating_sub(self.start_ns);
        if len == 0 {
            return 1.0;
        }
        (self.on_ns as f64 / len as f64).min(1.0)
    }
}
