//! Every check that can be made without stopping the target: it exists, is a
//! 64-bit x86-64 program, can be ptraced by us, has no seccomp filter we
//! cannot check, and has a dlopen. Also the explanation of a PTRACE_SEIZE
//! EPERM, for the checks that cannot be made in advance.

use std::fs::File;
use std::io::Read;

use crate::maps::read_maps;
use crate::procfs::{self, Status, CAP_SYS_ADMIN, CAP_SYS_PTRACE};
use crate::symbols::{find_dl_api, DlApi};
use crate::Error;

const ELFCLASS64: u8 = 2;
const EM_386: u16 = 3;
const EM_X86_64: u16 = 62;

/// Checks the ELF header of /proc/PID/exe: 64-bit class, x86-64 machine.
/// (An x32 program is ELFCLASS32 with EM_X86_64 and is refused too.)
fn check_exe(pid: i32) -> Result<(), Error> {
    let mut header = [0u8; 20];
    let mut f = File::open(format!("/proc/{pid}/exe")).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => Error::NoSuchProcess { pid },
        Some(libc::EACCES) | Some(libc::EPERM) => Error::PtraceDenied {
            pid,
            reason: format!("no ptrace access to read its executable: {e}"),
        },
        _ => Error::os(pid, "opening /proc/PID/exe", e),
    })?;
    f.read_exact(&mut header)
        .map_err(|e| Error::os(pid, "reading the ELF header of /proc/PID/exe", e))?;
    let wrong = |detail: String| Err(Error::WrongArchitecture { pid, detail });
    if &header[..4] != b"\x7fELF" {
        return wrong("its executable is not an ELF file".into());
    }
    let class = header[4];
    let machine = match header[5] {
        1 => u16::from_le_bytes([header[18], header[19]]),
        _ => u16::from_be_bytes([header[18], header[19]]),
    };
    match (class, machine) {
        (ELFCLASS64, EM_X86_64) => Ok(()),
        (_, EM_386) => wrong("it is a 32-bit i386 program".into()),
        (ELFCLASS64, m) => wrong(format!("64-bit ELF for machine {m}, not x86-64")),
        (_, EM_X86_64) => wrong("it is a 32-bit x32 program".into()),
        (c, m) => wrong(format!("ELF class {c}, machine {m}")),
    }
}

/// Whether, without CAP_SYS_PTRACE, the kernel's ptrace access check
/// (same uids and gids, target capabilities within ours) would pass.
fn ptrace_by_credentials(pid: i32, target: &Status) -> Result<(), String> {
    let me = Status::own_thread().map_err(|e| format!("cannot read our own status: {e}"))?;
    let our_uid = me.ids("Uid").and_then(|v| v.first().copied());
    let our_gid = me.ids("Gid").and_then(|v| v.first().copied());
    let (Some(uid), Some(gid)) = (our_uid, our_gid) else {
        return Err("cannot read our own uid/gid".into());
    };
    let same = |key: &str, id: u32| {
        target
            .ids(key)
            .is_some_and(|v| v.iter().take(3).all(|&x| x == id))
    };
    if !same("Uid", uid) || !same("Gid", gid) {
        return Err(format!(
            "we lack CAP_SYS_PTRACE and process {pid} runs under other user or group ids than ours ({uid}/{gid})"
        ));
    }
    let ours = me.mask("CapPrm").unwrap_or(0);
    let theirs = target.mask("CapPrm").unwrap_or(u64::MAX);
    if theirs & !ours != 0 {
        return Err(format!(
            "we lack CAP_SYS_PTRACE and process {pid} has capabilities we do not have (CapPrm {theirs:#x} vs ours {ours:#x})"
        ));
    }
    Ok(())
}

/// Runs every check that needs no stop; returns the dl* addresses found.
pub(crate) fn check(pid: i32) -> Result<DlApi, Error> {
    if pid <= 0 {
        return Err(Error::NoSuchProcess { pid });
    }
    let status = Status::read(pid, None).map_err(|_| Error::NoSuchProcess { pid })?;
    if matches!(status.state(), Some('Z' | 'X')) {
        return Err(Error::NoSuchProcess { pid });
    }
    if status.int("Tgid") == Some(std::process::id() as i64) {
        return Err(Error::PtraceDenied {
            pid,
            reason: "it is the calling process itself".into(),
        });
    }
    if let Some(tracer) = status.int("TracerPid").filter(|&t| t != 0) {
        return Err(Error::AlreadyTraced {
            pid,
            tracer: procfs::tgid_of(tracer as i32),
        });
    }
    let cap_ptrace = procfs::have_cap(CAP_SYS_PTRACE);
    match procfs::yama_scope() {
        Some(3) => {
            return Err(Error::PtraceDenied {
                pid,
                reason: "YAMA ptrace_scope is 3 (ptrace disabled for everyone until reboot)".into(),
            })
        }
        Some(2) if !cap_ptrace => {
            return Err(Error::PtraceDenied {
                pid,
                reason: "YAMA ptrace_scope is 2 (admin only) and we lack CAP_SYS_PTRACE".into(),
            })
        }
        _ => {}
    }
    if !cap_ptrace {
        ptrace_by_credentials(pid, &status)
            .map_err(|reason| Error::PtraceDenied { pid, reason })?;
    }
    check_exe(pid)?;
    match status.int("Seccomp") {
        Some(1) => {
            return Err(Error::SeccompDenied {
                pid,
                tid: pid,
                syscall: "everything but read, write, exit and sigreturn".into(),
                action: "strict seccomp mode".into(),
            })
        }
        Some(2) if !procfs::have_cap(CAP_SYS_ADMIN) => {
            return Err(Error::SeccompUnchecked {
                pid,
                reason: "reading its filter needs CAP_SYS_ADMIN, which we lack".into(),
            })
        }
        _ => {}
    }
    let maps = read_maps(pid).map_err(|_| Error::NoSuchProcess { pid })?;
    find_dl_api(pid, &maps)
}

/// Explains an EPERM from PTRACE_SEIZE of thread `tid` of `pid`.
pub(crate) fn explain_eperm(pid: i32, tid: i32) -> Error {
    let status = Status::read(pid, Some(tid));
    if let Some(tracer) = status
        .as_ref()
        .ok()
        .and_then(|s| s.int("TracerPid"))
        .filter(|&t| t != 0)
    {
        return Error::AlreadyTraced {
            pid,
            tracer: procfs::tgid_of(tracer as i32),
        };
    }
    let cap_ptrace = procfs::have_cap(CAP_SYS_PTRACE);
    let reason = match procfs::yama_scope() {
        Some(3) => "YAMA ptrace_scope is 3 (ptrace disabled)".to_string(),
        Some(2) if !cap_ptrace => "YAMA ptrace_scope is 2 and we lack CAP_SYS_PTRACE".into(),
        Some(1) if !cap_ptrace && !procfs::is_descendant(pid) => {
            "YAMA ptrace_scope is 1: without CAP_SYS_PTRACE only descendants (or processes that allowed us with PR_SET_PTRACER) can be traced".into()
        }
        _ => match (&status, cap_ptrace) {
            (Ok(s), false) => ptrace_by_credentials(pid, s)
                .err()
                .unwrap_or_else(|| "EPERM without CAP_SYS_PTRACE (is the target not dumpable?)".into()),
            _ => "EPERM (a security module such as SELinux or AppArmor, or the target is not dumpable)".into(),
        },
    };
    Error::PtraceDenied { pid, reason }
}
