//! The in-place cost ratio: what a probe hit costs in a real program over
//! the figure measured on gputrace's own loop, read from the traced threads'
//! kernel time with the probes on and off, kept on the host between runs.

use crate::budget::period::KernelTime;

/// How often (in periods) a ratio read in place is kept.
pub(super) const KEEP_EVERY: u64 = 20;

/// What the hot probes cost the processes in place: their kernel time
/// while the probes were on, beyond what the same time off shows, set
/// against what the model makes of the calls seen on, over every duty
/// period so far. The hit cost is measured on gputrace's own loop; in a
/// real program a hit can cost more (on the GPU host, a PyTorch DDP step's
/// hits cost 1.1–1.7× the figure measured cold).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct InPlace {
    pub(super) kernel: KernelTime,
    /// The model's cost of the calls seen on, over the time read on.
    pub(super) modeled_s: f64,
    /// The ratio last read on this machine (a budget before this one):
    /// in force until enough is read here.
    pub(super) prior: Option<f64>,
}

/// Kernel time read on before a ratio is taken (clock ticks: 0.3 s at
/// 100 Hz, a minute or so of a busy process sampled at 1%; the ticks are
/// counts of a sampled clock, and a ratio of a few is noise).
pub(super) const MIN_IN_PLACE_TICKS: u64 = 30;

/// Standard deviations above its estimate that a one-sided 95% bound
/// lies (normal).
pub(super) const ONE_SIDED_95: f64 = 1.645;

impl InPlace {
    /// How many times the model's cost the probes cost in place, at least
    /// 1 (the model is never lowered below its measured figure) and at
    /// most 4; until enough has been read, the ratio a budget before read
    /// on this machine, else 1.
    pub(super) fn ratio(&self, ticks_per_s: f64) -> f64 {
        self.current(ticks_per_s).0
    }

    /// [`Self::ratio`], and where it comes from (for `--verbose`).
    pub(super) fn current(&self, ticks_per_s: f64) -> (f64, &'static str) {
        match (self.read(ticks_per_s), self.prior) {
            (Some(r), _) => (r, "in place"),
            (None, Some(r)) => (
                r,
                "as last read in place on this machine (not enough read yet)",
            ),
            (None, None) => (1.0, "(nothing read in place yet)"),
        }
    }

    /// The ratio read here, once enough has been: the bound it stays
    /// under with 95% confidence. Kernel time is read in clock ticks,
    /// counts of a sampled clock (Poisson: a count `n` is known to about
    /// `√n`), and the budget is a ceiling: the probes are charged at what
    /// they may cost, which nears what they cost as ticks add up.
    pub(super) fn read(&self, ticks_per_s: f64) -> Option<f64> {
        let k = &self.kernel;
        if k.on_ticks < MIN_IN_PLACE_TICKS || k.off_ns == 0 || self.modeled_s <= 0.0 {
            return None;
        }
        let scale = k.on_ns as f64 / k.off_ns as f64;
        let on_s = k.on_ticks as f64 / ticks_per_s;
        let off_s = k.off_ticks as f64 / ticks_per_s * scale;
        let spread_s =
            (k.on_ticks as f64 + k.off_ticks as f64 * scale * scale).sqrt() / ticks_per_s;
        Some(((on_s - off_s + ONE_SIDED_95 * spread_s) / self.modeled_s).clamp(1.0, 4.0))
    }
}

pub(super) fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}
