//! Running a helper process that loads code gputrace does not control (the
//! calibration helper), so that neither it nor anything it starts can hold
//! gputrace up or outlive it:
//!
//! - it starts as the init of a PID namespace of its own (`clone` with
//!   `CLONE_NEWPID`): when it ends, or is killed at its deadline, the kernel
//!   kills every process left in the namespace: a daemon its code forked,
//!   double-forked and `setsid` included. It gets a mount namespace too,
//!   with a /proc of its PID namespace (NVIDIA's libcuda reads
//!   `/proc/<its own PID>`: `cuInit` fails with 304 under another /proc). Where no namespace can be made
//!   (no CAP_SYS_ADMIN, as in some containers), it starts in a process
//!   group of its own, killed whole at the end, and whatever still holds
//!   its output pipe then (a descendant that left the group) is found in
//!   /proc and killed;
//! - its output is read against the deadline, never to end of file: a
//!   descendant that keeps the pipe open delays nothing;
//! - it dies with the thread that started it (`PR_SET_PDEATHSIG`).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to run.
pub(crate) struct HelperCommand<'a> {
    pub exe: &'a Path,
    pub args: Vec<OsString>,
    /// `None`: our environment; else exactly these `NAME=value` entries.
    pub env: Option<Vec<OsString>>,
    /// A descriptor of ours the helper keeps (all others are close-on-exec).
    pub keep_fd: Option<RawFd>,
    /// Start in `/`.
    pub root_dir: bool,
}

/// How the helper ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It exited (or was killed by a signal of its own doing): the wait status.
    Exited(i32),
    /// Still running at the deadline: killed, with all it started.
    TimedOut,
    /// Asked to stop (gputrace is ending): killed, with all it started.
    Cancelled,
    /// It wrote more than the caller reads: killed, with all it started.
    TooMuch,
}

/// What the helper wrote on stdout, and how it ended.
pub(crate) struct Output {
    pub stdout: Vec<u8>,
    pub ended: Ended,
}

fn c_string(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("a NUL byte in an argument"))
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Everything the child needs, prepared before the fork (it may only make
/// system calls after it).
struct Prepared {
    path: CString,
    _args: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _env: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    root: CString,
    proc_fs: CString,
    proc_dir: CString,
}

fn prepare(cmd: &HelperCommand<'_>) -> std::io::Result<Prepared> {
    let path = c_string(cmd.exe.as_os_str())?;
    let mut args = vec![path.clone()];
    for a in &cmd.args {
        args.push(c_string(a)?);
    }
    let env: Vec<CString> = match &cmd.env {
        Some(e) => e.iter().map(|kv| c_string(kv)).collect::<Result<_, _>>()?,
        None => std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend(v.into_vec());
                CString::new(kv).map_err(|_| std::io::Error::other("a NUL byte in the environment"))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    Ok(Prepared {
        path,
        _args: args,
        argv,
        _env: env,
        envp,
        root: CString::new("/").expect("no NUL"),
        proc_fs: CString::new("proc").expect("no NUL"),
        proc_dir: CString::new("/proc").expect("no NUL"),
    })
}

/// `fork`, in a new PID namespace when `flags` says so: the child's PID in
/// ours, 0 in the child.
fn clone_child(flags: libc::c_ulong) -> std::io::Result<libc::pid_t> {
    // SAFETY: clone without CLONE_VM and without a new stack is fork: the
    // child gets a copy of this thread's memory and continues here. It only
    // makes system calls on memory prepared before (see `child`).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if r < 0 {
        return Err(last_error());
    }
    Ok(r as libc::pid_t)
}

/// The child's side, up to exec. Never returns.
///
/// # Safety
/// Only after `clone_child` returned 0; `p`, `out` and `null` prepared and
/// open before it.
unsafe fn child(
    p: &Prepared,
    out: RawFd,
    null: RawFd,
    keep: Option<RawFd>,
    root_dir: bool,
    own_group: bool,
) -> ! {
    // SAFETY: async-signal-safe system calls only, on memory and
    // descriptors prepared before the fork (see the function's contract).
    unsafe {
        if own_group {
            libc::setpgid(0, 0);
        } else {
            // In its own PID and mount namespaces: a /proc of its own, the
            // change kept from the host's mounts. (Should it fail, the
            // helper runs with the host's /proc and says what failed.)
            libc::mount(
                std::ptr::null(),
                p.root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            libc::mount(
                p.proc_fs.as_ptr(),
                p.proc_dir.as_ptr(),
                p.proc_fs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            );
        }
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // gputrace ignores SIGPIPE; an ignored signal stays ignored across exec.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if libc::dup2(null, 0) < 0 || libc::dup2(out, 1) < 0 || libc::dup2(null, 2) < 0 {
            libc::_exit(126);
        }
        if let Some(fd) = keep {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                libc::_exit(126);
            }
        }
        if root_dir && libc::chdir(p.root.as_ptr()) < 0 {
            libc::_exit(126);
        }
        libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        libc::_exit(127)
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_error());
    }
    // SAFETY: both descriptors were just made and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A started helper.
struct Running {
    pid: libc::pid_t,
    namespace: bool,
    out: OwnedFd,
    /// How it ended, once it has (not reaped yet: its PID, and its process
    /// group's id, stay ours until [`Running::kill`]).
    exited: Option<i32>,
    reaped: bool,
}

/// Starts `cmd`: in a PID namespace of its own where the kernel lets us
/// (and `namespace` asks for one), else in a process group of its own.
fn start(cmd: &HelperCommand<'_>, namespace: bool) -> std::io::Result<Running> {
    let p = prepare(cmd)?;
    let (read, write) = pipe()?;
    let null = crate::host::fd::open(Path::new("/dev/null"), libc::O_RDWR)?;
    let spawn = |flags: libc::c_ulong, own_group: bool| -> std::io::Result<libc::pid_t> {
        let pid = clone_child(flags)?;
        if pid == 0 {
            // SAFETY: in the child just cloned; everything was prepared before.
            unsafe {
                child(
                    &p,
                    write.as_raw_fd(),
                    null.as_raw_fd(),
                    cmd.keep_fd,
                    cmd.root_dir,
                    own_group,
                )
            }
        }
        Ok(pid)
    };
    let in_namespace = if namespace {
        spawn(
            (libc::CLONE_NEWPID | libc::CLONE_NEWNS) as libc::c_ulong,
            false,
        )
        .ok()
    } else {
        None
    };
    let (pid, namespace) = match in_namespace {
        Some(pid) => (pid, true),
        // No namespace for us (EPERM without CAP_SYS_ADMIN, EINVAL, ENOSPC
        // at the nesting or count limits): a process group then.
        None => (spawn(0, true)?, false),
    };
    drop(write);
    remember_helper(pid as u32);
    // SAFETY: fcntl on our read end.
    unsafe {
        let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok(Running {
        pid,
        namespace,
        out: read,
        exited: None,
        reaped: false,
    })
}

impl Running {
    /// Whether the helper has exited (its exit code, or 128 + the signal
    /// that killed it); it is left to be reaped.
    fn try_wait(&mut self) -> Option<i32> {
        if self.exited.is_none() {
            // SAFETY: zeroed siginfo is a valid out-buffer for waitid.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid on our own child, not reaped (WNOWAIT).
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid and si_status are set by a waitid that found
            // a child (si_pid 0 else).
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if r < 0 {
                self.exited = Some(-1);
            } else if pid == self.pid {
                self.exited = Some(if info.si_code == libc::CLD_EXITED {
                    status
                } else {
                    128 + status
                });
            }
        }
        self.exited
    }

    /// Reaps the helper once it has exited; false if it has not.
    fn reap(&mut self) -> bool {
        if !self.reaped {
            let mut status = 0;
            // SAFETY: our own child, not reaped yet.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            self.reaped = r == self.pid || r < 0;
        }
        self.reaped
    }

    /// Reads what is there now; false at end of file.
    fn read_some(&mut self, buf: &mut Vec<u8>) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            // SAFETY: reading into a local buffer from our own descriptor.
            let n =
                unsafe { libc::read(self.out.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            match n {
                0 => return false,
                n if n > 0 => buf.extend_from_slice(&chunk[..n as usize]),
                _ => match last_error().kind() {
                    std::io::ErrorKind::Interrupted => {}
                    // Nothing more now.
                    std::io::ErrorKind::WouldBlock => return true,
                    _ => return false,
                },
            }
        }
    }

    /// Waits until there is something to read or `wait` has passed.
    fn poll(&self, wait: Duration) {
        let mut fds = libc::pollfd {
            fd: self.out.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().clamp(1, 50) as libc::c_int;
        // SAFETY: one pollfd on our own descriptor.
        unsafe { libc::poll(&mut fds, 1, ms) };
    }

    /// Kills the helper and everything it started, and reaps it.
    fn kill(&mut self, pipe_open: bool) {
        // SAFETY: signals to our own child and its process group, before it
        // is reaped: its PID, which is the group's id, is not reused until
        // then.
        unsafe {
            if !self.namespace {
                libc::kill(-self.pid, libc::SIGKILL);
            }
            libc::kill(self.pid, libc::SIGKILL);
        }
        let until = Instant::now() + Duration::from_secs(1);
        while !self.reap() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !self.reaped {
            // Stuck in the kernel (a driver call): reaped when it returns.
            let pid = self.pid;
            std::thread::spawn(move || {
                let mut status = 0;
                // SAFETY: our own child, which nothing else waits for.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            });
        }
        if !self.namespace && pipe_open {
            kill_holders(&self.out);
        }
    }
}

/// The helpers this process started (host PID, start time in clock
/// ticks), the last [`HELPERS_KEPT`]: node mode's probes fire in them too
/// (a calibration calls the library it finds offsets in), and their calls
/// are not the node's ([`is_helper`]).
static HELPERS: std::sync::Mutex<std::collections::VecDeque<(u32, u64)>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());
const HELPERS_KEPT: usize = 64;

fn remember_helper(pid: u32) {
    // Not reaped yet: its /proc entry is there, even if it exited.
    let Some(st) = crate::host::discover::stat(pid) else {
        return;
    };
    let mut h = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
    if h.len() == HELPERS_KEPT {
        h.pop_front();
    }
    h.push_back((pid, st.start_ticks));
}

/// Whether `pid` is (or was: its calls may be read after it ended) a
/// helper this process started, and not a later process given its PID.
pub(crate) fn is_helper(pid: u32) -> bool {
    let h = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(&(_, start)) = h.iter().rev().find(|(p, _)| *p == pid) else {
        return false;
    };
    drop(h);
    crate::host::discover::stat(pid).is_none_or(|st| st.start_ticks == start)
}

/// Runs `cmd` for at most `timeout`, reading at most `max` bytes of its
/// stdout; `cancel` stops it early. The helper and all it started are gone
/// when this returns (see the module's notes for where that needs the
/// kernel's help).
pub(crate) fn run(
    cmd: &HelperCommand<'_>,
    timeout: Duration,
    max: usize,
    cancel: &AtomicBool,
) -> std::io::Result<Output> {
    run_in(cmd, timeout, max, cancel, true)
}

/// [`run`]; `namespace`: try a PID namespace first.
fn run_in(
    cmd: &HelperCommand<'_>,
    timeout: Duration,
    max: usize,
    cancel: &AtomicBool,
    namespace: bool,
) -> std::io::Result<Output> {
    let mut h = start(cmd, namespace)?;
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut open = true;
    let ended = loop {
        if let Some(status) = h.try_wait() {
            // What it wrote is in the pipe now; a descendant may keep it open.
            if open {
                open = h.read_some(&mut out);
            }
            break Ended::Exited(status);
        }
        if out.len() > max {
            break Ended::TooMuch;
        }
        if cancel.load(Ordering::Relaxed) {
            break Ended::Cancelled;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Ended::TimedOut;
        }
        if open {
            h.poll(left);
            open = h.read_some(&mut out);
        } else {
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    };
    h.kill(open);
    out.truncate(max);
    Ok(Output { stdout: out, ended })
}

/// Kills every process that holds `pipe` (our read end's pipe) open: what
/// is left of a helper that ran without a PID namespace, once its group is
/// killed. Each is signalled through a pidfd taken before its descriptors
/// are looked at, so a PID reused meanwhile is not hit, and waited for.
fn kill_holders(pipe: &OwnedFd) {
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{}", pipe.as_raw_fd())) else {
        return;
    };
    use std::os::unix::fs::MetadataExt;
    let link = format!("pipe:[{}]", meta.ino());
    let me = std::process::id();
    let mut killed = Vec::new();
    for pid in crate::host::discover::all_pids() {
        if pid == me {
            continue;
        }
        // SAFETY: pidfd_open with a PID and no flags; the result is checked.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            continue;
        }
        // SAFETY: a descriptor just made, owned here.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        if holds(pid, &link) {
            // SAFETY: a signal through a pidfd we hold.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            killed.push(pidfd);
        }
    }
    // Gone when this returns (a pidfd is readable once its process has
    // exited), within a second.
    let until = Instant::now() + Duration::from_secs(1);
    for pidfd in killed {
        let left = until.saturating_duration_since(Instant::now());
        let mut fds = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a pidfd we hold.
        unsafe { libc::poll(&mut fds, 1, left.as_millis() as libc::c_int) };
    }
}

/// Whether process `pid` has a descriptor whose link reads `link`.
fn holds(pid: u32, link: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == link))
}

#[cfg(test)]
#[path = "confine_tests.rs"]
mod tests;
