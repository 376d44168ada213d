//! The probe's stack record ([`tracer_common::stack::StackRecord`]) read
//! back: checked against its own lengths and copied out of the ring buffer.

use std::borrow::Cow;

use tracer_common::stack::{
    PyRawFrame, PyStatus, RetFixup, StackRecord, MAX_PY_FRAMES, MAX_RET_FIXUPS, MAX_STACK_BYTES,
};
use tracer_common::EventKind;

use crate::stacks::native::Regs;
use crate::stacks::python::RawFrame;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StackRecordError {
    #[error("stack record of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("not a stack record (kind {0})")]
    Kind(u32),
    #[error("stack record says {claimed} bytes, has {len}")]
    Length { claimed: usize, len: usize },
    #[error("stack record has an unknown Python status {0}")]
    Status(u32),
}

/// One call's stack as the probe copied it (the stack bytes borrowed from
/// the record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawStack<'a> {
    pub api: u32,
    pub pid: u32,
    pub tid: u32,
    /// The call's `start_ns`.
    pub start_ns: u64,
    pub regs: Regs,
    /// Return addresses uretprobes replaced (slot, original).
    pub rets: Vec<RetFixup>,
    pub py_status: PyStatus,
    /// Python frames, innermost first, in the probe's encoding (see
    /// [`PyRawFrame::instr`]).
    pub py: Vec<PyRawFrame>,
    /// The user stack from `regs.sp` up.
    pub stack: &'a [u8],
}

impl RawStack<'_> {
    /// The Python frames decoded for a model: 3.10 frames carry `f_lasti`
    /// shifted left (sign kept), later ones the instruction pointer; a shim
    /// (code 0) marks the frame before it as its evaluation's first.
    pub fn python_frames(&self, frame_object_model: bool) -> Vec<RawFrame> {
        let mut out: Vec<RawFrame> = Vec::with_capacity(self.py.len());
        for f in &self.py {
            if f.code == 0 {
                if let Some(last) = out.last_mut() {
                    last.entry = true;
                }
                continue;
            }
            out.push(RawFrame {
                code: f.code,
                instr: if frame_object_model {
                    ((f.instr as i64) >> 1) as u64
                } else {
                    f.instr & !PyRawFrame::ENTRY_BIT
                },
                entry: f.instr & PyRawFrame::ENTRY_BIT != 0,
            });
        }
        out
    }

    /// The stack window with the uretprobes' trampolines replaced by the
    /// return addresses they stand for (slots outside the window are left).
    pub fn patched_stack(&self) -> Cow<'_, [u8]> {
        let inside = |r: &&RetFixup| {
            r.slot
                .checked_sub(self.regs.sp)
                .is_some_and(|off| off.saturating_add(8) <= self.stack.len() as u64)
        };
        if !self.rets.iter().any(|r| inside(&r)) {
            return Cow::Borrowed(self.stack);
        }
        let mut bytes = self.stack.to_vec();
        for r in self.rets.iter().filter(inside) {
            let Some(off) = r.slot.checked_sub(self.regs.sp) else {
                continue;
            };
            let Ok(off) = usize::try_from(off) else {
                continue;
            };
            if let Some(dst) = off.checked_add(8).and_then(|end| bytes.get_mut(off..end)) {
                dst.copy_from_slice(&r.ret.to_le_bytes());
            }
        }
        Cow::Owned(bytes)
    }
}

/// Reads a stack record (its kind already known to be `Stack`).
pub fn parse_stack_record(bytes: &[u8]) -> Result<RawStack<'_>, StackRecordError> {
    if bytes.len() < StackRecord::SIZE {
        return Err(StackRecordError::Short(bytes.len()));
    }
    // SAFETY: the length was checked; read_unaligned copes with any
    // alignment, and StackRecord is plain old data.
    let h = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<StackRecord>()) };
    if h.kind != EventKind::Stack as u32 {
        return Err(StackRecordError::Kind(h.kind));
    }
    let py_count = (h.py_count as usize).min(MAX_PY_FRAMES);
    let stack_len = (h.stack_len as usize).min(MAX_STACK_BYTES);
    let frames_end = StackRecord::SIZE + py_count * PyRawFrame::SIZE;
    let claimed = frames_end + stack_len;
    // The ring buffer rounds records up to 8 bytes.
    if bytes.len() < claimed || bytes.len() > claimed.next_multiple_of(8) {
        return Err(StackRecordError::Length {
            claimed,
            len: bytes.len(),
        });
    }
    let py_status = PyStatus::from_u32(h.py_status).ok_or(StackRecordError::Status(h.py_status))?;
    let py = bytes[StackRecord::SIZE..frames_end]
        .chunks_exact(PyRawFrame::SIZE)
        .map(|c| PyRawFrame {
            code: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
            instr: u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
        })
        .collect();
    Ok(RawStack {
        api: h.api,
        pid: h.pid,
        tid: h.tid,
        start_ns: h.start_ns,
        regs: Regs {
            ip: h.ip,
            sp: h.sp,
            bp: h.bp,
        },
        rets: h.rets[..(h.ret_count as usize).min(MAX_RET_FIXUPS)].to_vec(),
        py_status,
        py,
        stack: &bytes[frames_end..claimed],
    })
}

/// Lays a stack out as the probe does (for tests and benches).
pub fn encode_stack_record(s: &RawStack<'_>) -> Vec<u8> {
    let mut rets = [RetFixup::default(); MAX_RET_FIXUPS];
    for (d, r) in rets.iter_mut().zip(&s.rets) {
        *d = *r;
    }
    let h = StackRecord {
        kind: EventKind::Stack as u32,
        api: s.api,
        pid: s.pid,
        tid: s.tid,
        start_ns: s.start_ns,
        ip: s.regs.ip,
        sp: s.regs.sp,
        bp: s.regs.bp,
        stack_len: s.stack.len() as u32,
        py_count: s.py.len() as u32,
        py_status: s.py_status as u32,
        ret_count: s.rets.len().min(MAX_RET_FIXUPS) as u32,
        rets,
    };
    // SAFETY: StackRecord is #[repr(C)] plain old data with no implicit padding.
    let head = unsafe {
        std::slice::from_raw_parts((&h as *const StackRecord).cast::<u8>(), StackRecord::SIZE)
    };
    let mut out = head.to_vec();
    for f in &s.py {
        out.extend_from_slice(&f.code.to_le_bytes());
        out.extend_from_slice(&f.instr.to_le_bytes());
    }
    out.extend_from_slice(s.stack);
    out.resize(out.len().next_multiple_of(8), 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 20] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
    ];

    fn sample() -> RawStack<'static> {
        RawStack {
            api: 7,
            pid: 100,
            tid: 101,
            start_ns: 123_456,
            regs: Regs {
                ip: 0x7000,
                sp: 0x1000,
                bp: 0x2000,
            },
            rets: vec![RetFixup {
                slot: 0x1008,
                ret: 0xabcdef,
            }],
            py_status: PyStatus::Complete,
            py: vec![
                PyRawFrame {
                    code: 0x10,
                    instr: 0x5000 | 1,
                },
                PyRawFrame { code: 0, instr: 0 },
                PyRawFrame {
                    code: 0x20,
                    instr: (-1i64 << 1) as u64 | 1,
                },
            ],
            stack: &BYTES,
        }
    }

    #[test]
    fn round_trip_and_padding() {
        let s = sample();
        let bytes = encode_stack_record(&s);
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(parse_stack_record(&bytes).unwrap(), s);
        // Exactly sized (no padding) also reads.
        let exact = &bytes[..bytes.len() - 4];
        assert_eq!(parse_stack_record(exact).unwrap(), s);
    }

    #[test]
    fn bad_records_are_errors() {
        let bytes = encode_stack_record(&sample());
        assert!(matches!(
            parse_stack_record(&bytes[..10]),
            Err(StackRecordError::Short(10))
        ));
        assert!(matches!(
            parse_stack_record(&bytes[..bytes.len() - 12]),
            Err(StackRecordError::Length { .. })
        ));
        let mut wrong = bytes.clone();
        wrong[0] = 1;
        assert!(matches!(
            parse_stack_record(&wrong),
            Err(StackRecordError::Kind(1))
        ));
        let mut bad_status = bytes.clone();
        let at = std::mem::offset_of!(StackRecord, py_status);
        bad_status[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
        assert!(matches!(
            parse_stack_record(&bad_status),
            Err(StackRecordError::Status(99))
        ));
    }

    #[test]
    fn python_frames_decode_per_model_and_trampolines_are_patched() {
        let s = sample();
        let f = s.python_frames(false);
        assert_eq!(f.len(), 2, "the shim is not a frame");
        assert_eq!((f[0].code, f[0].instr, f[0].entry), (0x10, 0x5000, true));
        let mut no_shim = s.clone();
        no_shim.py[0].instr = 0x5000;
        assert!(
            no_shim.python_frames(false)[0].entry,
            "the shim marks the entry"
        );
        no_shim.py.remove(1);
        assert!(!no_shim.python_frames(false)[0].entry);
        let f = s.python_frames(true);
        assert_eq!(
            f[1].instr as i64, -1,
            "3.10's f_lasti of a frame not started"
        );
        assert!(f[1].entry);
        let patched = s.patched_stack();
        assert_eq!(&patched[8..16], &0xabcdefu64.to_le_bytes());
        assert_eq!(&patched[..8], &s.stack[..8]);
        // A slot past the window is ignored.
        let mut far = s.clone();
        far.rets[0].slot = 0x1010;
        assert_eq!(
            far.patched_stack(),
            far.stack,
            "8 bytes do not fit at 16..20"
        );
    }
}
