//! Naming launches: every source of a kernel's name, best first.
//!
//! A libcuda build's layouts come from the disk cache at once, else from a
//! calibration run beside the tracing (`background`): until it ends they
//! are *pending*, and a launch is named from what the probes saw (name
//! lookups, runtime host stubs) or not at all. Only the start of a session
//! waits for the calibrations its first attach started, [`START_GRACE`] in
//! all at most ([`KernelNamer::end_grace`]), so that the first calls of a
//! well-behaved driver are named as before.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
use crate::names::background::Background;
use crate::names::background::FileId;
use crate::names::background::Job;
use crate::names::background::Request;
use crate::names::calibrate::Found;
use crate::names::calibrate::Helper;
use crate::names::calibrate::Layout;
use crate::names::demangle::demangle;
use crate::names::layouts::LayoutCache;
use crate::names::stubs::StubSymbols;

/// Untrusted libcuda files calibrated in the sandbox per run, at most: a
/// local user can make as many files as they like.
const MAX_SANDBOXED: usize = 8;
const TRUSTED_TIMEOUT: Duration = Duration::from_secs(60);
const SANDBOXED_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the start of a session waits, in all, for the calibrations its
/// first attach started.
pub(crate) const START_GRACE: Duration = Duration::from_secs(2);

/// Names cached per process from handles and from stubs, each; past it
/// the cache starts again (a name is read again when needed).
const MAX_CACHED_NAMES: usize = 1 << 16;

/// What calibration gave for one libcuda file: `None` while it runs.
pub(crate) type Calibration = Option<Result<Layout, String>>;

/// A libcuda file's calibration.
enum FileCalibration {
    Pending,
    Done(Result<Found, String>),
}

/// A calibration started, or its answer at once (from the cache, or a
/// refusal).
enum Started {
    Now(Result<Found, String>),
    Later,
}

#[derive(Default)]
struct ProcessNames {
    /// The libcuda file of this process, once looked for (`None`: none).
    file: Option<Option<FileId>>,
    /// handle → name read from the handle (None: unreadable, not retried).
    from_handles: HashMap<u64, Option<Arc<str>>>,
    /// stub → name.
    from_stubs: HashMap<u64, Option<Arc<str>>>,
}

pub(crate) struct KernelNamer {
    cache: LayoutCache,
    by_file: HashMap<FileId, FileCalibration>,
    procs: HashMap<u32, ProcessNames>,
    stubs: StubSymbols,
    enabled: bool,
    /// Sandboxed calibrations run so far.
    sandboxed: usize,
    background: Background<Found>,
    /// Until when calibrations are waited for (the start of a session).
    grace: Option<Instant>,
}

impl KernelNamer {
    /// `enabled`: whether libcuda builds are calibrated at all
    /// (`GPUTRACE_NO_CALIBRATION` turns it off, see `Config`). Calibrations
    /// started within [`START_GRACE`] from now are waited for, until
    /// [`Self::end_grace`].
    pub(crate) fn new(cache: LayoutCache, enabled: bool) -> Self {
        Self {
            cache,
            by_file: HashMap::default(),
            procs: HashMap::default(),
            stubs: StubSymbols::default(),
            enabled,
            sandboxed: 0,
            background: Background::new(crate::names::calibrate::run_helper),
            grace: Some(Instant::now() + START_GRACE),
        }
    }

    /// Whether libraries are calibrated at all (not with
    /// `GPUTRACE_NO_CALIBRATION`).
    pub(crate) fn calibrates(&self) -> bool {
        self.enabled
    }

    /// The session has started: from now on nothing waits for a calibration.
    pub(crate) fn end_grace(&mut self) {
        self.grace = None;
    }

    /// The names layout of a libcuda file: from memory, the disk cache, or
    /// a calibration started now (in the sandbox for a file
    /// `probes::trust` does not trust); `None` while that runs. Says once
    /// on stderr when it cannot be had.
    pub(crate) fn calibrate(&mut self, file: &LibraryFile) -> Calibration {
        self.calibrate_all(file).map(|r| r.map(|f| f.names))
    }

    /// Both layouts of a libcuda file, `None` while they are calibrated.
    fn calibrate_all(&mut self, file: &LibraryFile) -> Option<Result<Found, String>> {
        self.settle_answers();
        let id = (file.dev, file.inode);
        match self.by_file.get(&id) {
            Some(FileCalibration::Done(r)) => return Some(r.clone()),
            Some(FileCalibration::Pending) => return self.wait_grace(id),
            None => {}
        }
        match self.calibrate_uncached(id, file) {
            Started::Now(result) => {
                self.settle(id, file, result.clone());
                Some(result)
            }
            Started::Later => {
                self.by_file.insert(id, FileCalibration::Pending);
                self.wait_grace(id)
            }
        }
    }

    /// Within the start's grace: waits for `id`'s answer (and settles
    /// those that come meanwhile).
    fn wait_grace(&mut self, id: FileId) -> Option<Result<Found, String>> {
        while let Some(until) = self.grace.filter(|t| Instant::now() < *t) {
            if let Some(FileCalibration::Done(r)) = self.by_file.get(&id) {
                return Some(r.clone());
            }
            match self.background.wait(until) {
                Some(job) => self.settle_job(job),
                None => break,
            }
        }
        match self.by_file.get(&id) {
            Some(FileCalibration::Done(r)) => Some(r.clone()),
            _ => None,
        }
    }

    /// Takes in the calibrations that ended.
    pub(crate) fn settle_answers(&mut self) {
        for job in self.background.take() {
            self.settle_job(job);
        }
    }

    fn settle_job(&mut self, job: Job<Found>) {
        if let (Some(key), Ok(found)) = (job.key, &job.result) {
            // Only a trusted library's answer is cached.
            self.cache.insert_found(key, found);
        }
        self.settle(job.id, &job.file, job.result);
    }

    /// Records a file's answer; says once on stderr what it costs.
    fn settle(&mut self, id: FileId, file: &LibraryFile, result: Result<Found, String>) {
        if result.is_err() && file.open_checked().is_err() {
            // The file went with the process it was reached through: not
            // this file's fault, try again when it is seen next.
            self.by_file.remove(&id);
            return;
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
        self.by_file.insert(id, FileCalibration::Done(result));
    }

    fn calibrate_uncached(&mut self, id: FileId, file: &LibraryFile) -> Started {
        if !self.enabled {
            return Started::Now(Err("disabled by GPUTRACE_NO_CALIBRATION".into()));
        }
        let (lib, untrusted) = match trust::judge(file) {
            Trust::Trusted(f) => (f, None),
            Trust::Untrusted(why) => {
                let why = crate::text::printable(&why).into_owned();
                // Counted before the file is even hashed: a local user can
                // make as many files as they like, each as large as allowed.
                if self.sandboxed >= MAX_SANDBOXED {
                    return Started::Now(Err(format!(
                        "it is not trusted ({why}) and {MAX_SANDBOXED} untrusted libcuda files were calibrated already"
                    )));
                }
                self.sandboxed += 1;
                match file.open_checked() {
                    Ok(f) => (f, Some(why)),
                    Err(e) => return Started::Now(Err(e.to_string())),
                }
            }
        };
        // Identical bytes are the identical build: a trusted file's layout
        // serves its copies too.
        let key = match content_key(&lib) {
            Ok(k) => k,
            Err(e) => return Started::Now(Err(e.to_string())),
        };
        if let Some(found) = self.cache.get_found(&key) {
            return Started::Now(Ok(found));
        }
        let (how, timeout, key) = match untrusted {
            None => (Helper::Privileged, TRUSTED_TIMEOUT, Some(key)),
            Some(why) => {
                crate::say!(
                    "{} is not trusted ({why}): calibrating it in a sandbox (uid {}, no capabilities; its result is not cached)",
                    crate::text::printable_path(&file.found_at),
                    crate::host::sandbox::NOBODY
                );
                (Helper::Sandboxed, SANDBOXED_TIMEOUT, None)
            }
        };
        self.background.start(Request {
            id,
            file: file.clone(),
            lib,
            how,
            timeout,
            key,
        });
        Started::Later
    }

    /// Whether every libcuda seen so far has a layout (none pending).
    pub(crate) fn all_calibrated(&mut self) -> bool {
        self.settle_answers();
        self.by_file
            .values()
            .all(|c| matches!(c, FileCalibration::Done(Ok(_))))
    }

    /// Whether `pid`'s libcuda has a layout now (after starting its
    /// calibration if needed): not while it is calibrated.
    pub(crate) fn has_layout(&mut self, pid: u32) -> bool {
        self.found(pid).is_some()
    }

    /// Records which libcuda `pid` uses, and starts its calibration.
    pub(crate) fn bind(&mut self, pid: u32, file: &LibraryFile) {
        self.calibrate_all(file);
        self.procs.entry(pid).or_default().file = Some(Some((file.dev, file.inode)));
    }

    /// Keeps `pid`'s mappings, to name host stubs after it exits.
    pub(crate) fn remember_mappings(&mut self, pid: u32) {
        self.stubs.remember(pid);
    }

    /// `pid`'s libcuda file, found (and its calibration started) the first
    /// time (node mode binds nothing at attach).
    fn file_of(&mut self, pid: u32) -> Option<FileId> {
        if let Some(f) = self.procs.get(&pid).and_then(|p| p.file) {
            return f;
        }
        let file = discover::process_libraries(pid)
            .ok()
            .and_then(|files| files.into_iter().find(|f| f.lib == Lib::Cuda));
        let id = file.map(|f| {
            self.calibrate_all(&f);
            (f.dev, f.inode)
        });
        self.procs.entry(pid).or_default().file = Some(id);
        id
    }

    /// Both layouts of `pid`'s libcuda, once calibrated.
    fn found(&mut self, pid: u32) -> Option<&Found> {
        self.settle_answers();
        let id = self.file_of(pid)?;
        match self.by_file.get(&id)? {
            FileCalibration::Done(Ok(f)) => Some(f),
            _ => None,
        }
    }

    /// Whether `pid`'s libcuda is being calibrated now.
    pub(crate) fn pending(&mut self, pid: u32) -> bool {
        let Some(id) = self.file_of(pid) else {
            return false;
        };
        matches!(self.by_file.get(&id), Some(FileCalibration::Pending))
    }

    fn layout(&mut self, pid: u32) -> Option<Layout> {
        self.found(pid).map(|f| f.names.clone())
    }

    fn exec_layout(&mut self, pid: u32) -> Option<ExecLayout> {
        self.found(pid)?.exec.clone().ok()
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
        let layout = self.layout(pid);
        if layout.is_none() && self.pending(pid) {
            // Read once the layout is known (the handle is still there).
            return None;
        }
        let name = layout
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
