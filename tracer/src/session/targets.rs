//! What the user asked to trace: processes by PID and a command started
//! with `-- CMD`, checked before anything is attached.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::catalogue::ProbeSelection;
use crate::decode::enrich::Enricher;
use crate::error::Failure;
use crate::error::Result;
use crate::host::discover;
use crate::host::privileges;
use crate::host::spawn::GatedChild;
use crate::model::Event;
use crate::probes::links::Scope;
use crate::session::attacher::Attacher;
use crate::session::processes::Processes;
use crate::session::stacks::SessionStacks;

/// What to trace.
#[derive(Clone, Debug, Default)]
pub(crate) struct TargetSpec {
    pub pids: Vec<u32>,
    pub all: bool,
    pub cmd: Vec<String>,
    pub probes: Option<ProbeSelection>,
    pub libcuda: Option<PathBuf>,
    pub libnccl: Option<PathBuf>,
    /// `--stacks`: capture call stacks.
    pub stacks: Option<StackRequest>,
    /// `--nccl-stall`: how long ranks may wait in a collective for another
    /// (or a thread stay inside an NCCL call) before it is a stall; `None`:
    /// stalls are not looked for.
    pub nccl_stall: Option<Duration>,
    /// `--overhead-budget PCT`: sample the busy APIs to keep the probes'
    /// cost under PCT percent of each traced thread's time; `None`: exact.
    pub overhead_budget: Option<f64>,
    /// `--verbose`: say what the budget measures and decides.
    pub verbose: bool,
    /// `--gpu-time`: load the agent into each traced process.
    pub gpu: Option<crate::gpu::GpuOptions>,
}

/// What `--stacks` asks for (checked against the kernel in `Session::start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackRequest {
    /// One launch in `every` gets a stack.
    pub every: u32,
    /// Bytes of user stack copied (`None`: the default).
    pub window: Option<u32>,
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
pub(crate) fn preflight(spec: &TargetSpec) -> Result<()> {
    validate(spec)?;
    privileges::check().map_err(Failure::runtime)?;
    if spec.gpu.is_some() && !privileges::may_ptrace() {
        return Err(Failure::runtime(
            "--gpu-time loads an agent into the traced processes with ptrace, which needs CAP_SYS_PTRACE: run gputrace as root",
        ));
    }
    for pid in &spec.pids {
        check_pid(*pid)?;
    }
    Ok(())
}

/// How long a command gputrace started is given to end after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// The processes asked for, and whether each has exited.
#[derive(Default)]
pub(super) struct Targets {
    pids: Vec<(u32, bool)>,
    child: Option<GatedChild>,
    cmd: String,
}

impl Targets {
    pub(super) fn add(&mut self, pid: u32) {
        self.pids.push((pid, false));
    }

    pub(super) fn set_child(&mut self, child: GatedChild, cmd: &str) {
        self.add(child.pid);
        self.child = Some(child);
        self.cmd = cmd.to_string();
    }

    pub(super) fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid)
    }

    pub(super) fn len(&self) -> usize {
        self.pids.len()
    }

    /// Lets a command started with `-- CMD` run.
    pub(super) fn release(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            c.release()
                .map_err(|e| Failure::runtime(format!("cannot run `{}`: {e}", self.cmd)))?;
        }
        Ok(())
    }

    /// Notes that `pid` exited; true when it was a target.
    pub(super) fn exited(&mut self, pid: u32) -> bool {
        let mut was = false;
        for t in self.pids.iter_mut().filter(|t| t.0 == pid) {
            t.1 = true;
            was = true;
        }
        if let Some(c) = self.child.as_mut().filter(|c| c.pid == pid) {
            c.wait(false);
        }
        was
    }

    /// Targets that have not exited.
    pub(super) fn running(&self) -> Vec<u32> {
        self.pids.iter().filter(|t| !t.1).map(|t| t.0).collect()
    }

    /// True when there were targets and every one has exited.
    pub(super) fn all_exited(&self) -> bool {
        !self.pids.is_empty() && self.pids.iter().all(|t| t.1)
    }

    /// Ends a command gputrace started that still runs once tracing stops
    /// (a duration, a signal, the output closed): SIGTERM, then SIGKILL if
    /// it is still there [`TERM_GRACE`] later. It is never left running
    /// untraced behind gputrace's back.
    pub(super) fn end_child(&mut self) {
        let Some(c) = self.child.as_mut() else {
            return;
        };
        if c.wait(false).is_some() {
            return;
        }
        c.signal(libc::SIGTERM);
        let deadline = Instant::now() + TERM_GRACE;
        while c.wait(false).is_none() {
            if Instant::now() >= deadline {
                c.signal(libc::SIGKILL);
                c.wait(true);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Targets {
    /// A session that never reached `stop` (a panic unwound through it)
    /// still ends its command: it is never left running untraced. After
    /// `stop` this finds it reaped and does nothing.
    fn drop(&mut self) {
        self.end_child();
    }
}

/// Attaches to the processes given by PID: every one must map something
/// gputrace can probe.
pub(super) fn attach_pids(
    spec: &TargetSpec,
    attacher: &mut Attacher,
    enricher: &mut Enricher,
    processes: &mut Processes,
    pending: &mut Vec<Event>,
    stacks: &mut Option<SessionStacks>,
) -> Result<Targets> {
    let mut targets = Targets::default();
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
        // Its libcublasLt's calibration starts now (`lt`).
        enricher.lt_files.bind(pid);
        if let Some(s) = stacks {
            s.watch(pid, false);
        }
        targets.add(pid);
        if !processes.found(pid, pending) {
            targets.exited(pid); // exited since the preflight
        }
    }
    Ok(targets)
}

/// Starts the command given, held at its gate, with the probes attached
/// to its own process.
pub(super) fn start_command(
    spec: &TargetSpec,
    attacher: &mut Attacher,
    enricher: &mut Enricher,
    targets: &mut Targets,
    stacks: &mut Option<SessionStacks>,
) -> Result<()> {
    if spec.cmd.is_empty() {
        return Ok(());
    }
    let c = GatedChild::spawn(&spec.cmd).map_err(|e| Failure::runtime(e.to_string()))?;
    // Before it runs: every mapping it makes is recorded.
    if let Some(s) = stacks {
        s.watch(c.pid, true);
    }
    let files = attacher.libraries_for(&c.exe);
    for f in &files {
        attacher.attach(f, Scope::Process(c.pid), &mut enricher.namer)?;
    }
    // Probes are for the command's own process, never its
    // children: a wrapper (a shell, a launcher) would be traced
    // empty without a word.
    if files.is_empty() && !spec.all {
        crate::say!(
                "WARNING: `{}` would load neither libcuda nor libnccl, so nothing of it can be traced; \
                 processes it starts are not followed: put the GPU program itself after --, or use --all",
                spec.cmd[0]
            );
    }
    // Seen once it runs the command (see `release`): until then it
    // is a copy of gputrace, by name.
    targets.set_child(c, &spec.cmd[0]);
    Ok(())
}
