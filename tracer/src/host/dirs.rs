//! Opening a directory gputrace writes into (the directory of `--output`
//! and `--summary-file`, the daemon's `--output-dir`, the cache) with no
//! symbolic link anywhere on the way. It runs as root, and a link another
//! user planted in a directory component (`/tmp/shared/link/out.jsonl`)
//! would otherwise send what it writes into a directory of root's.
//!
//! Every component of the path is resolved without following a link:
//! `openat2` with `RESOLVE_NO_SYMLINKS` where the kernel has it, else a walk
//! one component at a time from `/` (or the current directory, for a
//! relative path) with `openat(O_DIRECTORY | O_NOFOLLOW)`, each step relative
//! to the directory the last one opened. Directories that are missing are
//! made on the way (`mkdirat`) when asked to. `..` is allowed (it is no
//! link); a link anywhere, the last component included, is an error naming
//! it.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::host::fd;

/// Modes of the directories made where missing (before the umask).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Make {
    /// Directories on the way.
    pub(crate) parents: u32,
    /// The directory asked for.
    pub(crate) last: u32,
}

const DIR_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// Opens the directory `path` without following any symbolic link on the
/// way (see the module documentation), making what is missing when `make`
/// is given.
pub(crate) fn open_dir(path: &Path, make: Option<Make>) -> std::io::Result<File> {
    if make.is_none() {
        match open_no_links(path) {
            Ok(f) => return Ok(f),
            // ELOOP: the walk names the link. ENOSYS (before Linux 5.6) or
            // EPERM (a seccomp filter that does not know openat2): walk.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ENOSYS | libc::EPERM)
                ) => {}
            Err(e) => return Err(e),
        }
    }
    walk(path, make)
}

/// `openat2(AT_FDCWD, path, O_DIRECTORY, RESOLVE_NO_SYMLINKS)`.
fn open_no_links(path: &Path) -> std::io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: a zeroed open_how is valid (no flags, no mode, no resolve).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: openat2 of a NUL-terminated path with an open_how of the size
    // given; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// The walk of the module documentation.
pub(crate) fn walk(path: &Path, make: Option<Make>) -> std::io::Result<File> {
    let (mut dir, mut shown) = if path.is_absolute() {
        (
            fd::open(Path::new("/"), libc::O_RDONLY | libc::O_DIRECTORY)?,
            PathBuf::from("/"),
        )
    } else {
        (
            fd::open(Path::new("."), libc::O_RDONLY | libc::O_DIRECTORY)?,
            PathBuf::new(),
        )
    };
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            Component::ParentDir => Some(OsStr::new("..")),
            _ => None,
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        shown.push(name);
        let mode = make.map(|m| {
            if i + 1 == names.len() {
                m.last
            } else {
                m.parents
            }
        });
        dir = step(&dir, name, &shown, mode)?;
    }
    Ok(dir)
}

/// Opens `name` in `dir`, a directory and no link; made (mode `make`) if missing.
fn step(dir: &File, name: &OsStr, shown: &Path, make: Option<u32>) -> std::io::Result<File> {
    match fd::open_at(dir.as_fd(), name, DIR_FLAGS, 0) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == ErrorKind::NotFound && make.is_some() => {
            let c =
                CString::new(name.as_bytes()).map_err(|_| Error::from(ErrorKind::InvalidInput))?;
            let mode = make.unwrap_or(0o700);
            // SAFETY: mkdirat relative to the directory we hold, of a
            // NUL-terminated name (a name there already is not followed).
            if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) } < 0 {
                let e = Error::last_os_error();
                if e.kind() != ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
            fd::open_at(dir.as_fd(), name, DIR_FLAGS, 0).map_err(|e| explain(dir, name, shown, e))
        }
        Err(e) => Err(explain(dir, name, shown, e)),
    }
}

/// A link on the way said as such; any other error as it came.
fn explain(dir: &File, name: &OsStr, shown: &Path, e: Error) -> Error {
    let refused = match e.raw_os_error() {
        Some(libc::ELOOP) => true,
        Some(libc::ENOTDIR) => is_link(dir, name),
        _ => false,
    };
    if refused {
        return symbolic_link(shown);
    }
    e
}

/// The error for a symbolic link at `shown`.
fn symbolic_link(shown: &Path) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "{} is a symbolic link, which gputrace does not write through (remove it or choose another path)",
            crate::text::printable_path(shown)
        ),
    )
}

fn is_link(dir: &File, name: &OsStr) -> bool {
    let Ok(c) = CString::new(name.as_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to the directory we hold, not following links.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A link in any component is refused and named, by both ways of
    /// opening; `..` and plain directories are not; missing ones are made.
    #[test]
    fn no_link_on_the_way() {
        let base = std::env::temp_dir().join(format!("gputrace-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let real = base.join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
        let ino = |f: &File| f.metadata().unwrap().ino();
        let real_ino = std::fs::metadata(real.join("sub")).unwrap().ino();
        for p in [
            base.join("link").join("sub"),
            base.join("link"),
            base.join("real/../link/sub"),
        ] {
            for e in [open_dir(&p, None).unwrap_err(), walk(&p, None).unwrap_err()] {
                assert!(
                    e.to_string().ends_with(
                        "/link is a symbolic link, which gputrace does not write through (remove it or choose another path)"
                    ),
                    "{}: {e}",
                    p.display()
                );
            }
        }
        let through_parent = base.join("link/../real/sub");
        assert!(open_dir(&through_parent, None).is_err());
        for p in [real.join("sub"), base.join("real/../real/sub")] {
            assert_eq!(ino(&open_dir(&p, None).unwrap()), real_ino);
            assert_eq!(ino(&walk(&p, None).unwrap()), real_ino);
        }
        // Made where missing; never through the link.
        let make = Some(Make {
            parents: 0o755,
            last: 0o700,
        });
        let made = open_dir(&base.join("new/a/b"), make).unwrap();
        let m = made.metadata().unwrap();
        assert!(m.is_dir() && m.mode() & 0o077 == 0);
        assert!(open_dir(&base.join("link/x/y"), make).is_err());
        assert!(!real.join("x").exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
