//! The records of a timeline read back (`model::record`), whatever the
//! format they came in: each as its JSONL object. What executable graphs
//! run and the stacks calls name are kept for the calls after them; the
//! sampling windows, NCCL stalls and the GPU's work go into the summary;
//! kinds this reader does not know are counted and skipped.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::graphs::json::parse_record;
use crate::model::call::{Args, Call};
use crate::model::graph::ExecContents;
use crate::model::stack::CallStack;
use crate::nccl::json::{parse_nccl_record, NcclRecord};
use crate::stacks::table::MAX_STACKS;
use crate::summary::Summary;

/// Executable graphs remembered while reading, at most.
const MAX_GRAPHS: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct RecordReader {
    /// What each executable graph runs, by (pid, exec).
    graphs: HashMap<(u32, u64), Option<Arc<ExecContents>>>,
    /// `stack` records by id.
    stacks: HashMap<u64, Arc<CallStack>>,
    /// Records read, of every kind.
    pub(crate) read: u64,
}

/// A JSONL `{"type":"stack","id":N,"frames":[..]}` record.
pub(crate) fn stack_record(v: &Value) -> Result<Arc<CallStack>, String> {
    let id = v
        .get("id")
        .and_then(Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or("stack record without a numeric `id`")?;
    let frames = frames_of(v.get("frames")).ok_or("stack record without `frames` strings")?;
    Ok(Arc::new(CallStack {
        id,
        frames: frames.into(),
    }))
}

pub(crate) fn frames_of(v: Option<&Value>) -> Option<Vec<Arc<str>>> {
    v?.as_array()?
        .iter()
        .map(|f| f.as_str().map(Arc::from))
        .collect()
}

impl RecordReader {
    /// One record (a JSONL object with a `type` other than `summary`).
    pub(crate) fn record(&mut self, v: &Value, summary: &mut Summary) -> Result<(), String> {
        self.read += 1;
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "graph" => {
                let r = parse_record(v).map_err(|e| e.to_string())?;
                if self.graphs.len() >= MAX_GRAPHS {
                    self.graphs.clear();
                }
                self.graphs.insert((r.pid, r.exec), r.contents);
            }
            // `--overhead-budget` windows: read back for the estimates (a
            // record without their fields is skipped like any other).
            "sampling" => {
                if v.get("on_fraction").is_some() {
                    summary
                        .sampling
                        .get_or_insert_with(Default::default)
                        .add_record(v);
                }
            }
            "gpu" => summary.record_gpu(&crate::gpu::record::parse_work(v)?),
            // A new program: its graph handles are its own.
            "exec" => {
                let pid = v
                    .get("pid")
                    .and_then(Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or("exec record without a numeric `pid`")?;
                let ts = v.get("ts_ns").and_then(Value::as_u64).unwrap_or(0);
                let comm = v
                    .get("comm")
                    .and_then(Value::as_str)
                    .ok_or("exec record without `comm`")?;
                self.graphs.retain(|(p, _), _| *p != pid);
                summary.exec(pid, ts, comm);
            }
            "gpu_agent" => summary.gpu_note(&crate::gpu::record::parse_note(v)?),
            // Over MAX_STACKS the table starts again, where the writer's
            // said set did: a call naming a stack dropped is a problem.
            "stack" => {
                let st = stack_record(v)?;
                if self.stacks.len() >= MAX_STACKS {
                    self.stacks.clear();
                }
                self.stacks.insert(u64::from(st.id), st);
            }
            _ => match parse_nccl_record(v) {
                // Stalls are kept as said; collectives are matched again from
                // the calls (so they need nothing here).
                Some(Ok(NcclRecord::Collective(_))) => {}
                Some(Ok(NcclRecord::Stall(s))) => summary.nccl.stall(&s),
                Some(Ok(NcclRecord::StallOver(e))) => summary.nccl.stall_over(&e),
                Some(Err(e)) => return Err(e),
                // Kinds this reader does not know: counted, skipped.
                None => {}
            },
        }
        Ok(())
    }

    /// What the records before it tell of a call: what its graph launch
    /// runs, the stack its `stack_id` names.
    pub(crate) fn complete(&self, c: &mut Call, stack_id: Option<&Value>) -> Result<(), String> {
        if let Args::Graph(g) = &mut c.args {
            g.contents = self.graphs.get(&(c.pid, g.exec)).cloned().flatten();
        }
        match stack_id {
            None | Some(Value::Null) => Ok(()),
            Some(id) => match id.as_u64().and_then(|i| self.stacks.get(&i)) {
                Some(st) => {
                    c.stack = Some(st.clone());
                    Ok(())
                }
                None => Err(format!("`stack_id` {id} names no stack record before it")),
            },
        }
    }
}
