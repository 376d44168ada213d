//! Facts about this host kept on disk between runs: calibrated layouts of
//! each libcuda build, the cost of a probe hit, the overhead budget's
//! in-place ratio. Each feature keeps its own files here, by key.
//!
//! Only root writes there and only results from trusted libraries go in
//! (`host::trust`): the directory (`/var/cache/gputrace`, or
//! `GPUTRACE_CACHE_DIR`) must be ours (owned by our effective uid) with no
//! access for group or others (0700; made so when missing, its missing
//! parents 0755), reached with no symbolic link on the way (`host::dirs`:
//! a link in any component is refused, not followed), each file ours
//! with mode 0600 and one link. A cache that is otherwise is ignored (said
//! once) and never written. Entries are keyed by the SHA-256 of the
//! library's content (or of the machine, for costs), so a forged build id
//! names nothing, and checked on reading (malformed keys and implausible
//! values are dropped). Writes go to a new file (`O_EXCL`, `O_NOFOLLOW`)
//! renamed over the old one inside the directory held open.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::host::dirs::{open_dir, Make};
use crate::host::fd::euid;

/// A cache file larger than this is not read (an entry is ~80 bytes).
const MAX_BYTES: u64 = 1 << 20;
/// Libraries larger than this are not hashed (libcuda is about 100 MB).
const MAX_LIBRARY_BYTES: u64 = 2 << 30;

/// The cache key of a library: the SHA-256 of its content.
pub(crate) fn content_key(file: &File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len > MAX_LIBRARY_BYTES {
        return Err(std::io::Error::other(format!(
            "{len} bytes: larger than any libcuda"
        )));
    }
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        at += n as u64;
        if at > MAX_LIBRARY_BYTES {
            return Err(std::io::Error::other("the file grew while it was read"));
        }
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// Whether `k` is a cache key (`sha256:` and 64 hex digits).
pub(crate) fn valid_key(k: &str) -> bool {
    k.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

enum Place {
    /// The directory, held open.
    Dir(File),
    /// Not used, and why (said once).
    Ignored(String),
    /// No disk cache at all.
    Memory,
}

/// The cache directory, held open.
pub(crate) struct Cache {
    place: Place,
    shown: PathBuf,
    said: Cell<bool>,
}

fn open_at(dir: &File, name: &str, flags: i32, mode: u32) -> std::io::Result<File> {
    use std::os::fd::AsFd;
    crate::host::fd::open_at(
        dir.as_fd(),
        std::ffi::OsStr::new(name),
        flags | libc::O_NOFOLLOW,
        mode,
    )
}

fn read_map<T: DeserializeOwned>(
    dir: &File,
    shown: &Path,
    name: &str,
    plausible: fn(&T) -> bool,
) -> Result<BTreeMap<String, T>, String> {
    let path = shown.join(name);
    let mut file = match open_at(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let m = file.metadata().map_err(|e| e.to_string())?;
    if !m.file_type().is_file() || m.nlink() != 1 {
        return Err(format!(
            "{} is not a plain file with one link",
            path.display()
        ));
    }
    if m.uid() != euid() || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is owned by uid {} with mode {:o}; it must be ours with mode 600",
            path.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let raw: BTreeMap<String, T> = serde_json::from_slice(&bytes).unwrap_or_default();
    Ok(raw
        .into_iter()
        .filter(|(k, l)| valid_key(k) && plausible(l))
        .collect())
}

impl Cache {
    /// Opens (creating it 0700 if missing) the cache in `dir`.
    pub(crate) fn open(dir: &Path) -> Self {
        let mut cache = Self {
            place: Place::Memory,
            shown: dir.to_path_buf(),
            said: Cell::new(false),
        };
        let make = Make {
            parents: 0o755,
            last: 0o700,
        };
        let fd = match open_dir(dir, Some(make)) {
            Ok(fd) => fd,
            Err(e) => {
                cache.place = Place::Ignored(format!("{}: {e}", dir.display()));
                return cache;
            }
        };
        cache.place = match fd.metadata() {
            Err(e) => Place::Ignored(format!("{}: {e}", dir.display())),
            Ok(m) if m.uid() != euid() || m.mode() & 0o077 != 0 => Place::Ignored(format!(
                "{} is owned by uid {} with mode {:o}; it must be ours with mode 700",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            )),
            Ok(_) => Place::Dir(fd),
        };
        cache
    }

    /// From now on the cache is not used, for this reason (said once).
    pub(crate) fn ignore(&mut self, why: String) {
        self.place = Place::Ignored(why);
    }

    /// Says once, on stderr, that the cache is ignored and why.
    pub(crate) fn say_once(&self) {
        if let Place::Ignored(why) = &self.place {
            if !self.said.replace(true) {
                crate::say!(
                    "ignoring the calibration cache: {why} (each libcuda is calibrated again; nothing is written there)"
                );
            }
        }
    }

    #[cfg(test)]
    /// Whether it is a directory in use.
    pub(crate) fn on_disk(&self) -> bool {
        matches!(self.place, Place::Dir(_))
    }

    /// Where it is, as shown to people.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }

    /// Every plausible entry of file `name` (none when not on disk); an
    /// error when the file is there but not ours alone.
    pub(crate) fn read<T: DeserializeOwned>(
        &self,
        name: &str,
        plausible: fn(&T) -> bool,
    ) -> Result<BTreeMap<String, T>, String> {
        match &self.place {
            Place::Dir(fd) => read_map(fd, &self.shown, name, plausible),
            _ => Ok(BTreeMap::new()),
        }
    }

    /// Writes `known` as file `name`, merged with what another gputrace
    /// wrote meanwhile (nothing when not on disk).
    pub(crate) fn write<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        known: &mut BTreeMap<String, T>,
        plausible: fn(&T) -> bool,
    ) -> std::io::Result<()> {
        match &self.place {
            Place::Dir(fd) => write_map(fd, &self.shown, name, known, plausible),
            _ => Ok(()),
        }
    }

    /// The entry under `key` in file `name`, if plausible.
    pub(crate) fn get<T: DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
        plausible: fn(&T) -> bool,
    ) -> Option<T> {
        self.read(name, plausible).ok()?.remove(key)
    }

    /// Keeps one entry (best effort: a cache that cannot be written only
    /// costs a measurement next time).
    pub(crate) fn put<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
        value: T,
        plausible: fn(&T) -> bool,
    ) {
        let mut one = BTreeMap::from([(key.to_string(), value)]);
        let _ = self.write(name, &mut one, plausible);
    }
}

/// Writes `known` as file `name` (merged with what another gputrace wrote
/// meanwhile).
fn write_map<T: Serialize + DeserializeOwned>(
    dir: &File,
    shown: &Path,
    name: &str,
    known: &mut BTreeMap<String, T>,
    plausible: fn(&T) -> bool,
) -> std::io::Result<()> {
    // A file there that is not ours alone is left alone.
    let theirs = read_map(dir, shown, name, plausible).map_err(std::io::Error::other)?;
    for (k, l) in theirs {
        known.entry(k).or_insert(l);
    }
    let tmp = format!("{name}.{}.tmp", std::process::id());
    let c_tmp = CString::new(tmp.as_str()).expect("no NUL");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let mut file = match open_at(dir, &tmp, flags, 0o600) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // SAFETY: unlinkat of a name in the directory we hold.
            unsafe { libc::unlinkat(dir.as_raw_fd(), c_tmp.as_ptr(), 0) };
            open_at(dir, &tmp, flags, 0o600)?
        }
        r => r?,
    };
    let bytes = serde_json::to_vec_pretty(known).map_err(std::io::Error::other)?;
    let written = file.write_all(&bytes).and_then(|_| file.sync_all());
    let c_final = CString::new(name).expect("no NUL");
    let renamed = written.and_then(|_| {
        // SAFETY: renameat within the directory we hold, of NUL-terminated
        // names that live across the call.
        if unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                c_tmp.as_ptr(),
                dir.as_raw_fd(),
                c_final.as_ptr(),
            )
        } < 0
        {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    });
    if renamed.is_err() {
        // SAFETY: unlinkat of our own temporary file.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c_tmp.as_ptr(), 0) };
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn plausible_ratio(r: &f64) -> bool {
        (1.0..=4.0).contains(r)
    }

    /// Entries are kept per key, merged with what another gputrace wrote,
    /// and only plausible ones read back; the files are ours alone.
    #[test]
    fn entries_round_trip_on_disk_with_safe_modes() {
        let dir = std::env::temp_dir().join(format!("gputrace-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        const F: &str = "ratios.json";
        let c = Cache::open(&dir);
        assert_eq!(c.get(F, &key('a'), plausible_ratio), None);
        c.put(F, &key('a'), 1.5, plausible_ratio);
        Cache::open(&dir).put(F, &key('b'), 2.0, plausible_ratio);
        let c = Cache::open(&dir);
        assert_eq!(c.get(F, &key('a'), plausible_ratio), Some(1.5));
        assert_eq!(c.get(F, &key('b'), plausible_ratio), Some(2.0));
        c.put(F, &key('a'), 1.7, plausible_ratio);
        assert_eq!(c.get(F, &key('a'), plausible_ratio), Some(1.7));
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let f = std::fs::metadata(dir.join(F)).unwrap();
        assert_eq!(f.mode() & 0o777, 0o600);
        // Implausible values and malformed keys are dropped on reading.
        std::fs::write(
            dir.join(F),
            serde_json::json!({ key('c'): 9.0, key('d'): 0.5, key('e'): 3.0, "build-id:abc": 2.0 })
                .to_string(),
        )
        .unwrap();
        let c = Cache::open(&dir);
        assert_eq!(c.get(F, &key('c'), plausible_ratio), None);
        assert_eq!(c.get(F, &key('d'), plausible_ratio), None);
        assert_eq!(c.get(F, &key('e'), plausible_ratio), Some(3.0));
        assert_eq!(c.read(F, plausible_ratio).unwrap().len(), 1);
        // A file others may read is an error to read, and left alone.
        std::fs::set_permissions(dir.join(F), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Cache::open(&dir).read(F, plausible_ratio).is_err());
        // So is a symbolic link in its place.
        std::fs::remove_file(dir.join(F)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join(F)).unwrap();
        assert!(Cache::open(&dir).read(F, plausible_ratio).is_err());
        Cache::open(&dir).put(F, &key('f'), 2.0, plausible_ratio);
        assert!(std::fs::symlink_metadata(dir.join(F))
            .unwrap()
            .file_type()
            .is_symlink());
        // A directory others may enter is not used at all.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = Cache::open(&dir);
        assert!(!c.on_disk());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A symbolic link in a directory above the cache is not followed: the
    /// cache is not used, and nothing is made where the link points.
    #[test]
    fn a_link_on_the_way_is_not_followed() {
        let base = std::env::temp_dir().join(format!("gputrace-cache-l-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let real = base.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
        let c = Cache::open(&base.join("link/cache"));
        assert!(!c.on_disk());
        match &c.place {
            Place::Ignored(why) => assert!(why.contains("link is a symbolic link"), "{why}"),
            _ => panic!("not ignored"),
        }
        c.put("ratios.json", &key('a'), 1.5, plausible_ratio);
        assert!(!real.join("cache").exists());
        // The same path without the link: made, and used.
        assert!(Cache::open(&base.join("real/cache")).on_disk());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn content_keys_follow_the_bytes() {
        let dir = std::env::temp_dir().join(format!("gputrace-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a"), b"abc").unwrap();
        let k = content_key(&File::open(dir.join("a")).unwrap()).unwrap();
        assert_eq!(
            k,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(valid_key(&k));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
