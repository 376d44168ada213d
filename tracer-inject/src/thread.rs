//! `RemoteThread`: one thread of the target, seized with ptrace, in which we
//! run system calls and function calls; everything is put back when it is
//! released (or dropped), on every path.
//!
//! Life cycle: [`RemoteThread::seize`] picks a thread, PTRACE_SEIZEs and
//! PTRACE_INTERRUPTs it (nothing changed yet: refusals such as the seccomp
//! check happen here); [`RemoteThread::prepare`] brings it to a system-call
//! boundary, saves the FP state and maps a scratch area; `syscall`/`call`
//! (in exec.rs) run code; [`RemoteThread::release`] unmaps the scratch area,
//! restores all registers, detaches and hands back suppressed signals.

use std::time::{Duration, Instant};

use crate::maps::read_maps;
use crate::memory::Memory;
use crate::ptrace::{self, Resume};
use crate::regs::{self, FpState, Regs};
use crate::{procfs, Error, Options};

/// Our mapping in the target: one R+X page of int3 (the return address of
/// remote calls), then read-write data pages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scratch {
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

impl Scratch {
    pub(crate) fn trap(&self) -> u64 {
        self.addr
    }
    pub(crate) fn data(&self) -> u64 {
        self.addr + 4096
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// ptrace-stopped by us: we may look and change.
    Stopped,
    /// Traced but running and would not stop when asked.
    Lost,
    /// The thread (or the whole process) is gone.
    Gone(String),
    Detached,
}

pub(crate) struct RemoteThread {
    pub(crate) pid: i32,
    pub(crate) tid: i32,
    pub(crate) mem: Memory,
    /// The registers the thread gets back when we let go.
    pub(crate) resume: Regs,
    fp: Option<FpState>,
    /// Whether we have changed the thread's registers.
    pub(crate) modified: bool,
    pub(crate) syscall_insn: u64,
    pub(crate) scratch: Option<Scratch>,
    /// Signals that arrived while our code ran, to hand back at release.
    pub(crate) signals: Vec<libc::siginfo_t>,
    /// A restartable sleep in our code was interrupted: the kernel's restart
    /// block no longer belongs to the thread's own interrupted call.
    pub(crate) restart_clobbered: bool,
    pub(crate) state: State,
    pub(crate) stop_timeout: Duration,
}

/// System calls that only wait (for time, a futex, a descriptor, a child or
/// a signal): a thread asleep in one is the best place to borrow, better
/// than one in e.g. a driver's ioctl.
const WAITS: [i64; 20] = [
    libc::SYS_read,
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_pause,
    libc::SYS_nanosleep,
    libc::SYS_accept,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_wait4,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigsuspend,
    libc::SYS_futex,
    libc::SYS_clock_nanosleep,
    libc::SYS_epoll_wait,
    libc::SYS_pselect6,
    libc::SYS_ppoll,
    libc::SYS_epoll_pwait,
    libc::SYS_accept4,
    libc::SYS_epoll_pwait2,
    libc::SYS_futex_waitv,
];

/// Threads in the order we try them: asleep in a waiting system call first,
/// then asleep in another system call, stopped (T/t) in one, running (they
/// need the PTRACE_SYSCALL path), other, uninterruptible (D) last; the main
/// thread first among equals.
fn candidates(pid: i32) -> Result<Vec<i32>, Error> {
    let tids = procfs::threads(pid).map_err(|_| Error::NoSuchProcess { pid })?;
    let mut scored: Vec<(u8, i32)> = tids
        .into_iter()
        .filter_map(|tid| {
            let nr = procfs::thread_syscall(pid, tid).filter(|&nr| nr >= 0);
            let score = match (procfs::thread_state(pid, tid)?, nr) {
                ('Z' | 'X' | 'x', _) => return None,
                ('S', Some(nr)) if WAITS.contains(&nr) => 0,
                ('S', Some(_)) => 1,
                ('T' | 't', Some(_)) => 2,
                ('R', _) => 3,
                ('D', _) => 5,
                _ => 4,
            };
            Some((score, tid))
        })
        .collect();
    scored.sort_by_key(|&(score, _)| score);
    if scored.is_empty() {
        return Err(Error::NoSuchProcess { pid });
    }
    Ok(scored.into_iter().map(|(_, tid)| tid).collect())
}

impl RemoteThread {
    /// Seizes one thread of `pid` and stops it. Nothing in the target is
    /// changed yet.
    pub(crate) fn seize(pid: i32, opts: &Options) -> Result<RemoteThread, Error> {
        let mem = Memory::open(pid).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => Error::NoSuchProcess { pid },
            _ => Error::os(pid, "opening /proc/PID/mem", e),
        })?;
        for tid in candidates(pid)? {
            match ptrace::seize(tid, ptrace::PTRACE_O_TRACESYSGOOD) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    return Err(crate::preflight::explain_eperm(pid, tid))
                }
                Err(e) => return Err(Error::os(pid, format!("PTRACE_SEIZE of thread {tid}"), e)),
            }
            // SAFETY: plain integers; overwritten at the first stop.
            let resume: Regs = unsafe { std::mem::zeroed() };
            let mut t = RemoteThread {
                pid,
                tid,
                mem,
                resume,
                fp: None,
                modified: false,
                syscall_insn: 0,
                scratch: None,
                signals: Vec::new(),
                restart_clobbered: false,
                state: State::Lost,
                stop_timeout: opts.stop_timeout,
            };
            ptrace::interrupt(tid).map_err(|e| t.os_err("PTRACE_INTERRUPT", e))?;
            let deadline = Instant::now() + opts.stop_timeout;
            let Some(r) = t.wait_for(Resume::Cont, deadline, Want::EventStop)? else {
                return Err(t.timeout("the thread to stop"));
            };
            t.state = State::Stopped;
            t.resume = r;
            return Ok(t);
        }
        Err(Error::NoSuchProcess { pid })
    }

    pub(crate) fn os_err(&self, op: &str, e: std::io::Error) -> Error {
        let gone =
            || !matches!(procfs::thread_state(self.pid, self.tid), Some(s) if s != 'Z' && s != 'X');
        if e.raw_os_error() == Some(libc::ESRCH) && gone() {
            return Error::TargetExited {
                pid: self.pid,
                detail: format!("thread {} vanished during {op}", self.tid),
            };
        }
        Error::os(self.pid, format!("{op} (thread {})", self.tid), e)
    }

    pub(crate) fn timeout(&self, what: &str) -> Error {
        Error::Timeout {
            pid: self.pid,
            what: format!("{what} (thread {})", self.tid),
            ms: self.stop_timeout.as_millis(),
        }
    }

    pub(crate) fn set_regs(&mut self, r: &Regs) -> Result<(), Error> {
        self.modified = true;
        regs::set(self.tid, r).map_err(|e| self.os_err("PTRACE_SETREGS", e))
    }

    /// Brings the thread to a system-call boundary: where it already is when
    /// it was stopped inside a system call; otherwise let it run (PTRACE_SYSCALL)
    /// to its next system call, cancel that call and remember to replay it.
    fn sync_to_syscall(&mut self) -> Result<(), Error> {
        if (self.resume.orig_rax as i64) >= 0 {
            return Ok(());
        }
        let deadline = Instant::now() + self.stop_timeout;
        ptrace::resume(self.tid, Resume::Syscall, 0)
            .map_err(|e| self.os_err("PTRACE_SYSCALL", e))?;
        self.state = State::Lost;
        let Some(mut r) = self.wait_for(Resume::Syscall, deadline, Want::SyscallEntry)? else {
            // It ran user code only: stop it again where it is and give up.
            ptrace::interrupt(self.tid).map_err(|e| self.os_err("PTRACE_INTERRUPT", e))?;
            let again = Instant::now() + self.stop_timeout;
            if let Some(r) = self.wait_for(Resume::Cont, again, Want::EventStop)? {
                self.resume = r;
                self.state = State::Stopped;
            }
            return Err(self.timeout("the thread to make a system call"));
        };
        self.state = State::Stopped;
        // At syscall entry: rip is past the 2-byte `syscall`, orig_rax the
        // number. The thread gets back a state in which it executes that
        // instruction again, with the same arguments.
        let mut replay = r;
        replay.rip = replay.rip.wrapping_sub(2);
        replay.rax = r.orig_rax;
        replay.orig_rax = u64::MAX;
        self.resume = replay;
        // Cancel the call now (orig_rax = -1) and move to its exit stop.
        r.orig_rax = u64::MAX;
        self.set_regs(&r)?;
        ptrace::resume(self.tid, Resume::Syscall, 0)
            .map_err(|e| self.os_err("PTRACE_SYSCALL", e))?;
        self.state = State::Lost;
        if self
            .wait_for(Resume::Syscall, deadline, Want::SyscallExit)?
            .is_none()
        {
            return Err(self.timeout("the cancelled system call to return"));
        }
        self.state = State::Stopped;
        Ok(())
    }

    /// Gets the thread ready to run our code: at a system-call boundary, FP
    /// state saved, a `syscall` instruction found, and a scratch area of one
    /// code page plus at least `data_len` bytes mapped.
    pub(crate) fn prepare(&mut self, data_len: usize) -> Result<Scratch, Error> {
        self.sync_to_syscall()?;
        self.fp = Some(
            regs::get_fp(self.tid).map_err(|e| self.os_err("reading the FP/vector state", e))?,
        );
        let maps = read_maps(self.pid).map_err(|e| self.os_err("reading maps", e))?;
        let vdso = maps.iter().filter(|m| m.path == "[vdso]");
        let libc = maps
            .iter()
            .filter(|m| m.executable() && m.file_name().starts_with("libc"));
        self.syscall_insn = vdso
            .chain(libc)
            .find_map(|m| self.mem.find_syscall_insn(m.start, m.end))
            .ok_or_else(|| Error::Unexpected {
                pid: self.pid,
                detail: "no syscall instruction found in the vdso or libc".into(),
            })?;
        let len = 4096 + (data_len.max(1) as u64).div_ceil(4096) * 4096;
        let prot_rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let addr = self.syscall_ok(
            "mmap",
            libc::SYS_mmap,
            [0, len, prot_rw, flags, u64::MAX, 0],
        )?;
        let scratch = Scratch { addr, len };
        self.scratch = Some(scratch);
        self.mem
            .write(scratch.trap(), &[0xcc; 4096])
            .map_err(|e| self.os_err("writing the scratch page", e))?;
        let prot_rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        self.syscall_ok(
            "mprotect",
            libc::SYS_mprotect,
            [addr, 4096, prot_rx, 0, 0, 0],
        )?;
        Ok(scratch)
    }

    /// Writes `bytes` into the scratch data area at `offset`; returns the address.
    pub(crate) fn put(&self, offset: u64, bytes: &[u8]) -> Result<u64, Error> {
        let s = self.scratch.ok_or_else(|| Error::Unexpected {
            pid: self.pid,
            detail: "no scratch area".into(),
        })?;
        let addr = s.data() + offset;
        if addr + bytes.len() as u64 > s.addr + s.len {
            return Err(Error::Unexpected {
                pid: self.pid,
                detail: "scratch area too small".into(),
            });
        }
        self.mem
            .write(addr, bytes)
            .map_err(|e| self.os_err("writing target memory", e))?;
        Ok(addr)
    }

    /// Unmaps the scratch area, restores registers and FP state, detaches and
    /// hands back suppressed signals. Idempotent; also run by Drop.
    pub(crate) fn release(&mut self) -> Result<(), Error> {
        if self.state == State::Lost {
            // Ask once more for a stop; without one we cannot restore anything.
            let deadline = Instant::now() + self.stop_timeout;
            if ptrace::interrupt(self.tid).is_ok() {
                if let Ok(Some(_)) = self.wait_for(Resume::Cont, deadline, Want::EventStop) {
                    self.state = State::Stopped;
                }
            }
        }
        match self.state {
            State::Stopped => {}
            State::Lost => return Err(self.timeout("the thread to stop before detaching")),
            State::Gone(_) | State::Detached => return Ok(()),
        }
        let mut result = Ok(());
        if let Some(s) = self.scratch.take() {
            if let Err(e) = self.syscall_ok("munmap", libc::SYS_munmap, [s.addr, s.len, 0, 0, 0, 0])
            {
                if matches!(e, Error::TargetExited { .. }) || self.state != State::Stopped {
                    return Err(e);
                }
                result = Err(e);
            }
        }
        if self.modified {
            let mut r = self.resume;
            if self.restart_clobbered
                && (r.rax as i64).wrapping_neg() == regs::ERESTART_RESTARTBLOCK
                && (r.orig_rax as i64) >= 0
            {
                // Its restart would run our call's restart block: fail the
                // interrupted call with EINTR instead.
                r.rax = (-libc::EINTR as i64) as u64;
            }
            if let Some(fp) = &self.fp {
                regs::set_fp(self.tid, fp)
                    .map_err(|e| self.os_err("restoring the FP/vector state", e))?;
            }
            regs::set(self.tid, &r).map_err(|e| self.os_err("restoring registers", e))?;
        }
        ptrace::detach(self.tid, 0).map_err(|e| self.os_err("PTRACE_DETACH", e))?;
        self.state = State::Detached;
        crate::signals::redeliver(self.pid, self.tid, std::mem::take(&mut self.signals));
        result
    }
}

impl Drop for RemoteThread {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The stop a wait is for; every other stop is handled and waited past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// PTRACE_EVENT_STOP (after PTRACE_INTERRUPT, or a group-stop).
    EventStop,
    SyscallEntry,
    SyscallExit,
    /// A kernel-made SIGTRAP with rip at this address (single-step done, or
    /// int3 hit).
    Trap(u64),
}

#[cfg(test)]
#[path = "thread_tests.rs"]
mod tests;
