//! The probes attached so far, keyed by (scope, library file), so that
//! nothing is attached twice; and the library files given on the command
//! line in place of what the processes map.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::Failure;
use crate::error::Result;
use crate::names::namer::KernelNamer;
use std::sync::Arc;

use crate::budget::sampler::Sampler;
use crate::catalogue::Lib;
use crate::catalogue::ProbeSelection;
use crate::host::discover;
use crate::host::discover::LibraryFile;
use crate::probes::attach::Probes;
use crate::probes::links::detach_many;
use crate::probes::links::Attachment;
use crate::probes::links::Link;
use crate::probes::links::Scope;
use crate::probes::symbols::resolve_symbols;
use crate::probes::symbols::SymbolError;

/// A library file: (device, inode).
pub(super) type FileKey = (u64, u64);

/// Library files given on the command line replace what maps show.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub libcuda: Option<PathBuf>,
    pub libnccl: Option<PathBuf>,
}

impl Overrides {
    fn get(&self, lib: Lib) -> Option<&PathBuf> {
        match lib {
            Lib::Cuda => self.libcuda.as_ref(),
            Lib::Nccl => self.libnccl.as_ref(),
            Lib::Cudart | Lib::Cublas | Lib::CublasLt => None,
        }
    }

    /// Opens the override files, failing with a clear message.
    pub(super) fn open(&self) -> Result<Vec<LibraryFile>> {
        let mut out = Vec::new();
        for lib in [Lib::Cuda, Lib::Nccl] {
            if let Some(path) = self.get(lib) {
                let named = |e: String| {
                    Failure::runtime(format!("--{} {}: {e}", lib.label(), path.display()))
                };
                let file =
                    LibraryFile::open(lib, path.clone()).map_err(|e| named(e.to_string()))?;
                // Checked before anything is calibrated or attached, so a
                // wrong file is one line, not a warning and then an error.
                let found = resolve_symbols(&file.path, lib).map_err(|e| match e {
                    SymbolError::Read { cause, .. } => named(cause.to_string()),
                    SymbolError::Parse { cause, .. } => {
                        named(format!("not an ELF shared library ({cause})"))
                    }
                })?;
                if found.is_empty() {
                    return Err(named(format!(
                        "defines none of the {} functions gputrace probes",
                        lib.label()
                    )));
                }
                out.push(file);
            }
        }
        Ok(out)
    }
}

pub(super) struct Attacher {
    probes: Probes,
    selection: ProbeSelection,
    overrides: Vec<LibraryFile>,
    attached: HashMap<(Scope, FileKey), Attachment>,
    /// `--overhead-budget`: attaches the samplable symbols of every file.
    sampler: Option<Arc<Sampler>>,
}

impl Attacher {
    pub(super) fn new(
        probes: Probes,
        selection: ProbeSelection,
        overrides: Vec<LibraryFile>,
    ) -> Self {
        Self {
            probes,
            selection,
            overrides,
            attached: HashMap::new(),
            sampler: None,
        }
    }

    /// The prologue class of each API's function in the libraries resolved.
    pub(super) fn prologues(&self) -> Arc<crate::probes::symbols::Prologues> {
        self.probes.prologues()
    }

    /// `--overhead-budget`: from now on samplable symbols are attached by a
    /// sampler. `None` when the kernel has no multi-uprobe links (the
    /// sampler needs them to attach and detach quickly).
    pub(super) fn start_sampler(&mut self, period: std::time::Duration) -> Option<Arc<Sampler>> {
        if !self.probes.split_hot() {
            return None;
        }
        let multi = self.probes.multi_programs()?;
        let s = Arc::new(Sampler::start(
            multi,
            self.probes.inflight_per_task(),
            period,
        ));
        self.sampler = Some(s.clone());
        Some(s)
    }

    /// An attachment with the sampler's links of the same file added (to
    /// be detached together).
    fn with_hot(&self, key: &(Scope, FileKey), mut att: Attachment) -> Attachment {
        if let Some(s) = &self.sampler {
            let (e, r) = s.remove(key);
            att.entry.extend(e.map(Link::Multi));
            att.ret.extend(r.map(Link::Multi));
        }
        att
    }

    /// The libnccl builds probed (shared with the decoder).
    pub(super) fn nccl_libraries(&self) -> crate::nccl::libs::NcclLibraries {
        self.probes.nccl_libraries()
    }

    /// The library files to probe for `pid`: what it maps, with the
    /// overrides standing in for their kind.
    pub(super) fn libraries_of(&self, pid: u32) -> std::io::Result<Vec<LibraryFile>> {
        let mut files = discover::process_libraries(pid)?;
        files.retain(|f| !self.overrides.iter().any(|o| o.lib == f.lib));
        files.extend(self.overrides.iter().cloned());
        files.retain(|f| self.selection.wants_lib(f.lib));
        files.sort_by_key(|f| f.lib.attach_order());
        Ok(files)
    }

    /// The library files a command started with `-- CMD` will load: the
    /// overrides, else where the loader would find them for `exe`.
    pub(super) fn libraries_for(&self, exe: &std::path::Path) -> Vec<LibraryFile> {
        let ld_path = std::env::var_os("LD_LIBRARY_PATH");
        let mut files = self.overrides.clone();
        // The libraries a program loads by name (the runtime is linked in
        // or loaded with the program's own path: found once mapped).
        for lib in [Lib::Cuda, Lib::Nccl, Lib::Cublas, Lib::CublasLt] {
            if files.iter().any(|f| f.lib == lib) {
                continue;
            }
            let found = lib
                .sonames()
                .iter()
                .find_map(|n| discover::find_library(n, Some(exe), ld_path.as_deref()));
            if let Some(p) = found {
                if let Ok(f) = LibraryFile::open(lib, p) {
                    files.push(f);
                }
            }
        }
        files.retain(|f| self.selection.wants_lib(f.lib));
        files.sort_by_key(|f| f.lib.attach_order());
        files
    }

    /// Attaches to `file` in `scope` unless already done; returns probes added.
    /// A libcuda's calibration for kernel names is started first (it runs
    /// beside the tracing); a libcudart is probed unless those names can be
    /// read from handles now (not while the calibration runs).
    pub(super) fn attach(
        &mut self,
        file: &LibraryFile,
        scope: Scope,
        namer: &mut KernelNamer,
    ) -> anyhow::Result<usize> {
        let key = (scope, (file.dev, file.inode));
        if self.attached.contains_key(&key) {
            return Ok(0);
        }
        // Launches look up a runtime host stub only where handles cannot be named.
        let mut runtime_stubs = false;
        match (file.lib, scope) {
            (Lib::Cuda, Scope::Process(pid)) => {
                namer.bind(pid, file);
                runtime_stubs = !namer.has_layout(pid);
            }
            (Lib::Cuda, Scope::All) => {
                // Also while it is calibrated (the probes are not attached
                // again when it ends).
                runtime_stubs = !matches!(namer.calibrate(file), Some(Ok(_)));
            }
            (Lib::Cudart, Scope::Process(pid)) if namer.has_layout(pid) => {
                self.attached.insert(key, Attachment::default());
                return Ok(0);
            }
            (Lib::Cudart, Scope::All) if namer.all_calibrated() => {
                self.attached.insert(key, Attachment::default());
                return Ok(0);
            }
            (Lib::Cudart, Scope::Process(pid)) => namer.remember_mappings(pid),
            _ => {}
        }
        let mut att = self.probes.attach(file, scope, runtime_stubs)?;
        let mut n = att.probes();
        if let (Some(hot), Some(s)) = (att.hot.take(), &self.sampler) {
            let before = s.probes();
            if let Err(e) = s.add(key, hot) {
                detach_many(vec![att]);
                return Err(anyhow::Error::new(e).context(format!(
                    "attaching sampled uprobes to {}",
                    file.path.display()
                )));
            }
            n += s.probes().saturating_sub(before);
        }
        self.attached.insert(key, att);
        Ok(n)
    }

    pub(super) fn is_attached(&self, file: &LibraryFile, scope: Scope) -> bool {
        self.attached.contains_key(&(scope, (file.dev, file.inode)))
    }

    pub(super) fn probe_count(&self) -> usize {
        self.attached
            .values()
            .map(Attachment::probes)
            .sum::<usize>()
            + self.sampler.as_ref().map_or(0, |s| s.probes())
    }

    /// The files attached in `scope`.
    pub(super) fn files_in(&self, scope: Scope) -> Vec<FileKey> {
        self.attached
            .keys()
            .filter(|k| k.0 == scope)
            .map(|k| k.1)
            .collect()
    }

    /// Files probed in `scope` with at least one probe.
    pub(super) fn probed_files(&self, scope: Scope) -> usize {
        self.attached
            .iter()
            .filter(|(k, a)| k.0 == scope && a.probes() > 0)
            .count()
    }

    /// Takes out one file's attachment (to be detached with
    /// [`detach_many`]) and forgets the file's symbols.
    pub(super) fn take_file(&mut self, scope: Scope, file: FileKey) -> Option<Attachment> {
        let att = self.attached.remove(&(scope, file))?;
        if !self.attached.keys().any(|k| k.1 == file) {
            self.probes.forget_file(file.0, file.1);
        }
        Some(self.with_hot(&(scope, file), att))
    }

    /// Takes out everything in `scope`, to be detached with [`detach_many`].
    pub(super) fn take_scope(&mut self, scope: Scope) -> Vec<Attachment> {
        self.files_in(scope)
            .into_iter()
            .filter_map(|f| {
                let att = self.attached.remove(&(scope, f))?;
                Some(self.with_hot(&(scope, f), att))
            })
            .collect()
    }

    pub(super) fn detach_all(&mut self) {
        let all: Vec<_> = self.attached.drain().collect();
        let all = all.into_iter().map(|(k, a)| self.with_hot(&k, a)).collect();
        detach_many(all);
    }
}
