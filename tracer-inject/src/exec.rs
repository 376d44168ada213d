//! Running code in a seized thread: the stop-handling loop, remote system
//! calls (single-step over an existing `syscall` instruction) and remote
//! function calls (return address = an int3 in our scratch page).

use std::io;
use std::time::{Duration, Instant};

use crate::ptrace::{self, Resume, Stop};
use crate::regs::{self, Regs};
use crate::thread::{RemoteThread, State, Want};
use crate::Error;

/// Synchronous fault signals: when the kernel raises one while our code
/// runs, our code is at fault.
const FAULTS: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGSYS,
];

/// si_code of kernel-made signals is positive (TRAP_BRKPT, TRAP_TRACE, SI_KERNEL).
fn from_kernel(info: &libc::siginfo_t) -> bool {
    info.si_code > 0
}

impl RemoteThread {
    /// Waits for the stop `want`, resuming the thread with `how` past every
    /// other stop, until `deadline` (`Ok(None)`: timed out, thread running).
    ///
    /// Signals for the target: passed on at once while we have not changed
    /// anything (the thread runs its own code); once we have, suppressed and
    /// kept, to be sent again at release. Group-stops are noted and waited
    /// past: the thread rejoins the stop when we detach.
    pub(crate) fn wait_for(
        &mut self,
        how: Resume,
        deadline: Instant,
        want: Want,
    ) -> Result<Option<Regs>, Error> {
        loop {
            let stop = ptrace::wait(self.tid, deadline).map_err(|e| self.os_err("waitpid", e))?;
            let Some(stop) = stop else {
                return Ok(None);
            };
            let mut pass_sig = 0;
            match stop {
                Stop::Exited { .. } => {
                    let detail = format!("thread {} {}", self.tid, stop.describe());
                    self.state = State::Gone(detail.clone());
                    return Err(Error::TargetExited {
                        pid: self.pid,
                        detail,
                    });
                }
                Stop::Event { .. } if want == Want::EventStop => {
                    return self.stopped_regs().map(Some)
                }
                Stop::Syscall if matches!(want, Want::SyscallEntry | Want::SyscallExit) => {
                    let op = ptrace::syscall_info_op(self.tid)
                        .map_err(|e| self.os_err("PTRACE_GET_SYSCALL_INFO", e))?;
                    if (op == ptrace::PTRACE_SYSCALL_INFO_ENTRY) == (want == Want::SyscallEntry) {
                        return self.stopped_regs().map(Some);
                    }
                }
                Stop::Signal { sig } => {
                    let info = ptrace::siginfo(self.tid)
                        .map_err(|e| self.os_err("PTRACE_GETSIGINFO", e))?;
                    if self.modified && from_kernel(&info) && FAULTS.contains(&sig) {
                        // A fault of our code: never deliver it (it would
                        // kill the target); stop here, to be restored.
                        self.state = State::Stopped;
                        // SAFETY: si_addr is valid to read for these signals.
                        let addr = unsafe { info.si_addr() } as u64;
                        return Err(Error::RemoteFault {
                            pid: self.pid,
                            signal: sig,
                            addr,
                        });
                    }
                    if sig == libc::SIGTRAP && from_kernel(&info) && self.modified {
                        // Our single-step or int3: ours whatever the address;
                        // the target never gets it.
                        if let Want::Trap(rip) = want {
                            let r = self.stopped_regs()?;
                            if r.rip == rip {
                                return Ok(Some(r));
                            }
                        }
                    } else if self.modified {
                        let r = self.stopped_regs()?;
                        self.note_restart(&r);
                        self.signals.push(info);
                    } else {
                        pass_sig = sig;
                    }
                }
                Stop::Event { .. } | Stop::Syscall | Stop::Other { .. } => {}
            }
            ptrace::resume(self.tid, how, pass_sig).map_err(|e| self.os_err("resuming", e))?;
            self.state = State::Lost;
        }
    }

    fn stopped_regs(&mut self) -> Result<Regs, Error> {
        self.state = State::Stopped;
        regs::get(self.tid).map_err(|e| self.os_err("PTRACE_GETREGS", e))
    }

    /// A stop inside our code that shows a restartable sleep interrupted:
    /// the thread's restart block now belongs to our call.
    fn note_restart(&mut self, r: &Regs) {
        if regs::restarting(r) && (r.rax as i64).wrapping_neg() == regs::ERESTART_RESTARTBLOCK {
            self.restart_clobbered = true;
        }
    }

    /// After a timeout with the thread running our code: PTRACE_INTERRUPT it
    /// and wait for the stop, so that it can be restored.
    fn stop_after_timeout(&mut self) -> Result<(), Error> {
        ptrace::interrupt(self.tid).map_err(|e| self.os_err("PTRACE_INTERRUPT", e))?;
        let deadline = Instant::now() + self.stop_timeout;
        match self.wait_for(Resume::Cont, deadline, Want::EventStop)? {
            Some(r) => {
                self.note_restart(&r);
                Ok(())
            }
            None => Err(self.timeout("the thread to stop after PTRACE_INTERRUPT")),
        }
    }

    /// Runs system call `nr` in the thread; returns the raw result (a
    /// negative errno on failure). A call the kernel would restart
    /// (interrupted before it did anything) is run again.
    pub(crate) fn syscall(&mut self, name: &str, nr: i64, args: [u64; 6]) -> Result<i64, Error> {
        let insn = self.syscall_insn;
        for _ in 0..16 {
            let r = regs::for_syscall(&self.resume, insn, nr, args);
            self.set_regs(&r)?;
            ptrace::resume(self.tid, Resume::Step, 0)
                .map_err(|e| self.os_err("PTRACE_SINGLESTEP", e))?;
            self.state = State::Lost;
            let deadline = Instant::now() + self.stop_timeout;
            let Some(out) = self.wait_for(Resume::Step, deadline, Want::Trap(insn + 2))? else {
                self.stop_after_timeout()?;
                return Err(self.timeout(&format!("remote {name}")));
            };
            let ret = out.rax as i64;
            if regs::restarting(&out) {
                continue;
            }
            return Ok(ret);
        }
        Err(Error::Unexpected {
            pid: self.pid,
            detail: format!("remote {name} interrupted again and again"),
        })
    }

    /// Like `syscall`, with a negative result turned into an error.
    pub(crate) fn syscall_ok(
        &mut self,
        name: &'static str,
        nr: i64,
        args: [u64; 6],
    ) -> Result<u64, Error> {
        let ret = self.syscall(name, nr, args)?;
        if (-4095..0).contains(&ret) {
            return Err(Error::RemoteSyscall {
                pid: self.pid,
                syscall: name,
                source: io::Error::from_raw_os_error(-ret as i32),
            });
        }
        Ok(ret as u64)
    }

    /// Calls `func(args...)` in the thread, on its own stack below the red
    /// zone, and returns rax. On timeout the call is interrupted and
    /// abandoned (the thread is stopped again, ready to be restored).
    pub(crate) fn call(
        &mut self,
        what: &str,
        func: u64,
        args: &[u64],
        timeout: Duration,
    ) -> Result<u64, Error> {
        let scratch = self.scratch.ok_or_else(|| Error::Unexpected {
            pid: self.pid,
            detail: "no scratch area for a call".into(),
        })?;
        let sp = regs::call_sp(self.resume.rsp);
        self.mem
            .write(sp, &scratch.trap().to_ne_bytes())
            .map_err(|e| self.os_err("writing the return address", e))?;
        let r = regs::for_call(&self.resume, func, sp, args);
        self.set_regs(&r)?;
        ptrace::resume(self.tid, Resume::Cont, 0).map_err(|e| self.os_err("PTRACE_CONT", e))?;
        self.state = State::Lost;
        let deadline = Instant::now() + timeout;
        match self.wait_for(Resume::Cont, deadline, Want::Trap(scratch.trap() + 1))? {
            Some(out) => Ok(out.rax),
            None => {
                self.stop_after_timeout()?;
                Err(Error::CallTimeout {
                    pid: self.pid,
                    what: what.to_string(),
                    ms: timeout.as_millis(),
                })
            }
        }
    }

    /// Calls a function returning a C string pointer (dlerror) and reads it.
    pub(crate) fn call_for_string(
        &mut self,
        what: &str,
        func: u64,
        timeout: Duration,
    ) -> Result<String, Error> {
        let ptr = self.call(what, func, &[], timeout)?;
        if ptr == 0 {
            return Ok("(no error message)".into());
        }
        let bytes = self
            .mem
            .read_cstr(ptr, 4096)
            .map_err(|e| self.os_err("reading a string", e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
