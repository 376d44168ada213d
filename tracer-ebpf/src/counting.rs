//! Calls counted in the kernel (cookie `COUNTED`): the start of each call
//! kept until its return (the session cookie where the kernel has uprobe
//! sessions, else the thread's in-flight slots), then added to the
//! process's counts: the call, the bucket of its latency and its time.
//! Under a session one call in `N` is timed (the cookie's `time_every`),
//! the others have no return probe.

use aya_ebpf::helpers::{
    bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_ktime_get_ns,
};
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, PerCpuHashMap};
use aya_ebpf::programs::ProbeContext;
use aya_ebpf::EbpfContext;
use tracer_common::{
    bucket_of, counted_key, Counted, LostReason, ProbeCookie, HISTOGRAM_SLOTS,
    KFUNC_SESSION_COOKIE, KFUNC_SESSION_IS_RETURN,
};

use crate::{add, bump, count_lost, inflight};

/// Calls counted, per process and API, on each CPU: userspace reads them
/// and deletes a process's once it is gone. Not LRU: a full map refuses a
/// new key, and the call is counted lost (`CountsFull`), never a total
/// silently dropped.
#[map]
static COUNTS: PerCpuHashMap<u64, Counted> =
    PerCpuHashMap::with_max_entries(4096, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// One zeroed [`Counted`], never written: what a new `COUNTS` entry starts as.
#[map]
static COUNTED_TEMPLATE: Array<Counted> = Array::with_max_entries(1, 0);

/// A counted call of `api` entered with stack pointer `sp` at `now`: only
/// its start is kept, in the thread's in-flight slots (`inflight`).
#[inline(always)]
pub fn enter(api: u32, sp: u64, now: u64) {
    if let Some(slot) = inflight::push(api, sp) {
        slot.api = api;
        slot.start_ns = now;
    }
}

/// The return of a counted call of `api` (stack pointer `sp`, in process
/// `tgid`) at `now`: its start is taken off the thread's in-flight slots
/// and the call added to the counts. A return without its start (the call
/// began before the probes, or its entry was refused and counted then)
/// adds nothing.
#[inline(always)]
pub fn leave(api: u32, sp: u64, tgid: u32, now: u64) {
    if let Some(e) = inflight::pop(api, sp) {
        count(tgid, api, now.wrapping_sub(e.start_ns));
    }
}

/// Adds a call of `api` in process `tgid` that took `dur_ns`: counted and
/// timed.
#[inline(always)]
pub fn count(tgid: u32, api: u32, dur_ns: u64) {
    if let Some(c) = counts_of(tgid, api) {
        // SAFETY: this CPU's value of a live entry; the add is atomic (a
        // preempted program on this CPU may be adding too).
        unsafe { bump(&raw mut (*c).calls) };
        add_time(c, dur_ns);
    }
}

/// The entry of a call of `api` in process `tgid` under a uprobe session:
/// counted, and whether it is to be timed: one call in `every`, at random
/// (so that no period in the program's calls lines up with the sample).
/// A call that is not timed has no return probe: it costs one trap.
#[inline(always)]
pub fn count_entry(tgid: u32, api: u32, every: u32) -> bool {
    let Some(c) = counts_of(tgid, api) else {
        return false;
    };
    // SAFETY: as in `count`.
    unsafe { bump(&raw mut (*c).calls) };
    // SAFETY: a helper without arguments.
    every <= 1 || unsafe { bpf_get_prandom_u32() } % every == 0
}

/// The return of a call of `api` in process `tgid` timed by its session:
/// its time added. Nothing where its counts have gone meanwhile (the
/// process was said gone and its entries removed).
#[inline(always)]
pub fn timed(tgid: u32, api: u32, dur_ns: u64) {
    if let Some(c) = COUNTS.get_ptr_mut(&counted_key(tgid, api)) {
        add_time(c, dur_ns);
    }
}

/// The counts of `api` in process `tgid` on this CPU, made if new; `None`,
/// and the call counted lost, when the map has no room.
#[inline(always)]
fn counts_of(tgid: u32, api: u32) -> Option<*mut Counted> {
    let key = counted_key(tgid, api);
    if let Some(c) = COUNTS.get_ptr_mut(&key) {
        return Some(c);
    }
    let zero = COUNTED_TEMPLATE.get(0)?;
    // BPF_NOEXIST: another CPU's program may have made it meanwhile.
    let _ = COUNTS.insert(&key, zero, aya_ebpf::bindings::BPF_NOEXIST as u64);
    let c = COUNTS.get_ptr_mut(&key);
    if c.is_none() {
        count_lost(LostReason::CountsFull);
    }
    c
}

#[inline(always)]
fn add_time(c: *mut Counted, dur_ns: u64) {
    let i = bucket_of(dur_ns);
    // SAFETY: this CPU's value of a live entry; the adds are atomic (a
    // preempted program on this CPU may be adding too).
    unsafe {
        add(&raw mut (*c).sum_ns, dur_ns);
        if i < HISTOGRAM_SLOTS {
            bump((&raw mut (*c).buckets).cast::<u64>().add(i));
        }
    }
}

/// Counted calls where the kernel has uprobe sessions (Linux 6.13+): one
/// program runs at a call's entry and, for a call it times (one in the
/// cookie's `time_every`), again at its return; the kernel keeps 8 bytes
/// for it in between (the session cookie), so the start time needs no
/// per-thread store. A call not timed has no return probe, so no second
/// trap. Loaded by userspace with the attach type
/// `BPF_TRACE_UPROBE_SESSION`, its placeholder calls patched into the
/// kfuncs (`tracer_common::KFUNC_SESSION_*`).
///
/// Written without `#[uprobe]`: aya's macro returns 0 whatever the
/// program returns, and the entry's 1 is what spares an untimed call its
/// return probe.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe")]
pub fn counted_session(ctx: *mut core::ffi::c_void) -> u32 {
    session(ProbeContext::new(ctx))
}

#[inline(always)]
fn session(ctx: ProbeContext) -> u32 {
    let is_return: u64;
    // SAFETY: a call of a kfunc without arguments (a placeholder patched at
    // load): r0 is the result, r1-r5 are the callee's to clobber.
    unsafe {
        core::arch::asm!("call {f}", f = const KFUNC_SESSION_IS_RETURN, lateout("r0") is_return, out("r1") _, out("r2") _, out("r3") _, out("r4") _, out("r5") _);
    }
    if is_return == 0 {
        // SAFETY: the helper reads the cookie of the link that ran us.
        let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        if !count_entry(tgid, cookie.api(), cookie.time_every()) {
            return 1; // 1: no return probe for this call
        }
        // SAFETY: as above; the session's own 8 bytes, then the clock as
        // late as can be.
        unsafe { *session_slot() = bpf_ktime_get_ns() };
        return 0; // 0: run this program again at the return
    }
    // SAFETY: a helper without arguments, as early as can be.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the helper reads the cookie of the link that ran us.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the session's own 8 bytes, written at the entry.
    let start = unsafe { *session_slot() };
    timed(tgid, cookie.api(), now.wrapping_sub(start));
    0
}

/// The session's 8 bytes (`bpf_session_cookie`).
#[inline(always)]
fn session_slot() -> *mut u64 {
    let slot: *mut u64;
    // SAFETY: as for `bpf_session_is_return` above.
    unsafe {
        core::arch::asm!("call {f}", f = const KFUNC_SESSION_COOKIE, lateout("r0") slot, out("r1") _, out("r2") _, out("r3") _, out("r4") _, out("r5") _);
    }
    slot
}
