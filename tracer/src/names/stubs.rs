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
    fn parse(data: &[u8]) -> Option<Self> {
        let file = object::File::parse(data).ok()?;
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
        let live = std::fs::read_to_string(format!("/proc/{via}/maps"))
            .ok()
            .filter(|m| !m.is_empty());
        self.name_from(pid, via, live.as_deref(), addr)
    }

    /// Looks `addr` up in the live mappings `live` (files opened through
    /// `/proc/VIA/root`), then in those kept at attach (files opened by
    /// their path): a process that exits between its maps being read and
    /// its file being opened is named from what was kept.
    fn name_from(&mut self, pid: u32, via: u32, live: Option<&str>, addr: u64) -> Option<Arc<str>> {
        if let Some(maps) = live {
            if let Some(name) = self.lookup(maps, addr, Some(via)) {
                return Some(name);
            }
        }
        let kept = self.maps.get(&pid)?.clone();
        self.lookup(&kept, addr, None)
    }

    /// The symbol at `addr` in the file `maps` maps there, opened through
    /// `/proc/ROOT/root` when `root` is given.
    fn lookup(&mut self, maps: &str, addr: u64, root: Option<u32>) -> Option<Arc<str>> {
        let m = Mapping::all(maps)
            .find(|m| addr >= m.start && addr < m.end && m.path.starts_with('/'))?;
        let host = match root {
            Some(via) => PathBuf::from(format!("/proc/{via}/root{}", m.path)),
            None => PathBuf::from(m.path),
        };
        let meta = std::fs::metadata(&host).ok()?;
        let id = (meta.dev(), meta.ino());
        let table = match self.tables.get(&id) {
            Some(t) => t.clone()?,
            None => {
                // A file that cannot be read now (its process just went)
                // is tried again; one that is not ELF is remembered so.
                let data = std::fs::read(&host).ok()?;
                let t = SymbolTable::parse(&data).map(Arc::new);
                self.tables.insert(id, t.clone());
                t?
            }
        };
        table.name_at(addr - m.start + m.offset)
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

    #[test]
    fn a_file_gone_from_the_live_maps_is_named_from_the_maps_kept() {
        // The process exits between its maps being read and its file being
        // opened: the live lookup fails, the maps kept at attach name it.
        let pid = std::process::id();
        let mut s = StubSymbols::default();
        s.remember(pid);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let gone = maps.replace(exe.to_str().unwrap(), "/nonexistent/gputrace-test-exe");
        assert_ne!(gone, maps);
        let addr = gputrace_test_stub_symbol as *const () as u64;
        assert_eq!(
            s.name_from(pid, pid, Some(&gone), addr).as_deref(),
            Some("gputrace_test_stub_symbol")
        );
        // Nothing kept: nothing named, and nothing guessed.
        let mut bare = StubSymbols::default();
        assert_eq!(bare.name_from(pid, pid, Some(&gone), addr), None);
    }
}
