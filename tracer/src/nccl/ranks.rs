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
use crate::model::nccl::Exit;
use crate::model::nccl::Func;
use crate::model::nccl::Stall;
use crate::model::nccl::StallEnded;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

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
}

type Key = (u64, Func, u64);

/// A stall said: a missing rank and the collectives it holds up.
#[derive(Clone, Debug)]
struct OpenStall {
    /// The oldest (the one said).
    func: Func,
    seq: u64,
    seq_last: u64,
    first_ns: u64,
    /// Pending collectives it holds up; the stall ends when none is left.
    keys: BTreeSet<Key>,
    /// Collectives it held up, ever.
    collectives: u64,
    /// Whether its rank's exit was said.
    exit_said: bool,
}

/// The analysis over every traced rank.
#[derive(Clone, Debug, Default)]
pub struct CrossRank {
    pending: BTreeMap<Key, Pending>,
    comms: HashMap<u64, CommStats>,
    /// Last arrival per communicator (for dropping the idlest).
    active_ns: HashMap<u64, u64>,
    /// Collectives completed lately (oldest first): an entry of one read
    /// again (a waiting rank's in-flight entry read as its return is
    /// processed) is not a new collective.
    recent: (HashSet<Key>, VecDeque<Key>),
    /// Stalls said and not over, per (communicator, missing rank).
    stalls: BTreeMap<(u64, u32), OpenStall>,
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
        if self.recent.0.contains(&key) {
            return None;
        }
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            nranks: a.nranks,
            entries: Vec::new(),
            first_ns: a.entry_ns,
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
        self.release(key, Some(a.rank), a.entry_ns);
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
            self.recent.0.insert(key);
            self.recent.1.push_back(key);
            if self.recent.1.len() > MAX_PENDING {
                if let Some(old) = self.recent.1.pop_front() {
                    self.recent.0.remove(&old);
                }
            }
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
        if self.pending.remove(&key).is_none() {
            return;
        }
        self.release(key, None, now_ns);
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
        if let Some(c) = self.comms.get_mut(&comm_id) {
            c.complete += 1;
            c.skew_ns_total += done.skew_ns;
            c.skew_ns_max = c.skew_ns_max.max(done.skew_ns);
            if p.nranks > 1 {
                let r = c.ranks.entry(done.last_rank).or_default();
                r.times_last += 1;
                r.delay.add(before, last.2);
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
            let last = p.entries.iter().map(|e| e.2).max().unwrap_or(p.first_ns);
            self.release(*k, None, last);
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
        self.stalls.retain(|(c, _), _| *c != comm_id);
        self.recent.0.retain(|k| k.0 != comm_id);
        self.recent.1.retain(|k| k.0 != comm_id);
    }

    /// A collective no longer waits for `rank` (it entered it), or for
    /// anyone (`None`: complete or dropped): the stalls holding it up let
    /// it go, and those left with nothing end.
    fn release(&mut self, key: Key, rank: Option<u32>, now_ns: u64) {
        let range = match rank {
            Some(r) => (key.0, r)..=(key.0, r),
            None => (key.0, 0)..=(key.0, u32::MAX),
        };
        let mut over = Vec::new();
        for (&(comm_id, r), s) in self.stalls.range_mut(range) {
            if s.keys.remove(&key) && s.keys.is_empty() {
                over.push((comm_id, r));
            }
        }
        for k in over {
            let Some(s) = self.stalls.remove(&k) else {
                continue;
            };
            self.ended.push(StallEnded {
                comm_id: k.0,
                rank: k.1,
                func: s.func,
                seq: s.seq,
                seq_last: s.seq_last,
                collectives: s.collectives,
                waited_ns: now_ns.saturating_sub(s.first_ns),
            });
        }
    }

    /// A traced process exited: the ranks it was are marked, and stalls
    /// waiting for them say so at the next check.
    pub fn process_exited(&mut self, pid: u32, exit: Exit) {
        for c in self.comms.values_mut() {
            for r in c.ranks.values_mut().filter(|r| r.pid == pid) {
                r.exited.get_or_insert(exit);
            }
        }
    }

    /// Ranks missing from collectives that others entered longer than
    /// `threshold_ns` ago at `now_ns`: one stall per (communicator, missing
    /// rank), said once with the collectives it holds up (later ones join
    /// it unsaid), and said again once when its process is found exited;
    /// also updates each missing rank's stalled time. Returns the stalls to
    /// say and those that ended since the last check.
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
        // Per (communicator, missing rank): the collectives waiting for it,
        // oldest first. One a missing rank entered before it was traced
        // cannot complete here: not a stall (the others are past it).
        let mut held: BTreeMap<(u64, u32), Vec<(u64, Key)>> = BTreeMap::new();
        for (k, p) in &self.pending {
            if self.before_trace(*k, p).0 {
                continue;
            }
            for r in (0..p.nranks).filter(|r| !p.entries.iter().any(|e| e.0 == *r)) {
                held.entry((k.0, r)).or_default().push((p.first_ns, *k));
            }
        }
        let mut new = Vec::new();
        for ((comm_id, rank), mut keys) in held {
            keys.sort();
            let (first_ns, oldest) = keys[0];
            let waited = now_ns.saturating_sub(first_ns);
            let Some(c) = self.comms.get_mut(&comm_id) else {
                continue;
            };
            let r = c.ranks.entry(rank).or_default();
            let open = self.stalls.contains_key(&(comm_id, rank));
            if !open && waited < threshold_ns {
                continue;
            }
            r.stalled_ns = waited;
            let (pid, exited) = (Some(r.pid).filter(|&p| p != 0), r.exited);
            if !open {
                r.stalls += 1;
            }
            let s = self.stalls.entry((comm_id, rank)).or_insert(OpenStall {
                func: oldest.1,
                seq: oldest.2,
                seq_last: oldest.2,
                first_ns,
                keys: BTreeSet::new(),
                collectives: 0,
                exit_said: false,
            });
            for (_, k) in &keys {
                if s.keys.insert(*k) {
                    s.collectives += 1;
                    if k.1 == s.func {
                        s.seq_last = s.seq_last.max(k.2);
                    }
                }
            }
            if open && (s.exit_said || exited.is_none()) {
                continue;
            }
            s.exit_said = exited.is_some();
            let waiting = self
                .pending
                .get(&(comm_id, s.func, s.seq))
                .map(|p| {
                    let mut w: Vec<(u32, u32)> = p.entries.iter().map(|e| (e.0, e.1)).collect();
                    w.sort();
                    w
                })
                .unwrap_or_default();
            // Said again for the exit only while someone still waits.
            let gone = |w: &(u32, u32)| c.ranks.get(&w.0).is_some_and(|r| r.exited.is_some());
            if open && waiting.iter().all(gone) {
                continue;
            }
            new.push(Stall {
                comm_id,
                nranks: c.nranks,
                func: s.func,
                seq: s.seq,
                seq_last: s.seq_last,
                collectives: s.collectives,
                waiting,
                missing: (rank, pid),
                exited,
                first_ns: s.first_ns,
                waited_ns: now_ns.saturating_sub(s.first_ns),
            });
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

    /// The collectives held up by a stall said and not over.
    pub fn stalled_keys(&self) -> impl Iterator<Item = (u64, Func, u64)> + '_ {
        self.stalls.values().flat_map(|s| s.keys.iter().copied())
    }

    /// The communicators, by id.
    pub fn comms(&self) -> BTreeMap<u64, &CommStats> {
        self.comms.iter().map(|(k, v)| (*k, v)).collect()
    }
}

#[cfg(test)]
#[path = "ranks_tests.rs"]
mod tests;
