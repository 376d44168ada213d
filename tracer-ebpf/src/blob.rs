//! Blobs: bytes a call's entry copies from where its arguments point (an
//! NCCL unique id, a GEMM's stack arguments, `cublasLtMatmul`'s four
//! descriptors), sent with the call as a `BlobCallEvent`; kept in
//! `INFLIGHT_BLOB` from entry to return where the call has a return probe.

use aya_ebpf::{helpers::bpf_probe_read_user_buf, programs::ProbeContext};
use tracer_common::{
    BlobCallEvent, CallEvent, EventKind, LostReason, ProbeCookie, BLOB_FROM_STACK, BLOB_LEN,
    BLOB_LT_MATMUL, LT_ARGS, LT_PART,
};

use crate::{arg_at, count_lost, submit_flags, BLOB_TEMPLATE, EVENTS, INFLIGHT_BLOB};

/// Copies the cookie's blob into `dst`; returns the bytes read (0 when the
/// cookie asks for none, the pointer is NULL, or the read fails).
#[inline(always)]
pub(crate) fn read_blob(
    rsp: u64,
    e: &CallEvent,
    cookie: ProbeCookie,
    dst: &mut [u8; BLOB_LEN],
) -> u32 {
    let source = cookie.blob_source();
    if source == BLOB_LT_MATMUL {
        return read_lt_matmul(e, dst);
    }
    let src = if source == BLOB_FROM_STACK {
        rsp + 8
    } else {
        match arg_at(e, source) {
            Some(p) => p,
            None => return 0,
        }
    };
    if src == 0 {
        return 0; // a NULL argument: the call fails, nothing is lost
    }
    let len = cookie.blob_len();
    let Some(buf) = dst.get_mut(..len) else {
        return 0;
    };
    // SAFETY: a user-memory read of `len` (≤ BLOB_LEN) bytes; failure is handled.
    match unsafe { bpf_probe_read_user_buf(src as *const u8, buf) } {
        Ok(()) => len as u32,
        Err(_) => {
            count_lost(LostReason::ReadFailed);
            0
        }
    }
}

/// Copies the first [`LT_PART`] bytes of each of `cublasLtMatmul`'s four
/// descriptors (`LT_ARGS`) into `dst`, one after the other; 0 unless all
/// four were read.
#[inline(always)]
fn read_lt_matmul(e: &CallEvent, dst: &mut [u8; BLOB_LEN]) -> u32 {
    macro_rules! part {
        ($i:literal) => {{
            let src = match arg_at(e, LT_ARGS[$i]) {
                Some(p) if p != 0 => p,
                _ => return 0,
            };
            let Some(buf) = dst.get_mut($i * LT_PART..($i + 1) * LT_PART) else {
                return 0;
            };
            // SAFETY: a user-memory read of LT_PART bytes; failure is handled.
            if unsafe { bpf_probe_read_user_buf(src as *const u8, buf) }.is_err() {
                count_lost(LostReason::ReadFailed);
                return 0;
            }
        }};
    }
    part!(0);
    part!(1);
    part!(2);
    part!(3);
    (4 * LT_PART) as u32
}

/// Sends a call with the blob its entry stored under `key` (if it is still
/// there: the map is an LRU).
#[inline(always)]
pub(crate) fn send_blob(e: &CallEvent, key: u64) {
    let Some(mut entry) = EVENTS.reserve::<BlobCallEvent>(0) else {
        count_lost(LostReason::RingFull);
        return;
    };
    let out = entry.as_mut_ptr();
    // SAFETY: `out` points to a reserved record of the right size; every
    // field is written (blob bytes past `blob_len` are never read).
    unsafe {
        (*out).call = *e;
        (*out).call.kind = EventKind::BlobCall as u32;
        (*out)._pad = 0;
        match INFLIGHT_BLOB.get(&key) {
            Some(b) => {
                (*out).blob_len = b.len;
                (*out).blob = b.data;
            }
            None => {
                count_lost(LostReason::ReadFailed);
                (*out).blob_len = 0;
            }
        }
    }
    entry.submit(submit_flags());
}

/// A call with a return probe and a blob: its bytes wait for the return in
/// `INFLIGHT_BLOB`, keyed like the call (thread, API).
#[inline(always)]
pub(crate) fn keep_blob(ctx: &ProbeContext, cookie: ProbeCookie, e: &CallEvent) {
    if cookie.blob_source() == 0 {
        return;
    }
    let key = ((e.tid as u64) << 32) | e.api as u64;
    let Some(zero) = BLOB_TEMPLATE.get(0) else {
        return;
    };
    if INFLIGHT_BLOB.insert(&key, zero, 0).is_err() {
        return; // the return finds no blob and counts it
    }
    if let Some(b) = INFLIGHT_BLOB.get_ptr_mut(&key) {
        // SAFETY: the entry just inserted under this thread's key.
        let b = unsafe { &mut *b };
        // SAFETY: uprobe programs get the user registers.
        let rsp = unsafe { (*ctx.regs).rsp };
        b.len = read_blob(rsp, e, cookie, &mut b.data);
    }
}
