//! What `top` shows, as of one refresh: the process rows and the selected
//! process's detail, computed from the model (a frame is a pure function of
//! the app, which holds this snapshot).

use std::sync::Arc;

use crate::model::types::NcclOp;
use crate::stacks::sites::CallSites;
use crate::summary::ProcessSummary;
use crate::tui::model::waits_for_gpu;
use crate::tui::model::Model;
use crate::tui::model::ProcessActivity;
use crate::tui::model::Rates;
use crate::tui::model::Totals;
use crate::tui::model::HISTORY_SECS;

/// One row of the process table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub rates: Rates,
    pub device_bytes: u64,
    pub peak_bytes: u64,
    pub lost: u64,
    pub exited: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiRow {
    pub name: &'static str,
    pub calls_per_s: f64,
    pub failed: u64,
    pub p50: Option<u64>,
    pub p95: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    pub waits: bool,
    /// Top call sites of the calls with a stack (`--stacks`), most host
    /// time first.
    pub sites: Vec<SiteRow>,
}

/// One call site of an API (`top --stacks`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SiteRow {
    pub site: String,
    pub calls_per_s: f64,
    /// Share of the API's host time in calls with a stack.
    pub share: f64,
}

/// Call sites shown per API.
pub(crate) const SITES_SHOWN: usize = 5;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct KernelRow {
    pub name: Option<Arc<str>>,
    /// Runs per second, direct and through graphs.
    pub per_s: f64,
    /// Of those, runs as nodes of graph launches.
    pub graph_per_s: f64,
    pub share: f64,
    /// `--gpu-time`: share of wall time the GPU ran this kernel.
    pub gpu_share: Option<f64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NcclRow {
    pub op: NcclOp,
    pub comm: u64,
    /// (rank, nranks) from the communicator's init call, when traced.
    pub ranks: Option<(Option<i64>, i64)>,
    pub per_s: f64,
    pub bytes_per_s: f64,
    pub avg_bytes: f64,
}

/// One shape of the GEMMs pane.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GemmRow {
    /// `bmm N,T 4×256×512×2048`; `cublasLtMatmul (no shape)` for the
    /// matmuls whose descriptors are not known.
    pub shape: String,
    /// `bf16,bf16→bf16 (32F)`.
    pub types: String,
    pub per_s: f64,
    pub host_p50: Option<u64>,
    /// `--gpu-time`: the average span of a call's kernels on the GPU.
    pub gpu_avg_ns: Option<f64>,
    pub tflops: Option<f64>,
}

/// The window's GEMM shapes, most GPU time (then host time) first.
pub(crate) fn gemm_rows(w: &ProcessSummary, secs: f64) -> Vec<GemmRow> {
    let shapes = w.gemms.settled();
    let mut rows: Vec<GemmRow> = crate::summary::gemm::sorted(&shapes)
        .into_iter()
        .map(|(shape, s)| GemmRow {
            shape: format!("{} {}", shape.op(), shape.label()),
            types: shape.types(),
            per_s: s.host.calls as f64 / secs,
            host_p50: s.host.median_ns(),
            gpu_avg_ns: s.gpu.avg_ns(),
            tflops: s.tflops(shape),
        })
        .collect();
    let unknown = &w.gemms.unknown;
    if unknown.calls > 0 {
        rows.push(GemmRow {
            shape: "cublasLtMatmul (no shape)".into(),
            types: String::new(),
            per_s: unknown.calls as f64 / secs,
            host_p50: unknown.median_ns(),
            gpu_avg_ns: None,
            tflops: None,
        });
    }
    rows
}

/// The selected process in detail.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Detail {
    pub pid: u32,
    pub comm: String,
    pub apis: Vec<ApiRow>,
    pub kernels: Vec<KernelRow>,
    /// GEMMs by shape.
    pub gemms: Vec<GemmRow>,
    pub nccl: Vec<NcclRow>,
    /// Per second, oldest first, [`HISTORY_SECS`] long.
    pub launches: Vec<u64>,
    pub copy_bytes: Vec<u64>,
    pub nccl_bytes: Vec<u64>,
}

/// The numbers on screen, as of one refresh.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// The end (exclusive, Unix seconds) of the windows.
    pub end_sec: u64,
    pub rows: Vec<ProcessRow>,
    pub detail: Option<Detail>,
}

/// The process table's rows at `end` (exclusive, Unix seconds), rates over
/// `window_secs`.
///
/// With `--gpu-time-share` the GPU shares are estimates: what was recorded
/// (the work launched in the sampled windows) over the share sampled.
pub(crate) fn process_rows(model: &Model, end: u64, window_secs: u64) -> Vec<ProcessRow> {
    model
        .processes
        .values()
        .map(|p| ProcessRow {
            pid: p.pid,
            comm: p.comm.clone(),
            rates: {
                let secs = p.covered(end, window_secs);
                let mut r = p.totals(end, secs).per_sec(secs);
                r.gpu_share = r.gpu_share.map(|s| s * sampled_scale(p));
                r
            },
            device_bytes: p.device_bytes,
            peak_bytes: p.peak_bytes,
            lost: p.lost,
            exited: p.exited_at_ns.is_some(),
        })
        .collect()
}

/// What a process's GPU shares are multiplied by: 1, or with
/// `--gpu-time-share` 100 over its percent.
fn sampled_scale(p: &ProcessActivity) -> f64 {
    p.gpu_sampled
        .map_or(1.0, |pct| 100.0 / f64::from(pct.max(1)))
}

/// One process in detail, over the [`DETAIL_WINDOW_SECS`] before `end`.
fn site_rows(sites: &CallSites, api: &str, secs: f64) -> Vec<SiteRow> {
    let top = sites.top(api, SITES_SHOWN);
    let all: u64 = sites.top(api, usize::MAX).iter().map(|s| s.1.host_ns).sum();
    top.into_iter()
        .map(|(site, s)| SiteRow {
            site: site.to_string(),
            calls_per_s: s.calls as f64 / secs,
            share: s.host_ns as f64 / all.max(1) as f64,
        })
        .collect()
}

pub(crate) fn detail(p: &ProcessActivity, end: u64) -> Detail {
    let covered = p.covered(end, DETAIL_WINDOW_SECS);
    let w = p.window(end, covered);
    let secs = covered as f64;
    let apis = w
        .apis
        .iter()
        .map(|(name, s)| {
            let q = |x: f64| s.hist.quantile(x).map(|v| v.clamp(s.min_ns, s.max_ns));
            ApiRow {
                name,
                calls_per_s: s.calls as f64 / secs,
                failed: s.failed,
                p50: q(0.5),
                p95: q(0.95),
                p99: q(0.99),
                max: (s.timed > 0).then_some(s.max_ns),
                waits: waits_for_gpu(name),
                sites: site_rows(&w.sites, name, secs),
            }
        })
        .collect();
    let launches = w.kernel_runs();
    let kernels = w
        .kernel_rows()
        .into_iter()
        .map(|(name, k)| {
            let cfg = k.top_config();
            KernelRow {
                name: name.clone(),
                per_s: k.runs() as f64 / secs,
                graph_per_s: k.graph_launches as f64 / secs,
                share: k.runs() as f64 / launches.max(1) as f64,
                gpu_share: w
                    .gpu
                    .as_ref()
                    .and_then(|g| g.kernels.get(name))
                    .map(|s| s.total_ns as f64 / (secs * 1e9) * sampled_scale(p)),
                grid: cfg.map(|c| c.0),
                block: cfg.map(|c| c.1),
            }
        })
        .collect();
    let mut nccl: Vec<NcclRow> = w
        .nccl
        .rows()
        .map(|((op, comm), n)| NcclRow {
            op: *op,
            comm: *comm,
            ranks: p.comm_ranks(*comm),
            per_s: n.count as f64 / secs,
            bytes_per_s: n.bytes as f64 / secs,
            avg_bytes: n.bytes as f64 / n.count.max(1) as f64,
        })
        .collect();
    nccl.sort_by(|a, b| b.bytes_per_s.total_cmp(&a.bytes_per_s));
    let series = |f: fn(&Totals) -> u64| p.series(end, HISTORY_SECS, f);
    Detail {
        pid: p.pid,
        comm: p.comm.clone(),
        apis,
        kernels,
        gemms: gemm_rows(&w, secs),
        nccl,
        launches: series(|t| t.launches),
        copy_bytes: series(|t| t.copy_bytes.iter().sum()),
        nccl_bytes: series(|t| t.nccl_bytes),
    }
}

/// The latency, kernel and NCCL tables cover this many seconds.
pub(crate) const DETAIL_WINDOW_SECS: u64 = 10;
