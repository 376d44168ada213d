//! Node mode (`--all`, `daemon`): probes per library file for every process,
//! kept in step with what the node's processes map.
//!
//! Every [`SCAN_EVERY`] the whole of `/proc` is read: a library file no probe
//! covers yet (a new container image, a new driver) is attached then; a
//! probed file that no process has mapped for [`detach_after`] is detached;
//! per-process state of processes gone for [`FORGET_AFTER`] is freed. A
//! process that starts and maps an already probed file needs nothing: its
//! calls hit the probes from its first one. A process that vanishes while it
//! is being read, or a `/proc` entry that cannot be read, is skipped.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Attacher, SessionState, SCAN_EVERY};
use crate::aggregate::enrich::Enricher;
use crate::error::Result;
use crate::names::namer::KernelNamer;
use crate::probes::attach::{detach_many, Scope};
use crate::probes::discover::{self, LibraryFile};

/// How long the per-process state of a process stays after it was found gone
/// (its last calls may still be in the ring buffer).
pub const FORGET_AFTER: Duration = Duration::from_secs(2);

/// How long a probed file may go unmapped before its probes are detached:
/// `GPUTRACE_DETACH_AFTER` (e.g. `2s`), 10 s by default. A job that restarts
/// within it keeps its probes, and its first calls are traced.
pub fn detach_after() -> Duration {
    std::env::var("GPUTRACE_DETACH_AFTER")
        .ok()
        .and_then(|v| crate::cli::parse_duration(&v).ok())
        .unwrap_or(Duration::from_secs(10))
}

type FileKey = (u64, u64);

pub(super) struct NodeWatch {
    last_scan: Instant,
    detach_after: Duration,
    /// Probed files, with a path they were found at.
    paths: HashMap<FileKey, PathBuf>,
    /// Probed files that no process mapped at the last scans, since when.
    unmapped_since: HashMap<FileKey, Instant>,
    /// Files whose attach failed (said once).
    failed: HashSet<FileKey>,
    /// Processes the enricher holds state for that were found gone, since when.
    gone_since: HashMap<u32, Instant>,
    /// Processes that mapped a probed library at the last scan.
    gpu_pids: Vec<u32>,
}

impl NodeWatch {
    pub(super) fn new() -> Self {
        Self {
            last_scan: Instant::now(),
            detach_after: detach_after(),
            paths: HashMap::new(),
            unmapped_since: HashMap::new(),
            failed: HashSet::new(),
            gone_since: HashMap::new(),
            gpu_pids: Vec::new(),
        }
    }

    pub(super) fn due(&self) -> bool {
        self.last_scan.elapsed() >= SCAN_EVERY
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
        let probed: Vec<FileKey> = attacher
            .attached
            .keys()
            .filter(|k| k.0 == Scope::All)
            .map(|k| (k.1, k.2))
            .collect();
        self.unmapped_since.retain(|k, _| !mapped.contains(k));
        let mut gone = Vec::new();
        for key in probed.into_iter().filter(|k| !mapped.contains(k)) {
            let since = *self.unmapped_since.entry(key).or_insert(now);
            if now.duration_since(since) < self.detach_after {
                continue;
            }
            self.unmapped_since.remove(&key);
            let path = self.paths.remove(&key);
            if let Some(att) = attacher.attached.remove(&(Scope::All, key.0, key.1)) {
                attacher.probes.forget_file(key.0, key.1);
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

    /// Reads the names of the processes the last scan found, while they are
    /// alive; frees the state of processes that have exited.
    pub(super) fn reap(&mut self, enricher: &mut Enricher) {
        for &pid in &self.gpu_pids {
            enricher.remember(pid);
        }
        let now = Instant::now();
        let known: HashSet<u32> = enricher.pids().collect();
        self.gone_since.retain(|pid, _| known.contains(pid));
        for pid in known {
            if discover::is_alive(pid) {
                self.gone_since.remove(&pid);
                continue;
            }
            let since = *self.gone_since.entry(pid).or_insert(now);
            if now.duration_since(since) >= FORGET_AFTER {
                enricher.forget(pid);
                self.gone_since.remove(&pid);
            }
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

impl SessionState {
    /// Library files probed for every process (node mode).
    pub fn probed_files(&self) -> usize {
        self.attacher
            .attached
            .iter()
            .filter(|(k, a)| k.0 == Scope::All && a.probes() > 0)
            .count()
    }

    /// Processes whose per-process state (calls' context, kernel names) is held.
    pub fn processes_known(&self) -> usize {
        let mut pids: HashSet<u32> = self.enricher.pids().collect();
        pids.extend(self.enricher.namer.pids());
        pids.len()
    }

    /// Processes that mapped libcuda/libnccl at the last scan of /proc.
    pub fn gpu_processes(&self) -> &[u32] {
        &self.node.gpu_pids
    }
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
