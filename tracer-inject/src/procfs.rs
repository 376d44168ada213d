//! Small readers of /proc: status fields, thread lists and states, our own
//! capabilities. Everything here tolerates a process that vanishes meanwhile
//! (the caller gets `None` or an `io::Error`).

use std::fs;
use std::io;

/// Capability bits (linux/capability.h).
pub(crate) const CAP_SYS_PTRACE: u32 = 19;
pub(crate) const CAP_SYS_ADMIN: u32 = 21;

/// The `Key:\tvalue` lines of a /proc status file.
pub(crate) struct Status(String);

impl Status {
    /// Status of the process (`tid` None) or of one of its threads.
    pub(crate) fn read(pid: i32, tid: Option<i32>) -> io::Result<Status> {
        let path = match tid {
            Some(tid) => format!("/proc/{pid}/task/{tid}/status"),
            None => format!("/proc/{pid}/status"),
        };
        fs::read_to_string(path).map(Status)
    }

    /// Status of the calling thread: capabilities are per thread.
    pub(crate) fn own_thread() -> io::Result<Status> {
        fs::read_to_string("/proc/thread-self/status").map(Status)
    }

    pub(crate) fn field(&self, key: &str) -> Option<&str> {
        self.0.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k == key).then(|| v.trim())
        })
    }

    pub(crate) fn int(&self, key: &str) -> Option<i64> {
        self.field(key)?.split_whitespace().next()?.parse().ok()
    }

    /// A hexadecimal mask field (CapEff, SigPnd, ...).
    pub(crate) fn mask(&self, key: &str) -> Option<u64> {
        u64::from_str_radix(self.field(key)?, 16).ok()
    }

    /// The four ids of a `Uid:` or `Gid:` line (real, effective, saved, fs).
    pub(crate) fn ids(&self, key: &str) -> Option<Vec<u32>> {
        self.field(key)?
            .split_whitespace()
            .map(|s| s.parse().ok())
            .collect()
    }

    /// First letter of the `State:` field (R, S, D, T, t, Z, X, ...).
    pub(crate) fn state(&self) -> Option<char> {
        self.field("State")?.chars().next()
    }
}

/// Whether the calling thread has capability `cap` in its effective set.
pub(crate) fn have_cap(cap: u32) -> bool {
    Status::own_thread()
        .ok()
        .and_then(|s| s.mask("CapEff"))
        .is_some_and(|m| m & (1u64 << cap) != 0)
}

/// The process (thread group) a thread id belongs to; TracerPid names the
/// tracing thread, not its process.
pub(crate) fn tgid_of(tid: i32) -> i32 {
    Status::read(tid, None)
        .ok()
        .and_then(|s| s.int("Tgid"))
        .map_or(tid, |t| t as i32)
}

/// Thread ids of a process, the main thread first.
pub(crate) fn threads(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable_by_key(|&t| (t != pid, t));
    Ok(tids)
}

/// The scheduler state letter of a thread, from /proc/PID/task/TID/stat.
pub(crate) fn thread_state(pid: i32, tid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: the
    // state is the first field after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// The system call a blocked thread is in, from /proc/PID/task/TID/syscall:
/// `Some(nr)` with nr >= 0 in a system call, `Some(-1)` blocked outside one
/// (e.g. stopped in user code), `None` when running or unreadable.
pub(crate) fn thread_syscall(pid: i32, tid: i32) -> Option<i64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// kernel.yama.ptrace_scope, when YAMA is built in.
pub(crate) fn yama_scope() -> Option<u32> {
    fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether signal `sig` is pending for thread `tid` (its own or the
/// process-wide queue).
pub(crate) fn signal_pending(pid: i32, tid: i32, sig: i32) -> bool {
    let Ok(status) = Status::read(pid, Some(tid)) else {
        return false;
    };
    let bit = 1u64 << ((sig - 1) & 63);
    let own = status.mask("SigPnd").unwrap_or(0);
    let shared = status.mask("ShdPnd").unwrap_or(0);
    (own | shared) & bit != 0
}

/// Whether `pid` is a descendant of the calling process.
pub(crate) fn is_descendant(pid: i32) -> bool {
    let me = std::process::id() as i64;
    let mut cur = pid as i64;
    for _ in 0..64 {
        let Some(ppid) = Status::read(cur as i32, None)
            .ok()
            .and_then(|s| s.int("PPid"))
        else {
            return false;
        };
        if ppid == me {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        cur = ppid;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_status_parses() {
        let s = Status::read(std::process::id() as i32, None).unwrap();
        assert_eq!(s.int("Pid"), Some(std::process::id() as i64));
        assert_eq!(s.ids("Uid").map(|v| v.len()), Some(4));
        assert!(s.mask("CapEff").is_some());
        assert_eq!(s.field("NoSuchField"), None);
    }

    #[test]
    fn own_threads_listed_main_first() {
        let pid = std::process::id() as i32;
        let tids = threads(pid).unwrap();
        assert_eq!(tids[0], pid);
        assert!(thread_state(pid, pid).is_some());
    }
}
