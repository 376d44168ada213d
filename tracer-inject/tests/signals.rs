//! Signals during injection, a target that exits mid-call, and a call that
//! does not return in time.

#![allow(clippy::print_stderr)] // tests say what they measured

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tracer_inject::{call, load, unload, Error, Options};

const SEC: Duration = Duration::from_secs(1);

/// Whether `sig` is pending anywhere in `pid` (process queue or a thread's).
fn pending(pid: i32, sig: i32) -> bool {
    let bit = 1u64 << (sig - 1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .any(|m| m & bit != 0)
}

#[test]
fn no_signal_lost_during_injection() {
    const N: i64 = 60;
    let v = Victim::start(&["signals"]);
    assert!(v.wait_line(5 * SEC, |l| l == "handler ready").is_some());
    assert!(v.wait_tick(1, 5 * SEC));
    let pid = v.pid;
    let injecting = Arc::new(AtomicBool::new(true));
    let flag = injecting.clone();
    // Send SIGUSR1 one at a time (each only once the previous one was taken,
    // by the victim or by the injector): the kernel merges a standard signal
    // with a pending one, so only this makes the count exact.
    let sender = std::thread::spawn(move || {
        let mut sent = 0;
        let mut during = 0;
        while sent < N {
            let end = Instant::now() + 2 * SEC;
            while pending(pid, libc::SIGUSR1) && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(200));
            }
            // SAFETY: kill with a valid signal number.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
            sent += 1;
            if flag.load(Ordering::SeqCst) {
                during += 1;
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        during
    });
    let t = Instant::now();
    let mut rounds = 0;
    while !sender.is_finished() || rounds < 3 {
        let lib = load(pid, &probe1(), &opts()).unwrap();
        // 40 ms spent in our code (no system call): signals land in it.
        assert_eq!(
            call(pid, &lib, "probe_spin_ms", &i64s(&[40]), &opts()).unwrap(),
            2
        );
        unload(pid, &lib, &opts()).unwrap();
        rounds += 1;
    }
    injecting.store(false, Ordering::SeqCst);
    let during = sender.join().unwrap();
    eprintln!(
        "{rounds} injections in {:?}; {during} of {N} signals sent while injecting",
        t.elapsed()
    );
    assert!(
        during > N / 2,
        "most signals must arrive during injection for this test to mean anything"
    );
    let end = Instant::now() + 5 * SEC;
    while v.last("sig") != Some(N) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        v.last("sig"),
        Some(N),
        "every SIGUSR1 reached the handler exactly once"
    );
    assert_eq!(v.bad(), None);
}

#[test]
fn target_exiting_during_a_call_is_an_error_not_a_hang() {
    // The victim's second thread spins 500 ms, then calls _exit(7).
    let v = Victim::start(&["exit-after", "500"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    let t = Instant::now();
    let long = Options {
        call_timeout: Duration::from_secs(20),
        ..opts()
    };
    let r = call(v.pid, &lib, "probe_sleep_ms", &i64s(&[10_000]), &long);
    assert!(matches!(r, Err(Error::TargetExited { .. })), "{r:?}");
    assert!(t.elapsed() < 3 * SEC, "took {:?}", t.elapsed());
    eprintln!("{}", r.unwrap_err());
    assert!(matches!(
        unload(v.pid, &lib, &opts()),
        Err(Error::NoSuchProcess { .. })
    ));
}

#[test]
fn target_killed_during_a_call() {
    let v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    let pid = v.pid;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: kill with a valid signal number.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let t = Instant::now();
    let r = call(pid, &lib, "probe_spin_ms", &i64s(&[10_000]), &opts());
    killer.join().unwrap();
    assert!(matches!(r, Err(Error::TargetExited { .. })), "{r:?}");
    assert!(t.elapsed() < 3 * SEC);
}

#[test]
fn call_timeout_abandons_the_call_and_restores_the_thread() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    let short = Options {
        call_timeout: Duration::from_millis(300),
        ..opts()
    };
    let t = Instant::now();
    let r = call(v.pid, &lib, "probe_sleep_ms", &i64s(&[5_000]), &short);
    assert!(matches!(r, Err(Error::CallTimeout { .. })), "{r:?}");
    assert!(t.elapsed() < 2 * SEC, "took {:?}", t.elapsed());
    eprintln!("{}", r.unwrap_err());
    // The victim runs on at once (it does not sleep out the abandoned 5 s).
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 5, SEC), "victim resumed its loop");
    assert!(v.alive());
    assert_eq!(v.bad(), None);
    // Its own interrupted nanosleep failed with EINTR at most once.
    assert!(v.last("intr").unwrap() <= 1);
    // Also with a spin (no restartable sleep in our call): no EINTR at all.
    let intr = v.last("intr").unwrap();
    let r = call(v.pid, &lib, "probe_spin_ms", &i64s(&[5_000]), &short);
    assert!(matches!(r, Err(Error::CallTimeout { .. })), "{r:?}");
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 5, SEC));
    assert_eq!(v.last("intr"), Some(intr));
    // The library is still loaded and usable, and can be unloaded.
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[1, 2]), &opts()).unwrap(),
        1003
    );
    unload(v.pid, &lib, &opts()).unwrap();
    assert!(!v.maps().contains("/memfd:"));
    assert_eq!(anon_exec(&v.maps()), 0);
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 3, SEC));
    assert_eq!(v.bad(), None);
}

#[test]
fn fault_in_our_code_is_not_delivered() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    let t = Instant::now();
    match call(v.pid, &lib, "probe_crash", &[], &opts()) {
        Err(Error::RemoteFault { signal, addr, .. }) => {
            assert_eq!(signal, libc::SIGSEGV);
            assert_eq!(addr, 16);
        }
        other => panic!("expected RemoteFault, got {other:?}"),
    }
    assert!(
        t.elapsed() < SEC,
        "reported at once, not after the call timeout"
    );
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[1, 2]), &opts()).unwrap(),
        1003
    );
    unload(v.pid, &lib, &opts()).unwrap();
    assert_healthy(&mut v);
    assert_eq!(v.last("intr"), Some(0));
}

#[test]
fn group_stop_during_injection_does_not_hang() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let pid = v.pid;
    let lib = load(pid, &probe1(), &opts()).unwrap();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: kill with a valid signal number.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    });
    let t = Instant::now();
    assert_eq!(
        call(pid, &lib, "probe_spin_ms", &i64s(&[300]), &opts()).unwrap(),
        2
    );
    stopper.join().unwrap();
    assert!(t.elapsed() < 2 * SEC);
    // The SIGSTOP took effect once we let go.
    let end = Instant::now() + 2 * SEC;
    while state(pid) != Some('T') && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(state(pid), Some('T'), "victim is stopped as asked");
    // Injecting into a stopped process works too, and leaves it stopped.
    assert_eq!(
        call(pid, &lib, "probe_add", &i64s(&[2, 2]), &opts()).unwrap(),
        1004
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(state(pid), Some('T'), "still stopped after the call");
    // SAFETY: kill with a valid signal number.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    unload(pid, &lib, &opts()).unwrap();
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 3, 2 * SEC));
    assert!(v.alive());
    assert_eq!(v.bad(), None);
}
