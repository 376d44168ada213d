//! Cross-rank analysis: the ranks' entries into one collective, matched by
//! (communicator id, function, sequence number), give its arrival skew
//! (last entry minus first) and the rank that came last, with the delay it
//! caused (its entry minus the entry before it). A collective some ranks
//! entered and another has not, for longer than a threshold, is a stall.
//!
//! Plain data in, plain data out: the session feeds arrivals and a clock;
//! nothing here reads probes or writes output.

use crate::model::capped::Overflow;
use crate::model::nccl::Arrival;
use crate::model::nccl::Collective;
use crate::model::nccl::CommStats;
use crate::model::nccl::Func;
use crate::model::nccl::Stall;
use crate::model::nccl::StallEnded;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Collectives waiting for ranks, per communicator, before the oldest is
/// dropped as incomplete.
pub(crate) const MAX_PENDING: usize = 4096;
/// Communicators tracked at once; the least recently active is dropped.
pub(crate) const MAX_COMMS: usize = 256;
/// Ranks tracked per communicator (those of one host: a few); entries of
/// others are counted, not compared.
pub(crate) const MAX_RANKS: usize = 4096;

#[derive(Clone, Debug)]
struct Pending {
    nranks: u32,
    /// (rank, pid, entry) in arrival order.
    entries: Vec<(u32, u32, u64)>,
    first_ns: u64,
    stalled: bool,
}

type Key = (u64, Func, u64);

/// The analysis over every traced rank.
#[derive(Clone, Debug, Default)]
pub struct CrossRank {
    pending: BTreeMap<Key, Pending>,
    comms: HashMap<u64, CommStats>,
    /// Last arrival per communicator (for dropping the idlest).
    active_ns: HashMap<u64, u64>,
    /// Stalls that ended since the last [`CrossRank::check_stalls`].
    ended: Vec<StallEnded>,
    /// The latest arrival's entry (for communicators seen before any).
    last_ns: u64,
    /// Communicators dropped past [`MAX_COMMS`] (distinct ids), and the
    /// collectives complete on them when they were.
    pub dropped: Overflow,
    /// Entries of ranks past [`MAX_RANKS`] of their communicator.
    pub ranks_over: u64,
}

impl CrossRank {
    pub fn new() -> Self {
        Self::default()
    }

    /// A rank's process is known (from an init or a first call) before it
    /// enters anything: a stall can then name it.
    pub fn rank_seen(&mut self, comm_id: u64, nranks: u32, rank: u32, pid: u32) {
        if rank >= nranks {
            return;
        }
        self.comm(comm_id, nranks);
        if !self.rank_room(comm_id, rank) {
            return;
        }
        if let Some(c) = self.comms.get_mut(&comm_id) {
            c.ranks.entry(rank).or_default().pid = pid;
        }
    }

    /// Whether `rank` of the communicator is (or may be) tracked; counted
    /// when not.
    fn rank_room(&mut self, comm_id: u64, rank: u32) -> bool {
        let room = self
            .comms
            .get(&comm_id)
            .is_none_or(|c| c.ranks.len() < MAX_RANKS || c.ranks.contains_key(&rank));
        self.ranks_over += u64::from(!room);
        room
    }

    /// A communicator's stats, made (within the bound) when new.
    fn comm(&mut self, comm_id: u64, nranks: u32) -> &mut CommStats {
        if !self.active_ns.contains_key(&comm_id) {
            self.active_ns.insert(comm_id, self.last_ns);
            self.bound_comms(comm_id);
        }
        let c = self.comms.entry(comm_id).or_default();
        c.nranks = nranks;
        c
    }

    /// Records an entry; returns the collective when this was the last rank.
    pub fn arrive(&mut self, a: Arrival) -> Option<Collective> {
        if a.rank >= a.nranks {
            return None;
        }
        self.last_ns = self.last_ns.max(a.entry_ns);
        self.comm(a.comm_id, a.nranks);
        self.active_ns.insert(a.comm_id, a.entry_ns);
        if !self.rank_room(a.comm_id, a.rank) {
            return None;
        }
        let c = self.comms.get_mut(&a.comm_id)?;
        let r = c.ranks.entry(a.rank).or_default();
        r.pid = a.pid;
        let key = (a.comm_id, a.func, a.seq);
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            nranks: a.nranks,
            entries: Vec::new(),
            first_ns: a.entry_ns,
            stalled: false,
        });
        if p.entries.iter().any(|e| e.0 == a.rank) {
            // The same rank again: an in-flight entry seen before its
            // return, or sequences that disagree. Only the latter counts.
            if !p.entries.iter().any(|e| e.0 == a.rank && e.2 == a.entry_ns) {
                self.comms.get_mut(&a.comm_id)?.conflicts += 1;
            }
            return None;
        }
        p.entries.push((a.rank, a.pid, a.entry_ns));
        p.first_ns = p.first_ns.min(a.entry_ns);
        let complete = p.entries.len() as u32 >= p.nranks;
        let c = self.comms.get_mut(&a.comm_id)?;
        let r = c.ranks.entry(a.rank).or_default();
        r.collectives += 1;
        let last = &mut r.last_seq[a.func.index()];
        *last = Some(last.map_or(a.seq, |s| s.max(a.seq)));
        let first = &mut r.first_seq[a.func.index()];
        let new_first = first.is_none_or(|s| a.seq < s);
        if new_first {
            *first = Some(a.seq);
        }
        if complete {
            let p = self.pending.remove(&key)?;
            return Some(self.finish(key, p));
        }
        if new_first {
            // Collectives below this rank's first traced one that wait for
            // it were entered by it before it was traced.
            let older: Vec<Key> = self
                .pending
                .range((a.comm_id, a.func, 0)..(a.comm_id, a.func, a.seq))
                .map(|(k, _)| *k)
                .collect();
            for k in older {
                self.settle(k, a.entry_ns);
            }
        }
        self.settle(key, a.entry_ns);
        self.bound_pending(a.comm_id);
        None
    }

    /// Whether a rank missing from a pending collective entered it before
    /// it was traced (the collective is below its first traced one), and
    /// whether every missing rank did (nothing more can come).
    fn before_trace(&self, (comm_id, func, seq): Key, p: &Pending) -> (bool, bool) {
        let Some(c) = self.comms.get(&comm_id) else {
            return (false, false);
        };
        let (mut any, mut all) = (false, true);
        for rank in (0..p.nranks).filter(|r| !p.entries.iter().any(|e| e.0 == *r)) {
            let before = c
                .ranks
                .get(&rank)
                .and_then(|r| r.first_seq[func.index()])
                .is_some_and(|first| seq < first);
            any |= before;
            all &= before;
        }
        (any, all)
    }

    /// Drops a pending collective that every missing rank entered before
    /// it was traced: counted apart, and a stall reported on it ends.
    fn settle(&mut self, key: Key, now_ns: u64) {
        let Some(p) = self.pending.get(&key) else {
            return;
        };
        if self.before_trace(key, p) != (true, true) {
            return;
        }
        let Some(p) = self.pending.remove(&key) else {
            return;
        };
        if p.stalled {
            self.ended.push(StallEnded {
                comm_id: key.0,
                func: key.1,
                seq: key.2,
                waited_ns: now_ns.saturating_sub(p.first_ns),
            });
        }
        if let Some(c) = self.comms.get_mut(&key.0) {
            c.before_trace += 1;
        }
    }

    fn finish(&mut self, (comm_id, func, seq): Key, p: Pending) -> Collective {
        let mut e = p.entries;
        e.sort_by_key(|&(rank, _, t)| (t, rank));
        let (first, last) = (e[0], e[e.len() - 1]);
        let before = if e.len() > 1 {
            e[e.len() - 2].2
        } else {
            last.2
        };
        let done = Collective {
            comm_id,
            nranks: p.nranks,
            func,
            seq,
            first_ns: first.2,
            skew_ns: last.2 - first.2,
            last_rank: last.0,
            last_pid: last.1,
            delay_ns: last.2 - before,
        };
        if p.stalled {
            self.ended.push(StallEnded {
                comm_id,
                func,
                seq,
                waited_ns: done.skew_ns,
            });
        }
        if let Some(c) = self.comms.get_mut(&comm_id) {
            c.complete += 1;
            c.skew_ns_total += done.skew_ns;
            c.skew_ns_max = c.skew_ns_max.max(done.skew_ns);
            if p.nranks > 1 {
                let r = c.ranks.entry(done.last_rank).or_default();
                r.times_last += 1;
                r.delay_ns_total += done.delay_ns;
            }
        }
        done
    }

    /// Drops the oldest pending collectives of a communicator past the bound.
    fn bound_pending(&mut self, comm_id: u64) {
        let keys: Vec<Key> = self
            .pending
            .range((comm_id, Func::Broadcast, 0)..=(comm_id, Func::AllReduce, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        if keys.len() <= MAX_PENDING {
            return;
        }
        let mut by_age: Vec<(u64, Key)> = keys
            .iter()
            .map(|k| (self.pending[k].first_ns, *k))
            .collect();
        by_age.sort();
        for (_, k) in &by_age[..keys.len() - MAX_PENDING] {
            let Some(p) = self.pending.remove(k) else {
                continue;
            };
            let before = self.before_trace(*k, &p).0;
            if let Some(c) = self.comms.get_mut(&comm_id) {
                if before {
                    c.before_trace += 1;
                } else {
                    c.incomplete += 1;
                }
            }
        }
    }

    /// Drops the least recently active communicators (not `keep`, just
    /// made) past the bound, counted.
    fn bound_comms(&mut self, keep: u64) {
        while self.active_ns.len() > MAX_COMMS {
            let Some((&idle, _)) = self
                .active_ns
                .iter()
                .filter(|(id, _)| **id != keep)
                .min_by_key(|(id, t)| (**t, **id))
            else {
                return;
            };
            let complete = self.comms.get(&idle).map_or(0, |c| c.complete);
            self.dropped.add_n(&idle, complete);
            self.forget(idle);
        }
    }

    /// Forgets a communicator (destroyed everywhere, or dropped).
    pub fn forget(&mut self, comm_id: u64) {
        self.active_ns.remove(&comm_id);
        self.comms.remove(&comm_id);
        let keys: Vec<Key> = self
            .pending
            .range((comm_id, Func::Broadcast, 0)..=(comm_id, Func::AllReduce, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.pending.remove(&k);
        }
    }

    /// Collectives entered by some ranks and not by others for longer than
    /// `threshold_ns` at `now_ns`, reported once each; also updates each
    /// missing rank's stalled time. Returns the new stalls and those that
    /// ended since the last check.
    pub fn check_stalls(
        &mut self,
        now_ns: u64,
        threshold_ns: u64,
    ) -> (Vec<Stall>, Vec<StallEnded>) {
        for c in self.comms.values_mut() {
            for r in c.ranks.values_mut() {
                r.stalled_ns = 0;
            }
        }
        // A collective a missing rank entered before it was traced cannot
        // complete here: not a stall (the others are past it).
        let unseen: HashSet<Key> = self
            .pending
            .iter()
            .filter(|(k, p)| self.before_trace(**k, p).0)
            .map(|(k, _)| *k)
            .collect();
        let mut new = Vec::new();
        for (&(comm_id, func, seq), p) in self.pending.iter_mut() {
            let waited = now_ns.saturating_sub(p.first_ns);
            if waited < threshold_ns || unseen.contains(&(comm_id, func, seq)) {
                continue;
            }
            let Some(c) = self.comms.get_mut(&comm_id) else {
                continue;
            };
            let missing: Vec<(u32, Option<u32>)> = (0..p.nranks)
                .filter(|r| !p.entries.iter().any(|e| e.0 == *r))
                .map(|r| (r, c.ranks.get(&r).map(|s| s.pid).filter(|&pid| pid != 0)))
                .collect();
            for (r, _) in &missing {
                if let Some(s) = c.ranks.get_mut(r) {
                    s.stalled_ns = s.stalled_ns.max(waited);
                    if !p.stalled {
                        s.stalls += 1;
                    }
                }
            }
            if !p.stalled {
                p.stalled = true;
                let mut waiting: Vec<(u32, u32)> = p.entries.iter().map(|e| (e.0, e.1)).collect();
                waiting.sort();
                new.push(Stall {
                    comm_id,
                    nranks: p.nranks,
                    func,
                    seq,
                    waiting,
                    missing,
                    first_ns: p.first_ns,
                    waited_ns: waited,
                });
            }
        }
        (new, std::mem::take(&mut self.ended))
    }

    /// Collectives of a communicator still waiting for ranks: those that
    /// may yet complete, and those some rank entered before it was traced.
    pub fn pending_of(&self, comm_id: u64) -> (u64, u64) {
        let (mut open, mut before) = (0, 0);
        for (k, p) in self
            .pending
            .range((comm_id, Func::Broadcast, 0)..=(comm_id, Func::AllReduce, u64::MAX))
        {
            if self.before_trace(*k, p).0 {
                before += 1;
            } else {
                open += 1;
            }
        }
        (open, before)
    }

    /// The collectives reported as stalled and still waiting.
    pub fn stalled_keys(&self) -> impl Iterator<Item = (u64, Func, u64)> + '_ {
        self.pending
            .iter()
            .filter(|(_, p)| p.stalled)
            .map(|(k, _)| *k)
    }

    /// The communicators, by id.
    pub fn comms(&self) -> BTreeMap<u64, &CommStats> {
        self.comms.iter().map(|(k, v)| (*k, v)).collect()
    }
}

#[cfg(test)]
#[path = "ranks_tests.rs"]
mod tests;
