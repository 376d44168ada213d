//! The GPU's work as timeline records (kind `gpu`; docs/events.md): written
//! by every format, drawn on a lane per device and stream with an arrow
//! from the call that queued it, and read back by `gputrace stats`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::catalogue::api_by_name;
use crate::model::gpu::{
    AgentNote, GpuAgentNote, GpuLaunch, GpuOp, GpuWork, GraphNodeRef, NcclLaunch,
};
use crate::model::record::{Record, View};
use crate::model::types::Direction;
use crate::nccl::hash::format_comm_id;

/// The lane of a device's stream in the visual timelines.
pub fn lane(device: u32, stream: u32) -> String {
    format!("GPU {device} · stream {stream}")
}

fn launch_json(l: &GpuLaunch) -> Value {
    json!({
        "tid": l.tid,
        "api": l.api,
        "api_ts_ns": l.api_start_ns,
        "call_ts_ns": l.call.map(|c| c.0),
        "call_api": l.call.map(|c| c.1),
        "nccl": l.nccl.as_ref().map(|n| json!({
            "api": n.api,
            "op": n.op,
            "comm_id": n.comm_id.map(format_comm_id),
            "rank": n.rank,
            "seq": n.seq,
        })),
    })
}

/// A piece of GPU work as its timeline record.
pub fn work_record(w: &GpuWork) -> Record {
    let mut f = Map::new();
    f.insert("op".into(), Value::from(w.op.kind()));
    f.insert("device".into(), Value::from(w.device));
    f.insert("context".into(), Value::from(w.context));
    f.insert("stream".into(), Value::from(w.stream));
    f.insert("correlation".into(), Value::from(w.correlation));
    match &w.op {
        GpuOp::Kernel {
            name,
            grid,
            block,
            shared_mem_bytes,
            registers,
            ..
        } => {
            f.insert(
                "name".into(),
                name.as_deref().map_or(Value::Null, Value::from),
            );
            f.insert("grid".into(), json!(grid));
            f.insert("block".into(), json!(block));
            f.insert("shared_mem_bytes".into(), Value::from(*shared_mem_bytes));
            f.insert("registers".into(), Value::from(*registers));
        }
        GpuOp::Memcpy {
            bytes, direction, ..
        } => {
            f.insert("bytes".into(), Value::from(*bytes));
            f.insert("direction".into(), Value::from(direction.name()));
        }
        GpuOp::Memset { bytes, value, .. } => {
            f.insert("bytes".into(), Value::from(*bytes));
            f.insert("value".into(), Value::from(*value));
        }
    }
    if let Some(g) = w.op.graph() {
        f.insert("graph_id".into(), Value::from(g.graph_id));
        f.insert("graph_node_id".into(), Value::from(g.node_id));
    }
    f.insert(
        "launch".into(),
        w.launch.as_ref().map_or(Value::Null, launch_json),
    );
    let tid = w.launch.as_ref().map(|l| l.tid);
    Record {
        kind: "gpu",
        ts_ns: w.start_ns,
        dur_ns: Some(w.dur_ns()),
        pid: Some(w.pid),
        tid,
        fields: f,
        view: Some(View {
            lane: Arc::from(lane(w.device, w.stream)),
            label: w.op.label(),
            flow_from: w
                .launch
                .as_ref()
                .map(|l| (l.tid, l.call.map_or(l.api_start_ns, |c| c.0))),
        }),
    }
}

/// What an agent said, as a timeline record (kind `gpu_agent`).
pub fn note_record(n: &GpuAgentNote) -> Record {
    let fields = match &n.what {
        AgentNote::Attached {
            cupti,
            cupti_version,
            clock_error_ns,
        } => {
            json!({"state": "attached", "cupti": &**cupti, "cupti_version": cupti_version, "clock_error_ns": clock_error_ns})
        }
        AgentNote::Refused { why } => json!({"state": "refused", "why": &**why}),
        AgentNote::Stopped { why } => json!({"state": "stopped", "why": &**why}),
        AgentNote::Detached { finalized } => json!({"state": "detached", "finalized": finalized}),
        AgentNote::Lost {
            ring_dropped,
            cupti_dropped,
            names_dropped,
        } => {
            json!({"state": "lost", "ring_dropped": ring_dropped, "cupti_dropped": cupti_dropped, "names_dropped": names_dropped})
        }
        AgentNote::Sampled { percent, on_ns } => {
            json!({"state": "sampled", "percent": percent, "on_ns": on_ns})
        }
    };
    let Value::Object(fields) = fields else {
        unreachable!("json! of an object")
    };
    Record {
        kind: "gpu_agent",
        ts_ns: n.ts_ns,
        dur_ns: None,
        pid: Some(n.pid),
        tid: None,
        fields,
        view: None,
    }
}

/// A `gpu_agent` record read back.
pub fn parse_note(v: &Value) -> Result<GpuAgentNote, String> {
    let text = |k: &str| Arc::from(v.get(k).and_then(Value::as_str).unwrap_or("?"));
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let what = match v.get("state").and_then(Value::as_str) {
        Some("attached") => AgentNote::Attached {
            cupti: text("cupti"),
            cupti_version: u32::try_from(n("cupti_version")).unwrap_or(0),
            clock_error_ns: n("clock_error_ns"),
        },
        Some("refused") => AgentNote::Refused { why: text("why") },
        Some("stopped") => AgentNote::Stopped { why: text("why") },
        Some("detached") => AgentNote::Detached {
            finalized: v.get("finalized").and_then(Value::as_bool).unwrap_or(false),
        },
        Some("lost") => AgentNote::Lost {
            ring_dropped: n("ring_dropped"),
            cupti_dropped: n("cupti_dropped"),
            names_dropped: n("names_dropped"),
        },
        Some("sampled") => AgentNote::Sampled {
            percent: u32::try_from(n("percent")).unwrap_or(100).clamp(1, 100),
            on_ns: n("on_ns"),
        },
        other => return Err(format!("gpu_agent record of state {other:?}")),
    };
    Ok(GpuAgentNote {
        pid: u32_of(v, "pid")?,
        ts_ns: n("ts_ns"),
        what,
    })
}

fn u(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("gpu record without a numeric `{k}`"))
}

fn u32_of(v: &Value, k: &str) -> Result<u32, String> {
    u32::try_from(u(v, k)?).map_err(|_| format!("gpu record: `{k}` out of range"))
}

fn dims(v: &Value, k: &str) -> Result<[u32; 3], String> {
    let a = v
        .get(k)
        .and_then(Value::as_array)
        .filter(|a| a.len() == 3)
        .ok_or_else(|| format!("gpu record without `{k}` [x, y, z]"))?;
    let d = |i: usize| {
        a[i].as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| format!("gpu record: `{k}` is not three numbers"))
    };
    Ok([d(0)?, d(1)?, d(2)?])
}

/// A name read from a file, as one of the catalogue's static names (an
/// unknown one is kept as `?`: only known names are worth a static).
fn api_name(s: Option<&str>) -> &'static str {
    s.and_then(api_by_name).map_or("?", |a| a.name)
}

fn launch_of(v: &Value) -> Result<Option<GpuLaunch>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let nccl = match v.get("nccl") {
        None | Some(Value::Null) => None,
        Some(n) => Some(NcclLaunch {
            api: api_name(n.get("api").and_then(Value::as_str)),
            op: n
                .get("op")
                .and_then(Value::as_str)
                .and_then(crate::model::nccl::Func::from_name)
                .map(|f| f.name()),
            comm_id: n
                .get("comm_id")
                .and_then(Value::as_str)
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()),
            rank: n
                .get("rank")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok()),
            seq: n.get("seq").and_then(Value::as_u64),
        }),
    };
    let call = match (
        v.get("call_ts_ns").and_then(Value::as_u64),
        v.get("call_api"),
    ) {
        (Some(ts), api) => Some((ts, api_name(api.and_then(Value::as_str)))),
        _ => None,
    };
    Ok(Some(GpuLaunch {
        tid: u32_of(v, "tid")?,
        api: crate::gpu::record::cupti_api_name(v.get("api").and_then(Value::as_str)),
        api_start_ns: u(v, "api_ts_ns")?,
        call,
        nccl,
    }))
}

/// CUPTI's name of an API read from a file, as a static name: the
/// callback tables hold every name CUPTI records are joined by.
fn cupti_api_name(s: Option<&str>) -> &'static str {
    let Some(s) = s else { return "?" };
    tracer_common::gpu::API_CBIDS
        .iter()
        .chain(tracer_common::gpu::RUNTIME_API_CBIDS)
        .map(|&(_, n)| n)
        .find(|n| *n == s)
        .unwrap_or("?")
}

/// A `gpu` record read back (its JSONL object).
pub fn parse_work(v: &Value) -> Result<GpuWork, String> {
    let start = u(v, "ts_ns")?;
    let dur = u(v, "dur_ns")?;
    let graph = match (v.get("graph_id"), v.get("graph_node_id")) {
        (Some(g), Some(n)) => Some(GraphNodeRef {
            graph_id: g
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or("gpu record: bad `graph_id`")?,
            node_id: n.as_u64().ok_or("gpu record: bad `graph_node_id`")?,
        }),
        _ => None,
    };
    let op = match v.get("op").and_then(Value::as_str) {
        Some("kernel") => GpuOp::Kernel {
            name: v.get("name").and_then(Value::as_str).map(Arc::from),
            grid: dims(v, "grid")?,
            block: dims(v, "block")?,
            shared_mem_bytes: u32_of(v, "shared_mem_bytes")?,
            registers: u32_of(v, "registers")?,
            graph,
        },
        Some("memcpy") => GpuOp::Memcpy {
            bytes: u(v, "bytes")?,
            direction: v
                .get("direction")
                .and_then(Value::as_str)
                .and_then(|d| Direction::ALL.into_iter().find(|x| x.name() == d))
                .unwrap_or(Direction::Unknown),
            graph,
        },
        Some("memset") => GpuOp::Memset {
            bytes: u(v, "bytes")?,
            value: u32_of(v, "value")?,
            graph,
        },
        other => {
            return Err(format!(
                "gpu record of op {other:?}, which this reader does not know"
            ))
        }
    };
    Ok(GpuWork {
        pid: u32_of(v, "pid")?,
        device: u32_of(v, "device")?,
        context: u32_of(v, "context")?,
        stream: u32_of(v, "stream")?,
        correlation: u32_of(v, "correlation")?,
        epoch: 0,
        start_ns: start,
        end_ns: start.saturating_add(dur),
        op,
        launch: launch_of(v.get("launch").unwrap_or(&Value::Null))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn kernel() -> GpuWork {
        GpuWork {
            pid: 42,
            device: 1,
            context: 3,
            stream: 13,
            correlation: 99,
            epoch: 0,
            start_ns: 1_700_000_000_000_001_000,
            end_ns: 1_700_000_000_000_051_000,
            op: GpuOp::Kernel {
                name: Some(Arc::from("void gemm<float>(int)")),
                grid: [8, 4, 1],
                block: [128, 1, 1],
                shared_mem_bytes: 4096,
                registers: 64,
                graph: Some(GraphNodeRef {
                    graph_id: 2,
                    node_id: 7,
                }),
            },
            launch: Some(GpuLaunch {
                tid: 43,
                api: "cudaLaunchKernel",
                api_start_ns: 1_700_000_000_000_000_100,
                call: Some((1_700_000_000_000_000_200, "cuLaunchKernel")),
                nccl: None,
            }),
        }
    }

    #[test]
    fn work_round_trips_through_its_record() {
        for w in [
            kernel(),
            GpuWork {
                op: GpuOp::Memcpy {
                    bytes: 4096,
                    direction: Direction::HtoD,
                    graph: None,
                },
                launch: None,
                ..kernel()
            },
            GpuWork {
                op: GpuOp::Memset {
                    bytes: 64,
                    value: 0,
                    graph: None,
                },
                ..kernel()
            },
        ] {
            let r = work_record(&w);
            assert_eq!(r.kind, "gpu");
            let back = parse_work(&r.to_json()).unwrap();
            assert_eq!(back, w);
        }
    }

    #[test]
    fn a_record_is_drawn_on_its_streams_lane_with_an_arrow_from_its_call() {
        let r = work_record(&kernel());
        let v = r.view.unwrap();
        assert_eq!(&*v.lane, "GPU 1 · stream 13");
        assert_eq!(&*v.label, "void gemm<float>(int)");
        assert_eq!(v.flow_from, Some((43, 1_700_000_000_000_000_200)));
    }

    #[test]
    fn agent_notes_round_trip() {
        for what in [
            AgentNote::Refused {
                why: Arc::from("no libcupti"),
            },
            AgentNote::Sampled {
                percent: 10,
                on_ns: 1_000,
            },
            AgentNote::Stopped {
                why: Arc::from(
                    "cuptiSubscribe: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)",
                ),
            },
        ] {
            let n = GpuAgentNote {
                pid: 7,
                ts_ns: 5,
                what,
            };
            let r = note_record(&n);
            let back = parse_note(&r.to_json()).unwrap();
            assert_eq!(back.what, n.what);
        }
    }

    #[test]
    fn hostile_records_are_errors_not_panics() {
        for v in [
            json!({}),
            json!({"ts_ns": 1, "dur_ns": 1, "op": "kernel"}),
            json!({"ts_ns": 1, "dur_ns": 1, "op": "kernel", "pid": 1, "device": 0, "context": 0,
                   "stream": 0, "correlation": 0, "grid": [1, 2], "block": [1, 1, 1],
                   "shared_mem_bytes": 0, "registers": 0}),
            json!({"ts_ns": u64::MAX, "dur_ns": u64::MAX, "op": "warp"}),
        ] {
            assert!(parse_work(&v).is_err(), "{v}");
        }
    }
}
