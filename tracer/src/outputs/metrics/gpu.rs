//! `--gpu-time`'s series: the GPU's busy time per process and device (and
//! the share of the last seconds it was busy), GPU seconds per kernel for
//! the kernels that take the most of it, and NCCL kernels' GPU seconds per
//! operation.
//!
//! Kernel series are bounded ([`Ranked`]): a process's first
//! [`TOP_KERNELS`] kernels have series from their first record; then every
//! ten seconds (up to [`MAX_KERNEL_SERIES`]) those with more time since
//! than the smallest series. Time counted before a later kernel got its
//! series stays in `kernel="other"`: no counter ever goes down, no series
//! is removed while the process lives.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::gpu::{AgentNote, GpuOp, GpuWork};
use crate::outputs::metrics::ranked::Ranked;
use crate::outputs::metrics::seconds;
use crate::outputs::metrics::{escape_into, ProcessSeries};
use crate::summary::gpu::Busy;

/// Kernels with a series of their own per process, at first.
pub(super) const TOP_KERNELS: usize = 20;
/// At most, per process.
pub(super) const MAX_KERNEL_SERIES: usize = 40;

#[derive(Clone, Debug, Default)]
pub(super) struct GpuSeries {
    busy: BTreeMap<u32, Busy>,
    /// Busy share per device over the last interval, and where it was taken.
    ratio: BTreeMap<u32, f64>,
    /// Where the interval began: when, the busy times, and with
    /// `--gpu-time-share` the time CUPTI had collected.
    last: Option<(Instant, BTreeMap<u32, u64>, u64)>,
    /// `--gpu-time-share`: the time CUPTI collected (the agent's last word).
    sampled_on_ns: Option<u64>,
    /// `--gpu-time-share`: CUPTI could not be had again after a window.
    stopped: bool,
    /// GPU time per kernel name, ranked by it.
    kernels: Ranked<Arc<str>, u128, u128, TOP_KERNELS, MAX_KERNEL_SERIES>,
    nccl: BTreeMap<&'static str, u128>,
}

impl GpuSeries {
    pub(super) fn record(&mut self, w: &GpuWork) {
        let d = u128::from(w.dur_ns());
        self.busy
            .entry(w.device)
            .or_default()
            .add(w.start_ns, w.end_ns);
        let GpuOp::Kernel { name, .. } = &w.op else {
            return;
        };
        if let Some(n) = w.launch.as_ref().and_then(|l| l.nccl.as_ref()) {
            *self.nccl.entry(n.op.unwrap_or("group")).or_default() += d;
        }
        let name: Arc<str> = name.clone().unwrap_or_else(|| Arc::from("?"));
        *self.kernels.slot(&name, d) += d;
    }

    /// `--gpu-time-share`: the agent says how long CUPTI collected, or
    /// that its GPU time stopped.
    pub(super) fn note(&mut self, n: &AgentNote) {
        match n {
            AgentNote::Sampled { on_ns, .. } => self.sampled_on_ns = Some(*on_ns),
            AgentNote::Stopped { .. } => self.stopped = true,
            _ => {}
        }
    }

    /// Every ten seconds: kernels promoted to series of their own, and the
    /// busy shares of the interval (of the time sampled in it, with
    /// `--gpu-time-share`).
    pub(super) fn sweep(&mut self, now: Instant) {
        let busy: BTreeMap<u32, u64> = self.busy.iter().map(|(d, b)| (*d, b.total_ns())).collect();
        let on = self.sampled_on_ns.unwrap_or(0);
        if let Some((then, before, on_before)) = &self.last {
            let dt = match self.sampled_on_ns {
                Some(_) => on.saturating_sub(*on_before) as f64,
                None => now.saturating_duration_since(*then).as_nanos() as f64,
            };
            if dt > 0.0 {
                for (d, ns) in &busy {
                    let was = before.get(d).copied().unwrap_or(0);
                    self.ratio
                        .insert(*d, (ns.saturating_sub(was) as f64 / dt).min(1.0));
                }
            }
        }
        if self
            .last
            .as_ref()
            .is_none_or(|(t, _, _)| now.saturating_duration_since(*t) >= Duration::from_secs(5))
        {
            self.last = Some((now, busy, on));
        }
        self.kernels.rank(now);
    }
}

pub(super) fn busy_seconds(o: &mut String, p: &ProcessSeries) {
    let Some(g) = &p.gpu else { return };
    for (d, b) in &g.busy {
        let _ = writeln!(
            o,
            "gputrace_gpu_busy_seconds_total{{device=\"{d}\",{}}} {}",
            p.labels,
            seconds(u128::from(b.total_ns()))
        );
    }
}

pub(super) fn sampled_seconds(o: &mut String, p: &ProcessSeries) {
    let Some(on) = p.gpu.as_ref().and_then(|g| g.sampled_on_ns) else {
        return;
    };
    let _ = writeln!(
        o,
        "gputrace_gpu_sampled_seconds_total{{{}}} {}",
        p.labels,
        seconds(u128::from(on))
    );
}

pub(super) fn stopped(o: &mut String, p: &ProcessSeries) {
    if p.gpu.as_ref().is_some_and(|g| g.stopped) {
        let _ = writeln!(o, "gputrace_gpu_stopped{{{}}} 1", p.labels);
    }
}

pub(super) fn busy_ratio(o: &mut String, p: &ProcessSeries) {
    let Some(g) = &p.gpu else { return };
    for (d, r) in &g.ratio {
        let _ = writeln!(
            o,
            "gputrace_gpu_busy_ratio{{device=\"{d}\",{}}} {r}",
            p.labels
        );
    }
}

pub(super) fn kernel_seconds(o: &mut String, p: &ProcessSeries) {
    let Some(g) = &p.gpu else { return };
    let mut line = |name: &str, ns: u128| {
        o.push_str("gputrace_gpu_kernel_seconds_total{kernel=\"");
        escape_into(o, name);
        let _ = writeln!(o, "\",{}}} {}", p.labels, seconds(ns));
    };
    for (k, ns) in g.kernels.series() {
        line(k, *ns);
    }
    line("other", *g.kernels.other());
}

pub(super) fn nccl_seconds(o: &mut String, p: &ProcessSeries) {
    let Some(g) = &p.gpu else { return };
    for (op, ns) in &g.nccl {
        let _ = writeln!(
            o,
            "gputrace_nccl_gpu_seconds_total{{op=\"{op}\",{}}} {}",
            p.labels,
            seconds(*ns)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::gpu_kernel as kernel;
    use crate::outputs::metrics::ranked::RANK_EVERY;

    #[test]
    fn kernel_series_are_bounded_and_never_go_down() {
        let mut g = GpuSeries::default();
        let t0 = Instant::now();
        for i in 0..100u64 {
            g.record(&kernel(&format!("k{i}"), i * 1000, 10 + i));
        }
        // The first 20 have series from their first kernel.
        assert_eq!(g.kernels.len(), TOP_KERNELS);
        assert!(g.kernels.has(&Arc::from("k0")) && !g.kernels.has(&Arc::from("k20")));
        g.sweep(t0);
        // Then 20 more: those that did more than the least series did.
        assert_eq!(g.kernels.len(), MAX_KERNEL_SERIES);
        assert!(g.kernels.has(&Arc::from("k99")) && !g.kernels.has(&Arc::from("k20")));
        let other = *g.kernels.other();
        assert_eq!(other, (20..100u128).map(|i| 10 + i).sum::<u128>());
        for round in 1..20u64 {
            for i in 0..100u64 {
                // Kernels that did little at first now do the most.
                let dur = if i < 50 { 1_000 + i } else { 10 + i };
                g.record(&kernel(&format!("k{i}"), round * 1_000_000 + i * 1000, dur));
            }
            g.sweep(t0 + RANK_EVERY * round as u32);
            assert!(g.kernels.len() <= MAX_KERNEL_SERIES);
            assert!(*g.kernels.other() >= other);
        }
        assert_eq!(g.kernels.len(), MAX_KERNEL_SERIES);
    }

    #[test]
    fn busy_ratio_is_the_share_of_the_interval() {
        let mut g = GpuSeries::default();
        let t0 = Instant::now();
        g.sweep(t0);
        g.record(&kernel("a", 0, 2_500_000_000));
        g.sweep(t0 + Duration::from_secs(5));
        assert!((g.ratio[&0] - 0.5).abs() < 1e-9, "{:?}", g.ratio);
    }

    #[test]
    fn sampled_busy_ratio_is_the_share_of_the_time_sampled() {
        // --gpu-time-share 10: 0.5 s collected in 5 s, 0.25 s of it busy.
        let mut g = GpuSeries::default();
        let t0 = Instant::now();
        g.note(&AgentNote::Sampled {
            percent: 10,
            on_ns: 1_000_000_000,
        });
        g.sweep(t0);
        g.record(&kernel("a", 0, 250_000_000));
        g.note(&AgentNote::Sampled {
            percent: 10,
            on_ns: 1_500_000_000,
        });
        g.sweep(t0 + Duration::from_secs(5));
        assert!((g.ratio[&0] - 0.5).abs() < 1e-9, "{:?}", g.ratio);
    }
}
