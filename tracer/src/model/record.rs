//! Every entry of a timeline that is not a call, in one generic shape:
//! what an executable graph runs, the NCCL cross-rank records, the
//! overhead budget's sampling windows, the GPU's work (`--gpu-time`), the
//! stacks calls point at. Every timeline format carries it (JSONL, Chrome,
//! Perfetto, each in its own way: `outputs::timeline::record`) and
//! `gputrace stats` reads it back from each into the same JSON shape, so a
//! new kind needs no new encoding and older readers skip what they do not
//! know.

use std::sync::Arc;

use serde_json::{Map, Value};

/// One non-call entry of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// What it is: `graph`, `nccl_collective`, `sampling`, `gpu`, ... (never
    /// `summary`).
    pub kind: &'static str,
    /// When it starts, Unix ns.
    pub ts_ns: u64,
    /// A span's length; `None` for a point in time.
    pub dur_ns: Option<u64>,
    /// The process it belongs to; `None` for the whole trace (a collective
    /// across ranks).
    pub pid: Option<u32>,
    /// The thread it belongs to, if any (else the process).
    pub tid: Option<u32>,
    /// Its own fields (names must not clash with the ones above).
    pub fields: Map<String, Value>,
    /// How the visual formats (Chrome, Perfetto) draw it, where not as a
    /// slice named after its kind on a lane `gputrace KIND` of its process.
    pub view: Option<View>,
}

/// Where and how a record is drawn in a visual timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// A lane of its process of its own (`GPU 0 · stream 7`).
    pub lane: Arc<str>,
    /// The slice's name (a kernel's name).
    pub label: Arc<str>,
    /// The call it follows from, drawn as an arrow from that call's slice:
    /// its thread and start (Unix ns).
    pub flow_from: Option<(u32, u64)>,
}

impl Record {
    /// The record as its JSONL object: `type`, `ts_ns`, `dur_ns`, `pid`,
    /// `tid`, then its own fields (a field may not replace one of those).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::from(self.kind));
        m.insert("ts_ns".into(), Value::from(self.ts_ns));
        m.insert(
            "dur_ns".into(),
            self.dur_ns.map_or(Value::Null, Value::from),
        );
        m.insert("pid".into(), self.pid.map_or(Value::Null, Value::from));
        m.insert("tid".into(), self.tid.map_or(Value::Null, Value::from));
        for (k, v) in &self.fields {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }

    /// A record of `kind` made of a JSON object whose common fields are
    /// `ts_key` (its time), `pid` and `tid` when present; the rest are its
    /// fields.
    pub fn from_object(kind: &'static str, ts_key: &str, v: Value) -> Self {
        let mut fields = match v {
            Value::Object(m) => m,
            other => Map::from_iter([("value".to_string(), other)]),
        };
        fields.remove("type");
        let num = |f: &Map<String, Value>, k: &str| f.get(k).and_then(Value::as_u64);
        let ts_ns = num(&fields, ts_key).unwrap_or(0);
        let pid = num(&fields, "pid").and_then(|p| u32::try_from(p).ok());
        let tid = num(&fields, "tid").and_then(|t| u32::try_from(t).ok());
        fields.remove("pid");
        fields.remove("tid");
        Self {
            kind,
            ts_ns,
            dur_ns: None,
            pid,
            tid,
            fields,
            view: None,
        }
    }
}

/// Whether a JSONL object is a record (a `type` other than the summary).
pub fn is_record(v: &Value) -> bool {
    matches!(v.get("type").and_then(Value::as_str), Some(t) if t != "summary")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_the_common_fields_over_its_own() {
        let mut fields = Map::new();
        fields.insert("ratio".into(), Value::from(0.25));
        fields.insert("pid".into(), Value::from("clash"));
        let r = Record {
            kind: "sampling",
            ts_ns: 7,
            dur_ns: Some(3),
            pid: Some(42),
            tid: None,
            fields,
            view: None,
        };
        let v = r.to_json();
        assert_eq!(v["type"], "sampling");
        assert_eq!(v["pid"], 42);
        assert_eq!(v["dur_ns"], 3);
        assert_eq!(v["tid"], Value::Null);
        assert_eq!(v["ratio"], 0.25);
        assert!(is_record(&v));
        assert!(!is_record(&serde_json::json!({"type":"summary"})));
        assert!(!is_record(&serde_json::json!({"api":"cuInit"})));
    }

    #[test]
    fn an_object_becomes_a_record_with_its_time_and_process() {
        let v =
            serde_json::json!({"type":"nccl_stall","pid":5,"tid":6,"entered_ts_ns":99,"api":"x"});
        let r = Record::from_object("nccl_stall", "entered_ts_ns", v);
        assert_eq!((r.ts_ns, r.pid, r.tid), (99, Some(5), Some(6)));
        assert_eq!(r.fields["api"], "x");
        assert!(!r.fields.contains_key("type"));
        let back = r.to_json();
        assert_eq!(back["entered_ts_ns"], 99);
        assert_eq!(back["pid"], 5);
    }
}
