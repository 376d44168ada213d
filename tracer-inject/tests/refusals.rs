//! Refusals: each is a clear error, and the victim is left untouched (alive,
//! its loop undisturbed, no library constructor run, not traced afterwards).

#![allow(clippy::print_stderr)] // tests say what they measured

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tracer_inject::{load, preflight, Error, Library};

const SEC: Duration = Duration::from_secs(1);

fn tracer_pid(pid: i32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("TracerPid:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn assert_untouched(v: &mut Victim) {
    assert!(v.alive(), "victim died");
    assert!(v.wait_tick(0, 5 * SEC));
    let tick = v.last("tick").unwrap();
    assert!(v.wait_tick(tick + 3, 5 * SEC), "victim stopped ticking");
    assert_eq!(v.bad(), None);
    assert_eq!(v.last("intr"), Some(0), "victim's sleep was not disturbed");
    assert_eq!(v.marker(), "", "no constructor ran");
    assert!(!v.maps().contains("/memfd:"));
    assert_eq!(anon_exec(&v.maps()), 0);
}

#[test]
fn already_traced_by_another_tracer() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let mut holder = Command::new(&built().holder)
        .arg(v.pid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    let holder_pid = holder.id() as i32;
    let expect = |r: Result<(), Error>| match r {
        Err(Error::AlreadyTraced { tracer, .. }) => assert_eq!(tracer, holder_pid),
        other => panic!("expected AlreadyTraced, got {other:?}"),
    };
    expect(preflight(v.pid));
    expect(load(v.pid, &probe1(), &opts()).map(drop));
    eprintln!("{}", load(v.pid, &probe1(), &opts()).unwrap_err());
    assert_eq!(tracer_pid(v.pid), holder_pid as i64);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_untouched(&mut v);
    assert_eq!(tracer_pid(v.pid), 0);
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops CAP_SYS_PTRACE from the calling thread only (capabilities are per
/// thread; the raw syscall does not broadcast to other threads).
fn drop_cap_sys_ptrace_in_this_thread() {
    let mut hdr = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs.
    unsafe {
        assert_eq!(
            libc::syscall(
                libc::SYS_capget,
                &mut hdr as *mut CapHeader,
                data.as_mut_ptr()
            ),
            0
        );
        let bit = 1u32 << 19;
        data[0].effective &= !bit;
        data[0].permitted &= !bit;
        data[0].inheritable &= !bit;
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()),
            0
        );
    }
}

#[test]
fn no_cap_sys_ptrace() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let pid = v.pid;
    let (pre, loaded) = std::thread::spawn(move || {
        drop_cap_sys_ptrace_in_this_thread();
        (preflight(pid), load(pid, &probe1(), &opts()).map(drop))
    })
    .join()
    .unwrap();
    for r in [pre, loaded] {
        match r {
            Err(Error::PtraceDenied { reason, .. }) => {
                assert!(reason.contains("CAP_SYS_PTRACE"), "{reason}")
            }
            other => panic!("expected PtraceDenied, got {other:?}"),
        }
    }
    assert_untouched(&mut v);
}

#[test]
fn seccomp_filter_that_kills_on_memfd_create() {
    let mut v = Victim::start(&["seccomp-kill"]);
    assert!(v.wait_line(5 * SEC, |l| l == "filtered").is_some());
    assert!(v.wait_tick(1, 5 * SEC));
    preflight(v.pid).unwrap(); // the filter can only be read from a stopped thread
    let r = load(v.pid, &probe1(), &opts());
    match &r {
        Err(Error::SeccompDenied {
            syscall, action, ..
        }) => {
            assert_eq!(syscall, "memfd_create");
            assert!(action.contains("kills the process"), "{action}");
        }
        other => panic!("expected SeccompDenied, got {other:?}"),
    }
    eprintln!("{}", r.unwrap_err());
    assert_untouched(&mut v);
    assert_eq!(tracer_pid(v.pid), 0);
}

#[test]
fn seccomp_clone3_enosys_is_accepted() {
    // Docker's default profile: clone3 fails with ENOSYS so glibc uses clone.
    let mut v = Victim::start(&["seccomp-clone3"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let lib = load(v.pid, &probe1(), &opts()).unwrap();
    tracer_inject::unload(v.pid, &lib, &opts()).unwrap();
    assert_eq!(
        v.marker(),
        format!("loaded {0} id 1\nunloaded {0} id 1\n", v.pid)
    );
    assert!(v.alive());
}

#[test]
fn thirty_two_bit_victim() {
    let exe = match &built().victim32 {
        Ok(exe) => exe.clone(),
        Err(why) => {
            eprintln!("SKIPPED: cannot build a 32-bit victim (install gcc-multilib): {why}");
            return;
        }
    };
    let mut v = Victim::spawn(&exe, &["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    for r in [preflight(v.pid), load(v.pid, &probe1(), &opts()).map(drop)] {
        match r {
            Err(Error::WrongArchitecture { detail, .. }) => {
                assert!(detail.contains("32-bit i386"), "{detail}")
            }
            other => panic!("expected WrongArchitecture, got {other:?}"),
        }
    }
    assert_untouched(&mut v);
}

#[test]
fn thirty_two_bit_victim_without_a_compiler() {
    use std::os::unix::fs::PermissionsExt;
    let path = built().dir.join("tiny-i386");
    std::fs::write(&path, tiny_i386_sleeper()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = match Command::new(&path).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED: this kernel cannot run i386 programs: {e}");
            return;
        }
    };
    let pid = child.id() as i32;
    assert!(
        wait_syscall(pid, 162, 5 * SEC),
        "i386 victim sleeps in nanosleep"
    );
    for r in [preflight(pid), load(pid, &probe1(), &opts()).map(drop)] {
        match r {
            Err(Error::WrongArchitecture { detail, .. }) => {
                assert!(detail.contains("32-bit i386"), "{detail}")
            }
            other => panic!("expected WrongArchitecture, got {other:?}"),
        }
    }
    assert_eq!(state(pid), Some('S'));
    assert_eq!(tracer_pid(pid), 0);
    assert!(matches!(child.try_wait(), Ok(None)), "still running");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn static_victim_has_no_dlopen() {
    let mut v = Victim::spawn(&built().victim_static, &["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    for r in [preflight(v.pid), load(v.pid, &probe1(), &opts()).map(drop)] {
        assert!(matches!(r, Err(Error::NoDlopen { .. })), "{r:?}");
    }
    eprintln!("{}", preflight(v.pid).unwrap_err());
    assert_untouched(&mut v);
}

#[test]
fn bad_inputs() {
    let mut v = Victim::start(&["sleep"]);
    assert!(v.wait_tick(1, 5 * SEC));
    let not_elf = Library {
        bytes: b"not an elf file",
        name: "x",
    };
    assert!(matches!(
        load(v.pid, &not_elf, &opts()),
        Err(Error::BadLibrary(_))
    ));
    let exe = std::fs::read(&built().victim_static).unwrap();
    let not_dyn = Library {
        bytes: &exe,
        name: "x",
    };
    assert!(matches!(
        load(v.pid, &not_dyn, &opts()),
        Err(Error::BadLibrary(_))
    ));
    let bad_name = Library {
        bytes: &built().probe1,
        name: "a\0b",
    };
    assert!(matches!(
        load(v.pid, &bad_name, &opts()),
        Err(Error::BadLibrary(_))
    ));
    assert_untouched(&mut v);
    // No such process; ourselves.
    assert!(matches!(
        preflight(0x3fff_fff0),
        Err(Error::NoSuchProcess { .. })
    ));
    assert!(matches!(preflight(-1), Err(Error::NoSuchProcess { .. })));
    assert!(matches!(
        preflight(std::process::id() as i32),
        Err(Error::PtraceDenied { .. })
    ));
    // A zombie.
    let mut child = Command::new("true").spawn().unwrap();
    let zpid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(100));
    assert!(matches!(preflight(zpid), Err(Error::NoSuchProcess { .. })));
    child.wait().unwrap();
}
