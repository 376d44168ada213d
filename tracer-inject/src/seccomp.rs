//! Seccomp: fetch a stopped thread's filters (PTRACE_SECCOMP_GET_FILTER) and
//! tell, with the interpreter in `bpf`, whether they would allow each system
//! call the injection and the loaded code make.

use std::io;

use crate::bpf::{self, Insn, SeccompData};
use crate::procfs::Status;
use crate::Error;

const PTRACE_SECCOMP_GET_FILTER: u32 = 0x420c;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

const RET_ACTION_FULL: u32 = 0xffff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_KILL_THREAD: u32 = 0x0000_0000;
const RET_TRAP: u32 = 0x0003_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_TRACE: u32 = 0x7ff0_0000;
const RET_LOG: u32 = 0x7ffc_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

/// The system calls checked by default: those of the injection itself
/// (memfd_create, mmap, mprotect, munmap, close), of dlopen, and of a typical
/// agent (threads, polling, futexes, clocks).
pub fn default_syscalls() -> Vec<(&'static str, i64)> {
    macro_rules! list {
        ($($name:ident),* $(,)?) => { vec![$((stringify!($name), libc::$name)),*] };
    }
    let mut v = list![
        SYS_memfd_create,
        SYS_mmap,
        SYS_munmap,
        SYS_mprotect,
        SYS_openat,
        SYS_read,
        SYS_pread64,
        SYS_fstat,
        SYS_newfstatat,
        SYS_close,
        SYS_madvise,
        SYS_pipe2,
        SYS_ftruncate,
        SYS_clone,
        SYS_clone3,
        SYS_rt_sigprocmask,
        SYS_set_robust_list,
        SYS_rseq,
        SYS_poll,
        SYS_ppoll,
        SYS_futex,
        SYS_gettid,
        SYS_getpid,
        SYS_clock_gettime,
        SYS_prctl,
        SYS_exit,
    ];
    for entry in &mut v {
        entry.0 = entry.0.trim_start_matches("SYS_");
    }
    v
}

/// Reads thread `tid`'s filters, newest first. The thread must be
/// ptrace-stopped by the calling thread; needs CAP_SYS_ADMIN.
fn fetch_filters(tid: i32) -> io::Result<Vec<Vec<Insn>>> {
    let mut filters = Vec::new();
    for index in 0u64.. {
        // SAFETY: with a NULL buffer the kernel only returns the filter length.
        let n = unsafe {
            libc::ptrace(
                PTRACE_SECCOMP_GET_FILTER as _,
                tid,
                index,
                std::ptr::null_mut::<u8>(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                break;
            }
            return Err(e);
        }
        let mut raw = vec![[0u8; 8]; n as usize];
        // SAFETY: `raw` holds n sock_filter structs (8 bytes each) for the kernel to fill.
        let m =
            unsafe { libc::ptrace(PTRACE_SECCOMP_GET_FILTER as _, tid, index, raw.as_mut_ptr()) };
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        raw.truncate(m as usize);
        filters.push(
            raw.iter()
                .map(|b| Insn {
                    code: u16::from_ne_bytes([b[0], b[1]]),
                    jt: b[2],
                    jf: b[3],
                    k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
                })
                .collect(),
        );
    }
    Ok(filters)
}

/// The verdict of all filters together: the kernel runs every filter and
/// keeps the most restrictive action (lowest as a signed value).
pub(crate) fn verdict(filters: &[Vec<Insn>], data: &SeccompData) -> Result<u32, bpf::BpfError> {
    let mut result = RET_ALLOW;
    for f in filters {
        let r = bpf::run(f, data)?;
        if ((r & RET_ACTION_FULL) as i32) < ((result & RET_ACTION_FULL) as i32) {
            result = r;
        }
    }
    Ok(result)
}

fn describe(ret: u32) -> String {
    let data = ret & 0xffff;
    match ret & RET_ACTION_FULL {
        RET_KILL_PROCESS => "the filter kills the process".into(),
        RET_KILL_THREAD => "the filter kills the thread".into(),
        RET_TRAP => "the filter sends SIGSYS".into(),
        RET_ERRNO => format!("the filter fails it with errno {data}"),
        RET_USER_NOTIF => "the filter defers it to a user-space supervisor".into(),
        RET_TRACE => "the filter defers it to a seccomp tracer".into(),
        other => format!("the filter returns {other:#x}"),
    }
}

/// Refuses unless every system call of `syscalls` is allowed (ALLOW or LOG)
/// for thread `tid`, which must be ptrace-stopped by the calling thread.
///
/// Arguments and instruction pointer are evaluated as 0. One exception:
/// clone3 failing with ENOSYS is accepted (Docker's default profile does this
/// so that glibc falls back to clone, which is checked too).
pub(crate) fn check_thread(pid: i32, tid: i32, syscalls: &[(&str, i64)]) -> Result<(), Error> {
    let status = Status::read(pid, Some(tid))
        .map_err(|e| Error::os(pid, format!("reading status of thread {tid}"), e))?;
    match status.int("Seccomp") {
        None | Some(0) => return Ok(()),
        Some(1) => {
            return Err(Error::SeccompDenied {
                pid,
                tid,
                syscall: "everything but read, write, exit and sigreturn".into(),
                action: "strict seccomp mode".into(),
            })
        }
        Some(_) => {}
    }
    let filters = fetch_filters(tid).map_err(|e| Error::SeccompUnchecked {
        pid,
        reason: format!("PTRACE_SECCOMP_GET_FILTER on thread {tid}: {e} (needs CAP_SYS_ADMIN)"),
    })?;
    for &(name, nr) in syscalls {
        let data = SeccompData {
            nr: nr as i32,
            arch: AUDIT_ARCH_X86_64,
            ..Default::default()
        };
        let ret = verdict(&filters, &data).map_err(|e| Error::SeccompUnchecked {
            pid,
            reason: format!("cannot evaluate the filter: {e}"),
        })?;
        let action = ret & RET_ACTION_FULL;
        let enosys = action == RET_ERRNO && (ret & 0xffff) as i32 == libc::ENOSYS;
        if action == RET_ALLOW || action == RET_LOG || (name == "clone3" && enosys) {
            continue;
        }
        return Err(Error::SeccompDenied {
            pid,
            tid,
            syscall: name.to_string(),
            action: describe(ret),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::*;

    #[test]
    fn most_restrictive_filter_wins() {
        let allow = vec![Insn::stmt(RET | K, RET_ALLOW)];
        let errno = vec![Insn::stmt(RET | K, RET_ERRNO | 1)];
        let log = vec![Insn::stmt(RET | K, RET_LOG)];
        let kill = vec![Insn::stmt(RET | K, RET_KILL_PROCESS)];
        let trace = vec![Insn::stmt(RET | K, RET_TRACE | 7)];
        let d = SeccompData::default();
        assert_eq!(verdict(&[allow.clone(), log.clone()], &d), Ok(RET_LOG));
        assert_eq!(
            verdict(&[log, errno.clone(), trace.clone()], &d),
            Ok(RET_ERRNO | 1)
        );
        assert_eq!(
            verdict(&[errno, kill, allow.clone()], &d),
            Ok(RET_KILL_PROCESS)
        );
        assert_eq!(verdict(&[trace, allow], &d), Ok(RET_TRACE | 7));
        assert_eq!(verdict(&[], &d), Ok(RET_ALLOW));
    }

    #[test]
    fn default_list_names_and_numbers() {
        let list = default_syscalls();
        assert!(list.contains(&("memfd_create", 319)));
        assert!(list.contains(&("mmap", 9)));
        assert!(list.contains(&("exit", 60)));
        assert_eq!(list.len(), 26);
    }
}
