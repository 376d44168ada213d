use super::*;

fn call(tid: u32, api: &'static str, ts: u64, dur: u64, family: Family) -> Call {
    let sync = Args::Sync {
        stream: None,
        event: None,
    };
    let mut c = crate::model::fixtures::call(tid, api, ts, dur, sync);
    c.family = Some(family);
    c
}

fn api(tid: u32, api: &'static str, runtime: bool, corr: u32, start: u64, end: u64) -> ApiCall {
    ApiCall {
        tid,
        api,
        runtime,
        correlation: corr,
        epoch: 0,
        start_ns: start,
        end_ns: end,
    }
}

fn kernel(corr: u32, start: u64) -> GpuWork {
    let mut w = crate::model::fixtures::gpu_kernel("k", start, 100);
    w.correlation = corr;
    w
}

#[test]
fn a_driver_record_joins_the_call_that_holds_it_on_its_thread() {
    let mut j = Joiner::default();
    j.calls
        .add(&call(5, "cuLaunchKernel", 1_000, 500, Family::Launch));
    j.calls
        .add(&call(6, "cuLaunchKernel", 1_100, 500, Family::Launch));
    j.calls
        .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
    let mut out = Vec::new();
    j.api(
        1,
        &api(5, "cuLaunchKernel", false, 9, 2_100, 2_400),
        &mut out,
    );
    j.work(kernel(9, 3_000), 0, &mut out);
    assert!(out.is_empty(), "the record settles first");
    j.expire(2_400 + SETTLE_NS - 1, false, None, &mut out);
    assert!(out.is_empty());
    j.expire(2_400 + SETTLE_NS, false, None, &mut out);
    assert_eq!(out.len(), 1);
    let l = out[0].launch.as_ref().unwrap();
    assert_eq!((l.tid, l.call), (5, Some((2_000, "cuLaunchKernel"))));
    assert_eq!(out[0].queued_ns(), Some(900));
}

#[test]
fn a_runtime_record_joins_the_libcuda_call_inside_it_and_an_nccl_call_around_it() {
    let mut j = Joiner::default();
    let mut nccl = call(5, "ncclAllReduce", 1_000, 10_000, Family::Nccl);
    nccl.args = Args::Sync {
        stream: None,
        event: None,
    };
    j.calls.add(&nccl);
    j.calls
        .add(&call(5, "cuLaunchKernelEx", 2_200, 300, Family::Launch));
    let mut out = Vec::new();
    // Work first, its record after: kept until the record comes.
    j.work(kernel(4, 5_000), 0, &mut out);
    assert!(out.is_empty());
    j.api(
        1,
        &api(5, "cudaLaunchKernelExC", true, 4, 2_000, 2_600),
        &mut out,
    );
    j.expire(u64::MAX, false, None, &mut out);
    let l = out[0].launch.as_ref().unwrap();
    assert_eq!(l.call, Some((2_200, "cuLaunchKernelEx")));
    assert_eq!(l.nccl.as_ref().map(|n| n.api), Some("ncclAllReduce"));
    // A graph launch's record serves every node.
    j.work(kernel(4, 6_000), 0, &mut out);
    assert_eq!(out.len(), 2);
    assert!(out[1].launch.is_some());
}

#[test]
fn a_record_that_came_before_its_calls_joins_them_once_settled() {
    // The agent writes the record at the call's exit; the probes
    // report the launch at its return and the NCCL call after.
    let mut j = Joiner::default();
    let mut out = Vec::new();
    j.api(
        1,
        &api(5, "cuLaunchKernel", false, 3, 2_100, 2_400),
        &mut out,
    );
    j.work(kernel(3, 5_000), 0, &mut out);
    j.calls
        .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
    j.calls
        .add(&call(5, "ncclAllReduce", 1_000, 10_000, Family::Nccl));
    j.expire(2_400 + SETTLE_NS, false, None, &mut out);
    assert_eq!(out.len(), 1);
    let l = out[0].launch.as_ref().unwrap();
    assert_eq!(l.call, Some((2_000, "cuLaunchKernel")));
    assert_eq!(l.nccl.as_ref().map(|n| n.api), Some("ncclAllReduce"));
}

#[test]
fn records_of_a_process_gone_are_joined_at_once() {
    let mut j = Joiner::default();
    let mut out = Vec::new();
    j.calls
        .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
    j.api(
        1,
        &api(5, "cuLaunchKernel", false, 3, 2_100, 2_400),
        &mut out,
    );
    j.work(kernel(3, 5_000), 0, &mut out);
    j.expire(0, false, Some(1), &mut out);
    assert_eq!((out.len(), j.unjoined), (1, 0));
    assert!(out[0].launch.as_ref().unwrap().call.is_some());
}

#[test]
fn work_whose_record_never_comes_is_handed_on_after_a_while() {
    let mut j = Joiner::default();
    let mut out = Vec::new();
    j.work(kernel(1, 10), 0, &mut out);
    j.expire(WAIT_NS - 1, false, None, &mut out);
    assert!(out.is_empty());
    j.expire(WAIT_NS, false, None, &mut out);
    assert_eq!((out.len(), j.unjoined), (1, 1));
    assert!(out[0].launch.is_none());
}

#[test]
fn calls_kept_are_bounded_and_the_busiest_thread_gives_way() {
    let mut j = Joiner::default();
    j.calls
        .add(&call(6, "cuLaunchKernel", 0, 5, Family::Launch));
    for i in 1..(MAX_CALLS as u64 + 10) {
        j.calls
            .add(&call(5, "cuLaunchKernel", i * 10, 5, Family::Launch));
    }
    assert_eq!(j.calls.total, MAX_CALLS);
    assert_eq!(j.calls.threads[&(1, 5)].calls.len(), MAX_CALLS - 1);
    assert_eq!(
        j.calls.threads[&(1, 6)].calls.len(),
        1,
        "the quiet thread keeps its call"
    );
    // A record of a call still kept joins it, one of a call gone none.
    let mut out = Vec::new();
    let last = (MAX_CALLS as u64 + 9) * 10;
    j.api(
        1,
        &api(5, "cuLaunchKernel", false, 1, last + 1, last + 4),
        &mut out,
    );
    j.api(1, &api(5, "cuLaunchKernel", false, 2, 11, 14), &mut out);
    j.work(kernel(1, last + 100), 0, &mut out);
    j.work(kernel(2, last + 200), 0, &mut out);
    j.expire(u64::MAX, true, None, &mut out);
    let calls: Vec<_> = out
        .iter()
        .map(|w| w.launch.as_ref().unwrap().call)
        .collect();
    assert_eq!(calls, vec![Some((last, "cuLaunchKernel")), None]);
    j.forget(1);
    assert_eq!((j.calls.total, j.calls.threads.len()), (0, 0));
}

#[test]
fn a_busy_thread_keeps_its_calls_for_as_long_as_records_settle() {
    // 100,000 launches a second on one thread for 2 s: every record
    // still finds its call when it settles, and its work waits for it.
    let mut j = Joiner::default();
    let mut out = Vec::new();
    for i in 0..200_000u64 {
        let ts = i * 10_000;
        j.calls
            .add(&call(5, "cuLaunchKernel", ts, 5_000, Family::Launch));
        j.api(
            1,
            &api(5, "cuLaunchKernel", false, i as u32, ts + 1_000, ts + 4_000),
            &mut out,
        );
        j.work(kernel(i as u32, ts + 9_000), ts, &mut out);
        if i % 1_000 == 0 {
            j.expire(ts, false, None, &mut out);
        }
    }
    j.expire(u64::MAX, true, None, &mut out);
    assert_eq!(out.len(), 200_000);
    assert!(out
        .iter()
        .all(|w| w.launch.as_ref().unwrap().call.is_some()));
}

#[test]
fn a_correlation_id_numbered_again_after_a_pause_joins_its_own_call() {
    // CUPTI may number correlation ids again once finalized between two
    // sampled windows: id 7 of epoch 0 and id 7 of epoch 1 are two calls.
    let mut j = Joiner::default();
    j.calls
        .add(&call(5, "cuLaunchKernel", 1_000, 500, Family::Launch));
    j.calls
        .add(&call(5, "cuLaunchKernel", 9_000, 500, Family::Launch));
    let mut out = Vec::new();
    j.api(
        1,
        &api(5, "cuLaunchKernel", false, 7, 1_100, 1_400),
        &mut out,
    );
    j.work(kernel(7, 2_000), 0, &mut out);
    let mut second = api(5, "cuLaunchKernel", false, 7, 9_100, 9_400);
    second.epoch = 1;
    j.api(1, &second, &mut out);
    let mut w = kernel(7, 10_000);
    w.epoch = 1;
    j.work(w, 0, &mut out);
    j.expire(u64::MAX, true, None, &mut out);
    let calls: Vec<_> = out
        .iter()
        .map(|w| (w.start_ns, w.launch.as_ref().and_then(|l| l.call)))
        .collect();
    assert_eq!(
        calls,
        [
            (2_000, Some((1_000, "cuLaunchKernel"))),
            (10_000, Some((9_000, "cuLaunchKernel")))
        ]
    );
}
