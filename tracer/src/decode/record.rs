//! Turning ring buffer records into [`Call`] arguments.

use tracer_common::{
    BlobCallEvent, CallEvent, EventKind, ExecEvent, NamedCallEvent, BLOB_LEN, NAME_LEN,
    READABLE_SLOT, RUNTIME_SLOT,
};

use crate::catalogue::Api;
use crate::catalogue::Shape;
use crate::model::call::Alloc;
use crate::model::call::Args;
use crate::model::call::HandleKind;
use crate::model::call::Launch;
use crate::model::call::Memcpy;
use crate::model::call::Nccl;
use crate::model::graph::GraphLaunch;
use crate::model::raw::RawCall;
use crate::model::types::Direction;
use crate::nccl::enrich::comm_memory;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("unknown record kind {0}")]
    Kind(u32),
    #[error("record of kind {kind:?} has {len} bytes, expected {expected}")]
    Size {
        kind: EventKind,
        len: usize,
        expected: usize,
    },
    #[error("unknown api id {0}")]
    Api(u32),
    /// A call of a process the session has not said it saw: the session
    /// says so first, then decodes the call again.
    #[error("process {0} not seen yet")]
    Unseen(u32),
}

/// An exec record of the ring buffer (`None` for any other record).
pub fn parse_exec(bytes: &[u8]) -> Option<ExecEvent> {
    let kind = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
    if kind != EventKind::Exec as u32 || bytes.len() != ExecEvent::SIZE {
        return None;
    }
    // SAFETY: the length was checked; read_unaligned copes with any
    // alignment, and ExecEvent is plain old data.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<ExecEvent>()) })
}

/// Checks a record's size and kind and copies it out of the ring buffer.
pub fn parse_record(bytes: &[u8]) -> Result<RawCall<'_>, DecodeError> {
    if bytes.len() < 4 {
        return Err(DecodeError::Short(bytes.len()));
    }
    let kind_raw = u32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes"));
    let kind = EventKind::from_u32(kind_raw).ok_or(DecodeError::Kind(kind_raw))?;
    let expected = match kind {
        EventKind::Call => CallEvent::SIZE,
        EventKind::NamedCall => NamedCallEvent::SIZE,
        EventKind::BlobCall => BlobCallEvent::SIZE,
        // Read by `stacks::record` and [`parse_exec`], never as a call.
        EventKind::Stack | EventKind::Exec => return Err(DecodeError::Kind(kind_raw)),
    };
    // The ring buffer rounds records up to 8 bytes; every size is a multiple of 8.
    if bytes.len() != expected {
        return Err(DecodeError::Size {
            kind,
            len: bytes.len(),
            expected,
        });
    }
    // SAFETY: the length was checked; read_unaligned copes with any alignment,
    // and CallEvent is plain old data.
    let event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<CallEvent>()) };
    let blob = (kind == EventKind::BlobCall).then(|| {
        let len_at = CallEvent::SIZE;
        let len = u32::from_ne_bytes(bytes[len_at..len_at + 4].try_into().expect("4 bytes"));
        let start = len_at + 8;
        &bytes[start..start + (len as usize).min(BLOB_LEN)]
    });
    let name = match kind {
        EventKind::Call | EventKind::BlobCall | EventKind::Stack | EventKind::Exec => None,
        EventKind::NamedCall => {
            let len_at = CallEvent::SIZE;
            let len = u32::from_ne_bytes(bytes[len_at..len_at + 4].try_into().expect("4 bytes"));
            let start = len_at + 8;
            let len = (len as usize).min(NAME_LEN);
            // bpf_probe_read_user_str counts the NUL; drop it and anything after.
            let s = &bytes[start..start + len];
            let end = s.iter().position(|b| *b == 0).unwrap_or(s.len());
            Some(&s[..end])
        }
    };
    Ok(RawCall { event, name, blob })
}

/// Encodes a record the way the eBPF side lays it out (for tests and benches).
pub fn encode_record(event: &CallEvent, name: Option<&[u8]>) -> Vec<u8> {
    // SAFETY: CallEvent is #[repr(C)] plain old data with no implicit padding.
    let head = unsafe {
        std::slice::from_raw_parts((event as *const CallEvent).cast::<u8>(), CallEvent::SIZE)
    };
    let mut out = head.to_vec();
    if let Some(name) = name {
        out[..4].copy_from_slice(&(EventKind::NamedCall as u32).to_ne_bytes());
        let n = name.len().min(NAME_LEN - 1);
        out.extend_from_slice(&((n + 1) as u32).to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        let mut buf = [0u8; NAME_LEN];
        buf[..n].copy_from_slice(&name[..n]);
        out.extend_from_slice(&buf);
    }
    out
}

/// Encodes a call with a blob the way the eBPF side lays it out (tests, benches).
pub fn encode_blob_record(event: &CallEvent, blob: &[u8]) -> Vec<u8> {
    let mut out = encode_record(event, None);
    out[..4].copy_from_slice(&(EventKind::BlobCall as u32).to_ne_bytes());
    let n = blob.len().min(BLOB_LEN);
    out.extend_from_slice(&(n as u32).to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    let mut buf = [0u8; BLOB_LEN];
    buf[..n].copy_from_slice(&blob[..n]);
    out.extend_from_slice(&buf);
    debug_assert_eq!(out.len(), BlobCallEvent::SIZE);
    out
}

/// `sizeof(ncclUniqueId)`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

fn u32_of(v: u64) -> u32 {
    v as u32
}

fn int_of(v: u64) -> i64 {
    v as u32 as i32 as i64
}

/// The return code: CUresult and ncclResult_t are 32-bit enums.
pub fn ret_of(raw: &RawCall<'_>) -> Option<i64> {
    raw.has_return().then_some(raw.event.ret as u32 as i64)
}

/// The `ncclUniqueId` a probe copied (none when the read failed).
fn unique_id(raw: &RawCall<'_>) -> Option<Box<[u8]>> {
    raw.blob
        .filter(|b| b.len() == NCCL_UNIQUE_ID_BYTES)
        .map(Box::from)
}

/// A cuBLASLt call's arguments (`model::lt`).
fn lt_args(op: crate::model::lt::LtOp, raw: &RawCall<'_>, ok: bool) -> crate::model::lt::LtCall {
    use crate::model::lt::{attr_value, LtCall, LtOp};
    let e = &raw.event;
    let a = |i: usize| e.args[i];
    let out = ok.then_some(e.extra[0]).filter(|h| *h != 0);
    match op {
        LtOp::DescCreate => LtCall::DescCreate {
            desc: out,
            compute: a(1) as u32,
            scale: a(2) as u32,
        },
        LtOp::LayoutCreate => LtCall::LayoutCreate {
            layout: out,
            dtype: a(1) as u32,
            rows: a(2),
            cols: a(3),
            ld: a(4) as i64,
        },
        // The probe read the buffer at entry; 0 there when it could not.
        LtOp::DescSet => LtCall::DescSet {
            desc: a(0),
            attr: a(1) as u32,
            value: attr_value(e.extra[0], a(3)),
        },
        LtOp::LayoutSet => LtCall::LayoutSet {
            layout: a(0),
            attr: a(1) as u32,
            value: attr_value(e.extra[0], a(3)),
        },
        LtOp::DescDestroy => LtCall::DescDestroy { desc: a(0) },
        LtOp::LayoutDestroy => LtCall::LayoutDestroy { layout: a(0) },
        // Bdesc is the 7th argument, Cdesc the 10th (on the stack).
        LtOp::Matmul => LtCall::Matmul {
            desc: a(1),
            a: a(4),
            b: a(6),
            c: a(9),
        },
    }
}

/// Decodes the arguments of `api` from a record. (Long: one arm per shape
/// of the catalogue, each a few lines; split, they would only move.)
pub fn decode_args(api: &Api, raw: &RawCall<'_>) -> Args {
    let e = &raw.event;
    let a = |i: u8| e.args[i as usize];
    let ok = raw.has_return() && e.ret as u32 == 0;
    let out = |slot: usize| ok.then_some(e.extra[slot]);
    match api.shape {
        Shape::Launch => Args::Launch(Launch {
            function: a(0),
            stub: e.extra[RUNTIME_SLOT],
            kernel: None,
            grid: [u32_of(a(1)), u32_of(a(2)), u32_of(a(3))],
            block: [u32_of(a(4)), u32_of(a(5)), u32_of(a(6))],
            shared_mem_bytes: u32_of(a(7)),
            stream: a(8),
            captured: None,
        }),
        Shape::LaunchEx => {
            // CUlaunchConfig: 7 × u32 (grid, block, shared), pad, hStream.
            let x = &e.extra;
            Args::Launch(Launch {
                function: a(1),
                stub: e.extra[RUNTIME_SLOT],
                kernel: None,
                grid: [x[0] as u32, (x[0] >> 32) as u32, x[1] as u32],
                block: [(x[1] >> 32) as u32, x[2] as u32, (x[2] >> 32) as u32],
                shared_mem_bytes: x[3] as u32,
                stream: x[4],
                captured: None,
            })
        }
        Shape::GraphLaunch => Args::Graph(GraphLaunch {
            exec: a(0),
            stream: a(1),
            contents: None,
            captured: None,
        }),
        Shape::Graph(op) => Args::GraphApi(crate::graphs::decode::decode(op, raw, out)),
        Shape::Gemm { form, wide } => Args::Gemm(crate::model::gemm::Gemm::decode(
            form,
            &[a(0), a(1), a(2), a(3), a(4), a(5)],
            raw.blob.unwrap_or(&[]),
            wide,
        )),
        Shape::Lt(op) => Args::Lt(lt_args(op, raw, ok)),
        Shape::Alloc { kind, stream } => Args::Alloc(Alloc {
            dptr: out(0),
            bytes: a(1),
            kind,
            stream: stream.map(a),
            pitch: None,
        }),
        Shape::AllocPitch => {
            let pitch = out(1);
            Args::Alloc(Alloc {
                dptr: out(0),
                bytes: pitch.unwrap_or(a(2)).saturating_mul(a(3)),
                kind: crate::model::types::AllocKind::Device,
                stream: None,
                pitch,
            })
        }
        Shape::MemCreate => Args::MemCreate {
            handle: out(0),
            bytes: a(1),
        },
        Shape::Free { stream, .. } => Args::Free {
            dptr: a(0),
            stream: stream.map(a),
        },
        Shape::MemRelease => Args::MemRelease { handle: a(0) },
        Shape::MemMap => Args::MemMap {
            ptr: a(0),
            bytes: a(1),
            handle: a(3),
        },
        Shape::MemUnmap => Args::MemUnmap {
            ptr: a(0),
            bytes: a(1),
        },
        Shape::Memcpy {
            dst,
            src,
            bytes,
            stream,
            dir,
        } => Args::Memcpy(Memcpy {
            dst: a(dst),
            src: Some(a(src)),
            bytes: a(bytes),
            direction: dir.unwrap_or(Direction::Unknown),
            stream: stream.map(a),
            value: None,
            readable: (
                e.extra[READABLE_SLOT] & 1 != 0,
                e.extra[READABLE_SLOT] & 2 != 0,
            ),
            captured: None,
        }),
        Shape::Memset { elem, stream } => Args::Memcpy(Memcpy {
            dst: a(0),
            src: None,
            bytes: a(2).saturating_mul(elem as u64),
            direction: Direction::Memset,
            stream: stream.map(a),
            value: Some(match elem {
                1 => a(1) & 0xff,
                2 => a(1) & 0xffff,
                _ => a(1) & 0xffff_ffff,
            }),
            readable: (false, false),
            captured: None,
        }),
        Shape::Sync { stream, event } => Args::Sync {
            stream: stream.map(a),
            event: event.map(a),
        },
        Shape::ModuleGetFunction | Shape::LibraryGetKernel => Args::GetFunction {
            handle: out(0),
            // Read from the traced process: no escape sequence for a terminal.
            name: raw
                .name
                .map(|n| crate::text::printable(&String::from_utf8_lossy(n)).into_owned()),
            parent: a(1),
            kind: if api.shape == Shape::ModuleGetFunction {
                HandleKind::Function
            } else {
                HandleKind::Kernel
            },
        },
        Shape::KernelGetFunction => Args::KernelGetFunction {
            function: out(0),
            kernel: a(1),
        },
        Shape::Unload => Args::Unload { handle: a(0) },
        Shape::Nccl {
            op,
            count,
            dtype,
            redop,
            root,
            peer,
            comm,
            stream,
        } => Args::Nccl(Nccl {
            op,
            count: a(count),
            datatype: int_of(a(dtype)),
            redop: redop.map(|i| int_of(a(i))),
            root: root.map(|i| int_of(a(i))),
            peer: peer.map(|i| int_of(a(i))),
            comm: a(comm),
            stream: a(stream),
            ident: comm_memory(e).as_identity(),
            unaligned: None,
        }),
        Shape::NcclGroup => Args::NcclGroup,
        Shape::CommInit => Args::CommInit {
            comm: out(0),
            nranks: int_of(a(1)),
            rank: Some(int_of(a(2))),
            unique_id: unique_id(raw),
            comm_id: None,
            own_id: false,
        },
        Shape::CommInitScalable => Args::CommInit {
            comm: out(0),
            nranks: int_of(a(1)),
            rank: Some(int_of(a(2))),
            unique_id: unique_id(raw),
            comm_id: None,
            own_id: false,
        },
        Shape::CommInitAll => Args::CommInit {
            comm: out(0),
            nranks: int_of(a(1)),
            rank: None,
            unique_id: None,
            comm_id: None,
            own_id: false,
        },
        Shape::CommSplit => Args::CommSplit {
            comm: a(0),
            color: int_of(a(1)),
            key: int_of(a(2)),
            newcomm: out(0).filter(|&c| c != 0),
            comm_id: None,
            own_id: false,
        },
        Shape::CommEnd => Args::CommEnd { comm: a(0) },
        Shape::RuntimeLaunch => Args::RuntimeLaunch {
            func: a(0),
            stream: Some(a(7)),
        },
        Shape::RuntimeLaunchEx => Args::RuntimeLaunch {
            func: a(1),
            stream: Some(e.extra[4]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::api_by_name;

    fn raw_event(api: &str, args: &[u64], extra: &[u64], ret: u64) -> CallEvent {
        let mut e = CallEvent::zeroed();
        e.kind = EventKind::Call as u32;
        e.api = api_by_name(api).unwrap().id as u32;
        e.pid = 10;
        e.tid = 11;
        e.start_ns = 1000;
        e.dur_ns = 50;
        e.ret = ret;
        e.args[..args.len()].copy_from_slice(args);
        e.extra[..extra.len()].copy_from_slice(extra);
        e
    }

    fn round_trip(api: &str, e: &CallEvent, name: Option<&[u8]>) -> Args {
        let bytes = encode_record(e, name);
        let raw = parse_record(&bytes).unwrap();
        assert_eq!(raw.event.api, e.api);
        assert_eq!(raw.name, name);
        decode_args(api_by_name(api).unwrap(), &raw)
    }

    #[test]
    fn launch_reads_stack_arguments() {
        let e = raw_event(
            "cuLaunchKernel",
            &[0xf00, 64, 2, 1, 256, 1, 1, 4096, 0x5, 0, 0],
            &[],
            0,
        );
        let Args::Launch(l) = round_trip("cuLaunchKernel", &e, None) else {
            panic!()
        };
        assert_eq!(
            (l.function, l.grid, l.block, l.shared_mem_bytes, l.stream),
            (0xf00, [64, 2, 1], [256, 1, 1], 4096, 5)
        );
    }

    #[test]
    fn launch_ex_reads_the_config_struct() {
        let x = [32 | 4 << 32, 2 | 128 << 32, 2 | 1 << 32, 8192, 0x77];
        let e = raw_event("cuLaunchKernelEx", &[0x1000, 0xf1], &x, 0);
        let Args::Launch(l) = round_trip("cuLaunchKernelEx", &e, None) else {
            panic!()
        };
        assert_eq!(
            (l.function, l.grid, l.block, l.shared_mem_bytes, l.stream),
            (0xf1, [32, 4, 2], [128, 2, 1], 8192, 0x77)
        );
    }

    #[test]
    fn alloc_dptr_only_on_success() {
        let e = raw_event(
            "cuMemAlloc_v2",
            &[0x7ffd0000, 1 << 20],
            &[0x7f0000000000],
            0,
        );
        let Args::Alloc(a) = round_trip("cuMemAlloc_v2", &e, None) else {
            panic!()
        };
        assert_eq!((a.dptr, a.bytes), (Some(0x7f0000000000), 1 << 20));
        let e = raw_event("cuMemAlloc_v2", &[0x7ffd0000, 1 << 40], &[0xdead], 2);
        let Args::Alloc(a) = round_trip("cuMemAlloc_v2", &e, None) else {
            panic!()
        };
        assert_eq!(a.dptr, None);
        let pitch = raw_event(
            "cuMemAllocPitch_v2",
            &[1, 2, 1000, 100, 4],
            &[0x7f00, 1024],
            0,
        );
        let Args::Alloc(a) = round_trip("cuMemAllocPitch_v2", &pitch, None) else {
            panic!()
        };
        assert_eq!((a.pitch, a.bytes), (Some(1024), 102400));
    }

    #[test]
    fn every_shape_decodes() {
        for api in crate::catalogue::catalogue() {
            let e = raw_event(
                api.name,
                &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
                &[1, 2, 3, 4, 5, 6],
                0,
            );
            let name = matches!(
                api.shape,
                Shape::ModuleGetFunction | Shape::LibraryGetKernel
            )
            .then_some(&b"_Z4reluPfi"[..]);
            let _ = round_trip(api.name, &e, name);
        }
    }

    #[test]
    fn nccl_arguments_and_bytes() {
        let e = raw_event("ncclReduce", &[1, 2, 4096, 8, 2, 0, 0xc0, 0x5], &[], 0);
        let Args::Nccl(n) = round_trip("ncclReduce", &e, None) else {
            panic!()
        };
        assert_eq!(
            (n.count, n.datatype, n.redop, n.root, n.comm, n.stream),
            (4096, 8, Some(2), Some(0), 0xc0, 5)
        );
        assert_eq!(n.bytes(), Some(4096 * 8));
        let e = raw_event("ncclCommInitRank", &[0x10, 4, 3], &[0xc0], 0);
        let id: Vec<u8> = (0..128u8).collect();
        let raw = encode_blob_record(&e, &id);
        let raw = parse_record(&raw).unwrap();
        assert_eq!(raw.blob, Some(&id[..]));
        assert_eq!(
            decode_args(api_by_name("ncclCommInitRank").unwrap(), &raw),
            Args::CommInit {
                comm: Some(0xc0),
                nranks: 4,
                rank: Some(3),
                unique_id: Some(id.into()),
                comm_id: None,
                own_id: false,
            }
        );
        // A failed read leaves an empty blob: no id rather than a wrong one.
        let raw = encode_blob_record(&e, &[]);
        let Args::CommInit { unique_id, .. } = decode_args(
            api_by_name("ncclCommInitRank").unwrap(),
            &parse_record(&raw).unwrap(),
        ) else {
            panic!()
        };
        assert_eq!(unique_id, None);
    }

    #[test]
    fn names_carry_their_string() {
        let e = raw_event("cuModuleGetFunction", &[1, 0x99, 3], &[0xf00], 0);
        let args = round_trip("cuModuleGetFunction", &e, Some(b"_Z4reluPfi"));
        assert_eq!(
            args,
            Args::GetFunction {
                handle: Some(0xf00),
                name: Some("_Z4reluPfi".into()),
                parent: 0x99,
                kind: HandleKind::Function
            }
        );
    }

    #[test]
    fn malformed_records_are_errors() {
        assert_eq!(parse_record(&[1, 0]), Err(DecodeError::Short(2)));
        assert_eq!(
            parse_record(&[9, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::Kind(9))
        );
        let mut short = encode_record(
            &CallEvent {
                kind: 1,
                ..CallEvent::zeroed()
            },
            None,
        );
        short.truncate(64);
        assert!(matches!(
            parse_record(&short),
            Err(DecodeError::Size { .. })
        ));
    }
}
