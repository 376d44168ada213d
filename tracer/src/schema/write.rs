//! Writing a call as the JSONL schema's `args` and the fields around them
//! (docs/events.md), fast: straight into a String.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::json::*;
use crate::model::call::*;
use crate::model::nccl::Identity;
use crate::model::nccl::Unaligned;
use crate::schema::fields::{visit, ArgFields};

/// Appends one event as a JSON object (no newline).
pub(crate) fn write_call(out: &mut String, c: &Call) {
    out.push_str("{\"ts_ns\":");
    num(out, c.ts_ns);
    out.push_str(",\"dur_ns\":");
    opt_int(out, c.dur_ns.map(|d| d as i64));
    out.push_str(",\"pid\":");
    num(out, c.pid);
    out.push_str(",\"tid\":");
    num(out, c.tid);
    out.push_str(",\"comm\":");
    string(out, &c.comm);
    out.push_str(",\"api\":");
    string(out, c.api);
    out.push_str(",\"ret\":");
    opt_int(out, c.ret);
    out.push_str(",\"args\":");
    write_args(out, &c.args);
    if let Some(stack) = &c.stack {
        out.push_str(",\"stack_id\":");
        num(out, stack.id);
    }
    out.push('}');
}

/// Appends the frames of a stack as a JSON array of strings.
pub(crate) fn write_frames(out: &mut String, frames: &[std::sync::Arc<str>]) {
    out.push('[');
    for (i, f) in frames.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, f);
    }
    out.push(']');
}

/// Appends a stack record, `{"type":"stack","id":N,"frames":[..]}`: written
/// once per file before the first call that names it by `stack_id`.
pub(crate) fn write_stack(out: &mut String, stack: &crate::model::stack::CallStack) {
    out.push_str("{\"type\":\"stack\",\"id\":");
    num(out, stack.id);
    out.push_str(",\"frames\":");
    write_frames(out, &stack.frames);
    out.push('}');
}

/// Appends the `args` object: the fields [`visit`] names, as JSON.
pub(crate) fn write_args(out: &mut String, args: &Args) {
    out.push('{');
    visit(args, &mut JsonFields { out, first: true });
    out.push('}');
}

/// The JSONL `args` object's fields.
struct JsonFields<'a> {
    out: &'a mut String,
    first: bool,
}

impl JsonFields<'_> {
    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(k);
        self.out.push_str("\":");
    }

    /// Takes in the fields of the JSON object written from `at` on.
    fn splice(&mut self, at: usize) {
        self.out.pop();
        if self.out.len() == at + 1 {
            self.out.truncate(at);
        } else if self.first {
            self.out.remove(at);
            self.first = false;
        } else {
            self.out.replace_range(at..at + 1, ",");
        }
    }
}

impl ArgFields for JsonFields<'_> {
    fn hex(&mut self, key: &'static str, v: u64) {
        self.key(key);
        hex(self.out, v);
    }
    fn opt_hex(&mut self, key: &'static str, v: Option<u64>) {
        self.key(key);
        opt_hex(self.out, v);
    }
    fn uint(&mut self, key: &'static str, v: u64) {
        self.key(key);
        num(self.out, v);
    }
    fn int(&mut self, key: &'static str, v: i64) {
        self.key(key);
        let _ = write!(self.out, "{v}");
    }
    fn opt_int(&mut self, key: &'static str, v: Option<i64>) {
        self.key(key);
        opt_int(self.out, v);
    }
    fn name(&mut self, key: &'static str, v: &str) {
        self.key(key);
        string(self.out, v);
    }
    fn opt_text(&mut self, key: &'static str, v: Option<&str>) {
        self.key(key);
        opt_string(self.out, v);
    }
    fn launch(&mut self, l: &Launch) {
        self.hex("function", l.function);
        self.opt_text("kernel", l.kernel.as_deref());
        self.key("grid");
        dims(self.out, l.grid);
        self.key("block");
        dims(self.out, l.block);
        self.uint("shared_mem_bytes", u64::from(l.shared_mem_bytes));
        self.hex("stream", l.stream);
    }
    fn captured(&mut self, capture: Option<u64>) {
        if let Some(n) = capture {
            self.key("captured");
            self.out.push_str("true");
            self.uint("capture", n);
        }
    }
    fn feature(&mut self, args: &Args) {
        let at = self.out.len();
        write_feature(self.out, args);
        self.splice(at);
    }
    fn other(&mut self, map: &Map<String, Value>) {
        let at = self.out.len();
        self.out.push_str(&Value::Object(map.clone()).to_string());
        self.splice(at);
    }
}

/// The JSON object of the arguments that their feature's writer knows
/// (see [`ArgFields::feature`]); `{}` for any other.
pub(crate) fn write_feature(out: &mut String, args: &Args) {
    match args {
        Args::Graph(g) => crate::graphs::json::write_launch(out, g),
        Args::GraphApi(g) => crate::graphs::json::write_call(out, g),
        Args::Nccl(n) => {
            let _ = write!(
                out,
                "{{\"op\":\"{}\",\"count\":{},\"datatype\":",
                n.op.name(),
                n.count
            );
            match nccl_type_name(n.datatype) {
                Some(t) => string(out, t),
                None => {
                    let _ = write!(out, "{}", n.datatype);
                }
            }
            out.push_str(",\"bytes\":");
            opt_int(out, n.bytes().map(|b| b as i64));
            out.push_str(",\"redop\":");
            match n.redop {
                Some(op) => match nccl_redop_name(op) {
                    Some(name) => string(out, name),
                    None => {
                        let _ = write!(out, "{op}");
                    }
                },
                None => out.push_str("null"),
            }
            out.push_str(",\"root\":");
            opt_int(out, n.root);
            out.push_str(",\"peer\":");
            opt_int(out, n.peer);
            out.push_str(",\"comm\":");
            hex(out, n.comm);
            out.push_str(",\"stream\":");
            hex(out, n.stream);
            write_identity(out, &n.ident, n.unaligned);
            out.push('}');
        }
        Args::CommInit {
            comm,
            nranks,
            rank,
            unique_id,
            comm_id,
            own_id,
        } => {
            out.push_str("{\"comm\":");
            opt_hex(out, *comm);
            let _ = write!(out, ",\"nranks\":{nranks},\"rank\":");
            opt_int(out, *rank);
            if let Some(id) = unique_id {
                out.push_str(",\"unique_id\":\"");
                for b in id.iter() {
                    let _ = write!(out, "{b:02x}");
                }
                out.push('"');
            }
            write_comm_id(out, *comm_id, *own_id);
            out.push('}');
        }
        Args::CommSplit {
            comm,
            color,
            key,
            newcomm,
            comm_id,
            own_id,
        } => {
            out.push_str("{\"comm\":");
            hex(out, *comm);
            let _ = write!(out, ",\"color\":{color},\"key\":{key},\"newcomm\":");
            opt_hex(out, *newcomm);
            write_comm_id(out, *comm_id, *own_id);
            out.push('}');
        }
        _ => out.push_str("{}"),
    }
}

/// `comm_id`, and `comm_id_from: "unique_id"` when the id is gputrace's
/// own (a hash of the `ncclUniqueId`: the library's release is unknown).
fn write_comm_id(out: &mut String, comm_id: Option<u64>, own: bool) {
    out.push_str(",\"comm_id\":");
    opt_hex(out, comm_id);
    if own && comm_id.is_some() {
        out.push_str(",\"comm_id_from\":\"unique_id\"");
    }
}

/// The communicator fields of an NCCL call: `comm_id` (as NCCL prints it),
/// `rank`, `nranks`, `cuda_dev`, `seq`, where `seq` came from
/// (`seq_from`), and why a collective has none (`unaligned`).
fn write_identity(out: &mut String, id: &Identity, unaligned: Option<Unaligned>) {
    write_comm_id(out, id.comm_id, id.own_id);
    for (k, v) in [
        ("rank", id.rank),
        ("nranks", id.nranks),
        ("cuda_dev", id.cuda_dev),
    ] {
        let _ = write!(out, ",\"{k}\":");
        opt_int(out, v.map(i64::from));
    }
    out.push_str(",\"seq\":");
    match id.seq {
        Some(s) => num(out, s),
        None => out.push_str("null"),
    }
    if let Some(src) = id.source {
        out.push_str(",\"seq_from\":");
        string(out, src.name());
    }
    if let Some(u) = unaligned {
        out.push_str(",\"unaligned\":");
        string(out, u.code());
    }
}
