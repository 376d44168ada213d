//! The JSONL event schema of DESIGN.md: writing it fast, and reading it back.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::model::*;
use crate::probes::catalogue::{api_by_name, AllocKind, Direction, NcclOp};

/// Appends `"0x…"` (lowercase, no leading zeros), without `core::fmt`:
/// this is the hot path of every event.
fn hex(out: &mut String, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.push_str("\"0x");
    // SAFETY: only ASCII hex digits were written.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[i..]) });
    out.push('"');
}

/// Appends `[x,y,z]`.
fn dims(out: &mut String, d: [u32; 3]) {
    out.push('[');
    num(out, d[0]);
    out.push(',');
    num(out, d[1]);
    out.push(',');
    num(out, d[2]);
    out.push(']');
}

/// Appends a decimal integer without `core::fmt`.
fn num<I: itoa::Integer>(out: &mut String, v: I) {
    out.push_str(itoa::Buffer::new().format(v));
}

fn opt_hex(out: &mut String, v: Option<u64>) {
    match v {
        Some(v) => hex(out, v),
        None => out.push_str("null"),
    }
}

fn opt_int(out: &mut String, v: Option<i64>) {
    match v {
        Some(v) => num(out, v),
        None => out.push_str("null"),
    }
}

/// Appends a JSON string literal.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    // Kernel names are long and almost never need escaping: copy them whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}

/// Appends one event as a JSON object (no newline).
pub fn write_call(out: &mut String, c: &Call) {
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
    out.push('}');
}

/// Appends the `args` object.
pub fn write_args(out: &mut String, args: &Args) {
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
            out.push('}');
        }
        Args::Graph { graph, stream } => {
            out.push_str("{\"graph\":");
            hex(out, *graph);
            out.push_str(",\"stream\":");
            hex(out, *stream);
            out.push('}');
        }
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
            let (h, p) = match kind {
                HandleKind::Function => ("function", "module"),
                HandleKind::Kernel => ("kernel", "library"),
            };
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
            out.push('}');
        }
        Args::NcclGroup => out.push_str("{}"),
        Args::CommInit {
            comm,
            nranks,
            rank,
            unique_id,
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

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("field `{0}` is missing or has the wrong type")]
    Field(&'static str),
}

fn field<'a>(m: &'a Map<String, Value>, k: &'static str) -> Result<&'a Value, ParseError> {
    m.get(k).ok_or(ParseError::Field(k))
}

fn get_u64(m: &Map<String, Value>, k: &'static str) -> Result<u64, ParseError> {
    field(m, k)?.as_u64().ok_or(ParseError::Field(k))
}

fn get_opt_u64(m: &Map<String, Value>, k: &'static str) -> Result<Option<u64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(ParseError::Field(k)),
    }
}

fn get_opt_i64(m: &Map<String, Value>, k: &'static str) -> Result<Option<i64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or(ParseError::Field(k)),
    }
}

fn parse_hex(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

fn get_hex(m: &Map<String, Value>, k: &'static str) -> Result<u64, ParseError> {
    field(m, k)
        .ok()
        .and_then(parse_hex)
        .ok_or(ParseError::Field(k))
}

fn get_opt_hex(m: &Map<String, Value>, k: &'static str) -> Result<Option<u64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_hex(v).map(Some).ok_or(ParseError::Field(k)),
    }
}

fn get_dim(m: &Map<String, Value>, k: &'static str) -> Result<[u32; 3], ParseError> {
    let arr = field(m, k)?.as_array().ok_or(ParseError::Field(k))?;
    let mut out = [0u32; 3];
    if arr.len() != 3 {
        return Err(ParseError::Field(k));
    }
    for (o, v) in out.iter_mut().zip(arr) {
        *o = v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(ParseError::Field(k))?;
    }
    Ok(out)
}

/// Interns a string for the life of the program (API names from files).
fn intern(s: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    if let Some(api) = api_by_name(s) {
        return api.name;
    }
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(existing) = set.get(s) {
        return existing;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// Reads an event back from its JSON object (a JSONL line, or a Chrome
/// trace slice's fields gathered into the same shape).
pub fn parse_call(v: &Value) -> Result<Call, ParseError> {
    let m = v
        .as_object()
        .ok_or(ParseError::Json("not an object".into()))?;
    let api_name = field(m, "api")?.as_str().ok_or(ParseError::Field("api"))?;
    let api = intern(api_name);
    let known = api_by_name(api_name);
    let args_v = match m.get("args") {
        Some(Value::Object(a)) => a.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(ParseError::Field("args")),
    };
    let args = match known {
        Some(a) => parse_args(a.shape, &args_v)?,
        None => Args::Other(args_v),
    };
    let pid = get_u64(m, "pid")?;
    let tid = get_u64(m, "tid")?;
    Ok(Call {
        ts_ns: get_u64(m, "ts_ns")?,
        dur_ns: get_opt_u64(m, "dur_ns")?,
        pid: u32::try_from(pid).map_err(|_| ParseError::Field("pid"))?,
        tid: u32::try_from(tid).map_err(|_| ParseError::Field("tid"))?,
        comm: Arc::from(m.get("comm").and_then(Value::as_str).unwrap_or("?")),
        api,
        family: known.map(|a| a.family),
        ret: get_opt_i64(m, "ret")?,
        args,
    })
}

fn parse_args(
    shape: crate::probes::catalogue::Shape,
    a: &Map<String, Value>,
) -> Result<Args, ParseError> {
    use crate::probes::catalogue::Shape;
    Ok(match shape {
        Shape::Launch | Shape::LaunchEx => Args::Launch(Launch {
            function: get_hex(a, "function")?,
            stub: 0,
            kernel: a.get("kernel").and_then(Value::as_str).map(Arc::from),
            grid: get_dim(a, "grid")?,
            block: get_dim(a, "block")?,
            shared_mem_bytes: u32::try_from(get_u64(a, "shared_mem_bytes")?)
                .map_err(|_| ParseError::Field("shared_mem_bytes"))?,
            stream: get_hex(a, "stream")?,
        }),
        Shape::GraphLaunch => Args::Graph {
            graph: get_hex(a, "graph")?,
            stream: get_hex(a, "stream")?,
        },
        Shape::Alloc { .. } | Shape::AllocPitch => Args::Alloc(Alloc {
            dptr: get_opt_hex(a, "dptr")?,
            bytes: get_u64(a, "bytes")?,
            kind: a
                .get("kind")
                .and_then(Value::as_str)
                .and_then(AllocKind::parse)
                .ok_or(ParseError::Field("kind"))?,
            stream: get_opt_hex(a, "stream")?,
            pitch: get_opt_u64(a, "pitch")?,
        }),
        Shape::Free { .. } => Args::Free {
            dptr: get_hex(a, "dptr")?,
            stream: get_opt_hex(a, "stream")?,
        },
        Shape::MemCreate => Args::MemCreate {
            handle: get_opt_hex(a, "handle")?,
            bytes: get_u64(a, "bytes")?,
        },
        Shape::MemRelease => Args::MemRelease {
            handle: get_hex(a, "handle")?,
        },
        Shape::MemMap => Args::MemMap {
            ptr: get_hex(a, "ptr")?,
            bytes: get_u64(a, "bytes")?,
            handle: get_hex(a, "handle")?,
        },
        Shape::MemUnmap => Args::MemUnmap {
            ptr: get_hex(a, "ptr")?,
            bytes: get_u64(a, "bytes")?,
        },
        Shape::Memcpy { .. } | Shape::Memset { .. } => Args::Memcpy(Memcpy {
            dst: get_hex(a, "dst")?,
            src: get_opt_hex(a, "src")?,
            bytes: get_u64(a, "bytes")?,
            direction: a
                .get("direction")
                .and_then(Value::as_str)
                .and_then(Direction::parse)
                .ok_or(ParseError::Field("direction"))?,
            stream: get_opt_hex(a, "stream")?,
            value: get_opt_u64(a, "value")?,
            readable: (false, false),
        }),
        Shape::Sync { .. } => Args::Sync {
            stream: get_opt_hex(a, "stream")?,
            event: get_opt_hex(a, "event")?,
        },
        Shape::ModuleGetFunction => Args::GetFunction {
            handle: get_opt_hex(a, "function")?,
            name: a.get("name").and_then(Value::as_str).map(String::from),
            parent: get_hex(a, "module")?,
            kind: HandleKind::Function,
        },
        Shape::LibraryGetKernel => Args::GetFunction {
            handle: get_opt_hex(a, "kernel")?,
            name: a.get("name").and_then(Value::as_str).map(String::from),
            parent: get_hex(a, "library")?,
            kind: HandleKind::Kernel,
        },
        Shape::KernelGetFunction => Args::KernelGetFunction {
            function: get_opt_hex(a, "function")?,
            kernel: get_hex(a, "kernel")?,
        },
        Shape::Unload => Args::Unload {
            handle: get_hex(a, "handle")?,
        },
        Shape::Nccl { op, .. } => {
            let dt = match field(a, "datatype")? {
                Value::String(s) => nccl_type_from_name(s).ok_or(ParseError::Field("datatype"))?,
                v => v.as_i64().ok_or(ParseError::Field("datatype"))?,
            };
            let redop = match a.get("redop") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => {
                    Some(nccl_redop_from_name(s).ok_or(ParseError::Field("redop"))?)
                }
                Some(v) => Some(v.as_i64().ok_or(ParseError::Field("redop"))?),
            };
            let op = a
                .get("op")
                .and_then(Value::as_str)
                .and_then(parse_nccl_op)
                .unwrap_or(op);
            Args::Nccl(Nccl {
                op,
                count: get_u64(a, "count")?,
                datatype: dt,
                redop,
                root: get_opt_i64(a, "root")?,
                peer: get_opt_i64(a, "peer")?,
                comm: get_hex(a, "comm")?,
                stream: get_hex(a, "stream")?,
            })
        }
        Shape::NcclGroup => Args::NcclGroup,
        Shape::CommInit | Shape::CommInitAll => Args::CommInit {
            comm: get_opt_hex(a, "comm")?,
            nranks: get_opt_i64(a, "nranks")?.ok_or(ParseError::Field("nranks"))?,
            rank: get_opt_i64(a, "rank")?,
            unique_id: match a.get("unique_id") {
                None | Some(Value::Null) => None,
                Some(v) => Some(
                    v.as_str()
                        .and_then(parse_hex_bytes)
                        .ok_or(ParseError::Field("unique_id"))?,
                ),
            },
        },
        Shape::CommEnd => Args::CommEnd {
            comm: get_hex(a, "comm")?,
        },
        Shape::RuntimeLaunch | Shape::RuntimeLaunchEx => Args::RuntimeLaunch {
            func: get_hex(a, "func")?,
            stream: get_opt_hex(a, "stream")?,
        },
    })
}

/// `"00ff…"` → bytes.
fn parse_hex_bytes(s: &str) -> Option<Box<[u8]>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse_nccl_op(s: &str) -> Option<NcclOp> {
    [
        NcclOp::AllReduce,
        NcclOp::Broadcast,
        NcclOp::Reduce,
        NcclOp::AllGather,
        NcclOp::ReduceScatter,
        NcclOp::Send,
        NcclOp::Recv,
    ]
    .into_iter()
    .find(|o| o.name() == s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::decode::{decode_args, encode_blob_record, encode_record, parse_record};
    use crate::probes::catalogue::catalogue;
    use tracer_common::CallEvent;

    /// Every API's arguments survive raw → Call → JSON → Call.
    #[test]
    fn every_api_round_trips_through_json() {
        for api in catalogue() {
            let mut e = CallEvent::zeroed();
            e.kind = 1;
            e.api = api.id as u32;
            e.dur_ns = 5;
            for (i, a) in e.args.iter_mut().enumerate() {
                *a = (i as u64 + 1) * 3;
            }
            e.args[3] = 7; // a valid NCCL datatype wherever it sits
            e.extra = [0x10 | 1 << 32, 2 | 3 << 32, 4 | 5 << 32, 6, 0x77, 0];
            // (extra[5] stays 0: the host stub is not part of the schema.)
            let cookie = api.cookie();
            let bytes = if cookie.blob_source() != 0 {
                let blob: Vec<u8> = (0..cookie.blob_len()).map(|i| (i * 7) as u8).collect();
                encode_blob_record(&e, &blob)
            } else {
                encode_record(&e, Some(b"_Z4reluPfi"))
            };
            let raw = parse_record(&bytes).unwrap();
            let call = Call {
                ts_ns: 1_700_000_000_000_000_000,
                dur_ns: Some(5),
                pid: 1,
                tid: 2,
                comm: Arc::from("py\"thon"),
                api: api.name,
                family: Some(api.family),
                ret: Some(0),
                args: decode_args(api, &raw),
            };
            let mut s = String::new();
            write_call(&mut s, &call);
            let v: Value =
                serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}: {s}", api.name));
            let back = parse_call(&v).unwrap_or_else(|e| panic!("{}: {e}: {s}", api.name));
            assert_eq!(back, call, "{}", api.name);
        }
    }

    #[test]
    fn unknown_api_is_kept() {
        let v: Value = serde_json::from_str(
            r#"{"ts_ns":1,"dur_ns":null,"pid":1,"tid":1,"comm":"x","api":"cuFoo","ret":null,"args":{"a":1}}"#,
        )
        .unwrap();
        let c = parse_call(&v).unwrap();
        assert_eq!((c.api, c.family, c.dur_ns), ("cuFoo", None, None));
    }

    #[test]
    fn bad_fields_are_reported() {
        let v: Value =
            serde_json::from_str(r#"{"ts_ns":"x","pid":1,"tid":1,"api":"cuCtxSynchronize"}"#)
                .unwrap();
        assert_eq!(parse_call(&v), Err(ParseError::Field("ts_ns")));
    }
}
