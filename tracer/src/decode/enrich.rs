//! Live per-process state that turns raw probe records into [`Call`]s:
//! wall-clock time, the process name, copy directions inferred from the
//! allocations seen, and kernel names learned from the `names` probes.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::budget::sampler::Sampler;
use crate::catalogue;
use crate::decode::memory::MemoryBook;
use crate::decode::memory::Place;
use crate::decode::record::decode_args;
use crate::decode::record::ret_of;
use crate::decode::record::DecodeError;
use crate::graphs::book::GraphBook;
use crate::graphs::book::GraphEnv;
use crate::graphs::book::GraphNote;
use crate::host::clock::Clock;
use crate::host::discover;
use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::graph::GraphRecord;
use crate::model::graph::KernelNode;
use crate::model::graph::Node;
use crate::model::nccl::Unaligned;
use crate::model::raw::RawCall;
use crate::model::types::Direction;
use crate::names::demangle::demangle;
use crate::names::namer::KernelNamer;
use crate::nccl::enrich::NcclState;
use crate::nccl::libs::NcclLibraries;

/// The writable mappings of a process, to tell host memory the trace did not
/// see allocated from the rest. Refreshed at most every 100 ms.
#[derive(Default)]
struct HostMaps {
    ranges: Vec<(u64, u64)>,
    read_at: Option<Instant>,
}

impl HostMaps {
    fn contains(&mut self, pid: u32, addr: u64) -> bool {
        if self.hit(addr) {
            return true;
        }
        if self
            .read_at
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return false;
        }
        self.ranges = read_writable_maps(pid).unwrap_or_default();
        self.read_at = Some(Instant::now());
        self.hit(addr)
    }

    fn hit(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|(start, _)| *start <= addr);
        i > 0 && addr < self.ranges[i - 1].1
    }
}

fn read_writable_maps(pid: u32) -> std::io::Result<Vec<(u64, u64)>> {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", discover::reader_id(pid)))?;
    let mut out: Vec<(u64, u64)> = discover::Mapping::all(&maps)
        .filter(|m| m.perms.starts_with("rw"))
        .map(|m| (m.start, m.end))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Kernel handles named from a process's calls, at most: past it the
/// names of new handles are not kept (their launches are named from the
/// handle in memory where the layout allows, else not), said once.
pub(crate) const MAX_NAMED_HANDLES: usize = 1 << 16;

/// What gputrace knows about one traced process.
pub(crate) struct ProcessState {
    pub comm: Arc<str>,
    pub memory: MemoryBook,
    /// Its NCCL communicators.
    pub nccl: NcclState,
    /// CUfunction / CUkernel handle → (kernel name, demangled; the module or
    /// library it came from), learned from intercepted calls.
    names: HashMap<u64, (Arc<str>, u64)>,
    host_maps: HostMaps,
    /// Its CUDA graphs and stream captures.
    pub graphs: GraphBook,
    /// Its cuBLASLt descriptors.
    lt: crate::decode::lt::LtBook,
    /// Notes said already (once per process each: opaque graphs, a capture
    /// under way at attach).
    said_opaque: bool,
    said_mid_capture: bool,
    said_sampled_capture: bool,
    /// Handles whose names were not kept (past [`MAX_NAMED_HANDLES`]).
    names_over: u64,
    /// Whether a call of it was decoded.
    called: bool,
}

/// What the graph book asks of the rest of the tracer, for one process.
struct Env<'a> {
    pid: u32,
    /// When the call began and returned (CLOCK_MONOTONIC ns; the start
    /// twice where its return was not probed).
    start_ns: u64,
    end_ns: u64,
    names: &'a HashMap<u64, (Arc<str>, u64)>,
    namer: &'a mut KernelNamer,
    /// What an overhead budget traced of the busy APIs, when one is on.
    sampler: Option<&'a Sampler>,
}

impl GraphEnv for Env<'_> {
    fn busy_traced(&self, from_ns: u64, to_ns: u64) -> bool {
        self.sampler.is_none_or(|s| s.busy_traced(from_ns, to_ns))
    }

    fn kernel_name(&mut self, handle: u64) -> Option<Arc<str>> {
        match self.names.get(&handle) {
            Some((name, _)) => Some(name.clone()),
            None => self.namer.name_of_handle(self.pid, handle),
        }
    }

    fn now_ns(&self) -> u64 {
        self.start_ns
    }

    fn end_ns(&self) -> u64 {
        self.end_ns
    }

    fn exec_layout_pending(&mut self) -> bool {
        self.namer.pending(self.pid)
    }

    fn read_exec(&mut self, exec: u64) -> Option<Vec<Node>> {
        let raw = self.namer.read_exec(self.pid, exec)?;
        Some(
            raw.into_iter()
                .map(|k| {
                    Node::Kernel(KernelNode {
                        function: k.function,
                        cukernel: 0,
                        kernel: self.kernel_name(k.function),
                        grid: k.grid,
                        block: k.block,
                        shared_mem_bytes: k.shared_mem_bytes,
                    })
                })
                .collect(),
        )
    }
}

impl ProcessState {
    fn with_comm(comm: Arc<str>) -> Self {
        Self {
            comm,
            memory: MemoryBook::default(),
            nccl: NcclState::default(),
            names: HashMap::default(),
            host_maps: HostMaps::default(),
            graphs: GraphBook::default(),
            lt: Default::default(),
            said_opaque: false,
            said_mid_capture: false,
            said_sampled_capture: false,
            names_over: 0,
            called: false,
        }
    }

    /// Learns a handle's name, within the bound: false when it was not
    /// kept.
    fn learn(&mut self, handle: u64, entry: (Arc<str>, u64)) -> bool {
        if self.names.len() >= MAX_NAMED_HANDLES && !self.names.contains_key(&handle) {
            self.names_over += 1;
            return false;
        }
        self.names.insert(handle, entry);
        true
    }

    /// Where `addr` lives: a live allocation seen by the trace first, then
    /// whether the probe could read it (host memory), then the process's
    /// writable mappings.
    fn place(&mut self, pid: u32, addr: u64, readable: bool) -> Place {
        match self.memory.place(addr) {
            Place::Unknown if readable || self.host_maps.contains(pid, addr) => Place::Host,
            p => p,
        }
    }

    /// Learns from the call and fills in what the probe could not know.
    fn observe(&mut self, pid: u32, args: &mut Args, ok: bool, namer: &mut KernelNamer) -> bool {
        match args {
            Args::Launch(l) => {
                l.kernel = match self.names.get(&l.function) {
                    Some((name, _)) => Some(name.clone()),
                    None => namer
                        .name_of_handle(pid, l.function)
                        .or_else(|| namer.name_of_stub(pid, l.stub)),
                };
                false
            }
            Args::Memcpy(m) if m.direction == Direction::Unknown => {
                if let Some(src) = m.src {
                    let dst = self.place(pid, m.dst, m.readable.0);
                    let src = self.place(pid, src, m.readable.1);
                    m.direction = match (dst, src) {
                        (Place::Device, Place::Device) => Direction::DtoD,
                        (Place::Device, Place::Host) => Direction::HtoD,
                        (Place::Host, Place::Device) => Direction::DtoH,
                        (Place::Host, Place::Host) => Direction::HtoH,
                        _ => Direction::Unknown,
                    };
                }
                false
            }
            Args::GetFunction {
                handle: Some(h),
                name: Some(name),
                parent,
                ..
            } if ok => {
                self.learn(*h, (demangle(name), *parent));
                false
            }
            Args::KernelGetFunction {
                function: Some(f),
                kernel,
            } if ok => {
                if let Some(entry) = self.names.get(kernel).cloned() {
                    self.learn(*f, entry);
                }
                false
            }
            Args::Unload { handle } if ok => {
                // Its handles are gone and their addresses may be reused.
                self.names.retain(|_, (_, parent)| parent != handle);
                namer.forget_handles(pid);
                false
            }
            other => self.memory.apply(other, ok),
        }
    }
}

/// Turns raw records into calls, keeping per-process state.
pub(crate) struct Enricher {
    clock: Clock,
    procs: HashMap<u32, ProcessState>,
    pub namer: KernelNamer,
    /// The libcublasLt files' offsets (`lt`).
    pub lt_files: crate::lt::files::LtFiles,
    /// The libnccl builds probed (their releases and layouts, by slot).
    pub nccl_libs: NcclLibraries,
    /// The overhead budget's sampler, when one is on: a stream capture
    /// made while it had the busy probes off is read from memory.
    pub sampler: Option<Arc<Sampler>>,
}

/// A call, and device memory in use after it when that changed.
pub(crate) struct Enriched {
    pub call: Call,
    pub device_bytes: Option<u64>,
    /// What the executable graph this call launches runs, when that became
    /// known or changed: to say before the call.
    pub graph: Option<GraphRecord>,
}

impl Enricher {
    pub(crate) fn new(clock: Clock, namer: KernelNamer) -> Self {
        Self {
            clock,
            procs: HashMap::default(),
            lt_files: crate::lt::files::LtFiles::new(namer.calibrates()),
            namer,
            nccl_libs: NcclLibraries::default(),
            sampler: None,
        }
    }

    /// The identity of an NCCL call still in flight (from its entry record,
    /// as the in-flight map holds it); nothing is advanced.
    pub(crate) fn peek_nccl(
        &mut self,
        e: &tracer_common::CallEvent,
    ) -> Option<(Call, Result<(), Unaligned>)> {
        let api = catalogue::api(e.api)?;
        let state = self.procs.get_mut(&e.pid)?;
        let raw = RawCall {
            event: *e,
            name: None,
            blob: None,
        };
        let Args::Nccl(mut n) = decode_args(api, &raw) else {
            return None;
        };
        let res = match state.nccl.peek(&self.nccl_libs, e, &n) {
            Ok(i) => {
                n.ident = i;
                Ok(())
            }
            Err(why) => Err(why),
        };
        let call = Call {
            ts_ns: self.clock.to_unix_ns(e.start_ns),
            dur_ns: None,
            pid: e.pid,
            tid: e.tid,
            comm: state.comm.clone(),
            api: api.name,
            family: Some(api.family),
            ret: None,
            args: Args::Nccl(n),
            stack: None,
        };
        Some((call, res))
    }

    /// The processes state is held for.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }

    /// Starts the state of a process the session saw (its name read
    /// while it was alive, so calls decoded after it exited carry it).
    pub(crate) fn add(&mut self, pid: u32, comm: Arc<str>) {
        self.lt_files.bind(pid);
        self.procs
            .entry(pid)
            .or_insert_with(|| ProcessState::with_comm(comm));
    }

    /// The name the calls of `pid` carry, and whether a call of it was
    /// decoded, when its state is held.
    pub(crate) fn comm(&self, pid: u32) -> Option<(Arc<str>, bool)> {
        self.procs.get(&pid).map(|p| (p.comm.clone(), p.called))
    }

    /// Forgets a process that exited.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.namer.forget(pid);
    }

    pub(crate) fn enrich(&mut self, raw: &RawCall<'_>) -> Result<Enriched, DecodeError> {
        let e = &raw.event;
        let api = catalogue::api(e.api).ok_or(DecodeError::Api(e.api))?;
        let state = self
            .procs
            .get_mut(&e.pid)
            .ok_or(DecodeError::Unseen(e.pid))?;
        state.called = true;
        let mut args = decode_args(api, raw);
        let ret = ret_of(raw);
        let ok = ret.is_none_or(|r| r == 0);
        let sampler = self.sampler.as_deref();
        let traced = |from: u64, to: u64| sampler.is_none_or(|s| s.busy_traced(from, to));
        let snapshot = raw.blob.filter(|b| b.len() == crate::lt::SNAPSHOT);
        let lt_files = &mut self.lt_files;
        state.lt.apply(&mut args, ok, e.start_ns, &traced, &mut || {
            lt_files.offsets(e.pid)?.decode(snapshot?)
        });
        if api.lib == catalogue::Lib::Nccl {
            if let Some(warning) = state
                .nccl
                .observe(&self.nccl_libs, api.name, e, &mut args, ret)
            {
                crate::say!("process {}: {warning}", e.pid);
            }
        }
        let over = state.names_over;
        let changed = state.observe(e.pid, &mut args, ok, &mut self.namer);
        if over == 0 && state.names_over > 0 {
            crate::say!(
                "process {} ({}) named over {MAX_NAMED_HANDLES} kernel handles: the names of later ones are not kept (their launches are named from the handle in the process's memory where its libcuda's layout is known, else \"kernel\":null)",
                e.pid,
                crate::text::printable(&state.comm)
            );
        }
        let news = {
            let mut env = Env {
                pid: e.pid,
                start_ns: e.start_ns,
                end_ns: if raw.has_return() {
                    e.start_ns.saturating_add(e.dur_ns)
                } else {
                    e.start_ns
                },
                names: &state.names,
                namer: &mut self.namer,
                sampler: self.sampler.as_deref(),
            };
            state.graphs.observe(api.name, &mut args, ret, &mut env)
        };
        for note in state.graphs.take_notes() {
            match note {
                GraphNote::Opaque { exec } if !state.said_opaque => {
                    state.said_opaque = true;
                    crate::say!(
                        "process {} ({}) launches CUDA graphs built before gputrace attached (first {exec:#x}) whose nodes cannot be read: their launches are counted, their kernels are not (\"nodes\":null)",
                        e.pid,
                        crate::text::printable(&state.comm)
                    );
                }
                GraphNote::MidCapture { stream } if !state.said_mid_capture => {
                    state.said_mid_capture = true;
                    crate::say!(
                        "process {} ({}) was capturing stream {stream:#x} into a CUDA graph when gputrace attached: work issued to it before that was seen may have been counted as run",
                        e.pid,
                        crate::text::printable(&state.comm)
                    );
                }
                GraphNote::SampledCapture { graph } if !state.said_sampled_capture => {
                    state.said_sampled_capture = true;
                    crate::say!(
                        "process {} ({}) captured CUDA graph {graph:#x} while the overhead budget had the launch probes off or not all attached: its kernels are read from the process's memory where the layout allows, else its launches are counted without them (\"nodes\":null)",
                        e.pid,
                        crate::text::printable(&state.comm)
                    );
                }
                _ => {}
            }
        }
        let ts_ns = self.clock.to_unix_ns(e.start_ns);
        let graph = news.map(|n| GraphRecord {
            ts_ns,
            pid: e.pid,
            comm: state.comm.clone(),
            exec: n.exec,
            contents: n.contents,
        });
        let call = Call {
            ts_ns,
            dur_ns: raw.has_return().then_some(e.dur_ns),
            pid: e.pid,
            tid: e.tid,
            comm: state.comm.clone(),
            api: api.name,
            family: Some(api.family),
            ret,
            stack: None,
            args,
        };
        Ok(Enriched {
            call,
            device_bytes: changed.then_some(state.memory.in_use()),
            graph,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_handles_are_bounded_and_counted() {
        let mut p = ProcessState::with_comm(Arc::from("x"));
        let name: Arc<str> = Arc::from("k");
        for h in 0..MAX_NAMED_HANDLES as u64 + 5 {
            p.learn(h + 1, (name.clone(), 0));
        }
        assert_eq!(p.names.len(), MAX_NAMED_HANDLES);
        assert_eq!(p.names_over, 5);
        // A handle kept is learned again (a new name for it) within the bound.
        assert!(p.learn(1, (Arc::from("k2"), 0)));
        assert_eq!(&*p.names[&1].0, "k2");
    }

    #[test]
    fn clock_is_near_now() {
        let c = Clock::measure();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        let got = c.to_unix_ns(Clock::now_mono_ns()) as i128;
        assert!((got - now).abs() < 50_000_000, "{got} vs {now}");
    }
}
