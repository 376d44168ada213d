//! The per-(communicator, rank) NCCL series: what each rank of each
//! communicator did (collectives by operation, its last sequence number),
//! the arrival skew of the collectives every traced rank entered, how
//! often a rank came last and the delay it caused, and stalls.
//!
//! Labels are `comm_id` (as NCCL prints it), `rank`, `nranks`, `op`: no
//! pid, so a series lives as long as its communicator. The number of
//! communicators is bounded ([`MAX_COMMS`]; the least recently active is
//! dropped), so the number of series is too. Across a cluster, each node's
//! daemon serves its own ranks; `last_seq` per rank lets Prometheus find
//! the rank that lags wherever it runs (deploy/prometheus/).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::nccl::Collective;
use crate::model::nccl::Exit;
use crate::model::nccl::ExitHow;
use crate::model::nccl::Func;
use crate::model::nccl::NcclStall;
use crate::model::nccl::StallEnded;
use crate::model::nccl::WaitUnion;
use crate::nccl::hash::format_comm_id;
use crate::outputs::metrics::seconds;
use crate::outputs::metrics::BUCKETS_NS;

/// Communicators with series at once.
pub(super) const MAX_COMMS: usize = 64;
/// Ranks with series per communicator (ranks past it, or not below the
/// communicator's size, as a process's memory may say, get none).
pub(super) const MAX_RANKS: usize = 1024;

#[derive(Clone, Debug, Default)]
struct RankSeries {
    pid: u32,
    /// Per `Func` index: collectives entered, last sequence number.
    collectives: [u64; 5],
    last_seq: [Option<u64>; 5],
    times_last: u64,
    /// The others' waits for it, overlaps counted once.
    delay: WaitUnion,
    stalls: u64,
    /// The first entry (Unix ns) of the collective the others wait in for
    /// this rank now (`None`: not stalled).
    stalled_since: Option<u64>,
    /// The stall said for it now: its oldest collective.
    stall: Option<(Func, u64)>,
    /// Its process exited while the others waited for it.
    exited: Option<Exit>,
    stuck_calls: u64,
}

#[derive(Clone, Debug, Default)]
struct CommSeries {
    nranks: u32,
    ranks: BTreeMap<u32, RankSeries>,
    /// Arrival skew histogram (per bucket, the last slot +Inf).
    skew: [u64; BUCKETS_NS.len() + 1],
    skew_count: u64,
    skew_sum_ns: u128,
    /// Last activity (a counter of events, for dropping the idlest).
    active: u64,
}

/// The NCCL series of the daemon.
#[derive(Clone, Debug, Default)]
pub(super) struct NcclMetrics {
    comms: BTreeMap<u64, CommSeries>,
    tick: u64,
}

impl NcclMetrics {
    fn comm(&mut self, comm_id: u64, nranks: u32) -> &mut CommSeries {
        self.tick += 1;
        if !self.comms.contains_key(&comm_id) && self.comms.len() >= MAX_COMMS {
            if let Some(idle) = self
                .comms
                .iter()
                .min_by_key(|(_, c)| c.active)
                .map(|(k, _)| *k)
            {
                self.comms.remove(&idle);
            }
        }
        let c = self.comms.entry(comm_id).or_default();
        c.nranks = nranks;
        c.active = self.tick;
        c
    }

    /// A successful call with its communicator identified.
    pub(super) fn record(&mut self, call: &Call) {
        let Args::Nccl(n) = &call.args else { return };
        let (Some(id), Some(rank), Some(nranks)) = (n.ident.comm_id, n.ident.rank, n.ident.nranks)
        else {
            return;
        };
        let Some(func) = n.op.func().and_then(|f| Func::ALL.get(f as usize).copied()) else {
            return;
        };
        let c = self.comm(id, nranks);
        if rank >= nranks || (c.ranks.len() >= MAX_RANKS && !c.ranks.contains_key(&rank)) {
            return;
        }
        let r = c.ranks.entry(rank).or_default();
        r.pid = call.pid;
        r.collectives[func.index()] += 1;
        if let Some(seq) = n.ident.seq {
            let last = &mut r.last_seq[func.index()];
            *last = Some(last.map_or(seq, |s| s.max(seq)));
        }
    }

    pub(super) fn collective(&mut self, c: &Collective) {
        let s = self.comm(c.comm_id, c.nranks);
        let i = BUCKETS_NS.partition_point(|b| *b < c.skew_ns);
        s.skew[i] += 1;
        s.skew_count += 1;
        s.skew_sum_ns += u128::from(c.skew_ns);
        if c.nranks > 1 {
            let r = s.ranks.entry(c.last_rank).or_default();
            r.pid = c.last_pid;
            r.times_last += 1;
            let entry = c.first_ns + c.skew_ns;
            r.delay.add(entry - c.delay_ns, entry);
        }
    }

    pub(super) fn stall(&mut self, stall: &NcclStall) {
        match stall {
            NcclStall::Collective { stall: s, .. } => {
                let c = self.comm(s.comm_id, s.nranks);
                let (rank, pid) = s.missing;
                let r = c.ranks.entry(rank).or_default();
                if let Some(pid) = pid {
                    r.pid = pid;
                }
                // Said again when its process exited: the same stall.
                if r.stall != Some((s.func, s.seq)) {
                    r.stalls += 1;
                }
                r.stall = Some((s.func, s.seq));
                r.stalled_since = Some(s.first_ns);
                if s.exited.is_some() {
                    r.exited = s.exited;
                }
            }
            NcclStall::Stuck(call) => {
                if let (Some(id), Some(rank), Some(nranks)) =
                    (call.ident.comm_id, call.ident.rank, call.ident.nranks)
                {
                    self.comm(id, nranks)
                        .ranks
                        .entry(rank)
                        .or_default()
                        .stuck_calls += 1;
                }
            }
        }
    }

    pub(super) fn stall_over(&mut self, e: &StallEnded) {
        let Some(c) = self.comms.get_mut(&e.comm_id) else {
            return;
        };
        for (rank, r) in c.ranks.iter_mut() {
            if (e.rank == u32::MAX || e.rank == *rank) && r.stall == Some((e.func, e.seq)) {
                r.stall = None;
                r.stalled_since = None;
            }
        }
    }

    /// The NCCL families; `now_ns`: the wall clock (Unix ns), for how long
    /// a stall has lasted.
    pub(super) fn render(&self, o: &mut String, now_ns: u64) {
        self.render_ranks(o);
        self.render_skew(o);
        self.render_per_rank(o, now_ns);
        self.render_exited(o);
    }

    /// Ranks whose process exited while the others waited for them.
    fn render_exited(&self, o: &mut String) {
        header(
            o,
            "gputrace_nccl_rank_exited",
            "gauge",
            "Unix time (seconds) at which the process of a rank the others were waiting for (a stall) was found exited; how: the signal that killed it, its exit status, or unknown.",
        );
        for (id, c) in &self.comms {
            for (rank, r) in &c.ranks {
                if let Some(e) = r.exited {
                    let how = e.how.map_or("unknown".into(), ExitHow::describe);
                    let _ = writeln!(
                        o,
                        "gputrace_nccl_rank_exited{{{},how=\"{how}\"}} {}",
                        labels(*id, c, *rank),
                        seconds(u128::from(e.at_ns))
                    );
                }
            }
        }
    }

    /// Each rank: who it is, its collectives, its last sequence numbers.
    fn render_ranks(&self, o: &mut String) {
        header(
            o,
            "gputrace_nccl_rank_info",
            "gauge",
            "1 per rank of a communicator traced here, with its process.",
        );
        for (id, c) in &self.comms {
            for (rank, r) in c.ranks.iter().filter(|(_, r)| r.pid != 0) {
                let _ = writeln!(
                    o,
                    "gputrace_nccl_rank_info{{{},pid=\"{}\"}} 1",
                    labels(*id, c, *rank),
                    r.pid
                );
            }
        }
        header(
            o,
            "gputrace_nccl_collectives_total",
            "counter",
            "Collectives a rank entered (successful calls), by communicator, rank and operation.",
        );
        for (id, c) in &self.comms {
            for (rank, r) in &c.ranks {
                for f in Func::ALL.iter().filter(|f| r.collectives[f.index()] > 0) {
                    let _ = writeln!(
                        o,
                        "gputrace_nccl_collectives_total{{{},op=\"{}\"}} {}",
                        labels(*id, c, *rank),
                        f.name(),
                        r.collectives[f.index()]
                    );
                }
            }
        }
        header(
            o,
            "gputrace_nccl_last_seq",
            "gauge",
            "The sequence number (NCCL's seqNumber) of the last collective a rank entered, by operation: a rank behind the others of its communicator lags.",
        );
        for (id, c) in &self.comms {
            for (rank, r) in &c.ranks {
                for f in Func::ALL {
                    if let Some(seq) = r.last_seq[f.index()] {
                        let _ = writeln!(
                            o,
                            "gputrace_nccl_last_seq{{{},op=\"{}\"}} {seq}",
                            labels(*id, c, *rank),
                            f.name()
                        );
                    }
                }
            }
        }
    }

    /// The arrival skew of each communicator's collectives.
    fn render_skew(&self, o: &mut String) {
        header(
            o,
            "gputrace_nccl_arrival_skew_seconds",
            "histogram",
            "Per collective every traced rank entered: last entry minus first.",
        );
        for (id, c) in self.comms.iter().filter(|(_, c)| c.skew_count > 0) {
            let l = format!(
                "comm_id=\"{}\",nranks=\"{}\"",
                format_comm_id(*id),
                c.nranks
            );
            let mut cumulative = 0;
            for (i, bound) in BUCKETS_NS.iter().enumerate() {
                cumulative += c.skew[i];
                let _ = writeln!(
                    o,
                    "gputrace_nccl_arrival_skew_seconds_bucket{{{l},le=\"{}\"}} {cumulative}",
                    seconds(u128::from(*bound))
                );
            }
            let _ = writeln!(
                o,
                "gputrace_nccl_arrival_skew_seconds_bucket{{{l},le=\"+Inf\"}} {}",
                c.skew_count
            );
            let _ = writeln!(
                o,
                "gputrace_nccl_arrival_skew_seconds_sum{{{l}}} {}",
                seconds(c.skew_sum_ns)
            );
            let _ = writeln!(
                o,
                "gputrace_nccl_arrival_skew_seconds_count{{{l}}} {}",
                c.skew_count
            );
        }
    }

    /// Who came last, the delay it caused, stalls, stuck calls: per rank.
    fn render_per_rank(&self, o: &mut String, now_ns: u64) {
        type Value = fn(&RankSeries, u64) -> String;
        let per_rank: [(&str, &str, &str, Value); 5] = [
            (
                "gputrace_nccl_last_arrivals_total",
                "counter",
                "Collectives this rank entered last (the others waited for it).",
                |r, _| r.times_last.to_string(),
            ),
            (
                "gputrace_nccl_delay_caused_seconds_total",
                "counter",
                "Time the other ranks waited for this rank when it came last (from the entry of the rank before it to its own), collectives that overlap in time counted once: comparable with wall time.",
                |r, _| seconds(u128::from(r.delay.total_ns())),
            ),
            (
                "gputrace_nccl_stalls_total",
                "counter",
                "Collectives reported stalled (--nccl-stall) with this rank missing.",
                |r, _| r.stalls.to_string(),
            ),
            (
                "gputrace_nccl_stalled_seconds",
                "gauge",
                "How long other ranks have been waiting for this rank in a collective it has not entered (0: none).",
                |r, now| seconds(u128::from(r.stalled_since.map_or(0, |t| now.saturating_sub(t)))),
            ),
            (
                "gputrace_nccl_stuck_calls_total",
                "counter",
                "NCCL calls this rank stayed inside longer than --nccl-stall.",
                |r, _| r.stuck_calls.to_string(),
            ),
        ];
        for (name, kind, help, value) in per_rank {
            header(o, name, kind, help);
            for (id, c) in &self.comms {
                for (rank, r) in &c.ranks {
                    let _ = writeln!(
                        o,
                        "{name}{{{}}} {}",
                        labels(*id, c, *rank),
                        value(r, now_ns)
                    );
                }
            }
        }
    }
}

/// The labels of one rank of a communicator.
fn labels(id: u64, c: &CommSeries, rank: u32) -> String {
    format!(
        "comm_id=\"{}\",rank=\"{rank}\",nranks=\"{}\"",
        format_comm_id(id),
        c.nranks
    )
}

fn header(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}
