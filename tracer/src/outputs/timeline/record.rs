//! Timeline entries that are not calls: sampling windows now; graph
//! records, communicator events and stacks as they come. Every format
//! carries them in one generic shape, so a new kind needs no new encoding
//! and older readers skip what they do not know:
//!
//! - JSONL: a line `{"type":KIND,"ts_ns":…,"dur_ns":…|null,"pid":…,"tid":…|null,FIELDS…}`
//!   (calls have no `type`; the summary is `"type":"summary"`);
//! - Chrome trace: a slice (or instant) with `"cat":"gputrace.record"`,
//!   named KIND, the fields as `args`;
//! - Perfetto: a slice (or instant) named KIND on a track "gputrace KIND"
//!   of the process (so it shows as a lane of its own), the fields as debug
//!   annotations.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// Chrome trace category of records (what its reader skips).
pub const CHROME_CATEGORY: &str = "gputrace.record";

/// One non-call entry of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// What it is: `sampling`, … (never `summary`).
    pub kind: &'static str,
    /// When it starts, Unix ns.
    pub ts_ns: u64,
    /// A span's length; `None` for a point in time.
    pub dur_ns: Option<u64>,
    pub pid: u32,
    /// The thread it belongs to, if any (else the process).
    pub tid: Option<u32>,
    /// Its own fields (names must not clash with the ones above).
    pub fields: Map<String, Value>,
}

impl Record {
    /// The JSONL line (without its newline).
    pub fn write_jsonl(&self, out: &mut String) {
        let mut m = Map::new();
        m.insert("type".into(), Value::from(self.kind));
        m.insert("ts_ns".into(), Value::from(self.ts_ns));
        m.insert(
            "dur_ns".into(),
            self.dur_ns.map_or(Value::Null, Value::from),
        );
        m.insert("pid".into(), Value::from(self.pid));
        m.insert("tid".into(), self.tid.map_or(Value::Null, Value::from));
        for (k, v) in &self.fields {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        out.push_str(&Value::Object(m).to_string());
    }

    /// The Chrome trace event (without separators); `origin_ns` as the
    /// writer's.
    pub fn write_chrome(&self, out: &mut String, origin_ns: u64) {
        let rel = self.ts_ns.saturating_sub(origin_ns);
        let _ = write!(
            out,
            "{{\"name\":{},\"cat\":\"{CHROME_CATEGORY}\",\"ph\":\"{}\",\"ts\":{}.{:03}",
            Value::from(self.kind),
            if self.dur_ns.is_some() { "X" } else { "i" },
            rel / 1000,
            rel % 1000
        );
        match self.dur_ns {
            Some(d) => {
                let _ = write!(out, ",\"dur\":{}.{:03}", d / 1000, d % 1000);
            }
            None => out.push_str(",\"s\":\"p\""),
        }
        let _ = write!(
            out,
            ",\"pid\":{},\"tid\":{},\"args\":{}}}",
            self.pid,
            self.tid.unwrap_or(self.pid),
            Value::Object(self.fields.clone())
        );
    }

    /// The JSONL object of a record read from a Chrome trace event
    /// (`origin_ns` as the writer's); `None` for anything else.
    pub fn jsonl_of_chrome(v: &Value, origin_ns: u64) -> Option<Value> {
        let ns = |k: &str| -> Option<u64> {
            let us = v.get(k)?.as_f64()?;
            (us >= 0.0).then(|| (us * 1000.0).round() as u64)
        };
        let mut m = v.get("args")?.as_object()?.clone();
        m.insert("type".into(), v.get("name")?.clone());
        m.insert(
            "ts_ns".into(),
            Value::from(origin_ns.saturating_add(ns("ts")?)),
        );
        m.insert("dur_ns".into(), ns("dur").map_or(Value::Null, Value::from));
        m.insert("pid".into(), v.get("pid")?.clone());
        Some(Value::Object(m))
    }

    /// Whether a JSONL object is a record (a `type` other than the summary).
    pub fn is_jsonl_record(v: &Value) -> bool {
        matches!(v.get("type").and_then(Value::as_str), Some(t) if t != "summary")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        let mut fields = Map::new();
        fields.insert("family".into(), Value::from("launch"));
        fields.insert("ratio".into(), Value::from(0.25));
        fields.insert("pid".into(), Value::from("clash"));
        Record {
            kind: "sampling",
            ts_ns: 1_700_000_000_123_456_789,
            dur_ns: Some(750_000_000),
            pid: 42,
            tid: None,
            fields,
        }
    }

    #[test]
    fn jsonl_line_keeps_the_common_fields_over_its_own() {
        let mut s = String::new();
        record().write_jsonl(&mut s);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["type"], "sampling");
        assert_eq!(v["pid"], 42);
        assert_eq!(v["ts_ns"], 1_700_000_000_123_456_789u64);
        assert_eq!(v["dur_ns"], 750_000_000);
        assert_eq!(v["tid"], Value::Null);
        assert_eq!(v["ratio"], 0.25);
        assert!(Record::is_jsonl_record(&v));
        assert!(!Record::is_jsonl_record(
            &serde_json::json!({"type":"summary"})
        ));
        assert!(!Record::is_jsonl_record(
            &serde_json::json!({"api":"cuInit"})
        ));
    }

    #[test]
    fn chrome_event_is_valid_json_relative_to_the_origin() {
        let mut s = String::new();
        let r = record();
        r.write_chrome(&mut s, r.ts_ns - 2_000_500);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["cat"], CHROME_CATEGORY);
        assert_eq!(v["ph"], "X");
        assert_eq!(v["ts"], 2000.5);
        assert_eq!(v["dur"], 750000.0);
        assert_eq!(v["tid"], 42);
        assert_eq!(v["args"]["family"], "launch");
    }
}
