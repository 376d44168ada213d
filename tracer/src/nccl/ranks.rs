//! Cross-rank analysis: the ranks' entries into one collective, matched by
//! (communicator id, function, sequence number), give its arrival skew
//! (last entry minus first) and the rank that came last, with the delay it
//! caused (its entry minus the entry before it). A collective some ranks
//! entered and another has not, for longer than a threshold, is a stall.
//!
//! Plain data in, plain data out: the session feeds arrivals and a clock;
//! nothing here reads probes or writes output.

use std::collections::{BTreeMap, HashMap};

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

/// A collective that ranks have entered while others have not, for longer
/// than the threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    pub comm_id: u64,
    pub nranks: u32,
    pub func: Func,
    pub seq: u64,
    /// The ranks that have entered it, with their pids.
    pub waiting: Vec<(u32, u32)>,
    /// The ranks that have not: rank and pid, when this tracer has seen a
    /// process of that rank (else the rank is not traced here).
    pub missing: Vec<(u32, Option<u32>)>,
    /// When the first rank entered it (Unix ns).
    pub first_ns: u64,
    /// How long the first rank in has waited (ns).
    pub waited_ns: u64,
}

/// A stall that ended: the missing ranks came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StallEnded {
    pub comm_id: u64,
    pub func: Func,
    pub seq: u64,
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
    /// Sum of the delays it caused when last.
    pub delay_ns_total: u64,
    /// Its last sequence number per function (`None`: none seen).
    pub last_seq: [Option<u64>; 5],
    /// Nanoseconds the others have been waiting for it now (0: not stalled).
    pub stalled_ns: u64,
    /// Stalls in which it was missing.
    pub stalls: u64,
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
}

impl CommStats {
    pub fn skew_ns_avg(&self) -> Option<u64> {
        (self.complete > 0).then(|| self.skew_ns_total / self.complete)
    }
}

/// Collectives waiting for ranks, per communicator, before the oldest is
/// dropped as incomplete.
pub const MAX_PENDING: usize = 4096;
/// Communicators tracked at once; the least recently active is dropped.
pub const MAX_COMMS: usize = 256;

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
}

impl CrossRank {
    pub fn new() -> Self {
        Self::default()
    }

    /// A rank's process is known (from an init or a first call) before it
    /// enters anything: a stall can then name it.
    pub fn rank_seen(&mut self, comm_id: u64, nranks: u32, rank: u32, pid: u32) {
        let c = self.comm(comm_id, nranks);
        c.ranks.entry(rank).or_default().pid = pid;
    }

    fn comm(&mut self, comm_id: u64, nranks: u32) -> &mut CommStats {
        let c = self.comms.entry(comm_id).or_default();
        c.nranks = nranks;
        c
    }

    /// Records an entry; returns the collective when this was the last rank.
    pub fn arrive(&mut self, a: Arrival) -> Option<Collective> {
        if a.rank >= a.nranks {
            return None;
        }
        self.active_ns.insert(a.comm_id, a.entry_ns);
        self.bound_comms();
        let c = self.comm(a.comm_id, a.nranks);
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
        if !complete {
            self.bound_pending(a.comm_id);
            return None;
        }
        let p = self.pending.remove(&key)?;
        Some(self.finish(key, p))
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
            self.pending.remove(k);
            if let Some(c) = self.comms.get_mut(&comm_id) {
                c.incomplete += 1;
            }
        }
    }

    fn bound_comms(&mut self) {
        while self.active_ns.len() > MAX_COMMS {
            let Some((&idle, _)) = self.active_ns.iter().min_by_key(|(_, t)| **t) else {
                return;
            };
            self.forget(idle);
        }
    }

    /// Forgets a communicator (destroyed everywhere, or dropped).
    pub fn forget(&mut self, comm_id: u64) {
        self.active_ns.remove(&comm_id);
        self.comms.remove(&comm_id);
        self.pending.retain(|(c, _, _), _| *c != comm_id);
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
        let mut new = Vec::new();
        for (&(comm_id, func, seq), p) in self.pending.iter_mut() {
            let waited = now_ns.saturating_sub(p.first_ns);
            if waited < threshold_ns {
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

    /// Collectives of a communicator still waiting for ranks.
    pub fn pending_of(&self, comm_id: u64) -> usize {
        self.pending
            .range((comm_id, Func::Broadcast, 0)..=(comm_id, Func::AllReduce, u64::MAX))
            .count()
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
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn arrival(rank: u32, seq: u64, entry_ns: u64) -> Arrival {
        Arrival {
            comm_id: 0xabc,
            nranks: 3,
            rank,
            pid: 100 + rank,
            func: Func::AllReduce,
            seq,
            entry_ns,
        }
    }

    /// Three ranks, rank 2 late by 40 ms on every second collective.
    #[test]
    fn skew_last_rank_and_delay() {
        let mut x = CrossRank::new();
        let mut done = Vec::new();
        for seq in 0..6u64 {
            let t = 1_000 * MS + seq * 100 * MS;
            let late = if seq % 2 == 1 { 40 * MS } else { 0 };
            // Arrival order differs from entry order: the analysis sorts.
            for (rank, at) in [(2, t + 3 * MS + late), (0, t), (1, t + 3 * MS)] {
                if let Some(c) = x.arrive(arrival(rank, seq, at)) {
                    done.push(c);
                }
            }
        }
        assert_eq!(done.len(), 6);
        let odd = &done[1];
        assert_eq!((odd.seq, odd.last_rank, odd.last_pid), (1, 2, 102));
        assert_eq!((odd.skew_ns, odd.delay_ns), (43 * MS, 40 * MS));
        // Even collectives: ranks 1 and 2 tie at +3 ms; the tie goes to the
        // higher rank, whose delay over the one before is 0.
        assert_eq!(
            (done[0].skew_ns, done[0].last_rank, done[0].delay_ns),
            (3 * MS, 2, 0)
        );
        let c = x.comms()[&0xabc];
        assert_eq!((c.complete, c.incomplete, c.conflicts), (6, 0, 0));
        assert_eq!(c.skew_ns_max, 43 * MS);
        assert_eq!(c.skew_ns_avg(), Some((3 * 3 + 43 * 3) * MS / 6));
        let r2 = &c.ranks[&2];
        assert_eq!(
            (r2.collectives, r2.times_last, r2.delay_ns_total),
            (6, 6, 120 * MS)
        );
        assert_eq!(r2.last_seq[Func::AllReduce.index()], Some(5));
        assert_eq!(c.ranks[&0].times_last, 0);
    }

    #[test]
    fn stall_names_the_missing_rank_once_then_ends() {
        let mut x = CrossRank::new();
        x.rank_seen(0xabc, 3, 2, 102);
        let t = 5_000 * MS;
        assert!(x.arrive(arrival(0, 7, t)).is_none());
        assert!(x.arrive(arrival(1, 7, t + 2 * MS)).is_none());
        // Before the threshold: nothing.
        assert_eq!(x.check_stalls(t + 900 * MS, 1_000 * MS), (vec![], vec![]));
        let (new, ended) = x.check_stalls(t + 1_500 * MS, 1_000 * MS);
        assert!(ended.is_empty());
        assert_eq!(
            new,
            vec![Stall {
                comm_id: 0xabc,
                nranks: 3,
                func: Func::AllReduce,
                seq: 7,
                waiting: vec![(0, 100), (1, 101)],
                missing: vec![(2, Some(102))],
                first_ns: t,
                waited_ns: 1_500 * MS,
            }]
        );
        assert_eq!(x.comms()[&0xabc].ranks[&2].stalled_ns, 1_500 * MS);
        // Reported once; the stalled time keeps growing.
        assert!(x.check_stalls(t + 2_500 * MS, 1_000 * MS).0.is_empty());
        assert_eq!(x.comms()[&0xabc].ranks[&2].stalled_ns, 2_500 * MS);
        assert_eq!(x.comms()[&0xabc].ranks[&2].stalls, 1);
        let done = x.arrive(arrival(2, 7, t + 3_000 * MS)).unwrap();
        assert_eq!((done.last_rank, done.delay_ns), (2, 2_998 * MS));
        let (new, ended) = x.check_stalls(t + 3_100 * MS, 1_000 * MS);
        assert!(new.is_empty());
        assert_eq!(
            ended,
            vec![StallEnded {
                comm_id: 0xabc,
                func: Func::AllReduce,
                seq: 7,
                waited_ns: 3_000 * MS
            }]
        );
        assert_eq!(x.comms()[&0xabc].ranks[&2].stalled_ns, 0);
    }

    #[test]
    fn untraced_rank_is_named_without_a_pid() {
        let mut x = CrossRank::new();
        x.arrive(arrival(0, 0, 0));
        let (new, _) = x.check_stalls(10 * MS, MS);
        assert_eq!(new[0].missing, vec![(1, None), (2, None)]);
    }

    #[test]
    fn the_same_entry_twice_is_not_a_conflict() {
        let mut x = CrossRank::new();
        // Seen in flight, then at its return: one entry.
        x.arrive(arrival(0, 3, 50));
        x.arrive(arrival(0, 3, 50));
        assert_eq!(x.comms()[&0xabc].ranks[&0].collectives, 1);
        assert_eq!(x.comms()[&0xabc].conflicts, 0);
        // A different entry with the same (rank, seq): sequences disagree.
        x.arrive(arrival(0, 3, 90));
        assert_eq!(x.comms()[&0xabc].conflicts, 1);
        // Different functions have their own sequences.
        let mut b = arrival(0, 3, 95);
        b.func = Func::Broadcast;
        x.arrive(b);
        assert_eq!(x.comms()[&0xabc].ranks[&0].collectives, 2);
        // A rank outside the communicator is ignored.
        assert!(x.arrive(arrival(5, 0, 1)).is_none());
    }

    #[test]
    fn one_rank_communicators_complete_at_once() {
        let mut x = CrossRank::new();
        let mut a = arrival(0, 0, 10);
        a.nranks = 1;
        let c = x.arrive(a).unwrap();
        assert_eq!((c.skew_ns, c.delay_ns, c.last_rank), (0, 0, 0));
        assert_eq!(x.comms()[&0xabc].ranks[&0].times_last, 0);
    }

    #[test]
    fn pending_and_communicators_are_bounded() {
        let mut x = CrossRank::new();
        for seq in 0..(MAX_PENDING as u64 + 10) {
            x.arrive(arrival(0, seq, seq));
        }
        let c = x.comms()[&0xabc];
        assert_eq!(c.incomplete, 10);
        assert_eq!(x.pending.len(), MAX_PENDING);
        // The oldest were dropped: their ranks arriving now start anew.
        assert!(x.arrive(arrival(1, 0, 1)).is_none());
        for id in 0..(MAX_COMMS as u64 + 5) {
            let mut a = arrival(0, 0, 1_000_000 + id);
            a.comm_id = 0x1000 + id;
            x.arrive(a);
        }
        assert_eq!(x.comms().len(), MAX_COMMS);
        assert!(!x.comms().contains_key(&0xabc), "the idlest was dropped");
    }
}
