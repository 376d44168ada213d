//! The budget's tests: the cost model, the mode chosen, the estimates.

use crate::budget::period::KernelTime;
use crate::budget::sampler::MIN_RATIO;
use crate::budget::*;

/// Processes of one thread each, calling functions whose first
/// instruction is single-stepped: an entry probe costs 4 µs, with its
/// return probe 5 µs.
fn rates(processes: &[(f64, f64)]) -> HashMap<(u32, u32), Rates> {
    processes
        .iter()
        .enumerate()
        .map(|(i, &(hot, rare))| {
            let r = Rates {
                hot,
                rare,
                hot_e: hot * 4e-6,
                hot_er: hot * 5e-6,
                rare_er: rare * 5e-6,
            };
            ((i as u32 + 1, 1), r)
        })
        .collect()
}

#[test]
fn the_always_traced_calls_are_paid_from_the_budget() {
    // 30k samplable calls/s: 12% entry only. Alone, 1% leaves 1/12 of
    // each period; 1,000 other calls/s (0.5%) leave half of that.
    let alone = choose(Mode::Exact, &rates(&[(30_000.0, 0.0)]), 0.01);
    let with_rare = choose(Mode::Exact, &rates(&[(30_000.0, 1000.0)]), 0.01);
    match (alone, with_rare) {
        (Mode::Duty(a), Mode::Duty(b)) => {
            assert!((a - 1.0 / 12.0).abs() < 1e-9, "{a}");
            assert!((b - 0.5 / 12.0).abs() < 1e-9, "{b}");
        }
        other => panic!("{other:?}"),
    }
    // The other calls alone over the budget: the smallest share.
    assert_eq!(
        choose(Mode::Exact, &rates(&[(30_000.0, 3000.0)]), 0.01),
        Mode::Duty(MIN_RATIO)
    );
}

#[test]
fn every_process_is_kept_within_the_budget() {
    // Process 1 calls more samplable APIs, process 2 makes more other
    // calls: process 2 bounds the share (0.2% left over 0.4% entry only).
    let m = choose(
        Mode::Exact,
        &rates(&[(2000.0, 0.0), (1000.0, 1600.0)]),
        0.01,
    );
    assert_eq!(m, Mode::Duty(0.5));
    // Both cheap enough for entry probes only, one not for returns.
    assert_eq!(
        choose(
            Mode::Exact,
            &rates(&[(2000.0, 100.0), (100.0, 100.0)]),
            0.01
        ),
        Mode::EntryOnly
    );
    assert_eq!(
        choose(Mode::Exact, &rates(&[(2000.0, 100.0)]), 0.02),
        Mode::Exact
    );
}

#[test]
fn a_processs_threads_costs_add_up() {
    // Two threads of one process, each within the budget with return
    // probes (0.6%), together not (1.2%); entry only they are (0.96%).
    let one = rates(&[(1200.0, 0.0)])[&(1, 1)];
    let process: HashMap<_, _> = [((7, 1), one), ((7, 2), one)].into();
    assert_eq!(choose(Mode::Exact, &process, 0.01), Mode::EntryOnly);
    // The same threads in two processes: each process is within it.
    let apart: HashMap<_, _> = [((7, 1), one), ((8, 1), one)].into();
    assert_eq!(choose(Mode::Exact, &apart, 0.01), Mode::Exact);
    assert_eq!(per_process(&process)[&7].hot, 2400.0);
}

#[test]
fn a_period_is_scaled_by_the_threads_rare_calls_else_the_processs_else_time() {
    let r = |all, on| Rare { all, on };
    // One call seen: the estimate is the scale.
    fn scale(t: Option<&Rare>, p: Option<&Rare>, g: Option<&Progress>, by_time: f64) -> f64 {
        estimate_by(1, t, p, None, g, by_time).0
    }
    let g = Progress {
        total: 1_000,
        on: 100,
        by_time: 800.0,
    };
    // The thread's own pace: 9,000 rare calls, 250 of them while on.
    assert_eq!(
        scale(Some(&r(9_000, 250)), Some(&r(9_000, 300)), Some(&g), 40.0),
        36.0
    );
    // Too few of the thread's while on: the process's.
    assert_eq!(
        scale(Some(&r(400, 49)), Some(&r(9_000, 300)), Some(&g), 40.0),
        30.0
    );
    assert_eq!(scale(None, Some(&r(2_250, 50)), None, 40.0), 45.0);
    // Neither: time, corrected by the progress once 20 came while on.
    assert_eq!(
        scale(Some(&r(40, 5)), Some(&r(60, 8)), Some(&g), 40.0),
        50.0
    );
    // A ratio far from time's (rare calls not keeping pace): the next.
    assert_eq!(
        scale(Some(&r(100_000, 50)), Some(&r(9_000, 300)), None, 40.0),
        30.0
    );
    assert_eq!(
        scale(Some(&r(100_000, 50)), Some(&r(90_000, 300)), None, 40.0),
        40.0
    );
    assert_eq!(scale(Some(&r(500, 50)), None, None, 40.0), 40.0);
    let young = Progress { on: 19, ..g };
    assert_eq!(scale(None, None, Some(&young), 40.0), 40.0);
    assert_eq!(scale(None, None, None, 40.0), 40.0);
}

#[test]
fn whole_steps_seen_while_on_scale_a_bursty_thread() {
    const SYNC: u16 = 40;
    const FREE: u16 = 41;
    let none = |_| None;
    // A period of 1,000..2,000 (ms, as ns here), on 1,100..1,400: a
    // synchronisation every 100 (at 1,050, 1,150, ...), a free at
    // 1,120 and 1,380 (one step: fewer).
    let mut calls: Vec<(u64, u16)> = (0..10).map(|i| (1_050 + i * 100, SYNC)).collect();
    calls.extend([(1_120, FREE), (1_380, FREE), (2_050, SYNC)]);
    let on = [(1_100, 1_400)];
    let s = Steps::find(&calls, &on, 1_000, 2_000, none).unwrap();
    // 1,150, 1,250, 1,350: two whole steps, two calls in them; ten in
    // the period (2,050 is the next period's).
    assert_eq!(
        s,
        Steps {
            from: 1_150,
            to: 1_350,
            steps: 2,
            calls: 2,
            period: 10,
        }
    );
    // Bursts of 500 launches a step: 1,000 seen between them → 5,000
    // in the period, whatever else the slice held (1,200 seen).
    assert_eq!(
        estimate_by(1_200, None, None, Some((&s, 1_000)), None, 3.33),
        (5_000.0, Rule::Steps)
    );
    // Rare calls enough for their ratio: that first.
    let many = Rare { all: 900, on: 300 };
    assert_eq!(
        estimate_by(1_200, Some(&many), None, Some((&s, 1_000)), None, 3.33),
        (3_600.0, Rule::RareCalls)
    );
    // A span that does not keep pace (none seen in it, or an estimate
    // under half or over twice time's): time.
    assert_eq!(
        estimate_by(1_200, None, None, Some((&s, 0)), None, 3.0),
        (3_600.0, Rule::Time)
    );
    assert_eq!(
        estimate_by(100, None, None, Some((&s, 20)), None, 3.0),
        (300.0, Rule::Time)
    );
    // One call of each API while on: no span.
    let one = [(1_150, SYNC), (1_120, FREE)];
    assert_eq!(Steps::find(&one, &on, 1_000, 2_000, none), None);
    // Two of one API in different slices: no span either.
    let apart = [(1_150, SYNC), (1_650, SYNC)];
    let slices = [(1_100, 1_400), (1_600, 1_700)];
    assert_eq!(Steps::find(&apart, &slices, 1_000, 2_000, none), None);
    // Three together at the end of each step (1,090, 1,091, 1,092,
    // 1,190, ...): a step is from one group's first call to the
    // next's, three calls.
    let grouped: Vec<(u64, u16)> = (0..10)
        .flat_map(|i| (0..3).map(move |k| (1_090 + i * 100 + k, SYNC)))
        .collect();
    let early = [(1_000, 1_300)];
    let s = Steps::find(&grouped, &early, 1_000, 2_000, none).unwrap();
    let all = |s: &Steps| (s.from, s.to, s.steps, s.calls, s.period);
    assert_eq!(all(&s), (1_190, 1_290, 1, 3, 30));
    assert_eq!(s.estimate(500), 5_000.0);
    // Where the thread's last call before the period is known (the
    // previous period's group at 992), the period's first group
    // begins a step too.
    let s = Steps::find(&grouped, &early, 1_000, 2_000, |_| Some(992)).unwrap();
    assert_eq!((s.from, s.steps, s.calls), (1_090, 2, 6));
    // The probes' change at the period's start stalled the process:
    // the last call before it came 62 before the start and the
    // period's first at 1,010, a gap of 72, more than twice a step's
    // 30. Gaps across a change are not taken for the longest, so the
    // slice's steps are found.
    let stalled: Vec<(u64, u16)> = (0..33).map(|i| (1_010 + i * 30, SYNC)).collect();
    let late = [(1_112, 1_250)];
    let s = Steps::find(&stalled, &late, 1_000, 2_000, |_| Some(938)).unwrap();
    assert_eq!(all(&s), (1_130, 1_220, 3, 3, 33));
    // Where every gap spans a change, the longest of all is taken.
    assert_eq!(longest_gap(&[0, 10, 40], &[5, 20]), 30);
    assert_eq!(longest_gap(&[0, 10, 40], &[20]), 10);
}

#[test]
fn the_in_place_ratio_sets_kernel_time_on_against_off_and_the_model() {
    let read = |on_ticks, off_ticks, modeled_s| InPlace {
        kernel: KernelTime {
            on_ticks,
            on_ns: 10_000_000_000,
            off_ticks,
            off_ns: 40_000_000_000,
        },
        modeled_s,
        prior: None,
    };
    // 10 s on: 1.2 s of kernel time; 40 s off: 0.8 s, so 0.2 s in 10 s
    // of it is not the sampled probes'. The model made 0.5 s of them:
    // 2×, read from 120 and 80 ticks, so known to √(120 + 80/16) ticks
    // (0.11 s); 1.645 of that above: 2.37×.
    let bound = (1.0 + 1.645 * 125f64.sqrt() / 100.0) / 0.5;
    assert!((read(120, 80, 0.5).ratio(100.0) - bound).abs() < 1e-12);
    // Ten times the ticks: nearer 2×.
    let more = read(1200, 800, 5.0).ratio(100.0);
    assert!(more > 2.0 && more < 2.13, "{more}");
    // Never below the measured figure, nor above 4×.
    assert_eq!(read(120, 80, 5.0).ratio(100.0), 1.0);
    assert_eq!(read(120, 80, 0.1).ratio(100.0), 4.0);
    // Too little read on: 1, or the ratio a budget before read here.
    assert_eq!(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1).ratio(100.0), 1.0);
    assert_eq!(InPlace::default().ratio(100.0), 1.0);
    let before = |r: InPlace| InPlace {
        prior: Some(1.5),
        ..r
    };
    assert_eq!(
        before(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1)).ratio(100.0),
        1.5
    );
    assert_eq!(
        before(read(MIN_IN_PLACE_TICKS - 1, 0, 0.1)).read(100.0),
        None
    );
    assert!((before(read(120, 80, 0.5)).ratio(100.0) - bound).abs() < 1e-12);
}

#[test]
fn rates_rise_at_once_and_fall_by_halves() {
    assert_eq!(smooth(2_000.0, 28_000.0), 28_000.0);
    assert_eq!(smooth(28_000.0, 2_000.0), 15_000.0);
    assert_eq!(smooth(15_000.0, 15_000.0), 15_000.0);
}

#[test]
fn a_rate_at_an_edge_does_not_flip_the_mode() {
    // Exactly at the budget with returns: stays exact, but coming back
    // from entry-only needs 20% of headroom.
    let r = rates(&[(1000.0, 1000.0)]);
    assert_eq!(choose(Mode::Exact, &r, 0.01), Mode::Exact);
    assert_eq!(choose(Mode::EntryOnly, &r, 0.01), Mode::EntryOnly);
    // A duty ratio up to 10% under the one the rates allow (1/12) is
    // kept; one over it, or further under, is not.
    let r = rates(&[(30_000.0, 0.0)]);
    assert_eq!(choose(Mode::Duty(0.08), &r, 0.01), Mode::Duty(0.08));
    for old in [0.05, 0.085, 0.09] {
        match choose(Mode::Duty(old), &r, 0.01) {
            Mode::Duty(d) => assert!((d - 1.0 / 12.0).abs() < 1e-12, "{old}: {d}"),
            m => panic!("{m:?}"),
        }
    }
}

/// A process gone before its period ended is in that period's report once
/// more (with the share of it traced); a new process given its PID since
/// is reported alone.
#[test]
fn gone_processes_are_reported_once_more() {
    let c = |exact| Count {
        exact,
        ..Count::default()
    };
    let live: HashMap<(u32, u16), Count> = [((1, 0), c(5))].into();
    let departed: HashMap<u32, Vec<(u16, Count)>> =
        [(2, vec![(0, c(7)), (3, c(1))]), (1, vec![(0, c(99))])].into();
    let mut r = reported(&live, &departed);
    r.sort_by_key(|(k, _)| *k);
    let got: Vec<((u32, u16), u64)> = r.iter().map(|(k, c)| (*k, c.exact)).collect();
    assert_eq!(got, [((1, 0), 5), ((2, 0), 7), ((2, 3), 1)]);
}

/// A process that came in mid-period with slices of its own: its window
/// runs from its first call to its exit (never before its last call), its
/// own slices and the shared one within that are its time on, and each
/// slice's calls stand for the time around it.
#[test]
fn a_new_processs_window_and_its_slices_scale_to_its_life() {
    use crate::budget::settle::windows;
    const S: u64 = 1_000_000_000;
    let p = Period {
        start_ns: 0,
        end_ns: 10 * S,
        on_ns: S / 4,
        on: vec![(0, S / 4)],
        returns: false,
        kernel: KernelTime::default(),
        welcomed: vec![(7, 2 * S, 2 * S + S / 50), (7, 3 * S, 3 * S + S / 50)],
    };
    let first = HashMap::from([(7, 2 * S - S / 10), (8, 0)]);
    let exited = HashMap::from([(7, 4 * S)]);
    let last = HashMap::from([(7, 4 * S + 5)]);
    let w = windows(&p, &first, &exited, &last);
    assert!(!w.contains_key(&8), "an old process's window is the period");
    let w = &w[&7];
    assert_eq!((w.from, w.to), (2 * S - S / 10, 4 * S + 6));
    assert_eq!(w.on.len(), 2);
    assert!(w.own);
    // 1,000 calls in each 20 ms slice, free of cost: 50,000 a second over
    // its 2.1 s.
    let e = w.stratified(&[1000, 1000], 0.0);
    assert!((e / (50_000.0 * 2.1) - 1.0).abs() < 1e-3, "{e}");
    // Idle in the first slice: that one stands for the time up to halfway
    // to the next, the second for the rest at its own rate.
    let e = w.stratified(&[0, 1000], 0.0);
    let rest = (4 * S + 6 - (2 * S + S / 50 + 3 * S) / 2) as f64 / 1e9;
    assert!((e / (50_000.0 * rest) - 1.0).abs() < 1e-3, "{e}");
    // Calls that cost half the slice: the rate is the mean of the rate
    // seen and twice it.
    let e = w.stratified(&[1000, 1000], 0.01 / 1000.0);
    assert!((e / (75_000.0 * 2.1) - 1.0).abs() < 1e-3, "{e}");
}
