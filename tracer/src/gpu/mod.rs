//! `--gpu-time`: how long each kernel, copy and memset of a traced process
//! ran on the GPU, for a process already running.
//!
//! gputrace loads a small agent (`tracer-agent`) into each traced process
//! with ptrace (`tracer-inject`): the agent uses the process's own CUPTI to
//! collect the GPU's activity records and hands them over through shared
//! memory ([`agent`]); they are turned into [`GpuWork`] on the probes' clock
//! ([`convert`]) and joined to the calls that queued them ([`join`]). What
//! the outputs make of them: `summary::gpu` (the tables), [`record`] (the
//! timeline records). docs/gpu-time.md has the whole design;
//! docs/security.md what it does to the process.

pub(crate) mod agent;
pub(crate) mod convert;
pub(crate) mod join;
pub mod record;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::gpu::agent::Agent;
use crate::gpu::join::Joiner;
use crate::host::clock::Clock;
use crate::model::call::Call;
use crate::model::gpu::{AgentNote, GpuAgentNote, GpuWork};
use crate::model::Event;

pub use crate::gpu::agent::DETACH_WAIT;

/// How often a process not attached yet is looked at again (it may not
/// have loaded CUDA yet).
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How often the agents' loss counters are said at most.
const LOST_EVERY: Duration = Duration::from_secs(1);

/// What `--gpu-time` was asked for.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// `--libcupti PATH` (as the traced process sees it).
    pub libcupti: Option<PathBuf>,
    /// The CUPTI record kinds to enable (`Config::gpu_kinds`).
    pub kinds: u32,
    /// `--gpu-time-share`: the percent of each second CUPTI collects.
    pub share: u32,
}

/// The agents of every traced process, and the join of their records.
pub(crate) struct GpuTime {
    options: GpuOptions,
    clock: Clock,
    agents: HashMap<u32, AgentState>,
    /// Processes seen and not attached yet, with when they were last tried.
    candidates: HashMap<u32, Option<Instant>>,
    /// Processes tried for good (attached, or refused for a reason that
    /// will not change).
    done: HashSet<u32>,
    joiner: Joiner,
    /// Records the agents could not decode (a bug if not zero).
    pub(crate) undecodable: u64,
}

struct AgentState {
    agent: Agent,
    /// Loss counters last said, and when.
    said: (u64, u64, u64),
    said_at: Option<Instant>,
    /// `--gpu-time-share`: the time collected last said, and when.
    said_on: u64,
    said_on_at: Option<Instant>,
    /// A sampled agent that could not switch CUPTI on again was said.
    said_stopped: bool,
}

impl AgentState {
    /// What changed since last said (at most every `LOST_EVERY`, unless
    /// `now_anyway`: the agent is done).
    fn news(&mut self, clock: Clock, now_anyway: bool, out: &mut Vec<Event>) {
        let now = Instant::now();
        let due = |at: Option<Instant>| {
            now_anyway || at.is_none_or(|t| now.duration_since(t) >= LOST_EVERY)
        };
        let s = self.agent.snapshot();
        let pid = self.agent.pid;
        let lost = (s.ring_dropped, s.cupti_dropped, s.names_dropped);
        if lost != self.said && due(self.said_at) {
            self.said = lost;
            self.said_at = Some(now);
            out.push(note(
                clock,
                pid,
                AgentNote::Lost {
                    ring_dropped: lost.0,
                    cupti_dropped: lost.1,
                    names_dropped: lost.2,
                },
            ));
        }
        if s.resume_error != 0 && !self.said_stopped {
            // Between two windows, CUPTI could not be had again (another
            // tool took it): the agent collects no more.
            self.said_stopped = true;
            let why = self.agent.message();
            out.push(note(clock, pid, AgentNote::Stopped { why: why.into() }));
        }
        if s.sample_percent < 100 && s.sampled_on_ns != self.said_on && due(self.said_on_at) {
            self.said_on = s.sampled_on_ns;
            self.said_on_at = Some(now);
            out.push(note(
                clock,
                pid,
                AgentNote::Sampled {
                    percent: s.sample_percent.max(1),
                    on_ns: s.sampled_on_ns,
                },
            ));
        }
    }
}

fn note(clock: Clock, pid: u32, what: AgentNote) -> Event {
    Event::GpuAgent(GpuAgentNote {
        pid,
        ts_ns: clock.to_unix_ns(Clock::now_mono_ns()),
        what,
    })
}

impl GpuTime {
    pub(crate) fn new(options: GpuOptions, clock: Clock) -> Self {
        Self {
            options,
            clock,
            agents: HashMap::new(),
            candidates: HashMap::new(),
            done: HashSet::new(),
            joiner: Joiner::default(),
            undecodable: 0,
        }
    }

    /// A process to attach to (tried now and, while it has no CUDA yet,
    /// again every second).
    pub(crate) fn seen(&mut self, pid: u32) {
        if !self.done.contains(&pid) && !self.agents.contains_key(&pid) {
            self.candidates.entry(pid).or_insert(None);
        }
    }

    /// A call the probes saw: kept for joining the GPU's work to it.
    pub(crate) fn call(&mut self, c: &Call) {
        self.joiner.calls.add(c);
    }

    /// Attaches to the candidates due; reads every agent; hands on the
    /// work and what the agents said.
    pub(crate) fn poll(&mut self, out: &mut Vec<Event>) {
        self.attach_due(out);
        self.read(out);
    }

    /// Reads every agent (after the calls drained, so that the calls the
    /// work joins are known); hands on the work and the agents' losses.
    pub(crate) fn read(&mut self, out: &mut Vec<Event>) {
        let now_ns = self.clock.to_unix_ns(Clock::now_mono_ns());
        let mut work = Vec::new();
        for st in self.agents.values_mut() {
            read(
                &mut st.agent,
                &mut self.joiner,
                now_ns,
                &mut work,
                &mut self.undecodable,
            );
            st.news(self.clock, false, out);
        }
        self.joiner.expire(now_ns, false, None, &mut work);
        out.extend(work.into_iter().map(Event::Gpu));
    }

    fn attach_due(&mut self, out: &mut Vec<Event>) {
        let now = Instant::now();
        let due: Vec<u32> = self
            .candidates
            .iter()
            .filter(|(_, t)| t.is_none_or(|t| now.duration_since(t) >= RETRY_EVERY))
            .map(|(p, _)| *p)
            .collect();
        for pid in due {
            self.candidates.insert(pid, Some(now));
            // Not a CUDA process (yet): its libraries will tell.
            let libs = crate::host::discover::process_libraries(pid).unwrap_or_default();
            if !libs.iter().any(|l| l.lib == crate::catalogue::Lib::Cuda) {
                continue;
            }
            self.candidates.remove(&pid);
            self.done.insert(pid);
            let cupti = match agent::find_cupti(pid, self.options.libcupti.as_deref()) {
                Ok(p) => p,
                Err(why) => {
                    out.push(note(
                        self.clock,
                        pid,
                        AgentNote::Refused { why: why.into() },
                    ));
                    continue;
                }
            };
            match Agent::attach(
                pid,
                &cupti,
                self.options.kinds,
                self.options.share,
                self.clock,
            ) {
                Ok(a) => {
                    out.push(note(
                        self.clock,
                        pid,
                        AgentNote::Attached {
                            cupti: a.cupti.as_str().into(),
                            cupti_version: a.cupti_version,
                            clock_error_ns: a.clock_error_ns,
                        },
                    ));
                    self.agents.insert(
                        pid,
                        AgentState {
                            agent: a,
                            said: (0, 0, 0),
                            said_at: None,
                            said_on: 0,
                            said_on_at: None,
                            said_stopped: false,
                        },
                    );
                }
                Err(why) => out.push(note(
                    self.clock,
                    pid,
                    AgentNote::Refused { why: why.into() },
                )),
            }
        }
    }

    /// A process has exited: what its agent published is handed on.
    pub(crate) fn gone(&mut self, pid: u32, out: &mut Vec<Event>) {
        self.candidates.remove(&pid);
        self.done.remove(&pid);
        let now_ns = self.clock.to_unix_ns(Clock::now_mono_ns());
        let mut work = Vec::new();
        if let Some(mut st) = self.agents.remove(&pid) {
            read(
                &mut st.agent,
                &mut self.joiner,
                now_ns,
                &mut work,
                &mut self.undecodable,
            );
            st.news(self.clock, true, out);
        }
        self.joiner.expire(now_ns, false, Some(pid), &mut work);
        self.joiner.forget(pid);
        out.extend(work.into_iter().map(Event::Gpu));
    }

    /// Detaches every agent (reading what each publishes until it has
    /// finalized), then hands on everything still waiting.
    pub(crate) fn stop(&mut self, out: &mut Vec<Event>) {
        let now_ns = || self.clock.to_unix_ns(Clock::now_mono_ns());
        let mut work = Vec::new();
        for (pid, mut st) in std::mem::take(&mut self.agents) {
            let joiner = &mut self.joiner;
            let undecodable = &mut self.undecodable;
            let t = now_ns();
            let finalized = st
                .agent
                .detach(|a| read(a, joiner, t, &mut work, undecodable));
            // A process that exited meanwhile took its agent with it: as
            // for a process found gone, nothing to say of a detach.
            if finalized || crate::host::discover::is_alive(pid) {
                out.push(note(self.clock, pid, AgentNote::Detached { finalized }));
            }
            st.news(self.clock, true, out);
        }
        self.joiner.expire(now_ns(), true, None, &mut work);
        out.extend(work.into_iter().map(Event::Gpu));
    }
}

/// What an agent's news means to the person running gputrace (stderr).
pub(crate) fn say(n: &GpuAgentNote) {
    let pid = n.pid;
    match &n.what {
        AgentNote::Attached { cupti, .. } => {
            crate::say!("process {pid}: GPU time from its CUPTI ({cupti})")
        }
        AgentNote::Refused { why } => crate::say!("process {pid}: no GPU time: {why}"),
        AgentNote::Stopped { why } => crate::say!(
            "process {pid}: GPU time stopped: CUPTI could not be had again after a sampled window: {why}"
        ),
        AgentNote::Detached { finalized: true } => {}
        AgentNote::Detached { finalized: false } => crate::say!(
            "process {pid}: its GPU-time agent waits for the process's next CUDA call to let go of CUPTI (none came in {} s); it stops then, and its code stays mapped",
            agent::DETACH_WAIT.as_secs()
        ),
        AgentNote::Lost { .. } | AgentNote::Sampled { .. } => {}
    }
}

/// One agent's records, joined into `work`.
fn read(a: &mut Agent, joiner: &mut Joiner, now_ns: u64, work: &mut Vec<GpuWork>, bad: &mut u64) {
    let b = a.poll();
    *bad += b.bad;
    let pid = a.pid;
    for api in &b.apis {
        joiner.api(pid, api, work);
    }
    for w in b.work {
        joiner.work(w, now_ns, work);
    }
}
