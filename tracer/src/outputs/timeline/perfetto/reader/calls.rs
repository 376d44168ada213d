//! A call's slices read back into the call: its track's process and
//! thread, its interned names and annotations (the JSONL `args`), its
//! duration; and the records kept for `stats`.

use super::*;

impl<R: Read> PerfettoReader<R> {
    /// The JSONL object of a begun call (all but `ts_ns`/`dur_ns`).
    pub(super) fn begin(
        &self,
        seq_id: u32,
        track: u64,
        te: &TrackEvent,
        instant: bool,
    ) -> Result<Map<String, Value>, String> {
        let seq = self
            .sequences
            .get(seq_id)
            .ok_or("an event on a sequence dropped (past the sequences kept)")?;
        let (pid, tid) = match self.tracks.get(&track) {
            Some(Track::Thread { pid, tid }) => (*pid, *tid),
            Some(Track::Other | Track::Record { .. }) => {
                return Err(format!("a call on track {track}, which is not a thread's"))
            }
            None => return Err(format!("a call on track {track}, never described")),
        };
        let api = match (te.name_iid, &te.name) {
            (Some(iid), _) => seq
                .names
                .get(&iid)
                .ok_or_else(|| format!("event name {iid} not interned"))?
                .as_str(),
            (None, Some(n)) => n.as_str(),
            (None, None) => return Err("a call without a name".into()),
        };
        let mut args = Map::new();
        let mut ret = if instant { Value::Null } else { Value::from(0) };
        for a in &te.debug_annotations {
            let name = match (a.name_iid, &a.name) {
                (Some(iid), _) => seq
                    .annotation_names
                    .get(&iid)
                    .ok_or_else(|| format!("annotation name {iid} not interned"))?
                    .as_str(),
                (None, Some(n)) => n.as_str(),
                (None, None) => return Err("an annotation without a name".into()),
            };
            let string = match (a.string_value_iid, &a.string_value) {
                (Some(iid), _) => Some(
                    seq.strings
                        .get(&iid)
                        .ok_or_else(|| format!("string {iid} not interned"))?
                        .as_str(),
                ),
                (None, Some(s)) => Some(s.as_str()),
                (None, None) => None,
            };
            let value = if let Some(s) = string {
                // Arguments written as one JSON object (graph calls).
                if name == "args" {
                    match serde_json::from_str::<Value>(s) {
                        Ok(Value::Object(m)) => args.extend(m),
                        _ => return Err(format!("a malformed `args` annotation `{s}`")),
                    }
                    continue;
                }
                if name == "kernel" {
                    parse_launch_text(s, &mut args)
                        .ok_or_else(|| format!("a malformed launch description `{s}`"))?;
                    continue;
                }
                Value::from(s)
            } else if let Some(v) = a.uint_value {
                Value::from(v)
            } else if let Some(v) = a.int_value {
                if name == "ret" {
                    ret = Value::from(v);
                    continue;
                }
                Value::from(v)
            } else if let Some(v) = a.pointer_value {
                Value::from(format!("{v:#x}"))
            } else if let Some(j) = &a.legacy_json_value {
                serde_json::from_str(j).map_err(|e| format!("annotation `{name}`: {e}"))?
            } else if let Some(b) = a.bool_value {
                Value::from(b)
            } else if let Some(d) = a.double_value {
                Value::from(d)
            } else {
                return Err(format!("annotation `{name}` without a value"));
            };
            if name == "no_ret" {
                ret = Value::Null;
                continue;
            }
            args.insert(name.to_string(), value);
        }
        let mut call = Map::new();
        call.insert("pid".into(), Value::from(pid));
        call.insert("tid".into(), Value::from(tid));
        let comm = self.comms.get(&pid).map_or("?", |c| &**c);
        call.insert("comm".into(), Value::from(comm));
        call.insert("api".into(), Value::from(api));
        call.insert("ret".into(), ret);
        call.insert("args".into(), Value::Object(args));
        Ok(call)
    }

    /// A record read: waiting to be taken (at most a million), and a
    /// `stack` one kept for the calls that name it.
    pub(super) fn keep_record(&mut self, r: Value) {
        if r.get("type").and_then(Value::as_str) == Some("stack") {
            if let (Some(id), Some(frames)) = (
                r.get("id").and_then(Value::as_u64),
                r.get("frames").and_then(Value::as_array),
            ) {
                let frames: Option<Vec<Arc<str>>> =
                    frames.iter().map(|f| f.as_str().map(Arc::from)).collect();
                if let (Some(frames), Ok(id32)) = (frames, u32::try_from(id)) {
                    if self.stacks.len() >= MAX_STACKS {
                        self.stacks.clear();
                    }
                    self.stacks.insert(
                        id,
                        Arc::new(CallStack {
                            id: id32,
                            frames: frames.into(),
                        }),
                    );
                }
            }
        }
        if self.pending.len() >= crate::outputs::timeline::perfetto::records::MAX_KEPT {
            self.dropped += 1;
        } else {
            self.pending.push_back(r);
        }
    }

    /// A call ended: its JSONL object parsed, its stack (named by a
    /// `stack_id` annotation) attached.
    pub(super) fn finish(
        &self,
        mut call: Map<String, Value>,
        ts: u64,
        dur: Option<u64>,
    ) -> Result<Call, String> {
        call.insert("ts_ns".into(), Value::from(ts));
        call.insert("dur_ns".into(), dur.map_or(Value::Null, Value::from));
        let stack_id = call
            .get_mut("args")
            .and_then(Value::as_object_mut)
            .and_then(|a| a.remove("stack_id"));
        let mut c = parse_call(&Value::Object(call)).map_err(|e| e.to_string())?;
        if let Some(id) = stack_id {
            let id = id.as_u64().ok_or("`stack_id` is not a number")?;
            c.stack = Some(
                self.stacks
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| format!("`stack_id` {id} names no stack record before it"))?,
            );
        }
        Ok(c)
    }
}
