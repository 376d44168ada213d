//! Thin wrappers over the ptrace requests we use, and waiting for a stop with
//! a deadline (waitpid itself has no timeout, so we poll with WNOHANG).

use std::io;
use std::time::{Duration, Instant};

const PTRACE_CONT: u32 = 7;
const PTRACE_SINGLESTEP: u32 = 9;
const PTRACE_DETACH: u32 = 17;
const PTRACE_SYSCALL: u32 = 24;
const PTRACE_GETSIGINFO: u32 = 0x4202;
const PTRACE_SEIZE: u32 = 0x4206;
const PTRACE_INTERRUPT: u32 = 0x4207;
const PTRACE_GET_SYSCALL_INFO: u32 = 0x420e;
pub(crate) const PTRACE_O_TRACESYSGOOD: u64 = 1;
const PTRACE_EVENT_STOP: i32 = 128;
pub(crate) const PTRACE_SYSCALL_INFO_ENTRY: u8 = 1;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// How to let a stopped thread go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    Cont,
    Step,
    Syscall,
}

fn request(tid: i32, req: u32, addr: u64, data: u64) -> io::Result<libc::c_long> {
    // SAFETY: the requests issued through here take integers or (for the
    // callers that pass pointers) buffers owned and sized by the caller.
    check(unsafe { libc::ptrace(req as _, tid, addr, data) })
}

pub(crate) fn seize(tid: i32, options: u64) -> io::Result<()> {
    request(tid, PTRACE_SEIZE, 0, options).map(drop)
}

pub(crate) fn interrupt(tid: i32) -> io::Result<()> {
    request(tid, PTRACE_INTERRUPT, 0, 0).map(drop)
}

pub(crate) fn resume(tid: i32, how: Resume, sig: i32) -> io::Result<()> {
    let req = match how {
        Resume::Cont => PTRACE_CONT,
        Resume::Step => PTRACE_SINGLESTEP,
        Resume::Syscall => PTRACE_SYSCALL,
    };
    request(tid, req, 0, sig as u64).map(drop)
}

pub(crate) fn detach(tid: i32, sig: i32) -> io::Result<()> {
    request(tid, PTRACE_DETACH, 0, sig as u64).map(drop)
}

pub(crate) fn siginfo(tid: i32) -> io::Result<libc::siginfo_t> {
    // SAFETY: siginfo_t is plain data; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes one siginfo_t into `info`.
    check(unsafe {
        libc::ptrace(
            PTRACE_GETSIGINFO as _,
            tid,
            0u64,
            &mut info as *mut libc::siginfo_t,
        )
    })?;
    Ok(info)
}

/// `op` of PTRACE_GET_SYSCALL_INFO: entry (1), exit (2), seccomp (3) or none (0).
pub(crate) fn syscall_info_op(tid: i32) -> io::Result<u8> {
    let mut buf = [0u8; 128];
    // SAFETY: the kernel writes at most `buf.len()` bytes (the size passed as addr).
    check(unsafe {
        libc::ptrace(
            PTRACE_GET_SYSCALL_INFO as _,
            tid,
            buf.len(),
            buf.as_mut_ptr(),
        )
    })?;
    Ok(buf[0])
}

/// What waitpid told about the traced thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The thread is gone: exited with a code, or killed by a signal.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// PTRACE_EVENT_STOP: after PTRACE_INTERRUPT (`sig` SIGTRAP) or a
    /// group-stop (`sig` the stopping signal).
    Event { sig: i32 },
    /// A syscall-enter or syscall-exit stop (PTRACE_O_TRACESYSGOOD).
    Syscall,
    /// A signal-delivery stop: the thread is about to receive `sig`.
    Signal { sig: i32 },
    /// Any other ptrace event (we set no options that cause these).
    Other { status: i32 },
}

impl Stop {
    pub(crate) fn describe(&self) -> String {
        match self {
            Stop::Exited { code: Some(c), .. } => format!("exited with code {c}"),
            Stop::Exited {
                signal: Some(s), ..
            } => format!("killed by signal {s}"),
            other => format!("{other:?}"),
        }
    }
}

fn classify(status: i32) -> Stop {
    if libc::WIFEXITED(status) {
        return Stop::Exited {
            code: Some(libc::WEXITSTATUS(status)),
            signal: None,
        };
    }
    if libc::WIFSIGNALED(status) {
        return Stop::Exited {
            code: None,
            signal: Some(libc::WTERMSIG(status)),
        };
    }
    let sig = libc::WSTOPSIG(status);
    match status >> 16 {
        PTRACE_EVENT_STOP => Stop::Event { sig },
        0 if sig == libc::SIGTRAP | 0x80 => Stop::Syscall,
        0 => Stop::Signal { sig },
        _ => Stop::Other { status },
    }
}

/// Waits for the next stop of `tid` until `deadline`; `Ok(None)` on timeout.
/// Polls: spins (yielding) for the first millisecond, then sleeps with a
/// backoff up to 1 ms, so a stop is seen within ~1 ms at worst.
pub(crate) fn wait(tid: i32, deadline: Instant) -> io::Result<Option<Stop>> {
    let start = Instant::now();
    let mut nap = Duration::from_micros(20);
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::WNOHANG | libc::__WALL) };
        if r == tid {
            return Ok(Some(classify(status)));
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        if now - start < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses() {
        assert_eq!(
            classify(3 << 8),
            Stop::Exited {
                code: Some(3),
                signal: None
            }
        );
        assert_eq!(
            classify(9),
            Stop::Exited {
                code: None,
                signal: Some(9)
            }
        );
        let stopped = |sig: i32, event: i32| (event << 16) | (sig << 8) | 0x7f;
        assert_eq!(
            classify(stopped(libc::SIGTRAP, 128)),
            Stop::Event { sig: libc::SIGTRAP }
        );
        assert_eq!(
            classify(stopped(libc::SIGSTOP, 128)),
            Stop::Event { sig: libc::SIGSTOP }
        );
        assert_eq!(classify(stopped(libc::SIGTRAP | 0x80, 0)), Stop::Syscall);
        assert_eq!(
            classify(stopped(libc::SIGUSR1, 0)),
            Stop::Signal { sig: libc::SIGUSR1 }
        );
        assert!(matches!(
            classify(stopped(libc::SIGTRAP, 6)),
            Stop::Other { .. }
        ));
    }
}
