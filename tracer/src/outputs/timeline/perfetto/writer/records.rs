//! Entries that are not calls (`model::record`: graph records, NCCL
//! cross-rank records, sampling windows, GPU work, stacks) in a Perfetto
//! trace: a slice or instant on a lane of their own.

use std::io::Write;
use std::sync::Arc;

use serde_json::Value;

use crate::model::call::Call;
use crate::model::record::Record;
use crate::outputs::timeline::perfetto::writer::*;

impl<W: Write> PerfettoWriter<W> {
    /// The track of a process (described now if its first call has not
    /// come yet; `process` names it then).
    fn process_track(&mut self, pid: u32) -> std::io::Result<u64> {
        if let Some(p) = self.processes.get(&pid) {
            return Ok(p.track);
        }
        let track = self.uuid();
        self.descriptor(TrackDescriptor {
            uuid: Some(track),
            process: Some(ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: None,
            }),
            ..Default::default()
        })?;
        self.processes.insert(
            pid,
            Process {
                track,
                comm: Arc::from(""),
                memory_track: None,
                rates: None,
            },
        );
        Ok(track)
    }

    /// The lane a record goes on: its view's, else "gputrace KIND", under
    /// its process (or at the top, for a record of no process).
    fn record_track(&mut self, r: &Record) -> std::io::Result<u64> {
        let name: Arc<str> = match &r.view {
            Some(v) => v.lane.clone(),
            None => Arc::from(format!("{RECORD_TRACK_PREFIX}{}", r.kind)),
        };
        if let Some(&t) = self.record_tracks.get(&(r.pid, name.clone())) {
            return Ok(t);
        }
        let parent = match r.pid {
            Some(pid) => Some(self.process_track(pid)?),
            None => None,
        };
        let t = self.uuid();
        self.descriptor(TrackDescriptor {
            uuid: Some(t),
            parent_uuid: parent,
            name: Some(name.to_string()),
            ..Default::default()
        })?;
        self.record_tracks.insert((r.pid, name), t);
        Ok(t)
    }

    /// Writes one non-call entry: a slice (or instant) on its lane, on the
    /// meta sequence (no interning: records are rare, and bundles are
    /// compressed), its fields as debug annotations; a viewed record is
    /// named by its label, its kind in a `type` annotation, and an arrow
    /// joins it to the call it follows from when that call's thread is in
    /// the trace.
    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        let track = self.record_track(r)?;
        let mut annotations: Vec<DebugAnnotation> = r
            .fields
            .iter()
            .map(|(k, v)| record_annotation(k, v))
            .collect();
        if let Some(tid) = r.tid {
            annotations.push(record_annotation("tid", &Value::from(tid)));
        }
        let name = match &r.view {
            Some(v) => {
                annotations.push(record_annotation("type", &Value::from(r.kind)));
                v.label.to_string()
            }
            None => r.kind.to_string(),
        };
        let mut flow_ids = Vec::new();
        if let (Some(v), Some(pid)) = (&r.view, r.pid) {
            if let Some((tid, at)) = v.flow_from {
                if let Some(thread) = self.threads.get(&(pid, tid)).map(|s| s.track) {
                    self.flows += 1;
                    let id = self.flows;
                    flow_ids.push(id);
                    self.message(&TracePacket {
                        timestamp: Some(at),
                        timestamp_clock_id: Some(CLOCK_REALTIME),
                        trusted_packet_sequence_id: Some(META_SEQ),
                        track_event: Some(TrackEvent {
                            r#type: Some(TYPE_INSTANT),
                            track_uuid: Some(thread),
                            name: Some("launch".into()),
                            flow_ids: vec![id],
                            ..Default::default()
                        }),
                        ..Default::default()
                    })?;
                }
            }
        }
        let begin = if r.dur_ns.is_some() {
            TYPE_SLICE_BEGIN
        } else {
            TYPE_INSTANT
        };
        self.message(&TracePacket {
            timestamp: Some(r.ts_ns),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(META_SEQ),
            track_event: Some(TrackEvent {
                r#type: Some(begin),
                track_uuid: Some(track),
                name: Some(name),
                debug_annotations: annotations,
                flow_ids,
                ..Default::default()
            }),
            ..Default::default()
        })?;
        if let Some(d) = r.dur_ns {
            self.message(&TracePacket {
                timestamp: Some(r.ts_ns.saturating_add(d)),
                timestamp_clock_id: Some(CLOCK_REALTIME),
                trusted_packet_sequence_id: Some(META_SEQ),
                track_event: Some(TrackEvent {
                    r#type: Some(TYPE_SLICE_END),
                    track_uuid: Some(track),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
        Ok(())
    }

    /// The `stack` record of a call's stack, the first time the file needs
    /// it (the call then names it by `stack_id`).
    pub(super) fn stack_once(&mut self, c: &Call) -> std::io::Result<()> {
        let Some(st) = &c.stack else {
            return Ok(());
        };
        if !crate::stacks::table::say_once(&mut self.stacks, st.id) {
            return Ok(());
        }
        let mut fields = serde_json::Map::new();
        fields.insert("id".into(), Value::from(st.id));
        fields.insert(
            "frames".into(),
            Value::from(
                st.frames
                    .iter()
                    .map(|f| Value::from(&**f))
                    .collect::<Vec<_>>(),
            ),
        );
        self.record(&Record {
            kind: "stack",
            ts_ns: c.ts_ns,
            dur_ns: None,
            pid: Some(c.pid),
            tid: Some(c.tid),
            fields,
            view: None,
        })
    }
}

/// A record's field as a typed debug annotation (JSON where it is not a
/// number, string or boolean).
fn record_annotation(name: &str, v: &Value) -> DebugAnnotation {
    let mut a = DebugAnnotation {
        name: Some(name.to_string()),
        ..Default::default()
    };
    match v {
        Value::Bool(b) => a.bool_value = Some(*b),
        Value::String(s) => a.string_value = Some(s.clone()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                a.uint_value = Some(u);
            } else if let Some(i) = n.as_i64() {
                a.int_value = Some(i);
            } else {
                a.double_value = n.as_f64();
            }
        }
        other => a.legacy_json_value = Some(other.to_string()),
    }
    a
}
