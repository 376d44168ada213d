//! The executable mappings a process makes, recorded by the kernel as it
//! makes them (a perf event of its own, `PERF_RECORD_MMAP2`, as `perf
//! record` keeps them), so that they are known after the process is gone:
//! its `/proc/PID/maps` goes with it, and a process that runs for a few
//! milliseconds is often gone before its first stack is read. An exec
//! (`PERF_RECORD_COMM` marked exec) starts the list afresh.
//!
//! The event is opened on the process (all its threads; not its children)
//! before it is read (`/proc/PID/maps` then gives what it mapped before),
//! or, for a command gputrace starts, while it waits at its gate, so that
//! nothing it maps is missed. Records the ring could not take (a burst of
//! mappings between two reads) make the list read again from
//! `/proc/PID/maps` while the process runs.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::host::discover::Mapping;

/// `struct perf_event_attr` up to `config2` (`PERF_ATTR_SIZE_VER1`).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_MMAP: u64 = 1 << 8;
const FLAG_COMM: u64 = 1 << 9;
const FLAG_MMAP2: u64 = 1 << 23;
const FLAG_COMM_EXEC: u64 = 1 << 24;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;

/// Offsets in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// Data pages of the ring (a power of two): a process maps a few records
/// per library (one per executable segment), read at every drain.
const DATA_PAGES: usize = 16;

/// An executable file mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub inode: u64,
    pub path: String,
}

impl MappedFile {
    /// The mapping as a line of `/proc/PID/maps`.
    pub fn maps_line(&self) -> String {
        format!(
            "{:x}-{:x} r-xp {:08x} 00:00 {} {}",
            self.start, self.end, self.offset, self.inode, self.path
        )
    }
}

/// A process's executable mappings, kept up to date from its perf event.
pub struct MapWatch {
    pid: u32,
    /// The event (the ring stays valid while it is open).
    _fd: OwnedFd,
    ring: NonNull<u8>,
    len: usize,
    page: usize,
    /// By start address.
    maps: BTreeMap<u64, MappedFile>,
    /// Records the kernel could not keep (the ring was full).
    pub lost: u64,
}

// SAFETY: the ring is a mapping this value owns alone (unmapped on drop);
// it is read and written through `&mut self` only.
unsafe impl Send for MapWatch {}

impl MapWatch {
    /// Starts watching `pid`; then, with `current`, takes what it maps now
    /// from `/proc/PID/maps` (not for a process still at gputrace's gate:
    /// it maps a copy of gputrace).
    pub fn open(pid: u32, current: bool) -> std::io::Result<Self> {
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_DUMMY,
            flags: FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
                | FLAG_MMAP
                | FLAG_MMAP2
                | FLAG_COMM
                | FLAG_COMM_EXEC,
            ..Default::default()
        };
        // SAFETY: perf_event_open with a valid attr (its size given), a
        // PID, any CPU, no group; the result is checked.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                pid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just made, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + DATA_PAGES);
        // SAFETY: mapping the event's ring (shared, read-write: we write
        // the tail), checked below.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut w = Self {
            pid,
            _fd: fd,
            ring: NonNull::new(ring.cast()).expect("mmap gave a mapping"),
            len,
            page,
            maps: BTreeMap::new(),
            lost: 0,
        };
        if current {
            w.read_maps();
        }
        Ok(w)
    }

    /// Takes the executable mappings `/proc/PID/maps` shows now (all of
    /// them, when it can be read); false when it cannot.
    fn read_maps(&mut self) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)) else {
            return false;
        };
        self.maps.clear();
        for m in Mapping::all(&text).filter(|m| m.perms.contains('x') && m.is_file()) {
            self.add(MappedFile {
                start: m.start,
                end: m.end,
                offset: m.offset,
                inode: m.inode.parse().unwrap_or(0),
                path: m.path.to_string(),
            });
        }
        true
    }

    /// A mapping replaces whatever it overlaps.
    fn add(&mut self, m: MappedFile) {
        let overlapping: Vec<u64> = self
            .maps
            .range(..m.end)
            .filter(|(_, o)| o.end > m.start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            self.maps.remove(&s);
        }
        self.maps.insert(m.start, m);
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is DATA_HEAD or DATA_TAIL, aligned u64 fields of the
        // ring's first page, which lives as long as `self`.
        unsafe { &*self.ring.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// Bytes of the data area from `pos` on (wrapping).
    fn copy(&self, pos: u64, out: &mut [u8]) {
        let size = self.len - self.page;
        for (i, b) in out.iter_mut().enumerate() {
            let off = (pos as usize + i) % size;
            // SAFETY: `off` is inside the data area of the mapping.
            *b = unsafe { *self.ring.as_ptr().add(self.page + off) };
        }
    }

    /// Takes in the records written since the last call; true when the
    /// mappings changed.
    pub fn refresh(&mut self) -> bool {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        let lost_before = self.lost;
        let mut changed = false;
        while tail < head {
            let mut header = [0u8; 8];
            self.copy(tail, &mut header);
            let kind = u32::from_ne_bytes(header[..4].try_into().expect("4 bytes"));
            let misc = u16::from_ne_bytes(header[4..6].try_into().expect("2 bytes"));
            let size = u16::from_ne_bytes(header[6..8].try_into().expect("2 bytes")) as u64;
            if size < 8 || tail + size > head {
                break;
            }
            let mut rec = vec![0u8; size as usize];
            self.copy(tail, &mut rec);
            changed |= self.record(kind, misc, &rec);
            tail += size;
        }
        self.word(DATA_TAIL).store(head, Ordering::Release);
        if self.lost > lost_before {
            // Some mappings were not recorded: what the process maps now.
            changed |= self.read_maps();
        }
        changed
    }

    /// One record; true when it changed the mappings.
    fn record(&mut self, kind: u32, misc: u16, rec: &[u8]) -> bool {
        let u64_at = |at: usize| {
            rec.get(at..at + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        };
        let u32_at = |at: usize| {
            rec.get(at..at + 4)
                .map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        };
        match kind {
            PERF_RECORD_COMM if misc & PERF_RECORD_MISC_COMM_EXEC != 0 => {
                self.maps.clear();
                true
            }
            PERF_RECORD_MMAP2 => {
                // header 8, pid 4, tid 4, addr 8, len 8, pgoff 8, maj 4,
                // min 4, ino 8, ino_generation 8, prot 4, flags 4, filename.
                let (addr, len, pgoff, ino) = (u64_at(16), u64_at(24), u64_at(32), u64_at(48));
                let prot = u32_at(64);
                let name = rec.get(72..).unwrap_or(&[]);
                let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
                if prot & libc::PROT_EXEC as u32 == 0 || !name.starts_with(b"/") {
                    return false;
                }
                self.add(MappedFile {
                    start: addr,
                    end: addr.saturating_add(len),
                    offset: pgoff,
                    inode: ino,
                    path: String::from_utf8_lossy(name).into_owned(),
                });
                true
            }
            PERF_RECORD_LOST => {
                self.lost += u64_at(16);
                false
            }
            _ => false,
        }
    }

    /// The mappings known, as a `/proc/PID/maps` text.
    pub fn maps_text(&self) -> String {
        let mut s = String::new();
        for m in self.maps.values() {
            s.push_str(&m.maps_line());
            s.push('\n');
        }
        s
    }
}

impl Drop for MapWatch {
    fn drop(&mut self) {
        // SAFETY: unmapping the ring mapped in `open`, used by nothing else.
        unsafe { libc::munmap(self.ring.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that execs `/bin/true`-like work after we watch it: what it
    /// maps then is known after it has exited.
    #[test]
    fn mappings_made_after_the_watch_are_known_after_exit() {
        let mut gate = [0; 2];
        // SAFETY: a valid two-element array.
        assert_eq!(unsafe { libc::pipe(gate.as_mut_ptr()) }, 0);
        let sh = std::ffi::CString::new("/bin/sh").unwrap();
        let c = std::ffi::CString::new("-c").unwrap();
        let script = std::ffi::CString::new("exit 0").unwrap();
        let argv = [sh.as_ptr(), c.as_ptr(), script.as_ptr(), std::ptr::null()];
        // SAFETY: the child only reads the gate and execs (async-signal-safe).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                let mut b = 0u8;
                libc::close(gate[1]);
                libc::read(gate[0], (&mut b as *mut u8).cast(), 1);
                libc::execv(sh.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
        }
        let mut w = MapWatch::open(pid as u32, false).expect("perf_event_open (root)");
        // SAFETY: releasing and reaping our own child.
        unsafe {
            libc::close(gate[0]);
            libc::close(gate[1]);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        assert!(w.refresh());
        let text = w.maps_text();
        let exe = std::fs::canonicalize("/bin/sh").unwrap();
        assert!(
            text.contains(exe.to_str().unwrap()),
            "{exe:?} not in\n{text}"
        );
        assert!(text.contains("libc.so"), "no libc in\n{text}");
        // Nothing of the child before its exec (a copy of this process).
        let me = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert!(!text.contains(me.to_str().unwrap()), "{text}");
        assert_eq!(w.lost, 0);
    }

    #[test]
    fn an_exec_starts_the_list_afresh() {
        let mut w = MapWatch::open(std::process::id(), true).unwrap();
        let me = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert!(w.maps_text().contains(me.to_str().unwrap()));
        let exec = |misc: u16| {
            let mut rec = vec![0u8; 24];
            rec[..4].copy_from_slice(&PERF_RECORD_COMM.to_ne_bytes());
            rec[4..6].copy_from_slice(&misc.to_ne_bytes());
            rec
        };
        // A plain rename of the thread changes nothing; an exec clears.
        assert!(!w.record(PERF_RECORD_COMM, 0, &exec(0)));
        assert!(w.maps_text().contains(me.to_str().unwrap()));
        assert!(w.record(
            PERF_RECORD_COMM,
            PERF_RECORD_MISC_COMM_EXEC,
            &exec(PERF_RECORD_MISC_COMM_EXEC)
        ));
        assert_eq!(w.maps_text(), "");
        // A mapping replaces those it overlaps.
        let m = |start: u64, end: u64, path: &str| MappedFile {
            start,
            end,
            offset: 0,
            inode: 1,
            path: path.into(),
        };
        w.add(m(0x1000, 0x3000, "/a"));
        w.add(m(0x5000, 0x6000, "/b"));
        w.add(m(0x2000, 0x5800, "/c"));
        assert_eq!(w.maps_text(), "2000-5800 r-xp 00000000 00:00 1 /c\n");
    }
}
