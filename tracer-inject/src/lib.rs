//! Load a shared library into a running x86-64 Linux process, call functions
//! in it, and unload it again — with ptrace, without the process's help, and
//! without writing anything to its file system.
//!
//! ```no_run
//! # fn main() -> Result<(), tracer_inject::Error> {
//! use tracer_inject::{call, load, unload, Library, Options};
//! let bytes = std::fs::read("libagent.so").unwrap();
//! let opts = Options::default();
//! let lib = load(1234, &Library { bytes: &bytes, name: "gputrace-agent" }, &opts)?;
//! let ret = call(1234, &lib, "agent_start", b"config", &opts)?;
//! unload(1234, &lib, &opts)?;
//! # let _ = ret; Ok(()) }
//! ```
//!
//! # How
//!
//! Each of [`load`], [`call`] and [`unload`] runs [`preflight`] (checks that
//! need no stop), then `PTRACE_SEIZE`s **one** thread of the target and
//! `PTRACE_INTERRUPT`s it; the other threads keep running. The thread chosen
//! is preferably one asleep in a system call, best one that only waits
//! (futex, poll, nanosleep, read, ...): it is then stopped at a system-call
//! boundary and, normally, inside no user-space critical section; if every
//! thread is running, one is let run with `PTRACE_SYSCALL` to its next
//! system call (within [`Options::stop_timeout`]), which is cancelled and
//! replayed at the end. Its seccomp filter is checked before anything is
//! changed. Then all registers and the whole XSAVE state are saved; system
//! calls are made by single-stepping over an existing `syscall` instruction
//! (vDSO or libc), never by writing into the target's code; a scratch
//! mapping (one R+X page of `int3`, plus data pages) is mapped with a remote
//! `mmap`; functions are called on the thread's own stack below the 128-byte
//! red zone with the return address pointing at the `int3`.
//!
//! `load` creates a memfd in the target (`memfd_create(name, MFD_CLOEXEC)`),
//! writes the library into it from our side through `/proc/PID/fd/N`, calls
//! `dlopen("/proc/self/fd/N", RTLD_NOW | RTLD_LOCAL)` in the target (so the
//! library's constructors run in the target, in the seized thread), and
//! closes the descriptor; this works for processes in other mount namespaces
//! (containers). The library shows in /proc/PID/maps as
//! `/memfd:NAME (deleted)`.
//!
//! At the end the scratch mapping is unmapped, the registers and FP state are
//! restored exactly, and the thread is detached. A thread that was inside a
//! system call gets back the kernel's "restart" state: a `read` on a pipe
//! goes on waiting for its data, a `nanosleep` sleeps until its original
//! deadline.
//!
//! # Signals and job control
//!
//! A signal that arrives while our code runs in the thread is not delivered
//! then (its handler must not run in the middle of `dlopen`): it is kept and
//! sent again to the thread when we detach, in order, each standard signal
//! only once the previous instance was taken (so none is merged away).
//! Queued signals keep their siginfo; others are re-sent with `tgkill`, so
//! their handler sees us as the sender. A group-stop (SIGSTOP to the
//! target) while we work does not stop our thread until we detach; it then
//! joins the stop.
//!
//! # Timeouts, and the state left behind
//!
//! [`Options::stop_timeout`] bounds every wait for a stop (seizing, a remote
//! system call, reaching a system call); [`Options::call_timeout`] bounds each
//! remote function call (`dlopen` with the library's constructors, `dlsym`,
//! the called function, `dlclose` with destructors). A call that does not
//! return in time is interrupted and **abandoned**: the thread is put back
//! exactly where it was, the scratch mapping unmapped, and
//! [`Error::CallTimeout`] returned. What the abandoned function had done
//! stays done: memory it allocated, locks it held (an abandoned `dlopen` or
//! `dlclose` leaves the dynamic loader's lock held, so later `dlopen`s in the
//! target would hang), a half-run constructor. The library stays loaded
//! after an abandoned [`call`]. If one of our calls was interrupted inside a
//! restartable sleep (`nanosleep`, a futex or `poll` with a timeout: because
//! it was abandoned, or by a signal we held back), the kernel's restart
//! record of the thread's own interrupted sleep is lost: that sleep (if the
//! thread was in one) then fails with `EINTR` instead of being restarted.
//!
//! A fault in our code (SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGSYS raised by
//! the kernel while the library's code or the loader runs) is never
//! delivered to the target: the call is abandoned at once, as on a timeout,
//! and [`Error::RemoteFault`] returned.
//!
//! A thread that does not stop even after `PTRACE_INTERRUPT` (stuck in an
//! uninterruptible sleep for longer than `stop_timeout`) cannot be restored:
//! it stays traced by the calling thread until that thread exits.
//!
//! If the target exits meanwhile, [`Error::TargetExited`] is returned.
//!
//! # Limits
//!
//! A process whose main thread has exited (a zombie thread-group leader
//! with live threads) is refused as [`Error::NoSuchProcess`].
//!
//! The target must use glibc (dl* in libc.so.6, or libdl.so.2 before 2.34)
//! or musl (untested). `dlopen` etc. are called in a thread that was stopped
//! at a system call: if that thread holds a user-space lock that `dlopen` or
//! the library's constructor needs (e.g. the loader lock), the call will time
//! out. The called functions run on that thread's stack (it needs a few
//! KiB). Calls must be made from the same thread throughout one operation
//! (each public function is one operation; ptrace ties the tracee to the
//! calling thread).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use std::time::Duration;

mod error;
pub use error::Error;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bpf;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod exec;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod inject;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod maps;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod memory;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod preflight;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod procfs;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod ptrace;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod regs;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod seccomp;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod signals;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod symbols;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod thread;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use seccomp::default_syscalls;

/// The system calls checked against a seccomp filter by default (none on
/// hosts this crate does not support).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub fn default_syscalls() -> Vec<(&'static str, i64)> {
    Vec::new()
}

/// A shared library to load.
#[derive(Debug, Clone, Copy)]
pub struct Library<'a> {
    /// The ELF shared object (x86-64, `-shared -fPIC`).
    pub bytes: &'a [u8],
    /// Name of the memfd it is put in: the target's /proc/PID/maps shows
    /// `/memfd:NAME (deleted)`. At most 249 bytes.
    pub name: &'a str,
}

/// A library loaded by [`load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The `dlopen` handle in the target.
    pub handle: u64,
    /// Load address (= load bias; the library's first mapping).
    pub base: u64,
    /// The path given to `dlopen`, e.g. `/proc/self/fd/5`.
    pub path: String,
    /// The memfd name ([`Library::name`]).
    pub name: String,
}

/// Timeouts and checks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Longest wait for a thread to stop when asked, to finish one remote
    /// system call, or to reach a system call when none is asleep in one.
    pub stop_timeout: Duration,
    /// Longest wait for one remote function call (dlopen with constructors,
    /// the called function, dlclose with destructors).
    pub call_timeout: Duration,
    /// System calls (name for messages, x86-64 number) that the target's
    /// seccomp filter must allow; [`default_syscalls`] by default.
    pub seccomp_syscalls: Vec<(&'static str, i64)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            stop_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(10),
            seccomp_syscalls: default_syscalls(),
        }
    }
}

/// Every check that can be made without stopping the target: it exists, is
/// a 64-bit x86-64 program, is not traced already, can be ptraced by us
/// (YAMA, capabilities, credentials), has no seccomp filter we could not
/// read, and has a `dlopen` (not statically linked). The seccomp filter
/// itself can only be read from a stopped thread: `load` checks it then,
/// before changing anything.
pub fn preflight(pid: i32) -> Result<(), Error> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return preflight::check(pid).map(drop);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return Err(Error::UnsupportedHost);
}

/// Loads `lib` into process `pid` (see the crate docs for how); its
/// constructors run in the target before this returns.
pub fn load(pid: i32, lib: &Library, opts: &Options) -> Result<Loaded, Error> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return inject::load(pid, lib, opts);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return Err(Error::UnsupportedHost);
}

/// Calls `symbol` of a loaded library in the target as
/// `int64_t symbol(const void *arg)`, where `arg` points at a copy of `arg`
/// in the target's memory (NULL when `arg` is empty), 16-byte aligned and
/// valid only during the call; returns what the function returned.
pub fn call(
    pid: i32,
    loaded: &Loaded,
    symbol: &str,
    arg: &[u8],
    opts: &Options,
) -> Result<i64, Error> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return inject::call(pid, loaded, symbol, arg, opts);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return Err(Error::UnsupportedHost);
}

/// `dlclose`s a loaded library in the target (its destructors run). The
/// library is unmapped unless something else holds it (e.g. it was linked
/// `-z nodelete`, or another dlopen of it).
pub fn unload(pid: i32, loaded: &Loaded, opts: &Options) -> Result<(), Error> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return inject::unload(pid, loaded, opts);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return Err(Error::UnsupportedHost);
}

/// Address of `symbol` of a loaded library in the target, from the ELF
/// dynamic symbol table of its mapping; the target is not stopped.
pub fn symbol_address(pid: i32, loaded: &Loaded, symbol: &str) -> Result<u64, Error> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return inject::symbol_address(pid, loaded, symbol);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return Err(Error::UnsupportedHost);
}
