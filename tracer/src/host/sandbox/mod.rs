//! Where the calibration helper loads a libcuda gputrace does not trust
//! (see `probes::trust`): the helper gives up every privilege before the
//! library's code can run, in this order:
//!
//! 1. every inherited file descriptor but the library's is closed;
//! 2. no core dumps; the capability bounding and ambient sets are emptied;
//! 3. supplementary groups dropped, then gid and uid set to nobody (65534),
//!    real, effective and saved: the kernel clears the permitted and
//!    effective capabilities with them; the inheritable set is cleared too;
//!    the parent-death signal (`host::confine`), cleared with the uid, is
//!    set again;
//! 4. no_new_privs: nothing it executes can gain privileges;
//! 5. Landlock, where the kernel has it (`landlock`): reads everywhere,
//!    writes only to device files (the GPU) and /dev/shm, no TCP, no
//!    signals out; where it has not, no file may grow (RLIMIT_FSIZE 0);
//! 6. a seccomp filter (`seccomp`): nothing against other processes or the
//!    kernel's wider interfaces.
//!
//! The parent gives it an empty environment but `CUDA_CACHE_DISABLE=1` (no
//! JIT cache is written), `/` as its directory, and reads at most a few KB
//! of its answer, which it checks like any other untrusted input. The GPU
//! stays usable where `/dev/nvidia*` let any user open them (their usual
//! mode, 0666).

pub(crate) mod landlock;
pub(crate) mod seccomp;

/// nobody and nogroup.
pub(crate) const NOBODY: u32 = 65534;

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn check(what: &str, r: libc::c_int) -> Result<(), String> {
    if r < 0 {
        return Err(format!("{what}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Closes every descriptor above 2 but `keep`.
fn close_inherited(keep: Option<i32>) -> Result<(), String> {
    let close = |from: u32, to: u32| -> Result<(), String> {
        if from > to {
            return Ok(());
        }
        // SAFETY: closing descriptors this process does not use.
        let r = unsafe { libc::syscall(libc::SYS_close_range, from, to, 0u32) };
        check("close_range", r as libc::c_int)
    };
    match keep {
        Some(k) if k > 2 => {
            close(3, k as u32 - 1)?;
            close(k as u32 + 1, u32::MAX)
        }
        _ => close(3, u32::MAX),
    }
}

/// Drops every capability and becomes nobody (if we are root).
fn drop_privileges() -> Result<(), String> {
    // SAFETY: prctl and setrlimit with constant arguments.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        check(
            "setrlimit(RLIMIT_CORE)",
            libc::setrlimit(libc::RLIMIT_CORE, &none),
        )?;
        // The bounding set, while we still hold CAP_SETPCAP (EINVAL past
        // the last capability the kernel knows).
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                break;
            }
        }
        check(
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ),
        )?;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // SAFETY: credential changes with constant arguments, checked.
        unsafe {
            check("setgroups", libc::setgroups(0, std::ptr::null()))?;
            check("setresgid", libc::setresgid(NOBODY, NOBODY, NOBODY))?;
            check("setresuid", libc::setresuid(NOBODY, NOBODY, NOBODY))?;
        }
    }
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: a v3 capset of two zeroed data structs: no capability at all.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    check("capset", r as libc::c_int)?;
    // Check what the kernel says, rather than trust the calls above.
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: out-pointers to locals.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    let mut caps = [CapData::default(); 2];
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: a v3 capget into two data structs.
    unsafe { libc::syscall(libc::SYS_capget, &mut header, caps.as_mut_ptr()) };
    if [r, e, s].contains(&0) || caps.iter().any(|c| c.effective | c.permitted != 0) {
        return Err(format!(
            "privileges still held after dropping them (uids {r}/{e}/{s})"
        ));
    }
    // Changing the uid cleared the parent-death signal `host::confine`
    // set: set again, the helper still dies with the thread that runs it.
    // SAFETY: prctl with constant arguments.
    check("prctl(PR_SET_PDEATHSIG)", unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    Ok(())
}

/// Enters the sandbox; `keep` is the library's descriptor. What was applied.
pub(crate) fn enter(keep: Option<i32>) -> Result<Vec<String>, String> {
    let mut applied = Vec::new();
    close_inherited(keep)?;
    drop_privileges()?;
    // SAFETY: getuid has no preconditions.
    applied.push(format!("uid {}, no capabilities", unsafe {
        libc::getuid()
    }));
    // SAFETY: prctl with constant arguments.
    check("prctl(PR_SET_NO_NEW_PRIVS)", unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    })?;
    applied.push("no_new_privs".into());
    match crate::host::sandbox::landlock::restrict() {
        Ok(abi) => applied.push(format!("landlock ABI {abi}")),
        Err(why) => {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: setrlimit with a valid struct.
            check("setrlimit(RLIMIT_FSIZE)", unsafe {
                libc::setrlimit(libc::RLIMIT_FSIZE, &none)
            })?;
            applied.push(format!("no file writes (RLIMIT_FSIZE 0; {why})"));
        }
    }
    crate::host::sandbox::seccomp::install()?;
    applied.push("seccomp".into());
    Ok(applied)
}
