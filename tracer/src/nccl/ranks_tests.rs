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
        (r2.collectives, r2.times_last, r2.delay.total_ns()),
        (6, 6, 120 * MS)
    );
    assert_eq!(r2.last_seq[Func::AllReduce.index()], Some(5));
    assert_eq!(c.ranks[&0].times_last, 0);
}

/// A step's gradient buckets: rank 0 enters four collectives 1 ms apart,
/// rank 1 (late by 120 ms) enters them 1 ms apart too. Each waited about
/// 120 ms, but at the same time: the delay rank 1 caused is the union of
/// the waits (123 ms), not their sum (480 ms). A second step later adds
/// its own wait; completions out of order change nothing.
#[test]
fn overlapping_waits_are_counted_once() {
    let two = |rank, seq, t| Arrival {
        nranks: 2,
        ..arrival(rank, seq, t)
    };
    let mut x = CrossRank::new();
    let mut done = Vec::new();
    for step in 0..2u64 {
        let t = 1_000 * MS + step * 1_000 * MS;
        for b in 0..4u64 {
            x.arrive(two(0, step * 4 + b, t + b * MS));
        }
        // Rank 1's entries arrive in reverse order: the last bucket first.
        for b in (0..4u64).rev() {
            done.extend(x.arrive(two(1, step * 4 + b, t + 120 * MS + b * MS)));
        }
    }
    assert_eq!(done.len(), 8);
    let sum: u64 = done.iter().map(|c| c.delay_ns).sum();
    assert_eq!(sum, 8 * 120 * MS, "each collective keeps its own delay");
    let r1 = &x.comms()[&0xabc].ranks[&1];
    assert_eq!(r1.times_last, 8);
    assert_eq!(r1.delay.total_ns(), 2 * 123 * MS);
}

#[test]
fn wait_union_merges_and_is_bounded() {
    use crate::model::nccl::WaitUnion;
    let mut u = WaitUnion::default();
    u.add(10, 20);
    u.add(30, 40);
    assert_eq!(u.total_ns(), 20);
    // Bridges both, in any order; inside or empty adds nothing.
    u.add(15, 35);
    assert_eq!(u.total_ns(), 30);
    u.add(12, 18);
    u.add(50, 50);
    assert_eq!(u.total_ns(), 30);
    u.add(40, 45); // touching: one span
    assert_eq!(u.total_ns(), 35);
    // Past the bound, the oldest spans are folded: their total stays,
    // and what starts before them is cut.
    for i in 0..200u64 {
        u.add(1_000 + i * 10, 1_000 + i * 10 + 5);
    }
    assert_eq!(u.total_ns(), 35 + 200 * 5);
    u.add(0, 45);
    assert_eq!(u.total_ns(), 35 + 200 * 5);
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
            seq_last: 7,
            collectives: 1,
            waiting: vec![(0, 100), (1, 101)],
            missing: (2, Some(102)),
            exited: None,
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
            rank: 2,
            func: Func::AllReduce,
            seq: 7,
            seq_last: 7,
            collectives: 1,
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
    assert_eq!((new.len(), new[0].seq), (2, 5));
    assert_eq!(
        (new[0].missing, new[1].missing),
        ((0, Some(100)), (1, Some(101)))
    );
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
    assert_eq!((new[0].missing, new[1].missing), ((1, None), (2, None)));
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

/// Rank 1 stops: rank 0 has entered collectives 10..15 (NCCL calls
/// return once queued), each waiting for it. One stall names rank 1 with
/// the range; collectives 16 and 17, entered later, join it unsaid; it
/// ends once rank 1 entered all of them, with the whole range.
#[test]
fn one_stall_per_missing_rank_with_the_range_it_holds_up() {
    let two = |rank, seq, t| Arrival {
        nranks: 2,
        ..arrival(rank, seq, t)
    };
    let mut x = CrossRank::new();
    x.rank_seen(0xabc, 2, 1, 101);
    let t = 1_000 * MS;
    for seq in 10..16 {
        x.arrive(two(0, seq, t + seq * MS));
    }
    let (new, ended) = x.check_stalls(t + 2_100 * MS, 1_000 * MS);
    assert!(ended.is_empty());
    assert_eq!(new.len(), 1, "{new:?}");
    let s = &new[0];
    assert_eq!(
        (s.seq, s.seq_last, s.collectives, s.missing, s.exited),
        (10, 15, 6, (1, Some(101)), None)
    );
    assert_eq!(
        (s.waiting.clone(), s.first_ns),
        (vec![(0, 100)], t + 10 * MS)
    );
    assert_eq!(x.comms()[&0xabc].ranks[&1].stalls, 1);
    for seq in 16..18 {
        x.arrive(two(0, seq, t + 2_200 * MS + seq * MS));
    }
    assert_eq!(x.check_stalls(t + 3_000 * MS, 1_000 * MS), (vec![], vec![]));
    assert_eq!(x.stalled_keys().count(), 8);
    // Rank 1 comes back: not over until it entered the last.
    for seq in 10..17 {
        x.arrive(two(1, seq, t + 4_000 * MS + seq));
    }
    assert_eq!(x.check_stalls(t + 4_100 * MS, 1_000 * MS), (vec![], vec![]));
    x.arrive(two(1, 17, t + 4_000 * MS + 17));
    let (new, ended) = x.check_stalls(t + 4_200 * MS, 1_000 * MS);
    assert!(new.is_empty());
    assert_eq!(
        ended,
        vec![StallEnded {
            comm_id: 0xabc,
            rank: 1,
            func: Func::AllReduce,
            seq: 10,
            seq_last: 17,
            collectives: 8,
            waited_ns: 4_000 * MS + 17 - 10 * MS,
        }]
    );
    assert_eq!(x.comms()[&0xabc].ranks[&1].stalls, 1);
    // Rank 0's entry into 17 read again (from the in-flight map, as its
    // return is processed): not a new collective, not a new stall.
    assert!(x.arrive(two(0, 17, t + 2_200 * MS + 17 * MS)).is_none());
    let (new, _) = x.check_stalls(t + 9_000 * MS, 1_000 * MS);
    assert!(new.is_empty(), "{new:?}");
    assert_eq!(x.pending_of(0xabc), (0, 0));
}

/// A rank's process exits: a stall said before says so once more; one
/// said after says it at once; a process of no rank changes nothing.
#[test]
fn a_stall_says_once_that_the_missing_rank_exited() {
    use crate::model::nccl::{Exit, ExitHow};
    let two = |rank, seq, t| Arrival {
        nranks: 2,
        ..arrival(rank, seq, t)
    };
    let exit = Exit {
        at_ns: 7_000 * MS,
        how: Some(ExitHow::Signal(9)),
    };
    let mut x = CrossRank::new();
    x.arrive(two(1, 0, 0));
    x.arrive(two(0, 0, MS));
    x.arrive(two(0, 1, 2 * MS));
    let (new, _) = x.check_stalls(5_000 * MS, 1_000 * MS);
    assert_eq!((new.len(), new[0].exited), (1, None));
    x.process_exited(999, exit);
    assert!(x.check_stalls(6_000 * MS, 1_000 * MS).0.is_empty());
    x.process_exited(101, exit);
    let (new, _) = x.check_stalls(8_000 * MS, 1_000 * MS);
    assert_eq!(new.len(), 1);
    assert_eq!(
        (new[0].seq, new[0].missing, new[0].exited),
        (1, (1, Some(101)), Some(exit))
    );
    assert!(x.check_stalls(9_000 * MS, 1_000 * MS).0.is_empty());
    assert_eq!(x.comms()[&0xabc].ranks[&1].stalls, 1);

    // Every waiting rank exited first (the job ended): not said again.
    let mut x = CrossRank::new();
    x.arrive(two(0, 0, MS));
    assert_eq!(x.check_stalls(5_000 * MS, 1_000 * MS).0.len(), 1);
    x.process_exited(100, exit);
    x.process_exited(101, exit);
    assert!(x.check_stalls(6_000 * MS, 1_000 * MS).0.is_empty());

    // Exited before the stall: said in it at once, once.
    let mut x = CrossRank::new();
    x.arrive(two(1, 0, 0));
    x.process_exited(101, exit);
    x.arrive(two(0, 0, MS));
    x.arrive(two(0, 1, 2 * MS));
    let (new, _) = x.check_stalls(5_000 * MS, 1_000 * MS);
    assert_eq!((new.len(), new[0].exited), (1, Some(exit)));
    assert!(x.check_stalls(6_000 * MS, 1_000 * MS).0.is_empty());
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
