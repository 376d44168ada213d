//! The summary across ranks: the collectives of every traced process
//! matched by (communicator id, function, sequence number), per
//! communicator the arrival skew and per rank how often it came last and
//! the delay it caused; the stalls said during the trace; and where
//! alignment could not be established, why. Computed from the calls
//! themselves, so `gputrace stats` gives the same from a timeline.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::capped::Overflow;
use crate::model::nccl::NcclStall;
use crate::model::nccl::StallEnded;
use crate::model::nccl::Unaligned;
use crate::nccl::enrich::arrival;
use crate::nccl::hash::format_comm_id;
use crate::nccl::ranks::CrossRank;
use crate::nccl::ranks::MAX_COMMS;
use crate::nccl::ranks::MAX_RANKS;
use crate::units::fmt_count;
use crate::units::fmt_ns;

/// `ncclRemoteError`: a peer failed while this rank was in the collective
/// (it did enter it).
const NCCL_REMOTE_ERROR: i64 = 6;

/// Why collectives of one communicator in one process have no sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnalignedComm {
    pub comm_id: Option<u64>,
    pub reason: Unaligned,
    pub collectives: u64,
}

/// Stalls kept for the summary (the first ones); later ones are counted.
pub(crate) const MAX_STALLS: usize = 1024;
/// (process, communicator) rows of collectives not aligned, at most; the
/// collectives of others are counted.
pub(crate) const MAX_UNALIGNED: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct NcclSummary {
    pub cross: CrossRank,
    /// Stalls said during the trace, each with how long it lasted when it
    /// ended (`None`: it had not ended).
    pub stalls: Vec<(NcclStall, Option<u64>)>,
    /// Stalls said past [`MAX_STALLS`], not kept.
    pub stalls_over: u64,
    /// (pid, `ncclComm_t`) → collectives without a sequence number.
    pub unaligned: BTreeMap<(u32, u64), UnalignedComm>,
    /// (pid, `ncclComm_t`) past [`MAX_UNALIGNED`] and their collectives.
    pub unaligned_over: Overflow,
}

impl NcclSummary {
    pub fn record(&mut self, c: &Call) {
        let Args::Nccl(n) = &c.args else { return };
        if c.ret.is_some_and(|r| r != 0 && r != NCCL_REMOTE_ERROR) {
            return;
        }
        if let Some(why) = n.unaligned {
            let key = (c.pid, n.comm);
            if self.unaligned.len() >= MAX_UNALIGNED && !self.unaligned.contains_key(&key) {
                self.unaligned_over.add(&key);
                return;
            }
            let u = self.unaligned.entry(key).or_insert(UnalignedComm {
                comm_id: n.ident.comm_id,
                reason: why,
                collectives: 0,
            });
            u.collectives += 1;
            u.reason = why;
            return;
        }
        if let Some(a) = arrival(c.pid, c.ts_ns, n) {
            self.cross.arrive(a);
        }
    }

    /// A stall said, or said again (its rank's process exited): then it
    /// replaces the first saying.
    pub fn stall(&mut self, s: &NcclStall) {
        if let NcclStall::Collective { stall: new, .. } = s {
            let again = self.stalls.iter_mut().rev().find(|(old, over)| {
                over.is_none()
                    && matches!(old, NcclStall::Collective { stall, .. }
                        if (stall.comm_id, stall.missing.0, stall.func, stall.seq)
                            == (new.comm_id, new.missing.0, new.func, new.seq))
            });
            if let Some((old, _)) = again {
                *old = s.clone();
                return;
            }
        }
        if self.stalls.len() >= MAX_STALLS {
            self.stalls_over += 1;
            return;
        }
        self.stalls.push((s.clone(), None));
    }

    /// A stall is over: how long it lasted, and every collective it held up.
    pub fn stall_over(&mut self, e: &StallEnded) {
        for (s, over) in self.stalls.iter_mut().rev() {
            if let NcclStall::Collective { stall, .. } = s {
                let rank = e.rank == u32::MAX || e.rank == stall.missing.0;
                if rank && (stall.comm_id, stall.func, stall.seq) == (e.comm_id, e.func, e.seq) {
                    *over = Some(e.waited_ns);
                    stall.seq_last = stall.seq_last.max(e.seq_last);
                    stall.collectives = stall.collectives.max(e.collectives);
                    return;
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.cross.comms().is_empty()
            && self.stalls.is_empty()
            && self.unaligned.is_empty()
            && self.cross.dropped.is_empty()
            && self.cross.ranks_over == 0
            && self.unaligned_over.is_empty()
    }

    /// `nccl_other`: what went past the bounds (`null` where nothing did).
    pub fn over_json(&self) -> Value {
        let d = &self.cross.dropped;
        let u = &self.unaligned_over;
        json!({
            "comms_dropped": (!d.is_empty()).then(|| json!({
                "comms": d.keys(), "comms_exact": d.exact(), "collectives_complete": d.entries,
            })),
            "stalls_not_kept": self.stalls_over,
            "rank_entries_not_tracked": self.cross.ranks_over,
            "unaligned_other": (!u.is_empty()).then(|| json!({
                "rows": u.keys(), "rows_exact": u.exact(), "collectives": u.entries,
            })),
        })
    }

    /// The lines saying what went past the bounds.
    fn render_over(&self, out: &mut String) {
        let d = &self.cross.dropped;
        if !d.is_empty() {
            let _ = writeln!(
                out,
                "\nNCCL: {} more communicators (past the {} tracked at once; the least recently active go) are not shown: {} collectives were complete on them",
                d.keys_text(),
                MAX_COMMS,
                fmt_count(d.entries)
            );
        }
        if self.cross.ranks_over > 0 {
            let _ = writeln!(
                out,
                "NCCL: {} entries of ranks past the first {MAX_RANKS} of their communicator were not compared",
                fmt_count(self.cross.ranks_over)
            );
        }
        if self.stalls_over > 0 {
            let _ = writeln!(
                out,
                "NCCL: {} more stalls (past the first {MAX_STALLS}) are not listed",
                fmt_count(self.stalls_over)
            );
        }
        let u = &self.unaligned_over;
        if !u.is_empty() {
            let _ = writeln!(
                out,
                "NCCL: {} more (process, communicator) pairs (past the first {MAX_UNALIGNED}) had {} collectives not matched across ranks",
                u.keys_text(),
                fmt_count(u.entries)
            );
        }
    }

    /// The text section: one block per communicator, then the stalls and
    /// what could not be aligned.
    pub fn render_text(&self, out: &mut String) {
        for (id, c) in self.cross.comms() {
            let _ = writeln!(
                out,
                "\n== NCCL communicator {} ({} ranks, {} traced) ==",
                format_comm_id(id),
                c.nranks,
                c.ranks.values().filter(|r| r.collectives > 0).count()
            );
            let _ = write!(out, "Collectives every rank entered: {}", c.complete);
            match c.skew_ns_avg() {
                Some(avg) => {
                    let _ = writeln!(
                        out,
                        "; arrival skew (last entry - first): avg {}, max {}",
                        fmt_ns(avg as f64),
                        fmt_ns(c.skew_ns_max as f64)
                    );
                }
                None => out.push('\n'),
            }
            let (open, before) = self.cross.pending_of(id);
            let (incomplete, before) = (c.incomplete + open, c.before_trace + before);
            if incomplete > 0 || c.conflicts > 0 {
                let _ = writeln!(
                    out,
                    "Not every rank seen: {incomplete} collectives; sequence conflicts: {}",
                    c.conflicts
                );
            }
            if before > 0 {
                let _ = writeln!(
                    out,
                    "Entered by a rank before it was traced (not compared): {before} collectives"
                );
            }
            let _ = writeln!(
                out,
                " {:>5}  {:>8}  {:>11}  {:>10}  {:>12}",
                "Rank", "PID", "Collectives", "Times last", "Delay caused"
            );
            let _ = writeln!(
                out,
                " {:->5}  {:->8}  {:->11}  {:->10}  {:->12}",
                "", "", "", "", ""
            );
            for (rank, r) in &c.ranks {
                let _ = writeln!(
                    out,
                    " {:>5}  {:>8}  {:>11}  {:>10}  {:>12}",
                    rank,
                    r.pid,
                    r.collectives,
                    r.times_last,
                    fmt_ns(r.delay.total_ns() as f64)
                );
            }
        }
        if !self.stalls.is_empty() {
            let _ = writeln!(out, "\nNCCL stalls:");
            for (s, over) in &self.stalls {
                let line = s.line();
                let line = line.strip_prefix("gputrace: NCCL stall: ").unwrap_or(&line);
                let _ = match over {
                    Some(w) => writeln!(out, " {line} (over after {})", fmt_ns(*w as f64)),
                    None => writeln!(out, " {line}"),
                };
            }
        }
        for ((pid, comm), u) in &self.unaligned {
            let who = u.comm_id.map_or(format!("ncclComm_t {comm:#x}"), |id| {
                format!("communicator {}", format_comm_id(id))
            });
            let _ = writeln!(
                out,
                "NCCL: process {pid}, {who}: {} collectives not matched across ranks: alignment not established ({})",
                u.collectives,
                u.reason.reason()
            );
        }
        self.render_over(out);
    }

    /// `nccl_ranks`: one entry per (communicator, rank).
    pub fn ranks_json(&self) -> Value {
        let mut out = Vec::new();
        for (id, c) in self.cross.comms() {
            for (rank, r) in &c.ranks {
                out.push(json!({
                    "comm_id": format_comm_id(id),
                    "rank": rank,
                    "nranks": c.nranks,
                    "pid": r.pid,
                    "collectives": r.collectives,
                    "times_last": r.times_last,
                    "delay_ns_total": r.delay.total_ns(),
                }));
            }
        }
        Value::Array(out)
    }

    /// `nccl_comms`: per communicator, the skew and what was not matched.
    pub fn comms_json(&self) -> Value {
        let comms = self.cross.comms();
        Value::Array(
            comms
                .iter()
                .map(|(id, c)| {
                    let (open, before) = self.cross.pending_of(*id);
                    json!({
                        "comm_id": format_comm_id(*id),
                        "nranks": c.nranks,
                        "ranks_traced": c.ranks.values().filter(|r| r.collectives > 0).count(),
                        "collectives_complete": c.complete,
                        "collectives_incomplete": c.incomplete + open,
                        "collectives_before_trace": c.before_trace + before,
                        "sequence_conflicts": c.conflicts,
                        "skew_ns_avg": c.skew_ns_avg(),
                        "skew_ns_max": (c.complete > 0).then_some(c.skew_ns_max),
                    })
                })
                .collect(),
        )
    }

    /// `nccl_stalls`: what was said, and how long each lasted.
    pub fn stalls_json(&self) -> Value {
        Value::Array(
            self.stalls
                .iter()
                .map(|(s, over)| {
                    let mut v = crate::nccl::json::stall_json(s);
                    if let Some(m) = v.as_object_mut() {
                        m.remove("type");
                        m.insert("over_after_ns".into(), json!(over));
                    }
                    v
                })
                .collect(),
        )
    }

    /// `nccl_unaligned`: collectives that could not be matched, and why.
    pub fn unaligned_json(&self) -> Value {
        Value::Array(
            self.unaligned
                .iter()
                .map(|((pid, comm), u)| {
                    json!({
                        "pid": pid,
                        "comm": format!("{comm:#x}"),
                        "comm_id": u.comm_id.map(format_comm_id),
                        "collectives": u.collectives,
                        "reason": u.reason.code(),
                    })
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::call::Nccl;
    use crate::model::nccl::StuckCall;
    use crate::model::types::NcclOp;

    fn unaligned_call(pid: u32, comm: u64) -> Call {
        Call {
            ts_ns: 1,
            dur_ns: Some(1),
            pid,
            tid: pid,
            comm: Arc::from("x"),
            api: "ncclAllReduce",
            family: None,
            ret: Some(0),
            stack: None,
            args: Args::Nccl(Nccl {
                op: NcclOp::AllReduce,
                count: 1,
                datatype: 7,
                redop: Some(0),
                root: None,
                peer: None,
                comm,
                stream: 0,
                ident: Default::default(),
                unaligned: Some(Unaligned::NoIdentity),
            }),
        }
    }

    #[test]
    fn unaligned_rows_and_stalls_are_bounded_and_counted() {
        let mut s = NcclSummary::default();
        let extra = 7u64;
        for comm in 0..MAX_UNALIGNED as u64 + extra {
            s.record(&unaligned_call(1, comm));
            s.record(&unaligned_call(1, comm));
        }
        assert_eq!(s.unaligned.len(), MAX_UNALIGNED);
        assert_eq!(s.unaligned_over.keys(), extra);
        assert_eq!(s.unaligned_over.entries, 2 * extra);
        let kept: u64 = s.unaligned.values().map(|u| u.collectives).sum();
        assert_eq!(
            kept + s.unaligned_over.entries,
            2 * (MAX_UNALIGNED as u64 + extra)
        );

        let stuck = NcclStall::Stuck(StuckCall {
            pid: 1,
            tid: 1,
            process: Arc::from("x"),
            api: "ncclAllReduce",
            comm: 1,
            ident: Default::default(),
            unaligned: None,
            entered_ns: 1,
            waited_ns: 1,
            host: Arc::from("h"),
        });
        for _ in 0..MAX_STALLS + 3 {
            s.stall(&stuck);
        }
        assert_eq!(s.stalls.len(), MAX_STALLS);
        assert_eq!(s.stalls_over, 3);
        let mut text = String::new();
        s.render_text(&mut text);
        assert!(
            text.contains("NCCL: 3 more stalls (past the first 1024)"),
            "{text}"
        );
        assert!(
            text.contains(&format!("NCCL: {extra} more (process, communicator) pairs")),
            "{text}"
        );
        let j = s.over_json();
        assert_eq!(j["stalls_not_kept"], 3);
        assert_eq!(j["unaligned_other"]["collectives"], 2 * extra);
        assert!(j["comms_dropped"].is_null());
    }
}
