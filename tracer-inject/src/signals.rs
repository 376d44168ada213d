//! Handing back signals that arrived while our code ran in the target and
//! were suppressed (a handler must not run in the middle of our call).
//!
//! They are sent again to the same thread after it is detached, in order:
//! queued signals (sigqueue, timers, ...) with their original siginfo through
//! rt_tgsigqueueinfo, the others with tgkill (the receiver then sees us as
//! the sender). A standard signal is not queued twice by the kernel, so
//! before sending the same standard signal again we wait (up to 250 ms)
//! until the previous one has been taken.

use std::time::{Duration, Instant};

use crate::procfs;

const SI_TKILL: i32 = -6;

fn send(pid: i32, tid: i32, info: &libc::siginfo_t) -> bool {
    let sig = info.si_signo;
    if info.si_code < 0 && info.si_code != SI_TKILL {
        // SAFETY: the kernel copies the siginfo_t we point at.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                pid,
                tid,
                sig,
                info as *const libc::siginfo_t,
            )
        };
        if r == 0 {
            return true;
        }
    }
    // SAFETY: tgkill takes only integers.
    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) == 0 }
}

pub(crate) fn redeliver(pid: i32, tid: i32, signals: Vec<libc::siginfo_t>) {
    for (i, info) in signals.iter().enumerate() {
        let sig = info.si_signo;
        if !send(pid, tid, info) {
            return; // the thread is gone
        }
        let again = signals[i + 1..].iter().any(|s| s.si_signo == sig);
        if again && sig < libc::SIGRTMIN() {
            let deadline = Instant::now() + Duration::from_millis(250);
            while procfs::signal_pending(pid, tid, sig) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
