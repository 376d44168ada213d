//! The offsets of each libcublasLt file the traced processes map: found
//! by a calibration run beside the tracing (`names::background`), once per
//! file and session, pending until it ends. Only the start of a session
//! waits for those its first attach started (the namer's grace), so that
//! a process's first matmuls have their shapes too.

use rustc_hash::FxHashMap as HashMap;
use std::time::{Duration, Instant};

use crate::catalogue::Lib;
use crate::host::discover;
use crate::host::discover::LibraryFile;
use crate::host::trust;
use crate::host::trust::Trust;
use crate::lt::calibrate::run_helper;
use crate::lt::LtOffsets;
use crate::names::background::{Background, FileId, Job, Request};
use crate::names::calibrate::Helper;

/// Untrusted libcublasLt files calibrated in the sandbox per session, at
/// most (a local user can make as many files as they like).
const MAX_SANDBOXED: usize = 8;
/// Loading libcublasLt takes about a second (it is half a gigabyte).
const TRUSTED_TIMEOUT: Duration = Duration::from_secs(60);
const SANDBOXED_TIMEOUT: Duration = Duration::from_secs(20);
/// libcublasLt files calibrated per session, at most (a local user can
/// make as many copies as they like; past it a file's matmuls of unknown
/// descriptors have no shape).
const MAX_FILES: usize = 256;
/// Processes whose libcublasLt is remembered, at most (kept past their
/// exit; past the bound the map starts again and is looked up anew).
const MAX_PROCESSES: usize = 1 << 16;

/// The libcublasLt `pid` maps (`Err`: its mappings could not be read).
fn lookup(pid: u32) -> std::io::Result<Option<LibraryFile>> {
    Ok(discover::process_libraries(pid)?
        .into_iter()
        .find(|f| f.lib == Lib::CublasLt))
}

enum State {
    Pending,
    Done(Result<LtOffsets, String>),
}

pub(crate) struct LtFiles {
    by_file: HashMap<FileId, State>,
    /// Each process's libcublasLt, once looked for (`None`: none).
    procs: HashMap<u32, Option<FileId>>,
    background: Background<LtOffsets>,
    enabled: bool,
    sandboxed: usize,
    grace: Option<Instant>,
    said_full: bool,
}

impl LtFiles {
    /// `enabled`: `GPUTRACE_NO_CALIBRATION` turns it off. Calibrations
    /// started within `names::namer::START_GRACE` from now are waited for,
    /// until [`Self::end_grace`].
    pub(crate) fn new(enabled: bool) -> Self {
        let grace = Some(Instant::now() + crate::names::namer::START_GRACE);
        Self {
            by_file: HashMap::default(),
            procs: HashMap::default(),
            background: Background::new(run_helper),
            enabled,
            sandboxed: 0,
            grace,
            said_full: false,
        }
    }

    pub(crate) fn end_grace(&mut self) {
        self.grace = None;
    }

    /// Looks for `pid`'s libcublasLt and starts its calibration (waited
    /// for within the start's grace): at attach, and when a process is
    /// first seen (a PID given to a new process is looked at again). Where
    /// the process has gone, what was found before stays: its last calls
    /// may be read after its exit.
    pub(crate) fn bind(&mut self, pid: u32) {
        if let Ok(file) = lookup(pid) {
            self.found(pid, file);
        }
        // Within the start's grace: waited for.
        self.offsets(pid);
    }

    fn file_of(&mut self, pid: u32) -> Option<FileId> {
        if let Some(f) = self.procs.get(&pid) {
            return *f;
        }
        let file = lookup(pid).ok().flatten();
        self.found(pid, file)
    }

    fn found(&mut self, pid: u32, file: Option<LibraryFile>) -> Option<FileId> {
        if self.procs.len() >= MAX_PROCESSES && !self.procs.contains_key(&pid) {
            self.procs.clear();
        }
        let id = file.map(|f| {
            let id = (f.dev, f.inode);
            if !self.by_file.contains_key(&id) {
                if self.by_file.len() < MAX_FILES {
                    let state = self.start(id, &f);
                    self.by_file.insert(id, state);
                } else if !self.said_full {
                    self.said_full = true;
                    crate::say!(
                        "more than {MAX_FILES} libcublasLt files: the cuBLASLt matmuls of unknown descriptors in the others have no shape"
                    );
                }
            }
            id
        });
        self.procs.insert(pid, id);
        id
    }

    fn start(&mut self, id: FileId, file: &LibraryFile) -> State {
        if !self.enabled {
            return State::Done(Err("disabled by GPUTRACE_NO_CALIBRATION".into()));
        }
        let (lib, how, timeout) = match trust::judge(file) {
            Trust::Trusted(f) => (f, Helper::Privileged, TRUSTED_TIMEOUT),
            Trust::Untrusted(why) => {
                if self.sandboxed >= MAX_SANDBOXED {
                    return State::Done(Err(format!(
                        "it is not trusted ({}) and {MAX_SANDBOXED} untrusted libcublasLt files were calibrated already",
                        crate::text::printable(&why)
                    )));
                }
                self.sandboxed += 1;
                match file.open_checked() {
                    Ok(f) => {
                        crate::say!(
                            "{} is not trusted ({}): calibrating it in a sandbox (uid {}, no capabilities)",
                            crate::text::printable_path(&file.found_at),
                            crate::text::printable(&why),
                            crate::host::sandbox::NOBODY
                        );
                        (f, Helper::Sandboxed, SANDBOXED_TIMEOUT)
                    }
                    Err(e) => return State::Done(Err(e.to_string())),
                }
            }
        };
        self.background.start(Request {
            id,
            file: file.clone(),
            lib,
            how,
            timeout,
            key: None,
        });
        State::Pending
    }

    fn settle(&mut self, job: Job<LtOffsets>) {
        if let Err(e) = &job.result {
            crate::say!(
                "cuBLASLt matmuls whose descriptors were made before gputrace attached have no shape for {}: {} (descriptors made while traced still give theirs)",
                crate::text::printable_path(&job.file.found_at),
                crate::text::printable(e)
            );
        }
        self.by_file.insert(job.id, State::Done(job.result));
    }

    /// The offsets of `pid`'s libcublasLt, once calibrated.
    pub(crate) fn offsets(&mut self, pid: u32) -> Option<LtOffsets> {
        for job in self.background.take() {
            self.settle(job);
        }
        let id = self.file_of(pid)?;
        while matches!(self.by_file.get(&id), Some(State::Pending)) {
            let until = self.grace.filter(|t| Instant::now() < *t)?;
            match self.background.wait(until) {
                Some(job) => self.settle(job),
                None => break,
            }
        }
        match self.by_file.get(&id)? {
            State::Done(Ok(o)) => Some(*o),
            _ => None,
        }
    }
}
