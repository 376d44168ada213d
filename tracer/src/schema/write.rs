//! Writing a call as the JSONL schema's `args` and the fields around them
//! (docs/events.md), fast: straight into a String.

use std::fmt::Write as _;

use serde_json::Value;

use crate::json::*;
use crate::model::call::*;
use crate::model::nccl::Identity;
use crate::model::nccl::Unaligned;

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

/// Appends the `args` object.
pub(crate) fn write_args(out: &mut String, args: &Args) {
    match args {
        Args::Launch(l) => {
            out.push_str("{\"function\":");
            hex(out, l.function);
            out.push_str(",\"kernel\":");
            opt_string(out, l.kernel.as_deref());
            out.push_str(",\"grid\":");
            dims(out, l.grid);
            out.push_str(",\"block\":");
            dims(out, l.block);
            out.push_str(",\"shared_mem_bytes\":");
            num(out, l.shared_mem_bytes);
            out.push_str(",\"stream\":");
            hex(out, l.stream);
            crate::graphs::json::write_captured(out, l.captured);
            out.push('}');
        }
        Args::Graph(g) => crate::graphs::json::write_launch(out, g),
        Args::GraphApi(g) => crate::graphs::json::write_call(out, g),
        Args::Alloc(a) => {
            out.push_str("{\"dptr\":");
            opt_hex(out, a.dptr);
            let _ = write!(out, ",\"bytes\":{},\"kind\":\"{}\"", a.bytes, a.kind.name());
            if let Some(s) = a.stream {
                out.push_str(",\"stream\":");
                hex(out, s);
            }
            if let Some(p) = a.pitch {
                let _ = write!(out, ",\"pitch\":{p}");
            }
            out.push('}');
        }
        Args::Free { dptr, stream } => {
            out.push_str("{\"dptr\":");
            hex(out, *dptr);
            if let Some(s) = stream {
                out.push_str(",\"stream\":");
                hex(out, *s);
            }
            out.push('}');
        }
        Args::MemCreate { handle, bytes } => {
            out.push_str("{\"handle\":");
            opt_hex(out, *handle);
            let _ = write!(out, ",\"bytes\":{bytes}}}");
        }
        Args::MemRelease { handle } => {
            out.push_str("{\"handle\":");
            hex(out, *handle);
            out.push('}');
        }
        Args::MemMap { ptr, bytes, handle } => {
            out.push_str("{\"ptr\":");
            hex(out, *ptr);
            let _ = write!(out, ",\"bytes\":{bytes},\"handle\":");
            hex(out, *handle);
            out.push('}');
        }
        Args::MemUnmap { ptr, bytes } => {
            out.push_str("{\"ptr\":");
            hex(out, *ptr);
            let _ = write!(out, ",\"bytes\":{bytes}}}");
        }
        Args::Memcpy(m) => {
            out.push_str("{\"dst\":");
            hex(out, m.dst);
            out.push_str(",\"src\":");
            opt_hex(out, m.src);
            let _ = write!(
                out,
                ",\"bytes\":{},\"direction\":\"{}\",\"stream\":",
                m.bytes,
                m.direction.name()
            );
            opt_hex(out, m.stream);
            if let Some(v) = m.value {
                let _ = write!(out, ",\"value\":{v}");
            }
            crate::graphs::json::write_captured(out, m.captured);
            out.push('}');
        }
        Args::Sync { stream, event } => {
            out.push('{');
            let mut first = true;
            if let Some(s) = stream {
                out.push_str("\"stream\":");
                hex(out, *s);
                first = false;
            }
            if let Some(e) = event {
                if !first {
                    out.push(',');
                }
                out.push_str("\"event\":");
                hex(out, *e);
            }
            out.push('}');
        }
        Args::GetFunction {
            handle,
            name,
            parent,
            kind,
        } => {
            let (h, p) = kind.labels();
            let _ = write!(out, "{{\"{h}\":");
            opt_hex(out, *handle);
            out.push_str(",\"name\":");
            opt_string(out, name.as_deref());
            let _ = write!(out, ",\"{p}\":");
            hex(out, *parent);
            out.push('}');
        }
        Args::KernelGetFunction { function, kernel } => {
            out.push_str("{\"function\":");
            opt_hex(out, *function);
            out.push_str(",\"kernel\":");
            hex(out, *kernel);
            out.push('}');
        }
        Args::Unload { handle } => {
            out.push_str("{\"handle\":");
            hex(out, *handle);
            out.push('}');
        }
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
        Args::NcclGroup => out.push_str("{}"),
        Args::CommInit {
            comm,
            nranks,
            rank,
            unique_id,
            comm_id,
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
            out.push_str(",\"comm_id\":");
            opt_hex(out, *comm_id);
            out.push('}');
        }
        Args::CommSplit {
            comm,
            color,
            key,
            newcomm,
            comm_id,
        } => {
            out.push_str("{\"comm\":");
            hex(out, *comm);
            let _ = write!(out, ",\"color\":{color},\"key\":{key},\"newcomm\":");
            opt_hex(out, *newcomm);
            out.push_str(",\"comm_id\":");
            opt_hex(out, *comm_id);
            out.push('}');
        }
        Args::CommEnd { comm } => {
            out.push_str("{\"comm\":");
            hex(out, *comm);
            out.push('}');
        }
        Args::RuntimeLaunch { func, stream } => {
            out.push_str("{\"func\":");
            hex(out, *func);
            out.push_str(",\"stream\":");
            opt_hex(out, *stream);
            out.push('}');
        }
        Args::Other(map) => {
            out.push_str(&Value::Object(map.clone()).to_string());
        }
    }
}

/// The communicator fields of an NCCL call: `comm_id` (as NCCL prints it),
/// `rank`, `nranks`, `cuda_dev`, `seq`, where `seq` came from
/// (`seq_from`), and why a collective has none (`unaligned`).
fn write_identity(out: &mut String, id: &Identity, unaligned: Option<Unaligned>) {
    out.push_str(",\"comm_id\":");
    opt_hex(out, id.comm_id);
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
