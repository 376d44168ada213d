//! How each format writes a [`Record`] (an entry that is not a call):
//!
//! - JSONL: a line `{"type":KIND,"ts_ns":…,"dur_ns":…|null,"pid":…|null,"tid":…|null,FIELDS…}`
//!   (calls have no `type`; the summary is `"type":"summary"`);
//! - Chrome trace: a slice (or instant) with `"cat":"gputrace.record"`,
//!   named KIND (or its view's label, the kind then in `args.type`), the
//!   fields as `args`; a record of no process is a global instant; a view's
//!   lane is a thread of its own (named by metadata), its flow a pair of
//!   flow events from the call's slice;
//! - Perfetto: a slice (or instant) named KIND on a track "gputrace KIND"
//!   of the process, or named by its view on the view's lane, the fields as
//!   debug annotations (`perfetto::writer::records`).

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::json::string;
use crate::model::record::Record;

/// Chrome trace category of records (what its reader skips or reads back).
pub const CHROME_CATEGORY: &str = "gputrace.record";
/// Chrome trace category of the flow events from a call to a record.
pub const CHROME_FLOW_CATEGORY: &str = "gputrace.flow";

/// The JSONL line of a record (without its newline): the common fields
/// first, then its own (in name order).
pub fn write_jsonl(r: &Record, out: &mut String) {
    let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
    let _ = write!(
        out,
        "{{\"type\":{},\"ts_ns\":{},\"dur_ns\":{},\"pid\":{},\"tid\":{}",
        Value::from(r.kind),
        r.ts_ns,
        opt(r.dur_ns),
        opt(r.pid.map(u64::from)),
        opt(r.tid.map(u64::from))
    );
    for (k, v) in &r.fields {
        if matches!(k.as_str(), "type" | "ts_ns" | "dur_ns" | "pid" | "tid") {
            continue;
        }
        out.push(',');
        string(out, k);
        out.push(':');
        out.push_str(&v.to_string());
    }
    out.push('}');
}

/// The Chrome thread id of a lane of a process: stable, above any real
/// thread id (Linux's are below 2^22).
pub fn chrome_lane_tid(lane: &str) -> u32 {
    // FNV-1a, folded into 2^30..2^31.
    let mut h: u32 = 0x811c_9dc5;
    for b in lane.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (1 << 30) | (h & ((1 << 30) - 1))
}

fn us(out: &mut String, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

/// The Chrome trace events of a record (without separators between them:
/// each is pushed as one element of `events`); `origin_ns` as the
/// writer's. `flow_id`: the id of its flow, when it has one.
pub fn write_chrome(r: &Record, events: &mut Vec<String>, origin_ns: u64, flow_id: u64) {
    let rel = r.ts_ns.saturating_sub(origin_ns);
    let (pid, tid) = match (&r.view, r.pid) {
        (_, None) => (0, 0),
        (Some(v), Some(p)) => (p, chrome_lane_tid(&v.lane)),
        (None, Some(p)) => (p, r.tid.unwrap_or(p)),
    };
    let mut out = String::with_capacity(256);
    out.push_str("{\"name\":");
    match &r.view {
        Some(v) => string(&mut out, &v.label),
        None => string(&mut out, r.kind),
    }
    let _ = write!(
        out,
        ",\"cat\":\"{CHROME_CATEGORY}\",\"ph\":\"{}\",\"ts\":",
        if r.dur_ns.is_some() { "X" } else { "i" }
    );
    us(&mut out, rel);
    match (r.dur_ns, r.pid) {
        (Some(d), _) => {
            out.push_str(",\"dur\":");
            us(&mut out, d);
        }
        (None, None) => out.push_str(",\"s\":\"g\""),
        (None, Some(_)) => out.push_str(",\"s\":\"p\""),
    }
    let mut args = r.fields.clone();
    if r.view.is_some() {
        args.insert("type".into(), Value::from(r.kind));
    }
    if let Some(t) = r.tid {
        args.entry("tid").or_insert(Value::from(t));
    }
    let _ = write!(
        out,
        ",\"pid\":{pid},\"tid\":{tid},\"args\":{}}}",
        Value::Object(args)
    );
    events.push(out);
    if let (Some(v), Some(p)) = (&r.view, r.pid) {
        if let Some((call_tid, call_ns)) = v.flow_from {
            let mut s = String::with_capacity(128);
            let _ = write!(
                s,
                "{{\"name\":\"launch\",\"cat\":\"{CHROME_FLOW_CATEGORY}\",\"ph\":\"s\",\"id\":{flow_id},\"pid\":{p},\"tid\":{call_tid},\"ts\":"
            );
            us(&mut s, call_ns.saturating_sub(origin_ns));
            s.push('}');
            events.push(s);
            let mut f = String::with_capacity(128);
            let _ = write!(
                f,
                "{{\"name\":\"launch\",\"cat\":\"{CHROME_FLOW_CATEGORY}\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{flow_id},\"pid\":{p},\"tid\":{tid},\"ts\":"
            );
            us(&mut f, rel);
            f.push('}');
            events.push(f);
        }
    }
}

/// The JSONL object of a record read from a Chrome trace event
/// (`origin_ns` as the writer's); `None` for anything else.
pub fn jsonl_of_chrome(v: &Value, origin_ns: u64) -> Option<Value> {
    let ns = |k: &str| -> Option<u64> {
        let us = v.get(k)?.as_f64()?;
        (us >= 0.0).then(|| (us * 1000.0).round() as u64)
    };
    let mut m: Map<String, Value> = v.get("args")?.as_object()?.clone();
    let kind = m
        .remove("type")
        .unwrap_or_else(|| v.get("name").cloned().unwrap_or(Value::Null));
    let name = v.get("name").cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    out.insert("type".into(), kind.clone());
    out.insert(
        "ts_ns".into(),
        Value::from(origin_ns.saturating_add(ns("ts")?)),
    );
    out.insert("dur_ns".into(), ns("dur").map_or(Value::Null, Value::from));
    let pid = v.get("pid").and_then(Value::as_u64).unwrap_or(0);
    out.insert(
        "pid".into(),
        if pid == 0 {
            Value::Null
        } else {
            Value::from(pid)
        },
    );
    out.insert("tid".into(), m.remove("tid").unwrap_or(Value::Null));
    if name != kind {
        out.insert("label".into(), name);
    }
    for (k, val) in m {
        out.entry(k).or_insert(val);
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::View;
    use std::sync::Arc;

    fn record() -> Record {
        let mut fields = Map::new();
        fields.insert("family".into(), Value::from("launch"));
        fields.insert("ratio".into(), Value::from(0.25));
        Record {
            kind: "sampling",
            ts_ns: 1_700_000_000_123_456_789,
            dur_ns: Some(750_000_000),
            pid: Some(42),
            tid: None,
            fields,
            view: None,
        }
    }

    #[test]
    fn chrome_event_is_valid_json_relative_to_the_origin_and_reads_back() {
        let r = record();
        let origin = r.ts_ns - 2_000_500;
        let mut events = Vec::new();
        write_chrome(&r, &mut events, origin, 1);
        assert_eq!(events.len(), 1);
        let v: Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(v["cat"], CHROME_CATEGORY);
        assert_eq!(v["ph"], "X");
        assert_eq!(v["ts"], 2000.5);
        assert_eq!(v["dur"], 750000.0);
        assert_eq!(v["tid"], 42);
        assert_eq!(v["args"]["family"], "launch");
        let back = jsonl_of_chrome(&v, origin).unwrap();
        let mut line = String::new();
        write_jsonl(&r, &mut line);
        let want: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, want);
    }

    #[test]
    fn a_viewed_record_is_drawn_on_its_lane_with_a_flow_and_reads_back() {
        let mut r = record();
        r.kind = "gpu";
        r.tid = Some(7);
        r.view = Some(View {
            lane: Arc::from("GPU 0 · stream 13"),
            label: Arc::from("gemm_kernel"),
            flow_from: Some((7, r.ts_ns - 1000)),
        });
        let origin = r.ts_ns - 10_000;
        let mut events = Vec::new();
        write_chrome(&r, &mut events, origin, 99);
        assert_eq!(events.len(), 3);
        let slice: Value = serde_json::from_str(&events[0]).unwrap();
        let lane = chrome_lane_tid("GPU 0 · stream 13");
        assert_eq!(slice["name"], "gemm_kernel");
        assert_eq!(slice["tid"], lane);
        let start: Value = serde_json::from_str(&events[1]).unwrap();
        let end: Value = serde_json::from_str(&events[2]).unwrap();
        assert_eq!(
            (start["ph"].as_str(), start["tid"].as_u64()),
            (Some("s"), Some(7))
        );
        assert_eq!(
            (end["ph"].as_str(), end["tid"].as_u64()),
            (Some("f"), Some(u64::from(lane)))
        );
        assert_eq!(start["id"], end["id"]);
        let back = jsonl_of_chrome(&slice, origin).unwrap();
        assert_eq!(back["type"], "gpu");
        assert_eq!(back["tid"], 7);
        assert_eq!(back["label"], "gemm_kernel");
    }

    #[test]
    fn a_record_of_no_process_is_a_global_instant() {
        let mut r = record();
        r.pid = None;
        r.dur_ns = None;
        let mut events = Vec::new();
        write_chrome(&r, &mut events, 0, 1);
        let v: Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(
            (v["ph"].as_str(), v["s"].as_str(), v["pid"].as_u64()),
            (Some("i"), Some("g"), Some(0))
        );
        assert_eq!(jsonl_of_chrome(&v, 0).unwrap()["pid"], Value::Null);
    }
}
