//! CPython frames (3.10 to 3.13) read from outside the process.
//!
//! Two halves, split where the probe will split them:
//! - the walk ([`PythonProcess::threads`], [`PythonProcess::walk`]): from
//!   `_PyRuntime` to a thread's state to its chain of frames, keeping per
//!   frame only the code object's address and the instruction: what the
//!   eBPF program will copy, with the same offsets ([`Layout`]);
//! - the resolution ([`PythonProcess::resolve`]): code object to qualified
//!   name, file and line, cached per code object, done in userspace.

pub(crate) mod config;
pub(crate) mod layout;
pub mod linetable;

use std::collections::HashMap;

pub use layout::{FrameModel, Layout, OWNED_BY_CSTACK};

use crate::stacks::memory::Memory;
use crate::stacks::native::MappedModule;

/// The most frames one walk follows (the probe's bound will be lower).
pub const MAX_FRAMES: usize = 512;
/// Bounds on the thread list walk (a loop in a corrupted list must end).
const MAX_THREADS: usize = 4096;
const MAX_INTERPRETERS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("Python {0}.{1} is not supported (3.10 to 3.13 are)")]
    Unsupported(u8, u8),
    #[error("{0}")]
    Layout(String),
    #[error("cannot tell which Python version {0} is")]
    UnknownVersion(String),
}

/// One thread's state, as the thread list shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadState {
    pub address: u64,
    /// `pthread_self()`: the thread's `fs` base on x86-64.
    pub thread_id: u64,
    /// The thread's id in the process's PID namespace (3.11+).
    pub native_thread_id: Option<u64>,
}

/// One frame as the probe records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// The code object.
    pub code: u64,
    /// 3.10: `f_lasti` (an instruction index); 3.11+: the instruction
    /// pointer (`prev_instr` / `instr_ptr`).
    pub instr: u64,
    /// This is the first frame its C-level evaluation loop ran (the frames
    /// after it belong to an outer `_PyEval_EvalFrameDefault` on the native
    /// stack): what merging with native frames needs.
    pub entry: bool,
}

/// A resolved Python frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrame {
    /// `co_qualname` (3.11+), `co_name` before.
    pub function: String,
    pub file: String,
    /// `None` when the line table gives the instruction no line.
    pub line: Option<i32>,
}

impl std::fmt::Display for PyFrame {
    /// `function (path:line)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{} ({}:{l})", self.function, self.file),
            None => write!(f, "{} ({})", self.function, self.file),
        }
    }
}

/// What we keep of a code object.
#[derive(Clone, Debug)]
struct CodeInfo {
    function: String,
    file: String,
    firstlineno: i32,
    linetable: Vec<u8>,
}

/// A CPython process: where its runtime is and how its structures lie.
#[derive(Debug)]
pub struct PythonProcess {
    pub layout: Layout,
    /// Address of `_PyRuntime`.
    pub runtime: u64,
    /// Address of `PyCode_Type`, to tell code objects from anything else.
    pub code_type: Option<u64>,
    /// The file defining `_PyRuntime` (the executable or libpython).
    pub module: String,
    /// Whether the layout came from the interpreter's `_Py_DebugOffsets`.
    pub from_debug_offsets: bool,
    codes: HashMap<u64, Option<CodeInfo>>,
}

impl PythonProcess {
    /// Finds CPython among a process's modules: the file defining
    /// `_PyRuntime` (libpython, or an executable that links it
    /// statically). `Ok(None)` when there is none (not a Python process).
    pub fn detect(modules: &[MappedModule], mem: &dyn Memory) -> Result<Option<Self>, PythonError> {
        for m in modules {
            let Some(svma) = m.elf.symbol_address("_PyRuntime") else {
                continue;
            };
            let runtime = svma.wrapping_add(m.bias);
            let code_type = m
                .elf
                .symbol_address("PyCode_Type")
                .map(|a| a.wrapping_add(m.bias));
            let (layout, from_debug_offsets) = match Layout::from_debug_offsets(mem, runtime) {
                Some(Ok(l)) => (l, true),
                Some(Err(e)) => return Err(PythonError::Layout(e)),
                None => {
                    let (major, minor) = version_of(m)?;
                    let l = Layout::for_version(major, minor)
                        .ok_or(PythonError::Unsupported(major, minor))?;
                    (l, false)
                }
            };
            return Ok(Some(Self {
                layout,
                runtime,
                code_type,
                module: m.path.clone(),
                from_debug_offsets,
                codes: HashMap::new(),
            }));
        }
        Ok(None)
    }

    /// Every thread state of every interpreter.
    pub fn threads(&self, mem: &dyn Memory) -> Vec<ThreadState> {
        let l = &self.layout;
        let mut out = Vec::new();
        let mut interp = mem
            .read_u64(self.runtime + u64::from(l.runtime_interpreters_head))
            .unwrap_or(0);
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 {
                break;
            }
            let mut t = mem
                .read_u64(interp + u64::from(l.interp_threads_head))
                .unwrap_or(0);
            while t != 0 && out.len() < MAX_THREADS {
                let Some(thread_id) = mem.read_u64(t + u64::from(l.tstate_thread_id)) else {
                    break;
                };
                out.push(ThreadState {
                    address: t,
                    thread_id,
                    native_thread_id: l
                        .tstate_native_thread_id
                        .and_then(|o| mem.read_u64(t + u64::from(o))),
                });
                t = mem.read_u64(t + u64::from(l.tstate_next)).unwrap_or(0);
            }
            interp = mem.read_u64(interp + u64::from(l.interp_next)).unwrap_or(0);
        }
        out
    }

    /// The thread state of the thread whose `fs` base is `fsbase` (what the
    /// probe will match: it works across PID namespaces).
    pub fn thread_by_fsbase(&self, mem: &dyn Memory, fsbase: u64) -> Option<ThreadState> {
        self.threads(mem)
            .into_iter()
            .find(|t| t.thread_id == fsbase)
    }

    /// The thread's frames, innermost first, as the probe will record them.
    pub fn walk(&self, mem: &dyn Memory, tstate: u64) -> Vec<RawFrame> {
        let l = &self.layout;
        let head = mem
            .read_u64(tstate + u64::from(l.tstate_frame))
            .unwrap_or(0);
        let mut frame = match l.model {
            FrameModel::CFrame { current_frame } if head != 0 => {
                mem.read_u64(head + u64::from(current_frame)).unwrap_or(0)
            }
            _ => head,
        };
        let mut out: Vec<RawFrame> = Vec::new();
        while frame != 0 && out.len() < MAX_FRAMES {
            let Some(code) = mem.read_u64(frame + u64::from(l.frame_code)) else {
                break;
            };
            let owner = l
                .frame_owner
                .and_then(|o| mem.read_u8(frame + u64::from(o)));
            if owner == Some(OWNED_BY_CSTACK) {
                // The shim below a C-level evaluation's first frame.
                if let Some(last) = out.last_mut() {
                    last.entry = true;
                }
            } else {
                let (instr, entry) = match l.model {
                    FrameModel::FrameObject => (
                        mem.read_i32(frame + u64::from(l.frame_instr)).unwrap_or(-1) as i64 as u64,
                        true,
                    ),
                    _ => (
                        mem.read_u64(frame + u64::from(l.frame_instr)).unwrap_or(0),
                        l.frame_is_entry
                            .and_then(|o| mem.read_u8(frame + u64::from(o)))
                            .is_some_and(|b| b != 0),
                    ),
                };
                out.push(RawFrame { code, instr, entry });
            }
            frame = mem
                .read_u64(frame + u64::from(l.frame_previous))
                .unwrap_or(0);
        }
        out
    }

    /// Function, file and line of a recorded frame; the code object is read
    /// once and cached (the line is computed per call from its table).
    pub fn resolve(&mut self, mem: &dyn Memory, raw: RawFrame) -> Option<PyFrame> {
        if !self.codes.contains_key(&raw.code) {
            let info = self.read_code(mem, raw.code);
            self.codes.insert(raw.code, info);
        }
        let info = self.codes.get(&raw.code)?.as_ref()?;
        let l = &self.layout;
        let addrq: i64 = match l.model {
            FrameModel::FrameObject => (raw.instr as i64).saturating_mul(2),
            _ => {
                let start = raw.code + u64::from(l.code_code);
                raw.instr.wrapping_sub(start) as i64
            }
        };
        Some(PyFrame {
            function: info.function.clone(),
            file: info.file.clone(),
            line: linetable::addr2line(l.minor, &info.linetable, info.firstlineno, addrq),
        })
    }

    /// Code objects read so far (for reports and tests).
    pub fn cached_codes(&self) -> usize {
        self.codes.len()
    }

    fn read_code(&self, mem: &dyn Memory, code: u64) -> Option<CodeInfo> {
        let l = &self.layout;
        if let Some(ty) = self.code_type {
            if mem.read_u64(code + u64::from(l.object_type))? != ty {
                return None;
            }
        }
        let ptr = |off: u32| mem.read_u64(code + u64::from(off));
        let name_obj = match l.code_qualname {
            Some(q) => ptr(q)?,
            None => ptr(l.code_name)?,
        };
        let table_obj = ptr(l.code_linetable)?;
        let table_len = mem.read_u64(table_obj + u64::from(l.bytes_size))?;
        if table_len > 1 << 24 {
            return None;
        }
        Some(CodeInfo {
            function: read_str(l, mem, name_obj)?,
            file: read_str(l, mem, ptr(l.code_filename)?)?,
            firstlineno: mem.read_i32(code + u64::from(l.code_firstlineno))?,
            linetable: mem.read_vec(table_obj + u64::from(l.bytes_data), table_len as usize)?,
        })
    }
}

/// A `str` object's text (compact ASCII, compact UCS1/2/4, or a legacy
/// string with its data elsewhere); at most 4096 characters.
pub fn read_str(l: &Layout, mem: &dyn Memory, obj: u64) -> Option<String> {
    let state = mem.read_u32(obj + u64::from(l.unicode_state))?;
    let len = mem.read_u64(obj + u64::from(l.unicode_length))?.min(4096) as usize;
    // Bit fields of `state`: interned:2, kind:3, compact:1, ascii:1 (the
    // same bits from 3.10 to 3.13).
    let kind = ((state >> 2) & 7) as usize;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let data = match (compact, ascii) {
        (true, true) => obj + u64::from(l.unicode_ascii_size),
        (true, false) => obj + u64::from(l.unicode_compact_size),
        (false, _) => mem.read_u64(obj + u64::from(l.unicode_compact_size))?,
    };
    let raw = mem.read_vec(data, len * kind)?;
    Some(match kind {
        1 => raw.iter().map(|&b| char::from(b)).collect(),
        2 => char::decode_utf16(
            raw.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        _ => raw
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
    })
}

/// The version of the CPython in `m`: `Py_Version` (3.11+) from the file's
/// data, or the file name (`libpython3.10.so.1.0`, `python3.10`).
fn version_of(m: &MappedModule) -> Result<(u8, u8), PythonError> {
    if let Some(bytes) = m
        .elf
        .symbol_address("Py_Version")
        .and_then(|a| m.elf.read_svma(a, 4))
    {
        let v = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
        return Ok(((v >> 24) as u8, (v >> 16) as u8));
    }
    let name = m.name();
    let rest = name
        .strip_prefix("libpython")
        .or_else(|| name.strip_prefix("python"))
        .ok_or_else(|| PythonError::UnknownVersion(m.path.clone()))?;
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = digits.split('.');
    match (
        parts.next().and_then(|p| p.parse().ok()),
        parts.next().and_then(|p| p.parse().ok()),
    ) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(PythonError::UnknownVersion(m.path.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::memory::Window;

    /// Builds a string object of `layout` at `base` in a byte buffer.
    fn string_object(l: &Layout, s: &str, kind: u32, ascii: bool) -> Vec<u8> {
        let chars: Vec<u32> = s.chars().map(|c| c as u32).collect();
        let header = if ascii {
            l.unicode_ascii_size
        } else {
            l.unicode_compact_size
        } as usize;
        let mut b = vec![0u8; header];
        b[l.unicode_length as usize..][..8].copy_from_slice(&(chars.len() as u64).to_le_bytes());
        let state = (kind << 2) | (1 << 5) | (u32::from(ascii) << 6);
        b[l.unicode_state as usize..][..4].copy_from_slice(&state.to_le_bytes());
        for c in chars {
            match kind {
                1 => b.push(c as u8),
                2 => b.extend_from_slice(&(c as u16).to_le_bytes()),
                _ => b.extend_from_slice(&c.to_le_bytes()),
            }
        }
        b
    }

    #[test]
    fn strings_of_every_kind() {
        for minor in [10, 12] {
            let l = Layout::for_version(3, minor).unwrap();
            for (s, kind, ascii) in [
                ("train_step", 1, true),
                ("café", 1, false),
                ("函数", 2, false),
                ("𠀀x", 4, false),
            ] {
                let bytes = string_object(&l, s, kind, ascii);
                let mem = Window {
                    base: 0x1000,
                    bytes: &bytes,
                };
                assert_eq!(
                    read_str(&l, &mem, 0x1000).as_deref(),
                    Some(s),
                    "3.{minor} {s}"
                );
            }
        }
    }
}
