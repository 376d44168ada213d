//! A call's arguments as Perfetto debug annotations, and back into the
//! JSONL `args` object (so reading gives exactly what the `.jsonl` reader
//! gives).
//!
//! Annotation names are the JSONL keys. Values: addresses as
//! `pointer_value` (Perfetto shows them in hex), handles that recur
//! (streams, events, communicators...) as interned "0x.." strings, counts
//! as `uint_value`,
//! signed values as `int_value`, names (direction, kind, NCCL op and
//! datatype) as interned strings; a key whose value is null is left out.
//! A launch, the call a trace holds most of, is one interned string
//! `kernel`: "NAME grid=XxYxZ block=XxYxZ smem=N stream=0x.. function=0x.."
//! (NAME left out when unknown). A training loop launches the same
//! kernels with the same shapes on the same streams over and over, so the
//! whole description costs 2 or 3 bytes per launch; separate annotations
//! would cost 6 to 8 bytes each.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::model::call::*;

/// Where the annotations of one event go (the writer interns and encodes).
pub(super) trait AnnotationSink {
    /// An interned string value.
    fn string(&mut self, name: &'static str, v: &str);
    fn uint(&mut self, name: &'static str, v: u64);
    fn int(&mut self, name: &'static str, v: i64);
    fn pointer(&mut self, name: &'static str, v: u64);
    /// The launch description (interned; see [`launch_text`]).
    fn launch(&mut self, l: &Launch);
    /// Any JSON value under any name (arguments of APIs this build does
    /// not know, read from a newer file): `legacy_json_value`.
    fn json(&mut self, name: &str, v: &Value);
}

/// The `kernel` annotation of a launch.
pub(super) fn launch_text(out: &mut String, l: &Launch) {
    if let Some(k) = &l.kernel {
        out.push_str(k);
        out.push(' ');
    }
    let [gx, gy, gz] = l.grid;
    let [bx, by, bz] = l.block;
    let _ = write!(
        out,
        "grid={gx}x{gy}x{gz} block={bx}x{by}x{bz} smem={} stream={:#x} function={:#x}",
        l.shared_mem_bytes, l.stream, l.function
    );
}

fn dims(s: &str) -> Option<Value> {
    let mut it = s.split('x').map(|d| d.parse::<u32>().ok());
    let d = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then(|| Value::from(d.to_vec()))
}

fn hex_ok(s: &str) -> Option<Value> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()?;
    Some(Value::from(s))
}

/// The JSONL launch args from a `kernel` annotation; `None` if malformed.
pub(super) fn parse_launch_text(s: &str, args: &mut Map<String, Value>) -> Option<()> {
    let mut parts = s.rsplitn(6, ' ');
    let function = parts.next()?.strip_prefix("function=")?;
    let stream = parts.next()?.strip_prefix("stream=")?;
    let smem = parts.next()?.strip_prefix("smem=")?;
    let block = parts.next()?.strip_prefix("block=")?;
    let grid = parts.next()?.strip_prefix("grid=")?;
    args.insert("function".into(), hex_ok(function)?);
    args.insert(
        "kernel".into(),
        parts.next().map_or(Value::Null, Value::from),
    );
    args.insert("grid".into(), dims(grid)?);
    args.insert("block".into(), dims(block)?);
    args.insert(
        "shared_mem_bytes".into(),
        Value::from(smem.parse::<u32>().ok()?),
    );
    args.insert("stream".into(), hex_ok(stream)?);
    Some(())
}

fn opt_pointer(s: &mut impl AnnotationSink, name: &'static str, v: Option<u64>) {
    if let Some(v) = v {
        s.pointer(name, v);
    }
}

/// Work recorded by a stream capture (not run): as in JSONL,
/// `"captured":true,"capture":N`.
fn captured(s: &mut impl AnnotationSink, capture: Option<u64>) {
    if let Some(n) = capture {
        s.json("captured", &Value::Bool(true));
        s.uint("capture", n);
    }
}

/// Sends the annotations of `args` to `s`.
pub(super) fn annotate(args: &Args, s: &mut impl AnnotationSink) {
    match args {
        Args::Launch(l) => {
            s.launch(l);
            captured(s, l.captured);
        }
        // A graph launch and the graph APIs' many shapes: their JSON
        // arguments, as in JSONL, in one `args` annotation the reader merges.
        // A launch lists what it runs (its nodes), read back by `stats`.
        Args::Graph(g) => {
            let mut json = String::new();
            crate::graphs::json::write_launch_with_nodes(&mut json, g);
            s.string("args", &json);
        }
        Args::GraphApi(g) => {
            let mut json = String::new();
            crate::graphs::json::write_call(&mut json, g);
            s.string("args", &json);
        }
        Args::Alloc(a) => {
            opt_pointer(s, "dptr", a.dptr);
            s.uint("bytes", a.bytes);
            s.string("kind", a.kind.name());
            opt_pointer(s, "stream", a.stream);
            if let Some(p) = a.pitch {
                s.uint("pitch", p);
            }
        }
        Args::Free { dptr, stream } => {
            s.pointer("dptr", *dptr);
            opt_pointer(s, "stream", *stream);
        }
        Args::MemCreate { handle, bytes } => {
            opt_pointer(s, "handle", *handle);
            s.uint("bytes", *bytes);
        }
        Args::MemRelease { handle } => s.pointer("handle", *handle),
        Args::MemMap { ptr, bytes, handle } => {
            s.pointer("ptr", *ptr);
            s.uint("bytes", *bytes);
            s.pointer("handle", *handle);
        }
        Args::MemUnmap { ptr, bytes } => {
            s.pointer("ptr", *ptr);
            s.uint("bytes", *bytes);
        }
        Args::Memcpy(m) => {
            s.pointer("dst", m.dst);
            opt_pointer(s, "src", m.src);
            s.uint("bytes", m.bytes);
            s.string("direction", m.direction.name());
            opt_pointer(s, "stream", m.stream);
            if let Some(v) = m.value {
                s.uint("value", v);
            }
            captured(s, m.captured);
        }
        Args::Sync { stream, event } => {
            opt_pointer(s, "stream", *stream);
            opt_pointer(s, "event", *event);
        }
        Args::GetFunction {
            handle,
            name,
            parent,
            kind,
        } => {
            let (h, p) = kind.labels();
            opt_pointer(s, h, *handle);
            if let Some(n) = name {
                s.string("name", n);
            }
            s.pointer(p, *parent);
        }
        Args::KernelGetFunction { function, kernel } => {
            opt_pointer(s, "function", *function);
            s.pointer("kernel", *kernel);
        }
        Args::Unload { handle } => s.pointer("handle", *handle),
        // NCCL calls carry their communicator's identity and sequence
        // number: their JSON arguments, as in JSONL (read back whole).
        a @ (Args::Nccl(_) | Args::CommInit { .. } | Args::CommSplit { .. }) => {
            let mut json = String::new();
            crate::schema::write::write_args(&mut json, a);
            s.string("args", &json);
        }
        Args::NcclGroup => {}
        Args::CommEnd { comm } => s.pointer("comm", *comm),
        Args::RuntimeLaunch { func, stream } => {
            s.pointer("func", *func);
            opt_pointer(s, "stream", *stream);
        }
        Args::Other(map) => {
            for (k, v) in map {
                s.json(k, v);
            }
        }
    }
}
