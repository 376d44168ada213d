//! Entries that are not calls (`Record`s: sampling windows, ...) in a
//! Perfetto trace: a slice or instant on a lane of their own.

use std::io::Write;
use std::sync::Arc;

use serde_json::Value;

use crate::outputs::timeline::perfetto::writer::*;
use crate::outputs::timeline::record::Record;

impl<W: Write> PerfettoWriter<W> {
    /// Writes one non-call entry: a slice (or instant) named after its kind
    /// on a lane "gputrace KIND" of its process, on the meta sequence (no
    /// interning: records are rare), its fields as debug annotations.
    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        let parent = match self.processes.get(&r.pid) {
            Some(p) => p.track,
            None => {
                // Named by its first call (`process` renames it then).
                let track = self.uuid();
                self.descriptor(TrackDescriptor {
                    uuid: Some(track),
                    process: Some(ProcessDescriptor {
                        pid: Some(r.pid as i32),
                        process_name: None,
                    }),
                    ..Default::default()
                })?;
                self.processes.insert(
                    r.pid,
                    Process {
                        track,
                        comm: Arc::from(""),
                        memory_track: None,
                        rates: None,
                    },
                );
                track
            }
        };
        let track = match self.record_tracks.get(&(r.pid, r.kind)) {
            Some(&t) => t,
            None => {
                let t = self.uuid();
                self.descriptor(TrackDescriptor {
                    uuid: Some(t),
                    parent_uuid: Some(parent),
                    name: Some(format!("{RECORD_TRACK_PREFIX}{}", r.kind)),
                    ..Default::default()
                })?;
                self.record_tracks.insert((r.pid, r.kind), t);
                t
            }
        };
        let mut annotations: Vec<DebugAnnotation> = r
            .fields
            .iter()
            .map(|(k, v)| record_annotation(k, v))
            .collect();
        if let Some(tid) = r.tid {
            annotations.push(record_annotation("tid", &Value::from(tid)));
        }
        let event = |kind: i32, ann: Vec<DebugAnnotation>, name: Option<String>| TrackEvent {
            r#type: Some(kind),
            track_uuid: Some(track),
            name,
            debug_annotations: ann,
            ..Default::default()
        };
        let begin = if r.dur_ns.is_some() {
            TYPE_SLICE_BEGIN
        } else {
            TYPE_INSTANT
        };
        self.message(&TracePacket {
            timestamp: Some(r.ts_ns),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(META_SEQ),
            track_event: Some(event(begin, annotations, Some(r.kind.to_string()))),
            ..Default::default()
        })?;
        if let Some(d) = r.dur_ns {
            self.message(&TracePacket {
                timestamp: Some(r.ts_ns.saturating_add(d)),
                timestamp_clock_id: Some(CLOCK_REALTIME),
                trusted_packet_sequence_id: Some(META_SEQ),
                track_event: Some(event(TYPE_SLICE_END, Vec::new(), None)),
                ..Default::default()
            })?;
        }
        Ok(())
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
