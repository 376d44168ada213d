//! The rows of `cargo xtask bench`: what traces the bench loop in each.

use anyhow::{anyhow, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No tracer.
    None,
    /// A bare counting uprobe on the bench symbol, entry only.
    Bare,
    /// The same with a return probe.
    BareRet,
    /// gputrace, every probe family, JSONL to a file.
    Gputrace,
    /// gputrace with `launch:args,memcpy:args,nccl:args` (no return probes).
    GputraceArgs,
    /// gputrace with `--stacks --stacks-every 1`: every call's stack.
    GputraceStacks,
    /// gputrace with `--stacks` (launches sampled, one in 64).
    GputraceStacks64,
    /// gputrace with calls in flight in the eBPF hash map instead of task
    /// storage (`GPUTRACE_INFLIGHT=map`): what the task storage saves.
    GputraceMap,
    /// The daemon with `--probes launch:counts`: launches counted in the
    /// kernel (calls, and a latency histogram of one in 16), no record of
    /// each.
    GputraceCounts,
    /// The same with `--counts-time-every 1`: every launch timed.
    GputraceCountsEvery,
}

impl Mode {
    pub(crate) const ALL: [Mode; 10] = [
        Mode::None,
        Mode::Bare,
        Mode::BareRet,
        Mode::Gputrace,
        Mode::GputraceArgs,
        Mode::GputraceStacks,
        Mode::GputraceStacks64,
        Mode::GputraceMap,
        Mode::GputraceCounts,
        Mode::GputraceCountsEvery,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Bare => "bare uprobe",
            Mode::BareRet => "bare uprobe+uretprobe",
            Mode::Gputrace => "gputrace",
            Mode::GputraceArgs => "gputrace :args",
            Mode::GputraceStacks => "gputrace --stacks",
            Mode::GputraceStacks64 => "gputrace --stacks 1/64",
            Mode::GputraceMap => "gputrace (in-flight map)",
            Mode::GputraceCounts => "daemon launch:counts",
            Mode::GputraceCountsEvery => "daemon launch:counts, every call timed",
        }
    }

    /// The short name `--modes` takes.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Bare => "bare",
            Mode::BareRet => "bare-ret",
            Mode::Gputrace => "gputrace",
            Mode::GputraceArgs => "args",
            Mode::GputraceStacks => "stacks",
            Mode::GputraceStacks64 => "stacks64",
            Mode::GputraceMap => "map",
            Mode::GputraceCounts => "counts",
            Mode::GputraceCountsEvery => "counts-every",
        }
    }

    pub(crate) fn from_key(k: &str) -> Result<Mode> {
        Mode::ALL.into_iter().find(|m| m.key() == k).ok_or_else(|| {
            let keys: Vec<_> = Mode::ALL.iter().map(|m| m.key()).collect();
            anyhow!("no bench mode {k:?} (modes: {})", keys.join(","))
        })
    }

    pub(super) fn traced(self) -> bool {
        matches!(
            self,
            Mode::Gputrace
                | Mode::GputraceArgs
                | Mode::GputraceStacks
                | Mode::GputraceStacks64
                | Mode::GputraceMap
        )
    }

    /// Whether the row means anything for the workload `kind`: only
    /// launches are counted in the kernel.
    pub(super) fn applies(self, kind: &str) -> bool {
        !self.counted() || kind == "launch"
    }

    /// The daemon counting launches in the kernel.
    pub(super) fn counted(self) -> bool {
        matches!(self, Mode::GputraceCounts | Mode::GputraceCountsEvery)
    }

    /// The row this one is compared with.
    pub(super) fn floor(self) -> Option<Mode> {
        match self {
            Mode::Gputrace
            | Mode::GputraceMap
            | Mode::GputraceCounts
            | Mode::GputraceCountsEvery => Some(Mode::BareRet),
            Mode::GputraceArgs => Some(Mode::Bare),
            Mode::GputraceStacks | Mode::GputraceStacks64 => Some(Mode::Gputrace),
            _ => None,
        }
    }
}
