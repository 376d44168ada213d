use super::*;
use crate::model::call::Args;
use crate::tui::fixtures::copy;
use crate::tui::fixtures::launch;
use crate::tui::fixtures::Traced;

fn call(pid: u32, api: &'static str, ts_ns: u64, dur_ns: u64, args: Args) -> Traced {
    crate::tui::fixtures::call(pid, "train", api, ts_ns, dur_ns, args)
}

const T0: u64 = 1_700_000_000 * NS;

#[test]
fn rates_over_complete_seconds() {
    let mut m = Model::default();
    // 3 seconds: 100 launches (1 us each) and 10 HtoD copies of 4 KiB per second,
    // plus one 250 ms sync per second.
    for s in 0..3 {
        for i in 0..100 {
            let ts = T0 + s * NS + i * 1_000_000;
            m.feed(
                &call(7, "cuLaunchKernel", ts, 1_000, launch(Some("k"), 64)),
                T0,
            );
        }
        for i in 0..10 {
            let ts = T0 + s * NS + 500_000_000 + i;
            m.feed(
                &call(7, "cuMemcpyHtoD_v2", ts, 2_000, copy(Direction::HtoD, 4096)),
                T0,
            );
        }
        let ts = T0 + s * NS + 600_000_000;
        let sync = Args::Sync {
            stream: Some(1),
            event: None,
        };
        m.feed(&call(7, "cuStreamSynchronize", ts, 250_000_000, sync), T0);
    }
    // Second 2 is not complete until SETTLE_NS after it ends.
    m.advance(T0 + 3 * NS + SETTLE_NS - 1);
    let p = &m.processes[&7];
    let end = settled_sec(T0 + 3 * NS + SETTLE_NS - 1);
    assert_eq!(end, T0 / NS + 2);
    assert_eq!(p.totals(end, 10).launches, 200);
    m.advance(T0 + 3 * NS + SETTLE_NS);
    let p = &m.processes[&7];
    let end = settled_sec(T0 + 3 * NS + SETTLE_NS);
    let r = p.totals(end, 1).per_sec(1);
    assert_eq!(r.launches, 100.0);
    assert_eq!(r.copies, 10.0);
    assert_eq!(r.bytes(Direction::HtoD), 40960.0);
    assert_eq!(r.calls, 111.0);
    assert!((r.sync_share - 0.25).abs() < 1e-9);
    let r3 = p.totals(end, 3).per_sec(3);
    assert_eq!(r3.launches, 100.0);
    // A window longer than the process was seen is cut to that.
    assert_eq!(p.totals(end, 6).per_sec(6).launches, 50.0);
    assert_eq!(p.covered(end, 6), 3);
    assert_eq!(p.covered(end, 2), 2);
    assert_eq!(p.series(end, 5, |t| t.launches), vec![0, 0, 100, 100, 100]);
}

#[test]
fn quantiles_from_merged_seconds() {
    let mut m = Model::default();
    // Second 0: 99 calls of 1 us; second 1: 1 call of 1 ms.
    for i in 0..99 {
        m.feed(
            &call(1, "cuLaunchKernel", T0 + i, 1_000, launch(None, 64)),
            T0,
        );
    }
    m.feed(
        &call(1, "cuLaunchKernel", T0 + NS, 1_000_000, launch(None, 64)),
        T0,
    );
    m.advance(T0 + 2 * NS + SETTLE_NS);
    let p = &m.processes[&1];
    let end = T0 / NS + 2;
    let w = p.window(end, 2);
    let a = &w.apis["cuLaunchKernel"];
    assert_eq!(a.calls, 100);
    let q = |x: f64| a.hist.quantile(x).unwrap() as f64;
    assert!((q(0.5) - 1_000.0).abs() / 1_000.0 < 0.016);
    assert!((q(0.99) - 1_000.0).abs() / 1_000.0 < 0.016);
    assert!((q(1.0) - 1_000_000.0).abs() / 1_000_000.0 < 0.016);
    assert_eq!(a.max_ns, 1_000_000);
    // The window of the last second only holds the slow call.
    let w1 = p.window(end, 1);
    assert_eq!(w1.apis["cuLaunchKernel"].calls, 1);
    assert_eq!(w1.kernels.get(&None).unwrap().launches, 1);
}

#[test]
fn gone_processes_stay_marked_then_go() {
    let mut m = Model::default();
    m.feed(&call(5, "cuLaunchKernel", T0, 1_000, launch(None, 64)), T0);
    m.seen(6, "idle", T0);
    m.advance(T0 + NS);
    assert_eq!(m.processes.len(), 2);
    // The session says 5 is gone; it exited at T0 + 2 s.
    m.gone(5, T0 + 2 * NS);
    m.advance(T0 + 4 * NS);
    assert_eq!(m.processes[&5].exited_at_ns, Some(T0 + 2 * NS));
    assert_eq!(m.processes[&6].comm, "idle");
    // A call it made before it exited still counts with it.
    m.feed(
        &call(5, "cuLaunchKernel", T0 + NS, 1_000, launch(None, 64)),
        T0,
    );
    assert_eq!(m.processes[&5].exited_at_ns, Some(T0 + 2 * NS));
    m.advance(T0 + 2 * NS + EXIT_GRACE_NS - 1);
    assert!(m.processes.contains_key(&5));
    m.advance(T0 + 2 * NS + EXIT_GRACE_NS);
    assert!(!m.processes.contains_key(&5));
    // Seen again after it exited: a new process with the PID reused.
    m.gone(6, T0 + 20 * NS);
    m.seen(6, "train", T0 + 21 * NS);
    assert_eq!(m.processes[&6].exited_at_ns, None);
    assert_eq!(m.processes[&6].comm, "train");
}

#[test]
fn memory_and_old_seconds() {
    let mut m = Model::default();
    let mut e = call(3, "cuMemAlloc_v2", T0, 1_000, Args::NcclGroup);
    e.device_bytes = Some(8 << 20);
    m.feed(&e, T0);
    e.device_bytes = Some(2 << 20);
    e.call.ts_ns += 1;
    m.feed(&e, T0);
    let p = &m.processes[&3];
    assert_eq!((p.device_bytes, p.peak_bytes), (2 << 20, 8 << 20));
    // Detail is kept DETAIL_SECS, history HISTORY_SECS.
    let later = T0 + (DETAIL_SECS + 5) * NS + SETTLE_NS;
    m.advance(later);
    let p = &m.processes[&3];
    assert!(p.seconds.is_empty());
    assert_eq!(p.history.len(), 1);
    m.advance(T0 + (HISTORY_SECS + 5) * NS);
    assert!(m.processes[&3].history.is_empty());
}

#[test]
fn nccl_stalls_shown_until_over_or_gone() {
    use crate::model::nccl::Func;
    use crate::model::nccl::NcclStall;
    use crate::model::nccl::Stall;
    use crate::model::nccl::StallEnded;
    let mut m = Model::default();
    let stall = Stall {
        comm_id: 0xab,
        nranks: 2,
        func: Func::AllReduce,
        seq: 4,
        seq_last: 4,
        collectives: 1,
        waiting: vec![(0, 7)],
        missing: (1, Some(8)),
        exited: None,
        first_ns: T0,
        waited_ns: 3 * NS,
    };
    m.nccl_stall(&NcclStall::Collective {
        stall,
        host: std::sync::Arc::from("h"),
    });
    assert_eq!(m.nccl_stalls.len(), 1);
    assert!(m
        .nccl_stalls
        .values()
        .next()
        .unwrap()
        .contains("rank 1 (pid 8 on h)"));
    m.nccl_stall_over(&StallEnded {
        comm_id: 0xab,
        rank: 1,
        func: Func::AllReduce,
        seq: 4,
        seq_last: 4,
        collectives: 1,
        waited_ns: 4 * NS,
    });
    assert!(m.nccl_stalls.is_empty());
}

/// Issue 26 item 6: a process that execs shows its new program's name.
#[test]
fn an_exec_renames_the_row() {
    let mut m = Model::default();
    m.seen(7, "launcher", T0);
    m.feed(
        &call(7, "cuLaunchKernel", T0, 1_000, launch(Some("k"), 64)),
        T0,
    );
    m.exec(7, "trainer");
    assert_eq!(m.processes[&7].comm, "trainer");
    // A process it never saw: nothing to rename.
    m.exec(8, "other");
    assert!(!m.processes.contains_key(&8));
}
