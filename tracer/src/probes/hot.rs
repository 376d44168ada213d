//! The samplable symbols of one library file in one scope (`--overhead-budget`):
//! attached and detached as a set by the budget's sampler.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use tracer_common::ProbeCookie;

use crate::probes::multi::MultiLink;
use crate::probes::multi::MultiPrograms;

/// The samplable symbols of one library file in one scope.
#[derive(Debug)]
pub(crate) struct HotSet {
    /// Held open, attached through `/proc/self/fd/N`.
    file: Option<File>,
    path: PathBuf,
    pid: Option<u32>,
    pub(crate) offsets: Vec<u64>,
    cookies: Vec<u64>,
    /// Whether each symbol gets a return probe in `Exact` mode.
    with_ret: Vec<bool>,
}

impl HotSet {
    pub(crate) fn new(pid: Option<u32>) -> Self {
        Self {
            file: None,
            path: PathBuf::new(),
            pid,
            offsets: Vec::new(),
            cookies: Vec::new(),
            with_ret: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, offset: u64, cookie: ProbeCookie, with_ret: bool) {
        self.offsets.push(offset);
        self.cookies.push(cookie.0);
        self.with_ret.push(with_ret);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Opens `path` and keeps it open for the set's lifetime.
    pub(crate) fn open(mut self, path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        self.path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        self.file = Some(file);
        Ok(self)
    }

    /// The entry probes, of the APIs `only` holds when given; `None`
    /// when that leaves none.
    pub(crate) fn attach_entry(
        &self,
        multi: &MultiPrograms,
        entry_only: bool,
        only: Option<&HashSet<u32>>,
    ) -> std::io::Result<Option<MultiLink>> {
        self.attach_entry_in(multi, entry_only, only, self.pid)
    }

    /// Entry-only probes of every API of the set that fire in process
    /// `pid` alone (the kernel writes breakpoints in its code only): a new
    /// process's own slice (`budget::sampler::welcome`).
    pub(crate) fn attach_for(
        &self,
        multi: &MultiPrograms,
        pid: u32,
    ) -> std::io::Result<Option<MultiLink>> {
        self.attach_entry_in(multi, true, None, Some(pid))
    }

    fn attach_entry_in(
        &self,
        multi: &MultiPrograms,
        entry_only: bool,
        only: Option<&HashSet<u32>>,
        pid: Option<u32>,
    ) -> std::io::Result<Option<MultiLink>> {
        let (mut offsets, mut cookies) = (Vec::new(), Vec::new());
        for (&o, &c) in self.offsets.iter().zip(&self.cookies) {
            if only.is_some_and(|apis| !apis.contains(&ProbeCookie(c).api())) {
                continue;
            }
            offsets.push(o);
            cookies.push(if entry_only {
                c | ProbeCookie::ENTRY_ONLY
            } else {
                c
            });
        }
        if offsets.is_empty() {
            return Ok(None);
        }
        multi
            .attach(&self.path, &offsets, &cookies, pid, false)
            .map(Some)
    }

    pub(crate) fn attach_ret(&self, multi: &MultiPrograms) -> std::io::Result<Option<MultiLink>> {
        let (mut o, mut c) = (Vec::new(), Vec::new());
        for i in 0..self.offsets.len() {
            if self.with_ret[i] {
                o.push(self.offsets[i]);
                c.push(self.cookies[i]);
            }
        }
        if o.is_empty() {
            return Ok(None);
        }
        multi.attach(&self.path, &o, &c, self.pid, true).map(Some)
    }
}
