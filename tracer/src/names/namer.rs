//! Naming launches: every source of a kernel's name, best first.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::content_key;
use crate::catalogue::Lib;
use crate::graphs::layout::ExecLayout;
use crate::graphs::layout::ProcessMem;
use crate::graphs::layout::RawKernel;
use crate::host::discover;
use crate::host::discover::LibraryFile;
use crate::host::memory::plausible_name;
use crate::host::trust;
use crate::host::trust::Trust;
use crate::names::calibrate::run_helper;
use crate::names::calibrate::Found;
use crate::names::calibrate::Helper;
use crate::names::calibrate::Layout;
use crate::names::demangle::demangle;
use crate::names::layouts::LayoutCache;
use crate::names::stubs::StubSymbols;

/// Untrusted libcuda files calibrated in the sandbox per run, at most: each
/// may take the helper's whole timeout while the tracing loop waits, and a
/// local user can make as many files as they like.
const MAX_SANDBOXED: usize = 8;
const TRUSTED_TIMEOUT: Duration = Duration::from_secs(60);
const SANDBOXED_TIMEOUT: Duration = Duration::from_secs(20);

/// Names cached per process from handles and from stubs, each; past it
/// the cache starts again (a name is read again when needed).
const MAX_CACHED_NAMES: usize = 1 << 16;

/// What calibration gave for one libcuda file.
pub(crate) type Calibration = Result<Layout, String>;

#[derive(Default)]
struct ProcessNames {
    /// The layout of this process's libcuda, once known.
    layout: Option<Option<Layout>>,
    /// Where its executable graphs keep their kernel nodes, once known.
    exec_layout: Option<Option<ExecLayout>>,
    /// handle → name read from the handle (None: unreadable, not retried).
    from_handles: HashMap<u64, Option<Arc<str>>>,
    /// stub → name.
    from_stubs: HashMap<u64, Option<Arc<str>>>,
}

pub(crate) struct KernelNamer {
    cache: LayoutCache,
    by_file: HashMap<(u64, u64), Result<Found, String>>,
    procs: HashMap<u32, ProcessNames>,
    stubs: StubSymbols,
    enabled: bool,
    /// Sandboxed calibrations run so far.
    sandboxed: usize,
}

impl KernelNamer {
    /// `enabled`: whether libcuda builds are calibrated at all
    /// (`GPUTRACE_NO_CALIBRATION` turns it off, see `Config`).
    pub(crate) fn new(cache: LayoutCache, enabled: bool) -> Self {
        Self {
            cache,
            by_file: HashMap::default(),
            procs: HashMap::default(),
            stubs: StubSymbols::default(),
            enabled,
            sandboxed: 0,
        }
    }

    /// The layout for a libcuda file: from memory, the disk cache, or a
    /// calibration run now (in the sandbox for a file `probes::trust` does
    /// not trust). Says once on stderr when it cannot be had.
    pub(crate) fn calibrate(&mut self, file: &LibraryFile) -> Calibration {
        self.calibrate_all(file).map(|f| f.names)
    }

    /// Both layouts of a libcuda file. Says once on stderr when they cannot
    /// be had.
    fn calibrate_all(&mut self, file: &LibraryFile) -> Result<Found, String> {
        let id = (file.dev, file.inode);
        if let Some(c) = self.by_file.get(&id) {
            return c.clone();
        }
        let result = self.calibrate_uncached(file);
        if result.is_err() && file.open_checked().is_err() {
            // The file went with the process it was reached through: not
            // this file's fault, try again when it is seen next.
            return result;
        }
        match &result {
            Err(e) => crate::say!(
                "kernel names from handles are off for {}: {} (names still come from calls made while traced)",
                crate::text::printable_path(&file.found_at),
                crate::text::printable(e)
            ),
            Ok(Found { exec: Err(e), .. }) => crate::say!(
                "CUDA graphs built before gputrace attached will be opaque for {}: {} (graphs built while traced are followed from their calls)",
                crate::text::printable_path(&file.found_at),
                crate::text::printable(e)
            ),
            Ok(_) => {}
        }
        self.by_file.insert(id, result.clone());
        result
    }

    fn calibrate_uncached(&mut self, file: &LibraryFile) -> Result<Found, String> {
        if !self.enabled {
            return Err("disabled by GPUTRACE_NO_CALIBRATION".into());
        }
        let (lib, untrusted) = match trust::judge(file) {
            Trust::Trusted(f) => (f, None),
            Trust::Untrusted(why) => {
                let why = crate::text::printable(&why).into_owned();
                // Counted before the file is even hashed: a local user can
                // make as many files as they like, each as large as allowed.
                if self.sandboxed >= MAX_SANDBOXED {
                    return Err(format!(
                        "it is not trusted ({why}) and {MAX_SANDBOXED} untrusted libcuda files were calibrated already"
                    ));
                }
                self.sandboxed += 1;
                let f = file.open_checked().map_err(|e| e.to_string())?;
                (f, Some(why))
            }
        };
        // Identical bytes are the identical build: a trusted file's layout
        // serves its copies too.
        let key = content_key(&lib).map_err(|e| e.to_string())?;
        if let Some(found) = self.cache.get_found(&key) {
            return Ok(found);
        }
        match untrusted {
            None => {
                let found = run_helper(&lib, Helper::Privileged, TRUSTED_TIMEOUT)?;
                self.cache.insert_found(key, &found);
                Ok(found)
            }
            Some(why) => {
                crate::say!(
                    "{} is not trusted ({why}): calibrating it in a sandbox (uid {}, no capabilities; its result is not cached)",
                    crate::text::printable_path(&file.found_at),
                    crate::host::sandbox::NOBODY
                );
                run_helper(&lib, Helper::Sandboxed, SANDBOXED_TIMEOUT)
            }
        }
    }

    /// Whether every libcuda calibrated so far has a layout.
    pub(crate) fn all_calibrated(&self) -> bool {
        self.by_file.values().all(Result::is_ok)
    }

    /// Whether `pid`'s libcuda has a layout (after calibrating it if needed).
    pub(crate) fn has_layout(&mut self, pid: u32) -> bool {
        self.layout(pid).is_some()
    }

    /// Records which libcuda `pid` uses.
    pub(crate) fn bind(&mut self, pid: u32, file: &LibraryFile) {
        let found = self.calibrate_all(file).ok();
        let p = self.procs.entry(pid).or_default();
        p.exec_layout = Some(found.as_ref().and_then(|f| f.exec.clone().ok()));
        p.layout = Some(found.map(|f| f.names));
    }

    /// Keeps `pid`'s mappings, to name host stubs after it exits.
    pub(crate) fn remember_mappings(&mut self, pid: u32) {
        self.stubs.remember(pid);
    }

    fn layout(&mut self, pid: u32) -> Option<Layout> {
        if let Some(l) = self.procs.get(&pid).and_then(|p| p.layout.clone()) {
            return l;
        }
        // Not bound at attach (node mode): find its libcuda now.
        let file = discover::process_libraries(pid)
            .ok()?
            .into_iter()
            .find(|f| f.lib == Lib::Cuda);
        let found = file.and_then(|f| self.calibrate_all(&f).ok());
        let layout = found.as_ref().map(|f| f.names.clone());
        let p = self.procs.entry(pid).or_default();
        p.exec_layout = Some(found.and_then(|f| f.exec.ok()));
        p.layout = Some(layout.clone());
        layout
    }

    fn exec_layout(&mut self, pid: u32) -> Option<ExecLayout> {
        if self
            .procs
            .get(&pid)
            .and_then(|p| p.exec_layout.as_ref())
            .is_none()
        {
            self.layout(pid);
        }
        self.procs.get(&pid)?.exec_layout.clone()?
    }

    /// The kernel nodes of executable graph `exec` of `pid`, read from its
    /// memory with its libcuda's layout; `None` where that cannot be done.
    pub(crate) fn read_exec(&mut self, pid: u32, exec: u64) -> Option<Vec<RawKernel>> {
        self.exec_layout(pid)?.read(&ProcessMem(pid), exec)
    }

    /// The kernel name a CUfunction handle points to in `pid`.
    pub(crate) fn name_of_handle(&mut self, pid: u32, handle: u64) -> Option<Arc<str>> {
        if handle == 0 {
            return None;
        }
        if let Some(n) = self
            .procs
            .get(&pid)
            .and_then(|p| p.from_handles.get(&handle))
        {
            return n.clone();
        }
        let name = self
            .layout(pid)
            .and_then(|l| l.read(pid, handle))
            .filter(|n| plausible_name(n))
            .map(|n| demangle(&String::from_utf8_lossy(&n)));
        let cache = &mut self.procs.entry(pid).or_default().from_handles;
        if cache.len() >= MAX_CACHED_NAMES {
            cache.clear();
        }
        cache.insert(handle, name.clone());
        name
    }

    /// The kernel name of a runtime host stub in `pid`.
    pub(crate) fn name_of_stub(&mut self, pid: u32, stub: u64) -> Option<Arc<str>> {
        if stub == 0 {
            return None;
        }
        if let Some(n) = self.procs.get(&pid).and_then(|p| p.from_stubs.get(&stub)) {
            return n.clone();
        }
        let name = self
            .stubs
            .name(pid, stub)
            .filter(|n| n.starts_with("_Z"))
            .map(|n| demangle(&crate::text::printable(&n)));
        let cache = &mut self.procs.entry(pid).or_default().from_stubs;
        if cache.len() >= MAX_CACHED_NAMES {
            cache.clear();
        }
        cache.insert(stub, name.clone());
        name
    }

    /// A module or library was unloaded: handles may be reused.
    pub(crate) fn forget_handles(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.from_handles.clear();
        }
    }

    /// Processes names are cached for.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }

    pub(crate) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.stubs.forget(pid);
    }
}
