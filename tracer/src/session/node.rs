//! Node mode (`--all`, `daemon`): probes per library file for every process,
//! kept in step with what the node's processes map.
//!
//! Every [`SCAN_EVERY`] the whole of `/proc` is read: a library file no probe
//! covers yet (a new container image, a new driver) is attached then; a
//! probed file that no process has mapped for `GPUTRACE_DETACH_AFTER`
//! (`Config::detach_after`) is detached; the processes that map a probed
//! library are handed to `processes`, which says they are seen. A process
//! that starts and maps an already probed file needs nothing: its calls hit
//! the probes from its first one. A process that vanishes while it is being
//! read, or a `/proc` entry that cannot be read, is skipped.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::attacher::{Attacher, FileKey};
use crate::error::Result;
use crate::names::namer::KernelNamer;
use crate::probes::attach::{detach_many, Scope};
use crate::probes::discover::{self, LibraryFile};

/// With `--all`, new library files are looked for this often.
pub const SCAN_EVERY: Duration = Duration::from_millis(500);

pub(super) struct NodeWatch {
    last_scan: Instant,
    detach_after: Duration,
    /// Probed files, with a path they were found at.
    paths: HashMap<FileKey, PathBuf>,
    /// Probed files that no process mapped at the last scans, since when.
    unmapped_since: HashMap<FileKey, Instant>,
    /// Files whose attach failed (said once).
    failed: HashSet<FileKey>,
    /// Processes that mapped a probed library at the last scan.
    gpu_pids: Vec<u32>,
}

impl NodeWatch {
    pub(super) fn new(detach_after: Duration) -> Self {
        Self {
            last_scan: Instant::now(),
            detach_after,
            paths: HashMap::new(),
            unmapped_since: HashMap::new(),
            failed: HashSet::new(),
            gpu_pids: Vec::new(),
        }
    }

    pub(super) fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_scan) >= SCAN_EVERY
    }

    /// Processes that mapped a probed library at the last scan.
    pub(super) fn gpu_pids(&self) -> &[u32] {
        &self.gpu_pids
    }

    /// Reads every process's maps: attaches to new library files (for all
    /// processes), detaches files unmapped for long enough. At the `first`
    /// scan a file that cannot be attached is an error.
    pub(super) fn scan(
        &mut self,
        attacher: &mut Attacher,
        namer: &mut KernelNamer,
        first: bool,
    ) -> Result<()> {
        self.last_scan = Instant::now();
        let mut mapped: HashSet<FileKey> = HashSet::new();
        self.gpu_pids.clear();
        for pid in discover::all_pids() {
            // Gone, or not readable (a kernel thread has empty maps): skip.
            let Ok(files) = attacher.libraries_of(pid) else {
                continue;
            };
            if !files.is_empty() {
                self.gpu_pids.push(pid);
            }
            for f in files {
                let key = (f.dev, f.inode);
                mapped.insert(key);
                if attacher.is_attached(&f, Scope::All) {
                    continue;
                }
                // Hold the file open and attach through the open file: the
                // process may exit (taking its /proc/PID/root path along)
                // while symbols are read, the driver is calibrated and probes
                // are attached. It cannot have exited yet: skip it if it has
                // (or if something else now stands at that path).
                let Ok(held) = f.open_checked() else {
                    continue;
                };
                let via = LibraryFile {
                    path: PathBuf::from(format!(
                        "/proc/{}/fd/{}",
                        std::process::id(),
                        held.as_raw_fd()
                    )),
                    ..f.clone()
                };
                let attached = attacher.attach(&via, Scope::All, namer);
                drop(held);
                match attached {
                    Ok(n) => {
                        self.failed.remove(&key);
                        self.paths.insert(key, f.path.clone());
                        if !first && n > 0 {
                            eprintln!(
                                "gputrace: attached {n} probes to {} (newly mapped, by process {pid})",
                                shown(&f.path)
                            );
                        }
                    }
                    Err(e) if first => return Err(e.into()),
                    Err(e) => {
                        if self.failed.insert(key) {
                            eprintln!("gputrace: cannot attach to {}: {e:#}", shown(&f.path));
                        }
                    }
                }
            }
        }
        self.detach_unmapped(attacher, &mapped);
        Ok(())
    }

    fn detach_unmapped(&mut self, attacher: &mut Attacher, mapped: &HashSet<FileKey>) {
        let now = Instant::now();
        let probed = attacher.files_in(Scope::All);
        self.unmapped_since.retain(|k, _| !mapped.contains(k));
        let mut gone = Vec::new();
        for key in probed.into_iter().filter(|k| !mapped.contains(k)) {
            let since = *self.unmapped_since.entry(key).or_insert(now);
            if now.duration_since(since) < self.detach_after {
                continue;
            }
            self.unmapped_since.remove(&key);
            let path = self.paths.remove(&key);
            if let Some(att) = attacher.take_file(Scope::All, key) {
                let n = att.probes();
                if n > 0 {
                    eprintln!(
                        "gputrace: detached {n} probes from {} (no process maps it any more)",
                        path.as_deref().map(shown).unwrap_or_default()
                    );
                }
                gone.push(att);
            }
        }
        if !gone.is_empty() {
            // Detaching may wait for grace periods: not on the event loop.
            std::thread::spawn(move || detach_many(gone));
        }
    }
}

/// A path without the `/proc/PID/root` it was reached through, printable.
fn shown(path: &std::path::Path) -> String {
    let s = discover::printable_path(path);
    if let Some(rest) = s.strip_prefix("/proc/") {
        if let Some((pid, tail)) = rest.split_once("/root/") {
            if pid.bytes().all(|b| b.is_ascii_digit()) {
                return format!("/{tail}");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_paths_drop_the_proc_root() {
        assert_eq!(
            shown(std::path::Path::new("/proc/123/root/usr/lib/libcuda.so.1")),
            "/usr/lib/libcuda.so.1"
        );
        assert_eq!(
            shown(std::path::Path::new("/opt/libcuda.so.1")),
            "/opt/libcuda.so.1"
        );
    }
}
