//! What the `--overhead-budget` tests run.

/// One pass of the workload: 200 launches and 20 capture checks (a
/// `cuStreamIsCapturing` and a `cuStreamGetCaptureInfo_v3` each), with 2
/// event records and 2 stream waits (samplable), one allocation of each
/// kind and its free, and synchronisations (rare: never sampled).
pub const PASS: &[&str] = &[
    "--launches",
    "200",
    "--capture-checks",
    "20",
    "--allocs",
    "1",
    "--syncs",
    "2",
];
