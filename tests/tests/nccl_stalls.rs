//! NCCL stalls across ranks (issue 26 item 9), beside nccl_ranks.rs: two
//! simulated ranks started with --pid (no torchrun); one is stopped (one
//! stall line naming it, and its end) or SIGKILLed (said to have exited,
//! and how).

use std::path::Path;
use std::time::Duration;

use gputrace_tests::*;

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

const COLLECTIVE_STALL: &str = "gputrace: NCCL stall: communicator ";

/// Two ranks, rank 1 slowed (10 ms before each collective, outside NCCL)
/// so the run is long, and stopped by itself (`--sigstop-at 20`: a
/// SIGSTOP it raises just before its collective 20, outside every NCCL
/// call; a signal sent from here could land inside a blocking collective
/// of the simulated libnccl, which is another stall: every rank inside);
/// started with --pid, without torchrun.
fn stopped_pair(dir: &Path) -> (Vec<Workload>, Tracer) {
    let r0: &[&str] = &["--nccl", "100000"];
    let r1: &[&str] = &["--nccl", "100000", "--late-ms", "10", "--sigstop-at", "20"];
    let mut ws = nccl_ranks(2, &dir.join("id"), &[r0, r1]);
    let t = Tracer::attach(&[
        "--pid",
        &pids_of(&ws),
        "--nccl-stall",
        "1s",
        "--summary",
        "text",
    ]);
    for w in ws.iter_mut() {
        w.go();
    }
    ws[1]
        .stdout
        .wait_for("nccl sigstop seq=20 ", Duration::from_secs(20));
    (ws, t)
}

fn signal(w: &Workload, sig: i32) {
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(w.pid as i32, sig) };
}

/// Issue 26 item 9: a rank SIGSTOPped is one stall (not one per collective
/// it holds up), named with its rank and the collectives it holds up, and
/// said over, naming the rank, once SIGCONT lets it enter them.
#[test]
fn a_sigstopped_rank_is_one_stall_and_its_end() {
    let dir = scratch("nccl-sigstop");
    let (ws, mut t) = stopped_pair(&dir);
    let line = t.stderr.wait_for(COLLECTIVE_STALL, Duration::from_secs(20));
    let want = format!(
        "rank 1 (pid {} on {}) has not entered",
        ws[1].pid,
        hostname()
    );
    assert!(line.contains(&want), "{line}");
    let id = line[COLLECTIVE_STALL.len()..]
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let seq = line
        .split(" seq ")
        .nth(1)
        .unwrap()
        .split([':', '.', ' '])
        .next()
        .unwrap();
    // A few more checks: nothing more said while it is stopped.
    std::thread::sleep(Duration::from_millis(1500));
    signal(&ws[1], libc::SIGCONT);
    let over = t
        .stderr
        .wait_for("gputrace: NCCL stall over", Duration::from_secs(20));
    let over_want =
        format!("gputrace: NCCL stall over: communicator {id} rank 1: entered AllReduce seq {seq}");
    assert!(over.starts_with(&over_want), "{over}\nwanted {over_want}");
    for w in &ws {
        signal(w, libc::SIGTERM);
    }
    for w in ws {
        let _ = w.finish();
    }
    let f = t.finish(Duration::from_secs(60));
    let all = f.stderr_text();
    assert_eq!(all.matches(COLLECTIVE_STALL).count(), 1, "{all}");
    assert_eq!(
        all.matches("gputrace: NCCL stall over:").count(),
        1,
        "{all}"
    );
}

/// Issue 26 item 9: a rank SIGKILLed is not merely late: the stall says
/// its process exited, and by SIGKILL (read while it is a zombie); the
/// summary's stall says it too.
#[test]
fn a_killed_rank_is_said_to_have_exited() {
    let dir = scratch("nccl-sigkill");
    let (mut ws, mut t) = stopped_pair(&dir);
    let victim = ws.pop().unwrap();
    signal(&victim, libc::SIGKILL);
    // Not waited for yet: a zombie whose status gputrace can read.
    let line = t.stderr.wait_for(COLLECTIVE_STALL, Duration::from_secs(20));
    let line = if line.contains("exited at") {
        line
    } else {
        // Said first as a stall, then again once the exit is found.
        t.stderr.wait_for(COLLECTIVE_STALL, Duration::from_secs(20))
    };
    let want = format!(
        "rank 1 (pid {} on {}) has not entered ",
        victim.pid,
        hostname()
    );
    assert!(line.contains(&want), "{line}\nwanted {want}");
    assert!(line.contains(": its process exited at "), "{line}");
    assert!(
        line.contains(" UTC, killed by SIGKILL; rank 0 (pid "),
        "{line}"
    );
    let (status, _) = victim.finish();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    signal(&ws[0], libc::SIGTERM);
    for w in ws {
        let _ = w.finish();
    }
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(f.stdout.contains("killed by SIGKILL"), "{}", f.stdout);
}
