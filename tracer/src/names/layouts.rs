//! The layouts calibration found for each libcuda build (where a
//! `CUfunction` keeps its kernel's name, and where an executable graph keeps
//! its nodes), kept in the cache between runs under the library's content
//! key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::graphs::layout::ExecLayout;
use crate::names::calibrate::Found;
use crate::names::calibrate::Layout;

/// The names layouts, by library key.
const FILE: &str = "calibration-v2.json";
/// Executable-graph layouts, by the same keys, in a file of their own (so
/// that a gputrace without graphs reads `FILE` as before).
const EXEC_FILE: &str = "exec-layouts-v2.json";

/// What the cache keeps of an executable-graph calibration: a failure is
/// kept too (the names calibration of the same run succeeded, so the GPU
/// was there: it is this driver's answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExecEntry {
    pub layout: Option<ExecLayout>,
    pub error: Option<String>,
}

impl ExecEntry {
    pub(crate) fn of(r: &Result<ExecLayout, String>) -> Self {
        Self {
            layout: r.as_ref().ok().cloned(),
            error: r.as_ref().err().cloned(),
        }
    }

    pub(crate) fn result(&self) -> Result<ExecLayout, String> {
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

/// The layouts known on this host, read once at start.
pub(crate) struct LayoutCache {
    cache: Cache,
    known: BTreeMap<String, Layout>,
    exec: BTreeMap<String, ExecEntry>,
    said: bool,
}

impl LayoutCache {
    /// Opens the cache in `dir` and reads both files; a file that is not
    /// ours alone makes the whole cache ignored (said once).
    pub(crate) fn open(dir: &Path) -> Self {
        let mut cache = Cache::open(dir);
        let read = cache
            .read(FILE, Layout::is_plausible)
            .and_then(|known| Ok((known, cache.read(EXEC_FILE, ExecEntry::is_plausible)?)));
        let (known, exec) = match read {
            Ok(both) => both,
            Err(why) => {
                cache.ignore(why);
                Default::default()
            }
        };
        Self {
            cache,
            known,
            exec,
            said: false,
        }
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<Layout> {
        self.cache.say_once();
        self.known.get(key).cloned()
    }

    /// Both layouts of a library, when both are known.
    pub(crate) fn get_found(&mut self, key: &str) -> Option<Found> {
        let names = self.get(key)?;
        Some(Found {
            names,
            exec: self.exec.get(key)?.result(),
        })
    }

    /// Records both layouts of a trusted library (only those: see `namer`).
    pub(crate) fn insert_found(&mut self, key: String, found: &Found) {
        self.exec.insert(key.clone(), ExecEntry::of(&found.exec));
        // Best effort, as for the names.
        let _ = self
            .cache
            .write(EXEC_FILE, &mut self.exec, ExecEntry::is_plausible);
        self.insert(key, found.names.clone());
    }

    /// Records a layout of a trusted library (only those: see `namer`).
    pub(crate) fn insert(&mut self, key: String, layout: Layout) {
        self.cache.say_once();
        self.known.insert(key, layout);
        // Best effort: a cache that cannot be written only costs a
        // calibration next time.
        if let Err(e) = self
            .cache
            .write(FILE, &mut self.known, Layout::is_plausible)
        {
            if !self.said {
                self.said = true;
                crate::say!(
                    "cannot write the calibration cache in {}: {e}",
                    self.cache.shown().display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn key(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn layouts_round_trip_and_a_file_not_ours_alone_ignores_the_cache() {
        let dir = std::env::temp_dir().join(format!("gputrace-cal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = LayoutCache::open(&dir);
        assert!(c.get(&key('a')).is_none());
        c.insert(key('a'), Layout(vec![8]));
        assert_eq!(
            LayoutCache::open(&dir).get(&key('a')),
            Some(Layout(vec![8]))
        );
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
        let mut c = LayoutCache::open(&dir);
        assert_eq!(c.get(&key('b')), Some(Layout(vec![16])));
        assert_eq!(c.known.len(), 1);
        // A file others may read is ignored and left alone.
        std::fs::set_permissions(dir.join(FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = LayoutCache::open(&dir);
        assert!(c.get(&key('b')).is_none());
        c.insert(key('e'), Layout(vec![8]));
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert!(!text.contains(&key('e')));
        // So is a symbolic link in its place.
        std::fs::remove_file(dir.join(FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join(FILE)).unwrap();
        let mut c = LayoutCache::open(&dir);
        c.insert(key('f'), Layout(vec![8]));
        assert!(!c.cache.on_disk());
        assert!(std::fs::symlink_metadata(dir.join(FILE))
            .unwrap()
            .file_type()
            .is_symlink());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
