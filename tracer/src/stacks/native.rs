//! Native unwinding without frame pointers: the registers at the probe and a
//! copied window of the user stack, unwound in userspace from each module's
//! `.eh_frame` / `.debug_frame` with framehop (what `perf --call-graph=dwarf`
//! does with libunwind/libdw), then symbolized from ELF symbols.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder};

use crate::host::discover::Mapping;
use crate::stacks::elf::ElfError;
use crate::stacks::elf::ElfFile;
use crate::stacks::elf::FileBytes;
use crate::stacks::memory::Memory;
use crate::stacks::memory::Window;
use crate::stacks::symbols::demangle;

/// Opened ELF files shared by every process: keyed by build id (the same
/// library in two containers is one entry) and by file identity (so a file
/// seen again is not reopened to learn its build id).
#[derive(Default)]
pub struct ElfCache {
    by_build_id: HashMap<Vec<u8>, Arc<ElfFile>>,
    by_file: HashMap<(u64, u64, i64, u64), Arc<ElfFile>>,
}

impl ElfCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The file at `path` (a path this process can open), from the cache
    /// when its identity or its build id was seen before.
    pub fn open(&mut self, path: &Path) -> Result<Arc<ElfFile>, ElfError> {
        let meta = std::fs::metadata(path).map_err(|source| ElfError::Read {
            path: path.to_owned(),
            source,
        })?;
        let key = (meta.dev(), meta.ino(), meta.mtime(), meta.size());
        if let Some(f) = self.by_file.get(&key) {
            return Ok(f.clone());
        }
        let file = Arc::new(ElfFile::open(path)?);
        let file = match file.build_id() {
            Some(id) => self.by_build_id.entry(id.to_vec()).or_insert(file).clone(),
            None => file,
        };
        self.by_file.insert(key, file.clone());
        Ok(file)
    }

    /// Distinct files held (for tests and reports).
    pub fn len(&self) -> usize {
        self.by_file.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_file.is_empty()
    }
}

/// A file mapped executable into a process.
#[derive(Clone, Debug)]
pub struct MappedModule {
    /// The path as `/proc/PID/maps` shows it (inside the process's root).
    pub path: String,
    /// The executable address range.
    pub start: u64,
    pub end: u64,
    /// Load bias: process address = SVMA + bias.
    pub bias: u64,
    pub elf: Arc<ElfFile>,
}

impl MappedModule {
    /// The file name, as frames show it (`libcuda.so.1`).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// Registers at the probe: what a uprobe's `pt_regs` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackEnd {
    /// The unwind information says this is the outermost frame.
    Complete,
    /// The next frame's return address lies beyond the copied window (or
    /// could not be read): the stack is cut there.
    Truncated(String),
    /// The frame limit was reached.
    Limit,
}

/// A symbolized native frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeFrame {
    /// The instruction pointer of the innermost frame, the return address of
    /// the others.
    pub address: u64,
    /// The module's file name, if the address is in a mapped file.
    pub module: Option<String>,
    /// Demangled function name, if a symbol holds the address.
    pub function: Option<String>,
    /// Offset of the address in the module's SVMAs (for `perf`-like
    /// `module+0x…` when there is no symbol).
    pub module_offset: u64,
}

impl std::fmt::Display for NativeFrame {
    /// `symbol (library)`, or `0xSVMA (library)` without a symbol, or the
    /// bare address outside every module (JIT code, say).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.function, &self.module) {
            (Some(func), Some(m)) => write!(f, "{func} ({m})"),
            (None, Some(m)) => write!(f, "0x{:x} ({m})", self.module_offset),
            (_, None) => write!(f, "0x{:x}", self.address),
        }
    }
}

/// One process's modules and the unwinder built over them.
pub struct ProcessUnwinder {
    modules: Vec<MappedModule>,
    unwinder: UnwinderX86_64<FileBytes>,
    cache: CacheX86_64,
    /// Files of the maps that could not be opened or parsed, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// The most frames one unwind returns.
pub const MAX_FRAMES: usize = 256;

impl ProcessUnwinder {
    /// Builds from a `/proc/PID/maps` text; files are opened under `root`
    /// (`/proc/PID/root` reaches a container's files).
    pub fn from_maps(maps: &str, root: &Path, cache: &mut ElfCache) -> Self {
        Self::from_maps_with(maps, &mut |m| {
            let host_path: PathBuf = root.join(m.path.trim_start_matches('/'));
            cache.open(&host_path)
        })
    }

    /// Builds from a maps text, each mapped file opened by `open`.
    pub fn from_maps_with(
        maps: &str,
        open: &mut dyn FnMut(&Mapping<'_>) -> Result<Arc<ElfFile>, ElfError>,
    ) -> Self {
        let mut modules: Vec<MappedModule> = Vec::new();
        let mut skipped = Vec::new();
        for m in Mapping::all(maps).filter(|m| m.perms.contains('x') && m.is_file()) {
            if let Some(existing) = modules.iter_mut().find(|x| x.path == m.path) {
                // A second executable mapping of one file: widen the range;
                // the bias is the same.
                existing.start = existing.start.min(m.start);
                existing.end = existing.end.max(m.end);
                continue;
            }
            let elf = match open(&m) {
                Ok(e) => e,
                Err(e) => {
                    skipped.push((m.path.to_string(), e.to_string()));
                    continue;
                }
            };
            let Some(svma) = elf.svma_of_offset(m.offset) else {
                skipped.push((
                    m.path.to_string(),
                    "no segment holds the mapped offset".into(),
                ));
                continue;
            };
            modules.push(MappedModule {
                path: m.path.to_string(),
                start: m.start,
                end: m.end,
                bias: m.start.wrapping_sub(svma),
                elf,
            });
        }
        let mut unwinder = UnwinderX86_64::new();
        for m in &modules {
            unwinder.add_module(Module::new(
                m.path.clone(),
                m.start..m.end,
                m.bias,
                m.elf.section_info(),
            ));
        }
        Self {
            modules,
            unwinder,
            cache: CacheX86_64::new(),
            skipped,
        }
    }

    /// Builds from the live process's maps.
    pub fn for_pid(pid: u32, cache: &mut ElfCache) -> std::io::Result<Self> {
        let via = crate::host::discover::reader_id(pid);
        let maps = std::fs::read_to_string(format!("/proc/{via}/maps"))?;
        Ok(Self::from_maps(
            &maps,
            Path::new(&format!("/proc/{via}/root")),
            cache,
        ))
    }

    pub fn modules(&self) -> &[MappedModule] {
        &self.modules
    }

    pub fn module_at(&self, addr: u64) -> Option<&MappedModule> {
        self.modules
            .iter()
            .find(|m| addr >= m.start && addr < m.end)
    }

    /// Unwinds from `regs` through the copied stack `stack` (which should
    /// start at or below `regs.sp`). Returns the frame addresses, innermost
    /// first, and how the unwind ended.
    pub fn unwind(&mut self, regs: Regs, stack: &Window<'_>) -> (Vec<FrameAddress>, StackEnd) {
        self.unwind_reading(regs, &mut |addr| stack.read_u64(addr))
    }

    /// [`unwind`](Self::unwind) with the stack read through `read` (which
    /// may record what the unwind depended on).
    pub fn unwind_reading(
        &mut self,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> (Vec<FrameAddress>, StackEnd) {
        let mut read_stack = |addr: u64| read(addr).ok_or(());
        let mut iter = self.unwinder.iter_frames(
            regs.ip,
            UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            &mut self.cache,
            &mut read_stack,
        );
        let mut frames = Vec::new();
        loop {
            if frames.len() == MAX_FRAMES {
                return (frames, StackEnd::Limit);
            }
            match iter.next() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => return (frames, StackEnd::Complete),
                Err(e) => return (frames, StackEnd::Truncated(e.to_string())),
            }
        }
    }

    /// The module, symbol and offset of one frame.
    pub fn symbolize(&self, frame: FrameAddress) -> NativeFrame {
        let address = frame.address();
        let lookup = frame.address_for_lookup();
        let Some(m) = self.module_at(lookup) else {
            return NativeFrame {
                address,
                module: None,
                function: None,
                module_offset: 0,
            };
        };
        let svma = lookup.wrapping_sub(m.bias);
        let function = m
            .elf
            .symbols()
            .lookup(svma)
            .map(|hit| demangle(m.elf.name_at(hit.name.0..hit.name.1)));
        NativeFrame {
            address,
            module: Some(m.name().to_string()),
            function,
            module_offset: address.wrapping_sub(m.bias),
        }
    }

    /// Unwinds and symbolizes.
    pub fn stack(&mut self, regs: Regs, stack: &Window<'_>) -> (Vec<NativeFrame>, StackEnd) {
        let (frames, end) = self.unwind(regs, stack);
        (frames.into_iter().map(|f| self.symbolize(f)).collect(), end)
    }
}
