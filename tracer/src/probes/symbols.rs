//! Finding the file offsets of the catalogue's symbols in a shared library.

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::catalogue::{catalogue, Api, Lib};

/// A symbol of the catalogue found in a library file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSymbol {
    pub api: &'static Api,
    /// Offset of the function's first instruction in the file (what uprobes take).
    pub file_offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF shared library we can read: {source}")]
    Parse { path: String, source: object::Error },
}

/// Reads the library's dynamic and static symbol tables and returns every
/// catalogue API of `lib` it defines, one per distinct address: where two
/// names share an address (NCCL's `pncclX` aliases, say) only the first
/// catalogue name is kept, so a call is never counted twice.
pub fn resolve_symbols(path: &Path, lib: Lib) -> Result<Vec<ResolvedSymbol>, SymbolError> {
    let display = path.display().to_string();
    let data = map_file(path).map_err(|source| SymbolError::Read {
        path: display.clone(),
        source,
    })?;
    let file = object::File::parse(&*data).map_err(|source| SymbolError::Parse {
        path: display.clone(),
        source,
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
        out.push(ResolvedSymbol { api, file_offset });
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
    let file = super::trust::open_regular(path, None)?;
    let meta = file.metadata()?;
    if meta.len() > MAX_LIBRARY_BYTES {
        return Err(std::io::Error::other(format!(
            "{} bytes: larger than any library gputrace reads",
            meta.len()
        )));
    }
    if super::trust::root_controlled(&meta) {
        // SAFETY: read-only mapping of a file only root can change; root
        // replaces libraries by rename, not by rewriting them in place.
        return Ok(FileData::Mapped(unsafe { memmap2::Mmap::map(&file)? }));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_LIBRARY_BYTES).read_to_end(&mut data)?;
    Ok(FileData::Read(data))
}
