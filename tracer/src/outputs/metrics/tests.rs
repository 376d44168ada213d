//! The metrics' tests: counting, labels, retention, chunked rendering.

use std::sync::Arc;

use crate::model::call::Memcpy;
use crate::model::call::Nccl;
use crate::model::types::Family;
use crate::outputs::metrics::*;

fn call(pid: u32, api: &'static str, dur: u64, args: Args) -> Call {
    Call {
        ts_ns: 1,
        dur_ns: Some(dur),
        pid,
        tid: pid,
        comm: Arc::from("py\"thon"),
        api,
        family: Some(Family::Launch),
        ret: Some(0),
        stack: None,
        args,
    }
}

/// Processes 1 to 9 seen, 2 in a container.
fn metrics() -> Metrics {
    let mut m = Metrics::new(Duration::from_secs(60));
    for pid in 1..10 {
        let container = if pid == 2 {
            Container {
                container_id: Some("abc123def456".into()),
                pod_uid: Some("8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b".into()),
            }
        } else {
            Container::default()
        };
        m.seen(&ProcessInfo {
            pid,
            start_ticks: Some(pid.into()),
            comm: Arc::from("py\"thon"),
            container,
        });
    }
    m
}

fn other() -> Args {
    Args::Other(Default::default())
}

#[test]
fn renders_counters_histograms_and_labels() {
    let mut m = metrics();
    for _ in 0..7 {
        m.record_call(&call(1, "cuLaunchKernel", 3_000, other()));
    }
    m.record_call(&call(1, "cuLaunchKernel", 20_000_000_000, other()));
    m.record_call(&call(
        2,
        "cuMemcpyHtoD_v2",
        1_000,
        Args::Memcpy(Memcpy {
            dst: 1,
            src: Some(2),
            bytes: 4096,
            direction: Direction::HtoD,
            stream: None,
            value: None,
            readable: (false, true),
            captured: None,
        }),
    ));
    m.record_call(&call(
        2,
        "ncclAllReduce",
        1_000,
        Args::Nccl(Nccl {
            op: NcclOp::AllReduce,
            count: 1024,
            datatype: 7,
            redop: Some(0),
            root: None,
            peer: None,
            comm: 1,
            stream: 2,
            ident: Default::default(),
            unaligned: None,
        }),
    ));
    m.record(&call(2, "cuMemAlloc_v2", 1_000, other()), Some(1 << 20));
    m.set_lost(LostCounts {
        ring_full: 5,
        ..Default::default()
    });
    let text = m.render();
    let l1 = r#"pid="1",comm="py\"thon""#;
    let l2 = r#"pid="2",comm="py\"thon",container_id="abc123def456",pod_uid="8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b""#;
    for line in [
        format!("gputrace_api_calls_total{{api=\"cuLaunchKernel\",{l1}}} 8"),
        format!(
            "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"0.0000025\"}} 0"
        ),
        format!(
            "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"0.000005\"}} 7"
        ),
        format!("gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"10\"}} 7"),
        format!(
            "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"+Inf\"}} 8"
        ),
        format!("gputrace_api_duration_seconds_sum{{api=\"cuLaunchKernel\",{l1}}} 20.000021"),
        format!("gputrace_api_duration_seconds_count{{api=\"cuLaunchKernel\",{l1}}} 8"),
        format!("gputrace_memcpy_bytes_total{{direction=\"HtoD\",{l2}}} 4096"),
        format!("gputrace_nccl_bytes_total{{op=\"AllReduce\",{l2}}} 4096"),
        format!("gputrace_device_memory_bytes{{{l2}}} 1048576"),
        format!("gputrace_device_memory_bytes{{{l1}}} 0"),
        "gputrace_events_lost_total{reason=\"ring_full\"} 5".to_string(),
        "# TYPE gputrace_api_duration_seconds histogram".to_string(),
        "# TYPE gputrace_api_calls_total counter".to_string(),
        "# TYPE gputrace_device_memory_bytes gauge".to_string(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line}\n---\n{text}"
        );
    }
    // Every sample line is `name{labels} value` or `name value`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, v) = l.rsplit_once(' ').unwrap();
        assert!(v.parse::<f64>().is_ok(), "{l}");
        assert!(l.starts_with("gputrace_"), "{l}");
    }
}

#[test]
fn gone_processes_are_dropped_after_keep_exited() {
    let mut m = metrics();
    m.keep_exited = Duration::from_secs(5);
    m.record_call(&call(1, "cuLaunchKernel", 1, other()));
    m.record_call(&call(3, "cuLaunchKernel", 1, other()));
    let t0 = Instant::now();
    m.gone(3, t0);
    m.sweep(t0);
    assert_eq!(
        m.processes(),
        2,
        "kept while gone for less than keep_exited"
    );
    m.sweep(t0 + Duration::from_secs(4));
    assert_eq!(m.processes(), 2);
    m.sweep(t0 + Duration::from_secs(6));
    assert_eq!(m.processes(), 1);
    assert!(!m.render().contains("pid=\"3\""));
}

#[test]
fn what_was_read_when_seen_labels_later_calls() {
    let mut m = metrics();
    m.seen(&ProcessInfo {
        pid: 42,
        start_ticks: Some(1),
        comm: Arc::from("trainer"),
        container: Container {
            container_id: Some("c0ffee".into()),
            pod_uid: None,
        },
    });
    m.record_call(&call(42, "cuLaunchKernel", 1, other()));
    let text = m.render();
    assert!(
        text.contains("pid=\"42\",comm=\"trainer\",container_id=\"c0ffee\"}"),
        "{text}"
    );
    assert!(!m.seen.contains_key(&42));
}

/// Issue 26 item 6: after an exec, what the process calls counts in series
/// labelled with its new program; the old program's end like a gone
/// process's (kept `keep_exited`, then dropped).
#[test]
fn an_exec_starts_series_under_the_new_name() {
    let mut m = metrics();
    m.keep_exited = Duration::from_secs(5);
    m.record_call(&call(2, "cuLaunchKernel", 1, other()));
    m.record_call(&call(2, "cuLaunchKernel", 1, other()));
    let t0 = Instant::now();
    m.exec(2, "next-program", t0);
    m.record_call(&call(2, "cuLaunchKernel", 1, other()));
    let text = m.render();
    let old = r#"gputrace_api_calls_total{api="cuLaunchKernel",pid="2",comm="py\"thon",container_id="abc123def456",pod_uid="8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b"} 2"#;
    let new = r#"gputrace_api_calls_total{api="cuLaunchKernel",pid="2",comm="next-program",container_id="abc123def456",pod_uid="8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b"} 1"#;
    assert!(text.lines().any(|l| l == old), "{text}");
    assert!(text.lines().any(|l| l == new), "{text}");
    m.sweep(t0 + Duration::from_secs(6));
    let text = m.render();
    assert!(!text.contains(r#"comm="py\"thon",container_id"#), "{text}");
    assert!(text.lines().any(|l| l == new), "{text}");
    // An exec before any call: the first calls carry the new name.
    m.exec(5, "late", t0);
    m.record_call(&call(5, "cuLaunchKernel", 1, other()));
    assert!(m.render().contains(r#"pid="5",comm="late""#));
}

#[test]
fn a_sampled_agent_says_its_time_collected_and_its_stop() {
    use crate::model::gpu::{AgentNote, GpuAgentNote};
    let mut m = metrics();
    m.record_call(&call(3, "cuLaunchKernel", 1, other()));
    let (percent, on_ns, why) = (10, 250_000_000, Arc::from("cuptiSubscribe"));
    for what in [
        AgentNote::Sampled { percent, on_ns },
        AgentNote::Stopped { why },
    ] {
        let stop = matches!(what, AgentNote::Stopped { .. });
        m.gpu_note(&GpuAgentNote {
            pid: 3,
            ts_ns: 1,
            what,
        });
        let text = m.render();
        let sampled = r#"gputrace_gpu_sampled_seconds_total{pid="3",comm="py\"thon"} 0.25"#;
        let stopped = r#"gputrace_gpu_stopped{pid="3",comm="py\"thon"} 1"#;
        assert!(text.lines().any(|l| l == sampled), "{text}");
        assert_eq!(text.lines().any(|l| l == stopped), stop, "{text}");
    }
}

#[test]
fn a_reused_pid_starts_afresh() {
    let mut m = metrics();
    m.record_call(&call(4, "cuLaunchKernel", 1, other()));
    m.gone(4, Instant::now());
    // A late call of the gone process still counts with it.
    m.record_call(&call(4, "cuLaunchKernel", 1, other()));
    let late = r#"gputrace_api_calls_total{api="cuLaunchKernel",pid="4",comm="py\"thon"} 2"#;
    assert!(m.render().lines().any(|l| l == late), "{}", m.render());
    // Seen again: a new process with the same PID.
    m.seen(&ProcessInfo::exited(4, "next"));
    m.record_call(&call(4, "cuMemFree_v2", 1, other()));
    let text = m.render();
    assert!(!text.contains("cuLaunchKernel"), "{text}");
    assert!(
        text.contains(r#"api="cuMemFree_v2",pid="4",comm="next""#),
        "{text}"
    );
}

#[test]
fn chunks_add_up_to_the_whole() {
    let mut m = metrics();
    for pid in 1..200 {
        for api in ["cuLaunchKernel", "cuMemAlloc_v2", "ncclAllReduce"] {
            m.record_call(&call(pid, api, pid as u64 * 1000, other()));
        }
    }
    let whole = m.render();
    let mut cursor = Cursor::default();
    let mut joined = String::new();
    let mut chunks = 0;
    while let Some(c) = m.render_chunk(&mut cursor, 4096) {
        // The target, plus at most one process's series of one family.
        assert!(c.len() < 4096 + 16384, "{}", c.len());
        joined.push_str(&c);
        chunks += 1;
    }
    assert_eq!(joined, whole);
    assert!(chunks > 10);
    assert_eq!(m.render_chunk(&mut cursor, 4096), None);
}

/// Two ranks of one communicator: collectives, a late rank, a stall.
#[test]
fn nccl_series_per_communicator_and_rank() {
    use crate::model::nccl::Collective;
    use crate::model::nccl::Func;
    use crate::model::nccl::Identity;
    use crate::model::nccl::NcclStall;
    use crate::model::nccl::Stall;
    use crate::model::nccl::StallEnded;
    let mut m = metrics();
    for (pid, rank) in [(3, 0), (4, 1)] {
        for seq in 0..3 {
            m.record_call(&call(
                pid,
                "ncclAllReduce",
                1_000,
                Args::Nccl(Nccl {
                    op: NcclOp::AllReduce,
                    count: 1,
                    datatype: 7,
                    redop: Some(0),
                    root: None,
                    peer: None,
                    comm: 0x10,
                    stream: 2,
                    ident: Identity {
                        comm_id: Some(0xab),
                        rank: Some(rank),
                        nranks: Some(2),
                        cuda_dev: None,
                        seq: Some(seq),
                        source: None,
                        own_id: false,
                    },
                    unaligned: None,
                }),
            ));
        }
    }
    let done = |seq, delay_ns| Collective {
        comm_id: 0xab,
        nranks: 2,
        func: Func::AllReduce,
        seq,
        first_ns: 1,
        skew_ns: delay_ns,
        last_rank: 1,
        last_pid: 4,
        delay_ns,
    };
    m.nccl.collective(&done(0, 2_000));
    m.nccl.collective(&done(1, 300_000_000));
    let now =
        crate::host::clock::Clock::measure().to_unix_ns(crate::host::clock::Clock::now_mono_ns());
    let stall = Stall {
        comm_id: 0xab,
        nranks: 2,
        func: Func::AllReduce,
        seq: 3,
        seq_last: 3,
        collectives: 1,
        waiting: vec![(0, 3)],
        missing: (1, Some(4)),
        exited: None,
        first_ns: now - 5_000_000_000,
        waited_ns: 5_000_000_000,
    };
    let stall_again = stall.clone();
    m.nccl.stall(&NcclStall::Collective {
        stall,
        host: Arc::from("h"),
    });
    let text = m.render();
    let id = |r| format!("comm_id=\"0xab\",rank=\"{r}\",nranks=\"2\"");
    for line in [
        format!("gputrace_nccl_rank_info{{{},pid=\"4\"}} 1", id(1)),
        format!("gputrace_nccl_collectives_total{{{},op=\"AllReduce\"}} 3", id(0)),
        format!("gputrace_nccl_last_seq{{{},op=\"AllReduce\"}} 2", id(1)),
        "gputrace_nccl_arrival_skew_seconds_bucket{comm_id=\"0xab\",nranks=\"2\",le=\"0.0000025\"} 1".into(),
        "gputrace_nccl_arrival_skew_seconds_bucket{comm_id=\"0xab\",nranks=\"2\",le=\"0.25\"} 1".into(),
        "gputrace_nccl_arrival_skew_seconds_bucket{comm_id=\"0xab\",nranks=\"2\",le=\"0.5\"} 2".into(),
        "gputrace_nccl_arrival_skew_seconds_sum{comm_id=\"0xab\",nranks=\"2\"} 0.300002".into(),
        format!("gputrace_nccl_last_arrivals_total{{{}}} 2", id(1)),
        // Both waits start at 1 ns: overlapping, counted once.
        format!("gputrace_nccl_delay_caused_seconds_total{{{}}} 0.3", id(1)),
        format!("gputrace_nccl_delay_caused_seconds_total{{{}}} 0", id(0)),
        format!("gputrace_nccl_stalls_total{{{}}} 1", id(1)),
        format!("gputrace_nccl_stalled_seconds{{{}}} 0", id(0)),
    ] {
        assert!(text.contains(&format!("{line}\n")), "missing {line}\n{text}");
    }
    let stalled = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("gputrace_nccl_stalled_seconds{{{}}} ", id(1))))
        .unwrap();
    let s: f64 = stalled.parse().unwrap();
    assert!((5.0..60.0).contains(&s), "{s}");
    // Said again when its process is found exited: one stall still.
    let mut again = stall_again;
    again.exited = Some(crate::model::nccl::Exit {
        at_ns: 1_700_000_000_000_000_000,
        how: Some(crate::model::nccl::ExitHow::Signal(9)),
    });
    m.nccl.stall(&NcclStall::Collective {
        stall: again,
        host: Arc::from("h"),
    });
    let text = m.render();
    for line in [
        format!("gputrace_nccl_stalls_total{{{}}} 1", id(1)),
        format!(
            "gputrace_nccl_rank_exited{{{},how=\"SIGKILL\"}} 1700000000",
            id(1)
        ),
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "missing {line}\n{text}"
        );
    }
    assert!(!text.contains(&format!("gputrace_nccl_rank_exited{{{}", id(0))));
    m.nccl.stall_over(&StallEnded {
        comm_id: 0xab,
        rank: 1,
        func: Func::AllReduce,
        seq: 3,
        seq_last: 3,
        collectives: 1,
        waited_ns: 6_000_000_000,
    });
    assert!(m
        .render()
        .contains(&format!("gputrace_nccl_stalled_seconds{{{}}} 0\n", id(1))));
}

impl Metrics {
    fn record_call(&mut self, c: &Call) {
        self.record(c, None);
    }
}

/// A communicator's ranks (read from the process's memory) get series up
/// to a bound, and only below its size.
#[test]
fn nccl_rank_series_are_bounded() {
    use crate::model::nccl::Identity;
    use crate::outputs::metrics::nccl::MAX_RANKS;
    let mut m = metrics();
    let nranks = MAX_RANKS as u32 + 10;
    for rank in 0..nranks + 5 {
        m.record_call(&call(
            3,
            "ncclAllReduce",
            1_000,
            Args::Nccl(Nccl {
                op: NcclOp::AllReduce,
                count: 1,
                datatype: 7,
                redop: Some(0),
                root: None,
                peer: None,
                comm: 0x10,
                stream: 2,
                ident: Identity {
                    comm_id: Some(0xab),
                    rank: Some(rank),
                    nranks: Some(nranks),
                    cuda_dev: None,
                    seq: Some(1),
                    source: None,
                    own_id: false,
                },
                unaligned: None,
            }),
        ));
    }
    let text = m.render();
    let series = text
        .lines()
        .filter(|l| l.starts_with("gputrace_nccl_collectives_total{"))
        .count();
    assert_eq!(series, MAX_RANKS, "one series per rank kept");
}

/// GEMMs of process 1 per shape: calls, host-time histogram, GPU seconds
/// (the span of each call's two kernels): a process's first shapes have
/// their series from their first call.
#[test]
fn gemm_series_per_shape() {
    use crate::model::fixtures::{call, gemm_args, gpu_kernel, launch_args, launched_by};
    let mut m = metrics();
    let t0 = Instant::now();
    // One GEMM at `start` (3 µs on the host) that launched two kernels,
    // 4 µs and 1 µs on the GPU 0.5 µs apart: a 5.5 µs span.
    let gemm = |m: &mut Metrics, start: u64, gpu: u64| {
        m.record_call(&call(
            1,
            "cuLaunchKernel",
            start + 100,
            50,
            launch_args("nvjet"),
        ));
        m.record_call(&call(
            1,
            "cuLaunchKernel",
            start + 200,
            50,
            launch_args("splitk"),
        ));
        m.record_call(&call(
            1,
            "cublasGemmStridedBatchedEx",
            start,
            3_000,
            gemm_args(64),
        ));
        m.gpu(&launched_by(
            gpu_kernel("nvjet", gpu, 4_000),
            1,
            start + 100,
        ));
        m.gpu(&launched_by(
            gpu_kernel("splitk", gpu + 4_500, 1_000),
            1,
            start + 200,
        ));
    };
    gemm(&mut m, 10_000, 1_000_000);
    // Another call's kernel closes the first call's span.
    gemm(&mut m, 20_000, 2_000_000);
    let l = r#"pid="1",comm="py\"thon""#;
    let rest = format!(r#"shape="other",dtype="other",{l}"#);
    let shape = format!(r#"shape="N,N 8x64x64x128",dtype="fp16,fp16->fp16 (32F)",{l}"#);
    let text = m.render();
    for line in [
        format!("gputrace_gemm_calls_total{{{shape}}} 2"),
        format!("gputrace_gemm_gpu_seconds_total{{{shape}}} 0.0000055"),
        format!(r#"gputrace_gemm_seconds_bucket{{{shape},le="0.0000025"}} 0"#),
        format!(r#"gputrace_gemm_seconds_bucket{{{shape},le="0.000005"}} 2"#),
        format!("gputrace_gemm_seconds_sum{{{shape}}} 0.000006"),
        format!("gputrace_gemm_seconds_count{{{shape}}} 2"),
        format!("gputrace_gemm_calls_total{{{rest}}} 0"),
    ] {
        assert!(text.lines().any(|x| x == line), "missing {line}\n{text}");
    }
    m.sweep(t0);
    gemm(&mut m, 30_000, 3_000_000);
    // No kernel of the last call's thread since: its span counts.
    m.sweep(t0 + Duration::from_secs(1));
    m.sweep(t0 + Duration::from_secs(2));
    let text = m.render();
    for line in [
        format!("gputrace_gemm_calls_total{{{rest}}} 0"),
        format!("gputrace_gemm_calls_total{{{shape}}} 3"),
        format!("gputrace_gemm_gpu_seconds_total{{{shape}}} 0.0000165"),
        format!(r#"gputrace_gemm_seconds_bucket{{{shape},le="+Inf"}} 3"#),
        "# TYPE gputrace_gemm_seconds histogram".to_string(),
    ] {
        assert!(text.lines().any(|x| x == line), "missing {line}\n{text}");
    }
    // Processes without GEMMs have no such series.
    m.record_call(&call(3, "cuLaunchKernel", 1, 1, other()));
    assert!(!m
        .render()
        .contains(r#"gputrace_gemm_calls_total{shape="other",dtype="other",pid="3""#));
}

/// 100 shapes, whose costs change: at most 40 series, other only grows.
#[test]
fn gemm_series_are_bounded_and_never_go_down() {
    use crate::model::fixtures::{call, gemm_args};
    use crate::outputs::metrics::gemm::{MAX_SHAPE_SERIES, TOP_SHAPES};
    let mut m = metrics();
    let t0 = Instant::now();
    let other_calls = |m: &Metrics| -> u64 {
        let text = m.render();
        let line = text
            .lines()
            .find(|l| l.starts_with(r#"gputrace_gemm_calls_total{shape="other""#))
            .unwrap()
            .to_string();
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    let mut last = 0;
    for round in 0..20u64 {
        for i in 0..100u64 {
            // Shapes that did little at first do the most later.
            let dur = if round > 0 && i < 50 {
                1_000_000 + i
            } else {
                1_000 + i
            };
            m.record_call(&call(
                1,
                "cublasGemmStridedBatchedEx",
                1,
                dur,
                gemm_args(i as i64 + 1),
            ));
        }
        m.sweep(t0 + crate::outputs::metrics::ranked::RANK_EVERY * round as u32);
        let key = m.key(1);
        let series = m.procs[&key].gemm.series();
        assert!(series <= MAX_SHAPE_SERIES, "{series}");
        if round == 0 {
            // The first 20 from their first call, then those that did
            // more since than the least of them.
            assert!(series > TOP_SHAPES, "{series}");
        }
        let now = other_calls(&m);
        assert!(now >= last, "other went down: {now} < {last}");
        last = now;
        let rendered = m
            .render()
            .lines()
            .filter(|l| l.starts_with("gputrace_gemm_calls_total{"))
            .count();
        assert_eq!(rendered, series + 1);
    }
    assert_eq!(m.procs[&m.key(1)].gemm.series(), MAX_SHAPE_SERIES);
    // Every call is counted once, in a series or in other.
    let text = m.render();
    let total: u64 = text
        .lines()
        .filter(|l| l.starts_with("gputrace_gemm_calls_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 2_000);
}
