//! Whether a library file may be loaded by a privileged process, and
//! opening files we only mean to read without being tricked.
//!
//! Ownership alone cannot tell the host's libcuda from one an unprivileged
//! user (or a container image) placed: a container that runs as root writes
//! root-owned files, and a user's files are reached through
//! `/proc/PID/root`. So a library is trusted only when it is a file of the
//! host's own filesystem: the path the process maps it at, walked from the
//! host's root (PID 1's root, or ours when that cannot be read) one
//! component at a time on file descriptors (`openat`, `O_NOFOLLOW`; a
//! symbolic link is followed only where it sits in a trusted directory),
//! reaches the very file the process maps (same device and inode), and
//! that file and every directory on the way are owned by root and not
//! writable by group or others (a sticky directory writable by others, such
//! as /tmp, only for entries owned by root). The file descriptor the walk
//! ends on is the one that is then loaded, so a rename after the check
//! changes nothing.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::host::discover::LibraryFile;

/// Symbolic links followed in one walk at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// The verdict on a library file.
pub(crate) enum Trust {
    /// A root-controlled file of the host; load it through this descriptor.
    Trusted(File),
    /// Why not.
    Untrusted(String),
}

fn last_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn c_name(name: &OsStr) -> Result<CString, String> {
    CString::new(name.as_bytes()).map_err(|_| "a path with a NUL byte".to_string())
}

/// `openat(dir, name, flags)`.
fn open_at(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> std::io::Result<OwnedFd> {
    crate::host::fd::open_at(dir, name, flags, 0).map(OwnedFd::from)
}

fn fstat(fd: BorrowedFd<'_>) -> std::io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-buffer; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn kind(st: &libc::stat) -> u32 {
    st.st_mode & libc::S_IFMT
}

/// Whether only root can change this file (or directory) itself: owned by
/// root, not writable by group or others.
pub(crate) fn root_controlled(meta: &std::fs::Metadata) -> bool {
    meta.uid() == 0 && meta.mode() & 0o022 == 0
}

/// Why a directory on the way cannot be trusted, if it cannot.
fn check_dir(st: &libc::stat, shown: &Path) -> Result<(), String> {
    if st.st_uid != 0 {
        return Err(format!("{} is owned by uid {}", shown.display(), st.st_uid));
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & libc::S_ISVTX == 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o})",
            shown.display(),
            st.st_mode & 0o7777
        ));
    }
    Ok(())
}

/// Walks `path` from the directory `root` as described in the module
/// documentation; the opened file, or why it cannot be trusted.
pub(crate) fn walk(root: OwnedFd, path: &Path) -> Result<File, String> {
    let root_st = fstat(root.as_fd()).map_err(|e| format!("the root directory: {e}"))?;
    check_dir(&root_st, Path::new("/"))?;
    // Directories entered so far (root first), and the path they stand for.
    let mut dirs: Vec<OwnedFd> = vec![root];
    let mut shown = PathBuf::from("/");
    let mut todo: Vec<OsString> = components(path);
    todo.reverse();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            if dirs.len() > 1 {
                dirs.pop();
                shown.pop();
            }
            continue;
        }
        let dir = dirs.last().expect("root stays").as_fd();
        let here = shown.join(&name);
        let fd = open_at(dir, &name, libc::O_PATH | libc::O_NOFOLLOW)
            .map_err(|e| format!("{}: {e}", here.display()))?;
        let st = fstat(fd.as_fd()).map_err(|e| format!("{}: {e}", here.display()))?;
        if st.st_uid != 0 {
            return Err(format!("{} is owned by uid {}", here.display(), st.st_uid));
        }
        match kind(&st) {
            libc::S_IFLNK => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("{}: too many symbolic links", path.display()));
                }
                let target =
                    read_link(fd.as_fd()).map_err(|e| format!("{}: {e}", here.display()))?;
                if target.is_absolute() {
                    dirs.truncate(1);
                    shown = PathBuf::from("/");
                }
                let mut more = components(&target);
                more.reverse();
                todo.extend(more);
            }
            libc::S_IFDIR => {
                check_dir(&st, &here)?;
                dirs.push(fd);
                shown = here;
            }
            libc::S_IFREG => {
                if !todo.is_empty() {
                    return Err(format!("{} is not a directory", here.display()));
                }
                if st.st_mode & 0o022 != 0 {
                    return Err(format!(
                        "{} is writable by group or others (mode {:o})",
                        here.display(),
                        st.st_mode & 0o7777
                    ));
                }
                // Reopen for reading; it must still be the file checked.
                let file = open_at(
                    dir,
                    &name,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                )
                .map_err(|e| format!("{}: {e}", here.display()))?;
                let again = fstat(file.as_fd()).map_err(|e| format!("{}: {e}", here.display()))?;
                if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(format!("{} changed while it was checked", here.display()));
                }
                return Ok(File::from(file));
            }
            _ => return Err(format!("{} is not a regular file", here.display())),
        }
    }
    Err(format!("{} is a directory", path.display()))
}

/// The named components of a path (`..` kept, `.` and the root dropped).
fn components(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// The target of the symbolic link `fd` (opened `O_PATH | O_NOFOLLOW`).
fn read_link(fd: BorrowedFd<'_>) -> Result<PathBuf, String> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let empty = c_name(OsStr::new(""))?;
    // SAFETY: readlinkat with an empty name reads the link `fd` itself; buf
    // is writable for its length.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            empty.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(last_error("readlink"));
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsStr::from_bytes(&buf)))
}

fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    crate::host::fd::open(path, libc::O_PATH | libc::O_DIRECTORY).map(OwnedFd::from)
}

/// The host's root directory: PID 1's (the host's, also from a `hostPID`
/// pod), or our own where PID 1's cannot be read.
fn host_root() -> std::io::Result<OwnedFd> {
    open_dir(Path::new("/proc/1/root")).or_else(|_| open_dir(Path::new("/")))
}

/// Where a library file was found: `(PID, path inside its filesystem)` for
/// a mapping read from `/proc/PID/maps`, else `None` (a path given to us).
pub(crate) fn in_process(found_at: &Path) -> Option<(u32, PathBuf)> {
    let rest = found_at.strip_prefix("/proc").ok()?;
    let mut parts = rest.components();
    let pid = parts.next()?.as_os_str().to_str()?.parse().ok()?;
    if parts.next()?.as_os_str() != "root" {
        return None;
    }
    Some((pid, Path::new("/").join(parts.as_path())))
}

/// Judges `file` (see the module documentation).
pub(crate) fn judge(file: &LibraryFile) -> Trust {
    let (root, path) = match in_process(&file.found_at) {
        Some((_, inside)) => (host_root(), inside),
        None => {
            let p = if file.found_at.is_absolute() {
                file.found_at.clone()
            } else {
                match std::env::current_dir() {
                    Ok(d) => d.join(&file.found_at),
                    Err(e) => return Trust::Untrusted(format!("the current directory: {e}")),
                }
            };
            (open_dir(Path::new("/")), p)
        }
    };
    let root = match root {
        Ok(r) => r,
        Err(e) => return Trust::Untrusted(format!("cannot open the root directory: {e}")),
    };
    let opened = match walk(root, &path) {
        Ok(f) => f,
        Err(why) => return Trust::Untrusted(why),
    };
    match opened.metadata() {
        Ok(m) if (m.dev(), m.ino()) == (file.dev, file.inode) => Trust::Trusted(opened),
        Ok(_) => Trust::Untrusted(format!(
            "{} on the host is another file than the one the process maps",
            path.display()
        )),
        Err(e) => Trust::Untrusted(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fd::open_regular;
    use std::os::unix::fs::PermissionsExt;

    fn walk_from_root(p: &Path) -> Result<File, String> {
        walk(open_dir(Path::new("/")).unwrap(), p)
    }

    #[test]
    fn paths_of_processes() {
        assert_eq!(
            in_process(Path::new("/proc/42/root/usr/lib/libcuda.so.1")),
            Some((42, PathBuf::from("/usr/lib/libcuda.so.1")))
        );
        assert_eq!(in_process(Path::new("/proc/self/fd/7")), None);
        assert_eq!(in_process(Path::new("/usr/lib/libcuda.so.1")), None);
        assert_eq!(in_process(Path::new("/proc/42/cwd/x")), None);
    }

    /// Root-only: the owner and mode rules, on a tree made here.
    #[test]
    fn owner_and_mode_rules() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to make files of other owners");
            return;
        }
        let base = std::env::temp_dir().join(format!("gputrace-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let good = base.join("good");
        std::fs::create_dir_all(&good).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o755)).unwrap();
        let lib = good.join("libcuda.so.1");
        std::fs::write(&lib, b"x").unwrap();
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(walk_from_root(&lib).is_ok());
        // Through a symbolic link in a trusted directory, relative and absolute.
        std::os::unix::fs::symlink("libcuda.so.1", good.join("rel.so")).unwrap();
        std::os::unix::fs::symlink(&lib, good.join("abs.so")).unwrap();
        std::os::unix::fs::symlink("../good/./libcuda.so.1", good.join("up.so")).unwrap();
        for l in ["rel.so", "abs.so", "up.so"] {
            let f = walk_from_root(&good.join(l)).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(
                f.metadata().unwrap().ino(),
                std::fs::metadata(&lib).unwrap().ino()
            );
        }
        // A file others may write.
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(walk_from_root(&lib).unwrap_err().contains("writable"));
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A file of another owner.
        std::os::unix::fs::chown(&lib, Some(1000), None).unwrap();
        assert!(walk_from_root(&lib)
            .unwrap_err()
            .contains("owned by uid 1000"));
        std::os::unix::fs::chown(&lib, Some(0), None).unwrap();
        // A directory of another owner, or writable by others without the sticky bit.
        std::os::unix::fs::chown(&good, Some(1000), None).unwrap();
        assert!(walk_from_root(&lib)
            .unwrap_err()
            .contains("owned by uid 1000"));
        std::os::unix::fs::chown(&good, Some(0), None).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(walk_from_root(&lib).unwrap_err().contains("writable"));
        // Sticky and writable by all (/tmp): root's entries only.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(walk_from_root(&lib).is_ok());
        std::os::unix::fs::chown(&lib, Some(1000), None).unwrap();
        assert!(walk_from_root(&lib).is_err());
        // A symbolic link planted by someone else in a sticky directory.
        std::os::unix::fs::chown(&lib, Some(0), None).unwrap();
        let planted = good.join("planted.so");
        std::os::unix::fs::symlink(&lib, &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(1000), None).unwrap();
        assert!(walk_from_root(&planted)
            .unwrap_err()
            .contains("owned by uid 1000"));
        // Not a regular file; not there.
        assert!(walk_from_root(&good)
            .unwrap_err()
            .contains("is a directory"));
        assert!(walk_from_root(&good.join("nope")).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn open_regular_refuses_fifos_without_blocking() {
        let dir = std::env::temp_dir().join(format!("gputrace-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("libcuda.so.1");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(open_regular(&fifo, None).is_err());
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let m = std::fs::metadata(&file).unwrap();
        assert!(open_regular(&file, Some((m.dev(), m.ino()))).is_ok());
        assert!(open_regular(&file, Some((m.dev(), m.ino() + 1))).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
