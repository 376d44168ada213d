//! Per process: which communicator a `ncclComm_t` is (its id, this
//! process's rank in it, the number of ranks, the CUDA device) and the
//! sequence number of each collective on it, from the calls seen and the
//! communicator's memory read by the probe at each collective's entry.
//!
//! Sequence numbers (what names one collective on every rank): NCCL's own
//! `comm->seqNumber[func]` read at entry (it counts launches, so inside a
//! `ncclGroupStart`/`End` the call's position among the group's calls of
//! the same function on the same communicator is added), or, when the
//! layout gives no counter, the count of collectives since the init was
//! seen. Otherwise the collective has no sequence number: alignment is not
//! established, and the summary says why.

use std::collections::HashMap;

use crate::model::nccl::Func;
use crate::model::nccl::Identity;
use crate::model::nccl::SeqSource;
use crate::model::nccl::Unaligned;
use crate::nccl::hash::comm_hash;
use crate::nccl::hash::own_comm_id;
use crate::nccl::hash::own_split_id;
use crate::nccl::hash::split_hash;
use crate::nccl::hash::NcclVersion;

/// What the probe read from the communicator at the call's entry (`None`
/// where the layout has no offset or the read failed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CommMemory {
    pub hash: Option<u64>,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<u32>,
    /// `seqNumber[func]` of the call's function.
    pub seq: Option<u64>,
}

impl CommMemory {
    /// The reads as they are (before a process's state corrects them):
    /// what a record decoded without enrichment shows.
    pub(crate) fn as_identity(&self) -> Identity {
        Identity {
            comm_id: self.hash.filter(|&h| h != 0),
            rank: self.rank,
            nranks: self.nranks,
            cuda_dev: self.cuda_dev,
            seq: self.seq,
            source: self.seq.map(|_| SeqSource::Counter),
            own_id: false,
        }
    }
}

#[derive(Debug, Default)]
struct CommView {
    id: Option<u64>,
    /// `id` is gputrace's own (see [`own_comm_id`]).
    own_id: bool,
    rank: Option<u32>,
    nranks: Option<u32>,
    cuda_dev: Option<u32>,
    /// Its init was traced: `counts` start from the first collective.
    init_seen: bool,
    /// `id`, `rank`, `nranks` came from a traced init's arguments: memory
    /// reads must agree with them (a split child's computed id is not
    /// checked: memory, when readable, replaces it).
    from_args: bool,
    /// Collectives seen per function.
    counts: [u64; 5],
    /// `ncclCommSplit` calls on it seen since its init.
    splits: i32,
}

/// A thread's group depth, and each (comm, func)'s calls in the group.
type GroupState = (u32, HashMap<(u64, Func), u64>);

/// One process's communicators and its threads' group nesting.
#[derive(Debug)]
pub(crate) struct ProcessComms {
    version: Option<NcclVersion>,
    comms: HashMap<u64, CommView>,
    /// Per thread: group depth and each (comm, func)'s calls in the group.
    groups: HashMap<u32, GroupState>,
    /// Memory reads no longer trusted (they contradicted a traced init).
    distrust: bool,
    /// Set once when `distrust` is decided, for one warning.
    pub mismatch: Option<String>,
}

/// Communicators kept per process; past it the table starts again (their
/// collectives' sequences are then counted from there, or read from
/// memory).
const MAX_COMMS: usize = 4096;
/// Threads inside a group kept per process, and (communicator, function)
/// counts per group; past them the table starts again.
const MAX_GROUPS: usize = 4096;

impl ProcessComms {
    /// `version`: the release of the libnccl the process uses, when known.
    pub(crate) fn new(version: Option<NcclVersion>) -> Self {
        Self {
            version,
            comms: HashMap::new(),
            groups: HashMap::new(),
            distrust: false,
            mismatch: None,
        }
    }

    /// The release, once a call names its library.
    pub(crate) fn set_version(&mut self, version: Option<NcclVersion>) {
        if self.version.is_none() {
            self.version = version;
        }
    }

    /// A communicator's id, when known, and whether it is gputrace's own.
    pub(crate) fn comm_id_of(&self, comm: u64) -> Option<(u64, bool)> {
        self.comms
            .get(&comm)
            .and_then(|v| v.id.map(|id| (id, v.own_id)))
    }

    fn view(&mut self, comm: u64) -> &mut CommView {
        if self.comms.len() >= MAX_COMMS && !self.comms.contains_key(&comm) {
            self.comms.clear();
        }
        self.comms.entry(comm).or_default()
    }

    /// `ncclCommInitRank(Config)`/`InitRankScalable` returned: `id` is the
    /// (first) `ncclUniqueId` the call was given, when the probe copied it.
    /// The id of a communicator made from `id`: its hash as this process's
    /// NCCL release computes it, or, the release unknown, gputrace's own
    /// (`true`).
    pub(crate) fn id_of_unique_id(&self, id: &[u8]) -> (u64, bool) {
        match self.version {
            Some(v) => (comm_hash(v, id), false),
            None => (own_comm_id(id), true),
        }
    }

    pub(crate) fn init(&mut self, comm: u64, nranks: u32, rank: u32, id: Option<&[u8]>) {
        let id = id.map(|bytes| self.id_of_unique_id(bytes));
        *self.view(comm) = CommView {
            id: id.map(|(id, _)| id),
            own_id: id.is_some_and(|(_, own)| own),
            rank: Some(rank),
            nranks: Some(nranks),
            init_seen: true,
            from_args: true,
            ..CommView::default()
        };
    }

    /// `ncclCommInitAll` returned the first of its communicators: rank 0 of
    /// `ndev`; the id is generated inside NCCL (known only from memory).
    pub(crate) fn init_all_first(&mut self, comm: u64, ndev: u32) {
        *self.view(comm) = CommView {
            rank: Some(0),
            nranks: Some(ndev),
            init_seen: true,
            ..CommView::default()
        };
    }

    /// `ncclCommSplit(parent, color, key, &child)` returned `child` (NULL
    /// for a rank that asked for no communicator).
    pub(crate) fn split(&mut self, parent: u64, color: i32, child: u64) {
        let p = self.view(parent);
        let counted = p.init_seen;
        p.splits += 1;
        let (parent_id, parent_own, n) = (p.id, p.own_id, p.splits);
        if child == 0 {
            return;
        }
        let id = match (counted, parent_id, self.version) {
            (true, Some(pid), _) if parent_own => Some(own_split_id(pid, n, color)),
            (true, Some(pid), Some(v)) => split_hash(v, pid, n, color),
            _ => None,
        };
        *self.view(child) = CommView {
            id,
            own_id: parent_own && id.is_some(),
            init_seen: true,
            ..CommView::default()
        };
    }

    /// `ncclCommDestroy`/`ncclCommAbort`.
    pub(crate) fn destroy(&mut self, comm: u64) {
        self.comms.remove(&comm);
    }

    pub(crate) fn group_start(&mut self, tid: u32) {
        if self.groups.len() >= MAX_GROUPS && !self.groups.contains_key(&tid) {
            self.groups.clear();
        }
        self.groups.entry(tid).or_default().0 += 1;
    }

    pub(crate) fn group_end(&mut self, tid: u32) {
        if let Some(g) = self.groups.get_mut(&tid) {
            g.0 = g.0.saturating_sub(1);
            if g.0 == 0 {
                self.groups.remove(&tid);
            }
        }
    }

    /// A collective (`func`) or p2p call (`None`) on `comm` by thread `tid`;
    /// `mem` what the probe read at its entry. Advances the counts.
    pub(crate) fn call(
        &mut self,
        tid: u32,
        comm: u64,
        func: Option<Func>,
        mem: CommMemory,
    ) -> Result<Identity, (Identity, Unaligned)> {
        let ident = self.peek(tid, comm, func, mem);
        if let Some(f) = func {
            if let Some(g) = self.groups.get_mut(&tid) {
                if g.1.len() >= MAX_GROUPS && !g.1.contains_key(&(comm, f)) {
                    g.1.clear();
                }
                *g.1.entry((comm, f)).or_default() += 1;
            }
            if let Some(v) = self.comms.get_mut(&comm) {
                v.counts[f.index()] += 1;
            }
        }
        ident
    }

    /// As [`ProcessComms::call`] without advancing anything: for a call
    /// still in flight, whose return will be fed to `call` later.
    /// The error carries what is known of the identity all the same.
    pub(crate) fn peek(
        &mut self,
        tid: u32,
        comm: u64,
        func: Option<Func>,
        mem: CommMemory,
    ) -> Result<Identity, (Identity, Unaligned)> {
        self.check(comm, &mem);
        let mem = if self.distrust {
            CommMemory::default()
        } else {
            mem
        };
        let distrust = self.distrust;
        let in_group = func.and_then(|f| {
            self.groups
                .get(&tid)
                .map(|g| g.1.get(&(comm, f)).copied().unwrap_or(0))
        });
        let v = self.view(comm);
        // What a traced init gave was checked against memory above; other
        // fields take memory's value when there is one (it is read now).
        let mem_id = mem.hash.filter(|&h| h != 0);
        let id = if v.from_args || v.own_id {
            v.id.or(mem_id)
        } else {
            mem_id.or(v.id)
        };
        let rank = v.rank.or(mem.rank);
        let nranks = v.nranks.or(mem.nranks.filter(|&n| n > 0));
        let cuda_dev = mem.cuda_dev.or(v.cuda_dev);
        (v.id, v.rank, v.nranks, v.cuda_dev) = (id, rank, nranks, cuda_dev);
        let mut ident = Identity {
            comm_id: id,
            rank,
            nranks,
            cuda_dev,
            seq: None,
            source: None,
            own_id: v.own_id,
        };
        let Some(f) = func else { return Ok(ident) };
        let why = |w| {
            if distrust {
                Unaligned::LayoutMismatch
            } else {
                w
            }
        };
        if id.is_none() || rank.is_none() || nranks.is_none() {
            return Err((ident, why(Unaligned::NoIdentity)));
        }
        if let Some(base) = mem.seq {
            ident.seq = Some(base + in_group.unwrap_or(0));
            ident.source = Some(SeqSource::Counter);
        } else if v.init_seen {
            ident.seq = Some(v.counts[f.index()]);
            ident.source = Some(SeqSource::FromInit);
        } else {
            return Err((ident, why(Unaligned::NoCounter)));
        }
        Ok(ident)
    }

    /// Compares what memory says with what a traced init said; one
    /// disagreement turns memory reads off for this process.
    fn check(&mut self, comm: u64, mem: &CommMemory) {
        if self.distrust {
            return;
        }
        let Some(v) = self.comms.get(&comm).filter(|v| v.from_args) else {
            return;
        };
        let differs =
            |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(x), Some(y)) if x != y);
        let what = if !v.own_id && differs(v.id, mem.hash.filter(|&h| h != 0)) {
            "commHash"
        } else if differs(v.rank.map(u64::from), mem.rank.map(u64::from)) {
            "rank"
        } else if differs(v.nranks.map(u64::from), mem.nranks.map(u64::from)) {
            "nRanks"
        } else {
            return;
        };
        self.distrust = true;
        self.mismatch = Some(format!(
            "the communicator {comm:#x}'s {what} read from memory differs from its traced init: \
             memory reads turned off for this process"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: NcclVersion = NcclVersion(2, 28, 9);

    fn id() -> Vec<u8> {
        let mut v = vec![0u8; 128];
        v[..16].copy_from_slice(&[
            0x1e, 0x9f, 0x52, 0x36, 0xcb, 0x5b, 0x63, 0x6d, 0x02, 0x00, 0x8a, 0x75, 0xc0, 0x00,
            0x02, 0x02,
        ]);
        v
    }

    /// Issue 26 item 10: a libnccl of unknown release (no commHash
    /// function) still names its communicators the same on every rank,
    /// with gputrace's own ids, marked; their splits too.
    #[test]
    fn an_unknown_release_gets_own_ids_the_same_on_every_rank() {
        let none = CommMemory::default();
        let ident = |rank| {
            let mut p = ProcessComms::new(None);
            p.init(0x10 + u64::from(rank), 2, rank, Some(&id()));
            let a = p.call(7, 0x10 + u64::from(rank), Some(Func::AllReduce), none);
            p.split(0x10 + u64::from(rank), 5, 0x99);
            // (Its rank is read from memory, none here: the id is known.)
            let child = p.call(7, 0x99, Some(Func::AllReduce), none);
            (a.unwrap(), child.unwrap_or_else(|(partial, _)| partial))
        };
        let (a0, c0) = ident(0);
        let (a1, c1) = ident(1);
        assert_eq!(a0.comm_id, Some(own_comm_id(&id())));
        assert_eq!(a0.comm_id, a1.comm_id);
        assert!(a0.own_id && a1.own_id);
        assert_eq!((a0.rank, a1.rank, a0.seq), (Some(0), Some(1), Some(0)));
        // Never NCCL's own hash of the same bytes.
        assert_ne!(a0.comm_id, Some(comm_hash(V, &id())));
        assert_eq!(c0.comm_id, Some(own_split_id(own_comm_id(&id()), 1, 5)));
        assert_eq!(c0.comm_id, c1.comm_id);
        assert!(c0.own_id);
        // A known release: NCCL's id, not marked.
        let mut p = ProcessComms::new(Some(V));
        p.init(0x10, 2, 0, Some(&id()));
        let k = p.call(7, 0x10, Some(Func::AllReduce), none).unwrap();
        assert_eq!((k.comm_id, k.own_id), (Some(comm_hash(V, &id())), false));
    }

    #[test]
    fn traced_init_counts_from_zero_per_function() {
        let mut p = ProcessComms::new(Some(V));
        p.init(0x10, 2, 1, Some(&id()));
        let none = CommMemory::default();
        let a = p.call(7, 0x10, Some(Func::AllReduce), none).unwrap();
        assert_eq!(a.comm_id, Some(0xfc90_ba46_7d2d_f505));
        assert_eq!(
            (a.rank, a.nranks, a.seq, a.source),
            (Some(1), Some(2), Some(0), Some(SeqSource::FromInit))
        );
        let b = p.call(7, 0x10, Some(Func::Broadcast), none).unwrap();
        assert_eq!(b.seq, Some(0));
        assert_eq!(
            p.call(7, 0x10, Some(Func::AllReduce), none).unwrap().seq,
            Some(1)
        );
        // p2p: identity, no sequence.
        let s = p.call(7, 0x10, None, none).unwrap();
        assert_eq!((s.comm_id, s.seq), (Some(0xfc90_ba46_7d2d_f505), None));
    }

    #[test]
    fn counter_plus_position_in_group() {
        let mut p = ProcessComms::new(Some(V));
        let mem = |seq| CommMemory {
            hash: Some(0xaa),
            rank: Some(3),
            nranks: Some(4),
            cuda_dev: Some(1),
            seq: Some(seq),
        };
        // Communicator created before attach: everything from memory.
        let a = p.call(1, 0x20, Some(Func::AllReduce), mem(41)).unwrap();
        assert_eq!(
            a,
            Identity {
                comm_id: Some(0xaa),
                rank: Some(3),
                nranks: Some(4),
                cuda_dev: Some(1),
                seq: Some(41),
                source: Some(SeqSource::Counter),
                own_id: false,
            }
        );
        // A group of AR, AR, B: the counters move at the group's end.
        p.group_start(1);
        p.group_start(1);
        let seqs: Vec<u64> = [Func::AllReduce, Func::AllReduce, Func::Broadcast]
            .into_iter()
            .map(|f| {
                p.call(
                    1,
                    0x20,
                    Some(f),
                    mem(if f == Func::Broadcast { 9 } else { 42 }),
                )
                .unwrap()
                .seq
                .unwrap()
            })
            .collect();
        assert_eq!(seqs, vec![42, 43, 9]);
        // Another thread is not in the group.
        assert_eq!(
            p.call(2, 0x20, Some(Func::AllReduce), mem(44)).unwrap().seq,
            Some(44)
        );
        p.group_end(1);
        p.group_end(1);
        assert_eq!(
            p.call(1, 0x20, Some(Func::AllReduce), mem(44)).unwrap().seq,
            Some(44)
        );
        // peek does not advance a group position.
        p.group_start(1);
        assert_eq!(
            p.peek(1, 0x20, Some(Func::AllReduce), mem(45)).unwrap().seq,
            Some(45)
        );
        assert_eq!(
            p.call(1, 0x20, Some(Func::AllReduce), mem(45)).unwrap().seq,
            Some(45)
        );
        assert_eq!(
            p.call(1, 0x20, Some(Func::AllReduce), mem(45)).unwrap().seq,
            Some(46)
        );
    }

    #[test]
    fn unaligned_reasons() {
        let mut p = ProcessComms::new(Some(V));
        // Created before attach, no counter readable.
        let mem = CommMemory {
            hash: Some(0xaa),
            rank: Some(0),
            nranks: Some(2),
            ..CommMemory::default()
        };
        let e = p.call(1, 0x30, Some(Func::AllReduce), mem).unwrap_err();
        assert_eq!(
            (e.0.comm_id, e.0.rank, e.1),
            (Some(0xaa), Some(0), Unaligned::NoCounter)
        );
        assert_eq!(
            p.call(1, 0x31, Some(Func::AllReduce), CommMemory::default())
                .map_err(|e| e.1),
            Err(Unaligned::NoIdentity)
        );
        // A memory read that contradicts a traced init: memory is off.
        p.init(0x40, 2, 0, Some(&id()));
        let wrong = CommMemory {
            hash: Some(0x1234),
            seq: Some(5),
            ..CommMemory::default()
        };
        let a = p.call(1, 0x40, Some(Func::AllReduce), wrong).unwrap();
        assert_eq!(
            (a.comm_id, a.seq, a.source),
            (
                Some(0xfc90_ba46_7d2d_f505),
                Some(0),
                Some(SeqSource::FromInit)
            )
        );
        assert!(p.mismatch.as_deref().unwrap().contains("commHash"));
        assert_eq!(
            p.call(1, 0x30, Some(Func::AllReduce), mem).map_err(|e| e.1),
            Err(Unaligned::LayoutMismatch)
        );
    }

    #[test]
    fn split_child_id_when_the_parent_init_was_traced() {
        let mut p = ProcessComms::new(Some(V));
        p.init(0x50, 2, 0, Some(&id()));
        p.split(0x50, 7, 0x51);
        p.split(0x50, 7, 0x52);
        let parent = 0xfc90_ba46_7d2d_f505;
        let none = CommMemory::default();
        let c1 = p.peek(1, 0x51, None, none).unwrap();
        assert_eq!(c1.comm_id, split_hash(V, parent, 1, 7));
        assert_eq!(
            p.peek(1, 0x52, None, none).unwrap().comm_id,
            split_hash(V, parent, 2, 7)
        );
        // Its rank comes from memory at its first collective.
        let mem = CommMemory {
            hash: split_hash(V, parent, 1, 7),
            rank: Some(1),
            nranks: Some(2),
            ..CommMemory::default()
        };
        let a = p.call(1, 0x51, Some(Func::AllReduce), mem).unwrap();
        assert_eq!(
            (a.rank, a.seq, a.source),
            (Some(1), Some(0), Some(SeqSource::FromInit))
        );
        // A parent created before attach: the child's id only from memory.
        p.split(0x60, 7, 0x61);
        assert_eq!(p.peek(1, 0x61, None, none).unwrap().comm_id, None);
    }
}
