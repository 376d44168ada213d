//! A tracing session: probes attached to what the user asked for, the ring
//! buffer, and the live per-process state that turns records into calls.
//! `gputrace` (trace), `top` and `daemon` each drive one with their own loop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use crate::aggregate::enrich::{Clock, Enriched, Enricher};
use crate::error::{Failure, Result};
use crate::events::decode::parse_record;
use crate::names::calibrate::CalibrationCache;
use crate::names::namer::KernelNamer;
use crate::probes::attach::{
    detach_many, Attachment, LostByPid, LostCounter, LostCounts, Probes, Scope, DEFAULT_RING_BYTES,
};
use crate::probes::catalogue::{Lib, ProbeSelection};
use crate::probes::discover::{self, LibraryFile};
use crate::probes::privileges;
use crate::probes::spawn::GatedChild;

mod node;
use node::NodeWatch;

/// How often exits and newly mapped libraries are checked.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the ring buffer is drained when the probes did not wake us.
pub const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// With `--all`, new library files are looked for this often.
pub const SCAN_EVERY: Duration = Duration::from_millis(500);

/// What to trace.
#[derive(Clone, Debug, Default)]
pub struct TargetSpec {
    pub pids: Vec<u32>,
    pub all: bool,
    pub cmd: Vec<String>,
    pub probes: Option<ProbeSelection>,
    pub libcuda: Option<PathBuf>,
    pub libnccl: Option<PathBuf>,
}

/// Library files given on the command line replace what maps show.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub libcuda: Option<PathBuf>,
    pub libnccl: Option<PathBuf>,
}

impl Overrides {
    fn get(&self, lib: Lib) -> Option<&PathBuf> {
        match lib {
            Lib::Cuda => self.libcuda.as_ref(),
            Lib::Nccl => self.libnccl.as_ref(),
            Lib::Cudart => None,
        }
    }

    /// Opens the override files, failing with a clear message.
    fn open(&self) -> Result<Vec<LibraryFile>> {
        let mut out = Vec::new();
        for lib in [Lib::Cuda, Lib::Nccl] {
            if let Some(path) = self.get(lib) {
                let file = LibraryFile::open(lib, path.clone()).map_err(|e| {
                    Failure::runtime(format!("--{} {}: {e}", lib.label(), path.display()))
                })?;
                out.push(file);
            }
        }
        Ok(out)
    }
}

/// Attachments made so far, keyed so that nothing is attached twice.
pub struct Attacher {
    pub probes: Probes,
    selection: ProbeSelection,
    overrides: Vec<LibraryFile>,
    attached: HashMap<(Scope, u64, u64), Attachment>,
}

impl Attacher {
    pub fn new(probes: Probes, selection: ProbeSelection, overrides: Vec<LibraryFile>) -> Self {
        Self {
            probes,
            selection,
            overrides,
            attached: HashMap::new(),
        }
    }

    /// The library files to probe for `pid`: what it maps, with the
    /// overrides standing in for their kind.
    pub fn libraries_of(&self, pid: u32) -> std::io::Result<Vec<LibraryFile>> {
        let mut files = discover::process_libraries(pid)?;
        files.retain(|f| !self.overrides.iter().any(|o| o.lib == f.lib));
        files.extend(self.overrides.iter().cloned());
        files.retain(|f| self.selection.wants_lib(f.lib));
        Ok(files)
    }

    /// Attaches to `file` in `scope` unless already done; returns probes added.
    /// A libcuda is calibrated for kernel names first; a libcudart is probed
    /// only where those names cannot be read from handles.
    pub fn attach(
        &mut self,
        file: &LibraryFile,
        scope: Scope,
        namer: &mut KernelNamer,
    ) -> anyhow::Result<usize> {
        let key = (scope, file.dev, file.inode);
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
                runtime_stubs = namer.calibrate(file).is_err();
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
        let att = self.probes.attach(file, scope, runtime_stubs)?;
        let n = att.probes();
        self.attached.insert(key, att);
        Ok(n)
    }

    pub fn is_attached(&self, file: &LibraryFile, scope: Scope) -> bool {
        self.attached.contains_key(&(scope, file.dev, file.inode))
    }

    pub fn probe_count(&self) -> usize {
        self.attached.values().map(Attachment::probes).sum()
    }

    /// Takes out everything in `scope`, to be detached with [`detach_many`].
    pub fn take_scope(&mut self, scope: Scope) -> Vec<Attachment> {
        let keys: Vec<_> = self
            .attached
            .keys()
            .filter(|k| k.0 == scope)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| self.attached.remove(&k))
            .collect()
    }

    pub fn detach_all(&mut self) {
        detach_many(self.attached.drain().map(|(_, a)| a).collect());
    }
}

pub struct Target {
    pub pid: u32,
    pub exited: bool,
}

/// Everything of a session but the ring buffer.
pub struct SessionState {
    pub attacher: Attacher,
    pub enricher: Enricher,
    pub targets: Vec<Target>,
    pub child: Option<GatedChild>,
    pub all: bool,
    lost: LostCounter,
    lost_by_pid: LostByPid,
    /// Records that could not be decoded (never expected; counted, not hidden).
    pub decode_errors: u64,
    node: NodeWatch,
}

/// A running session. The ring buffer is apart from the state so an event
/// loop can wait on one while it borrows the other.
pub struct Session {
    pub ring: AsyncFd<RingBuf<MapData>>,
    pub state: SessionState,
}

fn validate(spec: &TargetSpec) -> Result<()> {
    if spec.pids.is_empty() && !spec.all && spec.cmd.is_empty() {
        return Err(Failure::usage(
            "nothing to trace: give --pid PID, --all, or -- CMD ARGS (see gputrace --help)",
        ));
    }
    if let Some(pid) = spec.pids.iter().find(|p| **p == 0) {
        return Err(Failure::usage(format!("--pid {pid}: not a process id")));
    }
    Ok(())
}

fn check_pid(pid: u32) -> Result<()> {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Failure::runtime(format!("no process with PID {pid}")));
    }
    if !discover::is_alive(pid) {
        return Err(Failure::runtime(format!(
            "process {pid} has already exited"
        )));
    }
    Ok(())
}

/// Checks the arguments and privileges, before anything else is done.
pub fn preflight(spec: &TargetSpec) -> Result<()> {
    validate(spec)?;
    privileges::check().map_err(Failure::runtime)?;
    for pid in &spec.pids {
        check_pid(*pid)?;
    }
    Ok(())
}

pub fn ring_bytes() -> u32 {
    std::env::var("GPUTRACE_RING_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RING_BYTES)
}

impl Session {
    /// Waits until the probes wake the reader (the handler then drains with
    /// [`Session::drain_now`]; records that come after are drained by the
    /// next wakeup or tick).
    pub async fn readable(&mut self) -> Result<()> {
        let mut guard = self
            .ring
            .readable_mut()
            .await
            .map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
        guard.clear_ready();
        Ok(())
    }

    /// Decodes what is in the ring buffer now (the probes wake the reader
    /// only once a quarter of it is full, so loops also drain on a tick).
    pub fn drain_now(&mut self, f: &mut dyn FnMut(Enriched)) -> usize {
        self.state.drain(self.ring.get_mut(), f)
    }

    /// Loads the probes and attaches them to what `spec` names; a command
    /// given is started and left waiting at its gate (see [`Session::release`]).
    /// Must run inside a tokio runtime.
    pub fn start(spec: &TargetSpec, clock: Clock) -> Result<Session> {
        let selection = spec.probes.clone().unwrap_or_default();
        let overrides = Overrides {
            libcuda: spec.libcuda.clone(),
            libnccl: spec.libnccl.clone(),
        }
        .open()?;
        let mut probes = Probes::load(selection.clone(), ring_bytes(), None)?;
        let ring = probes.take_ring()?;
        let lost = probes.take_lost()?;
        let lost_by_pid = probes.take_lost_by_pid()?;
        let mut attacher = Attacher::new(probes, selection, overrides);
        let mut enricher = Enricher::new(
            clock,
            KernelNamer::new(CalibrationCache::open(&CalibrationCache::default_dir())),
        );

        // Processes given by PID: every one must map something we can probe.
        let mut targets = Vec::new();
        for &pid in &spec.pids {
            let files = attacher
                .libraries_of(pid)
                .map_err(|e| Failure::runtime(format!("cannot read /proc/{pid}/maps: {e}")))?;
            if files.is_empty() {
                let comm = discover::comm(pid).unwrap_or_default();
                return Err(Failure::runtime(format!(
                    "process {pid} ({comm}) maps neither libcuda nor libnccl (looked for libcuda.so*, libnccl.so* in /proc/{pid}/maps); \
                     if they are linked under other names, pass --libcuda PATH / --libnccl PATH"
                )));
            }
            for f in &files {
                attacher.attach(f, Scope::Process(pid), &mut enricher.namer)?;
            }
            enricher.remember(pid);
            targets.push(Target { pid, exited: false });
        }

        let mut node = NodeWatch::new();
        if spec.all {
            node.scan(&mut attacher, &mut enricher.namer, true)?;
            node.reap(&mut enricher);
        }

        let mut child = None;
        if !spec.cmd.is_empty() {
            let c = GatedChild::spawn(&spec.cmd).map_err(|e| Failure::runtime(e.to_string()))?;
            let ld_path = std::env::var_os("LD_LIBRARY_PATH");
            let mut files = attacher.overrides.clone();
            for lib in [Lib::Cuda, Lib::Nccl] {
                if files.iter().any(|f| f.lib == lib) {
                    continue;
                }
                if let Some(p) =
                    discover::find_library(lib.soname(), Some(&c.exe), ld_path.as_deref())
                {
                    if let Ok(f) = LibraryFile::open(lib, p) {
                        files.push(f);
                    }
                }
            }
            files.retain(|f| attacher.selection.wants_lib(f.lib));
            for f in &files {
                attacher.attach(f, Scope::Process(c.pid), &mut enricher.namer)?;
            }
            targets.push(Target {
                pid: c.pid,
                exited: false,
            });
            child = Some(c);
        }
        // SAFETY: the ring buffer owns its map fd, which stays open and the same
        // for as long as the AsyncFd owns the ring buffer.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
        let state = SessionState {
            attacher,
            enricher,
            targets,
            child,
            all: spec.all,
            lost,
            lost_by_pid,
            decode_errors: 0,
            node,
        };
        Ok(Session { ring, state })
    }
}

impl SessionState {
    /// The `gputrace: attached ...` line scripts wait for.
    pub fn announce(&self) {
        let probes = self.attacher.probe_count();
        if self.all {
            eprintln!(
                "gputrace: attached {probes} probes to every process mapping libcuda/libnccl"
            );
        } else {
            let n = self.targets.len();
            eprintln!(
                "gputrace: attached {probes} probes to {n} process{}",
                if n == 1 { "" } else { "es" }
            );
        }
    }

    /// Lets a command started with `-- CMD` run.
    pub fn release(&mut self, cmd: &str) -> Result<()> {
        if let Some(c) = &mut self.child {
            c.release()
                .map_err(|e| Failure::runtime(format!("cannot run `{cmd}`: {e}")))?;
        }
        Ok(())
    }

    /// Decodes every record waiting in `ring`, in order, into `f`.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>, f: &mut dyn FnMut(Enriched)) -> usize {
        self.drain_at_most(ring, usize::MAX, f)
    }

    /// Decodes at most `max` records, so a loop that also answers a user
    /// can bound its work; fewer than `max` means the ring is empty.
    pub fn drain_at_most(
        &mut self,
        ring: &mut RingBuf<MapData>,
        max: usize,
        f: &mut dyn FnMut(Enriched),
    ) -> usize {
        let mut n = 0;
        while n < max {
            let Some(item) = ring.next() else { break };
            n += 1;
            match parse_record(&item)
                .map_err(|_| ())
                .and_then(|raw| self.enricher.enrich(&raw).map_err(|_| ()))
            {
                Ok(e) => f(e),
                Err(()) => self.decode_errors += 1,
            }
        }
        n
    }

    /// Marks exited targets and probes libraries mapped since (and, with
    /// `--all`, new library files, detaching unmapped ones: see `node`).
    /// True when every target has exited.
    pub fn maintain(&mut self) -> Result<bool> {
        if self.all && self.node.due() {
            self.node
                .scan(&mut self.attacher, &mut self.enricher.namer, false)?;
            self.node.reap(&mut self.enricher);
        }
        if self.targets.is_empty() {
            return Ok(false);
        }
        Ok(check_targets(
            &mut self.attacher,
            &mut self.targets,
            &mut self.child,
            &mut self.enricher.namer,
        ))
    }

    pub fn lost(&self) -> LostCounts {
        self.lost.read()
    }

    /// Calls not recorded, per process.
    pub fn lost_by_pid(&self) -> HashMap<u32, u64> {
        self.lost_by_pid.read()
    }

    /// Detaches every probe (the ring keeps what was already recorded).
    pub fn detach_all(&mut self) {
        self.attacher.detach_all();
    }
}

/// Marks exited targets, attaches libraries mapped since; true when all are gone.
fn check_targets(
    attacher: &mut Attacher,
    targets: &mut [Target],
    child: &mut Option<GatedChild>,
    namer: &mut KernelNamer,
) -> bool {
    for t in targets.iter_mut().filter(|t| !t.exited) {
        let gone = match child {
            Some(c) if c.pid == t.pid => c.wait(false).is_some(),
            _ => !discover::is_alive(t.pid),
        };
        if gone {
            t.exited = true;
            // Detaching blocks for grace periods: do it off the event loop.
            let atts = attacher.take_scope(Scope::Process(t.pid));
            std::thread::spawn(move || detach_many(atts));
            continue;
        }
        // Libraries mapped after we attached (dlopen, a path we did not predict).
        if let Ok(files) = attacher.libraries_of(t.pid) {
            for f in files {
                if attacher.is_attached(&f, Scope::Process(t.pid)) {
                    continue;
                }
                match attacher.attach(&f, Scope::Process(t.pid), namer) {
                    Ok(0) => {}
                    Ok(n) => eprintln!(
                        "gputrace: process {} mapped {} after start: attached {n} more probes (its earlier calls were not traced)",
                        t.pid,
                        f.path.display()
                    ),
                    Err(e) => eprintln!("gputrace: cannot attach to {}: {e:#}", f.path.display()),
                }
            }
        }
    }
    targets.iter().all(|t| t.exited)
}
