use super::*;

#[test]
fn libcuda_is_attached_before_the_libraries_whose_calls_enclose_its_calls() {
    let mut libs = [
        Lib::Cublas,
        Lib::Nccl,
        Lib::CublasLt,
        Lib::Cuda,
        Lib::Cudart,
    ];
    libs.sort_by_key(|l| l.attach_order());
    assert_eq!(libs[0], Lib::Cuda);
    // Stable: the rest keep the order they were found in.
    assert_eq!(
        &libs[1..],
        [Lib::Cublas, Lib::Nccl, Lib::CublasLt, Lib::Cudart]
    );
}

#[test]
fn names_are_unique_and_ids_match() {
    let cat = catalogue();
    for (i, a) in cat.iter().enumerate() {
        assert_eq!(a.id as usize, i);
        assert_eq!(
            cat.iter().filter(|b| b.name == a.name).count(),
            1,
            "{}",
            a.name
        );
    }
    assert!(api_by_name("cuMemcpyHtoDAsync_v2_ptsz").is_some());
    assert!(api_by_name("cuLaunchKernel_ptsz").is_some());
}

/// What `--overhead-budget` may sample: the busy calls on a stream
/// and the capture status queries; never what state is built from
/// (allocations, names, graphs, NCCL) nor a wait.
#[test]
fn the_samplable_apis() {
    // Every BLAS API is (GEMMs and cuBLASLt's descriptor calls).
    let blas = catalogue().iter().filter(|a| a.family == Family::Blas);
    assert!(blas.clone().count() > 30);
    assert!(blas.clone().all(|a| a.samplable()));
    let mut bases: Vec<&str> = catalogue()
        .iter()
        .filter(|a| a.samplable() && a.family != Family::Blas)
        .map(|a| a.name.trim_end_matches("_ptsz"))
        .collect();
    bases.dedup();
    assert_eq!(
        bases,
        [
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuGraphLaunch",
            "cuMemcpyAsync",
            "cuMemcpyHtoDAsync_v2",
            "cuMemcpyDtoHAsync_v2",
            "cuMemcpyDtoDAsync_v2",
            "cuMemcpyPeerAsync",
            "cuMemsetD8Async",
            "cuMemsetD16Async",
            "cuMemsetD32Async",
            "cuStreamWaitEvent",
            "cuEventRecord",
            "cuEventRecordWithFlags",
            "cudaLaunchKernel",
            "cudaLaunchKernelExC",
            "cuStreamIsCapturing",
            "cuStreamGetCaptureInfo",
            "cuStreamGetCaptureInfo_v2",
            "cuStreamGetCaptureInfo_v3",
        ]
    );
}

#[test]
fn stack_args_are_flagged() {
    assert!(api_by_name("cuLaunchKernel").unwrap().cookie().stack_args());
    assert!(api_by_name("ncclAllReduce").unwrap().cookie().stack_args());
    assert!(api_by_name("ncclReduce").unwrap().cookie().stack_args());
    assert!(!api_by_name("ncclAllGather").unwrap().cookie().stack_args());
    assert!(!api_by_name("ncclSend").unwrap().cookie().stack_args());
    let ex = api_by_name("cuLaunchKernelEx").unwrap().cookie();
    assert_eq!(ex.deref_arg(), 1);
    let pitch = api_by_name("cuMemAllocPitch_v2").unwrap().cookie();
    assert_eq!((pitch.out_arg(0), pitch.out_arg(1)), (1, 2));
    assert_eq!(
        api_by_name("cuModuleGetFunction")
            .unwrap()
            .cookie()
            .str_arg(),
        3
    );
}

#[test]
fn probe_selection_parses() {
    let s = ProbeSelection::parse("launch:args,nccl").unwrap();
    assert_eq!(s.mode(Family::Launch), Some(true));
    assert_eq!(s.mode(Family::Nccl), Some(false));
    assert_eq!(s.mode(Family::Memory), None);
    assert!(ProbeSelection::parse("bogus")
        .unwrap_err()
        .contains("unknown probe family"));
    assert!(ProbeSelection::parse("launch:ret").is_err());
    assert!(ProbeSelection::parse("launch:args,launch:counts")
        .unwrap_err()
        .contains("two modes"));
    assert!(!s.wants_lib(Lib::Cudart));
    let c = ProbeSelection::parse("launch:counts,sync").unwrap();
    assert_eq!(c.probe_mode(Family::Launch), Some(ProbeMode::Counts));
    assert_eq!(c.mode(Family::Launch), Some(false));
    assert!(c.counts_any() && !s.counts_any());
}

/// `:counts` counts the busy calls whose metrics are a count and a
/// latency, and keeps the records of what carries more; their cookies say
/// how many calls to one timed, and nothing else.
#[test]
fn counted_apis_carry_only_the_counted_bit_and_their_sampling() {
    let sel = ProbeSelection::parse(
        "launch:counts,sync:counts,graphs:counts,memcpy:counts,memory:counts",
    )
    .unwrap();
    let mut counted: Vec<&str> = catalogue()
        .iter()
        .filter(|a| a.cookie_for(&sel, true).0.counted())
        .map(|a| a.name.trim_end_matches("_ptsz"))
        .collect();
    counted.dedup();
    assert_eq!(
        counted,
        [
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuStreamWaitEvent",
            "cuEventRecord",
            "cuEventRecordWithFlags",
            "cuStreamIsCapturing",
            "cuStreamGetCaptureInfo",
            "cuStreamGetCaptureInfo_v2",
            "cuStreamGetCaptureInfo_v3",
        ]
    );
    for a in catalogue()
        .iter()
        .filter(|a| a.cookie_for(&sel, true).0.counted())
    {
        let (c, args_only) = a.cookie_for(&sel, true);
        let want = ProbeCookie::new(a.id).with_counted();
        assert_eq!(c, want.with_time_every(16), "{}", a.name);
        assert_eq!(c.time_every(), 16);
        assert!(!args_only);
        let every = sel.clone().with_time_every(1);
        assert_eq!(a.cookie_for(&every, true).0.time_every(), 1, "{}", a.name);
    }
}
