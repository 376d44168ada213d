//! Layouts found by calibration, kept on disk between runs.
//!
//! Only root writes there and only results from trusted libraries go in
//! (`probes::trust`): the directory (`/var/cache/gputrace`, or
//! `GPUTRACE_CACHE_DIR`) must be ours (owned by our effective uid) with no
//! access for group or others (0700; made so when missing), its file
//! `calibration-v2.json` ours with mode 0600 and one link. A cache that is
//! otherwise is ignored (said once) and never written. Entries are keyed by
//! the SHA-256 of the library's content, so a forged build id names
//! nothing, and checked on reading (malformed keys and implausible layouts
//! are dropped). Writes go to a new file (`O_EXCL`, `O_NOFOLLOW`) renamed
//! over the old one inside the directory held open.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::graphs::layout::ExecLayout;
use crate::names::calibrate::Found;
use crate::names::calibrate::Layout;

const FILE: &str = "calibration-v2.json";
/// Executable-graph layouts, by the same keys, in a file of their own (so
/// that a gputrace without graphs reads `FILE` as before).
const EXEC_FILE: &str = "exec-layouts-v2.json";
/// The cost of a probe hit on this machine (`probes::hitcost`), by a key of
/// the kernel, the CPU and the eBPF programs.
const HIT_COST_FILE: &str = "probe-hit-cost-v1.json";
/// The hit cost in place over the measured figure, as an overhead budget
/// last read it on this machine (`session::budget`).
const IN_PLACE_FILE: &str = "probe-cost-in-place-v1.json";
/// A cache file larger than this is not read (an entry is ~80 bytes).
const MAX_BYTES: u64 = 1 << 20;
/// Libraries larger than this are not hashed (libcuda is about 100 MB).
const MAX_LIBRARY_BYTES: u64 = 2 << 30;

/// The cache key of a library: the SHA-256 of its content.
pub fn content_key(file: &File) -> std::io::Result<String> {
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

fn valid_key(k: &str) -> bool {
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

pub struct CalibrationCache {
    place: Place,
    shown: PathBuf,
    known: BTreeMap<String, Layout>,
    exec: BTreeMap<String, ExecEntry>,
    said: bool,
}

/// What the cache keeps of an executable-graph calibration: a failure is
/// kept too (the names calibration of the same run succeeded, so the GPU
/// was there: it is this driver's answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecEntry {
    pub layout: Option<ExecLayout>,
    pub error: Option<String>,
}

impl ExecEntry {
    pub fn of(r: &Result<ExecLayout, String>) -> Self {
        Self {
            layout: r.as_ref().ok().cloned(),
            error: r.as_ref().err().cloned(),
        }
    }

    pub fn result(&self) -> Result<ExecLayout, String> {
        match (&self.layout, &self.error) {
            (Some(l), _) if l.is_plausible() => Ok(l.clone()),
            (_, Some(e)) => Err(e.clone()),
            _ => Err("no layout".into()),
        }
    }

    fn is_plausible(&self) -> bool {
        match &self.layout {
            Some(l) => l.is_plausible(),
            None => self.error.as_ref().is_some_and(|e| e.len() < 1000),
        }
    }
}

use crate::host::fd::euid;

fn open_dir_nofollow(dir: &Path) -> std::io::Result<File> {
    crate::host::fd::open(dir, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)
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

fn read_file(dir: &File, shown: &Path) -> Result<BTreeMap<String, Layout>, String> {
    read_map(dir, shown, FILE, Layout::is_plausible)
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

impl CalibrationCache {
    /// Opens (creating it 0700 if missing) the cache in `dir`.
    pub fn open(dir: &Path) -> Self {
        let mut cache = Self {
            place: Place::Memory,
            shown: dir.to_path_buf(),
            known: BTreeMap::new(),
            exec: BTreeMap::new(),
            said: false,
        };
        if let Some(parent) = dir.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        let fd = match open_dir_nofollow(dir) {
            Ok(fd) => fd,
            Err(e) => {
                cache.place = Place::Ignored(format!("{}: {e}", dir.display()));
                return cache;
            }
        };
        let m = match fd.metadata() {
            Ok(m) => m,
            Err(e) => {
                cache.place = Place::Ignored(format!("{}: {e}", dir.display()));
                return cache;
            }
        };
        if m.uid() != euid() || m.mode() & 0o077 != 0 {
            cache.place = Place::Ignored(format!(
                "{} is owned by uid {} with mode {:o}; it must be ours with mode 700",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
            return cache;
        }
        match read_file(&fd, dir).and_then(|known| {
            Ok((
                known,
                read_map(&fd, dir, EXEC_FILE, ExecEntry::is_plausible)?,
            ))
        }) {
            Ok((known, exec)) => {
                cache.known = known;
                cache.exec = exec;
                cache.place = Place::Dir(fd);
            }
            Err(why) => cache.place = Place::Ignored(why),
        }
        cache
    }

    /// A cache that only lives in memory.
    pub fn in_memory() -> Self {
        Self {
            place: Place::Memory,
            shown: PathBuf::new(),
            known: BTreeMap::new(),
            exec: BTreeMap::new(),
            said: false,
        }
    }

    fn say_once(&mut self) {
        if let Place::Ignored(why) = &self.place {
            if !self.said {
                self.said = true;
                eprintln!(
                    "gputrace: ignoring the calibration cache: {why} (each libcuda is calibrated again; nothing is written there)"
                );
            }
        }
    }

    pub fn get(&mut self, key: &str) -> Option<Layout> {
        self.say_once();
        self.known.get(key).cloned()
    }

    /// Both layouts of a library, when both are known.
    pub fn get_found(&mut self, key: &str) -> Option<Found> {
        let names = self.get(key)?;
        Some(Found {
            names,
            exec: self.exec.get(key)?.result(),
        })
    }

    /// Records both layouts of a trusted library (only those: see `namer`).
    pub fn insert_found(&mut self, key: String, found: &Found) {
        self.exec.insert(key.clone(), ExecEntry::of(&found.exec));
        if let Place::Dir(fd) = &self.place {
            // Best effort, as for the names.
            let _ = write_map(
                fd,
                &self.shown,
                EXEC_FILE,
                &mut self.exec,
                ExecEntry::is_plausible,
            );
        }
        self.insert(key, found.names.clone());
    }

    /// Records a layout of a trusted library (only those: see `namer`).
    pub fn insert(&mut self, key: String, layout: Layout) {
        self.say_once();
        self.known.insert(key, layout);
        if let Place::Dir(fd) = &self.place {
            // Best effort: a cache that cannot be written only costs a
            // calibration next time.
            if let Err(e) = write_map(fd, &self.shown, FILE, &mut self.known, Layout::is_plausible)
            {
                if !self.said {
                    self.said = true;
                    eprintln!(
                        "gputrace: cannot write the calibration cache in {}: {e}",
                        self.shown.display()
                    );
                }
            }
        }
    }
}

impl CalibrationCache {
    /// The probe hit cost measured before under `key` (a `sha256:` key).
    pub fn get_hit_cost(&self, key: &str) -> Option<crate::model::sampling::HitCost> {
        let Place::Dir(fd) = &self.place else {
            return None;
        };
        read_map(
            fd,
            &self.shown,
            HIT_COST_FILE,
            crate::model::sampling::HitCost::is_plausible,
        )
        .ok()?
        .remove(key)
    }

    /// The in-place cost ratio a budget last read under `key`.
    pub fn get_in_place_ratio(&self, key: &str) -> Option<f64> {
        let Place::Dir(fd) = &self.place else {
            return None;
        };
        read_map(fd, &self.shown, IN_PLACE_FILE, plausible_ratio)
            .ok()?
            .remove(key)
    }

    /// Keeps an in-place cost ratio read now (best effort).
    pub fn insert_in_place_ratio(&self, key: &str, ratio: f64) {
        if let Place::Dir(fd) = &self.place {
            let mut one = BTreeMap::from([(key.to_string(), ratio)]);
            let _ = write_map(fd, &self.shown, IN_PLACE_FILE, &mut one, plausible_ratio);
        }
    }

    /// Keeps a measured probe hit cost (best effort: a cache that cannot
    /// be written only costs a measurement next time).
    pub fn insert_hit_cost(&self, key: &str, cost: crate::model::sampling::HitCost) {
        if let Place::Dir(fd) = &self.place {
            let mut one = BTreeMap::from([(key.to_string(), cost)]);
            let _ = write_map(
                fd,
                &self.shown,
                HIT_COST_FILE,
                &mut one,
                crate::model::sampling::HitCost::is_plausible,
            );
        }
    }
}

/// What `InPlace::ratio` can give: at least 1, at most 4.
fn plausible_ratio(r: &f64) -> bool {
    (1.0..=4.0).contains(r)
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
    if let Ok(theirs) = read_map(dir, shown, name, plausible) {
        for (k, l) in theirs {
            known.entry(k).or_insert(l);
        }
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
    // SAFETY: renameat within the directory we hold.
    let renamed = written.and_then(|_| {
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

    #[test]
    fn round_trips_on_disk_with_safe_modes() {
        let dir = std::env::temp_dir().join(format!("gputrace-cal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = CalibrationCache::open(&dir);
        assert!(c.get(&key('a')).is_none());
        c.insert(key('a'), Layout(vec![8]));
        assert_eq!(
            CalibrationCache::open(&dir).get(&key('a')),
            Some(Layout(vec![8]))
        );
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let f = std::fs::metadata(dir.join(FILE)).unwrap();
        assert_eq!(f.mode() & 0o777, 0o600);
        // Malformed keys and implausible layouts are dropped on reading.
        let poisoned = serde_json::json!({
            key('b'): [16],
            "build-id:abc": [8],
            key('c'): [8, 16, 24],
            key('d'): [4096],
        });
        std::fs::write(dir.join(FILE), poisoned.to_string()).unwrap();
        let mut c = CalibrationCache::open(&dir);
        assert_eq!(c.get(&key('b')), Some(Layout(vec![16])));
        assert_eq!(c.known.len(), 1);
        // A file others may read is ignored and left alone.
        std::fs::set_permissions(dir.join(FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = CalibrationCache::open(&dir);
        assert!(c.get(&key('b')).is_none());
        c.insert(key('e'), Layout(vec![8]));
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert!(!text.contains(&key('e')));
        // So is a symbolic link in its place.
        std::fs::remove_file(dir.join(FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join(FILE)).unwrap();
        let mut c = CalibrationCache::open(&dir);
        c.insert(key('f'), Layout(vec![8]));
        assert!(matches!(c.place, Place::Ignored(_)));
        assert!(std::fs::symlink_metadata(dir.join(FILE))
            .unwrap()
            .file_type()
            .is_symlink());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The in-place cost ratio: kept per key, merged with what another
    /// gputrace wrote, and only a plausible one read back.
    #[test]
    fn in_place_ratios_round_trip() {
        let dir = std::env::temp_dir().join(format!("gputrace-ratio-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = CalibrationCache::open(&dir);
        assert_eq!(c.get_in_place_ratio(&key('a')), None);
        c.insert_in_place_ratio(&key('a'), 1.5);
        CalibrationCache::open(&dir).insert_in_place_ratio(&key('b'), 2.0);
        let c = CalibrationCache::open(&dir);
        assert_eq!(c.get_in_place_ratio(&key('a')), Some(1.5));
        assert_eq!(c.get_in_place_ratio(&key('b')), Some(2.0));
        c.insert_in_place_ratio(&key('a'), 1.7);
        assert_eq!(c.get_in_place_ratio(&key('a')), Some(1.7));
        let f = std::fs::metadata(dir.join(IN_PLACE_FILE)).unwrap();
        assert_eq!(f.mode() & 0o777, 0o600);
        std::fs::write(
            dir.join(IN_PLACE_FILE),
            serde_json::json!({ key('c'): 9.0, key('d'): 0.5, key('e'): 3.0 }).to_string(),
        )
        .unwrap();
        let c = CalibrationCache::open(&dir);
        assert_eq!(c.get_in_place_ratio(&key('c')), None);
        assert_eq!(c.get_in_place_ratio(&key('d')), None);
        assert_eq!(c.get_in_place_ratio(&key('e')), Some(3.0));
        let _ = std::fs::remove_dir_all(&dir);
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
