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
