//! The session's view across ranks: every traced process's collectives,
//! matched by (communicator id, function, sequence number), make
//! [`Event::NcclCollective`]s; collectives some ranks entered and others
//! not, and NCCL calls a thread is stuck inside, for longer than
//! `--nccl-stall`, make [`Event::NcclStall`]s.
//!
//! A rank blocked inside a collective has not returned, so no record of
//! its call has come through the ring buffer: its entry record sits in
//! the probes' in-flight map, which is read here on the check tick.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData};
use tracer_common::{CallEvent, NO_RETURN};

use crate::catalogue;
use crate::catalogue::Lib;
use crate::decode::enrich::Enricher;
use crate::host::clock::Clock;
use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::nccl::Arrival;
use crate::model::nccl::Exit;
use crate::model::nccl::ExitHow;
use crate::model::nccl::Func;
use crate::model::nccl::NcclStall;
use crate::model::nccl::StuckCall;
use crate::model::Event;
use crate::nccl::ranks::CrossRank;

/// Stuck calls remembered (reported once each) before the set is cleared.
const MAX_STUCK_REPORTED: usize = 4096;

pub(super) struct NcclWatch {
    cross: CrossRank,
    /// `--nccl-stall`; `None`: stalls are not looked for.
    threshold: Option<Duration>,
    host: Arc<str>,
    inflight: Option<BpfHashMap<MapData, u64, CallEvent>>,
    /// (pid, tid, entry) of stuck calls already reported.
    stuck_reported: HashSet<(u32, u32, u64)>,
}

/// An arrival, when the call names its collective on every rank.
fn arrival(c: &Call) -> Option<Arrival> {
    let Args::Nccl(n) = &c.args else { return None };
    crate::nccl::enrich::arrival(c.pid, c.ts_ns, n)
}

/// The name of this machine, for stall lines.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer and its length; the result is NUL-terminated
    // on success (truncated names are cut at the buffer's end).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl NcclWatch {
    pub(super) fn new(
        threshold: Option<Duration>,
        inflight: Option<BpfHashMap<MapData, u64, CallEvent>>,
    ) -> Self {
        Self {
            cross: CrossRank::new(),
            threshold,
            host: Arc::from(crate::text::printable(&hostname())),
            inflight,
            stuck_reported: HashSet::new(),
        }
    }

    /// A decoded call: the collective it completes across ranks, if any.
    pub(super) fn observe(&mut self, c: &Call) -> Option<Event> {
        match &c.args {
            Args::CommInit {
                comm_id: Some(id),
                nranks,
                rank: Some(rank),
                ..
            } => {
                let (n, r) = (u32::try_from(*nranks).ok()?, u32::try_from(*rank).ok()?);
                self.cross.rank_seen(*id, n, r, c.pid);
                None
            }
            // A 1-rank communicator has nothing to compare: no event.
            Args::Nccl(_) => self
                .cross
                .arrive(arrival(c)?)
                .filter(|done| done.nranks > 1)
                .map(Event::NcclCollective),
            _ => None,
        }
    }

    /// A traced process exited: stalls waiting for a rank it was say so.
    pub(super) fn process_exited(&mut self, pid: u32, at_ns: u64, status: Option<i32>) {
        self.cross.process_exited(
            pid,
            Exit {
                at_ns,
                how: status.map(ExitHow::from_wait_status),
            },
        );
    }

    /// The check tick: collectives entered by ranks still inside them (from
    /// the in-flight map), then stalls and stuck calls past the threshold.
    pub(super) fn check(&mut self, enricher: &mut Enricher, clock: Clock, out: &mut Vec<Event>) {
        let Some(threshold) = self.threshold else {
            return;
        };
        let threshold_ns = threshold.as_nanos() as u64;
        let now_mono = Clock::now_mono_ns();
        let now = clock.to_unix_ns(now_mono);
        let mut stuck = Vec::new();
        if let Some(map) = &self.inflight {
            for (_, e) in map.iter().filter_map(Result::ok) {
                let Some(api) = catalogue::api(e.api) else {
                    continue;
                };
                if api.lib != Lib::Nccl || e.dur_ns != NO_RETURN {
                    continue;
                }
                let age = now_mono.saturating_sub(e.start_ns);
                if age < threshold_ns {
                    continue;
                }
                let Some((call, known)) = enricher.peek_nccl(&e) else {
                    continue;
                };
                if let Some(a) = arrival(&call) {
                    if let Some(done) = self.cross.arrive(a).filter(|d| d.nranks > 1) {
                        out.push(Event::NcclCollective(done));
                    }
                }
                stuck.push((call, known.err(), age));
            }
        }
        let (stalls, ended) = self.cross.check_stalls(now, threshold_ns);
        let covered: HashSet<(u64, Func, u64)> = stalls
            .iter()
            .map(|s| (s.comm_id, s.func, s.seq))
            .chain(self.cross.stalled_keys())
            .collect();
        for s in stalls {
            out.push(Event::NcclStall(NcclStall::Collective {
                stall: s,
                host: self.host.clone(),
            }));
        }
        for e in ended {
            out.push(Event::NcclStallEnded(e));
        }
        if self.stuck_reported.len() > MAX_STUCK_REPORTED {
            self.stuck_reported.clear();
        }
        for (call, why, age) in stuck {
            let key = arrival(&call).map(|a| (a.comm_id, a.func, a.seq));
            if key.is_some_and(|k| covered.contains(&k)) {
                continue; // a waiting rank of a stall already reported
            }
            if !self.stuck_reported.insert((call.pid, call.tid, call.ts_ns)) {
                continue;
            }
            let Args::Nccl(n) = &call.args else { continue };
            out.push(Event::NcclStall(NcclStall::Stuck(StuckCall {
                pid: call.pid,
                tid: call.tid,
                process: call.comm.clone(),
                api: call.api,
                comm: n.comm,
                ident: n.ident,
                unaligned: why,
                entered_ns: call.ts_ns,
                waited_ns: age,
                host: self.host.clone(),
            })));
        }
    }
}
