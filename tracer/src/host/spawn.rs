//! `-- CMD`: start a command held at a gate, so probes can be attached to
//! its PID before it runs its first instruction.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// A child process waiting at the gate until [`GatedChild::release`].
pub(crate) struct GatedChild {
    pub pid: u32,
    pub exe: PathBuf,
    gate: libc::c_int,
    errors: libc::c_int,
    reaped: Option<i32>,
}

/// Finds `name` the way execvp would.
pub(crate) fn resolve_command(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("argument contains a NUL byte"))
}

fn pipe() -> std::io::Result<[libc::c_int; 2]> {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fds)
}

impl GatedChild {
    /// Forks; the child waits for the gate, then execs `argv`.
    pub(crate) fn spawn(argv: &[String]) -> std::io::Result<Self> {
        let exe = resolve_command(&argv[0]).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "cannot run `{}`: not found in PATH or not executable",
                    argv[0]
                ),
            )
        })?;
        let path = cstring(exe.as_os_str())?;
        let args: Vec<CString> = argv
            .iter()
            .map(|a| cstring(OsStr::new(a)))
            .collect::<Result<_, _>>()?;
        let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let env: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend(v.into_vec());
                CString::new(kv)
                    .map_err(|_| std::io::Error::other("environment contains a NUL byte"))
            })
            .collect::<Result<_, _>>()?;
        let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());

        let gate = pipe()?;
        let errors = pipe()?;
        // SAFETY: the child only calls async-signal-safe functions (read,
        // signal, write, execve, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above; every pointer stays valid in the child.
            unsafe {
                libc::close(gate[1]);
                libc::close(errors[0]);
                // gputrace ignores SIGPIPE (a closed stdout is an error it
                // handles); an ignored signal stays ignored across exec, and
                // the command must get the default.
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let mut b = 0u8;
                // Wait until the parent has attached (or gone away).
                while libc::read(gate[0], (&mut b as *mut u8).cast(), 1) < 0 {}
                libc::execve(path.as_ptr(), arg_ptrs.as_ptr(), env_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(errors[1], (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copies of the child's ends.
        unsafe {
            libc::close(gate[0]);
            libc::close(errors[1]);
        }
        Ok(Self {
            pid: pid as u32,
            exe,
            gate: gate[1],
            errors: errors[0],
            reaped: None,
        })
    }

    /// Lets the child exec; reports an exec failure.
    pub(crate) fn release(&mut self) -> std::io::Result<()> {
        let b = 1u8;
        // SAFETY: our end of the gate pipe.
        unsafe {
            libc::write(self.gate, (&b as *const u8).cast(), 1);
            libc::close(self.gate);
        }
        self.gate = -1;
        let mut errno = 0i32;
        // SAFETY: reads at most 4 bytes into errno; EOF means exec succeeded.
        let n = unsafe { libc::read(self.errors, (&mut errno as *mut i32).cast(), 4) };
        // SAFETY: our end of the error pipe.
        unsafe { libc::close(self.errors) };
        self.errors = -1;
        if n == 4 {
            let _ = self.wait(true);
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// Sends `sig` to the child unless it has been reaped (its PID may be
    /// another process's by then).
    pub(crate) fn signal(&self, sig: libc::c_int) {
        if self.reaped.is_none() {
            // SAFETY: our own child, not reaped, so the PID is still its own.
            unsafe { libc::kill(self.pid as i32, sig) };
        }
    }

    /// The exit status once the child has exited (`block`: wait for it).
    pub(crate) fn wait(&mut self, block: bool) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let mut status = 0;
        // SAFETY: our own child's pid.
        let r = unsafe {
            libc::waitpid(
                self.pid as i32,
                &mut status,
                if block { 0 } else { libc::WNOHANG },
            )
        };
        if r == self.pid as i32 {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            self.reaped = Some(code);
        } else if r < 0 {
            self.reaped = Some(-1);
        }
        self.reaped
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        // SAFETY: closing fds we still own; a child never released is
        // killed rather than left to run untraced.
        unsafe {
            if self.gate >= 0 {
                libc::kill(self.pid as i32, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(self.pid as i32, &mut status, 0);
                libc::close(self.gate);
            }
            if self.errors >= 0 {
                libc::close(self.errors);
            }
        }
    }
}
