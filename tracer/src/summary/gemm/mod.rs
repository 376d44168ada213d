//! "GEMMs by shape": every cuBLAS GEMM call grouped by its problem
//! (operations, b × m × n × k) and types, with its host time, the kernels
//! it launched and, with `--gpu-time`, its time on the GPU.
//!
//! A GEMM owns the kernels its thread launched while it was on the stack:
//! a launch whose interval lies inside the GEMM call's, on the same thread.
//! Calls come in the order they returned (a GEMM after its launches) from a
//! live trace and a JSONL file, in start order from a Perfetto file (a GEMM
//! before its launches): each thread keeps its last few launches and its
//! last few GEMMs, so either order joins.
//!
//! A GEMM's GPU time is the span of its kernels on the GPU, from the first
//! one's start to the last one's end (what CUDA events around the call
//! measure). A kernel's GPU record names the launch call that queued it
//! (its thread and start); the launches a GEMM owns are remembered long
//! enough for their records to come (bounded: [`MAX_OWNED`]).
//!
//! Bounded throughout: [`MAX_SHAPES`] shapes per process (the rest summed in
//! one row, counted), [`MAX_SHAPE_KERNELS`] kernel names per shape, and the
//! joining state per thread and in all.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::model::call::{Args, Call};
use crate::model::capped::Capped;
use crate::model::gemm::{compute_name, dtype_name, op_name, Gemm};
use crate::model::gpu::{GpuOp, GpuWork};
use crate::summary::api::ApiStats;

/// Distinct shapes kept per process (and in the total).
pub const MAX_SHAPES: usize = 1000;
/// Kernel names kept per shape.
pub const MAX_SHAPE_KERNELS: usize = 16;
/// Launches and GEMMs kept per thread for joining (a cuBLAS GEMM launches
/// one to three kernels).
const RECENT: usize = 16;
/// Threads whose recent calls are kept.
const MAX_THREADS: usize = 1024;
/// Launches owned by a GEMM, remembered for their GPU records.
const MAX_OWNED: usize = 1 << 16;

/// What "GEMMs by shape" groups by: the problem and its types.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GemmShape {
    pub transa: Option<u32>,
    pub transb: Option<u32>,
    pub batch: Option<i64>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a_type: Option<u32>,
    pub b_type: Option<u32>,
    pub c_type: Option<u32>,
    pub compute: Option<u32>,
}

impl From<&Gemm> for GemmShape {
    fn from(g: &Gemm) -> Self {
        Self {
            transa: g.transa,
            transb: g.transb,
            batch: g.batch,
            m: g.m,
            n: g.n,
            k: g.k,
            a_type: g.a_type,
            b_type: g.b_type,
            c_type: g.c_type,
            compute: g.compute,
        }
    }
}

fn or_q(v: Option<&str>) -> &str {
    v.unwrap_or("?")
}

impl GemmShape {
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

    /// 2·b·m·n·k, where the batch is known.
    pub fn flops(&self) -> Option<f64> {
        let b = self.batch?;
        Some(2.0 * b as f64 * self.m as f64 * self.n as f64 * self.k as f64)
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

/// A launch seen on a thread: (start, end, kernel).
type Launch = (u64, u64, Option<Arc<str>>);

/// A GEMM call: (start, end, shape).
type GemmCall = (u64, u64, Arc<GemmShape>);

#[derive(Clone, Debug, Default)]
struct Recent {
    launches: VecDeque<Launch>,
    gemms: VecDeque<GemmCall>,
}

/// A GEMM call's kernels on the GPU so far: (its start, shape, first
/// kernel's start, last one's end).
type Open = (u64, Arc<GemmShape>, u64, u64);

/// The GEMMs of one process.
#[derive(Clone, Debug, Default)]
pub struct GemmBook {
    pub shapes: Shapes,
    threads: HashMap<u32, Recent>,
    /// (thread, launch start) → (the GEMM's start, its shape, whether the
    /// launch named its kernel), oldest first.
    owned: HashMap<(u32, u64), (u64, Arc<GemmShape>, bool)>,
    owned_order: VecDeque<(u32, u64)>,
    /// Per thread, the GEMM call whose kernels the GPU is reporting.
    open: HashMap<u32, Open>,
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
        let end = c.ts_ns.saturating_add(c.dur_ns.unwrap_or(0));
        match &c.args {
            Args::Lt(crate::model::lt::LtCall::Matmul { .. }) => {
                self.unknown.record(c.dur_ns, false)
            }
            Args::Gemm(g) => {
                let shape = GemmShape::from(g);
                self.shapes.slot(&shape).host.record(c.dur_ns, false);
                let shape = Arc::new(shape);
                let mut mine = Vec::new();
                let r = self.thread(c.tid);
                if c.dur_ns.is_some() {
                    r.launches.retain(|l| {
                        let inside = c.ts_ns <= l.0 && l.1 <= end;
                        if inside {
                            mine.push(l.clone());
                        }
                        !inside
                    });
                    if r.gemms.len() >= RECENT {
                        r.gemms.pop_front();
                    }
                    r.gemms.push_back((c.ts_ns, end, shape.clone()));
                }
                for l in mine {
                    self.own(c.tid, l, c.ts_ns, &shape);
                }
            }
            Args::Launch(l) if l.captured.is_none() => {
                let launch = (c.ts_ns, end, l.kernel.clone());
                let r = self.thread(c.tid);
                let gemm = r
                    .gemms
                    .iter()
                    .rev()
                    .find(|g| g.0 <= launch.0 && launch.1 <= g.1)
                    .map(|g| (g.0, g.2.clone()));
                match gemm {
                    Some((start, shape)) => self.own(c.tid, launch, start, &shape),
                    None if c.dur_ns.is_some() => {
                        if r.launches.len() >= RECENT {
                            r.launches.pop_front();
                        }
                        r.launches.push_back(launch);
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

    fn thread(&mut self, tid: u32) -> &mut Recent {
        if !self.threads.contains_key(&tid) && self.threads.len() >= MAX_THREADS {
            // Forget one thread (an arbitrary one: joins are short-lived).
            if let Some(&t) = self.threads.keys().next() {
                self.threads.remove(&t);
            }
        }
        self.threads.entry(tid).or_default()
    }

    /// Launch `l` on `tid` belongs to the GEMM that started at `start`.
    fn own(&mut self, tid: u32, l: Launch, start: u64, shape: &Arc<GemmShape>) {
        *self.shapes.slot(shape).kernels.slot(&l.2) += 1;
        let key = (tid, l.0);
        if self
            .owned
            .insert(key, (start, shape.clone(), l.2.is_some()))
            .is_none()
        {
            self.owned_order.push_back(key);
            while self.owned_order.len() > MAX_OWNED {
                if let Some(old) = self.owned_order.pop_front() {
                    self.owned.remove(&old);
                }
            }
        }
    }

    /// `--gpu-time`: a piece of GPU work; a kernel of a launch a GEMM owns
    /// adds to that GEMM's span, and names the kernel where the launch did
    /// not (a kernel loaded before gputrace attached whose handle could not
    /// be read).
    pub fn record_gpu(&mut self, w: &GpuWork) {
        let GpuOp::Kernel { name, .. } = &w.op else {
            return;
        };
        let Some(l) = &w.launch else { return };
        let Some((call_start, _)) = l.call else {
            return;
        };
        let Some((start, shape, named)) = self.owned.get_mut(&(l.tid, call_start)) else {
            return;
        };
        let (start, shape) = (*start, shape.clone());
        if let (false, Some(n)) = (*named, name) {
            *named = true;
            let kernels = &mut self.shapes.slot(&shape).kernels;
            let unnamed = kernels.slot(&None);
            *unnamed = unnamed.saturating_sub(1);
            *kernels.slot(&Some(n.clone())) += 1;
        }
        match self.open.get_mut(&l.tid) {
            Some(o) if o.0 == start => {
                o.2 = o.2.min(w.start_ns);
                o.3 = o.3.max(w.end_ns);
            }
            _ => {
                if let Some(done) = self
                    .open
                    .insert(l.tid, (start, shape, w.start_ns, w.end_ns))
                {
                    self.close(done);
                }
            }
        }
    }

    fn close(&mut self, (_, shape, first, last): Open) {
        self.shapes
            .slot(&shape)
            .gpu
            .record(Some(last.saturating_sub(first)), false);
    }

    /// Spans still open are whole once no more work comes (the end of a
    /// trace, a summary taken): closes them.
    pub fn close_spans(&mut self) {
        for (_, o) in std::mem::take(&mut self.open) {
            self.close(o);
        }
    }

    pub fn merge(&mut self, o: &GemmBook) {
        let mut theirs = o.shapes.clone();
        for (_, open) in &o.open {
            theirs
                .slot(&open.1)
                .gpu
                .record(Some(open.3.saturating_sub(open.2)), false);
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
