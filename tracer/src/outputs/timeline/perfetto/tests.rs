use std::sync::Arc;

use proptest::prelude::*;
use prost::Message as _;
use serde_json::json;

use crate::catalogue::catalogue;
use crate::decode::record::decode_args;
use crate::decode::record::encode_record;
use crate::decode::record::parse_record;
use crate::model::call::*;
use crate::model::types::Direction;
use crate::outputs::timeline::perfetto::proto::*;
use crate::outputs::timeline::perfetto::*;
use tracer_common::CallEvent;

/// One call of every API, arguments decoded from a raw record as the
/// live path does (the construction of events/json.rs's round trip).
pub(crate) fn every_api_calls() -> Vec<Call> {
    let mut out = Vec::new();
    for (i, api) in catalogue().iter().enumerate() {
        let mut e = CallEvent::zeroed();
        e.kind = 1;
        e.api = api.id as u32;
        e.dur_ns = 5;
        for (i, a) in e.args.iter_mut().enumerate() {
            *a = (i as u64 + 1) * 3;
        }
        e.args[3] = 7;
        e.extra = [0x10 | 1 << 32, 2 | 3 << 32, 4 | 5 << 32, 6, 0x77, 0];
        let bytes = encode_record(&e, Some(b"_Z4reluPfi"));
        let raw = parse_record(&bytes).unwrap();
        out.push(Call {
            ts_ns: 1_700_000_000_000_000_000 + i as u64 * 1000,
            dur_ns: Some(5 + i as u64),
            pid: 1,
            tid: 2 + (i % 3) as u32,
            comm: Arc::from("py\"thon"),
            api: api.name,
            family: Some(api.family),
            ret: Some(0),
            args: decode_args(api, &raw),
            stack: None,
        });
    }
    out
}

fn write_all(calls: &[(Call, Option<u64>)]) -> Vec<u8> {
    write_with(calls, false)
}

fn write_with(calls: &[(Call, Option<u64>)], compress: bool) -> Vec<u8> {
    let mut w =
        PerfettoWriter::new(Vec::new(), 1_600_000_000_000_000_000, false, compress).unwrap();
    for (c, d) in calls {
        w.write(c, *d).unwrap();
    }
    w.finish(&json!({"type": "summary", "events": calls.len(), "lost": 3}))
        .unwrap()
}

fn read_all(data: &[u8]) -> (Vec<Call>, Vec<ReadProblem>, Option<serde_json::Value>) {
    let mut r = PerfettoReader::new(data);
    let mut calls = Vec::new();
    let mut problems = Vec::new();
    for item in &mut r {
        match item {
            Ok(c) => calls.push(c),
            Err(p) => problems.push(p),
        }
    }
    (calls, problems, r.summary().cloned())
}

/// What survives a timeline: the host stub and the readability bits are
/// not part of the schema.
fn as_written(c: &Call) -> Call {
    let mut c = c.clone();
    match &mut c.args {
        Args::Launch(l) => l.stub = 0,
        Args::Memcpy(m) => m.readable = (false, false),
        _ => {}
    }
    c
}

#[test]
fn every_api_round_trips_through_perfetto() {
    let calls: Vec<_> = every_api_calls().into_iter().map(|c| (c, None)).collect();
    let data = write_all(&calls);
    let (back, problems, summary) = read_all(&data);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(back.len(), calls.len());
    for ((want, _), got) in calls.iter().zip(&back) {
        assert_eq!(got, &as_written(want), "{}", want.api);
    }
    assert_eq!(summary.unwrap()["lost"], 3);
}

/// A launch with every field set, as a training loop makes them.
fn launch(ts: u64, tid: u32, kernel: Option<&Arc<str>>, i: u32) -> Call {
    Call {
        ts_ns: ts,
        dur_ns: Some(4_000 + u64::from(i % 7) * 100),
        pid: 100,
        tid,
        comm: Arc::from("python3"),
        api: "cuLaunchKernel",
        family: Some(crate::model::types::Family::Launch),
        ret: Some(0),
        args: Args::Launch(Launch {
            function: 0x55a9_91dd_7710 + u64::from(i % 40) * 0x100,
            stub: 0,
            kernel: kernel.cloned(),
            grid: [64 + i % 3, 2, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 4096,
            stream: 0x55a9_91dd_7940,
            captured: None,
        }),
        stack: None,
    }
}

/// Every packet is what trace_processor needs: a sequence id; on a
/// thread's sequence the first packet clears the incremental state and
/// every event packet says it needs it; interned ids are defined before use.
#[test]
fn packets_follow_perfettos_sequence_rules() {
    let names: Vec<Arc<str>> = (0..40)
        .map(|k| Arc::from(format!("kernel_{k}(float*)")))
        .collect();
    let mut calls = Vec::new();
    for i in 0..5000u32 {
        let ts = 1_700_000_000_000_000_000 + u64::from(i) * 25_000;
        calls.push((
            launch(ts, 100 + i % 2, Some(&names[(i % 40) as usize]), i),
            None,
        ));
    }
    let data = write_all(&calls);
    let trace = Trace::decode(&data[..]).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut defined: std::collections::HashMap<u32, std::collections::HashSet<(u8, u64)>> =
        Default::default();
    for p in &trace.packet {
        let seq = p
            .trusted_packet_sequence_id
            .expect("every packet has a sequence");
        let flags = p.sequence_flags.unwrap_or(0);
        if seq != 1 && seen.insert(seq) {
            assert_eq!(
                flags & SEQ_INCREMENTAL_STATE_CLEARED,
                SEQ_INCREMENTAL_STATE_CLEARED
            );
            assert_eq!(p.first_packet_on_sequence, Some(true));
        }
        if let Some(i) = &p.interned_data {
            let d = defined.entry(seq).or_default();
            d.extend(i.event_names.iter().map(|n| (0, n.iid.unwrap())));
            d.extend(i.debug_annotation_names.iter().map(|n| (1, n.iid.unwrap())));
            d.extend(
                i.debug_annotation_string_values
                    .iter()
                    .map(|n| (2, n.iid.unwrap())),
            );
        }
        if let Some(te) = &p.track_event {
            if seq == 1 {
                assert_eq!(te.r#type, Some(TYPE_COUNTER));
                continue;
            }
            assert_eq!(flags, SEQ_NEEDS_INCREMENTAL_STATE);
            let d = &defined[&seq];
            if let Some(n) = te.name_iid {
                assert!(d.contains(&(0, n)));
            }
            for a in &te.debug_annotations {
                assert!(d.contains(&(1, a.name_iid.unwrap())));
                if let Some(s) = a.string_value_iid {
                    assert!(d.contains(&(2, s)));
                }
            }
        }
    }
    let (back, problems, _) = read_all(&data);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(back.len(), 5000);
}

/// The size that matters at scale: a launch-heavy stream stays under 40
/// bytes per call (deterministic: no timing involved).
#[test]
fn launches_cost_under_40_bytes_each() {
    let names: Vec<Arc<str>> = (0..60)
        .map(|k| Arc::from(format!("void at::native::vectorized_elementwise_kernel<4, Functor{k}<float>, std::array<char*, 2ul> >(int, Functor{k}<float>, std::array<char*, 2ul>)")))
        .collect();
    let calls: Vec<_> = (0..20_000u32)
        .map(|i| {
            let ts = 1_700_000_000_000_000_000 + u64::from(i) * 27_000;
            (launch(ts, 7, Some(&names[(i % 60) as usize]), i), None)
        })
        .collect();
    let data = write_all(&calls);
    let per_call = data.len() as f64 / calls.len() as f64;
    assert!(per_call <= 40.0, "{per_call:.1} bytes per launch");
}

#[test]
fn compressed_bundles_read_back_and_stay_under_512_kb() {
    let names: Vec<Arc<str>> = (0..500)
        .map(|k| Arc::from(format!("kernel_{k}(float*)")))
        .collect();
    let calls: Vec<_> = (0..100_000u32)
        .map(|i| {
            let ts = 1_700_000_000_000_000_000 + u64::from(i) * 25_000;
            (
                launch(ts, 100 + i % 3, Some(&names[(i * 7 % 500) as usize]), i),
                Some(u64::from(i)),
            )
        })
        .collect();
    let plain = write_with(&calls, false);
    let packed = write_with(&calls, true);
    assert!(
        packed.len() * 2 < plain.len(),
        "{} vs {}",
        packed.len(),
        plain.len()
    );
    let trace = Trace::decode(&packed[..]).unwrap();
    assert!(trace.packet.len() > 2);
    for p in &trace.packet {
        assert!(p.encoded_len() < 512 * 1024);
        assert!(p.compressed_packets.is_some());
    }
    let (back, problems, summary) = read_all(&packed);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(summary.is_some());
    let want: Vec<Call> = calls.iter().map(|(c, _)| as_written(c)).collect();
    assert_eq!(back, want);
}

#[test]
fn nested_calls_and_renamed_processes_round_trip() {
    let base = 1_700_000_000_000_000_000u64;
    let outer_args = Args::RuntimeLaunch {
        func: 0x10,
        stream: None,
    };
    let mut inner = launch(base + 500, 5, None, 1);
    inner.pid = 9;
    let outer = Call {
        ts_ns: base + 100,
        dur_ns: Some(2_000),
        pid: 9,
        tid: 5,
        comm: Arc::from("a"),
        api: "cudaLaunchKernel",
        family: Some(crate::model::types::Family::Runtime),
        ret: Some(2),
        args: outer_args,
        stack: None,
    };
    let mut renamed = launch(base + 5_000, 5, None, 2);
    renamed.pid = 9;
    renamed.comm = Arc::from("python3");
    let mut instant = renamed.clone();
    instant.ts_ns = base + 4_000; // before the last timestamp: absolute
    instant.dur_ns = None;
    instant.ret = None;
    let mut odd = instant.clone();
    odd.ret = Some(-1);
    let mut odd2 = renamed.clone();
    odd2.ret = None;
    let memcpy = Call {
        api: "cuMemcpyAsync",
        family: Some(crate::model::types::Family::Memcpy),
        args: Args::Memcpy(Memcpy {
            dst: 1,
            src: None,
            bytes: 10,
            direction: Direction::Unknown,
            stream: None,
            value: Some(0),
            readable: (false, false),
            captured: None,
        }),
        ..renamed.clone()
    };
    let mut other = renamed.clone();
    other.api = "cuSomethingNew";
    other.family = None;
    other.args = Args::Other(
        json!({"a": null, "b": [1, "x"], "kernel": "k", "ret": 5})
            .as_object()
            .unwrap()
            .clone(),
    );
    let calls = vec![
        (inner, None),
        (outer, Some(4096)),
        (renamed, None),
        (instant, Some(0)),
        (odd, None),
        (odd2, None),
        (memcpy, None),
        (other, None),
    ];
    let data = write_all(&calls);
    let (back, problems, _) = read_all(&data);
    assert!(problems.is_empty(), "{problems:?}");
    let want: Vec<Call> = calls.iter().map(|(c, _)| as_written(c)).collect();
    assert_eq!(back, want);
}

#[test]
fn many_kernel_names_restart_the_interning() {
    // Over 1 MiB of distinct names: the sequence's state is cleared and
    // rebuilt, and every call still reads back.
    let calls: Vec<_> = (0..6000u32)
        .map(|i| {
            let name: Arc<str> = Arc::from(format!("{i:0>300}"));
            (
                launch(
                    1_700_000_000_000_000_000 + u64::from(i) * 1000,
                    1,
                    Some(&name),
                    i,
                ),
                None,
            )
        })
        .collect();
    let data = write_all(&calls);
    let trace = Trace::decode(&data[..]).unwrap();
    let clears = trace
        .packet
        .iter()
        .filter(|p| p.sequence_flags.unwrap_or(0) & SEQ_INCREMENTAL_STATE_CLEARED != 0)
        .count();
    assert!(clears >= 2, "{clears} clears");
    let (back, problems, _) = read_all(&data);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(back.len(), calls.len());
    assert_eq!(back[5999], as_written(&calls[5999].0));
}

/// Many threads, each with many distinct names: the writer keeps its
/// interned bytes within its total (dropping the least recently used
/// sequences), and everything reads back.
#[test]
fn many_threads_of_distinct_names_keep_the_interning_bounded() {
    use crate::outputs::timeline::perfetto::writer::MAX_INTERNED_TOTAL;
    let (threads, per) = (120u32, 1000u32);
    let mut w = PerfettoWriter::new(Vec::new(), 1_600_000_000_000_000_000, false, false).unwrap();
    let mut last = None;
    for i in 0..per {
        for tid in 0..threads {
            let name: Arc<str> = Arc::from(format!("{tid}-{i:0>300}"));
            let ts = 1_700_000_000_000_000_000 + u64::from(i * threads + tid) * 1000;
            let c = launch(ts, tid + 1, Some(&name), i);
            w.write(&c, None).unwrap();
            assert!(w.interned_total() <= MAX_INTERNED_TOTAL + (1 << 20));
            last = Some(c);
        }
    }
    let data = w.finish(&json!({"type": "summary"})).unwrap();
    let (back, problems, _) = read_all(&data);
    assert!(
        problems.is_empty(),
        "{:?}",
        &problems[..problems.len().min(3)]
    );
    assert_eq!(back.len(), (threads * per) as usize);
    assert_eq!(back.last(), last.map(|c| as_written(&c)).as_ref());
}

/// A file with more sequences than the reader keeps, each interning a
/// name: the oldest are dropped (an event on one is a problem, not a
/// name read from freed state), the newest read back.
#[test]
fn sequences_past_the_readers_bound_are_dropped_and_said() {
    use crate::outputs::timeline::perfetto::writer::FORMAT_KEY;
    let mut data = Vec::new();
    let mut put = |p: TracePacket| Trace { packet: vec![p] }.encode(&mut data).unwrap();
    put(TracePacket {
        trace_attributes: Some(TraceAttributes {
            attribute: vec![Attribute {
                key: Some(FORMAT_KEY.into()),
                long_value: Some(1),
                string_value: None,
            }],
        }),
        ..Default::default()
    });
    put(TracePacket {
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(9),
            thread: Some(ThreadDescriptor {
                pid: Some(5),
                tid: Some(5),
                thread_name: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let n = 2100u32;
    for seq in 1..=n {
        put(TracePacket {
            trusted_packet_sequence_id: Some(seq),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            interned_data: Some(InternedData {
                event_names: vec![EventName {
                    iid: Some(1),
                    name: Some(format!("fakeApi{seq}")),
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    for seq in [1, n] {
        put(TracePacket {
            trusted_packet_sequence_id: Some(seq),
            timestamp: Some(1_700_000_000_000_000_000),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(9),
                name_iid: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let (calls, problems, _) = read_all(&data);
    assert_eq!(calls.len(), 1, "{problems:?}");
    assert_eq!(calls[0].api, format!("fakeApi{n}"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].what.contains("not interned"), "{problems:?}");
}

#[test]
fn other_files_are_refused_in_one_message() {
    let (calls, problems, _) = read_all(b"{\"ts_ns\":1}\n");
    assert!(calls.is_empty());
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].what.contains("not a Perfetto trace"),
        "{problems:?}"
    );
    // A Perfetto trace that gputrace did not write.
    let mut foreign = Vec::new();
    for _ in 0..3 {
        let p = TracePacket {
            trusted_packet_sequence_id: Some(7),
            ..Default::default()
        };
        Trace { packet: vec![p] }.encode(&mut foreign).unwrap();
    }
    let (_, problems, _) = read_all(&foreign);
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].what.contains("not a trace written by gputrace"),
        "{problems:?}"
    );
}

fn sample(compress: bool) -> (Vec<Call>, Vec<u8>) {
    let calls: Vec<_> = every_api_calls()
        .into_iter()
        .map(|c| (c, Some(1)))
        .collect();
    let data = write_with(&calls, compress);
    (
        calls.into_iter().map(|(c, _)| as_written(&c)).collect(),
        data,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any prefix: no panic; what is read is the start of what was written;
    /// a cut inside a packet is reported with its offset.
    #[test]
    fn any_prefix_reads(cut in 0usize..100_000, compress in any::<bool>()) {
        let (calls, data) = sample(compress);
        let cut = cut % (data.len() + 1);
        let (back, problems, summary) = read_all(&data[..cut]);
        prop_assert!(back.len() <= calls.len());
        prop_assert_eq!(&back[..], &calls[..back.len()]);
        if cut < data.len() {
            prop_assert!(summary.is_none());
        }
        for p in &problems {
            prop_assert!(p.offset <= cut as u64);
        }
    }

    /// Bytes overwritten anywhere: no panic, no more calls than written.
    #[test]
    fn corrupted_bytes_never_panic(edits in proptest::collection::vec((0usize..1_000_000, any::<u8>()), 1..20), compress in any::<bool>()) {
        let (calls, mut data) = sample(compress);
        for (at, b) in edits {
            let n = data.len();
            data[at % n] = b;
        }
        let (back, _, _) = read_all(&data);
        prop_assert!(back.len() <= calls.len() + 1);
    }

    /// Arbitrary calls in arbitrary order come back exactly.
    #[test]
    fn arbitrary_calls_round_trip(spec in proptest::collection::vec(
        (0u32..3, 0u32..4, 0u64..1_000_000, proptest::option::of(0u64..50_000), proptest::option::of(-3i64..3), any::<bool>(), proptest::option::of(any::<u64>())),
        1..60,
    )) {
        let mut calls = Vec::new();
        let mut ts = 1_700_000_000_000_000_000u64;
        for (i, (pid, tid, gap, dur, ret, rename, dev)) in spec.into_iter().enumerate() {
            // Mostly forward in time, sometimes back (nested calls).
            ts = if gap % 5 == 0 { ts - gap.min(ts) / 1000 } else { ts + gap };
            let mut c = launch(ts, tid, None, i as u32);
            c.pid = pid;
            c.dur_ns = dur;
            c.ret = ret;
            if rename {
                c.comm = Arc::from(format!("p{i}"));
            }
            calls.push((c, dev));
        }
        let data = write_all(&calls);
        let (back, problems, _) = read_all(&data);
        prop_assert!(problems.is_empty(), "{:?}", problems);
        let want: Vec<Call> = calls.iter().map(|(c, _)| as_written(c)).collect();
        prop_assert_eq!(back, want);
    }
}
