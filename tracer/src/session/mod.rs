//! A tracing session, the engine under every command that traces: it
//! loads the probes and attaches them to what was asked for (processes by
//! PID, a command it starts, or every process on the node), drains the
//! ring buffer, decodes and enriches each record, decides when processes
//! come and go, reads what the probes could not record, and hands all of
//! it to the outputs as [`Event`]s, in order, through the [`Sink`] trait.
//!
//! `trace` and `daemon` run the one loop of [`run`]; `top` keeps its own
//! loop (it answers keys) and calls [`Session::readable`],
//! [`Session::drain`] and [`Session::maintain`] itself.

mod attacher;
mod exec;
mod nccl;
mod node;
mod processes;
mod run;
mod stacks;
mod tallies;
mod targets;

use std::time::{Duration, Instant};

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

pub(crate) use attacher::Overrides;
pub(crate) use run::{RunOptions, Stop};
pub(crate) use targets::{preflight, StackRequest, TargetSpec};

use crate::config::Config;
use crate::decode::enrich::Enricher;
use crate::decode::record::parse_exec;
use crate::decode::record::parse_record;
use crate::decode::record::DecodeError;
use crate::error::Failure;
use crate::error::Result;
use crate::host::clock::Clock;
use crate::model::sink::Sink;
use crate::model::sink::Status;
use crate::model::Event;
use crate::model::LostReport;
use crate::names::layouts::LayoutCache;
use crate::names::namer::KernelNamer;
use crate::probes::attach::LostByPid;
use crate::probes::attach::LostCounter;
use crate::probes::attach::Probes;
use crate::probes::links::detach_many;
use crate::probes::links::Scope;
use attacher::Attacher;
use nccl::NcclWatch;
use node::NodeWatch;
use processes::Processes;
use stacks::SessionStacks;
use targets::{attach_pids, start_command, Targets};

/// How often exits and newly mapped libraries are checked.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the ring buffer is drained when the probes did not wake us.
pub(crate) const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// A running session. Its parts are private: commands use its methods.
pub(crate) struct Session {
    ring: AsyncFd<RingBuf<MapData>>,
    attacher: Attacher,
    enricher: Enricher,
    processes: Processes,
    targets: Targets,
    /// Node mode (`--all`, `daemon`): probes per library file for everyone.
    node: Option<NodeWatch>,
    lost: LostCounter,
    lost_by_pid: LostByPid,
    /// The last report sent, and when per-process counts were last read.
    reported: LostReport,
    by_pid_read: Option<Instant>,
    undecodable: u64,
    /// Events made outside a drain (processes seen at the start, exits),
    /// handed on at the next drain or maintenance.
    pending: Vec<Event>,
    /// `--stacks`: stack records resolved and joined to their calls.
    stacks: Option<SessionStacks>,
    /// Collectives across ranks, stalls.
    nccl: NcclWatch,
    clock: Clock,
    /// Installed by [`Session::announce`], used by [`Session::run`].
    signals: Option<run::Signals>,
    /// `--overhead-budget`: the schedule of the busy APIs' probes.
    budget: Option<crate::budget::Budget>,
    /// `--gpu-time`: the agents in the traced processes.
    gpu: Option<crate::gpu::GpuTime>,
    /// `--probes FAMILY:counts`: the calls counted in the kernel, and when
    /// they were last read.
    counts: Option<(crate::probes::counts::Counts, Option<Instant>)>,
}

impl Session {
    /// Loads the probes and attaches them to what `spec` names; a command
    /// given is started and left waiting at its gate (see
    /// [`Session::release`]). Must run inside a tokio runtime.
    pub(crate) fn start(config: &Config, spec: &TargetSpec, clock: Clock) -> Result<Session> {
        let selection = spec.probes.clone().unwrap_or_default();
        let overrides = Overrides {
            libcuda: spec.libcuda.clone(),
            libnccl: spec.libnccl.clone(),
        }
        .open()?;
        let stack_settings = spec.stacks.as_ref().map(stacks::settings).transpose()?;
        let mut probes = Probes::load(selection.clone(), config, stack_settings)?;
        if let Err(e) = probes.follow_execs() {
            crate::say!(
                "a traced process that runs a new program (exec) goes on under its old name: {e:#}"
            );
        }
        let mut stacks = match stack_settings {
            Some(_) => Some(SessionStacks::new(&mut probes)?),
            None => None,
        };
        let ring = probes.take_ring()?;
        let lost = probes.take_lost()?;
        let lost_by_pid = probes.take_lost_by_pid()?;
        let counts = match selection.counts_any() {
            true => Some((
                crate::probes::counts::Counts::new(probes.take_counts()?),
                None,
            )),
            false => None,
        };
        let inflight = match probes.take_inflight() {
            Ok(m) => Some(m),
            Err(e) => {
                crate::say!("threads stuck inside NCCL calls will not be seen: {e:#}");
                None
            }
        };
        let mut attacher = Attacher::new(probes, selection, overrides);
        let budget = match spec.overhead_budget {
            Some(pct) => start_budget(config, &mut attacher, pct, clock, spec.verbose)?,
            None => None,
        };
        let cache = LayoutCache::open(&config.cache_dir);
        let mut enricher = Enricher::new(clock, KernelNamer::new(cache, config.calibration));
        enricher.nccl_libs = attacher.nccl_libraries();
        enricher.sampler = budget.as_ref().map(|b| b.sampler.clone());
        let check_every = if spec.all {
            node::SCAN_EVERY
        } else {
            CHECK_EVERY
        };
        let mut processes = Processes::new(check_every, clock);
        let mut pending = Vec::new();

        // Processes given by PID: every one must map something we can probe.
        let mut targets = attach_pids(
            spec,
            &mut attacher,
            &mut enricher,
            &mut processes,
            &mut pending,
            &mut stacks,
        )?;

        let node = if spec.all {
            let mut node = NodeWatch::new(config.detach_after);
            node.scan(&mut attacher, &mut enricher.namer, true)?;
            for &pid in node.gpu_pids() {
                processes.found(pid, &mut pending);
            }
            Some(node)
        } else {
            None
        };

        start_command(
            spec,
            &mut attacher,
            &mut enricher,
            &mut targets,
            &mut stacks,
        )?;
        // SAFETY: the ring buffer owns its map fd, which stays open and the same
        // for as long as the AsyncFd owns the ring buffer.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
        let mut session = Session {
            ring,
            attacher,
            enricher,
            processes,
            targets,
            node,
            lost,
            lost_by_pid,
            reported: LostReport::default(),
            by_pid_read: None,
            undecodable: 0,
            pending: Vec::new(),
            stacks,
            nccl: NcclWatch::new(spec.nccl_stall, inflight),
            clock,
            signals: None,
            budget,
            gpu: spec.gpu.clone().map(|o| crate::gpu::GpuTime::new(o, clock)),
            counts,
        };
        for e in pending {
            session.note(&e);
            session.pending.push(e);
        }
        // From here on calibrations run beside the tracing, waited for by
        // nothing.
        session.enricher.namer.end_grace();
        session.enricher.lt_files.end_grace();
        Ok(session)
    }

    /// The `gputrace: attached ...` line scripts wait for; SIGINT and
    /// SIGTERM are caught from here on (see [`Session::run`]).
    pub(crate) fn announce(&mut self) -> Result<()> {
        if self.signals.is_none() {
            self.signals = Some(run::Signals::install()?);
        }
        let probes = self.attacher.probe_count();
        if self.node.is_some() {
            crate::say!("attached {probes} probes to every process mapping libcuda/libnccl");
        } else {
            let n = self.targets.len();
            crate::say!(
                "attached {probes} probes to {n} process{}",
                if n == 1 { "" } else { "es" }
            );
        }
        Ok(())
    }

    /// Lets a command started with `-- CMD` run (a no-op without one).
    pub(crate) fn release(&mut self) -> Result<()> {
        self.targets.release()?;
        if let Some(pid) = self.targets.child_pid() {
            let mut seen = Vec::new();
            if !self.processes.found(pid, &mut seen) {
                self.targets.exited(pid); // it ran and ended at once
            }
            for e in seen {
                self.note(&e);
                self.pending.push(e);
            }
        }
        Ok(())
    }

    /// Uprobes and uretprobes attached now.
    pub(crate) fn probe_count(&self) -> usize {
        self.attacher.probe_count()
    }

    /// The tracer's own state.
    pub(crate) fn status(&self, now: Instant) -> Status {
        let mut pids: std::collections::HashSet<u32> = self.enricher.pids().collect();
        pids.extend(self.enricher.namer.pids());
        Status {
            now,
            probes: self.attacher.probe_count(),
            library_files: self.attacher.probed_files(Scope::All),
            process_states: pids.len(),
            hit_cost: self.budget.as_ref().map(|b| b.cost()),
        }
    }

    /// Waits until the probes wake the reader (they do once a quarter of
    /// the ring is full; loops also drain on a tick).
    pub(crate) async fn readable(&mut self) -> Result<()> {
        let mut guard = self
            .ring
            .readable_mut()
            .await
            .map_err(|e| Failure::runtime(format!("polling the ring buffer: {e}")))?;
        guard.clear_ready();
        Ok(())
    }

    /// What a lifecycle event means for the decoding state.
    fn note(&mut self, e: &Event) {
        match e {
            Event::ProcessSeen(info) => {
                self.enricher.add(info.pid, info.comm.clone());
                if let Some(s) = &mut self.stacks {
                    s.seen(info.pid);
                }
                if let Some(g) = &mut self.gpu {
                    g.seen(info.pid);
                }
            }
            Event::ProcessGone { pid, .. } => {
                // Its GPU work comes before it is gone.
                if let Some(g) = &mut self.gpu {
                    g.gone(*pid, &mut self.pending);
                }
                self.enricher.forget(*pid);
                if let Some(b) = &mut self.budget {
                    b.forget(*pid);
                }
                if let Some(s) = &mut self.stacks {
                    s.gone(*pid);
                }
            }
            // One stderr line each, whatever the sinks (trace, daemon; top
            // shows its captured stderr).
            Event::NcclStall(s) => crate::log::say_raw(format_args!("{}", s.line())),
            Event::NcclStallEnded(e) => {
                crate::log::say_raw(format_args!("{}", crate::nccl::stall::ended_line(e)))
            }
            Event::GpuAgent(n) => crate::gpu::say(n),
            _ => {}
        }
    }

    /// Hands on the events made since the last drain.
    fn deliver<S: Sink + ?Sized>(&mut self, sink: &mut S) {
        for e in std::mem::take(&mut self.pending) {
            sink.take(e);
        }
    }

    /// Decodes at most `max` records of the ring buffer into `sink`, in
    /// order; fewer than `max` means the ring is empty now.
    pub(crate) fn drain<S: Sink + ?Sized>(&mut self, sink: &mut S, max: usize) -> usize {
        self.deliver(sink);
        if let Some(b) = &mut self.budget {
            let mut reports = Vec::new();
            b.refresh(&mut reports);
            for r in reports {
                sink.take(Event::Sampling(r));
            }
        }
        let ring = self.ring.get_mut();
        let mut n = 0;
        while n < max {
            let Some(item) = ring.next() else { break };
            n += 1;
            if let Some(s) = self
                .stacks
                .as_mut()
                .filter(|_| stacks::is_stack_record(&item))
            {
                s.record(&item);
                continue;
            }
            if let Some(x) = parse_exec(&item) {
                exec::exec(
                    &mut self.enricher,
                    self.stacks.as_mut(),
                    self.clock,
                    &x,
                    sink,
                );
                continue;
            }
            let Ok(raw) = parse_record(&item) else {
                self.undecodable += 1;
                continue;
            };
            let enriched = match self.enricher.enrich(&raw) {
                // Node mode: gputrace's own calibration helper calling the
                // library it calibrates (not a process of the node).
                Err(DecodeError::Unseen(pid)) if crate::host::confine::is_helper(pid) => continue,
                Err(DecodeError::Unseen(pid)) => {
                    // Its first call: say who it is first.
                    let comm = raw.event.comm;
                    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
                    let info = self
                        .processes
                        .first_call(pid, &String::from_utf8_lossy(&comm[..end]));
                    self.enricher.add(pid, info.comm.clone());
                    if let Some(s) = &mut self.stacks {
                        s.seen(pid);
                    }
                    if let Some(g) = &mut self.gpu {
                        g.seen(pid);
                    }
                    sink.take(Event::ProcessSeen(info));
                    self.enricher.enrich(&raw)
                }
                r => r,
            };
            match enriched {
                Ok(mut e) => {
                    if let (Some(b), Some(api)) =
                        (&mut self.budget, crate::catalogue::api(raw.event.api))
                    {
                        b.observe(api, raw.event.pid, raw.event.tid, raw.event.start_ns);
                    }
                    if let Some(record) = e.graph.take() {
                        sink.take(Event::Graph(record));
                    }
                    if let Some(s) = &mut self.stacks {
                        e.call.stack = s.take(raw.event.tid, raw.event.start_ns);
                    }
                    let across = self.nccl.observe(&e.call);
                    if let Some(g) = &mut self.gpu {
                        g.call(&e.call);
                    }
                    sink.take(Event::Call {
                        call: e.call,
                        device_bytes: e.device_bytes,
                    });
                    if let Some(across) = across {
                        sink.take(across);
                    }
                }
                Err(_) => self.undecodable += 1,
            }
        }
        // The GPU's work of the calls just drained (and earlier ones).
        let mut work = Vec::new();
        if let Some(g) = &mut self.gpu {
            g.read(&mut work);
        }
        for e in work {
            // An agent's news gets its stderr line as every event does.
            self.note(&e);
            sink.take(e);
        }
        n
    }

    /// The periodic work (every [`CHECK_EVERY`]): in node mode new library
    /// files and processes; exits; libraries a target mapped since; what
    /// the probes could not record. Hands the events to `sink` and gives it
    /// the tracer's status. True when every target has exited.
    pub(crate) fn maintain<S: Sink + ?Sized>(&mut self, sink: &mut S) -> bool {
        let now = Instant::now();
        let mut events = Vec::new();
        if let Some(node) = self.node.as_mut().filter(|n| n.due(now)) {
            // Not the first scan: failures are said and skipped.
            let _ = node.scan(&mut self.attacher, &mut self.enricher.namer, false);
            for &pid in node.gpu_pids() {
                self.processes.found(pid, &mut events);
            }
        }
        // A process's last counts go before it is said gone.
        let mut gone = Vec::new();
        let since_check = self.processes.since_check(now);
        let exited = self.processes.check(now, &mut gone);
        self.read_counts(now, false, &gone, &mut events);
        events.append(&mut gone);
        for (pid, at_ns, status) in self.processes.take_exits() {
            self.nccl.process_exited(pid, at_ns, status);
            if let Some(b) = &mut self.budget {
                b.exited(pid, since_check.as_nanos() as u64);
            }
        }
        for pid in exited {
            if self.targets.exited(pid) {
                // Detaching blocks for grace periods: off the event loop.
                let atts = self.attacher.take_scope(Scope::Process(pid));
                std::thread::spawn(move || detach_many(atts));
            }
        }
        self.attach_mapped_since();
        // Calibrations that ended: their layouts, their lines on stderr.
        self.enricher.namer.settle_answers();
        if let Some(s) = &mut self.stacks {
            s.maintain();
        }
        self.nccl.check(&mut self.enricher, self.clock, &mut events);
        if let Some(g) = &mut self.gpu {
            g.poll(&mut events);
        }
        self.read_lost(now, false, &mut events);
        for e in events {
            self.note(&e);
            self.pending.push(e);
        }
        self.deliver(sink);
        sink.tick(&self.status(now));
        self.targets.all_exited()
    }

    /// Libraries a target mapped after we attached (dlopen, a path we did
    /// not predict).
    fn attach_mapped_since(&mut self) {
        for pid in self.targets.running() {
            if !self.processes.is_alive(pid) && Some(pid) != self.targets.child_pid() {
                continue;
            }
            let Ok(files) = self.attacher.libraries_of(pid) else {
                continue;
            };
            for f in files {
                if self.attacher.is_attached(&f, Scope::Process(pid)) {
                    continue;
                }
                match self
                    .attacher
                    .attach(&f, Scope::Process(pid), &mut self.enricher.namer)
                {
                    Ok(0) => {}
                    Ok(n) => crate::say!(
                        "process {pid} mapped {} after start: attached {n} more probes (its earlier calls were not traced)",
                        crate::text::printable_path(&f.path)
                    ),
                    // Gone meanwhile (its files with it): nothing to trace.
                    Err(_) if !self.processes.is_alive(pid) => {}
                    Err(e) => crate::say!(
                        "cannot attach to {}: {}",
                        crate::text::printable_path(&f.path),
                        crate::text::printable(&format!("{e:#}"))
                    ),
                }
            }
        }
    }

    /// Ends tracing: detaches every probe (returns first, so no call is
    /// half seen), drains what the ring still holds, reports what was lost,
    /// and ends a command gputrace started if it still runs.
    pub(crate) fn stop<S: Sink + ?Sized>(&mut self, sink: &mut S) {
        self.attacher.detach_all();
        while self.drain(sink, usize::MAX) > 0 {}
        let mut events = Vec::new();
        if let Some(b) = &mut self.budget {
            let mut reports = Vec::new();
            b.finish(&mut reports);
            events.extend(reports.into_iter().map(Event::Sampling));
        }
        if let Some(g) = &mut self.gpu {
            g.stop(&mut events);
        }
        self.read_counts(Instant::now(), true, &[], &mut events);
        self.read_lost(Instant::now(), true, &mut events);
        for e in &events {
            if let Event::GpuAgent(n) = e {
                crate::gpu::say(n);
            }
        }
        self.pending.extend(events);
        self.deliver(sink);
        self.targets.end_child();
        if let Some(s) = &self.stacks {
            crate::log::say_raw(format_args!("{}", s.report()));
        }
    }
}

/// `--overhead-budget`: the probe hit cost (cached, else measured now) and
/// the sampler; `None` (said) where the kernel has no multi-uprobe links.
fn start_budget(
    config: &Config,
    attacher: &mut Attacher,
    percent: f64,
    clock: Clock,
    verbose: bool,
) -> Result<Option<crate::budget::Budget>> {
    let (cost, fresh, store) = crate::budget::hitcost::get(config).map_err(|e| {
        Failure::runtime(format!(
            "--overhead-budget: measuring the cost of a probe hit: {e:#}"
        ))
    })?;
    if verbose {
        crate::say!(
            "a probe hit costs {:.0} ns (entry), {:.0} ns (entry and return) on this machine where the function's first instruction is single-stepped, {:.0} ns and {:.0} ns where it is emulated ({})",
            cost.entry_ns,
            cost.entry_return_ns,
            cost.emulated_entry_ns,
            cost.emulated_entry_return_ns,
            if fresh { "measured now" } else { "measured before, cached" }
        );
    }
    let Some(sampler) = attacher.start_sampler(config.sample_period) else {
        crate::say!(
            "--overhead-budget needs multi-uprobe links (Linux 6.6+), which this kernel lacks: every call is traced"
        );
        return Ok(None);
    };
    Ok(Some(crate::budget::Budget::new(
        percent,
        cost,
        attacher.prologues(),
        sampler,
        clock,
        verbose,
        store,
    )))
}
