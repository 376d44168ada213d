//! Reading the JSONL schema back into calls (`gputrace stats`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::catalogue::api_by_name;
use crate::json::parse::*;
use crate::model::call::*;
use crate::model::capped::Overflow;
use crate::model::nccl::Identity;
use crate::model::nccl::SeqSource;
use crate::model::nccl::Unaligned;
use crate::model::types::AllocKind;
use crate::model::types::Direction;
use crate::model::types::NcclOp;

/// API names not in the catalogue interned per thread (a reader runs on
/// one), at most: each is kept for the life of the program. Past it, or
/// longer than [`MAX_API_NAME`], a name is read as [`OTHER_APIS`] and
/// counted ([`take_api_names_over`]).
pub const MAX_UNKNOWN_APIS: usize = 256;
/// Bytes of an API name not in the catalogue interned, at most.
pub const MAX_API_NAME: usize = 128;
/// The API row of calls whose names were not interned.
pub const OTHER_APIS: &str = "(other APIs)";

thread_local! {
    static UNKNOWN_APIS: RefCell<(HashSet<&'static str>, Overflow)> =
        RefCell::new((HashSet::new(), Overflow::default()));
}

/// Interns an API name (names from files): the catalogue's, else one of
/// the first [`MAX_UNKNOWN_APIS`] others, else [`OTHER_APIS`].
fn intern(s: &str) -> &'static str {
    if let Some(api) = api_by_name(s) {
        return api.name;
    }
    UNKNOWN_APIS.with(|u| {
        let (set, over) = &mut *u.borrow_mut();
        if let Some(existing) = set.get(s) {
            return *existing;
        }
        if set.len() >= MAX_UNKNOWN_APIS || s.len() > MAX_API_NAME {
            over.add(s);
            return OTHER_APIS;
        }
        let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
        set.insert(leaked);
        leaked
    })
}

/// The API names read as [`OTHER_APIS`] on this thread since the last
/// call, and their calls.
pub fn take_api_names_over() -> Overflow {
    UNKNOWN_APIS.with(|u| std::mem::take(&mut u.borrow_mut().1))
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
        stack: None,
        args,
    })
}

/// The `args` object of a call of `shape`, as `schema::fields` writes it.
/// (Long: one arm per shape, each a few lines.)
fn parse_args(shape: crate::catalogue::Shape, a: &Map<String, Value>) -> Result<Args, ParseError> {
    use crate::catalogue::Shape;
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
            captured: crate::graphs::json::parse_captured(a)?,
        }),
        Shape::GraphLaunch => Args::Graph(crate::graphs::json::parse_launch(a)?),
        Shape::Graph(op) => Args::GraphApi(crate::graphs::json::parse_call(op, a)?),
        Shape::Gemm { .. } => Args::Gemm(parse_gemm(a)?),
        // A matmul with its problem is written as a GEMM.
        Shape::Lt(crate::model::lt::LtOp::Matmul) if a.contains_key("m") => {
            Args::Gemm(parse_gemm(a)?)
        }
        Shape::Lt(op) => Args::Lt(parse_lt(op, a)?),
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
            captured: crate::graphs::json::parse_captured(a)?,
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
                ident: Identity {
                    comm_id: get_opt_hex(a, "comm_id")?,
                    rank: get_opt_u32(a, "rank")?,
                    nranks: get_opt_u32(a, "nranks")?,
                    cuda_dev: get_opt_u32(a, "cuda_dev")?,
                    seq: get_opt_u64(a, "seq")?,
                    source: match a.get("seq_from") {
                        None | Some(Value::Null) => None,
                        Some(v) => Some(
                            v.as_str()
                                .and_then(SeqSource::from_name)
                                .ok_or(ParseError::Field("seq_from"))?,
                        ),
                    },
                    own_id: own_id(a),
                },
                unaligned: match a.get("unaligned") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(
                        v.as_str()
                            .and_then(Unaligned::from_code)
                            .ok_or(ParseError::Field("unaligned"))?,
                    ),
                },
            })
        }
        Shape::NcclGroup => Args::NcclGroup,
        Shape::CommInit | Shape::CommInitAll | Shape::CommInitScalable => Args::CommInit {
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
            comm_id: get_opt_hex(a, "comm_id")?,
            own_id: own_id(a),
        },
        Shape::CommSplit => Args::CommSplit {
            comm: get_hex(a, "comm")?,
            color: get_opt_i64(a, "color")?.ok_or(ParseError::Field("color"))?,
            key: get_opt_i64(a, "key")?.ok_or(ParseError::Field("key"))?,
            newcomm: get_opt_hex(a, "newcomm")?,
            comm_id: get_opt_hex(a, "comm_id")?,
            own_id: own_id(a),
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
    if !s.len().is_multiple_of(2) {
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

/// A GEMM's fields (`docs/events.md`); a type or compute type this build
/// does not name stays unknown.
fn parse_gemm(a: &serde_json::Map<String, Value>) -> Result<crate::model::gemm::Gemm, ParseError> {
    use crate::model::gemm::{compute_from_name, dtype_from_name, op_from_name, Gemm};
    let size = |k: &'static str| get_opt_i64(a, k)?.ok_or(ParseError::Field(k));
    let named =
        |k: &str, from: fn(&str) -> Option<u32>| a.get(k).and_then(Value::as_str).and_then(from);
    Ok(Gemm {
        transa: named("transa", op_from_name),
        transb: named("transb", op_from_name),
        m: size("m")?,
        n: size("n")?,
        k: size("k")?,
        batch: get_opt_i64(a, "batch")?,
        a_type: named("a_type", dtype_from_name),
        b_type: named("b_type", dtype_from_name),
        c_type: named("c_type", dtype_from_name),
        compute: named("compute", compute_from_name),
    })
}

/// cuBLASLt's descriptor calls, as `schema::fields` writes them.
fn parse_lt(
    op: crate::model::lt::LtOp,
    a: &serde_json::Map<String, Value>,
) -> Result<crate::model::lt::LtCall, ParseError> {
    use crate::model::gemm::{compute_from_name, dtype_from_name};
    use crate::model::lt::{LtCall, LtOp};
    // A type code: its name, or the number where the writer named none.
    let named = |k: &'static str, from: fn(&str) -> Option<u32>| -> Result<u32, ParseError> {
        match a.get(k) {
            Some(Value::String(s)) => from(s),
            Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
            None => None,
        }
        .ok_or(ParseError::Field(k))
    };
    let attr = || -> Result<u32, ParseError> {
        u32::try_from(get_u64(a, "attr")?).map_err(|_| ParseError::Field("attr"))
    };
    Ok(match op {
        LtOp::DescCreate => LtCall::DescCreate {
            desc: get_opt_hex(a, "desc")?,
            compute: named("compute", compute_from_name)?,
            scale: named("scale_type", dtype_from_name)?,
        },
        LtOp::LayoutCreate => LtCall::LayoutCreate {
            layout: get_opt_hex(a, "layout")?,
            dtype: named("type", dtype_from_name)?,
            rows: get_u64(a, "rows")?,
            cols: get_u64(a, "cols")?,
            ld: get_opt_i64(a, "ld")?.ok_or(ParseError::Field("ld"))?,
        },
        LtOp::DescSet => LtCall::DescSet {
            desc: get_hex(a, "desc")?,
            attr: attr()?,
            value: get_opt_i64(a, "value")?,
        },
        LtOp::LayoutSet => LtCall::LayoutSet {
            layout: get_hex(a, "layout")?,
            attr: attr()?,
            value: get_opt_i64(a, "value")?,
        },
        LtOp::DescDestroy => LtCall::DescDestroy {
            desc: get_hex(a, "desc")?,
        },
        LtOp::LayoutDestroy => LtCall::LayoutDestroy {
            layout: get_hex(a, "layout")?,
        },
        LtOp::Matmul => LtCall::Matmul {
            desc: get_hex(a, "desc")?,
            a: get_hex(a, "a_desc")?,
            b: get_hex(a, "b_desc")?,
            c: get_hex(a, "c_desc")?,
        },
    })
}

/// `comm_id_from: "unique_id"`: the id is gputrace's own, not NCCL's.
fn own_id(a: &serde_json::Map<String, Value>) -> bool {
    a.get("comm_id_from").and_then(Value::as_str) == Some("unique_id")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::catalogue;
    use crate::decode::record::decode_args;
    use crate::decode::record::encode_blob_record;
    use crate::decode::record::encode_record;
    use crate::decode::record::parse_record;
    use crate::schema::write::write_call;
    use tracer_common::CallEvent;

    /// API names not in the catalogue: the first ones kept, the rest (and
    /// over-long ones) read as one row and counted, on this thread.
    #[test]
    fn unknown_api_names_are_bounded_and_counted() {
        let _ = take_api_names_over();
        let call = |api: &str| {
            let v = serde_json::json!({"ts_ns": 1, "dur_ns": 2, "pid": 3, "tid": 3,
                "comm": "x", "api": api, "ret": 0, "args": {}});
            parse_call(&v).unwrap().api
        };
        let extra = 40;
        // Other tests on this thread may have interned some already.
        for i in 0..MAX_UNKNOWN_APIS + extra {
            call(&format!("fakeApi{i}"));
        }
        assert_eq!(call("fakeApi0"), "fakeApi0");
        assert_eq!(
            call(&format!("fakeApi{}", MAX_UNKNOWN_APIS + 1)),
            OTHER_APIS
        );
        assert_eq!(call(&"y".repeat(MAX_API_NAME + 1)), OTHER_APIS);
        // A catalogue name is never over the bound.
        assert_eq!(call("cuCtxSynchronize"), "cuCtxSynchronize");
        let over = take_api_names_over();
        assert!(over.keys() > extra as u64, "{}", over.keys());
        assert_eq!(over.entries, over.keys() + 1);
        assert!(take_api_names_over().is_empty());
    }

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
                stack: None,
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
