//! The sandbox's file system and network limits, with Landlock (Linux 5.13
//! and later; each newer ABI adds what it can): everything may be read and
//! executed, device files (the GPU's) opened for writing and ioctls, files
//! made in /dev/shm; nothing else may be written, created, removed or
//! renamed; no TCP (ABI 4); no signal and no abstract unix socket out of
//! the sandbox (ABI 6).

use std::ffi::CString;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_REMOVE_FILE: u64 = 1 << 5;
const FS_MAKE_REG: u64 = 1 << 8;
/// Every right of ABI 1 (bits 0..=12).
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version the kernel offers (0: none).
pub(crate) fn abi() -> u32 {
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    v.max(0) as u32
}

/// Restricts this process (and what it starts) as described above; the
/// ABI version applied. Needs no_new_privs set first.
pub(crate) fn restrict() -> Result<u32, String> {
    let abi = abi();
    if abi == 0 {
        return Err("Landlock is not available in this kernel".into());
    }
    let mut fs = FS_ABI1;
    if abi >= 2 {
        fs |= FS_REFER;
    }
    if abi >= 3 {
        fs |= FS_TRUNCATE;
    }
    if abi >= 5 {
        fs |= FS_IOCTL_DEV;
    }
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: if abi >= 4 {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // SAFETY: attr is a valid ruleset attribute of the size given; fields
    // the kernel does not know are zero, as it requires.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(format!(
            "landlock_create_ruleset: {}",
            std::io::Error::last_os_error()
        ));
    }
    let ruleset = ruleset as i32;
    let read = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE;
    let dev = read | FS_WRITE_FILE | (fs & (FS_TRUNCATE | FS_IOCTL_DEV));
    let shm = dev | FS_REMOVE_FILE | FS_MAKE_REG;
    let result = allow(ruleset, "/", read)
        .and_then(|_| allow(ruleset, "/dev", dev))
        // Absent in some containers: only its rule is then missing.
        .and_then(|_| allow(ruleset, "/dev/shm", shm).or(Ok(())))
        .and_then(|_| {
            // SAFETY: restricting ourselves with the ruleset just built.
            if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) } < 0 {
                Err(format!(
                    "landlock_restrict_self: {}",
                    std::io::Error::last_os_error()
                ))
            } else {
                Ok(())
            }
        });
    // SAFETY: closing the ruleset descriptor we own.
    unsafe { libc::close(ruleset) };
    result.map(|_| abi)
}

/// Allows `access` beneath `path`.
fn allow(ruleset: i32, path: &str, access: u64) -> Result<(), String> {
    let c = CString::new(path).expect("no NUL");
    // SAFETY: opening a directory path for use as a rule's anchor.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("{path}: {}", std::io::Error::last_os_error()));
    }
    let rule = PathBeneathAttr {
        allowed_access: access,
        parent_fd: fd,
    };
    // SAFETY: a path-beneath rule of the documented layout, for our ruleset.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0u32,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(format!("landlock_add_rule {path}: {err}"));
    }
    Ok(())
}
