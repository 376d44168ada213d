//! The functions CUPTI calls: buffer requested / completed, the timestamp
//! callback, and the API callback that finalizes CUPTI at an API exit
//! during a detach. Each body is under `catch_unwind` (a panic never
//! unwinds into CUPTI or the target) and none allocates.

use core::ffi::c_void;
use core::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tracer_common::gpu::AgentState;

use crate::cupti_abi::{API_EXIT, CALLBACK_SITE_OFFSET};
use crate::state::{Guard, FINALIZED, WAITING};
use crate::{convert, detach, sys};

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
        a.with_producer(|p| {
            // SAFETY: CUPTI hands back a pool buffer (checked) with `valid`
            // bytes of records.
            unsafe { convert::drain(&a.cupti, buffer, valid, &mut p.names, &mut p.writer) };
        });
        a.header().buffers_completed.fetch_add(1, Relaxed);
        a.pool.give_back(buffer);
    }));
}

/// `CUpti_TimestampCallbackFunc`: `CLOCK_MONOTONIC`, the eBPF probes' clock.
pub(crate) unsafe extern "C" fn timestamp() -> u64 {
    catch_unwind(sys::monotonic_ns).unwrap_or(0)
}

/// `CUpti_CallbackFunc`, enabled for the driver domain only while detaching:
/// at the first API exit, unsubscribe and finalize CUPTI (CUPTI's dynamic
/// detach), then hand cleanup to the agent thread, or do it here if the
/// thread stopped waiting.
pub(crate) unsafe extern "C" fn api_callback(
    _ud: *mut c_void,
    _domain: u32,
    _cbid: u32,
    data: *const c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let g = Guard::enter();
        let Some(a) = g.agent() else { return };
        if !a.finalize_armed.load(Relaxed) || data.is_null() {
            return;
        }
        // SAFETY: CUPTI passes a CUpti_CallbackData; its first field is the site.
        let site = unsafe {
            data.cast::<u8>()
                .add(CALLBACK_SITE_OFFSET)
                .cast::<u32>()
                .read_unaligned()
        };
        if site != API_EXIT || a.finalize_claimed.swap(true, AcqRel) {
            return;
        }
        // SAFETY: our subscriber; CUPTI allows both calls from an API-exit callback.
        unsafe {
            (a.cupti.unsubscribe)(a.subscriber);
            (a.cupti.finalize)();
        }
        a.set_state(AgentState::Finalized);
        if a.handoff
            .compare_exchange(WAITING, FINALIZED, AcqRel, Relaxed)
            .is_err()
        {
            // The agent thread gave up waiting: clean up here. This
            // callback's own guard is the one allowed in flight.
            drop(g);
            detach::cleanup(0);
        }
    }));
}
