//! Opening files by descriptor: `open` and `openat` (relative to a
//! directory held open), always close-on-exec. What is checked about the
//! file opened (its owner, its mode, that it is no link) is the caller's:
//! `probes::trust` (libraries), `names::cache` (the calibration cache),
//! `sinks::files` (what gputrace writes).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn c_string(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn owned(fd: libc::c_int) -> std::io::Result<File> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `open(path, flags | O_CLOEXEC)`.
pub(crate) fn open(path: &Path, flags: i32) -> std::io::Result<File> {
    let c = c_string(path.as_os_str())?;
    // SAFETY: open of a NUL-terminated path; the result is checked.
    owned(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub(crate) fn open_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: i32,
    mode: u32,
) -> std::io::Result<File> {
    let c = c_string(name)?;
    // SAFETY: openat relative to a directory the caller holds, of a
    // NUL-terminated name; the result is checked.
    owned(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// Our effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Opens a file we mean to read (a library, a cache), never blocking on a
/// FIFO or a device put in its place; a regular file only, and, when
/// `expect` is given, the file with that (device, inode).
pub(crate) fn open_regular(path: &Path, expect: Option<(u64, u64)>) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if let Some((dev, ino)) = expect {
        if (meta.dev(), meta.ino()) != (dev, ino) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the file at that path changed",
            ));
        }
    }
    Ok(file)
}
