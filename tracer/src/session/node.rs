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
//!
//! A process's `/proc/PID/maps` is read again only when its code mappings
//! may have changed ([`MapsKey`]: its start time and the sizes of its
//! executable mappings, from `stat` and `status`, which the kernel writes
//! without the process's memory map lock), and at least every
//! [`REREAD_EVERY`]: reading the maps of a process with thousands of
//! mappings takes that lock again and again, and a thread of the process
//! that maps memory meanwhile waits.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::host::discover;
use crate::host::discover::LibraryFile;
use crate::names::namer::KernelNamer;
use crate::probes::links::detach_many;
use crate::probes::links::Scope;
use crate::session::attacher::Attacher;
use crate::session::attacher::FileKey;

/// With `--all`, new library files are looked for this often.
pub(super) const SCAN_EVERY: Duration = Duration::from_millis(500);
/// A process's maps are read at least this often.
pub(super) const REREAD_EVERY: Duration = Duration::from_secs(30);

/// What says a process's library mappings are as they were: its start
/// time, and the sizes of its program and library code (`VmExe`, `VmLib`
/// of `/proc/PID/status`, kB), which change when a library is mapped or
/// unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MapsKey {
    start_ticks: u64,
    exe_kb: u64,
    lib_kb: u64,
}

impl MapsKey {
    fn of(pid: u32) -> Option<Self> {
        let start_ticks = discover::stat(pid)?.start_ticks;
        let via = discover::reader_id(pid);
        let status = std::fs::read_to_string(format!("/proc/{via}/status")).ok()?;
        Self::parse(start_ticks, &status)
    }

    /// A kernel thread has no `VmExe`: `None`, and its maps (empty) are read.
    fn parse(start_ticks: u64, status: &str) -> Option<Self> {
        let kb = |field: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line[field.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        };
        Some(Self {
            start_ticks,
            exe_kb: kb("VmExe:")?,
            lib_kb: kb("VmLib:")?,
        })
    }
}

/// A process's library files as last read.
struct Known {
    key: MapsKey,
    read_at: Instant,
    files: Vec<LibraryFile>,
}

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
    /// Each process's library files, while its [`MapsKey`] holds.
    known: HashMap<u32, Known>,
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
            known: HashMap::new(),
        }
    }

    /// `pid`'s library files: as read before while its mappings look the
    /// same and the reading is recent, else read now.
    fn libraries(
        &mut self,
        attacher: &Attacher,
        pid: u32,
        now: Instant,
    ) -> Option<Vec<LibraryFile>> {
        let key = MapsKey::of(pid);
        if let (Some(k), Some(known)) = (key, self.known.get(&pid)) {
            if known.key == k && now.saturating_duration_since(known.read_at) < REREAD_EVERY {
                return Some(known.files.clone());
            }
        }
        // Gone, or not readable (a kernel thread has empty maps): skip.
        let files = attacher.libraries_of(pid).ok()?;
        match key {
            Some(key) => {
                self.known.insert(
                    pid,
                    Known {
                        key,
                        read_at: now,
                        files: files.clone(),
                    },
                );
            }
            None => {
                self.known.remove(&pid);
            }
        }
        Some(files)
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
        let now = Instant::now();
        self.last_scan = now;
        let mut mapped: HashSet<FileKey> = HashSet::new();
        self.gpu_pids.clear();
        let pids = discover::all_pids();
        let alive: HashSet<u32> = pids.iter().copied().collect();
        self.known.retain(|pid, _| alive.contains(pid));
        for pid in pids {
            let Some(files) = self.libraries(attacher, pid, now) else {
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
                            crate::say!(
                                "attached {n} probes to {} (newly mapped, by process {pid})",
                                shown(&f.path)
                            );
                        }
                    }
                    Err(e) if first => return Err(e.into()),
                    Err(e) => {
                        if self.failed.insert(key) {
                            crate::say!(
                                "cannot attach to {}: {}",
                                shown(&f.path),
                                crate::text::printable(&format!("{e:#}"))
                            );
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
                    crate::say!(
                        "detached {n} probes from {} (no process maps it any more)",
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
    let s = crate::text::printable_path(path);
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
    fn maps_keys_come_from_status() {
        let status = "Name:\tpython3\nVmPeak:\t 100 kB\nVmExe:\t    2996 kB\nVmLib:\t  512040 kB\nThreads:\t9\n";
        assert_eq!(
            MapsKey::parse(7, status),
            Some(MapsKey {
                start_ticks: 7,
                exe_kb: 2996,
                lib_kb: 512040
            })
        );
        // A kernel thread.
        assert_eq!(MapsKey::parse(7, "Name:\tkthreadd\nThreads:\t1\n"), None);
        // Our own process: a key, the same twice.
        let me = std::process::id();
        assert!(MapsKey::of(me).is_some());
        assert_eq!(MapsKey::of(me), MapsKey::of(me));
    }

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
