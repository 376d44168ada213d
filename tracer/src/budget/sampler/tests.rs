//! When the busy APIs were traced: `Untraced`'s accounting.

use super::untraced::OFF_HISTORY;
use super::*;

/// Off, on for the APIs called so far only, then on for all: untraced
/// from the first change to the whole attach; before and after, traced.
#[test]
fn untraced_from_the_first_change_to_every_api_on() {
    let mut u = Untraced::default();
    assert!(u.traced(0, 1000));
    u.off(100);
    assert!(u.traced(0, 99));
    assert!(!u.traced(0, 100));
    assert!(!u.traced(500, 600), "off now");
    u.on(150, false);
    u.off(200);
    assert!(!u.traced(160, 190), "on for some APIs only");
    u.on(250, true);
    assert!(u.traced(250, 1000));
    assert!(!u.traced(240, 1000));
    assert!(u.traced(10, 99));
    assert!(!u.traced(10, 100));
}

/// Past the history kept, what came before is not known.
#[test]
fn what_the_history_lost_is_not_known() {
    let mut u = Untraced::default();
    for k in 1..=OFF_HISTORY as u64 {
        u.off(k * 100);
        u.on(k * 100 + 5, true);
    }
    assert!(u.traced(10, 50));
    assert!(u.traced(110, 150));
    u.off(1_000_000);
    u.on(1_000_005, true);
    assert!(!u.traced(10, 50), "forgotten");
    assert!(u.traced(110, 150));
    assert!(!u.traced(150, 200));
}

/// New processes' slices: one ask per process, kept through the period
/// after the one it came in, and bounded.
#[test]
fn new_processes_are_asked_for_once_and_left_to_the_shared_schedule_after_a_period() {
    let mut w = welcome::Welcomes::default();
    let came = monotonic_ns();
    w.ask(7);
    w.ask(7);
    assert!(!w.is_idle());
    assert_eq!(w.next_change(), Some(0), "due at once");
    // The period it came in ends: kept; the next one ends: left.
    let now = monotonic_ns();
    assert!(w.close_period(came, now).is_empty());
    assert!(!w.is_idle());
    w.close_period(now + 1, now + 2);
    assert!(w.is_idle());
    // Asks past the bound are counted.
    for pid in 0..300 {
        w.ask(pid);
    }
    assert_eq!(w.missed, 300 - 256);
    // A slice lasts r of a second, within 20 ms and 250 ms.
    assert_eq!(welcome::welcome_len(0.02), 20_000_000);
    assert_eq!(welcome::welcome_len(0.06), 60_000_000);
    assert_eq!(welcome::welcome_len(0.9), 250_000_000);
}
