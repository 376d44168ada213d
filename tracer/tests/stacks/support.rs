//! Helpers of the stack tests: building fixtures, stopping a thread with
//! ptrace to read its registers (what a uprobe's pt_regs gives the probe)
//! and copying its stack (what the probe will copy).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stacks/fixtures")
        .join(name)
}

/// A fresh scratch directory for one test.
pub(crate) fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gputrace-stacks-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a scratch directory");
    dir
}

pub(crate) fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process killed when dropped (a failed assertion must not leave a
/// spinning fixture behind).
pub(crate) struct Fixture(pub Child);

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Fixture {
    /// Starts `cmd` with piped stdin/stdout and waits for the line `ready`.
    pub(crate) fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the fixture's first line");
        assert_eq!(line.trim(), "ready", "the fixture said {line:?}");
        Fixture(child)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// The registers and stack of one thread, stopped until this is dropped.
pub(crate) struct Stopped {
    tid: u32,
    pub regs: libc::user_regs_struct,
    /// Bytes from `regs.rsp` up to the end of the stack mapping (at most
    /// `max`).
    pub stack: Vec<u8>,
}

/// Stops thread `tid` of process `pid` with ptrace, reads its registers and
/// up to `max` bytes of stack from its stack pointer; the thread stays
/// stopped until the result is dropped.
/// `ready(regs)` may refuse a stop (the thread was not where the test wants
/// it yet): then it runs a little and is stopped again, up to 100 times.
pub(crate) fn stop_and_copy(
    pid: u32,
    tid: u32,
    max: usize,
    ready: impl Fn(&libc::user_regs_struct) -> bool,
) -> Stopped {
    let t = tid as libc::pid_t;
    // SAFETY: plain ptrace/waitpid calls on a thread id; no memory is shared.
    let attached = unsafe { libc::ptrace(libc::PTRACE_ATTACH, t, 0usize, 0usize) };
    assert_eq!(
        attached,
        0,
        "ptrace attach to {tid}: {}",
        std::io::Error::last_os_error()
    );
    let wait_stop = || {
        let mut status = 0;
        // SAFETY: waits for the traced thread; status is a local.
        let r = unsafe { libc::waitpid(t, &mut status, libc::__WALL) };
        assert_eq!(r, t, "waitpid {tid}: {}", std::io::Error::last_os_error());
    };
    wait_stop();
    let mut regs: libc::user_regs_struct;
    let mut tries = 0;
    loop {
        // SAFETY: user_regs_struct is plain data; all-zero is a valid value.
        regs = unsafe { std::mem::zeroed() };
        // SAFETY: GETREGS writes one user_regs_struct into `regs`.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, t, 0usize, &mut regs as *mut _) };
        assert_eq!(r, 0, "PTRACE_GETREGS: {}", std::io::Error::last_os_error());
        tries += 1;
        if ready(&regs) || tries == 100 {
            break;
        }
        // SAFETY: resumes the thread, then stops it again with SIGSTOP.
        unsafe {
            libc::ptrace(libc::PTRACE_CONT, t, 0usize, 0usize);
            std::thread::sleep(std::time::Duration::from_millis(5));
            libc::syscall(libc::SYS_tgkill, pid as libc::pid_t, t, libc::SIGSTOP);
        }
        wait_stop();
    }
    let end = stack_end(pid, regs.rsp).expect("the stack pointer is in a mapping");
    let len = ((end - regs.rsp) as usize).min(max);
    let mut stack = vec![0u8; len];
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).expect("opening /proc/PID/mem");
    f.read_exact_at(&mut stack, regs.rsp)
        .expect("reading the stack");
    Stopped { tid, regs, stack }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: detaches; the thread resumes as if never stopped.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid as libc::pid_t, 0usize, 0usize) };
    }
}

/// The end of the mapping holding `addr`.
fn stack_end(pid: u32, addr: u64) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let (range, _) = l.split_once(' ')?;
        let (s, e) = range.split_once('-')?;
        let (s, e) = (
            u64::from_str_radix(s, 16).ok()?,
            u64::from_str_radix(e, 16).ok()?,
        );
        (addr >= s && addr < e).then_some(e)
    })
}
