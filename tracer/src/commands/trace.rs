//! `gputrace [--pid PID]... [--all] [-- CMD]`: attach, stream, summarise.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};

use super::pipeline::Pipeline;
use crate::aggregate::enrich::Clock;
use crate::aggregate::render::{render_json, render_text};
use crate::cli::{SummaryFormat, TraceArgs};
use crate::error::{Failure, Result};
use crate::export::Timeline;
use crate::names::calibrate::CalibrationCache;
use crate::names::namer::KernelNamer;
use crate::probes::attach::{
    detach_many, Attachment, LostCounter, Probes, Scope, DEFAULT_RING_BYTES,
};
use crate::probes::catalogue::{Lib, ProbeSelection};
use crate::probes::discover::{self, LibraryFile};
use crate::probes::privileges;
use crate::probes::spawn::GatedChild;

/// How often exits and newly mapped libraries are checked.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the ring buffer is drained when the probes did not wake us.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

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
        match (file.lib, scope) {
            (Lib::Cuda, Scope::Process(pid)) => namer.bind(pid, file),
            (Lib::Cuda, Scope::All) => {
                let _ = namer.calibrate(file);
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
        let att = self.probes.attach(file, scope)?;
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

struct Target {
    pid: u32,
    exited: bool,
}

fn validate(args: &TraceArgs) -> Result<()> {
    if args.pids.is_empty() && !args.all && args.cmd.is_empty() {
        return Err(Failure::usage(
            "nothing to trace: give --pid PID, --all, or -- CMD ARGS (see gputrace --help)",
        ));
    }
    if let Some(pid) = args.pids.iter().find(|p| **p == 0) {
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

pub fn run(args: TraceArgs) -> Result<ExitCode> {
    validate(&args)?;
    privileges::check().map_err(Failure::runtime)?;
    for pid in &args.pids {
        check_pid(*pid)?;
    }
    let selection = args.probes.clone().unwrap_or_default();
    let overrides = Overrides {
        libcuda: args.libcuda.clone(),
        libnccl: args.libnccl.clone(),
    }
    .open()?;

    let clock = Clock::measure();
    let origin = clock.to_unix_ns(Clock::now_mono_ns());
    let timeline = match &args.output {
        Some(path) => Some(
            Timeline::create(path, origin)
                .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?,
        ),
        None => None,
    };

    let mut probes = Probes::load(selection.clone(), ring_bytes())?;
    let ring = probes.take_ring()?;
    let lost = probes.take_lost()?;
    let mut attacher = Attacher::new(probes, selection, overrides);
    let namer = KernelNamer::new(CalibrationCache::open(&CalibrationCache::default_dir()));
    let mut pipeline = Pipeline::new(clock, namer, timeline, args.print);

    // Processes given by PID: every one must map something we can probe.
    let mut targets = Vec::new();
    for &pid in &args.pids {
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
            attacher.attach(f, Scope::Process(pid), &mut pipeline.enricher.namer)?;
        }
        targets.push(Target { pid, exited: false });
    }

    if args.all {
        attach_all_scan(&mut attacher, &mut pipeline.enricher.namer, true)?;
    }

    let mut child = None;
    if !args.cmd.is_empty() {
        let mut c = GatedChild::spawn(&args.cmd).map_err(|e| Failure::runtime(e.to_string()))?;
        let ld_path = std::env::var_os("LD_LIBRARY_PATH");
        let mut files = attacher.overrides.clone();
        for lib in [Lib::Cuda, Lib::Nccl] {
            if files.iter().any(|f| f.lib == lib) {
                continue;
            }
            if let Some(p) = discover::find_library(lib.soname(), Some(&c.exe), ld_path.as_deref())
            {
                if let Ok(f) = LibraryFile::open(lib, p) {
                    files.push(f);
                }
            }
        }
        files.retain(|f| attacher.selection.wants_lib(f.lib));
        for f in &files {
            attacher.attach(f, Scope::Process(c.pid), &mut pipeline.enricher.namer)?;
        }
        targets.push(Target {
            pid: c.pid,
            exited: false,
        });
        announce(&attacher, targets.len(), args.all);
        c.release()
            .map_err(|e| Failure::runtime(format!("cannot run `{}`: {e}", args.cmd[0])))?;
        child = Some(c);
    } else {
        announce(&attacher, targets.len(), args.all);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    let outcome = rt.block_on(event_loop(
        ring,
        &mut pipeline,
        &mut attacher,
        &mut targets,
        &mut child,
        &args,
    ));
    let outcome = outcome?;

    pipeline.summary.lost = lost.read();
    finish(&mut pipeline, &args, &lost, outcome)
}

fn ring_bytes() -> u32 {
    std::env::var("GPUTRACE_RING_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RING_BYTES)
}

fn announce(attacher: &Attacher, processes: usize, all: bool) {
    let probes = attacher.probe_count();
    if all {
        eprintln!("gputrace: attached {probes} probes to every process mapping libcuda/libnccl");
    } else {
        eprintln!(
            "gputrace: attached {probes} probes to {processes} process{}",
            if processes == 1 { "" } else { "es" }
        );
    }
}

/// Attaches system-wide to every library file any process maps.
fn attach_all_scan(attacher: &mut Attacher, namer: &mut KernelNamer, first: bool) -> Result<()> {
    for pid in discover::all_pids() {
        let Ok(files) = attacher.libraries_of(pid) else {
            continue;
        };
        for f in files {
            if attacher.is_attached(&f, Scope::All) {
                continue;
            }
            match attacher.attach(&f, Scope::All, namer) {
                Ok(_) => {}
                Err(e) if first => return Err(e.into()),
                Err(e) => eprintln!("gputrace: cannot attach to {}: {e:#}", f.path.display()),
            }
        }
    }
    Ok(())
}

/// Why tracing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Duration,
    Signal,
    TargetsExited,
    WriteError,
}

fn drain(ring: &mut RingBuf<MapData>, pipeline: &mut Pipeline) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next() {
        pipeline.handle(&item);
        n += 1;
    }
    n
}

async fn event_loop(
    ring: RingBuf<MapData>,
    pipeline: &mut Pipeline,
    attacher: &mut Attacher,
    targets: &mut [Target],
    child: &mut Option<GatedChild>,
    args: &TraceArgs,
) -> Result<Stop> {
    // SAFETY: the ring buffer owns its map fd, which stays open and the same
    // for as long as the AsyncFd owns the ring buffer.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
    let mut check_tick = tokio::time::interval(CHECK_EVERY);
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let sleep = tokio::time::sleep_until(
        deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86400 * 365)),
    );
    tokio::pin!(sleep);
    let mut all_scan = 0u32;

    let stop = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard.map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
                drain(guard.get_inner_mut(), pipeline);
                guard.clear_ready();
            }
            _ = drain_tick.tick() => {
                drain(ring.get_mut(), pipeline);
                pipeline.flush_print();
            }
            _ = check_tick.tick() => {
                if !targets.is_empty() && check_targets(attacher, targets, child, &mut pipeline.enricher.namer) {
                    break Stop::TargetsExited;
                }
                if args.all {
                    all_scan += 1;
                    if all_scan.is_multiple_of(5) {
                        attach_all_scan(attacher, &mut pipeline.enricher.namer, false)?;
                    }
                }
            }
            _ = &mut sleep, if deadline.is_some() => break Stop::Duration,
            _ = sigint.recv() => break Stop::Signal,
            _ = sigterm.recv() => break Stop::Signal,
        }
        if pipeline.write_error.is_some() {
            break Stop::WriteError;
        }
    };
    // No new events once detached; then take everything left in the ring.
    attacher.detach_all();
    drain(ring.get_mut(), pipeline);
    Ok(stop)
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

fn finish(
    pipeline: &mut Pipeline,
    args: &TraceArgs,
    lost: &LostCounter,
    stop: Stop,
) -> Result<ExitCode> {
    pipeline.summary.lost = lost.read();
    let json = render_json(&pipeline.summary);
    let mut failure = None;
    if let Some(e) = pipeline.write_error.take() {
        failure = Some(match &args.output {
            Some(p) => Failure::runtime(format!(
                "writing {} failed: {e}; tracing stopped",
                p.display()
            )),
            None => Failure::runtime(format!("writing the output failed: {e}; tracing stopped")),
        });
    }
    if failure.is_none() {
        if let Err(e) = pipeline.finish_timeline(&json) {
            let path = args
                .output
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            failure = Some(Failure::runtime(format!("writing {path} failed: {e}")));
        }
    }
    if pipeline.decode_errors > 0 {
        eprintln!(
            "gputrace: {} records could not be decoded (a bug: please report it)",
            pipeline.decode_errors
        );
    }
    let lost_n = pipeline.summary.lost.events_lost();
    if lost_n > 0 {
        eprintln!("gputrace: WARNING: {lost_n} calls were not recorded (see the summary)");
    }
    match args.summary {
        SummaryFormat::Text => print!("{}", render_text(&pipeline.summary)),
        SummaryFormat::Json => println!("{json}"),
        SummaryFormat::None => {}
    }
    if stop == Stop::TargetsExited {
        eprintln!("gputrace: every traced process has exited");
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}
