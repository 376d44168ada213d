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
use crate::schema::fields::ArgFields;

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

/// Sends the annotations of `args` to `s`: the fields
/// [`crate::schema::fields::visit`] names, a field whose value is unknown
/// left out.
pub(super) fn annotate(args: &Args, s: &mut impl AnnotationSink) {
    crate::schema::fields::visit(args, &mut Annotations(s));
}

struct Annotations<'a, S>(&'a mut S);

impl<S: AnnotationSink> ArgFields for Annotations<'_, S> {
    fn hex(&mut self, key: &'static str, v: u64) {
        self.0.pointer(key, v);
    }
    fn opt_hex(&mut self, key: &'static str, v: Option<u64>) {
        if let Some(v) = v {
            self.0.pointer(key, v);
        }
    }
    fn uint(&mut self, key: &'static str, v: u64) {
        self.0.uint(key, v);
    }
    fn int(&mut self, key: &'static str, v: i64) {
        self.0.json(key, &Value::from(v));
    }
    fn opt_int(&mut self, key: &'static str, v: Option<i64>) {
        if let Some(v) = v {
            self.0.json(key, &Value::from(v));
        }
    }
    fn name(&mut self, key: &'static str, v: &str) {
        self.0.string(key, v);
    }
    fn opt_text(&mut self, key: &'static str, v: Option<&str>) {
        if let Some(v) = v {
            self.0.string(key, v);
        }
    }
    fn launch(&mut self, l: &Launch) {
        self.0.launch(l);
    }
    /// As in JSONL, `"captured":true,"capture":N`.
    fn captured(&mut self, capture: Option<u64>) {
        if let Some(n) = capture {
            self.0.json("captured", &Value::Bool(true));
            self.0.uint("capture", n);
        }
    }
    /// A graph launch, the graph APIs' many shapes and NCCL calls with
    /// their communicator's identity: their JSON arguments, as in JSONL, in
    /// one `args` annotation the reader merges. A graph launch lists what
    /// it runs (its nodes), read back by `stats`.
    fn feature(&mut self, args: &Args) {
        let mut json = String::new();
        match args {
            Args::Graph(g) => crate::graphs::json::write_launch_with_nodes(&mut json, g),
            _ => crate::schema::write::write_feature(&mut json, args),
        }
        self.0.string("args", &json);
    }
    fn other(&mut self, map: &Map<String, Value>) {
        for (k, v) in map {
            self.0.json(k, v);
        }
    }
}
