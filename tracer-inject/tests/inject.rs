//! Injection into real victim processes: load, call, unload, repeated,
//! two libraries at once, a failing dlopen, another mount namespace.
//! Needs root (or ptrace rights over children) and `cc`.

#![allow(clippy::print_stderr)] // tests say what they measured

mod common;

use std::time::{Duration, Instant};

use common::*;
use tracer_inject::{call, load, symbol_address, unload, Error};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn load_call_unload_into_sleeping_victim() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(3, 5 * SEC));
    let pid = v.pid;
    tracer_inject::preflight(pid).unwrap();

    let t = Instant::now();
    let lib = load(pid, &probe1(), &opts()).unwrap();
    let t_load = t.elapsed();
    assert_eq!(
        v.marker(),
        format!("loaded {pid} id 1\n"),
        "constructor ran once, in the victim"
    );
    let maps = v.maps();
    let line = maps
        .lines()
        .find(|l| l.contains("/memfd:gputrace-test-probe (deleted)"))
        .expect("library mapped from the memfd");
    assert!(
        line.starts_with(&format!("{:x}-", lib.base)),
        "base is the first mapping: {line}"
    );
    assert!(lib.path.starts_with("/proc/self/fd/"), "{}", lib.path);

    let t = Instant::now();
    assert_eq!(
        call(pid, &lib, "probe_add", &i64s(&[40, 2]), &opts()).unwrap(),
        1042
    );
    let t_call = t.elapsed();
    assert_eq!(
        call(pid, &lib, "probe_add", &i64s(&[-7, 5]), &opts()).unwrap(),
        998
    );
    assert_eq!(
        call(pid, &lib, "probe_calls", &[], &opts()).unwrap(),
        2,
        "state kept between calls"
    );
    assert_eq!(
        call(pid, &lib, "probe_getpid", &[], &opts()).unwrap(),
        pid as i64
    );
    assert_eq!(
        call(pid, &lib, "probe_is_null", &[], &opts()).unwrap(),
        1,
        "empty arg is NULL"
    );
    assert_eq!(
        call(pid, &lib, "probe_aligned", &[1, 2, 3], &opts()).unwrap(),
        1,
        "stack and arg aligned"
    );
    let mut arg = i64s(&[5000]);
    arg.extend((0..5000u32).map(|i| (i % 251) as u8));
    let sum: i64 = (0..5000u32).map(|i| (i % 251) as i64).sum();
    assert_eq!(
        call(pid, &lib, "probe_sum", &arg, &opts()).unwrap(),
        5000 * 1_000_000 + sum
    );
    let addr = symbol_address(pid, &lib, "probe_add").unwrap();
    assert_eq!(
        call(pid, &lib, "probe_self", &[], &opts()).unwrap(),
        addr as i64,
        "symbol_address agrees with dlsym"
    );
    match call(pid, &lib, "no_such_function", &[], &opts()) {
        Err(Error::SymbolNotFound { message, .. }) => {
            assert!(message.contains("no_such_function"), "{message}")
        }
        other => panic!("expected SymbolNotFound, got {other:?}"),
    }

    let t = Instant::now();
    unload(pid, &lib, &opts()).unwrap();
    let t_unload = t.elapsed();
    eprintln!("load {t_load:?}, call {t_call:?}, unload {t_unload:?}");
    assert_eq!(
        v.marker(),
        format!("loaded {pid} id 1\nunloaded {pid} id 1\n")
    );
    assert!(
        !v.maps().contains("/memfd:"),
        "library unmapped after unload"
    );
    assert_eq!(anon_exec(&v.maps()), 0, "no scratch mapping left");
    assert!(matches!(
        unload(pid, &lib, &opts()),
        Err(Error::NotLoaded { .. })
    ));
    assert!(matches!(
        call(pid, &lib, "probe_add", &[], &opts()),
        Err(Error::NotLoaded { .. })
    ));
    assert_eq!(v.marker().lines().count(), 2);

    assert_healthy(&mut v);
    assert_eq!(
        v.last("intr"),
        Some(0),
        "no nanosleep of the victim returned EINTR"
    );
    let ticks: Vec<i64> = v.lines().iter().filter_map(|l| field(l, "tick")).collect();
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "victim's counter stayed in sequence"
    );
}

#[test]
fn twenty_load_unload_cycles() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(2, 5 * SEC));
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", v.pid))
            .unwrap()
            .count()
    };
    let fds_before = fds();
    let t = Instant::now();
    for i in 0..20 {
        let lib = load(v.pid, &probe1(), &opts()).unwrap();
        assert_eq!(
            call(v.pid, &lib, "probe_add", &i64s(&[i, i]), &opts()).unwrap(),
            1000 + 2 * i
        );
        assert_eq!(
            call(v.pid, &lib, "probe_calls", &[], &opts()).unwrap(),
            1,
            "fresh library each cycle"
        );
        unload(v.pid, &lib, &opts()).unwrap();
    }
    eprintln!("20 cycles of load + 2 calls + unload: {:?}", t.elapsed());
    let marker = v.marker();
    assert_eq!(
        marker.lines().filter(|l| l.starts_with("loaded")).count(),
        20
    );
    assert_eq!(
        marker.lines().filter(|l| l.starts_with("unloaded")).count(),
        20
    );
    assert!(!v.maps().contains("/memfd:"));
    assert_eq!(anon_exec(&v.maps()), 0, "no scratch mapping left");
    assert_eq!(fds(), fds_before, "no descriptor leaked into the victim");
    assert_healthy(&mut v);
    assert_eq!(v.last("intr"), Some(0));
}

#[test]
fn failing_dlopen_reports_dlerror_and_leaves_nothing_behind() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(2, 5 * SEC));
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", v.pid))
            .unwrap()
            .count()
    };
    let fds_before = fds();
    let bad = common::Library {
        bytes: &built().bad_probe,
        name: "gputrace-bad",
    };
    match load(v.pid, &bad, &opts()) {
        Err(Error::DlopenFailed { message, path, .. }) => {
            assert!(message.contains("gputrace_missing_function"), "{message}");
            assert!(path.starts_with("/proc/self/fd/"), "{path}");
        }
        other => panic!("expected DlopenFailed, got {other:?}"),
    }
    assert_eq!(v.marker(), "", "constructor did not run");
    assert_eq!(fds(), fds_before, "memfd closed again");
    assert!(!v.maps().contains("/memfd:"));
    assert_eq!(anon_exec(&v.maps()), 0);
    // The victim is fine and can still be injected.
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    unload(v.pid, &lib, &opts()).unwrap();
    assert_healthy(&mut v);
    assert_eq!(v.last("intr"), Some(0));
}

/// A victim in its own mount namespace in which the C library's directory
/// is hidden under an empty tmpfs (as in a container whose files differ from
/// the host's): the symbols are read through /proc/PID/map_files and the
/// library goes in through a memfd, so nothing depends on the paths.
#[test]
fn victim_in_another_mount_namespace() {
    let unshare = std::path::Path::new("/usr/bin/unshare");
    if !unshare.exists() {
        eprintln!("SKIPPED: no unshare(1)");
        return;
    }
    let exe = built().victim.to_str().unwrap().to_string();
    let mut v = Victim::spawn(
        unshare,
        &["--mount", "--propagation", "private", &exe, "sleep"],
    );
    assert!(v.wait_tick(1, 5 * SEC));
    let libc_map = v
        .maps()
        .lines()
        .find(|l| l.contains("/libc.so.6"))
        .unwrap()
        .to_string();
    let libc_path = libc_map.split_whitespace().last().unwrap().to_string();
    let libc_dir = std::path::Path::new(&libc_path)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let ok = std::process::Command::new("nsenter")
        .args([
            "-t",
            &v.pid.to_string(),
            "-m",
            "mount",
            "-t",
            "tmpfs",
            "tmpfs",
            &libc_dir,
        ])
        .status()
        .unwrap();
    assert!(ok.success());
    let seen_by_victim = format!("/proc/{}/root{libc_path}", v.pid);
    assert!(
        !std::path::Path::new(&seen_by_victim).exists(),
        "libc hidden in the victim's namespace"
    );
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    assert_eq!(
        call(v.pid, &lib, "probe_add", &i64s(&[20, 22]), &opts()).unwrap(),
        1042
    );
    unload(v.pid, &lib, &opts()).unwrap();
    assert_eq!(
        v.marker(),
        format!("loaded {0} id 1\nunloaded {0} id 1\n", v.pid)
    );
    assert_healthy(&mut v);
}

#[test]
fn two_libraries_at_once() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(2, 5 * SEC));
    let a = load(v.pid, &probe1(), &opts()).unwrap();
    let b = load(v.pid, &probe2(), &opts()).unwrap();
    assert_ne!(a.handle, b.handle);
    assert_ne!(a.base, b.base);
    // Both memfds got the same descriptor number; glibc would have handed
    // back the first library for the same path string.
    assert_eq!(a.path.rsplit('/').next(), b.path.rsplit('/').next());
    assert_ne!(a.path, b.path, "second load spelled its path differently");
    assert_eq!(
        call(v.pid, &a, "probe_add", &i64s(&[1, 1]), &opts()).unwrap(),
        1002
    );
    assert_eq!(
        call(v.pid, &b, "probe_add", &i64s(&[1, 1]), &opts()).unwrap(),
        2002
    );
    unload(v.pid, &a, &opts()).unwrap();
    assert_eq!(
        call(v.pid, &b, "probe_add", &i64s(&[1, 1]), &opts()).unwrap(),
        2002
    );
    unload(v.pid, &b, &opts()).unwrap();
    let pid = v.pid;
    assert_eq!(
        v.marker(),
        format!("loaded {pid} id 1\nloaded {pid} id 2\nunloaded {pid} id 1\nunloaded {pid} id 2\n")
    );
    assert!(!v.maps().contains("/memfd:"));
    assert_healthy(&mut v);
}
