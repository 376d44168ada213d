//! Call stacks (`--stacks`): the record the entry probe sends before the
//! call's own record, and the per-process configuration of the Python walk.
//!
//! A [`StackRecord`] is a fixed header followed by `py_count` Python frames
//! ([`PyRawFrame`], 16 bytes each) and then `stack_len` bytes of the user
//! stack copied from `sp` upwards; it is only as long as what was copied.
//! Userspace joins it to its call by `(tid, start_ns)`: the entry probe
//! stamps both records with the same time, and sends the stack first.

/// The most Python frames one record carries (innermost first, the shims
/// of 3.12+ included). The probe's walk is unrolled by the verifier: 128
/// frames took ~10 s to load on the CI machine, 64 about half.
pub const MAX_PY_FRAMES: usize = 64;
/// The most bytes of user stack one record carries.
pub const MAX_STACK_BYTES: usize = 64 << 10;
/// Default window of user stack copied per record.
pub const DEFAULT_STACK_BYTES: u32 = 16 << 10;
/// The most uretprobe return addresses one record carries (nested probed
/// calls of the thread, innermost first).
pub const MAX_RET_FIXUPS: usize = 8;

/// `py_status` of a [`StackRecord`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PyStatus {
    /// The process is not a Python process the tracer configured.
    NotPython = 0,
    /// The whole frame chain was copied.
    Complete = 1,
    /// The thread has no Python thread state (a thread Python never ran
    /// on: autograd's engine threads, NCCL's proxy threads).
    NoThreadState = 2,
    /// More than [`MAX_PY_FRAMES`] frames: the outermost ones are missing.
    Truncated = 3,
    /// A read of the interpreter's memory failed part way.
    ReadFailed = 4,
    /// The thread's `fs` base could not be read (no kernel offset).
    NoFsBase = 5,
}

impl PyStatus {
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::NotPython),
            1 => Some(Self::Complete),
            2 => Some(Self::NoThreadState),
            3 => Some(Self::Truncated),
            4 => Some(Self::ReadFailed),
            5 => Some(Self::NoFsBase),
            _ => None,
        }
    }
}

/// A return address a uretprobe replaced by its trampoline: the stack slot
/// and the original value (from the kernel's `return_instance`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetFixup {
    pub slot: u64,
    pub ret: u64,
}

/// The fixed head of a stack record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRecord {
    /// `EventKind::Stack` as u32.
    pub kind: u32,
    /// The API of the call (its catalogue index).
    pub api: u32,
    pub pid: u32,
    pub tid: u32,
    /// The call's `start_ns`: with `tid`, what joins the two records.
    pub start_ns: u64,
    /// Registers at the probe: `ip` is the probed function's entry, `sp`
    /// points at its return address.
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of stack that follow the Python frames.
    pub stack_len: u32,
    /// Python frames that follow the header.
    pub py_count: u32,
    /// [`PyStatus`] as u32.
    pub py_status: u32,
    /// Entries of `rets` in use.
    pub ret_count: u32,
    pub rets: [RetFixup; MAX_RET_FIXUPS],
}

impl StackRecord {
    pub const SIZE: usize = core::mem::size_of::<Self>();
    /// Header + the most frames + the largest window: the scratch value.
    pub const MAX_SIZE: usize = Self::SIZE + MAX_PY_FRAMES * PyRawFrame::SIZE + MAX_STACK_BYTES;
}

/// One Python frame as the probe copies it. A shim frame (3.12+: the one
/// below each C-level evaluation's first frame) has `code` 0: it marks the
/// frame before it as an entry frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyRawFrame {
    /// The code object's address.
    pub code: u64,
    /// The instruction, with bit 0 set when the frame is the first one its
    /// C-level evaluation ran (what merging with native frames needs).
    /// 3.11+: the instruction pointer (2-byte aligned, so bit 0 is free);
    /// 3.10: `f_lasti << 1` (an instruction index, possibly -1).
    pub instr: u64,
}

impl PyRawFrame {
    pub const SIZE: usize = core::mem::size_of::<Self>();
    pub const ENTRY_BIT: u64 = 1;
}

/// How the probe walks one CPython's frames.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PyModel {
    /// 3.10: `PyFrameObject`s; `f_lasti` an int.
    FrameObject = 10,
    /// 3.11, 3.12: `tstate->cframe->current_frame`.
    CFrame = 11,
    /// 3.13+: `tstate->current_frame`.
    Direct = 13,
}

/// An offset the layout does not have.
pub const NO_OFFSET: u32 = u32::MAX;

/// Per process (keyed by tgid in a map): where the interpreter is and the
/// byte offsets of what the walk reads. Filled by userspace from the
/// interpreter's `_Py_DebugOffsets` or its version's table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyConfig {
    /// Address of `_PyRuntime`.
    pub runtime: u64,
    /// [`PyModel`] as u32.
    pub model: u32,
    pub runtime_interpreters_head: u32,
    pub interp_next: u32,
    pub interp_threads_head: u32,
    pub tstate_next: u32,
    pub tstate_thread_id: u32,
    /// `frame` (3.10), `cframe` (3.11, 3.12), `current_frame` (3.13+).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame` (3.11, 3.12), else [`NO_OFFSET`].
    pub cframe_current_frame: u32,
    pub frame_previous: u32,
    pub frame_code: u32,
    pub frame_instr: u32,
    /// `owner` (3.11+) or [`NO_OFFSET`].
    pub frame_owner: u32,
    /// `is_entry` (3.11) or [`NO_OFFSET`].
    pub frame_is_entry: u32,
    /// Bytes of a frame read in one go: past the farthest field above, at
    /// most [`PY_FRAME_HEAD`].
    pub frame_head_len: u32,
}

impl PyConfig {
    pub const SIZE: usize = core::mem::size_of::<Self>();
}

/// `FRAME_OWNED_BY_CSTACK` (3.12+): the shim frame below a C-level
/// evaluation's first frame.
pub const PY_OWNED_BY_CSTACK: u8 = 3;

/// Bytes of a frame's head the probe reads in one go: every field it needs
/// lies within (3.10's `f_lasti` at 96 is the farthest).
pub const PY_FRAME_HEAD: usize = 104;

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain old data, `#[repr(C)]`, no padding bytes left implicit.
    unsafe impl aya::Pod for super::StackRecord {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PyConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PyRawFrame {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(
            StackRecord::SIZE,
            4 * 4 + 4 * 8 + 4 * 4 + MAX_RET_FIXUPS * 16
        );
        assert_eq!(PyConfig::SIZE, 8 + 14 * 4);
        assert_eq!(PyConfig::SIZE % 8, 0);
        assert_eq!(StackRecord::SIZE % 8, 0);
        for v in 0..6 {
            assert_eq!(PyStatus::from_u32(v).map(|s| s as u32), Some(v));
        }
        assert_eq!(PyStatus::from_u32(6), None);
    }
}
