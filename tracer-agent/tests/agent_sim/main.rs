//! The agent against the simulated CUPTI (tests/sim), loaded by
//! gputrace-workload with --load-agent: no injector, no GPU, no root.

mod harness;
mod lifecycle;
mod limits;
mod records;

use std::collections::HashMap;

use tracer_common::gpu::{ApiRecord, KernelRecord, MemcpyRecord, MemsetRecord, Record};

/// The records of a run, by kind.
#[derive(Default)]
pub struct Split {
    pub kernels: Vec<KernelRecord>,
    pub memcpys: Vec<MemcpyRecord>,
    pub memsets: Vec<MemsetRecord>,
    pub apis: Vec<ApiRecord>,
}

pub fn split(recs: &[Record]) -> Split {
    let mut s = Split::default();
    for r in recs {
        match *r {
            Record::Kernel(k) => s.kernels.push(k),
            Record::Memcpy(m) => s.memcpys.push(m),
            Record::Memset(m) => s.memsets.push(m),
            Record::Api(a) => s.apis.push(a),
        }
    }
    s
}

impl Split {
    /// API records by correlation id (each must be unique).
    pub fn api_by_corr(&self) -> HashMap<u32, ApiRecord> {
        let mut m = HashMap::new();
        for a in &self.apis {
            assert!(
                m.insert(a.common.correlation, *a).is_none(),
                "correlation id {} twice",
                a.common.correlation
            );
        }
        m
    }

    /// (stream, start, end, correlation) of every GPU record.
    pub fn gpu_intervals(&self) -> Vec<(u32, u64, u64, u32)> {
        let k = self.kernels.iter().map(|r| &r.common);
        let c = self.memcpys.iter().map(|r| &r.common);
        let s = self.memsets.iter().map(|r| &r.common);
        k.chain(c)
            .chain(s)
            .map(|c| (c.stream, c.start, c.end, c.correlation))
            .collect()
    }

    /// The simulator's timeline: on each stream, work runs in order, each
    /// piece starting at max(its API call's start + 2 µs, the previous
    /// end). The simulator's API start lies between the agent's entry and
    /// exit readings of the call (the API record's start and end).
    pub fn check_stream_timelines(&self) {
        let apis = self.api_by_corr();
        let mut by_stream: HashMap<u32, Vec<(u64, u64, u32)>> = HashMap::new();
        for (s, start, end, corr) in self.gpu_intervals() {
            by_stream.entry(s).or_default().push((start, end, corr));
        }
        for (stream, mut v) in by_stream {
            v.sort();
            let mut prev_end = 0;
            for (start, end, corr) in v {
                let api = apis
                    .get(&corr)
                    .unwrap_or_else(|| panic!("no API record for correlation {corr}"));
                let lo = (api.common.start + 2000).max(prev_end);
                let hi = (api.common.end + 2000).max(prev_end);
                assert!(
                    lo <= start && start <= hi,
                    "stream {stream}: correlation {corr} starts off the timeline \
                     ({start} not in {lo}..={hi})"
                );
                assert!(end > start);
                prev_end = end;
            }
        }
    }
}

/// The simulator's kernel duration: max(1, threads / 64) ns.
pub fn kernel_ns(grid: [u32; 3], block: [u32; 3]) -> u64 {
    let t = grid
        .iter()
        .chain(block.iter())
        .map(|&v| v as u64)
        .product::<u64>();
    (t / 64).max(1)
}

pub const VECTOR_ADD: &str = "_Z10vector_addPKfS0_Pfi";
pub const REDUCE: &str = "_ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi";
pub const RELU: &str = "_Z4reluPfi";
pub const GEMM: &str = "_ZN6cublas4gemmIfEEvPKT_S3_PS1_iii";
