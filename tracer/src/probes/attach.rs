//! Loading the eBPF object and attaching its two programs to library symbols.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use aya::maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf};

pub use crate::probes::lost::LostByPid;
pub use crate::probes::lost::LostCounter;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint};
use aya::programs::RawTracePoint;
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};
use tracer_common::{CommLayout as ProbeLayout, ProbeCookie};

use crate::catalogue::Lib;
use crate::catalogue::ProbeSelection;
use crate::host::discover::LibraryFile;
use crate::model::types::Family;
use crate::nccl::libs::NcclLibraries;
use crate::nccl::libs::Slot;
use crate::probes::hot::HotSet;
use crate::probes::multi::MultiLink;
use crate::probes::multi::MultiPrograms;
use crate::probes::multi::SessionProgram;
use crate::probes::symbols::resolve_symbols;
use crate::probes::symbols::Prologues;
use crate::probes::symbols::ResolvedSymbol;
use crate::stacks::settings::PyProcMap;
use crate::stacks::settings::StackSettings;

use crate::probes::links::detach_many;
pub use crate::probes::links::Attachment;
use crate::probes::links::Link;
pub use crate::probes::links::Scope;

const ENTRY: &str = "call_entry";
const RETURN: &str = "call_return";

/// The loaded eBPF programs and every attachment made with them.
pub struct Probes {
    ebpf: Ebpf,
    selection: ProbeSelection,
    symbols: HashMap<(u64, u64), Vec<ResolvedSymbol>>,
    /// The prologue class of each API's function in the files resolved
    /// (what a hit costs depends on it; shared with the overhead budget).
    prologues: Arc<Prologues>,
    /// Programs for multi-uprobe links, when the kernel has them (shared
    /// with the sampler's thread).
    multi: Option<Arc<MultiPrograms>>,
    /// `:counts` where the kernel has uprobe sessions: the counted calls'
    /// program (else they keep their starts in task storage).
    session: Option<SessionProgram>,
    /// `--overhead-budget`: samplable symbols go to a [`HotSet`] of their
    /// own instead of this file's links.
    split_hot: bool,
    /// `--stacks`: every probe captures its caller's stack.
    stacks: Option<StackSettings>,
    per_task: bool,
    /// The libnccl builds probed, each with its communicator layout slot.
    nccl: NcclLibraries,
}

/// How probes are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// One multi-uprobe link per library (fast attach and detach).
    Multi,
    /// One perf event per probe (older kernels).
    PerfEvent,
}

impl Probes {
    /// Loads and verifies the programs; attaches nothing yet.
    ///
    /// Calls in flight are kept in task storage where the kernel lets
    /// uprobe programs use it, else in an LRU hash map (slower: a bucket
    /// and a list lock at entry and return). `config.inflight_map`
    /// (`GPUTRACE_INFLIGHT=map`) forces the map. `config.perf_events`:
    /// attach one perf event per probe even where the kernel has
    /// multi-uprobe links.
    /// `stacks`: capture call stacks (`--stacks`).
    pub fn load(
        selection: ProbeSelection,
        config: &crate::config::Config,
        stacks: Option<StackSettings>,
    ) -> anyhow::Result<Self> {
        let (ring_bytes, perf_events) = (config.ring_bytes, config.perf_events);
        if !config.inflight_map {
            match Self::load_with(selection.clone(), ring_bytes, perf_events, stacks, true) {
                Ok(p) => return Ok(p),
                Err(e) if selection.counts_any() => {
                    return Err(e.context(
                        "`:counts` needs task storage in uprobe programs: trace those families without `:counts`",
                    ));
                }
                Err(e) => {
                    if let Ok(p) =
                        Self::load_with(selection, ring_bytes, perf_events, stacks, false)
                    {
                        crate::say!(
                            "this kernel's uprobe programs cannot use task storage ({e:#}); calls in flight are kept in a hash map, which costs each traced call more"
                        );
                        return Ok(p);
                    }
                    return Err(e);
                }
            }
        }
        if selection.counts_any() {
            anyhow::bail!(
                "`:counts` needs task storage in uprobe programs, which this kernel (or GPUTRACE_INFLIGHT=map) does not give: trace those families without `:counts`"
            );
        }
        Self::load_with(selection, ring_bytes, perf_events, stacks, false)
    }

    fn load_with(
        selection: ProbeSelection,
        ring_bytes: u32,
        perf_events: bool,
        stacks: Option<StackSettings>,
        per_task: bool,
    ) -> anyhow::Result<Self> {
        let wakeup = u64::from(ring_bytes / 4);
        // The in-flight map keeps an LRU list per CPU (less lock contention
        // between threads): give each CPU room for 512 calls in flight.
        let cpus = aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1);
        let inflight = if per_task {
            // Only NCCL calls wait there (userspace scans them for stalls).
            (64 * cpus).max(1024)
        } else {
            (512 * cpus).max(16384)
        };
        let per_task_flag = u32::from(per_task);
        let globals = stacks.map(|s| s.globals());
        let mut loader = EbpfLoader::new();
        loader
            // aya 0.14 creates task storage maps but has no type for them.
            .allow_unsupported_maps()
            .map_max_entries("EVENTS", ring_bytes)
            .map_max_entries("INFLIGHT", inflight)
            .override_global("WAKEUP_BYTES", &wakeup, true)
            .override_global("INFLIGHT_PER_TASK", &per_task_flag, true);
        if let Some(globals) = &globals {
            // One stack scratch buffer per CPU (only with --stacks: ~34 KiB each).
            loader.map_max_entries("STACK_SCRATCH", cpus);
            for (name, value) in globals {
                loader.override_global(name, value, true);
            }
        }
        let mut ebpf = loader
            .load(crate::EBPF_OBJECT)
            .context("loading the eBPF object")?;
        for name in [ENTRY, RETURN] {
            let prog: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?
                .try_into()?;
            prog.load()
                .with_context(|| format!("verifying eBPF program {name}"))?;
        }
        let multi = if perf_events {
            None
        } else {
            MultiPrograms::load(&ebpf, crate::EBPF_OBJECT)
                .ok()
                .map(Arc::new)
        };
        let session = match (&multi, selection.counts_any()) {
            (Some(_), true) => match SessionProgram::load(&ebpf, crate::EBPF_OBJECT) {
                Ok(s) => Some(s),
                Err(e) => {
                    crate::debug!(
                        "counted calls keep their starts in task storage (no uprobe sessions: {e:#})"
                    );
                    None
                }
            },
            _ => None,
        };
        Ok(Self {
            ebpf,
            selection,
            symbols: HashMap::new(),
            prologues: Arc::default(),
            multi,
            session,
            split_hot: false,
            stacks,
            per_task,
            nccl: NcclLibraries::default(),
        })
    }

    /// Attaches the exec tracepoint (`sched_process_exec`, raw: no tracefs
    /// needed): from now on every exec is said in the ring buffer, in
    /// order with the calls.
    pub(crate) fn follow_execs(&mut self) -> anyhow::Result<()> {
        let prog: &mut RawTracePoint = self
            .ebpf
            .program_mut("process_exec")
            .ok_or_else(|| anyhow!("program process_exec missing from the eBPF object"))?
            .try_into()?;
        prog.load().context("verifying eBPF program process_exec")?;
        prog.attach("sched_process_exec")
            .context("attaching to the sched_process_exec tracepoint")?;
        Ok(())
    }

    /// The multi-uprobe programs (`None` on kernels without such links).
    pub(crate) fn multi_programs(&self) -> Option<Arc<MultiPrograms>> {
        self.multi.clone()
    }

    /// From now on, samplable symbols are attached through a [`HotSet`]
    /// (only with multi-uprobe links: false when there are none).
    pub(crate) fn split_hot(&mut self) -> bool {
        self.split_hot = self.multi.is_some();
        self.split_hot
    }

    /// The entry or return program, for a perf-event uprobe.
    pub(crate) fn uprobe_program(&mut self, ret: bool) -> anyhow::Result<&mut UProbe> {
        self.program(if ret { RETURN } else { ENTRY })
    }

    /// Whether calls in flight are kept in task storage (else a hash map).
    pub fn inflight_per_task(&self) -> bool {
        self.per_task
    }

    /// The libnccl builds probed (shared: the decoder reads records' slots).
    pub fn nccl_libraries(&self) -> NcclLibraries {
        self.nccl.clone()
    }

    /// The layout slot of a libnccl file, its layout written to the probes'
    /// map the first time its build is seen; 0 for other libraries or when
    /// no slot can be had (said once).
    fn layout_slot(&mut self, file: &LibraryFile) -> u32 {
        if file.lib != Lib::Nccl {
            return 0;
        }
        match self.nccl.slot_for(&file.path) {
            Slot::Known(slot) => slot,
            Slot::New(slot, lib) => {
                let written = self
                    .ebpf
                    .map_mut("COMM_LAYOUTS")
                    .ok_or_else(|| anyhow!("COMM_LAYOUTS map missing"))
                    .and_then(|m| Ok(Array::<_, ProbeLayout>::try_from(m)?))
                    .and_then(|mut a| Ok(a.set(slot, lib.probe_layout(), 0)?));
                match written {
                    Ok(()) => slot,
                    Err(e) => {
                        crate::say!(
                            "{}: cannot give the probes its communicator layout: {e:#}",
                            crate::text::printable_path(&file.path)
                        );
                        0
                    }
                }
            }
            Slot::None(msg) => {
                if let Some(m) = msg {
                    crate::say!("{m}");
                }
                0
            }
        }
    }

    pub fn attach_mode(&self) -> AttachMode {
        if self.multi.is_some() {
            AttachMode::Multi
        } else {
            AttachMode::PerfEvent
        }
    }

    /// The catalogue symbols of `file` that the selection asks for.
    pub fn symbols(&mut self, file: &LibraryFile) -> anyhow::Result<Vec<ResolvedSymbol>> {
        let key = (file.dev, file.inode);
        if let std::collections::hash_map::Entry::Vacant(e) = self.symbols.entry(key) {
            let found = resolve_symbols(&file.path, file.lib)?;
            self.prologues.record(&found);
            e.insert(found);
        }
        Ok(self.symbols[&key]
            .iter()
            .filter(|s| self.selection.mode(s.api.family).is_some())
            .cloned()
            .collect())
    }

    /// The prologue classes of the APIs' functions resolved so far (and
    /// later).
    pub fn prologues(&self) -> Arc<Prologues> {
        self.prologues.clone()
    }

    /// Drops the symbols kept for a file that is no longer probed.
    pub fn forget_file(&mut self, dev: u64, inode: u64) {
        self.symbols.remove(&(dev, inode));
    }

    /// Attaches an entry probe (and a return probe unless the family is
    /// `:args`) to every selected symbol of `file`.
    /// `runtime_stubs`: launches of this libcuda look up the host stub of a
    /// traced runtime call (only needed where handles cannot be named; it
    /// costs a map lookup per launch).
    pub fn attach(
        &mut self,
        file: &LibraryFile,
        scope: Scope,
        runtime_stubs: bool,
    ) -> anyhow::Result<Attachment> {
        let symbols = self.symbols(file)?;
        let mut att = Attachment {
            per_task: self.per_task,
            ..Attachment::default()
        };
        if symbols.is_empty() {
            return Ok(att);
        }
        let runtime_stubs = (runtime_stubs, self.layout_slot(file));
        if let Some(multi) = self.multi.clone() {
            match self.attach_multi(&multi, file, scope, &symbols, runtime_stubs) {
                Ok((entry, ret, session, hot)) => {
                    att.entry.extend(entry.map(Link::Multi));
                    att.ret.extend(session.map(Link::Multi));
                    att.ret.extend(ret.map(Link::Multi));
                    att.hot = hot;
                    return Ok(att);
                }
                // A kernel without multi-uprobe links, or a filesystem it
                // refuses (524 is the kernel's ENOTSUPP): fall back to one perf event per probe.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EOPNOTSUPP | 524)
                    ) =>
                {
                    self.multi = None;
                    self.split_hot = false;
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "attaching {} uprobes to {}",
                        symbols.len(),
                        file.path.display()
                    )))
                }
            }
        }
        match self.attach_symbols(file, scope, &symbols, &mut att, runtime_stubs) {
            Ok(()) => Ok(att),
            Err(e) => {
                detach_many(vec![att]);
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn attach_multi(
        &self,
        multi: &MultiPrograms,
        file: &LibraryFile,
        scope: Scope,
        symbols: &[ResolvedSymbol],
        (runtime_stubs, slot): (bool, u32),
    ) -> std::io::Result<(
        Option<MultiLink>,
        Option<MultiLink>,
        Option<MultiLink>,
        Option<HotSet>,
    )> {
        let pid = match scope {
            Scope::Process(pid) => Some(pid),
            Scope::All => None,
        };
        let mut entry = (Vec::new(), Vec::new());
        let mut ret = (Vec::new(), Vec::new());
        let mut counted = (Vec::new(), Vec::new());
        let mut hot = HotSet::new(pid);
        for sym in symbols {
            let (cookie, args_only) = self.cookie(sym, runtime_stubs);
            let cookie = cookie.with_comm_layout(slot);
            if cookie.counted() && self.session.is_some() {
                counted.0.push(sym.file_offset);
                counted.1.push(cookie.0);
                continue;
            }
            if self.split_hot && sym.api.samplable() {
                hot.push(sym.file_offset, cookie, !args_only);
                continue;
            }
            entry.0.push(sym.file_offset);
            entry.1.push(cookie.0);
            if !args_only {
                ret.0.push(sym.file_offset);
                ret.1.push(cookie.0);
            }
        }
        let hot = if hot.is_empty() {
            None
        } else {
            // Held open: the sampler attaches to it again and again, and
            // `file.path` may be a /proc path that goes away.
            Some(hot.open(&file.path)?)
        };
        let link = |o: &(Vec<u64>, Vec<u64>), is_ret: bool| -> std::io::Result<Option<MultiLink>> {
            if o.0.is_empty() {
                Ok(None)
            } else {
                Ok(Some(multi.attach(&file.path, &o.0, &o.1, pid, is_ret)?))
            }
        };
        // One link runs the counted calls' program at entry and return.
        let session = match &self.session {
            Some(p) if !counted.0.is_empty() => {
                Some(p.attach(&file.path, &counted.0, &counted.1, pid)?)
            }
            _ => None,
        };
        if self.per_task {
            // Returns first: a call entered before the entry probe is
            // attached then returns to no slot, which is not counted (it
            // began before tracing). Entries first would leave every call
            // made between the two attachments an entry whose return never
            // comes, counted as lost (tens of milliseconds of calls).
            let ret_link = link(&ret, true)?;
            let entry_link = link(&entry, false)?;
            Ok((entry_link, ret_link, session, hot))
        } else {
            // Entry first, so no return fires without its entry record (the
            // map counts a return without one as lost).
            let entry_link = link(&entry, false)?;
            Ok((entry_link, link(&ret, true)?, session, hot))
        }
    }

    fn attach_symbols(
        &mut self,
        file: &LibraryFile,
        scope: Scope,
        symbols: &[ResolvedSymbol],
        att: &mut Attachment,
        (runtime_stubs, slot): (bool, u32),
    ) -> anyhow::Result<()> {
        let uscope = scope.uprobe_scope()?;
        for sym in symbols {
            let (cookie, args_only) = self.cookie(sym, runtime_stubs);
            let cookie = cookie.with_comm_layout(slot);
            let point = |c: u64| UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(sym.file_offset),
                cookie: Some(c),
            };
            // The same order as for multi-uprobe links (see `attach_multi`).
            let order: &[bool] = match (args_only, self.per_task) {
                (true, _) => &[false],
                (false, true) => &[true, false],
                (false, false) => &[false, true],
            };
            for &is_ret in order {
                let (name, what) = if is_ret {
                    (RETURN, "uretprobe")
                } else {
                    (ENTRY, "uprobe")
                };
                let prog = self.program(name)?;
                let id = prog
                    .attach(point(cookie.0), &file.path, uscope)
                    .with_context(|| {
                        format!(
                            "attaching a {what} to {} in {}",
                            sym.api.name,
                            file.path.display()
                        )
                    })?;
                let link = Link::Perf(prog.take_link(id)?);
                if is_ret {
                    att.ret.push(link);
                } else {
                    att.entry.push(link);
                }
            }
        }
        Ok(())
    }

    /// The attach cookie of a symbol: its API's, plus the stack bits with
    /// `--stacks` (launches sampled, everything else complete).
    fn cookie(&self, sym: &ResolvedSymbol, runtime_stubs: bool) -> (ProbeCookie, bool) {
        let (cookie, args_only) = sym.api.cookie_for(&self.selection, runtime_stubs);
        match self.stacks {
            Some(_) => (
                cookie.with_stacks(matches!(sym.api.family, Family::Launch | Family::Runtime)),
                args_only,
            ),
            None => (cookie, args_only),
        }
    }

    /// The probe's map of Python processes (once; `--stacks` only).
    pub fn take_py_procs(&mut self) -> anyhow::Result<PyProcMap> {
        let map = self
            .ebpf
            .take_map("PY_PROCS")
            .ok_or_else(|| anyhow!("PY_PROCS map missing"))?;
        Ok(PyProcMap(aya::maps::HashMap::try_from(map)?))
    }

    fn program(&mut self, name: &str) -> anyhow::Result<&mut UProbe> {
        Ok(self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("program {name} missing"))?
            .try_into()?)
    }

    /// Takes the ring buffer the programs write to (once).
    pub fn take_ring(&mut self) -> anyhow::Result<RingBuf<aya::maps::MapData>> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .ok_or_else(|| anyhow!("EVENTS map missing"))?;
        Ok(RingBuf::try_from(map)?)
    }

    /// A handle on the in-flight map (entry records of calls not returned),
    /// read to find threads stuck inside a call.
    pub fn take_inflight(
        &mut self,
    ) -> anyhow::Result<aya::maps::HashMap<MapData, u64, tracer_common::CallEvent>> {
        let map = self
            .ebpf
            .take_map("INFLIGHT")
            .ok_or_else(|| anyhow!("INFLIGHT map missing"))?;
        Ok(aya::maps::HashMap::try_from(map)?)
    }

    /// A handle on the lost-event counters, read at any time.
    pub fn take_lost(&mut self) -> anyhow::Result<LostCounter> {
        let map = self
            .ebpf
            .take_map("LOST")
            .ok_or_else(|| anyhow!("LOST map missing"))?;
        Ok(LostCounter(PerCpuArray::try_from(map)?))
    }

    /// A handle on the calls counted in the kernel (`:counts`).
    pub fn take_counts(&mut self) -> anyhow::Result<crate::probes::counts::CountsMap> {
        let map = self
            .ebpf
            .take_map("COUNTS")
            .ok_or_else(|| anyhow!("COUNTS map missing"))?;
        Ok(crate::probes::counts::CountsMap(PerCpuHashMap::try_from(
            map,
        )?))
    }

    /// A handle on the per-process counts of calls not recorded.
    pub fn take_lost_by_pid(&mut self) -> anyhow::Result<LostByPid> {
        let map = self
            .ebpf
            .take_map("LOST_BY_PID")
            .ok_or_else(|| anyhow!("LOST_BY_PID map missing"))?;
        Ok(LostByPid(PerCpuHashMap::try_from(map)?))
    }
}
