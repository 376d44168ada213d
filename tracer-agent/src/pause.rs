//! CUPTI between sampled windows (`--gpu-time-share`): finalized, not just
//! disabled. On a 2-rank DDP job on 2 H200s, the steps made between
//! windows while CUPTI was only disabled (still subscribed) took 9.0%
//! longer (median of 10 windows and ranks, each +6% or more) than those
//! of windows traced by the probes alone; once finalized between windows,
//! 1.7% with a 100-ms grace and −0.2% with the 50-ms grace of now
//! (`bench/gpu/gpu_time/share_cost.sh` with `SPLIT=1`). Subscribing
//! and enabling again after a finalize takes 12–18 ms of the agent
//! thread; the finalize 3.5–5 ms of the thread whose API exit it runs in
//! (`bench/gpu/gpu_time/cupti_states.py`). So at a window's end the agent
//! disables the kinds and the API callbacks ([`begin`]), lets the window's
//! records come for a grace ([`arm`]: then a forced flush), and CUPTI is
//! finalized at the next driver API exit (`callbacks::pause_at_exit`, as
//! the detach does it); at the next window's start it subscribes and enables
//! again ([`resume_if_off`]). A window whose start finds the finalize
//! still pending (no CUDA call since) is skipped.
//!
//! Records carry the epoch they were made in (`Header::pauses`), as CUPTI
//! may number correlation ids again after a finalize.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use tracer_common::gpu::{ClockKind, API_CBIDS, RUNTIME_API_CBIDS};

use crate::callbacks;
use crate::cupti_abi::{
    CuptiResult, ACTIVITY_FLAG_FLUSH_FORCED, CB_DOMAIN_DRIVER_API, CB_DOMAIN_RUNTIME_API,
    CUPTI_SUCCESS,
};
use crate::state::Agent;
use crate::sys;

pub(crate) use crate::state::{
    PAUSE_ARMED as ARMED, PAUSE_DRAINING as DRAINING, PAUSE_FINALIZING as FINALIZING,
    PAUSE_OFF as OFF, PAUSE_ON as ON,
};

/// A window's end: nothing more collected (records of work launched in
/// the window still come while `DRAINING`).
pub(crate) fn begin(a: &Agent) {
    // SAFETY: subscribed (the state is ON).
    unsafe { a.callbacks_off() };
    a.disable_kinds();
    a.pause.store(DRAINING, Release);
}

/// After the grace: the window's records flushed, the finalize armed.
pub(crate) fn arm(a: &Agent) {
    if a.pause.load(Acquire) != DRAINING {
        return;
    }
    a.flush(0);
    a.flush(ACTIVITY_FLAG_FLUSH_FORCED);
    a.pause.store(ARMED, Release);
    // Every driver cbid: any driver API exit will do.
    // SAFETY: resolved CUPTI function; our subscriber (not finalized yet).
    unsafe { (a.cupti.enable_domain)(1, a.subscriber(), CB_DOMAIN_DRIVER_API) };
}

/// What a window's start found.
pub(crate) enum Resume {
    /// Collecting again.
    On,
    /// The last window's finalize is still pending: this one is skipped.
    NotYet,
    /// CUPTI could not be switched on again (said in the header).
    Failed,
}

/// A window's start: subscribes and enables again if CUPTI is finalized.
pub(crate) fn resume_if_off(a: &Agent) -> Resume {
    if a.pause.load(Acquire) != OFF {
        return Resume::NotYet;
    }
    // SAFETY: CUPTI is finalized: it holds no pool buffer and runs none
    // of our callbacks.
    unsafe { a.pool.reclaim_all() };
    a.header().pauses.fetch_add(1, Release);
    match subscribe_and_enable(a) {
        Ok(()) => {
            a.pause.store(ON, Release);
            Resume::On
        }
        Err((r, what, subscribed)) => {
            a.header().resume_error.store(1 + u64::from(r), Release);
            a.say(what, r, "");
            if subscribed {
                // Let go again the way a window's end does.
                begin(a);
                arm(a);
            }
            Resume::Failed
        }
    }
}

/// As the start does it: subscribe, the clock, the buffer callbacks, the
/// kinds, the API callbacks. On failure, what failed and whether the
/// agent is subscribed.
fn subscribe_and_enable(a: &Agent) -> Result<(), (CuptiResult, &'static str, bool)> {
    let mut sub = core::ptr::null_mut();
    // SAFETY: resolved cuptiSubscribe; `sub` is a valid out-pointer.
    let r =
        unsafe { (a.cupti.subscribe)(&mut sub, callbacks::api_callback, core::ptr::null_mut()) };
    if r != CUPTI_SUCCESS {
        return Err((r, "cuptiSubscribe", false));
    }
    a.subscriber.store(sub, Release);
    a.pause.store(DRAINING, Release);
    if a.header().clock.load(Acquire) == ClockKind::Monotonic as u32 {
        if let Some(f) = a.cupti.register_timestamp {
            // SAFETY: resolved CUPTI function; our callback never unwinds.
            let r = unsafe { f(callbacks::timestamp) };
            if r != CUPTI_SUCCESS {
                return Err((r, "cuptiActivityRegisterTimestampCallback", true));
            }
        }
    }
    // SAFETY: resolved CUPTI function; our callbacks never unwind.
    let r = unsafe {
        (a.cupti.register_callbacks)(callbacks::buffer_requested, callbacks::buffer_completed)
    };
    if r != CUPTI_SUCCESS {
        return Err((r, "cuptiActivityRegisterCallbacks", true));
    }
    for &k in &a.cupti_kinds[..a.n_cupti_kinds] {
        // SAFETY: resolved CUPTI function, a kind the start enabled.
        let r = unsafe { (a.cupti.enable)(k) };
        if r != CUPTI_SUCCESS {
            return Err((r, "cuptiActivityEnable", true));
        }
    }
    if a.api_kinds {
        a.api_records.store(true, Release);
        a.enable_cbids(CB_DOMAIN_DRIVER_API, API_CBIDS);
        a.enable_cbids(CB_DOMAIN_RUNTIME_API, RUNTIME_API_CBIDS);
    }
    Ok(())
}

/// Where a detach finds CUPTI.
pub(crate) enum AtDetach {
    /// Subscribed (a pending finalize is called off): the detach lets go.
    Subscribed,
    /// Already finalized between windows: only the cleanup is left.
    Finalized,
}

/// Settles the pause for a detach: a pending finalize is called off (the
/// detach arms its own), a running one is waited for.
pub(crate) fn settle_for_detach(a: &Agent) -> AtDetach {
    loop {
        match a.pause.load(Acquire) {
            ON | DRAINING => return AtDetach::Subscribed,
            ARMED => {
                if a.pause.compare_exchange(ARMED, ON, AcqRel, Relaxed).is_ok() {
                    return AtDetach::Subscribed;
                }
            }
            FINALIZING => sys::sleep_ms(1),
            _ => return AtDetach::Finalized,
        }
    }
}
