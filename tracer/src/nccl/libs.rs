//! The libnccl builds being traced: each gets a layout slot (1..=7), which
//! its probes carry in their cookie and write into every record, so a call
//! names the build it came from (its release, hence its hash function, and
//! its communicator layout) without userspace knowing which process maps
//! which file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tracer_common::{CommLayout as ProbeLayout, COMM_LAYOUT_SLOTS, NO_FIELD};

use crate::nccl::hash::NcclVersion;
use crate::nccl::layout::decode_file;
use crate::nccl::layout::CommLayout;

/// One libnccl build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclLibrary {
    /// The first file of this build that was probed.
    pub path: PathBuf,
    pub layout: CommLayout,
}

impl NcclLibrary {
    pub fn version(&self) -> Option<NcclVersion> {
        self.layout.version
    }

    /// The offsets the probe reads (only `seqNumber` when the release
    /// counts without a profiler).
    pub fn probe_layout(&self) -> ProbeLayout {
        let f = |o: Option<u32>| o.unwrap_or(NO_FIELD);
        ProbeLayout {
            hash: f(self.layout.comm_hash),
            rank: f(self.layout.rank),
            nranks: f(self.layout.nranks),
            cuda_dev: f(self.layout.cuda_dev),
            seq: f(self.layout.usable_seq()),
            _pad: 0,
        }
    }
}

/// Slot → build, shared by the attacher (which fills it) and the decoder
/// (which reads it).
#[derive(Clone, Debug, Default)]
pub struct NcclLibraries(Arc<RwLock<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Index = slot; slot 0 is "none".
    slots: Vec<Arc<NcclLibrary>>,
    /// Build key (build id, else size and mtime) → slot.
    by_build: HashMap<String, u32>,
    /// Builds refused for want of a slot (said once each).
    refused: HashMap<String, ()>,
}

/// What [`NcclLibraries::slot_for`] decided.
pub enum Slot {
    /// A build seen before.
    Known(u32),
    /// A new build: its slot, to be written to the probes' layout map.
    New(u32, Arc<NcclLibrary>),
    /// No slot (all taken, or the file cannot be read): its calls carry no
    /// identity. The message is given once per build.
    None(Option<String>),
}

impl NcclLibraries {
    /// The slot for the libnccl at `path` (decoding it the first time its
    /// build is seen).
    pub fn slot_for(&self, path: &Path) -> Slot {
        let key = build_key(path);
        let mut inner = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&slot) = inner.by_build.get(&key) {
            return Slot::Known(slot);
        }
        if inner.refused.contains_key(&key) {
            return Slot::None(None);
        }
        if inner.slots.len() + 1 >= COMM_LAYOUT_SLOTS as usize {
            inner.refused.insert(key, ());
            return Slot::None(Some(format!(
                "{}: more than {} libnccl builds traced at once: its calls carry no communicator identity",
                path.display(),
                COMM_LAYOUT_SLOTS - 1
            )));
        }
        let layout = match decode_file(path) {
            Ok(l) => l,
            Err(e) => {
                inner.refused.insert(key, ());
                return Slot::None(Some(format!("{}: {e}", path.display())));
            }
        };
        let lib = Arc::new(NcclLibrary {
            path: path.to_path_buf(),
            layout,
        });
        inner.slots.push(lib.clone());
        let slot = inner.slots.len() as u32;
        inner.by_build.insert(key, slot);
        Slot::New(slot, lib)
    }

    /// The build of a record's slot.
    pub fn get(&self, slot: u32) -> Option<Arc<NcclLibrary>> {
        let inner = self.0.read().unwrap_or_else(|e| e.into_inner());
        inner.slots.get((slot as usize).checked_sub(1)?).cloned()
    }

    /// Every build traced, by slot.
    pub fn all(&self) -> Vec<Arc<NcclLibrary>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .slots
            .clone()
    }

    /// A library added by hand (tests).
    pub fn insert(&self, key: &str, lib: NcclLibrary) -> u32 {
        let mut inner = self.0.write().unwrap_or_else(|e| e.into_inner());
        inner.slots.push(Arc::new(lib));
        let slot = inner.slots.len() as u32;
        inner.by_build.insert(key.to_string(), slot);
        slot
    }
}

/// What tells two builds apart: the ELF build id, else size and mtime (the
/// same build in many containers is one build).
fn build_key(path: &Path) -> String {
    if let Some(id) = build_id(path) {
        return format!("build-id:{id}");
    }
    match std::fs::metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            format!("size:{}:mtime:{}", m.size(), m.mtime())
        }
        Err(_) => format!("path:{}", path.display()),
    }
}

fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only mapping of a library file (replaced by rename,
    // never rewritten in place; a torn read only fails the parse).
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let id = elf.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}
