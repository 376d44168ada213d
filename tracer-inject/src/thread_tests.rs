//! Unit tests of `RemoteThread` that need no C victim.

use std::process::Command;
use std::sync::mpsc;

use super::*;

/// PTRACE_SEIZE failing with EPERM (the preflight check passed a moment
/// before, or was not run) is explained: here another thread of ours holds
/// the process.
#[test]
fn seize_eperm_is_explained() {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id() as i32;
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        ptrace::seize(pid, 0).unwrap();
        held_tx.send(()).unwrap();
        let _ = done_rx.recv();
        // The thread's exit detaches it.
    });
    held_rx.recv().unwrap();
    match RemoteThread::seize(pid, &Options::default()) {
        Err(Error::AlreadyTraced { tracer, .. }) => assert_eq!(tracer, std::process::id() as i32),
        Err(other) => panic!("expected AlreadyTraced, got {other:?}"),
        Ok(_) => panic!("expected AlreadyTraced, got a seized thread"),
    }
    done_tx.send(()).unwrap();
    holder.join().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn seize_of_a_missing_process() {
    assert!(matches!(
        RemoteThread::seize(0x3fff_fff0, &Options::default()),
        Err(Error::NoSuchProcess { .. })
    ));
}
