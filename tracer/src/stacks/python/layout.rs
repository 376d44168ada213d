//! Where CPython keeps what a frame walker needs, per minor version, on
//! x86-64 (byte offsets). From 3.13 the interpreter publishes these itself
//! in `_PyRuntime.debug_offsets` (`_Py_DebugOffsets`, cookie `xdebugpy`);
//! before, they come from these tables, which were measured with
//! `offsetof` against each version's own headers (3.10.13, 3.11.7, 3.12.1,
//! 3.13.0; `tests/stacks/fixtures/cpython_offsets.c` re-measures them and a
//! test compares). Release builds only: a `--with-pydebug` or free-threaded
//! build has other layouts and is refused.

use crate::stacks::memory::Memory;

/// How a thread state leads to its innermost frame, and what a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameModel {
    /// 3.10: `tstate->frame` is a `PyFrameObject`; `f_lasti` (an `int`) is
    /// the index of the current instruction in code units.
    FrameObject,
    /// 3.11, 3.12: `tstate->cframe->current_frame` is a
    /// `_PyInterpreterFrame`; `prev_instr` points into `co_code_adaptive`.
    CFrame { current_frame: u32 },
    /// 3.13+: `tstate->current_frame`; `instr_ptr` points into
    /// `co_code_adaptive`.
    Direct,
}

/// Byte offsets of one CPython minor version (the same values the probe
/// will get in its per-process configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    pub runtime_interpreters_head: u32,
    pub interp_next: u32,
    pub interp_threads_head: u32,
    pub tstate_next: u32,
    /// `pthread_self()` of the thread: on x86-64 glibc and musl, the
    /// thread's `fs` base, which is how the probe finds its thread.
    pub tstate_thread_id: u32,
    /// `gettid()` as the process's PID namespace sees it (3.11+).
    pub tstate_native_thread_id: Option<u32>,
    /// `frame` (3.10), `cframe` (3.11, 3.12) or `current_frame` (3.13+).
    pub tstate_frame: u32,
    pub model: FrameModel,
    pub frame_previous: u32,
    pub frame_code: u32,
    /// `f_lasti` (3.10, an int), `prev_instr` (3.11, 3.12) or `instr_ptr`
    /// (3.13+) (pointers).
    pub frame_instr: u32,
    /// `owner` (3.11+): 3 (`FRAME_OWNED_BY_CSTACK`, 3.12+) marks the shim
    /// frame below the first frame of each C-level evaluation.
    pub frame_owner: Option<u32>,
    /// `is_entry` (3.11 only): the first frame of a C-level evaluation.
    pub frame_is_entry: Option<u32>,
    pub code_filename: u32,
    pub code_name: u32,
    /// `co_qualname` (3.11+).
    pub code_qualname: Option<u32>,
    pub code_firstlineno: u32,
    pub code_linetable: u32,
    /// Where the instructions start: `co_code_adaptive` inline (3.11+);
    /// for 3.10 the offset of the `co_code` bytes pointer (unused: its
    /// `f_lasti` is already an index).
    pub code_code: u32,
    pub object_type: u32,
    pub bytes_size: u32,
    pub bytes_data: u32,
    pub unicode_length: u32,
    pub unicode_state: u32,
    /// `sizeof(PyASCIIObject)`: where compact ASCII data starts.
    pub unicode_ascii_size: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact data starts,
    /// and where a non-compact string keeps its data pointer.
    pub unicode_compact_size: u32,
}

/// `FRAME_OWNED_BY_CSTACK` (3.12+).
pub const OWNED_BY_CSTACK: u8 = 3;

impl Layout {
    /// The table for a version, if we have one.
    pub fn for_version(major: u8, minor: u8) -> Option<Layout> {
        let base = Layout {
            major,
            minor,
            runtime_interpreters_head: 40,
            interp_next: 0,
            interp_threads_head: 16,
            tstate_next: 8,
            tstate_thread_id: 152,
            tstate_native_thread_id: Some(160),
            tstate_frame: 56,
            model: FrameModel::CFrame { current_frame: 8 },
            frame_previous: 48,
            frame_code: 32,
            frame_instr: 56,
            frame_owner: Some(69),
            frame_is_entry: Some(68),
            code_filename: 112,
            code_name: 120,
            code_qualname: Some(128),
            code_firstlineno: 72,
            code_linetable: 136,
            code_code: 184,
            object_type: 8,
            bytes_size: 16,
            bytes_data: 32,
            unicode_length: 16,
            unicode_state: 32,
            unicode_ascii_size: 48,
            unicode_compact_size: 72,
        };
        match (major, minor) {
            (3, 10) => Some(Layout {
                runtime_interpreters_head: 32,
                interp_threads_head: 8,
                tstate_thread_id: 176,
                tstate_native_thread_id: None,
                tstate_frame: 24,
                model: FrameModel::FrameObject,
                frame_previous: 24,
                frame_code: 32,
                frame_instr: 96,
                frame_owner: None,
                frame_is_entry: None,
                code_filename: 104,
                code_name: 112,
                code_qualname: None,
                code_firstlineno: 40,
                code_linetable: 120,
                code_code: 48,
                ..base
            }),
            (3, 11) => Some(base),
            (3, 12) => Some(Layout {
                interp_threads_head: 72,
                tstate_thread_id: 136,
                tstate_native_thread_id: Some(144),
                model: FrameModel::CFrame { current_frame: 0 },
                frame_previous: 8,
                frame_code: 0,
                frame_owner: Some(70),
                frame_is_entry: None,
                code_firstlineno: 68,
                code_code: 192,
                unicode_ascii_size: 40,
                unicode_compact_size: 56,
                ..base
            }),
            (3, 13) => Some(Layout {
                runtime_interpreters_head: 632,
                interp_next: 7264,
                interp_threads_head: 7344,
                tstate_thread_id: 152,
                tstate_native_thread_id: Some(160),
                tstate_frame: 72,
                model: FrameModel::Direct,
                frame_previous: 8,
                frame_code: 0,
                frame_owner: Some(70),
                frame_is_entry: None,
                code_firstlineno: 68,
                code_code: 200,
                unicode_ascii_size: 40,
                unicode_compact_size: 56,
                ..base
            }),
            _ => None,
        }
    }

    /// Reads `_Py_DebugOffsets` at the start of `_PyRuntime` (3.13+).
    /// `None` if the cookie is not there (before 3.13); an error if it is
    /// but describes a build we cannot walk.
    pub fn from_debug_offsets(mem: &dyn Memory, runtime: u64) -> Option<Result<Layout, String>> {
        let raw = mem.read_vec(runtime, DEBUG_OFFSETS_LEN * 8)?;
        if &raw[..8] != b"xdebugpy" {
            return None;
        }
        let field =
            |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let version = field(1);
        let (major, minor) = ((version >> 24) as u8, (version >> 16) as u8);
        if field(2) != 0 {
            return Some(Err(format!(
                "Python {major}.{minor} is a free-threaded build: its frames are not supported"
            )));
        }
        if (major, minor) != (3, 13) {
            // The debug-offsets struct itself changes between minor versions
            // (3.14 added fields in the middle): only the layout we know.
            return Some(Err(format!(
                "Python {major}.{minor}: the layout of its _Py_DebugOffsets is not known to this gputrace"
            )));
        }
        let n = |i: usize| -> Result<u32, String> {
            u32::try_from(field(i)).map_err(|_| format!("debug offset {i} out of range"))
        };
        let f = || -> Result<Layout, String> {
            let ascii_size = n(D_UNICODE_ASCII_SIZE)?;
            Ok(Layout {
                major,
                minor,
                runtime_interpreters_head: n(D_RUNTIME_INTERPRETERS_HEAD)?,
                interp_next: n(D_INTERP_NEXT)?,
                interp_threads_head: n(D_INTERP_THREADS_HEAD)?,
                tstate_next: n(D_TSTATE_NEXT)?,
                tstate_thread_id: n(D_TSTATE_THREAD_ID)?,
                tstate_native_thread_id: Some(n(D_TSTATE_NATIVE_THREAD_ID)?),
                tstate_frame: n(D_TSTATE_CURRENT_FRAME)?,
                model: FrameModel::Direct,
                frame_previous: n(D_FRAME_PREVIOUS)?,
                frame_code: n(D_FRAME_EXECUTABLE)?,
                frame_instr: n(D_FRAME_INSTR_PTR)?,
                frame_owner: Some(n(D_FRAME_OWNER)?),
                frame_is_entry: None,
                code_filename: n(D_CODE_FILENAME)?,
                code_name: n(D_CODE_NAME)?,
                code_qualname: Some(n(D_CODE_QUALNAME)?),
                code_firstlineno: n(D_CODE_FIRSTLINENO)?,
                code_linetable: n(D_CODE_LINETABLE)?,
                code_code: n(D_CODE_ADAPTIVE)?,
                object_type: n(D_OBJECT_TYPE)?,
                bytes_size: n(D_BYTES_SIZE)?,
                bytes_data: n(D_BYTES_SVAL)?,
                unicode_length: n(D_UNICODE_LENGTH)?,
                unicode_state: n(D_UNICODE_STATE)?,
                unicode_ascii_size: ascii_size,
                // PyCompactUnicodeObject adds utf8_length and utf8 to
                // PyASCIIObject (3.12+); not among the debug offsets.
                unicode_compact_size: ascii_size + 16,
            })
        };
        Some(f())
    }
}

// Indexes of the u64 fields of 3.13's `_Py_DebugOffsets` (Include/internal/
// pycore_runtime.h): cookie, version, free_threaded, then the sub-structs,
// each starting with its `size`.
const D_RUNTIME_INTERPRETERS_HEAD: usize = 5;
const D_INTERP_NEXT: usize = 8;
const D_INTERP_THREADS_HEAD: usize = 9;
const D_TSTATE_NEXT: usize = 21;
const D_TSTATE_CURRENT_FRAME: usize = 23;
const D_TSTATE_THREAD_ID: usize = 24;
const D_TSTATE_NATIVE_THREAD_ID: usize = 25;
const D_FRAME_PREVIOUS: usize = 29;
const D_FRAME_EXECUTABLE: usize = 30;
const D_FRAME_INSTR_PTR: usize = 31;
const D_FRAME_OWNER: usize = 33;
const D_CODE_FILENAME: usize = 35;
const D_CODE_NAME: usize = 36;
const D_CODE_QUALNAME: usize = 37;
const D_CODE_LINETABLE: usize = 38;
const D_CODE_FIRSTLINENO: usize = 39;
const D_CODE_ADAPTIVE: usize = 43;
const D_OBJECT_TYPE: usize = 45;
const D_BYTES_SIZE: usize = 65;
const D_BYTES_SVAL: usize = 66;
const D_UNICODE_STATE: usize = 68;
const D_UNICODE_LENGTH: usize = 69;
const D_UNICODE_ASCII_SIZE: usize = 70;
/// 3.13's struct is 73 u64s.
const DEBUG_OFFSETS_LEN: usize = 73;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::memory::Window;

    #[test]
    fn tables_exist_for_3_10_to_3_13_only() {
        for minor in 10..=13 {
            let l = Layout::for_version(3, minor).unwrap();
            assert_eq!((l.major, l.minor), (3, minor));
        }
        assert_eq!(Layout::for_version(3, 9), None);
        assert_eq!(Layout::for_version(3, 14), None);
        assert_eq!(Layout::for_version(2, 7), None);
    }

    /// A made-up `_Py_DebugOffsets` whose every field is its own index
    /// (plus 1000) parses field by field into the right places.
    #[test]
    fn debug_offsets_fields_land_in_place() {
        let mut raw = vec![0u8; DEBUG_OFFSETS_LEN * 8];
        raw[..8].copy_from_slice(b"xdebugpy");
        for i in 1..DEBUG_OFFSETS_LEN {
            raw[i * 8..i * 8 + 8].copy_from_slice(&(1000 + i as u64).to_le_bytes());
        }
        raw[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        raw[16..24].copy_from_slice(&0u64.to_le_bytes());
        let mem = Window {
            base: 0x5000,
            bytes: &raw,
        };
        let l = Layout::from_debug_offsets(&mem, 0x5000).unwrap().unwrap();
        assert_eq!((l.major, l.minor), (3, 13));
        assert_eq!(l.runtime_interpreters_head, 1005);
        assert_eq!(l.interp_threads_head, 1009);
        assert_eq!(l.tstate_frame, 1023);
        assert_eq!(l.tstate_native_thread_id, Some(1025));
        assert_eq!(l.frame_owner, Some(1033));
        assert_eq!(l.code_code, 1043);
        assert_eq!(l.unicode_ascii_size, 1070);
        assert_eq!(l.unicode_compact_size, 1086);

        raw[16..24].copy_from_slice(&1u64.to_le_bytes());
        let mem = Window {
            base: 0x5000,
            bytes: &raw,
        };
        assert!(
            Layout::from_debug_offsets(&mem, 0x5000).unwrap().is_err(),
            "free-threaded"
        );
        raw[..8].copy_from_slice(b"notdebug");
        let mem = Window {
            base: 0x5000,
            bytes: &raw,
        };
        assert!(Layout::from_debug_offsets(&mem, 0x5000).is_none());
    }
}
