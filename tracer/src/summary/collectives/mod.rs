//! "Collectives by size": successful NCCL calls grouped by operation,
//! datatype and size (a power-of-two bucket), with their host time and,
//! with `--gpu-time`, the GPU time of each call and the bandwidths
//! nccl-tests reports.
//!
//! The size is nccl-tests' "size" for the operation: the buffer of one
//! rank for AllReduce, Broadcast, Reduce, Send and Recv (count × type
//! size), the whole gathered or scattered buffer for AllGather and
//! ReduceScatter (count × type size × nranks; NCCL's count is then the
//! send or receive count of one rank). Where the communicator's size is
//! not known (neither the call nor the traced init says it), those
//! operations are in the "size unknown" bucket.
//!
//! A call's GPU time is the span of the kernels launched inside it on its
//! thread, joined by [`Enclosing`] as GEMMs are. Collectives in a group
//! (`ncclGroupStart` … `ncclGroupEnd`) launch their kernels in
//! `ncclGroupEnd`, outside their own call: they get no GPU time here.
//!
//! Bounded: [`MAX_COLL_ROWS`] rows per process (the rest summed in one row
//! and counted), and the joining state as [`Enclosing`] bounds it.

use rustc_hash::FxHashMap as HashMap;

use crate::model::call::{nccl_type_name, Args, Call, Nccl};
use crate::model::capped::Capped;
use crate::model::gpu::GpuWork;
use crate::model::types::NcclOp;
use crate::summary::api::ApiStats;
use crate::summary::enclosing::Enclosing;

/// Rows (operation, datatype, size bucket) kept per process (and in the
/// total).
pub const MAX_COLL_ROWS: usize = 1000;

/// A size's bucket: `Pow(k)` holds sizes in [2^k, 2^(k+1)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeBucket {
    Zero,
    Pow(u8),
    Unknown,
}

impl SizeBucket {
    pub fn of(size: Option<u64>) -> Self {
        match size {
            None => SizeBucket::Unknown,
            Some(0) => SizeBucket::Zero,
            Some(s) => SizeBucket::Pow(63 - s.leading_zeros() as u8),
        }
    }

    /// The bucket's sizes: [low, high), bytes (`None` when unknown; the
    /// last bucket's high is past `u64`).
    pub fn range(self) -> Option<(u64, u128)> {
        match self {
            SizeBucket::Zero => Some((0, 1)),
            SizeBucket::Pow(k) => Some((1u64 << k, 1u128 << (k + 1))),
            SizeBucket::Unknown => None,
        }
    }

    /// `1 MiB–2 MiB`, `0 B`, `size unknown`.
    pub fn label(self) -> String {
        match self {
            SizeBucket::Zero => "0 B".into(),
            SizeBucket::Pow(k) => format!("{}–{}", pow2_label(k), pow2_label(k + 1)),
            SizeBucket::Unknown => "size unknown".into(),
        }
    }
}

/// 2^k bytes as `512 B`, `64 KiB`, `2 GiB`.
fn pow2_label(k: u8) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let unit = (usize::from(k) / 10).min(UNITS.len() - 1);
    let n = 1u128 << (u32::from(k) - 10 * unit as u32);
    format!("{n} {}", UNITS[unit])
}

/// What the table groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CollKey {
    pub op: NcclOp,
    /// `ncclDataType_t`.
    pub datatype: i64,
    pub bucket: SizeBucket,
}

impl CollKey {
    /// `float32`, or `type 42` for a code NCCL does not define.
    pub fn datatype_name(&self) -> String {
        nccl_type_name(self.datatype)
            .map_or_else(|| format!("type {}", self.datatype), String::from)
    }
}

/// nccl-tests' size of a call, bytes (`None` where it needs the
/// communicator's size and that is not known, or the type is unknown).
pub fn nccl_tests_size(n: &Nccl, nranks: Option<u32>) -> Option<u64> {
    let bytes = n.bytes()?;
    match n.op {
        NcclOp::AllGather | NcclOp::ReduceScatter => Some(bytes.saturating_mul(u64::from(nranks?))),
        NcclOp::AllReduce | NcclOp::Broadcast | NcclOp::Reduce | NcclOp::Send | NcclOp::Recv => {
            Some(bytes)
        }
    }
}

/// nccl-tests' bus bandwidth factor (busbw = algbw × it; PERFORMANCE.md).
pub fn busbw_factor(op: NcclOp, nranks: Option<u32>) -> Option<f64> {
    match op {
        NcclOp::AllReduce | NcclOp::AllGather | NcclOp::ReduceScatter => {
            let n = f64::from(nranks.filter(|n| *n > 0)?);
            let share = (n - 1.0) / n;
            Some(if op == NcclOp::AllReduce {
                2.0 * share
            } else {
                share
            })
        }
        NcclOp::Broadcast | NcclOp::Reduce | NcclOp::Send | NcclOp::Recv => Some(1.0),
    }
}

/// One row's calls.
#[derive(Clone, Debug, Default)]
pub struct CollStats {
    /// The calls and their time on the host.
    pub host: ApiStats,
    /// The sizes summed (0 in the "size unknown" row).
    pub bytes: u64,
    /// With `--gpu-time`: each call's span on the GPU.
    pub gpu: ApiStats,
    /// The calls timed on the GPU whose size is known: their sizes
    /// summed, and their GPU time.
    pub gpu_bytes: u128,
    pub gpu_sized_ns: u64,
    /// Of those, the calls whose bus factor is known: size × factor
    /// summed, and their GPU time.
    pub bus_bytes: f64,
    pub bus_ns: u64,
}

impl CollStats {
    fn merge(&mut self, o: &CollStats) {
        self.host.merge(&o.host);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.gpu.merge(&o.gpu);
        self.gpu_bytes += o.gpu_bytes;
        self.gpu_sized_ns = self.gpu_sized_ns.saturating_add(o.gpu_sized_ns);
        self.bus_bytes += o.bus_bytes;
        self.bus_ns = self.bus_ns.saturating_add(o.bus_ns);
    }

    /// Algorithm bandwidth, GB/s: the sizes over the GPU time, of the
    /// calls timed on the GPU (whose size is known).
    pub fn algbw_gbps(&self) -> Option<f64> {
        (self.gpu_sized_ns > 0).then(|| self.gpu_bytes as f64 / self.gpu_sized_ns as f64)
    }

    /// Bus bandwidth, GB/s: algbw × the operation's factor, per call.
    pub fn busbw_gbps(&self) -> Option<f64> {
        (self.bus_ns > 0).then(|| self.bus_bytes / self.bus_ns as f64)
    }

    /// A call's span on the GPU.
    fn gpu_span(&mut self, call: &CollCall, ns: u64) {
        self.gpu.record(Some(ns), false);
        if let Some(size) = call.size {
            self.gpu_bytes += u128::from(size);
            self.gpu_sized_ns = self.gpu_sized_ns.saturating_add(ns);
            if let Some(f) = call.factor {
                self.bus_bytes += size as f64 * f;
                self.bus_ns = self.bus_ns.saturating_add(ns);
            }
        }
    }
}

/// A collective call as the join keeps it.
#[derive(Clone, Copy, Debug)]
struct CollCall {
    key: CollKey,
    size: Option<u64>,
    factor: Option<f64>,
}

pub type CollRows = Capped<CollKey, CollStats, MAX_COLL_ROWS>;

/// The collectives of one process.
#[derive(Clone, Debug, Default)]
pub struct CollBook {
    pub rows: CollRows,
    join: Enclosing<CollCall>,
}

impl CollBook {
    /// A call the probes saw (launches and NCCL calls; the rest are
    /// ignored). `comms`: (nranks, rank) by communicator, from its init.
    pub fn record(&mut self, c: &Call, comms: &HashMap<u64, (i64, Option<i64>)>) {
        match &c.args {
            Args::Nccl(n) if !c.failed() => {
                let nranks = n.ident.nranks.or_else(|| {
                    comms
                        .get(&n.comm)
                        .and_then(|r| u32::try_from(r.0).ok())
                        .filter(|n| *n > 0)
                });
                let size = nccl_tests_size(n, nranks);
                let call = CollCall {
                    key: CollKey {
                        op: n.op,
                        datatype: n.datatype,
                        bucket: SizeBucket::of(size),
                    },
                    size,
                    factor: busbw_factor(n.op, nranks),
                };
                let s = self.rows.slot(&call.key);
                s.host.record(c.dur_ns, false);
                s.bytes = s.bytes.saturating_add(size.unwrap_or(0));
                self.join.call(c, call);
            }
            _ => {
                self.join.launch(c);
            }
        }
    }

    /// `--gpu-time`: a kernel of a launch a collective owns adds to that
    /// call's span.
    pub fn record_gpu(&mut self, w: &GpuWork) {
        if let Some((call, ns)) = self.join.gpu(w) {
            self.rows.slot(&call.key).gpu_span(&call, ns);
        }
    }

    pub fn merge(&mut self, o: &CollBook) {
        let mut theirs = o.rows.clone();
        for (call, ns) in o.join.open_spans() {
            theirs.slot(&call.key).gpu_span(call, ns);
        }
        self.rows.merge(&theirs, |s| s.host.calls, CollStats::merge);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows with the spans still open closed (on a copy).
    pub fn settled(&self) -> CollRows {
        let mut all = CollBook::default();
        all.merge(self);
        all.rows
    }
}

/// Rows by operation, datatype, then size.
pub fn sorted(t: &CollRows) -> Vec<(&CollKey, &CollStats)> {
    let mut rows: Vec<_> = t.rows().collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    rows
}

pub mod render;

#[cfg(test)]
mod tests;
