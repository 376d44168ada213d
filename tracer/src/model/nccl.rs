//! NCCL in the event model: who a collective belongs to (communicator, rank,
//! sequence number), the ranks' arrivals at one collective across processes,
//! and the stalls when some ranks wait for others.

use std::collections::BTreeMap;
use std::sync::Arc;

/// NCCL's `ncclFunc_t` for the five collectives that have a sequence
/// number (`comm->seqNumber[func]`); point-to-point calls have none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Func {
    Broadcast = 0,
    Reduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllReduce = 4,
}

impl Func {
    pub const ALL: [Func; 5] = [
        Func::Broadcast,
        Func::Reduce,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AllReduce,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// The operation's name as gputrace writes it (`op` in events).
    pub fn name(self) -> &'static str {
        match self {
            Func::Broadcast => "Broadcast",
            Func::Reduce => "Reduce",
            Func::AllGather => "AllGather",
            Func::ReduceScatter => "ReduceScatter",
            Func::AllReduce => "AllReduce",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// One rank's entry into one collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub comm_id: u64,
    pub nranks: u32,
    pub rank: u32,
    pub pid: u32,
    pub func: Func,
    /// The collective's number among this communicator's collectives of
    /// `func` (0 for the first), the same on every rank.
    pub seq: u64,
    /// When the rank entered it (Unix ns).
    pub entry_ns: u64,
}

/// A collective every rank has entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub comm_id: u64,
    pub nranks: u32,
    pub func: Func,
    pub seq: u64,
    /// The first entry (Unix ns).
    pub first_ns: u64,
    /// Last entry minus first.
    pub skew_ns: u64,
    pub last_rank: u32,
    pub last_pid: u32,
    /// The last rank's entry minus the entry before it: what it cost the
    /// others (0 for a 1-rank communicator).
    pub delay_ns: u64,
}

/// How a process ended, when it could be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitHow {
    /// It exited with this status.
    Status(i32),
    /// A signal killed it (`SIGKILL`, `SIGSEGV`, ...).
    Signal(i32),
}

impl ExitHow {
    /// From a wait status (`/proc/PID/stat`'s `exit_code` of a zombie).
    pub fn from_wait_status(w: i32) -> Self {
        match w & 0x7f {
            0 => ExitHow::Status((w >> 8) & 0xff),
            sig => ExitHow::Signal(sig),
        }
    }

    /// `exit status 1`, `SIGKILL`, `signal 40`.
    pub fn describe(self) -> String {
        match self {
            ExitHow::Status(s) => format!("exit status {s}"),
            ExitHow::Signal(s) => match signal_name(s) {
                Some(n) => n.to_string(),
                None => format!("signal {s}"),
            },
        }
    }
}

fn signal_name(s: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(s)
        .ok()?
        .checked_sub(1)
        .and_then(|i| NAMES.get(i).copied())
}

/// A rank's process found exited: when the exit was noticed (Unix ns),
/// and how, when its status could still be read (a zombie's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    pub at_ns: u64,
    pub how: Option<ExitHow>,
}

/// One missing rank holding up collectives of a communicator that other
/// ranks have entered, for longer than the threshold: one stall per
/// (communicator, missing rank), however many collectives it holds up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    pub comm_id: u64,
    pub nranks: u32,
    /// The oldest collective it holds up.
    pub func: Func,
    pub seq: u64,
    /// The last sequence number (of `func`) it holds up so far.
    pub seq_last: u64,
    /// Collectives it holds up so far (of any function).
    pub collectives: u64,
    /// The ranks that have entered the oldest, with their pids.
    pub waiting: Vec<(u32, u32)>,
    /// The rank that has not, and its pid when this tracer has seen a
    /// process of that rank (else the rank is not traced here).
    pub missing: (u32, Option<u32>),
    /// Its process exited (said again when found after the stall).
    pub exited: Option<Exit>,
    /// When the first rank entered the oldest (Unix ns).
    pub first_ns: u64,
    /// How long the first rank in has waited (ns).
    pub waited_ns: u64,
}

/// A stall that ended: the missing rank entered every collective it held
/// up (or those were dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StallEnded {
    pub comm_id: u64,
    pub rank: u32,
    pub func: Func,
    pub seq: u64,
    pub seq_last: u64,
    pub collectives: u64,
    pub waited_ns: u64,
}

/// What one rank of one communicator did, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankStats {
    pub pid: u32,
    /// Collectives this rank entered.
    pub collectives: u64,
    /// Complete collectives it entered last.
    pub times_last: u64,
    /// The others' waits for it when it came last: per collective, from
    /// the entry of the rank before it to its own; waits of collectives
    /// that overlap in time (a step's gradient buckets) counted once.
    pub delay: WaitUnion,
    /// Its last sequence number per function (`None`: none seen).
    pub last_seq: [Option<u64>; 5],
    /// Its first sequence number traced per function: it entered the
    /// collectives below it before its probes were attached, unseen.
    pub first_seq: [Option<u64>; 5],
    /// Nanoseconds the others have been waiting for it now (0: not stalled).
    pub stalled_ns: u64,
    /// Stalls in which it was missing.
    pub stalls: u64,
    /// Its process exited (found by the session while tracing).
    pub exited: Option<Exit>,
}

/// Spans kept apart in a [`WaitUnion`] before the oldest are folded.
const MAX_SPANS: usize = 64;

/// The length of a union of time intervals, added in any order: what
/// overlaps is counted once. The last [`MAX_SPANS`] disjoint spans are
/// kept; an interval that starts before the oldest kept one is cut there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitUnion {
    /// Disjoint spans, start → end (ns).
    spans: BTreeMap<u64, u64>,
    total_ns: u64,
    /// Nothing before this is added (the end of the spans folded away).
    horizon_ns: u64,
}

impl WaitUnion {
    /// Adds [start, end).
    pub fn add(&mut self, start_ns: u64, end_ns: u64) {
        let (mut s, mut e) = (start_ns.max(self.horizon_ns), end_ns);
        if e <= s {
            return;
        }
        let touching: Vec<(u64, u64)> = self
            .spans
            .range(..=e)
            .rev()
            .take_while(|(_, end)| **end >= s)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, b) in touching {
            self.spans.remove(&a);
            self.total_ns -= b - a;
            s = s.min(a);
            e = e.max(b);
        }
        self.spans.insert(s, e);
        self.total_ns += e - s;
        while self.spans.len() > MAX_SPANS {
            if let Some((_, end)) = self.spans.pop_first() {
                self.horizon_ns = end;
            }
        }
    }

    /// The union's length (ns).
    pub fn total_ns(&self) -> u64 {
        self.total_ns
    }
}

/// One communicator, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    pub nranks: u32,
    pub ranks: BTreeMap<u32, RankStats>,
    /// Collectives every rank entered.
    pub complete: u64,
    pub skew_ns_total: u64,
    pub skew_ns_max: u64,
    /// Collectives dropped before every rank came (ranks not traced here,
    /// or more pending than [`MAX_PENDING`]).
    pub incomplete: u64,
    /// Entries for a (collective, rank) already entered: the ranks'
    /// sequences disagree (should stay 0).
    pub conflicts: u64,
    /// Collectives a rank entered before it was traced (below its first
    /// traced sequence number; processes attached one after the other):
    /// not compared, neither complete nor incomplete.
    pub before_trace: u64,
}

impl CommStats {
    pub fn skew_ns_avg(&self) -> Option<u64> {
        (self.complete > 0).then(|| self.skew_ns_total / self.complete)
    }
}

/// Where a collective's sequence number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqSource {
    /// NCCL's `seqNumber` counter, read at entry.
    Counter,
    /// Counted from the communicator's init, which was traced.
    FromInit,
}

/// Why a communicator's collectives have no sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unaligned {
    /// No counter in the layout (NCCL before 2.26, a stripped file, or an
    /// undecodable one) and the init happened before gputrace attached.
    NoCounter,
    /// The communicator's id or rank is unknown.
    NoIdentity,
    /// The layout read disagreed with what the traced init said: memory
    /// reads are not trusted for this process any more.
    LayoutMismatch,
}

impl SeqSource {
    /// Its name in the JSON schema (`seq_from`).
    pub fn name(self) -> &'static str {
        match self {
            SeqSource::Counter => "counter",
            SeqSource::FromInit => "init",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        [SeqSource::Counter, SeqSource::FromInit]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

impl Unaligned {
    const ALL: [Unaligned; 3] = [
        Unaligned::NoCounter,
        Unaligned::NoIdentity,
        Unaligned::LayoutMismatch,
    ];

    /// Its code in the JSON schema (`unaligned`).
    pub fn code(self) -> &'static str {
        match self {
            Unaligned::NoCounter => "no_counter",
            Unaligned::NoIdentity => "no_identity",
            Unaligned::LayoutMismatch => "layout_mismatch",
        }
    }

    pub fn from_code(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.code() == s)
    }

    pub fn reason(self) -> &'static str {
        match self {
            Unaligned::NoCounter => "no NCCL counter readable and the init was not traced",
            Unaligned::NoIdentity => "communicator id or rank unknown",
            Unaligned::LayoutMismatch => "the communicator's memory disagreed with its traced init",
        }
    }
}

/// Who a collective call belongs to, as far as known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub comm_id: Option<u64>,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<u32>,
    /// Collectives only (not p2p).
    pub seq: Option<u64>,
    pub source: Option<SeqSource>,
    /// `comm_id` is gputrace's own (a hash of the `ncclUniqueId` the init
    /// was given: the release of libnccl is unknown), not NCCL's `commHash`.
    pub own_id: bool,
}

/// Ranks that entered a collective while others have not, or a thread
/// inside an NCCL call, for longer than `--nccl-stall`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NcclStall {
    /// A collective entered by some ranks and not by others.
    Collective { stall: Stall, host: Arc<str> },
    /// An NCCL call not returned (not covered by a collective stall).
    Stuck(StuckCall),
}

/// A thread inside an NCCL call for longer than the threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckCall {
    pub pid: u32,
    pub tid: u32,
    /// The process's name.
    pub process: Arc<str>,
    pub api: &'static str,
    /// The `ncclComm_t`.
    pub comm: u64,
    pub ident: Identity,
    /// Why its collective is not named across ranks (`None`: it is).
    pub unaligned: Option<Unaligned>,
    /// When it entered (Unix ns).
    pub entered_ns: u64,
    pub waited_ns: u64,
    pub host: Arc<str>,
}
