//! Reading back the non-call records of a Perfetto trace (slices on a
//! "gputrace KIND" lane, their fields as plain debug annotations) into the
//! JSONL objects they came from.

use serde_json::{Map, Value};

use crate::outputs::timeline::perfetto::proto::DebugAnnotation;
use crate::outputs::timeline::perfetto::proto::TrackEvent;
use crate::outputs::timeline::perfetto::proto::TYPE_INSTANT;
use crate::outputs::timeline::perfetto::proto::TYPE_SLICE_BEGIN;
use crate::outputs::timeline::perfetto::proto::TYPE_SLICE_END;
use rustc_hash::FxHashMap;

/// Most records kept for the summary (one per process and second).
pub(super) const MAX_KEPT: usize = 1 << 20;
/// Most record slices open at once on one lane.
const MAX_OPEN: usize = 64;

fn value(a: &DebugAnnotation) -> Result<Value, String> {
    Ok(if let Some(b) = a.bool_value {
        Value::from(b)
    } else if let Some(u) = a.uint_value {
        Value::from(u)
    } else if let Some(i) = a.int_value {
        Value::from(i)
    } else if let Some(d) = a.double_value {
        Value::from(d)
    } else if let Some(s) = &a.string_value {
        Value::from(s.as_str())
    } else if let Some(j) = &a.legacy_json_value {
        serde_json::from_str(j).map_err(|e| format!("a record field: {e}"))?
    } else {
        Value::Null
    })
}

/// One track event of a record lane: a record begun (kept open), ended
/// (returned, with `dur_ns`) or an instant (returned).
/// `lane_kind`: the kind its lane names (`gputrace KIND`), else the lane's
/// name; a viewed record says its kind in a `type` annotation and is named
/// by its label.
pub(super) fn step(
    open: &mut FxHashMap<u64, Vec<Map<String, Value>>>,
    track: u64,
    pid: Option<u32>,
    lane_kind: &str,
    te: &TrackEvent,
    kind: i32,
    ts: u64,
) -> Result<Option<Value>, String> {
    match kind {
        TYPE_SLICE_BEGIN | TYPE_INSTANT => {
            let mut m = Map::new();
            m.insert("type".into(), Value::from(lane_kind));
            m.insert("ts_ns".into(), Value::from(ts));
            m.insert("pid".into(), pid.map_or(Value::Null, Value::from));
            m.insert("tid".into(), Value::Null);
            for a in &te.debug_annotations {
                let name = a.name.as_deref().ok_or("a record field without a name")?;
                m.insert(name.to_string(), value(a)?);
            }
            let name = te.name.as_deref().unwrap_or("");
            if m.get("type").and_then(Value::as_str) != Some(name) {
                m.insert("label".into(), Value::from(name));
            }
            if kind == TYPE_INSTANT {
                m.insert("dur_ns".into(), Value::Null);
                return Ok(Some(Value::Object(m)));
            }
            let lane = open.entry(track).or_default();
            if lane.len() >= MAX_OPEN {
                return Err(format!("over {MAX_OPEN} records open on one lane"));
            }
            lane.push(m);
            Ok(None)
        }
        TYPE_SLICE_END => {
            let mut m = open
                .get_mut(&track)
                .and_then(Vec::pop)
                .ok_or("a record's end without its begin")?;
            let begin = m["ts_ns"].as_u64().unwrap_or(ts);
            m.insert("dur_ns".into(), Value::from(ts.saturating_sub(begin)));
            Ok(Some(Value::Object(m)))
        }
        _ => Ok(None),
    }
}
