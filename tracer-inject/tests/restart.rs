//! The victim's interrupted system calls restart correctly and its
//! registers and FP state survive: a blocked read gets its data, a
//! nanosleep keeps its deadline, a spinning thread is taken at its next
//! system call, every thread of a multi-threaded victim carries on.

#![allow(clippy::print_stderr)] // tests say what they measured

mod common;

use std::time::{Duration, Instant};

use common::*;
use tracer_inject::{call, load, unload};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn blocked_read_gets_its_data_after_injection() {
    let mut v = Victim::start(&["read"]);
    assert!(v.wait_line(5 * SEC, |l| l == "ready").is_some());
    assert!(
        wait_syscall(v.pid, libc::SYS_read, 5 * SEC),
        "victim blocks in read"
    );
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[1, 2]), &opts()).unwrap(),
        1003
    );
    unload(v.pid, &lib, &opts()).unwrap();
    // Right after the detach the thread is briefly running (restarting).
    assert!(wait_syscall(v.pid, libc::SYS_read, 5 * SEC), "back in read");
    assert!(
        v.lines().iter().all(|l| !l.starts_with("got")),
        "read did not return early"
    );
    write_stdin(&mut v, b"hello-after-inject");
    let got = v.wait_line(5 * SEC, |l| l.starts_with("got") || l.starts_with("BAD"));
    assert_eq!(got.as_deref(), Some("got 18: hello-after-inject"));
}

#[test]
fn nanosleep_keeps_its_deadline() {
    let v = Victim::start(&["longsleep", "1000"]);
    assert!(v.wait_line(5 * SEC, |l| l == "sleeping").is_some());
    assert!(wait_syscall(v.pid, libc::SYS_nanosleep, 5 * SEC));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[1, 1]), &opts()).unwrap(),
        1002
    );
    unload(v.pid, &lib, &opts()).unwrap();
    let spent = t.elapsed();
    assert!(
        spent < Duration::from_millis(600),
        "injection too slow for this test: {spent:?}"
    );
    let line = v
        .wait_line(5 * SEC, |l| l.starts_with("slept") || l.starts_with("BAD"))
        .unwrap();
    let (ms, ret) = (field(&line, "slept").unwrap(), field(&line, "ret").unwrap());
    assert_eq!(ret, 0, "{line}");
    // Restarted from scratch it would sleep at least 1300 ms; with the
    // kernel's restart block it ends at the original deadline.
    assert!((1000..1250).contains(&ms), "slept {ms} ms: {line}");
}

#[test]
fn victim_spinning_in_user_code_is_taken_at_its_next_syscall() {
    let mut v = Victim::start(&["spin", "400"]);
    assert!(v.wait_line(5 * SEC, |l| l == "spinning").is_some());
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(state(v.pid), Some('R'), "victim is running user code");
    let t = Instant::now();
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    let waited = t.elapsed();
    assert!(
        v.lines().iter().all(|l| !l.starts_with("tick")),
        "loaded before the spin ended"
    );
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[3, 4]), &opts()).unwrap(),
        1007
    );
    unload(v.pid, &lib, &opts()).unwrap();
    eprintln!("load waited {waited:?} for the spinning thread's syscall");
    assert!(
        waited > Duration::from_millis(200),
        "load returned before the victim made a syscall"
    );
    assert_healthy(&mut v);
    assert_eq!(v.last("intr"), Some(0));
    assert_eq!(
        v.marker(),
        format!("loaded {0} id 1\nunloaded {0} id 1\n", v.pid)
    );
}

#[test]
fn multithreaded_victim_carries_on() {
    let mut v = Victim::start(&["threads"]);
    assert!(v.wait_tick(3, 5 * SEC));
    let before: Vec<i64> = ["f0", "f1", "f2", "busy"]
        .iter()
        .map(|k| v.last(k).unwrap())
        .collect();
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[5, 5]), &opts()).unwrap(),
        1010
    );
    unload(v.pid, &lib, &opts()).unwrap();
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 5, 5 * SEC));
    let after: Vec<i64> = ["f0", "f1", "f2", "busy"]
        .iter()
        .map(|k| v.last(k).unwrap())
        .collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(a > b, "thread {i} stopped: {b} -> {a}");
    }
    assert_healthy(&mut v);
    assert_eq!(
        std::fs::read_dir(format!("/proc/{}/task", v.pid))
            .unwrap()
            .count(),
        5
    );
}
