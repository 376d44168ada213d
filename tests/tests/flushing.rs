//! Root tests: a timeline reaches its file within about a second of the
//! calls, whatever the rate and the format (every format is flushed on
//! time, not only when a 1 MiB buffer fills), so `tail -f` follows it and a
//! gputrace killed with SIGKILL leaves every call made before; `gputrace
//! stats` reads such a file and says it was cut short.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use gputrace_tests::*;

const LAUNCHES: u64 = 20;

/// `gputrace stats --format json FILE`: how it ended, and the launches
/// its summary counts.
fn launches_in(path: &Path) -> (Finished, u64) {
    let f = run_gputrace(&["stats", "--format", "json", path.to_str().unwrap()]);
    let v: Value = serde_json::from_str(f.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {:?} {}", f.stdout, f.stderr_text()));
    let n = v["total"]["apis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["name"] == "cuLaunchKernel")
        .map(|a| a["calls"].as_u64().unwrap())
        .sum();
    (f, n)
}

#[test]
fn timelines_are_readable_a_second_after_the_calls_and_after_sigkill() {
    for ext in ["jsonl", "jsonl.zst", "json", "pftrace"] {
        let out = scratch(&format!("flush-{}", ext.replace('.', "-"))).join(format!("t.{ext}"));
        let launches = LAUNCHES.to_string();
        let mut w = Workload::start(&["--launches", &launches, "--wait-stdin-end"]);
        let t = Tracer::attach_to(&w, &out, &["--summary", "none"]);
        // The launches made, then nothing: the process stays at its end.
        let stay = w.go_and_stay();
        std::thread::sleep(Duration::from_millis(1500));
        let (f, n) = launches_in(&out);
        assert_eq!(
            n,
            LAUNCHES,
            ".{ext}: 1.5 s after the last launch, while gputrace runs, the file ({} bytes) holds {n} of them; stats said {}",
            std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0),
            f.stderr_text()
        );
        assert!(f.status.success(), ".{ext}: {}", f.stderr_text());

        t.signal(libc::SIGKILL);
        let killed = t.finish(Duration::from_secs(30));
        assert_eq!(killed.status.code(), None, "killed by the signal");
        let (f, n) = launches_in(&out);
        assert_eq!(n, LAUNCHES, ".{ext} after SIGKILL");
        assert!(f.status.success(), ".{ext}: {}", f.stderr_text());
        assert_eq!(f.stderr.len(), 1, ".{ext}: {:?}", f.stderr);
        let said = &f.stderr[0];
        assert!(
            said.contains("was cut short") || said.contains("has no summary line at its end"),
            ".{ext}: {said}"
        );
        drop(stay);
        assert!(w.finish().0.success());
    }
}
