//! Unit tests of the cross-rank analysis (nccl/ranks.rs).

use super::*;
use crate::model::nccl::Arrival;
use crate::model::nccl::Func;
use crate::model::nccl::Stall;
use crate::model::nccl::StallEnded;

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

/// Two ranks attached one after the other: rank 0 is traced from
/// collective 3, rank 1 (ahead) from 8; 3..7 were entered by rank 1
/// unseen. No stall, not incomplete; 8.. compared as usual. A rank
/// traced from the start and hung is still named.
#[test]
fn collectives_before_a_rank_was_traced_are_not_stalls() {
    let two = |rank, seq, t| Arrival {
        nranks: 2,
        ..arrival(rank, seq, t)
    };
    // Rank 0 first: its pending 3..7 end at rank 1's first entry.
    let mut x = CrossRank::new();
    for seq in 3..8 {
        x.arrive(two(0, seq, seq * MS));
    }
    assert!(x.arrive(two(1, 8, 10 * MS)).is_none());
    assert!(x.arrive(two(0, 8, 11 * MS)).is_some());
    assert_eq!(x.check_stalls(10_000 * MS, 1_000 * MS), (vec![], vec![]));
    let c = x.comms()[&0xabc];
    assert_eq!((c.complete, c.incomplete, c.before_trace), (1, 0, 5));
    assert_eq!(x.pending_of(0xabc), (0, 0));
    assert_eq!(c.ranks[&1].first_seq[Func::AllReduce.index()], Some(8));

    // Rank 1 (ahead) first, then rank 0's older ones: not pending.
    let mut x = CrossRank::new();
    x.arrive(two(1, 8, MS));
    for seq in 3..9 {
        x.arrive(two(0, seq, (10 + seq) * MS));
    }
    assert_eq!(x.check_stalls(10_000 * MS, 1_000 * MS), (vec![], vec![]));
    let c = x.comms()[&0xabc];
    assert_eq!((c.complete, c.incomplete, c.before_trace), (1, 0, 5));

    // A stall reported before the rank's first entry ends with it.
    let mut x = CrossRank::new();
    x.arrive(two(0, 3, 0));
    assert_eq!(x.check_stalls(2_000 * MS, 1_000 * MS).0.len(), 1);
    x.arrive(two(1, 9, 2_500 * MS));
    let (new, ended) = x.check_stalls(3_000 * MS, 1_000 * MS);
    assert!(new.is_empty());
    assert_eq!((ended[0].seq, ended[0].waited_ns), (3, 2_500 * MS));
    assert_eq!(x.comms()[&0xabc].before_trace, 1);

    // Three ranks: rank 2 entered 4 before it was traced, rank 1 has
    // not entered it yet: still pending, not a stall, then dropped.
    let mut x = CrossRank::new();
    x.rank_seen(0xabc, 3, 1, 101);
    x.arrive(arrival(2, 5, 0));
    x.arrive(arrival(0, 4, MS));
    // Collective 5 waits for ranks 0 and 1, traced from 4: a stall;
    // 4 is not one.
    let (new, _) = x.check_stalls(5_000 * MS, 1_000 * MS);
    assert_eq!((new.len(), new[0].seq), (1, 5));
    assert_eq!(new[0].missing, vec![(0, Some(100)), (1, Some(101))]);
    assert_eq!(x.pending_of(0xabc), (1, 1));
    x.arrive(arrival(1, 4, 2 * MS));
    assert_eq!(x.pending_of(0xabc), (1, 0));
    assert_eq!(x.comms()[&0xabc].before_trace, 1);
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
    assert_eq!(x.dropped.keys(), 6);
}

/// Communicators known only from their inits count against the bound too
/// (each one's state is kept until it is dropped), and the dropped ones
/// are counted.
#[test]
fn communicators_seen_at_init_are_bounded_and_counted() {
    let mut x = CrossRank::new();
    let extra = 100u64;
    for id in 0..(MAX_COMMS as u64 + extra) {
        x.rank_seen(0x5000 + id, 2, 0, 7);
    }
    assert_eq!(x.comms().len(), MAX_COMMS);
    assert!(x.active_ns.len() <= MAX_COMMS);
    assert_eq!(x.dropped.keys(), extra);
    // One still tracked works as before.
    let last = 0x5000 + MAX_COMMS as u64 + extra - 1;
    let mut a = arrival(1, 0, 5);
    (a.comm_id, a.nranks) = (last, 2);
    x.arrive(a);
    let mut b = arrival(0, 0, 6);
    (b.comm_id, b.nranks) = (last, 2);
    assert!(x.arrive(b).is_some());
}

/// Ranks of one communicator past the bound (or not below its size) are
/// not tracked, and counted.
#[test]
fn ranks_per_communicator_are_bounded_and_counted() {
    let mut x = CrossRank::new();
    let nranks = MAX_RANKS as u32 + 10;
    for rank in 0..nranks + 3 {
        x.rank_seen(0xabc, nranks, rank, 1);
    }
    assert_eq!(x.comms()[&0xabc].ranks.len(), MAX_RANKS);
    assert_eq!(x.ranks_over, 10);
    let mut a = arrival(MAX_RANKS as u32 + 1, 0, 5);
    a.nranks = nranks;
    assert!(x.arrive(a).is_none());
    assert_eq!(x.ranks_over, 11);
    assert_eq!(x.pending.len(), 0);
}
