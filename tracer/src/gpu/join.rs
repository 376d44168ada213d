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

/// Calls kept per thread for joining.
const CALLS_PER_THREAD: usize = 4096;
/// Threads kept (least recently used dropped beyond).
const MAX_THREADS: usize = 4096;
/// Calls older than this (behind the newest of their thread) are dropped:
/// the agent hands work over within a second or two.
const CALL_AGE_NS: u64 = 30_000_000_000;
/// API records kept waiting for their work (all processes); a graph
/// launch's record serves every node, so records stay until pushed out.
const MAX_APIS: usize = 1 << 18;
/// How long an API record waits before it is joined to the calls (Unix ns
/// behind now); and how many wait (the oldest is joined early beyond).
const SETTLE_NS: u64 = 1_000_000_000;
const MAX_SETTLING: usize = 1 << 18;
/// Work waiting for its API record (all processes), and how long (longer
/// than a record settles).
const MAX_WAITING: usize = 1 << 16;
const WAIT_NS: u64 = 3_000_000_000;

/// A probed call kept for joining.
#[derive(Clone, Debug)]
struct Seen {
    start_ns: u64,
    end_ns: u64,
    api: &'static str,
    nccl: Option<NcclLaunch>,
}

/// The GPU launch-related calls each thread made recently.
#[derive(Default)]
pub(crate) struct CallIndex {
    threads: HashMap<(u32, u32), VecDeque<Seen>>,
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
                self.threads.remove(&old);
                self.last_use.remove(&old);
            }
        }
        let calls = self.threads.entry(key).or_default();
        let end_ns = c.ts_ns.saturating_add(dur);
        while calls.len() >= CALLS_PER_THREAD
            || calls
                .front()
                .is_some_and(|f| f.start_ns.saturating_add(CALL_AGE_NS) < c.ts_ns)
        {
            calls.pop_front();
        }
        calls.push_back(Seen {
            start_ns: c.ts_ns,
            end_ns,
            api: c.api,
            nccl,
        });
    }

    /// Drops what is kept of a process.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.threads.retain(|k, _| k.0 != pid);
        self.last_use.retain(|k, _| k.0 != pid);
    }

    /// The probed libcuda call CUPTI's record `a` (on `pid`) stands for,
    /// and the NCCL call it was made in.
    fn find(&self, pid: u32, a: &ApiCall) -> (Option<(u64, &'static str)>, Option<NcclLaunch>) {
        let Some(calls) = self.threads.get(&(pid, a.tid)) else {
            return (None, None);
        };
        // Calls are in start order: the candidates start before CUPTI's end.
        let upto = calls.partition_point(|s| s.start_ns <= a.end_ns);
        let mut call = None;
        let mut nccl = None;
        for s in calls.range(..upto).rev() {
            if s.end_ns < a.start_ns && s.nccl.is_none() {
                // Ended before CUPTI's call began: neither it nor an
                // earlier call (but an enclosing NCCL call) can hold it.
                continue;
            }
            let holds = s.start_ns <= a.start_ns && a.end_ns <= s.end_ns;
            let inside = a.start_ns <= s.start_ns && s.end_ns <= a.end_ns;
            if s.nccl.is_some() {
                if holds && nccl.is_none() {
                    nccl = s.nccl.clone();
                }
            } else if call.is_none() && if a.runtime { inside } else { holds } {
                call = Some((s.start_ns, s.api));
            }
            if s.start_ns.saturating_add(CALL_AGE_NS) < a.start_ns {
                break;
            }
        }
        (call, nccl)
    }
}

/// Work waiting for its API record.
struct Waiting {
    work: GpuWork,
    since_ns: u64,
}

/// API records by (pid, correlation id), and work waiting for them.
#[derive(Default)]
pub(crate) struct Joiner {
    pub(crate) calls: CallIndex,
    /// API records not joined yet, in arrival order, with their process.
    settling: VecDeque<(u32, ApiCall)>,
    apis: HashMap<(u32, u32), GpuLaunch>,
    order: VecDeque<(u32, u32)>,
    waiting: HashMap<(u32, u32), Vec<Waiting>>,
    waiting_count: usize,
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
        let key = (pid, a.correlation);
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
        if let Some(l) = self.apis.get(&(w.pid, w.correlation)) {
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
        self.waiting
            .entry((w.pid, w.correlation))
            .or_default()
            .push(Waiting {
                work: w,
                since_ns: now_ns,
            });
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
        let keys: Vec<(u32, u32)> = self
            .waiting
            .iter()
            .filter(|(k, ws)| {
                all || pid == Some(k.0)
                    || ws
                        .first()
                        .is_some_and(|w| w.since_ns.saturating_add(WAIT_NS) <= now_ns)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(ws) = self.waiting.remove(&k) {
                self.waiting_count -= ws.len();
                self.unjoined += ws.len() as u64;
                out.extend(ws.into_iter().map(|w| w.work));
            }
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
mod tests {
    use super::*;

    fn call(tid: u32, api: &'static str, ts: u64, dur: u64, family: Family) -> Call {
        let sync = Args::Sync {
            stream: None,
            event: None,
        };
        let mut c = crate::model::fixtures::call(tid, api, ts, dur, sync);
        c.family = Some(family);
        c
    }

    fn api(tid: u32, api: &'static str, runtime: bool, corr: u32, start: u64, end: u64) -> ApiCall {
        ApiCall {
            tid,
            api,
            runtime,
            correlation: corr,
            start_ns: start,
            end_ns: end,
        }
    }

    fn kernel(corr: u32, start: u64) -> GpuWork {
        let mut w = crate::model::fixtures::gpu_kernel("k", start, 100);
        w.correlation = corr;
        w
    }

    #[test]
    fn a_driver_record_joins_the_call_that_holds_it_on_its_thread() {
        let mut j = Joiner::default();
        j.calls
            .add(&call(5, "cuLaunchKernel", 1_000, 500, Family::Launch));
        j.calls
            .add(&call(6, "cuLaunchKernel", 1_100, 500, Family::Launch));
        j.calls
            .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
        let mut out = Vec::new();
        j.api(
            1,
            &api(5, "cuLaunchKernel", false, 9, 2_100, 2_400),
            &mut out,
        );
        j.work(kernel(9, 3_000), 0, &mut out);
        assert!(out.is_empty(), "the record settles first");
        j.expire(2_400 + SETTLE_NS - 1, false, None, &mut out);
        assert!(out.is_empty());
        j.expire(2_400 + SETTLE_NS, false, None, &mut out);
        assert_eq!(out.len(), 1);
        let l = out[0].launch.as_ref().unwrap();
        assert_eq!((l.tid, l.call), (5, Some((2_000, "cuLaunchKernel"))));
        assert_eq!(out[0].queued_ns(), Some(900));
    }

    #[test]
    fn a_runtime_record_joins_the_libcuda_call_inside_it_and_an_nccl_call_around_it() {
        let mut j = Joiner::default();
        let mut nccl = call(5, "ncclAllReduce", 1_000, 10_000, Family::Nccl);
        nccl.args = Args::Sync {
            stream: None,
            event: None,
        };
        j.calls.add(&nccl);
        j.calls
            .add(&call(5, "cuLaunchKernelEx", 2_200, 300, Family::Launch));
        let mut out = Vec::new();
        // Work first, its record after: kept until the record comes.
        j.work(kernel(4, 5_000), 0, &mut out);
        assert!(out.is_empty());
        j.api(
            1,
            &api(5, "cudaLaunchKernelExC", true, 4, 2_000, 2_600),
            &mut out,
        );
        j.expire(u64::MAX, false, None, &mut out);
        let l = out[0].launch.as_ref().unwrap();
        assert_eq!(l.call, Some((2_200, "cuLaunchKernelEx")));
        assert_eq!(l.nccl.as_ref().map(|n| n.api), Some("ncclAllReduce"));
        // A graph launch's record serves every node.
        j.work(kernel(4, 6_000), 0, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out[1].launch.is_some());
    }

    #[test]
    fn a_record_that_came_before_its_calls_joins_them_once_settled() {
        // The agent writes the record at the call's exit; the probes
        // report the launch at its return and the NCCL call after.
        let mut j = Joiner::default();
        let mut out = Vec::new();
        j.api(
            1,
            &api(5, "cuLaunchKernel", false, 3, 2_100, 2_400),
            &mut out,
        );
        j.work(kernel(3, 5_000), 0, &mut out);
        j.calls
            .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
        j.calls
            .add(&call(5, "ncclAllReduce", 1_000, 10_000, Family::Nccl));
        j.expire(2_400 + SETTLE_NS, false, None, &mut out);
        assert_eq!(out.len(), 1);
        let l = out[0].launch.as_ref().unwrap();
        assert_eq!(l.call, Some((2_000, "cuLaunchKernel")));
        assert_eq!(l.nccl.as_ref().map(|n| n.api), Some("ncclAllReduce"));
    }

    #[test]
    fn records_of_a_process_gone_are_joined_at_once() {
        let mut j = Joiner::default();
        let mut out = Vec::new();
        j.calls
            .add(&call(5, "cuLaunchKernel", 2_000, 500, Family::Launch));
        j.api(
            1,
            &api(5, "cuLaunchKernel", false, 3, 2_100, 2_400),
            &mut out,
        );
        j.work(kernel(3, 5_000), 0, &mut out);
        j.expire(0, false, Some(1), &mut out);
        assert_eq!((out.len(), j.unjoined), (1, 0));
        assert!(out[0].launch.as_ref().unwrap().call.is_some());
    }

    #[test]
    fn work_whose_record_never_comes_is_handed_on_after_a_while() {
        let mut j = Joiner::default();
        let mut out = Vec::new();
        j.work(kernel(1, 10), 0, &mut out);
        j.expire(WAIT_NS - 1, false, None, &mut out);
        assert!(out.is_empty());
        j.expire(WAIT_NS, false, None, &mut out);
        assert_eq!((out.len(), j.unjoined), (1, 1));
        assert!(out[0].launch.is_none());
    }

    #[test]
    fn calls_kept_per_thread_are_bounded() {
        let mut j = Joiner::default();
        for i in 0..(CALLS_PER_THREAD as u64 + 10) {
            j.calls
                .add(&call(5, "cuLaunchKernel", i * 10, 5, Family::Launch));
        }
        assert_eq!(j.calls.threads[&(1, 5)].len(), CALLS_PER_THREAD);
    }
}
