//! gputrace's GPU-time agent: a shared library that gputrace loads into an
//! already-running CUDA process. It subscribes to the process's own CUPTI,
//! collects kernel, memcpy, memset and driver-API activity records, and
//! hands them to gputrace through a shared-memory ring
//! (`tracer_common::gpu`). DESIGN.md explains every decision.
//!
//! Exported (C ABI):
//! - `int64_t gputrace_agent_start(const struct AgentArgs *)`: the memfd
//!   number (≥ 0), or `-(reason | detail << 16)` (`tracer_common::gpu::AgentError`).
//! - `int64_t gputrace_agent_join(const void *unused)`: joins the agent
//!   thread; 0 when nothing of the agent runs any more (the library may be
//!   unloaded), else negative (`NotFinalized`: keep the library loaded;
//!   `NotStarted`).
//! - `uint64_t gputrace_agent_handle`: gputrace stores its dlopen handle
//!   here, so that a later gputrace can find and unload a copy left behind.

mod callbacks;
mod convert;
mod cupti_abi;
mod cupti_lib;
mod detach;
mod names;
mod pause;
mod pool;
mod sample;
mod start;
mod state;
mod sys;

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tracer_common::gpu::{encode_error, AgentArgs, AgentError};

use state::{EVER_STARTED, IDLE, PHASE, PINNED, STARTING, THREAD};

/// The dlopen handle gputrace got for this library (written by gputrace).
#[no_mangle]
pub static gputrace_agent_handle: AtomicU64 = AtomicU64::new(0);

/// Starts the agent (see the crate docs). Safe to call from any thread of
/// the target; a panic is caught and reported as `AgentError::Panic`.
///
/// # Safety
/// `args` must be null or point to a readable `AgentArgs`.
#[no_mangle]
pub unsafe extern "C" fn gputrace_agent_start(args: *const AgentArgs) -> i64 {
    if args.is_null() {
        return encode_error(AgentError::BadArgs, 0);
    }
    // SAFETY: the caller's contract; copied before use (gputrace may free it).
    let args: AgentArgs = unsafe { core::ptr::read_unaligned(args) };
    if PHASE
        .compare_exchange(IDLE, STARTING, SeqCst, SeqCst)
        .is_err()
    {
        return encode_error(AgentError::Busy, 0);
    }
    EVER_STARTED.store(true, SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| start::start(&args)));
    match r {
        // `start` moved PHASE to ACTIVE before starting the thread.
        Ok(Ok(fd)) => fd,
        Ok(Err((e, detail))) => {
            // A failure after subscribing has moved PHASE to PINNED (CUPTI
            // finalizes at the next API exit, then cleanup makes it IDLE);
            // an earlier one undid everything.
            let _ = PHASE.compare_exchange(STARTING, IDLE, SeqCst, SeqCst);
            encode_error(e, detail)
        }
        Err(_) => {
            // Where it panicked is unknown: never allow an unload.
            PHASE.store(PINNED, SeqCst);
            encode_error(AgentError::Panic, 0)
        }
    }
}

/// Joins the agent thread (gputrace calls it after asking the agent to
/// stop, before dlclose). Blocks while the agent is running: send STOP (or
/// close the pipe) first.
///
/// # Safety
/// Must not be called on the agent thread. The argument is ignored.
#[no_mangle]
pub unsafe extern "C" fn gputrace_agent_join(_unused: *const c_void) -> i64 {
    catch_unwind(|| {
        let t = THREAD.swap(0, SeqCst);
        if t != 0 {
            // SAFETY: `t` is the agent thread, created joinable by `start`
            // and joined only here (the swap above makes that once).
            unsafe { libc::pthread_join(t, core::ptr::null_mut()) };
        }
        match PHASE.load(SeqCst) {
            IDLE if EVER_STARTED.load(SeqCst) => 0,
            IDLE => encode_error(AgentError::NotStarted, 0),
            _ => encode_error(AgentError::NotFinalized, 0),
        }
    })
    .unwrap_or(encode_error(AgentError::Panic, 0))
}
