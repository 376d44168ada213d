//! Host stubs: the address a runtime's cudaLaunchKernel receives, when it is
//! a function in the application, is named by that function's ELF symbol
//! (the kernel's mangled name), from .dynsym or .symtab.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::host::discover::Mapping;

/// Function symbols of one ELF file, by virtual address.
struct SymbolTable {
    /// (address, size, name), sorted by address.
    funcs: Vec<(u64, u64, Arc<str>)>,
    /// (file offset, vaddr, filesz) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl SymbolTable {
    fn load(path: &std::path::Path) -> Option<Self> {
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut funcs: Vec<(u64, u64, Arc<str>)> = Vec::new();
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if sym.is_undefined() || sym.address() == 0 || sym.kind() != SymbolKind::Text {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() {
                continue;
            }
            funcs.push((
                sym.address(),
                sym.size(),
                Arc::from(name.split('@').next().unwrap_or(name)),
            ));
        }
        funcs.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(b.2.starts_with("_Z").cmp(&a.2.starts_with("_Z")))
        });
        funcs.dedup_by_key(|f| f.0);
        let segments = file
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                (size > 0).then_some((off, s.address(), size))
            })
            .collect();
        Some(Self { funcs, segments })
    }

    fn name_at(&self, file_offset: u64) -> Option<Arc<str>> {
        let vaddr = self
            .segments
            .iter()
            .find(|(off, _, size)| file_offset >= *off && file_offset < off + size)
            .map(|(off, va, _)| file_offset - off + va)?;
        let i = self.funcs.partition_point(|f| f.0 <= vaddr);
        let (addr, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        // The stub's own address, or inside it when the size is known.
        (vaddr == *addr || vaddr < addr + (*size).max(1)).then(|| name.clone())
    }
}

/// Names host stub addresses of traced processes.
#[derive(Default)]
pub(crate) struct StubSymbols {
    tables: HashMap<(u64, u64), Option<Arc<SymbolTable>>>,
    /// `/proc/PID/maps` as read at attach, for processes gone by the time
    /// their last events are read.
    maps: HashMap<u32, String>,
}

impl StubSymbols {
    /// Keeps a copy of `pid`'s mappings.
    pub(crate) fn remember(&mut self, pid: u32) {
        let via = crate::host::discover::reader_id(pid);
        if let Ok(m) = std::fs::read_to_string(format!("/proc/{via}/maps")) {
            self.maps.insert(pid, m);
        }
    }

    pub(crate) fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }

    /// The mangled symbol at `addr` in process `pid`, if a mapped ELF file has one there.
    pub(crate) fn name(&mut self, pid: u32, addr: u64) -> Option<Arc<str>> {
        // A zombie's maps read back empty (a leader thread that exited
        // while others go on: read through one of those).
        let via = crate::host::discover::reader_id(pid);
        let (maps, live) = match std::fs::read_to_string(format!("/proc/{via}/maps")) {
            Ok(m) if !m.is_empty() => (m, true),
            _ => (self.maps.get(&pid)?.clone(), false),
        };
        for m in Mapping::all(&maps) {
            let (start, end, off, path) = (m.start, m.end, m.offset, m.path);
            if addr < start || addr >= end || !path.starts_with('/') {
                continue;
            }
            let host = if live {
                PathBuf::from(format!("/proc/{via}/root{path}"))
            } else {
                PathBuf::from(path)
            };
            let meta = std::fs::metadata(&host).ok()?;
            let table = self
                .tables
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| SymbolTable::load(&host).map(Arc::new))
                .clone()?;
            return table.name_at(addr - start + off);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn gputrace_test_stub_symbol() -> u32 {
        std::hint::black_box(7)
    }

    #[test]
    fn names_a_function_of_this_test_binary() {
        let mut s = StubSymbols::default();
        let addr = gputrace_test_stub_symbol as *const () as u64;
        assert_eq!(
            s.name(std::process::id(), addr).as_deref(),
            Some("gputrace_test_stub_symbol")
        );
        assert_eq!(s.name(std::process::id(), 16), None);
    }
}
