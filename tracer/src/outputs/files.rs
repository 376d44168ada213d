//! Opening the files gputrace writes. It runs as root, often in directories
//! others may write to (/tmp, a shared output directory), so a file is
//! never opened through a symbolic link, neither in its last component
//! (`O_NOFOLLOW`) nor in any directory on the way (`host::dirs`: a link
//! there is refused, not followed), an existing file is
//! overwritten only if it is a regular file with no other name (hard link)
//! and, in a sticky directory, only if it is ours, and new files are made
//! with `O_CREAT | O_EXCL` relative to the directory held open.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::host::dirs::{open_dir, Make};
use crate::host::fd::euid;

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn open_at(dir: &File, name: &OsStr, flags: i32, mode: u32) -> std::io::Result<File> {
    use std::os::fd::AsFd;
    crate::host::fd::open_at(dir.as_fd(), name, flags | libc::O_NOFOLLOW, mode)
}

/// Creates `name` in `dir` (`mode` before the umask); `None` if the name exists.
fn create_new(dir: &File, name: &OsStr, mode: u32) -> std::io::Result<Option<File>> {
    match open_at(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        mode,
    ) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens `--output FILE` for writing (see the module documentation): a
/// new file, or an existing one we may overwrite, emptied.
pub(crate) fn create_output(path: &Path) -> std::io::Result<File> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "not a file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = open_dir(parent, None)?;
    if let Some(f) = create_new(&dir, name, 0o666)? {
        return Ok(f);
    }
    let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    let file = open_at(&dir, name, flags, 0).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => Error::new(
            ErrorKind::InvalidInput,
            "it is a symbolic link, which gputrace does not write through (remove it or choose another path)",
        ),
        Some(libc::ENXIO) => Error::new(ErrorKind::InvalidInput, "it is not a regular file"),
        _ => e,
    })?;
    let m = file.metadata()?;
    if !m.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    if m.nlink() > 1 {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "it has other names (hard links), which overwriting it would change too (remove it or choose another path)",
        ));
    }
    let sticky = dir.metadata()?.mode() & libc::S_ISVTX != 0;
    if sticky && m.uid() != euid() {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "it is owned by uid {} in a directory others share (sticky); gputrace does not overwrite it (remove it or choose another path)",
                m.uid()
            ),
        ));
    }
    // SAFETY: fcntl on the descriptor just opened: back to blocking writes.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) };
    file.set_len(0)?;
    Ok(file)
}

/// A directory gputrace writes files into (the daemon's `--output-dir`),
/// held open: every name is looked up relative to it.
#[derive(Debug)]
pub(crate) struct OutputDir {
    dir: File,
    /// As given, for the tests' checks.
    #[cfg_attr(not(test), allow(dead_code))]
    shown: PathBuf,
}

impl OutputDir {
    /// Opens `path`, making it (mode 0750) if missing, with no symbolic
    /// link on the way (`host::dirs`). Refuses a directory
    /// anyone may write without the sticky bit: anyone could replace or
    /// delete what is written there.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let make = Make {
            parents: 0o750,
            last: 0o750,
        };
        let dir = open_dir(path, Some(make))?;
        let mode = dir.metadata()?.mode();
        if mode & 0o002 != 0 && mode & libc::S_ISVTX == 0 {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                "it is writable by everyone and has no sticky bit, so anyone could replace or delete the files written there (use a directory only root may write, or add the sticky bit: chmod +t)",
            ));
        }
        Ok(Self {
            dir,
            shown: path.to_path_buf(),
        })
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.shown
    }

    /// Creates `name` (`mode` before the umask); `None` if the name exists
    /// (whatever it is: a file, a link someone planted).
    pub(crate) fn create_new(&self, name: &str, mode: u32) -> std::io::Result<Option<File>> {
        create_new(&self.dir, OsStr::new(name), mode)
    }

    /// The names in the directory.
    pub(crate) fn names(&self) -> std::io::Result<Vec<OsString>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))? {
            out.push(e?.file_name());
        }
        Ok(out)
    }

    /// Whether `name` is a regular file of ours (not a link, not another user's).
    pub(crate) fn is_ours(&self, name: &str) -> bool {
        let Ok(c) = CString::new(name) else {
            return false;
        };
        // SAFETY: a zeroed stat is a valid out-buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat relative to the directory we hold, not following links.
        let r = unsafe {
            libc::fstatat(
                self.dir.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == euid()
    }

    /// Removes `name`; a name already gone is not an error.
    pub(crate) fn remove(&self, name: &str) -> std::io::Result<()> {
        let c = CString::new(name).map_err(|_| Error::from(ErrorKind::InvalidInput))?;
        // SAFETY: unlinkat relative to the directory we hold (a link is
        // removed itself, never its target).
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) } < 0 {
            let e = Error::last_os_error();
            if e.kind() != ErrorKind::NotFound {
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn outputs_are_not_written_through_links() {
        let dir = std::env::temp_dir().join(format!("gputrace-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.join("t.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_output(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let hard = dir.join("h.jsonl");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(create_output(&hard)
            .unwrap_err()
            .to_string()
            .contains("hard links"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A file of ours is emptied and written; a new one is made.
        let mine = dir.join("m.jsonl");
        std::fs::write(&mine, "old old old").unwrap();
        create_output(&mine).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "new");
        create_output(&dir.join("n.jsonl")).unwrap();
        assert!(dir.join("n.jsonl").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A symbolic link in a directory component is not followed either,
    /// for a file or an output directory.
    #[test]
    fn no_link_in_the_directories_on_the_way() {
        let base = std::env::temp_dir().join(format!("gputrace-out-l-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let real = base.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("t.jsonl"), "keep").unwrap();
        std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
        let e = create_output(&base.join("link/t.jsonl")).unwrap_err();
        assert!(e.to_string().contains("link is a symbolic link"), "{e}");
        let e = create_output(&base.join("link/new.jsonl")).unwrap_err();
        assert!(e.to_string().contains("link is a symbolic link"), "{e}");
        let e = OutputDir::open(&base.join("link/d")).unwrap_err();
        assert!(e.to_string().contains("link is a symbolic link"), "{e}");
        let e = OutputDir::open(&base.join("link")).unwrap_err();
        assert!(e.to_string().contains("link is a symbolic link"), "{e}");
        assert_eq!(
            std::fs::read_to_string(real.join("t.jsonl")).unwrap(),
            "keep"
        );
        assert!(!real.join("new.jsonl").exists() && !real.join("d").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn output_dirs_open_to_all_need_the_sticky_bit() {
        let base = std::env::temp_dir().join(format!("gputrace-outdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let made = OutputDir::open(&base.join("new")).unwrap();
        assert_eq!(std::fs::metadata(made.path()).unwrap().mode() & 0o027, 0);
        let open = base.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(OutputDir::open(&open)
            .unwrap_err()
            .to_string()
            .contains("sticky"));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let d = OutputDir::open(&open).unwrap();
        assert!(d.create_new("a", 0o640).unwrap().is_some());
        assert!(d.create_new("a", 0o640).unwrap().is_none());
        std::os::unix::fs::symlink("/etc/hostname", open.join("b")).unwrap();
        assert!(d.create_new("b", 0o640).unwrap().is_none());
        assert!(d.is_ours("a") && !d.is_ours("b") && !d.is_ours("c"));
        let mut names = d.names().unwrap();
        names.sort();
        assert_eq!(names, vec![OsString::from("a"), OsString::from("b")]);
        d.remove("b").unwrap();
        d.remove("b").unwrap();
        assert!(std::fs::read_to_string("/etc/hostname").is_ok());
        let _ = std::fs::remove_dir_all(&base);
    }
}
