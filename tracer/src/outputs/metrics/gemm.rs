//! cuBLAS GEMMs per shape: calls, host time (a histogram) and, with
//! `--gpu-time`, GPU time (the span of each call's kernels, joined as the
//! summary's "GEMMs by shape" joins them: [`Enclosing`]).
//!
//! Shape series are bounded ([`Ranked`]): a process's first
//! [`TOP_SHAPES`] shapes have series from their first call; then every ten
//! seconds the shapes with the most GPU time (then host time, for shapes
//! with no GPU time) get series of their own, up to [`MAX_SHAPE_SERIES`];
//! the rest, and a later shape's calls before it got its series, count in
//! `shape="other"`.

use std::fmt::Write;
use std::ops::{Add, Sub};
use std::sync::Arc;
use std::time::Instant;

use crate::model::call::{Args, Call};
use crate::model::gpu::GpuWork;
use crate::outputs::metrics::ranked::Ranked;
use crate::outputs::metrics::{escape_into, histogram, seconds, ApiSeries, ProcessSeries};
use crate::summary::enclosing::Enclosing;
use crate::summary::gemm::GemmShape;

/// Shapes with series of their own per process, at first.
pub(super) const TOP_SHAPES: usize = 20;
/// At most, per process.
pub(super) const MAX_SHAPE_SERIES: usize = 40;

/// What shapes are ranked by: GPU time first, then host time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ShapeTime {
    gpu_ns: u128,
    host_ns: u128,
}

impl Add for ShapeTime {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            gpu_ns: self.gpu_ns + o.gpu_ns,
            host_ns: self.host_ns + o.host_ns,
        }
    }
}

impl Sub for ShapeTime {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            gpu_ns: self.gpu_ns.saturating_sub(o.gpu_ns),
            host_ns: self.host_ns.saturating_sub(o.host_ns),
        }
    }
}

/// One shape's series.
#[derive(Clone, Debug, Default)]
pub(super) struct ShapeSeries {
    host: ApiSeries,
    gpu_ns: u128,
}

#[derive(Clone, Debug, Default)]
pub(super) struct GemmSeries {
    shapes: Ranked<Arc<GemmShape>, ShapeSeries, ShapeTime, TOP_SHAPES, MAX_SHAPE_SERIES>,
    join: Enclosing<Arc<GemmShape>>,
    /// A GEMM was called (its series are written).
    called: bool,
}

impl GemmSeries {
    /// A successful call: a GEMM, or a launch a GEMM may own.
    pub(super) fn record(&mut self, c: &Call) {
        let Args::Gemm(g) = &c.args else {
            self.join.launch(c);
            return;
        };
        self.called = true;
        let shape = Arc::new(g.clone());
        let w = ShapeTime {
            gpu_ns: 0,
            host_ns: u128::from(c.dur_ns.unwrap_or(0)),
        };
        self.shapes.slot(&shape, w).host.record(c.dur_ns);
        self.join.call(c, shape);
    }

    /// `--gpu-time`: a kernel; a GEMM's span counts once it is whole.
    pub(super) fn gpu(&mut self, w: &GpuWork) {
        if let Some(done) = self.join.gpu(w) {
            self.span(done);
        }
    }

    fn span(&mut self, (shape, ns): (Arc<GemmShape>, u64)) {
        let w = ShapeTime {
            gpu_ns: u128::from(ns),
            host_ns: 0,
        };
        self.shapes.slot(&shape, w).gpu_ns += u128::from(ns);
    }

    /// Every second: spans no kernel came to since the last sweep count;
    /// every ten, shapes are ranked.
    pub(super) fn sweep(&mut self, now: Instant) {
        for done in self.join.close_idle() {
            self.span(done);
        }
        self.shapes.rank(now);
    }

    /// Each series' `shape="…",dtype="…"` and values, `other` last.
    fn rows(&self) -> Vec<(String, &ShapeSeries)> {
        let mut rows: Vec<(String, &ShapeSeries)> =
            self.shapes.series().map(|(s, v)| (labels(s), v)).collect();
        rows.push((
            "shape=\"other\",dtype=\"other\"".into(),
            self.shapes.other(),
        ));
        rows
    }

    #[cfg(test)]
    pub(super) fn series(&self) -> usize {
        self.shapes.len()
    }
}

/// `shape="N,T 8x64x64x128",dtype="bf16,bf16->bf16 (32F)"`.
fn labels(s: &GemmShape) -> String {
    let mut o = String::from("shape=\"");
    escape_into(&mut o, &s.label().replace('×', "x"));
    o.push_str("\",dtype=\"");
    escape_into(&mut o, &s.types().replace('→', "->"));
    o.push('"');
    o
}

pub(super) fn calls(o: &mut String, p: &ProcessSeries) {
    if !p.gemm.called {
        return;
    }
    for (l, s) in p.gemm.rows() {
        let _ = writeln!(
            o,
            "gputrace_gemm_calls_total{{{l},{}}} {}",
            p.labels, s.host.calls
        );
    }
}

pub(super) fn durations(o: &mut String, p: &ProcessSeries) {
    if !p.gemm.called {
        return;
    }
    for (l, s) in p.gemm.rows() {
        histogram(
            o,
            "gputrace_gemm_seconds",
            &format!("{l},{}", p.labels),
            &s.host,
        );
    }
}

pub(super) fn gpu_seconds(o: &mut String, p: &ProcessSeries) {
    if !p.gemm.called || p.gpu.is_none() {
        return;
    }
    for (l, s) in p.gemm.rows() {
        let _ = writeln!(
            o,
            "gputrace_gemm_gpu_seconds_total{{{l},{}}} {}",
            p.labels,
            seconds(s.gpu_ns)
        );
    }
}
