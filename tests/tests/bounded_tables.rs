//! Root test (issue 26): a traced process that launches kernels of ever new
//! names and makes ever new communicators grows gputrace's tables only to
//! their bounds, and the summary says what went past them (the live side of
//! tracer/tests/reader_bounds.rs; bench/memory/run.sh measures the memory).

use std::time::Duration;

use gputrace_tests::*;
use serde_json::Value;

fn near(got: &Value, want: u64) -> bool {
    let g = got.as_u64().unwrap_or_else(|| panic!("{got}")) as f64;
    (g - want as f64).abs() <= want as f64 * 0.05
}

#[test]
fn distinct_kernels_and_communicators_are_bounded_and_said() {
    let (kernels, comms) = (20_000u64, 5_000u64);
    let mut w = Workload::start(&[
        "--distinct-kernels",
        &kernels.to_string(),
        "--distinct-comms",
        &comms.to_string(),
    ]);
    let pid = w.pid.to_string();
    let t = Tracer::attach(&["--pid", &pid, "--summary", "json"]);
    w.go();
    let (status, _) = w.finish();
    assert!(status.success());
    let f = t.finish(Duration::from_secs(120));
    assert!(f.status.success(), "{}", f.stderr_text());
    let j: Value = serde_json::from_str(&f.stdout).unwrap();
    assert_eq!(j["lost"], 0, "calls lost: the counts below would not hold");
    let p = &j["processes"][0];

    // 10,000 kernel names kept, the other 10,000 launches in one row.
    let rows = p["kernels"].as_array().unwrap();
    assert_eq!(rows.len(), 10_000);
    let kept: u64 = rows.iter().map(|k| k["launches"].as_u64().unwrap()).sum();
    let other = &p["kernels_other"];
    assert_eq!(kept + other["launches"].as_u64().unwrap(), kernels);
    assert!(near(&other["names"], kernels - 10_000), "{other}");

    // 4,096 (operation, communicator) rows kept; 904 more, counted exactly.
    let nccl = p["nccl"].as_array().unwrap();
    assert_eq!(nccl.len(), 4096);
    let more = &p["nccl_other"];
    assert_eq!(more["rows"], comms - 4096, "{more}");
    assert_eq!(more["rows_exact"], true);
    assert_eq!(more["count"], comms - 4096);

    // Across ranks: 256 communicators tracked, the rest dropped and counted.
    assert_eq!(j["nccl_comms"].as_array().unwrap().len(), 256);
    let dropped = &j["nccl_other"]["comms_dropped"];
    assert!(near(&dropped["comms"], comms - 256), "{dropped}");
    // The total says the same.
    assert_eq!(j["total"]["kernels_other"]["launches"], other["launches"]);
}
