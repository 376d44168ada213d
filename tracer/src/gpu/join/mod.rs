//! Joining the GPU's work to the calls that queued it.
//!
//! CUPTI gives each piece of work the correlation id of the API call that
//! queued it, and an API record of that call (its thread, start and end).
//! That record is joined to the call gputrace's probes saw on the same
//! thread: a driver call (`cuLaunchKernel`) is the probed call whose
//! interval holds CUPTI's (both are timed on CLOCK_MONOTONIC, CUPTI inside
//! the function the probes bracket); a runtime call (`cudaLaunchKernel`,
//! which is what CUPTI records for PyTorch) holds the libcuda call the
//! runtime made inside it. A kernel launched inside an NCCL call gets that
//! call's collective (communicator, rank, sequence number).
//!
//! The agent writes an API record at the call's exit, before the probes
//! report that call (at its return) and the NCCL call around it (at that
//! one's return): a record is joined to calls only once it is `SETTLE_NS`
//! old, and the work that came before waits for it.
//!
//! Everything here is bounded: the calls kept per thread (by count and by
//! age), the API records settling and those waiting for work, and the work
//! waiting for its API record; work whose record never came is handed on
//! without it.

use std::collections::{HashMap, VecDeque};

use crate::gpu::convert::ApiCall;
use crate::model::call::{Args, Call};
use crate::model::gpu::{GpuLaunch, GpuWork, NcclLaunch};
use crate::model::types::Family;

/// Calls kept for joining, all threads of all processes together. A call
/// must still be kept when its API record settles (`SETTLE_NS` after the
/// agent flushed it): a busy training process makes some 80,000 such
/// calls a second, most on one thread, so the bound holds several
/// seconds of a few such processes (about 48 bytes a call: 50 MB at
/// most). Past it, the busiest thread's oldest calls go first; records
/// of calls gone join none (counted per process in the summary).
const MAX_CALLS: usize = 1 << 20;
/// Threads kept (least recently used dropped beyond).
const MAX_THREADS: usize = 4096;
/// Calls older than this (behind the newest of their thread) are dropped:
/// the agent hands work over within a second or two.
const CALL_AGE_NS: u64 = 10_000_000_000;
/// API records kept waiting for their work (all processes); a graph
/// launch's record serves every node, so records stay until pushed out.
const MAX_APIS: usize = 1 << 18;
/// How long an API record waits before it is joined to the calls (Unix ns
/// behind now); and how many wait (the oldest is joined early beyond).
/// The session reads the agents after draining the probes' ring, so only
/// a call that returned between the two (microseconds) can be missing:
/// a short wait is enough, and it keeps what waits for it small (a busy
/// process launches some 50,000 kernels a second).
const SETTLE_NS: u64 = 300_000_000;
const MAX_SETTLING: usize = 1 << 18;
/// Work waiting for its API record (all processes), and how long (longer
/// than a record settles).
const MAX_WAITING: usize = 1 << 18;
const WAIT_NS: u64 = 3_000_000_000;

/// A probed call kept for joining.
#[derive(Clone, Debug)]
struct Seen {
    start_ns: u64,
    end_ns: u64,
    api: &'static str,
}

/// NCCL calls kept per thread (a collective's kernel is launched inside
/// it; a thread has few in flight).
const NCCL_PER_THREAD: usize = 64;

/// One thread's recent calls.
#[derive(Default)]
struct Thread {
    /// Launch, copy and graph calls, in start order (they do not nest).
    calls: VecDeque<Seen>,
    /// NCCL calls (they hold launches), the latest last.
    nccl: VecDeque<(Seen, NcclLaunch)>,
}

/// The GPU launch-related calls each thread made recently.
#[derive(Default)]
pub(crate) struct CallIndex {
    threads: HashMap<(u32, u32), Thread>,
    /// Launch, copy and graph calls kept, all threads.
    total: usize,
    /// Threads in the order they were last fed (for dropping the idlest).
    uses: u64,
    last_use: HashMap<(u32, u32), u64>,
}

fn wanted(c: &Call) -> bool {
    matches!(
        c.family,
        Some(Family::Launch | Family::Memcpy | Family::Nccl)
    ) || matches!(c.args, Args::Graph(_))
}

impl CallIndex {
    /// A call the probes saw (in the order of its thread's calls).
    pub(crate) fn add(&mut self, c: &Call) {
        if !wanted(c) {
            return;
        }
        let Some(dur) = c.dur_ns else {
            return; // entry-only: no interval to hold a CUPTI record
        };
        let nccl = match &c.args {
            Args::Nccl(n) => Some(NcclLaunch {
                api: c.api,
                op: Some(n.op.name()),
                comm_id: n.ident.comm_id,
                rank: n.ident.rank,
                seq: n.ident.seq,
            }),
            _ if c.family == Some(Family::Nccl) => Some(NcclLaunch {
                api: c.api,
                op: None,
                comm_id: None,
                rank: None,
                seq: None,
            }),
            _ => None,
        };
        let key = (c.pid, c.tid);
        self.uses += 1;
        self.last_use.insert(key, self.uses);
        if !self.threads.contains_key(&key) && self.threads.len() >= MAX_THREADS {
            if let Some((&old, _)) = self.last_use.iter().min_by_key(|(_, u)| **u) {
                self.drop_thread(old);
            }
        }
        let t = self.threads.entry(key).or_default();
        let seen = Seen {
            start_ns: c.ts_ns,
            end_ns: c.ts_ns.saturating_add(dur),
            api: c.api,
        };
        if let Some(n) = nccl {
            if t.nccl.len() >= NCCL_PER_THREAD {
                t.nccl.pop_front();
            }
            t.nccl.push_back((seen, n));
            return;
        }
        let before = t.calls.len();
        while t
            .calls
            .front()
            .is_some_and(|f| f.start_ns.saturating_add(CALL_AGE_NS) < c.ts_ns)
        {
            t.calls.pop_front();
        }
        t.calls.push_back(seen);
        self.total = self.total + t.calls.len() - before;
        if self.total > MAX_CALLS {
            self.trim(key);
        }
    }

    /// Over the bound: the thread's oldest call goes (this thread is the
    /// one calling most, as a rule); a thread with one call left takes
    /// the idlest thread's oldest instead.
    fn trim(&mut self, key: (u32, u32)) {
        let victim = if self.threads.get(&key).is_some_and(|t| t.calls.len() > 1) {
            key
        } else {
            match self
                .last_use
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, u)| **u)
            {
                Some((&k, _)) => k,
                None => return,
            }
        };
        if let Some(t) = self.threads.get_mut(&victim) {
            if t.calls.pop_front().is_some() {
                self.total -= 1;
            }
        }
    }

    fn drop_thread(&mut self, key: (u32, u32)) {
        if let Some(t) = self.threads.remove(&key) {
            self.total -= t.calls.len();
        }
        self.last_use.remove(&key);
    }

    /// Drops what is kept of a process.
    pub(crate) fn forget(&mut self, pid: u32) {
        let gone: Vec<_> = self
            .threads
            .keys()
            .filter(|k| k.0 == pid)
            .copied()
            .collect();
        for k in gone {
            self.drop_thread(k);
        }
    }

    /// The probed libcuda call CUPTI's record `a` (on `pid`) stands for,
    /// and the NCCL call it was made in. A driver record is held by the
    /// latest call that started before it; a runtime record holds the
    /// libcuda call its runtime made inside it: either way only the calls
    /// next to it in start order are looked at.
    fn find(&self, pid: u32, a: &ApiCall) -> (Option<(u64, &'static str)>, Option<NcclLaunch>) {
        let Some(t) = self.threads.get(&(pid, a.tid)) else {
            return (None, None);
        };
        let holds = |s: &Seen| s.start_ns <= a.start_ns && a.end_ns <= s.end_ns;
        let upto = t.calls.partition_point(|s| s.start_ns <= a.end_ns);
        let mut call = None;
        for s in t.calls.range(..upto).rev() {
            if a.runtime {
                if s.start_ns < a.start_ns {
                    break;
                }
                if s.end_ns <= a.end_ns {
                    call = Some((s.start_ns, s.api));
                    break;
                }
            } else if s.start_ns <= a.start_ns {
                if holds(s) {
                    call = Some((s.start_ns, s.api));
                }
                break;
            }
        }
        let nccl = t
            .nccl
            .iter()
            .rev()
            .find(|(s, _)| holds(s))
            .map(|(_, n)| n.clone());
        (call, nccl)
    }
}

/// Work waiting for its API record.
struct Waiting {
    work: GpuWork,
    since_ns: u64,
}

/// An API call and its work: (pid, epoch, correlation id).
type Key = (u32, u8, u32);

/// API records by (pid, epoch, correlation id), and work waiting for them.
#[derive(Default)]
pub(crate) struct Joiner {
    pub(crate) calls: CallIndex,
    /// API records not joined yet, in arrival order, with their process.
    settling: VecDeque<(u32, ApiCall)>,
    apis: HashMap<Key, GpuLaunch>,
    order: VecDeque<Key>,
    waiting: HashMap<Key, Vec<Waiting>>,
    waiting_count: usize,
    /// When each key began to wait, oldest first (keys since joined are
    /// skipped when they come up).
    waiting_order: VecDeque<(u64, Key)>,
    /// Work handed on without its API record (never came, or dropped).
    pub(crate) unjoined: u64,
}

impl Joiner {
    /// An API record of process `pid`: joined once settled (see
    /// [`Joiner::expire`]).
    pub(crate) fn api(&mut self, pid: u32, a: &ApiCall, out: &mut Vec<GpuWork>) {
        self.settling.push_back((pid, *a));
        while self.settling.len() > MAX_SETTLING {
            if let Some((p, a)) = self.settling.pop_front() {
                self.join(p, &a, out);
            }
        }
    }

    /// Joins the settled API records (all of them with `all`, those of
    /// `pid` when given).
    fn settle(&mut self, now_ns: u64, all: bool, pid: Option<u32>, out: &mut Vec<GpuWork>) {
        if all || pid.is_some() {
            for (p, a) in std::mem::take(&mut self.settling) {
                if all || pid == Some(p) {
                    self.join(p, &a, out);
                } else {
                    self.settling.push_back((p, a));
                }
            }
            return;
        }
        while self
            .settling
            .front()
            .is_some_and(|(_, a)| a.end_ns.saturating_add(SETTLE_NS) <= now_ns)
        {
            if let Some((p, a)) = self.settling.pop_front() {
                self.join(p, &a, out);
            }
        }
    }

    /// An API record joined to its probed call, kept for its work (handed
    /// on now, if it came first).
    fn join(&mut self, pid: u32, a: &ApiCall, out: &mut Vec<GpuWork>) {
        let (call, nccl) = self.calls.find(pid, a);
        let launch = GpuLaunch {
            tid: a.tid,
            api: a.api,
            api_start_ns: a.start_ns,
            call,
            nccl,
        };
        let key = (pid, a.epoch, a.correlation);
        if let Some(ws) = self.waiting.remove(&key) {
            self.waiting_count -= ws.len();
            for mut w in ws {
                w.work.launch = Some(launch.clone());
                out.push(w.work);
            }
        }
        if self.apis.insert(key, launch).is_none() {
            self.order.push_back(key);
            while self.order.len() > MAX_APIS {
                if let Some(old) = self.order.pop_front() {
                    self.apis.remove(&old);
                }
            }
        }
    }

    /// A piece of work: handed on with its API record, or kept until that
    /// comes (`now_ns`: Unix ns, for how long).
    pub(crate) fn work(&mut self, mut w: GpuWork, now_ns: u64, out: &mut Vec<GpuWork>) {
        if let Some(l) = self.apis.get(&(w.pid, w.epoch, w.correlation)) {
            w.launch = Some(l.clone());
            out.push(w);
            return;
        }
        if self.waiting_count >= MAX_WAITING {
            self.unjoined += 1;
            out.push(w);
            return;
        }
        self.waiting_count += 1;
        let key = (w.pid, w.epoch, w.correlation);
        let ws = self.waiting.entry(key).or_default();
        let first = ws.is_empty();
        ws.push(Waiting {
            work: w,
            since_ns: now_ns,
        });
        if first {
            self.waiting_order.push_back((now_ns, key));
            // Keys joined since stay in the order until they come up:
            // bounded too (the oldest key still waiting is handed on).
            while self.waiting_order.len() > 4 * MAX_WAITING {
                if let Some((since, k)) = self.waiting_order.pop_front() {
                    self.hand_on_if_waiting(k, since, out);
                }
            }
        }
    }

    /// Joins the API records that settled, then hands on work that waited
    /// too long (`all`: everything, at the end, or of a process gone when
    /// `pid` is given).
    pub(crate) fn expire(
        &mut self,
        now_ns: u64,
        all: bool,
        pid: Option<u32>,
        out: &mut Vec<GpuWork>,
    ) {
        self.settle(now_ns, all, pid, out);
        if all || pid.is_some() {
            let keys: Vec<Key> = self
                .waiting
                .keys()
                .filter(|k| all || pid == Some(k.0))
                .copied()
                .collect();
            for k in keys {
                self.hand_on(k, out);
            }
            if all {
                self.waiting_order.clear();
            }
            return;
        }
        while let Some(&(since, k)) = self.waiting_order.front() {
            if since.saturating_add(WAIT_NS) > now_ns {
                break;
            }
            self.waiting_order.pop_front();
            self.hand_on_if_waiting(k, since, out);
        }
    }

    /// Hands on the work of `key` if it still waits since `since` (an
    /// entry of `waiting_order`; the key may have been joined since, or
    /// wait again from later).
    fn hand_on_if_waiting(&mut self, key: Key, since: u64, out: &mut Vec<GpuWork>) {
        if self
            .waiting
            .get(&key)
            .and_then(|ws| ws.first())
            .is_some_and(|w| w.since_ns == since)
        {
            self.hand_on(key, out);
        }
    }

    /// Hands on the work of `key` without its API record.
    fn hand_on(&mut self, key: Key, out: &mut Vec<GpuWork>) {
        if let Some(ws) = self.waiting.remove(&key) {
            self.waiting_count -= ws.len();
            self.unjoined += ws.len() as u64;
            out.extend(ws.into_iter().map(|w| w.work));
        }
    }

    /// Drops what is kept of a process (after its work was handed on).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.calls.forget(pid);
        self.settling.retain(|(p, _)| *p != pid);
        self.apis.retain(|k, _| k.0 != pid);
        self.order.retain(|k| k.0 != pid);
    }
}

#[cfg(test)]
mod tests;
