//! Bounded resources and fallbacks: a full ring, CUPTI without buffers,
//! CUPTI's own clock, bad arguments.

use tracer_common::gpu::{encode_error, AgentArgs, AgentError, ClockKind, PROTOCOL_VERSION};

use crate::harness::{sim_dir, start_with_agent, windows};
use crate::*;

/// Tiny ring, reader not reading: what did not fit is counted, and
/// written + dropped = produced.
#[test]
fn ring_overflow_is_counted() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "200",
            "--agent-ring",
            "16",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    let produced = 2 * 200;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ag.snap().records_written + ag.snap().ring_dropped < produced {
        assert!(std::time::Instant::now() < deadline, "{:?}", ag.snap());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = ag.snap();
    assert_eq!(
        (s.records_written, s.ring_dropped, s.cupti_dropped),
        (16, produced - 16, 0)
    );
    assert_eq!(ag.poll(), 16);
    // The first 16 records produced: the API records of the first 16
    // launches, written at each call's exit (kernel records wait in
    // CUPTI's buffer until a flush).
    let sp = split(&ag.records);
    assert_eq!((sp.kernels.len(), sp.apis.len()), (0, 16));
    let mut corr: Vec<u32> = sp.apis.iter().map(|a| a.common.correlation).collect();
    corr.sort();
    assert!(
        corr.windows(2).all(|w| w[1] == w[0] + 1),
        "16 consecutive calls: {corr:?}"
    );
    wl.release();
    assert!(wl.wait(30).0.success());
}

/// One small CUPTI buffer: CUPTI runs out and drops; the agent counts its
/// refusals and CUPTI's drops, and written + CUPTI's dropped = produced.
#[test]
fn cupti_drops_are_counted() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "300",
            "--agent-buffers",
            "1",
            "--agent-buffer-size",
            "4096",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    let produced = 2 * 300;
    ag.poll_until(20, "every record accounted for", |_, s| {
        s.records_written + s.ring_dropped + s.cupti_dropped >= produced
    });
    let s = ag.snap();
    assert!(s.cupti_dropped > 0 && s.buffers_refused > 0, "{s:?}");
    assert_eq!(s.records_written + s.cupti_dropped, produced, "{s:?}");
    assert_eq!(s.ring_dropped, 0);
    wl.release();
    assert!(wl.wait(30).0.success());
}

/// CUPTI refuses the timestamp callback: records stay on CUPTI's clock
/// (CLOCK_REALTIME), and the header's offset brings them onto
/// CLOCK_MONOTONIC within its stated error.
#[test]
fn clock_falls_back_to_calibration() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "20",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[("GPUTRACE_SIM_CUPTI_NO_TIMESTAMP_CALLBACK", "1")],
    );
    let s = ag.snap();
    assert_eq!(s.clock_kind(), Some(ClockKind::Cupti));
    assert!(
        s.clock_error_ns < 1_000_000,
        "bracket {} ns",
        s.clock_error_ns
    );
    // SAFETY: plain clock reads.
    let (mono, real) = unsafe {
        let mut a: libc::timespec = std::mem::zeroed();
        let mut b: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut a);
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut b);
        (
            a.tv_sec as i64 * 1_000_000_000 + a.tv_nsec,
            b.tv_sec as i64 * 1_000_000_000 + b.tv_nsec,
        )
    };
    assert!(
        (s.clock_offset_ns - (mono - real)).abs() < 5_000_000,
        "offset {} vs {}",
        s.clock_offset_ns,
        mono - real
    );
    wl.release();
    wl.line("passes done", 30);
    ag.poll_until(20, "records", |r, _| r.len() >= 40);
    wl.release();
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    let win = windows(&lines);
    let slack = s.clock_error_ns as i64 + 1_000;
    for a in split(&ag.records).apis {
        let (lo, hi) = win[&a.tid];
        let start = a.common.start as i64 + s.clock_offset_ns;
        let end = a.common.end as i64 + s.clock_offset_ns;
        assert!(
            start >= lo as i64 - slack && end <= hi as i64 + slack,
            "API record off the monotonic window"
        );
    }
}

/// A CUPTI older than 13 (other record layouts) is refused before
/// subscribing; the workload runs on untouched.
#[test]
fn an_older_cupti_is_refused() {
    let so = crate::harness::agent_so();
    let mut wl = crate::harness::Workload::spawn(
        &[
            "--load-agent",
            so.to_str().unwrap(),
            "--launches",
            "4",
            "--wait-stdin",
            "--cupti-report",
        ],
        &[("GPUTRACE_SIM_CUPTI_VERSION", "22")],
    );
    assert_eq!(wl.start_rc(), encode_error(AgentError::CuptiVersion, 22));
    assert!(!wl.fd_targets().iter().any(|t| t.contains("gputrace-gpu")));
    wl.release();
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    assert_eq!(lines.last().unwrap(), "done calls=4");
    let cupti = lines.iter().find(|l| l.starts_with("cupti ")).unwrap();
    assert!(cupti.contains(" subscribes=0 "), "{cupti}");
}

/// Arguments are checked before anything is loaded or created.
#[test]
fn bad_arguments_are_refused() {
    let cupti = sim_dir().join("libcupti.so.13");
    let ok = AgentArgs::new(cupti.to_str().unwrap().as_bytes());
    let call = |a: &AgentArgs| {
        // SAFETY: a valid AgentArgs; every case below fails before CUPTI is
        // used (no libcuda is loaded in this process).
        unsafe { gputrace_agent::gputrace_agent_start(a) }
    };
    let mut a = ok;
    a.version = PROTOCOL_VERSION + 1;
    assert_eq!(
        call(&a),
        encode_error(AgentError::BadVersion, PROTOCOL_VERSION + 1)
    );
    for f in [
        |a: &mut AgentArgs| a.ring_capacity = 3,
        |a: &mut AgentArgs| a.ring_capacity = 1 << 40,
        |a: &mut AgentArgs| a.names_size = 8,
        |a: &mut AgentArgs| a.kinds = 0,
        |a: &mut AgentArgs| a.kinds = 1 << 9,
        |a: &mut AgentArgs| a.buffer_count = 65,
        |a: &mut AgentArgs| a.buffer_size = 4097,
        |a: &mut AgentArgs| a.cupti_path = [b'x'; 4096],
        |a: &mut AgentArgs| a.cupti_path[0] = 0,
    ] {
        let mut a = ok;
        f(&mut a);
        assert_eq!(call(&a), encode_error(AgentError::BadArgs, 0));
    }
    let a = AgentArgs::new(b"/nonexistent/libcupti.so.13");
    assert_eq!(call(&a), encode_error(AgentError::CuptiLoad, 0));
    let a = AgentArgs::new(b"libm.so.6");
    assert_eq!(call(&a), encode_error(AgentError::CuptiSymbol, 0));
    // SAFETY: a null pointer is allowed and refused.
    let null = unsafe { gputrace_agent::gputrace_agent_start(std::ptr::null()) };
    assert_eq!(null, encode_error(AgentError::BadArgs, 0));
    // SAFETY: no agent thread exists in this process.
    let join = unsafe { gputrace_agent::gputrace_agent_join(std::ptr::null()) };
    assert_eq!(join, 0, "started and failed: idle");
}
