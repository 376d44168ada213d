//! The functions CUPTI calls: buffer requested / completed, the timestamp
//! callback, and the API callback (API records of the chosen functions;
//! CUPTI finalized at an API exit during a detach). Each body is under `catch_unwind` (a panic never
//! unwinds into CUPTI or the target) and none allocates.

use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tracer_common::gpu::{
    AgentState, ApiRecord, Common, Record, API_DOMAIN_DRIVER, API_DOMAIN_RUNTIME,
};

use crate::cupti_abi::{CallbackData, API_ENTER, API_EXIT};
use crate::state::{Agent, Guard, FINALIZED, PAUSE_ARMED, PAUSE_FINALIZING, PAUSE_OFF, WAITING};
use crate::{convert, state, sys};

/// `CUpti_BuffersCallbackRequestFunc`: a pool buffer, or none (CUPTI then
/// drops records and counts them).
pub(crate) unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if buffer.is_null() || size.is_null() {
            return;
        }
        let g = Guard::enter();
        let got = g.agent().and_then(|a| match a.pool.take() {
            Some(b) => Some((b, a.pool.buffer_size())),
            None => {
                a.header().buffers_refused.fetch_add(1, Relaxed);
                None
            }
        });
        let (b, n) = got.unwrap_or((core::ptr::null_mut(), 0));
        // SAFETY: CUPTI passes valid out-pointers (checked non-null above).
        unsafe {
            *buffer = b;
            *size = n;
            if !max_records.is_null() {
                *max_records = 0;
            }
        }
    }));
}

/// `CUpti_BuffersCallbackCompleteFunc`: converts the buffer's records into
/// the ring, then gives the buffer back to the pool.
pub(crate) unsafe extern "C" fn buffer_completed(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let g = Guard::enter();
        let Some(a) = g.agent() else { return };
        if !a.pool.contains(buffer, valid) {
            return;
        }
        // SAFETY: CUPTI hands back a pool buffer (checked) with `valid`
        // bytes of records.
        unsafe { convert::drain(a, buffer, valid) };
        a.header().buffers_completed.fetch_add(1, Relaxed);
        a.pool.give_back(buffer);
    }));
}

/// `CUpti_TimestampCallbackFunc`: `CLOCK_MONOTONIC`, the eBPF probes' clock.
pub(crate) unsafe extern "C" fn timestamp() -> u64 {
    catch_unwind(sys::monotonic_ns).unwrap_or(0)
}

/// Longest call an API record is kept for: a start older than this is not
/// the entry callback's (the callback was switched on mid-call).
const MAX_CALL_NS: u64 = 3_600_000_000_000;

thread_local! {
    /// This thread's Linux tid (0: not read yet). No destructor, so no TLS
    /// destructor is registered in the target's threads.
    static TID: Cell<u32> = const { Cell::new(0) };
}

fn tid() -> u32 {
    TID.with(|t| match t.get() {
        0 => {
            let v = sys::gettid();
            t.set(v);
            v
        }
        v => v,
    })
}

/// `CUpti_CallbackFunc`, for the driver and runtime cbids of the launch,
/// copy, memset and graph-launch functions (`API_CBIDS`,
/// `RUNTIME_API_CBIDS`): the entry callback keeps the start in the call's
/// correlation data, the exit callback writes an API record. While
/// detaching, enabled for every driver cbid only: at the first driver API exit,
/// unsubscribe and finalize CUPTI (CUPTI's dynamic detach), then hand
/// cleanup to the agent thread, or do it here if the thread stopped waiting.
/// Between sampled windows, the same finalize without the cleanup
/// (`crate::pause`).
pub(crate) unsafe extern "C" fn api_callback(
    _ud: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if data.is_null() || !(domain == API_DOMAIN_DRIVER || domain == API_DOMAIN_RUNTIME) {
            return;
        }
        // SAFETY: CUPTI passes a CUpti_CallbackData for the API domains,
        // valid for the callback's duration.
        let d = unsafe { &*data.cast::<CallbackData>() };
        let g = Guard::enter();
        let Some(a) = g.agent() else { return };
        if a.finalize_armed.load(Acquire) {
            if domain == API_DOMAIN_DRIVER {
                finalize_at_exit(a, d, g);
            }
        } else if a.pause.load(Acquire) == PAUSE_ARMED {
            if domain == API_DOMAIN_DRIVER && d.callback_site == API_EXIT {
                pause_at_exit(a);
            }
        } else if a.api_records.load(Relaxed) {
            api_record(a, domain, cbid, d);
        }
    }));
}

/// The API record of one call, on the records' clock (CUPTI's, which is
/// `CLOCK_MONOTONIC` unless the timestamp callback was refused).
fn api_record(a: &Agent, domain: u32, cbid: u32, d: &CallbackData) {
    if d.correlation_data.is_null() {
        return;
    }
    let h = a.header();
    let now = sys::monotonic_ns().wrapping_add_signed(-h.clock_offset_ns.load(Relaxed));
    if d.callback_site == API_ENTER {
        // SAFETY: CUPTI's eight bytes for this call, kept until its exit.
        unsafe { d.correlation_data.write(now) };
        return;
    }
    if d.callback_site != API_EXIT {
        return;
    }
    // SAFETY: as above; written by this call's entry callback, unless the
    // callback was switched on mid-call (then any value: checked below).
    let start = unsafe { d.correlation_data.read() };
    if start == 0 || start > now || now - start > MAX_CALL_NS {
        h.records_skipped.fetch_add(1, Relaxed);
        return;
    }
    let result = if d.function_return_value.is_null() {
        0
    } else {
        // SAFETY: at exit, CUPTI points it at the call's 4-byte result.
        unsafe { d.function_return_value.cast::<u32>().read_unaligned() }
    };
    let r = Record::Api(ApiRecord {
        common: Common {
            flags: convert::flags(start, now, h.pauses.load(Relaxed)),
            correlation: d.correlation_id,
            start,
            end: now,
            ..Common::default()
        },
        cbid,
        tid: tid(),
        pid: h.pid.load(Relaxed),
        result,
        domain,
    });
    a.with_producer(|p| p.writer.push(&r.to_bytes()));
}

/// During a detach: the first API exit unsubscribes and finalizes.
fn finalize_at_exit(a: &Agent, d: &CallbackData, g: Guard) {
    if d.callback_site != API_EXIT || a.finalize_claimed.swap(true, AcqRel) {
        return;
    }
    let_go(a);
    a.set_state(AgentState::Finalized);
    if a.handoff
        .compare_exchange(WAITING, FINALIZED, AcqRel, Relaxed)
        .is_err()
    {
        // The agent thread gave up waiting: clean up here. This
        // callback's own guard is the one allowed in flight.
        drop(g);
        state::cleanup(0);
    }
}

/// Between two sampled windows (`crate::pause`), in a driver API exit
/// callback while the finalize is armed: unsubscribe and finalize (one
/// callback does it); the agent subscribes again for the next window.
fn pause_at_exit(a: &Agent) {
    if a.pause
        .compare_exchange(PAUSE_ARMED, PAUSE_FINALIZING, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    let_go(a);
    a.pause.store(PAUSE_OFF, Release);
}

/// Unsubscribes and finalizes CUPTI, from an API-exit callback (CUPTI's
/// dynamic detach), for a detach or between two sampled windows.
fn let_go(a: &Agent) {
    // SAFETY: our subscriber; CUPTI allows both calls from an API-exit callback.
    unsafe {
        (a.cupti.unsubscribe)(a.subscriber());
        (a.cupti.finalize)();
    }
}
