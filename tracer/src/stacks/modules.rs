//! Where a traced process's modules (its executable file mappings) come
//! from, and how their files are opened, so that its stacks resolve after
//! it is gone: its `/proc/PID/maps` while it runs, or, for the processes
//! gputrace watches from the start ([`MapWatch`]: a command it starts, a
//! process given by PID), every mapping the kernel recorded as it was
//! made. Files are opened through `/proc/PID/map_files` (the very file,
//! also in a container), else `/proc/PID/root`, else, once the process is
//! gone and its root was ours, at the path it mapped, when the inode there
//! is still the one it mapped. The files opened are kept (`ElfCache`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use crate::host::discover::Mapping;
use crate::host::mapwatch::MapWatch;
use crate::stacks::elf::ElfError;
use crate::stacks::elf::ElfFile;
use crate::stacks::native::ElfCache;
use crate::stacks::native::ProcessUnwinder;

/// One process's modules: where they are read from.
pub struct ModuleSource {
    pid: u32,
    watch: Option<MapWatch>,
    /// The process's root directory is ours: a path it mapped names the
    /// same file here.
    same_root: bool,
}

/// Whether `pid` sees the filesystem from our root.
fn same_root(pid: u32) -> bool {
    let id = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let ours = id("/");
    ours.is_some() && id(&format!("/proc/{pid}/root")) == ours
}

impl ModuleSource {
    /// Reads `pid`'s modules from its maps (while it runs).
    pub fn live(pid: u32) -> Self {
        Self {
            pid,
            watch: None,
            same_root: same_root(pid),
        }
    }

    /// Reads `pid`'s modules from what the kernel records of its mappings.
    pub fn watched(pid: u32, watch: MapWatch) -> Self {
        Self {
            pid,
            watch: Some(watch),
            same_root: same_root(pid),
        }
    }

    pub fn is_watched(&self) -> bool {
        self.watch.is_some()
    }

    /// Takes in the mappings recorded since; true when they changed.
    pub fn refresh(&mut self) -> bool {
        self.watch.as_mut().is_some_and(MapWatch::refresh)
    }

    /// The modules as known now; `None` for a process not watched whose
    /// maps cannot be read (it is gone).
    pub fn unwinder(&self, elf: &mut ElfCache) -> Option<ProcessUnwinder> {
        let maps = match &self.watch {
            Some(w) => w.maps_text(),
            None => std::fs::read_to_string(format!("/proc/{}/maps", self.pid)).ok()?,
        };
        Some(ProcessUnwinder::from_maps_with(&maps, &mut |m| {
            open_module(self.pid, self.same_root, m, elf)
        }))
    }
}

/// The file of mapping `m` of `pid`.
fn open_module(
    pid: u32,
    same_root: bool,
    m: &Mapping<'_>,
    elf: &mut ElfCache,
) -> Result<Arc<ElfFile>, ElfError> {
    let exact = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    if let Ok(f) = elf.open(Path::new(&exact)) {
        return Ok(f);
    }
    let rooted = Path::new(&format!("/proc/{pid}/root")).join(m.path.trim_start_matches('/'));
    let err = match elf.open(&rooted) {
        Ok(f) => return Ok(f),
        Err(e) => e,
    };
    let here = Path::new(m.path);
    let same_file = std::fs::metadata(here).is_ok_and(|meta| m.inode == meta.ino().to_string());
    if same_root && same_file {
        return elf.open(here);
    }
    Err(err)
}
