//! `--stacks` in the session: the probe's stack records resolved to
//! interned stacks (`stacks::resolve`) and joined to their calls.
//!
//! The entry probe sends a call's stack record before the call's own
//! record (which comes at the call's return), both stamped with the same
//! thread and start time; the stack waits here until its call arrives.
//! Stacks are resolved as they are drained (Python code objects are read
//! from the live process's memory); a process's modules are read when it
//! is first seen and kept until it is gone, and those of the processes
//! given by PID or started by gputrace are recorded as they are mapped
//! (`stacks::modules`), so that a process that exits right after its calls
//! still has its stacks resolved. Repeated call sites cost
//! well under a microsecond (the resolver remembers unwinds), a new one
//! tens of microseconds (`cargo xtask bench` prints the cost per call).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tracer_common::EventKind;

use crate::error::Failure;
use crate::error::Result;
use crate::model::stack::CallStack;
use crate::probes::attach::Probes;
use crate::stacks::kernel::kernel_offsets;
use crate::stacks::kernel::KernelOffsets;
use crate::stacks::record::parse_stack_record;
use crate::stacks::resolve::StackResolver;
use crate::stacks::settings::PyProcMap;
use crate::stacks::settings::StackSettings;

use crate::session::StackRequest;

/// Stacks waiting for their call, at most (calls that never return, or
/// whose record the ring could not take, leave theirs behind).
const MAX_PENDING: usize = 1 << 16;

/// Whether a ring-buffer record is a stack record.
pub(super) fn is_stack_record(bytes: &[u8]) -> bool {
    bytes.len() >= 4
        && u32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes")) == EventKind::Stack as u32
}

/// The settings the probes are loaded with for `req`. A kernel without
/// BTF still gets native stacks (no Python frames, and nested probed calls
/// end at the uretprobe trampoline): said once.
pub(super) fn settings(req: &StackRequest) -> Result<StackSettings> {
    let kernel = kernel_offsets().unwrap_or_else(|e| {
        crate::say!(
            "--stacks: cannot read the kernel's BTF ({e}): native frames only, no Python frames"
        );
        KernelOffsets {
            fsbase: None,
            uretprobe: None,
        }
    });
    StackSettings::new(req.window, req.every, kernel).map_err(Failure::usage)
}

pub(super) struct SessionStacks {
    resolver: StackResolver,
    py: PyProcMap,
    /// Resolved stacks by (tid, start_ns), with their pid.
    pending: FxHashMap<(u32, u64), (u32, Arc<CallStack>)>,
    /// Records that could not be read (a bug if ever not zero).
    unreadable: u64,
    /// Records of processes gone before their modules could be read.
    unresolved: u64,
    /// Stacks dropped unjoined (the bound, or their process ended).
    orphans: u64,
    /// Processes not (yet) found to be Python, with the maintenances left
    /// to look again: a command gputrace started is seen as soon as it has
    /// exec'd, before the loader has mapped libpython; and the probe must
    /// have a process's Python configuration before its calls, not after
    /// the first one is drained.
    deferred: Vec<(u32, u32)>,
}

/// Maintenances (every 100 ms) a process is looked at again for CPython.
const LOOK_AGAIN: u32 = 30;

/// Whether `pid` still runs gputrace's own executable (a command
/// gputrace started, not yet exec'd).
fn runs_our_executable(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let ours = id("/proc/self/exe");
    ours.is_some() && id(&format!("/proc/{pid}/exe")) == ours
}

impl SessionStacks {
    pub(super) fn new(probes: &mut Probes) -> Result<Self> {
        let py = probes
            .take_py_procs()
            .map_err(|e| Failure::runtime(format!("--stacks: {e:#}")))?;
        Ok(Self {
            resolver: StackResolver::new(),
            py,
            pending: FxHashMap::default(),
            unreadable: 0,
            unresolved: 0,
            orphans: 0,
            deferred: Vec::new(),
        })
    }

    /// A process given by PID, or a command gputrace starts (before it is
    /// let go): its mappings are recorded from now on, so that its stacks
    /// resolve also once it has exited (`stacks::modules`).
    pub(super) fn watch(&mut self, pid: u32, at_gate: bool) {
        if let Err(e) = self.resolver.watch(pid, at_gate) {
            crate::say!(
                "--stacks: cannot record the mappings of process {pid} ({e}): its stacks resolve only while it runs"
            );
        }
    }

    /// A process ran a new program (exec): its mappings are new. A watched
    /// process's record of them starts again by itself (forgetting it
    /// would lose the modules of a command run with `-- CMD`, which execs
    /// it at its gate); any other's are read again.
    pub(super) fn execed(&mut self, pid: u32) {
        if !self.resolver.is_watched(pid) {
            self.gone(pid);
        }
        self.seen(pid);
    }

    /// A process to trace: look for CPython in it now, so that its first
    /// stacks already have Python frames.
    pub(super) fn seen(&mut self, pid: u32) {
        self.look(pid, LOOK_AGAIN);
    }

    fn look(&mut self, pid: u32, tries: u32) {
        if runs_our_executable(pid) {
            self.deferred.push((pid, tries));
            return;
        }
        match self.resolver.prepare(pid, &mut self.py) {
            Ok(true) => {}
            Ok(false) if tries > 0 => {
                // Not cached as "not Python": look again (its modules, read
                // now, are kept: it may be gone by then).
                self.resolver.look_again(pid);
                self.deferred.push((pid, tries - 1));
            }
            Ok(false) => {}
            Err(why) => crate::say!("process {pid}: no Python frames in its stacks: {why}"),
        }
    }

    /// Processes not found to be Python yet, looked at again.
    pub(super) fn maintain(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        for (pid, tries) in std::mem::take(&mut self.deferred) {
            if crate::host::discover::is_alive(pid) {
                self.look(pid, tries);
            }
        }
    }

    /// A process gone: its caches, and stacks whose call never came.
    pub(super) fn gone(&mut self, pid: u32) {
        self.deferred.retain(|p| p.0 != pid);
        self.resolver.forget(pid, &mut self.py);
        let before = self.pending.len();
        self.pending.retain(|_, (p, _)| *p != pid);
        self.orphans += (before - self.pending.len()) as u64;
    }

    /// A stack record from the ring buffer.
    pub(super) fn record(&mut self, bytes: &[u8]) {
        let Ok(raw) = parse_stack_record(bytes) else {
            self.unreadable += 1;
            return;
        };
        let Some(stack) = self.resolver.resolve(&raw, &mut self.py) else {
            self.unresolved += 1;
            return;
        };
        if self.pending.len() >= MAX_PENDING {
            // Far more than calls in flight: these lost their calls.
            self.orphans += self.pending.len() as u64;
            self.pending.clear();
        }
        self.pending
            .insert((raw.tid, raw.start_ns), (raw.pid, stack));
    }

    /// The stack of the call `(tid, start_ns)`, if one came.
    pub(super) fn take(&mut self, tid: u32, start_ns: u64) -> Option<Arc<CallStack>> {
        if self.pending.is_empty() {
            return None;
        }
        self.pending.remove(&(tid, start_ns)).map(|(_, s)| s)
    }

    /// What the resolver counted, for the end of the trace.
    /// The line said at the end of a trace.
    pub(super) fn report(&self) -> String {
        let c = self.resolver.counts();
        format!(
            "gputrace: stacks: {} resolved ({} distinct); native unwinds cut short: {}; Python: no thread state {}, chain cut short {}, frames unresolved {}; of processes gone before they could be read: {}; stacks whose call never came: {}; unreadable records: {}",
            c.stacks,
            self.resolver.distinct(),
            c.native_cut_short,
            c.python_no_thread,
            c.python_cut_short,
            c.python_unresolved,
            self.unresolved,
            self.orphans,
            self.unreadable
        )
    }
}
