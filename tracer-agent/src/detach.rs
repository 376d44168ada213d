//! The agent thread (flushes, watches the control pipe, runs the sampled
//! windows) and the detach sequence.

use core::ffi::c_void;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tracer_common::gpu::{AgentState, DetachReason, HELLO, STOP};

use crate::cupti_abi::{ACTIVITY_FLAG_FLUSH_FORCED, CB_DOMAIN_DRIVER_API};
use crate::pause;
use crate::sample::Sampler;
use crate::state::{
    self, Agent, FINALIZED, PAUSE_DRAINING, PAUSE_ON, PHASE, PINNED, THREAD_GAVE_UP, WAITING,
};
use crate::sys;

/// Stops the API records: no callback of ours is enabled after it, and
/// none is running (waits up to ~2 s for those that were).
///
/// # Safety
/// The agent must be subscribed.
pub(crate) unsafe fn stop_api_records(a: &Agent) {
    // SAFETY: the caller's promise.
    unsafe { a.callbacks_off() };
    state::drain_guards(0);
}

/// Arms the finalize: the API callback for every driver cbid, so that any
/// driver API exit will do (as when the agent had no callback on before).
///
/// # Safety
/// The agent must be subscribed, its API records stopped.
pub(crate) unsafe fn arm_finalize(a: &Agent) {
    a.finalize_armed.store(true, Release);
    // SAFETY: resolved CUPTI function; our subscriber (the caller's promise).
    unsafe { (a.cupti.enable_domain)(1, a.subscriber(), CB_DOMAIN_DRIVER_API) };
}

/// The agent thread: `arg` is the agent.
pub(crate) extern "C" fn thread_main(arg: *mut c_void) -> *mut c_void {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `start` passes the Box<Agent> it published in AGENT; it
        // is freed only by `cleanup`, which this thread runs or hands off
        // after it stops using `a`.
        let a: &Agent = unsafe { &*(arg as *const Agent) };
        let reason = watch(a);
        detach(a, reason);
    }));
    core::ptr::null_mut()
}

/// Polls the pipe and flushes until a reason to detach.
fn watch(a: &Agent) -> DetachReason {
    let started = sys::monotonic_ns();
    let mut last_flush = started;
    let mut hello = false;
    let flush_ns = a.flush_ms * 1_000_000;
    let mut sampler = Sampler::new(started);
    loop {
        let now = sys::monotonic_ns();
        a.header().heartbeat_ns.store(now, Relaxed);
        let switch_ms = sampler.tick(a, now);
        if now.saturating_sub(last_flush) >= flush_ns {
            // Not while finalized between windows (or about to be): a CUPTI
            // call would start it again.
            if matches!(a.pause.load(Acquire), PAUSE_ON | PAUSE_DRAINING) {
                a.flush(0);
            }
            last_flush = now;
        }
        if !hello && now.saturating_sub(started) >= a.hello_ms * 1_000_000 {
            return DetachReason::NoHello;
        }
        let wait_ms = (flush_ns.saturating_sub(now.saturating_sub(last_flush)) / 1_000_000)
            .max(1)
            .min(switch_ms.unwrap_or(u64::MAX));
        let mut pfd = libc::pollfd {
            fd: a.pipe_rd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, wait_ms.min(i32::MAX as u64) as i32) };
        if r < 0 {
            if sys::errno() == libc::EINTR as u32 {
                continue;
            }
            return DetachReason::PipeError;
        }
        if r == 0 {
            continue;
        }
        let mut buf = [0u8; 64];
        // SAFETY: reading into a local buffer from our pipe's read end.
        let n = unsafe { libc::read(a.pipe_rd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return DetachReason::ReaderGone;
        }
        if n < 0 {
            if sys::errno() == libc::EINTR as u32 {
                continue;
            }
            return DetachReason::PipeError;
        }
        for &b in &buf[..n as usize] {
            if b == HELLO && !hello {
                hello = true;
                // From now on gputrace holds the only write end: its
                // end-of-file is gputrace going away.
                sys::close(state::FD_PIPE_WR.swap(-1, AcqRel));
            } else if b == STOP {
                return DetachReason::Requested;
            }
        }
    }
}

/// API callbacks off (and none running), kinds disabled, forced flush, then
/// finalize at the next driver API exit (CUPTI's
/// dynamic detach). Waits `finalize_ms` for it; if no API exit comes, the
/// API callback finalizes and cleans up later.
fn detach(a: &Agent, reason: DetachReason) {
    a.header().detach_reason.store(reason as u32, Relaxed);
    a.set_state(AgentState::Detaching);
    if let pause::AtDetach::Finalized = pause::settle_for_detach(a) {
        // Finalized between two sampled windows: nothing of CUPTI left.
        a.set_state(AgentState::Finalized);
        state::cleanup(0);
        return;
    }
    // SAFETY: the agent is subscribed until finalized.
    unsafe { stop_api_records(a) };
    a.disable_kinds();
    a.flush(ACTIVITY_FLAG_FLUSH_FORCED);
    // SAFETY: as above; API records stopped.
    unsafe { arm_finalize(a) };
    let deadline = sys::monotonic_ns() + a.finalize_ms * 1_000_000;
    while a.handoff.load(Acquire) != FINALIZED && sys::monotonic_ns() < deadline {
        sys::sleep_ms(2);
    }
    // Not finalized yet: the library must stay loaded until the callback
    // runs (gputrace_agent_join says so). Set before the handoff, as the
    // callback's cleanup moves it to IDLE.
    PHASE.store(PINNED, SeqCst);
    if a.handoff
        .compare_exchange(WAITING, THREAD_GAVE_UP, AcqRel, Acquire)
        .is_ok()
    {
        return;
    }
    state::cleanup(0);
}
