//! "GEMMs by shape": every cuBLAS GEMM call grouped by its problem
//! (operations, b × m × n × k) and types, with its host time, the kernels
//! it launched and, with `--gpu-time`, its time on the GPU.
//!
//! A GEMM owns the kernels its thread launched while it was on the stack,
//! and its GPU time is the span of those kernels on the GPU: joined by
//! [`Enclosing`] (which says how, in either arrival order).
//!
//! Bounded throughout: [`MAX_SHAPES`] shapes per process (the rest summed in
//! one row, counted), [`MAX_SHAPE_KERNELS`] kernel names per shape, and the
//! joining state per thread and in all.

use std::sync::Arc;

use crate::model::call::{Args, Call};
use crate::model::capped::Capped;
use crate::model::gemm::{compute_name, dtype_name, op_name, Gemm};
use crate::model::gpu::GpuWork;
use crate::summary::api::ApiStats;
use crate::summary::enclosing::Enclosing;

/// Distinct shapes kept per process (and in the total).
pub const MAX_SHAPES: usize = 1000;
/// Kernel names kept per shape.
pub const MAX_SHAPE_KERNELS: usize = 16;

/// What "GEMMs by shape" groups by: the problem and its types, as the
/// call gave them.
pub type GemmShape = Gemm;

fn or_q(v: Option<&str>) -> &str {
    v.unwrap_or("?")
}

impl Gemm {
    /// `gemm` for one problem, `bmm` for a batch (xpu-timer's names).
    pub fn op(&self) -> &'static str {
        match self.batch {
            Some(1) => "gemm",
            _ => "bmm",
        }
    }

    /// `N,T 8×64×64×128` (operations of A and B, b×m×n×k).
    pub fn label(&self) -> String {
        let b = self.batch.map_or("?".to_string(), |b| b.to_string());
        format!(
            "{},{} {}×{}×{}×{}",
            or_q(self.transa.and_then(op_name)),
            or_q(self.transb.and_then(op_name)),
            b,
            self.m,
            self.n,
            self.k
        )
    }

    /// `bf16,bf16→bf16 (32F)`: A, B, C and the compute type.
    pub fn types(&self) -> String {
        let t = |v: Option<u32>| or_q(v.and_then(dtype_name)).to_string();
        let mut s = format!("{},{}→{}", t(self.a_type), t(self.b_type), t(self.c_type));
        if let Some(c) = self.compute.and_then(compute_name) {
            s.push_str(&format!(" ({c})"));
        }
        s
    }
}

/// One shape's calls.
#[derive(Clone, Debug, Default)]
pub struct GemmStats {
    /// The calls and their time on the host.
    pub host: ApiStats,
    /// With `--gpu-time`: each call's span on the GPU.
    pub gpu: ApiStats,
    /// The kernels its calls launched, by name, with how many.
    pub kernels: Capped<Option<Arc<str>>, u64, MAX_SHAPE_KERNELS>,
}

impl GemmStats {
    fn merge(&mut self, o: &GemmStats) {
        self.host.merge(&o.host);
        self.gpu.merge(&o.gpu);
        self.kernels.merge(&o.kernels, |n| *n, |a, b| *a += *b);
    }

    /// Achieved TFLOP/s over the GPU time measured (calls with no GPU
    /// record are not counted in it).
    pub fn tflops(&self, shape: &GemmShape) -> Option<f64> {
        let f = shape.flops()?;
        (self.gpu.total_ns > 0).then(|| f * self.gpu.timed as f64 / self.gpu.total_ns as f64 / 1e3)
    }

    /// Kernels by launches, then name.
    pub fn kernel_rows(&self) -> Vec<(&Option<Arc<str>>, u64)> {
        let mut rows: Vec<_> = self
            .kernels
            .rows()
            .map(|(k, n)| (k, *n))
            .filter(|(_, n)| *n > 0)
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        rows
    }
}

/// The GEMMs of one process.
#[derive(Clone, Debug, Default)]
pub struct GemmBook {
    pub shapes: Shapes,
    join: Enclosing<Arc<GemmShape>>,
    /// cublasLtMatmul calls whose descriptors were not seen made (made
    /// before gputrace attached, or initialised in place): no shape.
    pub unknown: ApiStats,
}

impl GemmBook {
    /// A call the probes saw (launches and GEMMs; the rest are ignored).
    pub fn record(&mut self, c: &Call) {
        if c.failed() {
            return;
        }
        match &c.args {
            Args::Lt(crate::model::lt::LtCall::Matmul { .. }) => {
                self.unknown.record(c.dur_ns, false)
            }
            Args::Gemm(g) => {
                let shape = g.clone();
                self.shapes.slot(&shape).host.record(c.dur_ns, false);
                let shape = Arc::new(shape);
                for kernel in self.join.call(c, shape.clone()) {
                    *self.shapes.slot(&shape).kernels.slot(&kernel) += 1;
                }
            }
            _ => {
                if let Some((shape, kernel)) = self.join.launch(c) {
                    *self.shapes.slot(&shape).kernels.slot(&kernel) += 1;
                }
            }
        }
    }

    /// `--gpu-time`: a piece of GPU work; a kernel of a launch a GEMM owns
    /// adds to that GEMM's span, and names the kernel where the launch did
    /// not.
    pub fn record_gpu(&mut self, w: &GpuWork) {
        if let Some((shape, name)) = self.join.named_by_gpu(w) {
            let kernels = &mut self.shapes.slot(&shape).kernels;
            let unnamed = kernels.slot(&None);
            *unnamed = unnamed.saturating_sub(1);
            *kernels.slot(&Some(name)) += 1;
        }
        if let Some(done) = self.join.gpu(w) {
            self.close(done);
        }
    }

    fn close(&mut self, (shape, ns): (Arc<GemmShape>, u64)) {
        self.shapes.slot(&shape).gpu.record(Some(ns), false);
    }

    /// Spans still open are whole once no more work comes (the end of a
    /// trace, a summary taken): closes them.
    pub fn close_spans(&mut self) {
        for done in self.join.close_all() {
            self.close(done);
        }
    }

    pub fn merge(&mut self, o: &GemmBook) {
        let mut theirs = o.shapes.clone();
        for (shape, ns) in o.join.open_spans() {
            theirs.slot(shape).gpu.record(Some(ns), false);
        }
        self.shapes
            .merge(&theirs, |s| s.host.calls, GemmStats::merge);
        self.unknown.merge(&o.unknown);
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty() && self.unknown.calls == 0
    }

    /// The shapes with the spans still open closed (on a copy).
    pub fn settled(&self) -> Shapes {
        let mut all = GemmBook::default();
        all.merge(self);
        all.shapes
    }
}

pub type Shapes = Capped<GemmShape, GemmStats, MAX_SHAPES>;

/// Shapes by GPU time, then host time, then calls.
pub fn sorted(t: &Shapes) -> Vec<(&GemmShape, &GemmStats)> {
    let mut rows: Vec<_> = t.rows().collect();
    rows.sort_by(|a, b| {
        b.1.gpu
            .total_ns
            .cmp(&a.1.gpu.total_ns)
            .then(b.1.host.total_ns.cmp(&a.1.host.total_ns))
            .then(b.1.host.calls.cmp(&a.1.host.calls))
            .then(a.0.cmp(b.0))
    });
    rows
}

pub mod render;

#[cfg(test)]
mod tests;
