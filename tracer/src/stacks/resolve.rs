//! From the probe's [`RawStack`] to a [`CallStack`]: the native frames
//! unwound from the copied window and symbolized, the Python frames'
//! code objects resolved in the live process, both merged in call order and
//! interned.
//!
//! Everything costly is cached: ELF files per build id ([`ElfCache`]), each
//! process's module list and unwinder (framehop's rule cache included),
//! the text of each native frame address and of each Python (code object,
//! instruction), and stacks already seen ([`StackTable`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tracer_common::stack::{PyConfig, PyStatus};

use crate::model::stack::CallStack;
use crate::model::stack::GAP;
use crate::stacks::memory::Memory;
use crate::stacks::memory::ProcessMemory;
use crate::stacks::memory::Window;
use crate::stacks::merge::merge_by;
use crate::stacks::merge::EVAL_FUNCTION;
use crate::stacks::modules::ModuleSource;
use crate::stacks::native::ElfCache;
use crate::stacks::native::ProcessUnwinder;
use crate::stacks::native::StackEnd;
use crate::stacks::python::config::probe_can_walk;
use crate::stacks::python::config::probe_config;
use crate::stacks::python::FrameModel;
use crate::stacks::python::PythonProcess;
use crate::stacks::record::RawStack;
use crate::stacks::table::StackTable;

/// A module list is rebuilt (for libraries loaded since) at most this often.
const REBUILD_EVERY: Duration = Duration::from_millis(250);

/// Where the resolver hands the probe a Python process's configuration
/// (the eBPF map, or a test's record of it).
pub trait PyConfigs {
    fn insert(&mut self, pid: u32, config: &PyConfig);
    fn remove(&mut self, pid: u32);
}

/// Counts of what the stacks lost on the way (for the summary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StackCounts {
    /// Stacks resolved.
    pub stacks: u64,
    /// Native unwinds that stopped before the outermost frame (the window
    /// ended, or a frame without unwind information).
    pub native_cut_short: u64,
    /// Stacks of Python processes whose thread had no Python thread state.
    pub python_no_thread: u64,
    /// Python chains longer than the probe copies, or unreadable part way.
    pub python_cut_short: u64,
    /// Python frames whose code object could not be read.
    pub python_unresolved: u64,
}

enum PythonState {
    /// Not looked for yet.
    Unknown,
    /// Not a Python process (or one we cannot walk: the reason is kept).
    Absent(Option<String>),
    Present(Box<PythonProcess>),
}

/// The native part of a stack: symbolized frames, and whether the unwind
/// stopped short.
struct NativePart {
    /// Unique within its process.
    id: u64,
    frames: Vec<(Arc<str>, bool)>,
    cut_short: bool,
}

/// An unwind remembered: the stack words it read (address, value or
/// unreadable) and what it gave. Unwinding is a function of the registers
/// and of those words: a later stack with the same registers and the same
/// words there unwinds the same (a loop calling from one line, on one
/// thread, at one depth).
struct UnwindMemo {
    reads: Vec<(u64, Option<u64>)>,
    result: Arc<NativePart>,
}

/// Bounds of the per-process caches (cleared when full).
const MAX_MEMOS: usize = 16384;
const MEMOS_PER_KEY: usize = 8;
const MAX_CACHED_STACKS: usize = 65536;

/// Stacks by their native part and their raw Python frames.
type StackKey = (u64, bool, Vec<(u64, u64)>);

/// What is kept per traced process, from when it is first seen (or
/// watched) until it is forgotten: also after it has exited, so that the
/// stacks still in the ring buffer resolve.
struct ProcStacks {
    source: ModuleSource,
    unwinder: ProcessUnwinder,
    built: Instant,
    python: PythonState,
    mem: ProcessMemory,
    /// Native frame text and whether it is the evaluation function, by the
    /// address looked up (return address - 1, or the ip).
    native: FxHashMap<u64, (Arc<str>, bool)>,
    /// Python frame text by (code object, instruction).
    python_frames: FxHashMap<(u64, u64), Arc<str>>,
    /// Unwinds by registers (ip, sp, bp).
    memo: FxHashMap<(u64, u64, u64), Vec<UnwindMemo>>,
    memo_entries: usize,
    next_native_id: u64,
    /// Finished stacks.
    stacks: FxHashMap<StackKey, Arc<CallStack>>,
}

/// Turns stack records into interned stacks.
pub struct StackResolver {
    elf: ElfCache,
    procs: FxHashMap<u32, ProcStacks>,
    table: StackTable,
    counts: StackCounts,
    gap: Arc<str>,
}

impl Default for StackResolver {
    fn default() -> Self {
        Self::new()
    }
}

impl StackResolver {
    pub fn new() -> Self {
        Self {
            elf: ElfCache::new(),
            procs: FxHashMap::default(),
            table: StackTable::new(),
            counts: StackCounts::default(),
            gap: Arc::from(GAP),
        }
    }

    pub fn counts(&self) -> StackCounts {
        self.counts
    }

    /// Distinct stacks seen.
    pub fn distinct(&self) -> usize {
        self.table.len()
    }

    /// Looks for CPython in a process now (e.g. when it is first seen), so
    /// that its first stacks already have Python frames. `Err` carries why
    /// a Python process cannot be walked (an unsupported version).
    pub fn prepare(&mut self, pid: u32, configs: &mut dyn PyConfigs) -> Result<bool, String> {
        let Some(p) = process(&mut self.procs, &mut self.elf, pid) else {
            return Ok(false);
        };
        refresh(p, &mut self.elf);
        if matches!(p.python, PythonState::Unknown) {
            p.python = detect_python(&p.unwinder, &p.mem, pid, configs);
        }
        match &p.python {
            PythonState::Present(_) => Ok(true),
            PythonState::Absent(None) | PythonState::Unknown => Ok(false),
            PythonState::Absent(Some(why)) => Err(why.clone()),
        }
    }

    /// Watches `pid`'s mappings from now on ([`ModuleSource::watched`]):
    /// its stacks resolve after it is gone. For a command gputrace starts,
    /// before it is let go (`at_gate`: what it maps now is not its own).
    pub fn watch(&mut self, pid: u32, at_gate: bool) -> std::io::Result<()> {
        let watch = crate::host::mapwatch::MapWatch::open(pid, !at_gate)?;
        let source = ModuleSource::watched(pid, watch);
        let unwinder = source
            .unwinder(&mut self.elf)
            .expect("a watched process's modules are known");
        self.procs
            .insert(pid, ProcStacks::new(source, unwinder, pid));
        Ok(())
    }

    /// Whether `pid`'s mappings are recorded as it makes them (an exec
    /// starts that record again by itself).
    pub fn is_watched(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.source.is_watched())
    }

    /// A process not found to be Python (yet): looked for again at the
    /// next [`Self::prepare`], its modules kept (read again while it runs).
    pub fn look_again(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            if matches!(p.python, PythonState::Absent(None)) {
                p.python = PythonState::Unknown;
            }
            if !p.source.is_watched() {
                if let Some(u) = p.source.unwinder(&mut self.elf) {
                    p.set_unwinder(u);
                }
            }
        }
    }

    /// Forgets a process that has exited.
    pub fn forget(&mut self, pid: u32, configs: &mut dyn PyConfigs) {
        if let Some(p) = self.procs.remove(&pid) {
            if matches!(p.python, PythonState::Present(_)) {
                configs.remove(pid);
            }
        }
    }

    /// The stack of one record. `None` when the process is gone before its
    /// modules could be read.
    pub fn resolve(
        &mut self,
        raw: &RawStack<'_>,
        configs: &mut dyn PyConfigs,
    ) -> Option<Arc<CallStack>> {
        let p = process(&mut self.procs, &mut self.elf, raw.pid)?;
        refresh(p, &mut self.elf);
        if matches!(p.python, PythonState::Unknown) {
            p.python = detect_python(&p.unwinder, &p.mem, raw.pid, configs);
        }
        self.counts.stacks += 1;
        match raw.py_status {
            PyStatus::NoThreadState => self.counts.python_no_thread += 1,
            PyStatus::Truncated | PyStatus::ReadFailed => self.counts.python_cut_short += 1,
            _ => {}
        }
        let native = native_part(p, raw, &mut self.elf);
        if native.cut_short {
            self.counts.native_cut_short += 1;
        }
        let python_cut = matches!(raw.py_status, PyStatus::Truncated | PyStatus::ReadFailed);
        let py_key: Vec<(u64, u64)> = match p.python {
            PythonState::Present(_) => raw.py.iter().map(|f| (f.code, f.instr)).collect(),
            _ => Vec::new(),
        };
        let key = (native.id, python_cut, py_key);
        if let Some(s) = p.stacks.get(&key) {
            return Some(s.clone());
        }
        let python: Vec<((Arc<str>, bool), bool)> = match &mut p.python {
            PythonState::Present(py) if !raw.py.is_empty() => {
                let frame_object = py.layout.model == FrameModel::FrameObject;
                raw.python_frames(frame_object)
                    .into_iter()
                    .map(|f| {
                        let text = match p.python_frames.get(&(f.code, f.instr)) {
                            Some(t) => t.clone(),
                            None => match py.resolve(&p.mem, f) {
                                Some(r) => {
                                    let t: Arc<str> = Arc::from(r.to_string());
                                    p.python_frames.insert((f.code, f.instr), t.clone());
                                    t
                                }
                                None => {
                                    self.counts.python_unresolved += 1;
                                    Arc::from(format!("0x{:x} (python code object)", f.code))
                                }
                            },
                        };
                        ((text, false), f.entry)
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let mut frames = merge_by(
            native.frames.clone(),
            |(_, eval)| *eval,
            python,
            native.cut_short.then(|| (self.gap.clone(), false)),
        );
        if python_cut {
            frames.push((self.gap.clone(), false));
        }
        let stack = self
            .table
            .intern(frames.into_iter().map(|(t, _)| t).collect());
        if p.stacks.len() >= MAX_CACHED_STACKS {
            p.stacks.clear();
        }
        p.stacks.insert(key, stack.clone());
        Some(stack)
    }
}

/// The native frames of a record: from the memo when an earlier unwind
/// from the same registers read the same values, else unwound (and
/// symbolized through the per-address cache).
fn native_part(p: &mut ProcStacks, raw: &RawStack<'_>, elf: &mut ElfCache) -> Arc<NativePart> {
    let window_bytes = raw.patched_stack();
    let window = Window {
        base: raw.regs.sp,
        bytes: &window_bytes,
    };
    let key = (raw.regs.ip, raw.regs.sp, raw.regs.bp);
    if let Some(memos) = p.memo.get(&key) {
        if let Some(m) = memos
            .iter()
            .find(|m| m.reads.iter().all(|&(a, v)| window.read_u64(a) == v))
        {
            return m.result.clone();
        }
    }
    let mut reads: Vec<(u64, Option<u64>)> = Vec::new();
    let (mut addrs, mut end) = p.unwinder.unwind_reading(raw.regs, &mut |a| {
        let v = window.read_u64(a);
        reads.push((a, v));
        v
    });
    let unknown = |p: &ProcStacks, addrs: &[framehop::FrameAddress]| {
        addrs
            .iter()
            .any(|a| p.unwinder.module_at(a.address_for_lookup()).is_none())
    };
    // A library loaded after the module list was read (a watched process's
    // list is up to date already).
    if unknown(p, &addrs) && !p.source.is_watched() && p.built.elapsed() >= REBUILD_EVERY {
        if let Some(u) = p.source.unwinder(elf) {
            p.set_unwinder(u);
            reads.clear();
            (addrs, end) = p.unwinder.unwind_reading(raw.regs, &mut |a| {
                let v = window.read_u64(a);
                reads.push((a, v));
                v
            });
        }
        p.built = Instant::now();
    }
    let frames: Vec<(Arc<str>, bool)> = addrs
        .iter()
        .map(|a| {
            let unwinder = &p.unwinder;
            p.native
                .entry(a.address_for_lookup())
                .or_insert_with(|| {
                    let f = unwinder.symbolize(*a);
                    let eval = f.function.as_deref() == Some(EVAL_FUNCTION);
                    (Arc::from(f.to_string()), eval)
                })
                .clone()
        })
        .collect();
    p.next_native_id += 1;
    let result = Arc::new(NativePart {
        id: p.next_native_id,
        frames,
        cut_short: !matches!(end, StackEnd::Complete),
    });
    if p.memo_entries >= MAX_MEMOS {
        p.memo.clear();
        p.memo_entries = 0;
    }
    let memos = p.memo.entry(key).or_default();
    if memos.len() >= MEMOS_PER_KEY {
        memos.remove(0);
    } else {
        p.memo_entries += 1;
    }
    memos.push(UnwindMemo {
        reads,
        result: result.clone(),
    });
    result
}

impl ProcStacks {
    fn new(source: ModuleSource, unwinder: ProcessUnwinder, pid: u32) -> Self {
        Self {
            source,
            unwinder,
            built: Instant::now(),
            python: PythonState::Unknown,
            mem: ProcessMemory::new(pid),
            native: FxHashMap::default(),
            python_frames: FxHashMap::default(),
            memo: FxHashMap::default(),
            memo_entries: 0,
            next_native_id: 0,
            stacks: FxHashMap::default(),
        }
    }

    /// A new module list: what was worked out with the old one goes.
    fn set_unwinder(&mut self, u: ProcessUnwinder) {
        self.unwinder = u;
        self.built = Instant::now();
        self.native.clear();
        self.memo.clear();
        self.memo_entries = 0;
        self.stacks.clear();
    }
}

/// A watched process's new mappings, taken in.
fn refresh(p: &mut ProcStacks, elf: &mut ElfCache) {
    if p.source.refresh() {
        if let Some(u) = p.source.unwinder(elf) {
            p.set_unwinder(u);
        }
    }
}

/// The process's state, made (its module list read) on first use.
fn process<'a>(
    procs: &'a mut FxHashMap<u32, ProcStacks>,
    elf: &mut ElfCache,
    pid: u32,
) -> Option<&'a mut ProcStacks> {
    if let std::collections::hash_map::Entry::Vacant(e) = procs.entry(pid) {
        let source = ModuleSource::live(pid);
        let unwinder = source.unwinder(elf)?;
        e.insert(ProcStacks::new(source, unwinder, pid));
    }
    procs.get_mut(&pid)
}

/// Finds CPython in a process and hands the probe its configuration.
fn detect_python(
    unwinder: &ProcessUnwinder,
    mem: &ProcessMemory,
    pid: u32,
    configs: &mut dyn PyConfigs,
) -> PythonState {
    match PythonProcess::detect(unwinder.modules(), mem) {
        Ok(Some(py)) => {
            let config = probe_config(&py.layout, py.runtime);
            if !probe_can_walk(&config) {
                return PythonState::Absent(Some(format!(
                    "Python {}.{}: its frames are larger than the probe reads",
                    py.layout.major, py.layout.minor
                )));
            }
            configs.insert(pid, &config);
            PythonState::Present(Box::new(py))
        }
        Ok(None) => PythonState::Absent(None),
        Err(e) => PythonState::Absent(Some(e.to_string())),
    }
}
