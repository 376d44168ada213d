//! Root test of the daemon through process churn: thousands of short GPU
//! processes, each traced from its first call; probes, file descriptors,
//! memory and per-process state stay flat.
//!
//! Other tests start workloads on the same simulated library at the same
//! time, and the daemon sees those too: assertions name the PIDs this test
//! started, never totals.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gputrace_tests::node::*;
use gputrace_tests::*;

fn churn(n: usize, threads: usize) -> Vec<u32> {
    let bin = workload_bin();
    let per = n.div_ceil(threads);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let bin = bin.clone();
            std::thread::spawn(move || {
                let mut pids = Vec::with_capacity(per);
                for _ in 0..per {
                    let mut child = Command::new(&bin)
                        .args(["--launches", "1"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("start a workload");
                    pids.push(child.id());
                    assert!(child.wait().unwrap().success());
                }
                pids
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// What the churn test measures of the daemon.
#[derive(Debug)]
struct Footprint {
    fds: usize,
    non_link_fds: usize,
    probes: u64,
    rss_kib: u64,
    anon_kib: u64,
    process_states: f64,
}

fn footprint(d: &Daemon) -> Footprint {
    let pid = d.pid();
    Footprint {
        fds: open_fds(pid),
        non_link_fds: non_link_fds(pid),
        probes: kernel_probes_under(pid, &sim_dir()),
        rss_kib: rss_kib(pid),
        anon_kib: status_kib(pid, "RssAnon"),
        process_states: sample(&d.metrics(), "gputrace_process_states", &[]).unwrap(),
    }
}

#[test]
fn daemon_survives_process_churn_without_leaks() {
    // Keeps the simulated library mapped, so its probes stay attached.
    let anchor = Workload::start(&[]);
    let d = Daemon::start(&["--keep-exited", "1s"], &[]);
    let settle = |pids: &[u32]| {
        // Series go 1 s after exit (+ the 1 s sweep), decoding state 2 s after.
        let set: std::collections::BTreeSet<u32> = pids.iter().copied().collect();
        d.wait_metrics(Duration::from_secs(60), |m| pids_in(m).is_disjoint(&set));
        std::thread::sleep(Duration::from_secs(3));
    };
    // Warm-up, /metrics scraped while it runs, as Prometheus would.
    let warm = std::thread::scope(|s| {
        let h = s.spawn(|| churn(1000, 4));
        while !h.is_finished() {
            let _ = d.metrics();
            std::thread::sleep(Duration::from_millis(250));
        }
        h.join().unwrap()
    });
    settle(&warm);
    let before = footprint(&d);

    // Two rounds: memory the allocator keeps after the first (its high-water
    // mark) is not a leak; growth that goes on in the second would be.
    const N: usize = 3000;
    let mut rounds = Vec::new();
    for round in 1..=2 {
        let t0 = Instant::now();
        let (pids, seen) = std::thread::scope(|s| {
            let h = s.spawn(|| churn(N, 4));
            let mut seen = std::collections::BTreeSet::new();
            while !h.is_finished() {
                seen.extend(pids_in(&d.metrics()));
                std::thread::sleep(Duration::from_millis(250));
            }
            (h.join().unwrap(), seen)
        });
        let took = t0.elapsed();
        settle(&pids);
        let after = footprint(&d);
        let live = live_gpu_processes();
        let seen_churned = pids.iter().filter(|p| seen.contains(p)).count();
        println!(
            "churn round {round}: {N} processes in {:.1} s, {seen_churned} of them seen in /metrics scrapes during it; \
             daemon fds {} -> {} (non-link {} -> {}), probes on the simulator {} -> {}, \
             RSS {} KiB -> {} KiB ({:+} KiB; anonymous {} -> {} KiB), process states {} -> {} ({live} GPU processes alive)",
            took.as_secs_f64(),
            before.fds,
            after.fds,
            before.non_link_fds,
            after.non_link_fds,
            before.probes,
            after.probes,
            before.rss_kib,
            after.rss_kib,
            after.rss_kib as i64 - before.rss_kib as i64,
            before.anon_kib,
            after.anon_kib,
            before.process_states,
            after.process_states,
        );
        assert_eq!(pids.len(), N);
        assert!(seen_churned > 0, "no churned process was ever in /metrics");
        // Probes exactly as before (one set per library file, not per
        // process); fds other than probe links at most 4 more (connections
        // in flight); decoding state and kernel-name caches only for
        // processes alive now (other tests' included) plus those that
        // exited in the last seconds.
        assert!(before.probes > 0, "nothing attached to the simulator");
        assert_eq!(after.probes, before.probes, "probes leaked");
        assert!(
            after.non_link_fds <= before.non_link_fds + 4,
            "fds leaked: {before:?} -> {after:?}"
        );
        assert!(
            after.process_states <= (live + 16) as f64,
            "state of exited processes kept: {} states, {live} alive",
            after.process_states
        );
        rounds.push(after);
    }
    // RSS: at most 64 MiB over the warmed-up daemon in all, and at most
    // 16 MiB more in the second round than after the first.
    let (first, second) = (&rounds[0], &rounds[1]);
    println!(
        "churn: RSS {} KiB warmed up, {} KiB after round 1, {} KiB after round 2 ({:+} KiB in round 2)",
        before.rss_kib,
        first.rss_kib,
        second.rss_kib,
        second.rss_kib as i64 - first.rss_kib as i64
    );
    assert!(
        second.rss_kib <= before.rss_kib + 64 * 1024,
        "RSS grew by {} KiB",
        second.rss_kib - before.rss_kib
    );
    assert!(
        second.rss_kib <= first.rss_kib + 16 * 1024,
        "RSS kept growing: {} KiB in the second round",
        second.rss_kib - first.rss_kib
    );

    let Daemon { tracer, .. } = d;
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    // Every churned process was traced from its first call: 8 calls each.
    let last = f
        .stderr
        .iter()
        .find(|l| l.contains("calls traced"))
        .unwrap_or_else(|| panic!("{}", f.stderr_text()))
        .clone();
    let traced: u64 = last
        .split('(')
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let lost: u64 = last
        .rsplit(", ")
        .next()
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    println!("churn: {last}");
    // Calls lost to a full ring (a burst of another test) still count as seen.
    assert!(
        traced + lost >= 8 * (2 * N as u64 + 1000),
        "{traced} calls traced, {lost} lost, for {} processes",
        2 * N + 1000
    );
    drop(anchor);
}
