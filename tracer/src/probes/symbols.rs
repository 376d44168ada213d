//! Finding the file offsets of the catalogue's symbols in a shared library.

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::catalogue::catalogue;
use crate::catalogue::Api;
use crate::catalogue::Lib;

/// A symbol of the catalogue found in a library file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSymbol {
    pub api: &'static Api,
    /// Offset of the function's first instruction in the file (what uprobes take).
    pub file_offset: u64,
    pub prologue: Prologue,
}

/// How the kernel gets past a uprobe's breakpoint: x86's uprobes emulate
/// some first instructions (a `push` of a register, the usual first
/// instruction of a function that saves registers) and copy the others
/// out of line and single-step them, a second trap: on the machines here a
/// hit costs about 1 µs on a `push` and 4–6 µs on a `sub` or `endbr64`
/// (`bench/uprobe-prologue`). `probes::hitcost` measures both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prologue {
    Emulated,
    #[default]
    Stepped,
}

impl Prologue {
    /// The class of a function that starts with `code`.
    pub fn of(code: &[u8]) -> Prologue {
        if !cfg!(target_arch = "x86_64") {
            return Prologue::Stepped;
        }
        match code {
            // push r64; push r8..r15
            [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => Prologue::Emulated,
            _ => Prologue::Stepped,
        }
    }
}

/// The prologue class of each API's function in the libraries probed (one
/// that is single-stepped in any of them counts as single-stepped).
#[derive(Debug, Default)]
pub struct Prologues(std::sync::RwLock<HashMap<u16, Prologue>>);

impl Prologues {
    pub fn record(&self, symbols: &[ResolvedSymbol]) {
        let mut m = self.0.write().unwrap_or_else(|e| e.into_inner());
        for s in symbols {
            let p = m.entry(s.api.id).or_insert(s.prologue);
            if s.prologue == Prologue::Stepped {
                *p = Prologue::Stepped;
            }
        }
    }

    /// The APIs resolved so far, each with its class, by API id.
    pub fn all(&self) -> Vec<(u16, Prologue)> {
        let m = self.0.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m.iter().map(|(&a, &p)| (a, p)).collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// Single-stepped where not known.
    pub fn of(&self, api: u16) -> Prologue {
        let m = self.0.read().unwrap_or_else(|e| e.into_inner());
        m.get(&api).copied().unwrap_or_default()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SymbolError {
    // `cause`, not `source`: a `source` field is also the error's source,
    // and `{e:#}` then printed the cause twice.
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("{path} is not an ELF shared library we can read: {cause}")]
    Parse { path: String, cause: object::Error },
}

/// Reads the library's dynamic and static symbol tables and returns every
/// catalogue API of `lib` it defines, one per distinct address: where two
/// names share an address (NCCL's `pncclX` aliases, say) only the first
/// catalogue name is kept, so a call is never counted twice.
pub(crate) fn resolve_symbols(path: &Path, lib: Lib) -> Result<Vec<ResolvedSymbol>, SymbolError> {
    let display = path.display().to_string();
    let data = map_file(path).map_err(|cause| SymbolError::Read {
        path: display.clone(),
        cause,
    })?;
    let file = object::File::parse(&*data).map_err(|cause| SymbolError::Parse {
        path: display.clone(),
        cause,
    })?;
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .filter_map(|s| {
            let (off, size) = s.file_range();
            (size > 0).then_some((s.address(), s.size().min(size), off))
        })
        .collect();
    let to_offset = |addr: u64| {
        segments
            .iter()
            .find(|(va, size, _)| addr >= *va && addr < va + size)
            .map(|(va, _, off)| addr - va + off)
    };

    // name → address, from .dynsym first, then .symtab (which may hold
    // versioned names like `cuInit@@libcuda.so.1`).
    let mut addrs: HashMap<&str, u64> = HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        if !matches!(sym.kind(), SymbolKind::Text | SymbolKind::Unknown) {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        addrs.entry(name).or_insert(sym.address());
    }

    let mut seen = HashMap::new();
    let mut out = Vec::new();
    for api in catalogue().iter().filter(|a| a.lib == lib) {
        let Some(&addr) = addrs.get(api.name) else {
            continue;
        };
        let Some(file_offset) = to_offset(addr) else {
            continue;
        };
        if seen.insert(file_offset, api.name).is_some() {
            continue;
        }
        let prologue = data
            .get(file_offset as usize..)
            .map_or(Prologue::Stepped, Prologue::of);
        out.push(ResolvedSymbol {
            api,
            file_offset,
            prologue,
        });
    }
    Ok(out)
}

/// A library's bytes: mapped when only root can change the file, else
/// read into memory, since a mapping of a file its owner truncates while it
/// is parsed kills the reader with SIGBUS.
enum FileData {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for FileData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileData::Mapped(m) => m,
            FileData::Read(v) => v,
        }
    }
}

/// Libraries larger than this are not read (libcuda is about 100 MB).
const MAX_LIBRARY_BYTES: u64 = 2 << 30;

fn map_file(path: &Path) -> std::io::Result<FileData> {
    use std::io::Read;
    let file = crate::host::fd::open_regular(path, None)?;
    let meta = file.metadata()?;
    if meta.len() > MAX_LIBRARY_BYTES {
        return Err(std::io::Error::other(format!(
            "{} bytes: larger than any library gputrace reads",
            meta.len()
        )));
    }
    if crate::host::trust::root_controlled(&meta) {
        // SAFETY: read-only mapping of a file only root can change; root
        // replaces libraries by rename, not by rewriting them in place.
        return Ok(FileData::Mapped(unsafe { memmap2::Mmap::map(&file)? }));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_LIBRARY_BYTES).read_to_end(&mut data)?;
    Ok(FileData::Read(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::api_by_name;

    #[test]
    fn a_push_first_is_emulated_anything_else_single_stepped() {
        assert_eq!(Prologue::of(&[0x55, 0x48, 0x89, 0xe5]), Prologue::Emulated); // push rbp
        assert_eq!(Prologue::of(&[0x41, 0x57]), Prologue::Emulated); // push r15
        assert_eq!(Prologue::of(&[0x53]), Prologue::Emulated); // push rbx
        assert_eq!(Prologue::of(&[0x48, 0x83, 0xec, 0x48]), Prologue::Stepped); // sub rsp
        assert_eq!(Prologue::of(&[0xf3, 0x0f, 0x1e, 0xfa]), Prologue::Stepped); // endbr64
        assert_eq!(Prologue::of(&[0x41, 0x89]), Prologue::Stepped); // mov r8d
        assert_eq!(Prologue::of(&[0x41]), Prologue::Stepped);
        assert_eq!(Prologue::of(&[]), Prologue::Stepped);
    }

    #[test]
    fn an_api_single_stepped_in_any_library_counts_as_single_stepped() {
        let api = api_by_name("cuLaunchKernel").unwrap();
        let sym = |prologue| ResolvedSymbol {
            api,
            file_offset: 0x1000,
            prologue,
        };
        let p = Prologues::default();
        assert_eq!(p.of(api.id), Prologue::Stepped);
        p.record(&[sym(Prologue::Emulated)]);
        assert_eq!(p.of(api.id), Prologue::Emulated);
        p.record(&[sym(Prologue::Stepped)]);
        p.record(&[sym(Prologue::Emulated)]);
        assert_eq!(p.of(api.id), Prologue::Stepped);
    }
}
