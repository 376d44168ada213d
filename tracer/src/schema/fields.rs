//! A call's arguments as named fields, in one place: [`visit`] walks an
//! [`Args`] in the schema's key order and hands each field to an
//! [`ArgFields`], which each format implements (the JSONL `args` object in
//! [`crate::schema::write`], Perfetto's debug annotations in
//! `outputs::timeline::perfetto::args`). A format decides only how a field
//! is written: what a call's fields are, and their order, are said here.

use serde_json::{Map, Value};

use crate::model::call::{Args, Launch};

/// Where the fields of one call's arguments go, in the schema's order.
pub(crate) trait ArgFields {
    /// An address or handle.
    fn hex(&mut self, key: &'static str, v: u64);
    /// An address or handle that may be unknown (JSON: `null`).
    fn opt_hex(&mut self, key: &'static str, v: Option<u64>);
    /// A count or size.
    fn uint(&mut self, key: &'static str, v: u64);
    /// A signed number as the caller passed it (a GEMM's sizes).
    fn int(&mut self, key: &'static str, v: i64);
    /// A signed number that may be unknown (JSON: `null`).
    fn opt_int(&mut self, key: &'static str, v: Option<i64>);
    /// A name from a fixed set (a copy direction, an allocation kind).
    fn name(&mut self, key: &'static str, v: &str);
    /// Text that may be unknown (a function's name; JSON: `null`).
    fn opt_text(&mut self, key: &'static str, v: Option<&str>);
    /// A kernel launch's fields: function, kernel, grid, block, shared
    /// memory, stream.
    fn launch(&mut self, l: &Launch);
    /// Work recorded by a stream capture (not run): `captured`, `capture`.
    fn captured(&mut self, capture: Option<u64>);
    /// Arguments whose shape only their feature's JSON writer knows: a
    /// graph launch, the graph APIs, NCCL calls with their communicator's
    /// identity.
    fn feature(&mut self, args: &Args);
    /// Arguments of an API this build does not know (read from a file).
    fn other(&mut self, map: &Map<String, Value>);
}

/// Hands the fields of `args` to `f`, in the schema's order.
pub(crate) fn visit(args: &Args, f: &mut impl ArgFields) {
    match args {
        Args::Launch(l) => {
            f.launch(l);
            f.captured(l.captured);
        }
        Args::Graph(_)
        | Args::GraphApi(_)
        | Args::Nccl(_)
        | Args::CommInit { .. }
        | Args::CommSplit { .. } => f.feature(args),
        Args::Alloc(a) => {
            f.opt_hex("dptr", a.dptr);
            f.uint("bytes", a.bytes);
            f.name("kind", a.kind.name());
            if let Some(s) = a.stream {
                f.hex("stream", s);
            }
            if let Some(p) = a.pitch {
                f.uint("pitch", p);
            }
        }
        Args::Free { dptr, stream } => {
            f.hex("dptr", *dptr);
            if let Some(s) = stream {
                f.hex("stream", *s);
            }
        }
        Args::MemCreate { handle, bytes } => {
            f.opt_hex("handle", *handle);
            f.uint("bytes", *bytes);
        }
        Args::MemRelease { handle } | Args::Unload { handle } => f.hex("handle", *handle),
        Args::MemMap { ptr, bytes, handle } => {
            f.hex("ptr", *ptr);
            f.uint("bytes", *bytes);
            f.hex("handle", *handle);
        }
        Args::MemUnmap { ptr, bytes } => {
            f.hex("ptr", *ptr);
            f.uint("bytes", *bytes);
        }
        Args::Memcpy(m) => {
            f.hex("dst", m.dst);
            f.opt_hex("src", m.src);
            f.uint("bytes", m.bytes);
            f.name("direction", m.direction.name());
            f.opt_hex("stream", m.stream);
            if let Some(v) = m.value {
                f.uint("value", v);
            }
            f.captured(m.captured);
        }
        Args::Sync { stream, event } => {
            if let Some(s) = stream {
                f.hex("stream", *s);
            }
            if let Some(e) = event {
                f.hex("event", *e);
            }
        }
        Args::GetFunction {
            handle,
            name,
            parent,
            kind,
        } => {
            let (h, p) = kind.labels();
            f.opt_hex(h, *handle);
            f.opt_text("name", name.as_deref());
            f.hex(p, *parent);
        }
        Args::KernelGetFunction { function, kernel } => {
            f.opt_hex("function", *function);
            f.hex("kernel", *kernel);
        }
        Args::NcclGroup => {}
        Args::Gemm(g) => {
            use crate::model::gemm::{compute_name, dtype_name, op_name};
            f.opt_text("transa", g.transa.and_then(op_name));
            f.opt_text("transb", g.transb.and_then(op_name));
            f.int("m", g.m);
            f.int("n", g.n);
            f.int("k", g.k);
            f.opt_int("batch", g.batch);
            for (key, t) in [
                ("a_type", g.a_type),
                ("b_type", g.b_type),
                ("c_type", g.c_type),
            ] {
                f.opt_text(key, t.and_then(dtype_name));
            }
            f.opt_text("compute", g.compute.and_then(compute_name));
        }
        Args::Lt(l) => lt_fields(l, f),
        Args::CommEnd { comm } => f.hex("comm", *comm),
        Args::RuntimeLaunch { func, stream } => {
            f.hex("func", *func);
            f.opt_hex("stream", *stream);
        }
        Args::Other(map) => f.other(map),
    }
}

/// A type code: its name, or the number where this build names none.
fn code(f: &mut impl ArgFields, key: &'static str, v: u32, name: fn(u32) -> Option<&'static str>) {
    match name(v) {
        Some(n) => f.name(key, n),
        None => f.uint(key, u64::from(v)),
    }
}

/// cuBLASLt's descriptor calls (`model::lt`): handles, the values given.
fn lt_fields(l: &crate::model::lt::LtCall, f: &mut impl ArgFields) {
    use crate::model::gemm::{compute_name, dtype_name};
    use crate::model::lt::LtCall;
    match l {
        LtCall::DescCreate {
            desc,
            compute,
            scale,
        } => {
            f.opt_hex("desc", *desc);
            code(f, "compute", *compute, compute_name);
            code(f, "scale_type", *scale, dtype_name);
        }
        LtCall::LayoutCreate {
            layout,
            dtype,
            rows,
            cols,
            ld,
        } => {
            f.opt_hex("layout", *layout);
            code(f, "type", *dtype, dtype_name);
            f.uint("rows", *rows);
            f.uint("cols", *cols);
            f.int("ld", *ld);
        }
        LtCall::DescSet { desc, attr, value } => {
            f.hex("desc", *desc);
            f.uint("attr", u64::from(*attr));
            f.opt_int("value", *value);
        }
        LtCall::LayoutSet {
            layout,
            attr,
            value,
        } => {
            f.hex("layout", *layout);
            f.uint("attr", u64::from(*attr));
            f.opt_int("value", *value);
        }
        LtCall::DescDestroy { desc } => f.hex("desc", *desc),
        LtCall::LayoutDestroy { layout } => f.hex("layout", *layout),
        LtCall::Matmul { desc, a, b, c } => {
            f.hex("desc", *desc);
            f.hex("a_desc", *a);
            f.hex("b_desc", *b);
            f.hex("c_desc", *c);
        }
    }
}
